"""The exact posterior, the attention posterior and their distance, in numpy.

``config`` is a :class:`zoo.exchangeable.ExchangeableConfig` (numpy arrays). ``params`` is a dict
of the network's parameters under the zoo's names (a fit's ``raw_params``, from either backend, or
:func:`ideal_params`). The attention runs through :mod:`zoo.attention.numpy_attention`, the
reference twin of the torch and JAX code the Pyro and NumPyro guides run.
"""

from __future__ import annotations

import numpy as np

from zoo.attention import numpy_attention
from zoo.exchangeable.generate import simulate

PREFIX = "posterior."


def _check_tokens(x, dim: int, name: str = "x") -> np.ndarray:
    x = np.asarray(x, dtype=float)
    if x.ndim not in (2, 3):
        raise ValueError(
            f"{name} must have shape (N, D) (one sequence) or (S, N, D) (S sequences of N tokens); "
            f"got shape {x.shape}."
        )
    if x.shape[-1] != dim:
        raise ValueError(
            f"{name} must have D = {dim} features per token (the means' dimension); got shape "
            f"{x.shape}."
        )
    if x.shape[-2] < 1:
        raise ValueError(f"{name} must have at least one token; got shape {x.shape}.")
    return x


def _token_mask(lengths, x):
    """``(valid (..., N) bool, count (...,))`` for padded sequences, or ``(None, N)``."""
    n = x.shape[-2]
    if lengths is None:
        return None, n
    lengths = np.asarray(lengths)
    if lengths.shape != x.shape[:-2] or lengths.dtype.kind not in "iu":
        raise ValueError(
            f"lengths must be integers of shape {x.shape[:-2]} (one per sequence of x "
            f"{x.shape}); got {lengths.dtype} of shape {lengths.shape}."
        )
    if lengths.size and (lengths.min() < 1 or lengths.max() > n):
        raise ValueError(
            f"lengths must lie in [1, {n}] (x has N = {n} token slots); got values in "
            f"[{lengths.min()}, {lengths.max()}]."
        )
    return np.arange(n) < lengths[..., None], lengths


def _log_softmax(logits) -> np.ndarray:
    """``log softmax`` over the last axis, accurate for the most probable entry too.

    ``logsumexp`` computes ``log(1 + tiny)`` for a nearly one-hot row, which rounds ``tiny``
    (e.g. 1e-30) away; summing the other entries apart and taking ``log1p`` keeps it, so distances
    between nearly one-hot posteriors are accurate to relative, not absolute, rounding error.
    """
    logits = np.asarray(logits, dtype=float)
    shifted = logits - logits.max(axis=-1, keepdims=True)
    top = np.arange(logits.shape[-1]) == np.argmax(logits, axis=-1)[..., None]
    rest = np.where(top, 0.0, np.exp(shifted)).sum(-1, keepdims=True)
    return shifted - np.log1p(rest)


