r"""Completing binary images with a Bernoulli mixture, read as attention.

Given the observed pixels ``O`` of an image ``x`` (mask ``m``), Bayes' rule over the components is

.. math::

    p(z = k \mid x_O) = \operatorname{softmax}_k\Big(\log \pi_k + \sum_{d \in O}
        x_d \log\theta_{kd} + (1 - x_d) \log(1 - \theta_{kd})\Big)

and, as the pixels are independent given ``z``, the posterior predictive of any pixel is
``E[x_d | x_O] = sum_k p(z = k | x_O) theta_kd``. That is one scaled dot-product attention
``softmax(q K^T + b) V`` with

* query ``q = [m * x, m * (1 - x)]`` (2D,): the observed pixels, one-hot in value;
* keys ``K = [log theta, log(1 - theta)]`` (K, 2D): one key per component;
* bias ``b = log pi`` (K,) and scale 1;
* values ``V = theta`` (K, D).

Zeroing the unobserved pixels in the query is the same as restricting the keys to the observed
pixels, so one set of keys serves every mask. The attention weights are the posterior over
components, and the log-normaliser of the scores is the marginal likelihood of the observed
pixels, ``log p(x_O) = logsumexp_k(q K^T + b)``; hence
``log p(x_M | x_O) = log p(x) - log p(x_O)`` exactly.

``H`` mixtures over ``H`` disjoint groups of pixels, read out together, are exactly multi-head
attention: :func:`multi_head_parameters` writes the projections (each head's query projection
selects its group, its key and value projections hold its ``log theta`` and ``theta`` over one-hot
component tokens, the output projection scatters every head's prediction back to its pixels) and
:func:`multi_head_complete` runs ``multi_head_attention`` of ``zoo.attention`` with them.

Every function takes ``backend="numpy" | "torch" | "jax"`` and returns arrays of that backend.
"""

from __future__ import annotations

import importlib
from typing import NamedTuple

import numpy as np

from zoo.devices import for_torch

BACKENDS = ("numpy", "torch", "jax")


class Completion(NamedTuple):
    """What :func:`complete` returns (arrays of the chosen backend).

    Attributes
    ----------
    mean : array, shape (..., D)
        ``E[x_d | x_O]`` for the unobserved pixels; for the observed ones, the observed value
        (``fill_observed=True``) or the reconstruction ``sum_k p(z = k | x_O) theta_kd``.
    weights : array, shape (..., K)
        The posterior over components ``p(z = k | x_O)`` (the attention weights). For
        :func:`multi_head_complete`, shape (..., H, K): one posterior per group.
    """

    mean: object
    weights: object