def exact_log_posterior(x, means, scale, weights=None, lengths=None) -> np.ndarray:
    r"""``log P(z = k | X)`` by Bayes' rule, in closed form.

    ``log P(z = k | X) = log pi_k + sum_i x_i . mu_k / s^2 - N |mu_k|^2 / (2 s^2) - log Z(X)``
    (the terms of the Gaussian log-density that do not depend on ``k`` cancel).

    Parameters
    ----------
    x : array (N, D) or (S, N, D)
        One sequence or ``S`` sequences of ``N`` tokens.
    means : array (K, D)
    scale : float
        The tokens' standard deviation.
    weights : array (K,), optional
        Prior probabilities, finite and non-negative (normalised here, so they need not sum to
        1); default uniform.
    lengths : int array (S,), optional
        Tokens per sequence; the slots after them are padding and ignored.

    Returns
    -------
    array (K,) or (S, K)

    Raises
    ------
    ValueError
        For shapes that do not fit, means that are not finite, weights that are negative, not
        finite or all zero, or a scale that is not finite and positive.
    """
    means = np.asarray(means, dtype=float)
    if means.ndim != 2:
        raise ValueError(f"means must have shape (K, D); got shape {means.shape}.")
    if not np.isfinite(means).all():
        bad = int((~np.isfinite(means)).sum())
        raise ValueError(
            f"means must be finite; got {bad} entries that are NaN or inf in means of shape "
            f"{means.shape}."
        )
    x = _check_tokens(x, means.shape[1])
    K = means.shape[0]
    weights = np.ones(K) if weights is None else np.asarray(weights, dtype=float)
    if weights.shape != (K,):
        raise ValueError(f"weights must have shape ({K},); got shape {weights.shape}.")
    # "not (valid)": NaN fails every comparison. Zero is a valid prior mass (log 0 = -inf rules
    # the component out), but all zeros leave nothing to normalise.
    if not ((weights >= 0) & (weights < np.inf)).all() or not weights.sum() > 0:
        raise ValueError(
            f"weights must be finite, non-negative and not all zero (they are normalised); got "
            f"{weights!r}."
        )
    with np.errstate(divide="ignore"):
        log_prior = np.log(weights)
    if not 0 < float(scale) < np.inf:
        raise ValueError(f"scale must be a float in the range (0, inf); got {scale}.")
    valid, n = _token_mask(lengths, x)
    total = x.sum(-2) if valid is None else np.where(valid[..., None], x, 0.0).sum(-2)
    s2 = float(scale) ** 2
    logits = (
        log_prior
        + total @ means.T / s2  # sum_i x_i . mu_k / s^2
        - np.multiply.outer(n, (means**2).sum(-1)) / (2 * s2)  # N |mu_k|^2 / (2 s^2)
    )
    return _log_softmax(logits)


def exact_posterior(x, means, scale, weights=None, lengths=None) -> np.ndarray:
    """``P(z = k | X)``: :func:`exact_log_posterior`, exponentiated."""
    return np.exp(exact_log_posterior(x, means, scale, weights, lengths))


def param_shapes(config) -> dict[str, tuple[int, ...]]:
    """The network's parameter names and shapes (torch's ``(out, in)`` layout)."""
    E, D, K = config.embed_dim, config.dim, config.K
    attn = PREFIX + "attention."
    return {
        attn + "q_weight": (E, E),
        attn + "q_bias": (E,),
        attn + "k_weight": (E, D),
        attn + "k_bias": (E,),
        attn + "v_weight": (E, D),
        attn + "v_bias": (E,),
        attn + "out_weight": (K, E),
        attn + "out_bias": (K,),
        PREFIX + "query": (1, E),
        PREFIX + "prior_logits": (K,),
    }


def check_params(params, config) -> dict[str, np.ndarray]:
    """The network's parameters from ``params`` (other keys ignored), checked against ``config``."""
    expected = param_shapes(config)
    got = {k: tuple(np.shape(params[k])) for k in expected if k in params}
    if got != expected:
        raise ValueError(
            f"The attention parameters given do not fit this architecture (K={config.K}, "
            f"D={config.dim}, embed_dim={config.embed_dim}): expected shapes {expected}; got "
            f"{got}."
        )
    return {k: np.asarray(params[k], dtype=float) for k in expected}