class _Namespace:
    """The few array operations the completion needs, per backend."""

    def __init__(self, name, dtype):
        if name not in BACKENDS:
            raise ValueError(f"expected backend one of {list(BACKENDS)}; got {name!r}.")
        self.name = name
        self.attention = importlib.import_module(f"zoo.attention.{name}_attention")
        if name == "numpy":
            from scipy.special import logsumexp

            self.xp, self.dtype, self._lse = np, np.dtype(dtype or "float64"), logsumexp
        elif name == "torch":
            import torch

            self.xp, self.torch = torch, torch
            dtype = dtype or "float64"
            self.dtype = dtype if isinstance(dtype, torch.dtype) else getattr(torch, str(dtype))
        else:
            import jax.numpy as jnp
            from jax.scipy.special import logsumexp

            self.xp, self._lse = jnp, logsumexp
            self.dtype = jnp.dtype(dtype) if dtype else jnp.asarray(0.0).dtype  # x64 mode or not
        # The keys and the bias are logs of probabilities: an integer dtype would truncate them.
        if name == "torch":
            floating = self.dtype.is_floating_point
        else:
            floating = self.xp.issubdtype(self.dtype, self.xp.floating)
        if not floating:
            raise ValueError(
                f"expected a floating-point dtype such as 'float32' or 'float64'; got {dtype!r}. "
                "Pass a float dtype, or dtype=None for the default."
            )

    def asarray(self, value, dtype=None, like=None):
        dtype = self.dtype if dtype is None else dtype
        if self.name == "torch":
            device = like.device if like is not None else None
            if isinstance(value, self.torch.Tensor):
                return value.to(dtype=dtype, device=device or value.device)
            return self.torch.as_tensor(for_torch(value), dtype=dtype, device=device)
        return self.xp.asarray(value, dtype=dtype)

    def wide(self, value, like=None):
        """``value`` as a float64 array: of the backend where it holds float64 (on ``like``'s
        device), else of numpy (JAX out of 64-bit mode; an array JAX already holds stays as it
        is, in the working dtype)."""
        if self.name == "torch":
            return self.asarray(value, dtype=self.torch.float64, like=like)
        if self.name == "jax":
            import jax

            if jax.dtypes.canonicalize_dtype(np.float64) == np.float64:
                return self.xp.asarray(value, dtype=np.float64)
            if isinstance(value, jax.Array):  # traced under jax.jit, or float32 at most anyway
                return self.xp.asarray(value, dtype=self.dtype)
            return np.asarray(value, dtype=np.float64)
        return np.asarray(value, dtype=np.promote_types(np.float64, self.dtype))

    def module_of(self, a):
        """The array module of ``a``: numpy for the arrays :meth:`wide` leaves to numpy."""
        return np if isinstance(a, np.ndarray) else self.xp

    def bool_array(self, value, like=None):
        """``value`` as an array of its own dtype (checked to be boolean by the caller)."""
        if self.name == "torch":
            device = like.device if like is not None else None
            if isinstance(value, self.torch.Tensor):
                return value.to(device=device or value.device)
            return self.torch.as_tensor(for_torch(value), device=device)
        return self.xp.asarray(value)

    def is_bool(self, value) -> bool:
        if self.name == "torch":
            return value.dtype == self.torch.bool
        return value.dtype == bool

    def concat(self, arrays):
        if self.name == "torch":
            return self.torch.cat(arrays, dim=-1)
        return self.xp.concatenate(arrays, axis=-1)

    def logsumexp(self, a):
        if self.name == "torch":
            return self.torch.logsumexp(a, dim=-1)
        return self._lse(a, axis=-1)

    def any(self, a):
        """``bool(any(a))``, or ``False`` when ``a`` is abstract (inside ``jax.jit``)."""
        if self.name == "jax":
            import jax

            if isinstance(a, jax.core.Tracer):
                return False
        return bool(a.any())


def _mixture(params, ns, like=None):
    """``log weights`` (K,), ``log probs``, ``log(1 - probs)`` and ``probs`` (K, D), validated."""
    try:
        w, p = params["weights"], params["probs"]
    except (KeyError, TypeError):
        raise ValueError(
            "expected params with 'weights' (K,) and 'probs' (K, D), as FitResult.params of a "
            f"bernoulli_mixture fit; got {type(params).__name__}"
            + (f" with keys {sorted(params)}" if hasattr(params, "keys") else "")
            + "."
        ) from None
    # The logs are taken in float64 and then cast: a float32 cast of the probabilities first
    # rounds 1 - 1e-6 to 1 - 1.013e-6, and log(1 - p) is then off by 0.013.
    w, p = ns.wide(w, like=like), ns.wide(p, like=like)
    if w.ndim != 1 or p.ndim != 2 or p.shape[0] != w.shape[0]:
        raise ValueError(
            f"expected weights of shape (K,) and probs of shape (K, D); got weights "
            f"{tuple(w.shape)} and probs {tuple(p.shape)}."
        )
    # Each test is written as "not (valid)": every comparison with NaN is False, so NaN fails it.
    bad_probs = ~((p > 0) & (p < 1))
    bad_weights = ~(w >= 0)
    bad_total = ~(abs(w.sum() - 1) <= 1e-4)
    if ns.any(bad_probs) or ns.any(bad_weights) or ns.any(bad_total):
        raise ValueError(
            "expected probs strictly inside (0, 1) and weights that are non-negative and sum to "
            "1 (a MAP fit keeps them so); got probs on the boundary or NaN, or other weights."
        )
    xp = ns.module_of(p)
    with np.errstate(divide="ignore"):  # a component of weight 0: log 0 = -inf, as intended
        logs = xp.log(w), xp.log(p), xp.log1p(-p)
    return tuple(ns.asarray(a, like=like) for a in (*logs, p))