def attention_logits(
    params,
    x,
    config,
    *,
    lengths=None,
    leave_one_out: bool = False,
    readout_length=None,
    return_weights: bool = False,
):
    """The attention posterior's logits, ``n * attention(query, X, X) + prior_logits``.

    Parameters
    ----------
    params : dict
        The network (``param_shapes``), e.g. a fit's ``raw_params`` or :func:`ideal_params`.
    x : array (N, D) or (S, N, D)
    config : ExchangeableConfig
    lengths : int array (S,), optional
        Tokens per sequence: the padding slots after them are masked out of the keys (their
        values, NaN or inf included, are ignored) and ``n`` is the sequence's own length.
    leave_one_out : bool
        One query per token ``j`` attending to the other tokens (key ``j`` masked): the logits of
        ``q(z | X_{-j})``, shape (..., N, K), with ``n = N - 1``. Needs ``N >= 2``.
    readout_length : int, optional
        Multiply by this fixed ``n`` instead of the number of tokens attended: a readout that
        ignores ``N`` (the tempered posterior of the module docstring). An inverse temperature,
        so a finite number > 0 (fractional values temper between lengths).
    return_weights : bool
        Also return the attention weights, (..., H, Lq, N).

    Returns
    -------
    array (..., K), or (..., N, K) with ``leave_one_out``

    Raises
    ------
    ValueError
        For parameters, tokens or lengths that do not fit, or a ``readout_length`` that is not a
        finite number > 0.
    """
    # n <= 0 would flatten (0) or invert (< 0) the posterior rather than temper it.
    if readout_length is not None and not 0 < float(readout_length) < np.inf:
        raise ValueError(
            "readout_length must be a number of tokens: finite and > 0 (or None for each "
            f"sequence's own length); got {readout_length!r}."
        )
    p = check_params(params, config)
    x = _check_tokens(x, config.dim)
    valid, n = _token_mask(lengths, x)
    if valid is not None:
        # A masked key gets weight 0, but 0 * NaN (or inf) in its value is still NaN: padding is
        # replaced by zeros rather than trusted to vanish in the weighted sum.
        x = np.where(valid[..., None], x, 0.0)
    head = PREFIX + "attention."
    attn = {k[len(head) :]: v for k, v in p.items() if k.startswith(head)}
    query = p[PREFIX + "query"]
    mask = None if valid is None else valid[..., None, None, :]  # (..., heads, queries, keys)
    if leave_one_out:
        if np.min(n) < 2:
            raise ValueError(
                "leave_one_out needs at least 2 tokens per sequence; got a sequence of "
                f"{np.min(n)} (x of shape {x.shape})."
            )
        others = ~np.eye(x.shape[-2], dtype=bool)
        mask = others if mask is None else mask & others
        query, n = np.repeat(query, x.shape[-2], axis=0), np.asarray(n) - 1
    out, weights = numpy_attention.multi_head_attention(
        attn, query, x, x, num_heads=config.num_heads, mask=mask, return_weights=True
    )
    scale = (
        np.asarray(n, dtype=float)[..., None, None]
        if readout_length is None
        else float(readout_length)
    )
    logits = scale * out + p[PREFIX + "prior_logits"]
    if not leave_one_out:  # the one query's row
        logits = logits[..., 0, :]
    return (logits, weights) if return_weights else logits


def attention_log_posterior(params, x, config, **options) -> np.ndarray:
    """``log q(z = k | X)``: the log-softmax of :func:`attention_logits` (same options)."""
    return _log_softmax(attention_logits(params, x, config, **options))


def attention_posterior(params, x, config, **options) -> np.ndarray:
    """``q(z = k | X)``: the softmax of :func:`attention_logits` (same options)."""
    return np.exp(attention_log_posterior(params, x, config, **options))


def attention_weights(params, x, config, lengths=None) -> np.ndarray:
    """The learned query's attention weights over the tokens, (..., H, N) (zero on padding)."""
    return attention_logits(params, x, config, lengths=lengths, return_weights=True)[1][..., 0, :]


def ideal_params(config) -> dict[str, np.ndarray]:
    """Attention parameters with which ``q(z | X) = P(z | X)`` exactly, for every ``N``.

    Uniform attention (query and key projections zero: every token weighs ``1/N``), values and
    output projection computing each token's evidence ``x . mu_k / s^2 - |mu_k|^2 / (2 s^2)``
    (so the pooled output is its average and ``N`` times it the sum), ``prior_logits = log pi``.
    With ``embed_dim >= D`` the values are the tokens themselves and the output projection holds
    ``means / s^2``; with ``K <= embed_dim < D`` the value projection holds ``means / s^2``.
    """
    E, D, K = config.embed_dim, config.dim, config.K
    if E < min(K, D):
        raise ValueError(
            f"ideal_params needs embed_dim >= min(K, D) = {min(K, D)} to carry the evidence of "
            f"every component; got embed_dim={E}."
        )
    means = np.asarray(config.means, dtype=float)
    s2 = float(config.scale) ** 2
    evidence_weight, evidence_bias = means / s2, -(means**2).sum(-1) / (2 * s2)  # (K, D), (K,)
    v_weight, v_bias = np.zeros((E, D)), np.zeros(E)
    out_weight, out_bias = np.zeros((K, E)), np.zeros(K)
    if E >= D:
        v_weight[:D] = np.eye(D)
        out_weight[:, :D], out_bias[:] = evidence_weight, evidence_bias
    else:
        v_weight[:K], v_bias[:K] = evidence_weight, evidence_bias
        out_weight[:, :K] = np.eye(K)
    attn = PREFIX + "attention."
    return {
        attn + "q_weight": np.zeros((E, E)),
        attn + "q_bias": np.zeros(E),
        attn + "k_weight": np.zeros((E, D)),
        attn + "k_bias": np.zeros(E),
        attn + "v_weight": v_weight,
        attn + "v_bias": v_bias,
        attn + "out_weight": out_weight,
        attn + "out_bias": out_bias,
        PREFIX + "query": np.zeros((1, E)),
        PREFIX + "prior_logits": np.log(np.asarray(config.weights, dtype=float)),
    }


def _check_pair(p, q, what):
    p, q = np.asarray(p, dtype=float), np.asarray(q, dtype=float)
    if p.shape != q.shape or p.ndim < 1:
        raise ValueError(
            f"{what} compares two arrays of the same shape (..., K); got {p.shape} and {q.shape}."
        )
    return p, q


def total_variation(p, q) -> np.ndarray:
    """``TV(p, q) = sum_k |p_k - q_k| / 2`` over the last axis, accurate for nearly one-hot rows.

    The difference at ``p``'s most probable entry is taken as minus the sum of the others (both
    rows sum to one), so it is not lost to rounding next to 1.
    """
    p, q = _check_pair(p, q, "total_variation")
    top = np.arange(p.shape[-1]) == np.argmax(p, axis=-1)[..., None]
    diff = np.where(top, 0.0, p - q)
    return 0.5 * (np.abs(diff).sum(-1) + np.abs(diff.sum(-1)))


def kl_divergence(log_p, log_q) -> np.ndarray:
    """``KL(p || q) = sum_k p_k (log p_k - log q_k)`` from log-probabilities (last axis).

    A component that ``p`` gives no mass adds nothing (``0 log 0 = 0``), whatever ``q`` gives it.
    """
    log_p, log_q = _check_pair(log_p, log_q, "kl_divergence")
    # Off p's support, 0 * (-inf - log q) would be NaN: both logs are replaced by 0 there.
    support = ~np.isneginf(log_p)
    diff = np.where(support, log_p, 0.0) - np.where(support, log_q, 0.0)
    return np.maximum((np.exp(log_p) * diff).sum(-1), 0.0)


def posterior_error(
    params, config, lengths, num_sequences: int = 2000, seed: int = 0, readout_length=None
) -> dict[str, np.ndarray]:
    """Distance of the attention posterior from the exact one on fresh sequences, per length.

    For each ``N`` in ``lengths``, draws ``num_sequences`` sequences from the model (seeded by
    ``(seed, N)``) and averages ``TV(P(. | X), q(. | X))`` and ``KL(P || q)`` over them.
    ``readout_length`` is passed to :func:`attention_logits` (a readout that ignores ``N``).

    Returns ``{"length", "tv", "tv_sem", "kl"}``, arrays over ``lengths`` (``tv_sem``: standard
    error of the mean TV).
    """
    lengths = np.asarray(lengths, dtype=int)
    if lengths.ndim != 1 or len(lengths) == 0 or lengths.min() < 1:
        raise ValueError(f"lengths must be a non-empty list of ints >= 1; got {lengths!r}.")
    tv, tv_sem, kl = [], [], []
    for n in lengths:
        x = simulate(config, np.random.default_rng([seed, int(n)]), num_sequences, int(n))["x"]
        log_p = exact_log_posterior(x, config.means, config.scale, config.weights)
        log_q = attention_log_posterior(params, x, config, readout_length=readout_length)
        d = total_variation(np.exp(log_p), np.exp(log_q))
        tv.append(d.mean())
        tv_sem.append(d.std(ddof=1) / np.sqrt(len(d)) if len(d) > 1 else np.nan)
        kl.append(kl_divergence(log_p, log_q).mean())
    return {"length": lengths, "tv": np.array(tv), "tv_sem": np.array(tv_sem), "kl": np.array(kl)}