def _query(x, observed_mask, dim, ns, require_all_binary):
    """The query ``[m * x, m * (1 - x)]`` (..., 2D), ``m * x`` (..., D) and the mask."""
    x = ns.asarray(x)
    if x.ndim < 1 or x.shape[-1] != dim:
        raise ValueError(f"expected x of shape (..., D) with D = {dim}; got {tuple(x.shape)}.")
    mask = ns.bool_array(observed_mask, like=x)
    if not ns.is_bool(mask):
        raise ValueError(
            f"expected a boolean observed_mask (True = observed); got dtype {mask.dtype}."
        )
    try:
        shape = np.broadcast_shapes(tuple(mask.shape), tuple(x.shape))
    except ValueError:
        shape = None
    if shape != tuple(x.shape):
        raise ValueError(
            f"expected observed_mask broadcastable to x's shape {tuple(x.shape)}; got "
            f"{tuple(mask.shape)}."
        )
    checked = (x != 0) & (x != 1)
    if not require_all_binary:
        checked = checked & mask
    if ns.any(checked):
        where = "every pixel" if require_all_binary else "every observed pixel"
        raise ValueError(f"expected x binary (0 or 1) at {where}; got other values there.")
    zero = ns.asarray(0.0, like=x)
    xo = ns.xp.where(mask, x, zero)  # NaN placeholders at unobserved pixels become 0
    return ns.concat([xo, ns.xp.where(mask, 1.0 - xo, zero)]), xo, mask


def attention_inputs(params, x, observed_mask, backend="numpy", dtype=None):
    r"""The query, keys, bias and values of the mixture's posterior predictive as attention.

    Parameters
    ----------
    params : dict
        ``weights`` (K,) and ``probs`` (K, D), e.g. ``FitResult.params``.
    x : array_like, shape (..., D)
        Binary images; entries at unobserved pixels are ignored (they may be NaN).
    observed_mask : array_like of bool, broadcastable to (..., D)
        ``True`` where a pixel is observed.
    backend : {"numpy", "torch", "jax"}
    dtype : str, optional
        A floating-point dtype; default float64 (JAX: float32 unless 64-bit mode is on).

    Returns
    -------
    query : array, shape (..., 2D)
        ``[m * x, m * (1 - x)]``.
    keys : array, shape (K, 2D)
        ``[log probs, log(1 - probs)]``.
    bias : array, shape (K,)
        ``log weights``.
    values : array, shape (K, D)
        ``probs``.

    ``softmax(query @ keys.T + bias)`` (scale 1) is ``p(z | x_O)``, and its log-normaliser is
    ``log p(x_O)``.
    """
    ns = _Namespace(backend, dtype)
    return _attention_inputs(params, x, observed_mask, ns, require_all_binary=False)[:4]


def _attention_inputs(params, x, observed_mask, ns, require_all_binary):
    x_like = x if ns.name == "torch" and hasattr(x, "device") else None
    log_w, log_p, log_q, p = _mixture(params, ns, like=x_like)
    query, xo, mask = _query(x, observed_mask, p.shape[-1], ns, require_all_binary)
    return query, ns.concat([log_p, log_q]), log_w, p, xo, mask


def complete(params, x, observed_mask, backend="numpy", fill_observed=True, dtype=None):
    r"""The posterior predictive ``E[x_d | x_O]`` of every pixel and ``p(z | x_O)``, by attention.

    Computes ``softmax(q K^T + log pi) V`` with :func:`attention_inputs` through
    ``zoo.attention.<backend>_attention.scaled_dot_product_attention`` (scale 1, one query row per
    image, one key per component).

    Parameters
    ----------
    params : dict
        ``weights`` (K,) and ``probs`` (K, D), e.g. ``FitResult.params``.
    x : array_like, shape (..., D)
        Binary images (float, int, uint or bool); values at unobserved pixels are ignored.
    observed_mask : array_like of bool, broadcastable to (..., D)
        ``True`` where a pixel is observed (one (D,) mask may serve every image).
    backend : {"numpy", "torch", "jax"}
        Array library of the computation and of the results. Torch tensors stay on their device.
    fill_observed : bool
        If ``True`` (default) observed pixels are returned as observed; if ``False`` every pixel
        gets the mixture's reconstruction ``sum_k p(z = k | x_O) theta_kd`` (for an observed
        pixel that is the chance that another draw from the same component has it on, not
        ``E[x_d | x_O] = x_d``).
    dtype : str, optional
        A floating-point dtype; default float64 (JAX: float32 unless 64-bit mode is on).

    Returns
    -------
    Completion
        ``mean`` (..., D) and ``weights`` (..., K).

    Raises
    ------
    ValueError
        For shapes that do not fit, non-binary observed pixels, probabilities outside (0, 1), a
        non-boolean mask, or a dtype that is not floating-point.
    """
    ns = _Namespace(backend, dtype)
    query, keys, bias, values, xo, mask = _attention_inputs(
        params, x, observed_mask, ns, require_all_binary=False
    )
    # Every image is one query row against the same K keys: one (N, 2D) x (2D, K) product
    # rather than N vector products.
    lead = tuple(query.shape[:-1])
    out, weights = ns.attention.scaled_dot_product_attention(
        query.reshape(-1, query.shape[-1]), keys, values, bias=bias, scale=1.0, return_weights=True
    )
    mean, weights = (
        out.reshape(lead + (values.shape[-1],)),
        weights.reshape(lead + (keys.shape[0],)),
    )
    if fill_observed:
        mean = ns.xp.where(mask, xo, mean)
    return Completion(mean, weights)


def log_prob_observed(params, x, observed_mask=None, backend="numpy", dtype=None):
    """``log p(x_O)`` per image, in nats: the log-normaliser of the attention scores.

    ``observed_mask=None`` observes every pixel (the full-image log-likelihood). Arguments as in
    :func:`complete`; returns an array of shape ``x.shape[:-1]``.
    """
    ns = _Namespace(backend, dtype)
    if observed_mask is None:
        observed_mask = np.ones(np.shape(x)[-1:], dtype=bool)
    query, keys, bias = _attention_inputs(params, x, observed_mask, ns, False)[:3]
    return ns.logsumexp(query @ keys.T + bias)


def log_prob_missing(params, x, observed_mask, backend="numpy", dtype=None):
    """Exact ``log p(x_M | x_O)`` per image, in nats, ``M`` the unobserved pixels.

    ``log p(x) - log p(x_O)``, both log-normalisers of attention scores (:func:`log_prob_observed`);
    ``x`` must hold the (binary) values of the missing pixels being scored. Arguments as in
    :func:`complete`; returns an array of shape ``x.shape[:-1]`` (0 where nothing is missing).
    """
    ns = _Namespace(backend, dtype)
    query, keys, bias = _attention_inputs(params, x, observed_mask, ns, True)[:3]
    d = keys.shape[-1] // 2
    query_all = _query(x, np.ones(d, dtype=bool), d, ns, True)[0]
    return ns.logsumexp(query_all @ keys.T + bias) - ns.logsumexp(query @ keys.T + bias)


def _check_groups(groups, dim=None):
    groups = np.asarray(groups)
    if groups.ndim != 2 or groups.dtype.kind not in "iu":
        raise ValueError(
            f"expected groups an (H, G) integer array of pixel indices; got shape {groups.shape} "
            f"and dtype {groups.dtype}."
        )
    dim = groups.size if dim is None else dim
    if sorted(groups.ravel().tolist()) != list(range(dim)):
        raise ValueError(
            f"expected groups to partition the pixels 0..{dim - 1} (each exactly once); got "
            f"{groups.size} indices covering {len(np.unique(groups))} distinct pixels."
        )
    return groups


def _numpy_mixtures(params):
    """``weights`` and ``probs`` of ``params`` as float64 numpy arrays."""
    w, p = params["weights"], params["probs"]
    # np.asarray of such a tensor fails with torch's own advice; the gradient could not survive
    # the numpy projections anyway, so say what is accepted instead.
    if any(getattr(a, "requires_grad", False) for a in (w, p)):
        raise TypeError(
            "expected weights and probs as NumPy arrays or tensors that do not require grad (the "
            "multi-head projections are built in NumPy, without gradients); got a tensor with "
            "requires_grad=True. Pass detached tensors, or differentiate complete() group by group."
        )
    return np.asarray(w, dtype=float), np.asarray(p, dtype=float)


def multi_head_parameters(params, groups):
    r"""The multi-head attention projections of ``H`` mixtures over ``H`` pixel groups (numpy).

    Parameters
    ----------
    params : dict
        ``weights`` (H, K) and ``probs`` (H, K, G): mixture ``h`` models the pixels
        ``groups[h]``.
    groups : array_like of int, shape (H, G)
        A partition of the ``D = H G`` pixels.

    Returns
    -------
    dict
        ``q_weight`` (2D, 2D), ``k_weight`` (2D, K), ``v_weight`` (2D, K), ``out_weight``
        (D, 2D) for ``multi_head_attention(..., num_heads=H, scale=1.0)`` with the query
        ``[m * x, m * (1 - x)]``, key and value tokens ``eye(K)``, and bias ``log weights[:, None,
        :]`` (H, 1, K). Head ``h`` has ``2G`` features: its query projection picks the group's
        ``m * x`` and ``m * (1 - x)``, its key projection maps token ``k`` to ``[log probs_hk,
        log(1 - probs_hk)]``, its value projection to ``[probs_hk, 0]``, and the output
        projection writes the first ``G`` features of head ``h`` to pixels ``groups[h]``.

    Raises
    ------
    TypeError
        For weights or probs held in a tensor that requires grad (the projections are NumPy
        arrays, which carry no gradient): pass detached tensors.
    ValueError
        For groups that do not partition the pixels, shapes that do not fit, probabilities
        outside (0, 1), or weights that are not a distribution over each head's components.
    """
    w, p = _numpy_mixtures(params)
    groups = _check_groups(groups)
    H, G = groups.shape
    if w.ndim != 2 or p.shape != (H, w.shape[1], G):
        raise ValueError(
            f"expected weights (H, K) and probs (H, K, G) with (H, G) = {(H, G)} from groups; "
            f"got weights {w.shape} and probs {p.shape}."
        )
    # "not (valid)", as in _mixture: NaN fails every comparison, so it is rejected too.
    probs_inside = ((p > 0) & (p < 1)).all()
    if not probs_inside or not (w >= 0).all() or not np.allclose(w.sum(1), 1.0):
        raise ValueError(
            "expected probs strictly inside (0, 1) and weights that are non-negative and sum to "
            "1 over each head's components; got probs on the boundary or NaN, or other weights."
        )
    K, D = w.shape[1], H * G
    q_w = np.zeros((2 * D, 2 * D))
    k_w = np.zeros((2 * D, K))
    v_w = np.zeros((2 * D, K))
    o_w = np.zeros((D, 2 * D))
    for h in range(H):
        rows = h * 2 * G + np.arange(G)  # the head's "x" features; rows + G its "1 - x" ones
        q_w[rows, groups[h]] = 1.0
        q_w[rows + G, D + groups[h]] = 1.0
        k_w[rows] = np.log(p[h]).T
        k_w[rows + G] = np.log1p(-p[h]).T
        v_w[rows] = p[h].T
        o_w[groups[h], rows] = 1.0
    return {"q_weight": q_w, "k_weight": k_w, "v_weight": v_w, "out_weight": o_w}


def multi_head_complete(
    params, groups, x, observed_mask, backend="numpy", fill_observed=True, dtype=None
):
    r"""Complete images under ``H`` independent mixtures over ``H`` pixel groups, as one
    multi-head attention.

    The model is ``p(x) = prod_h p_h(x[groups[h]])``, ``p_h`` a Bernoulli mixture; every head
    attends over its own mixture's components with its own group's pixels, and the output
    projection assembles the image. Equal to :func:`complete` run group by group (tested).

    Parameters
    ----------
    params : dict
        ``weights`` (H, K) and ``probs`` (H, K, G).
    groups : array_like of int, shape (H, G)
        A partition of the pixels ``0..D-1`` (``D = H G``).
    x, observed_mask, backend, fill_observed, dtype :
        As in :func:`complete`, with ``D`` pixels.

    Returns
    -------
    Completion
        ``mean`` (..., D) and ``weights`` (..., H, K), head ``h``'s posterior over its components.

    Raises
    ------
    TypeError
        For weights or probs held in a tensor that requires grad: unlike :func:`complete`, this
        builds its projections in NumPy (:func:`multi_head_parameters`), so no gradient reaches
        the parameters. Pass detached tensors, or run :func:`complete` group by group.
    ValueError
        As :func:`complete` and :func:`multi_head_parameters` do.
    """
    ns = _Namespace(backend, dtype)
    mha = multi_head_parameters(params, groups)
    H, K = np.asarray(params["weights"]).shape
    query, xo, mask = _query(x, observed_mask, mha["out_weight"].shape[0], ns, False)
    mha = {k: ns.asarray(v, like=query) for k, v in mha.items()}
    tokens = ns.asarray(np.eye(K), like=query)  # one token per component
    log_w = ns.xp.log(ns.asarray(params["weights"], like=query))
    out, weights = ns.attention.multi_head_attention(
        mha,
        query[..., None, :],
        tokens,
        tokens,
        num_heads=H,
        bias=log_w[:, None, :],
        scale=1.0,
        return_weights=True,
    )
    mean, weights = out[..., 0, :], weights[..., 0, :]
    if fill_observed:
        mean = ns.xp.where(mask, xo, mean)
    return Completion(mean, weights)
