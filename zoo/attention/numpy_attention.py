"""Scaled dot-product and multi-head attention in numpy: the reference twin of
``torch_attention`` and ``jax_attention`` (same names, arguments and shapes), for code that must run
without either library."""

from __future__ import annotations

import numpy as np

from zoo.array_namespace import NumpyOps
from zoo.attention import _algebra

__all__ = [
    "cross_attention",
    "multi_head_attention",
    "scaled_dot_product_attention",
    "self_attention",
]

_XP = NumpyOps()


def scaled_dot_product_attention(
    q, k, v, mask=None, bias=None, scale=None, causal=False, return_weights=False
):
    r"""``softmax(q k^T * scale + bias) v`` with masking.

    Parameters
    ----------
    q : ndarray, shape (..., Lq, E)
    k : ndarray, shape (..., Lk, E)
    v : ndarray, shape (..., Lk, Ev)
        Leading (batch, head) axes broadcast.
    mask : ndarray, broadcastable to (..., Lq, Lk), optional
        Boolean, ``True`` = attend; a floating-point mask is an additive bias.
    bias : ndarray, broadcastable to (..., Lq, Lk), optional
        Added to the scaled scores.
    scale : float, optional
        Default ``1 / sqrt(E)``.
    causal : bool
        Query ``i`` attends only to keys ``j <= i`` (top-left aligned).
    return_weights : bool
        Also return the (..., Lq, Lk) weights.

    Returns
    -------
    out : ndarray, shape (..., Lq, Ev)
    weights : ndarray, shape (..., Lq, Lk), with ``return_weights=True``

    Raises
    ------
    ValueError
        For shapes that do not fit, and when a query has every key hidden.

    Examples
    --------
    >>> import numpy as np
    >>> from zoo.attention import numpy_attention as attn
    >>> q = np.array([[1.0, 0.0], [0.0, 1.0]])
    >>> k = np.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    >>> v = np.array([[1.0], [2.0], [3.0]])
    >>> out, weights = attn.scaled_dot_product_attention(q, k, v, return_weights=True)
    >>> out.round(4)
    array([[2.    ],
           [2.2033]])
    >>> weights.round(4)
    array([[0.4011, 0.1978, 0.4011],
           [0.1978, 0.4011, 0.4011]])
    >>> attn.scaled_dot_product_attention(q, k, v, mask=np.array([True, False, False])).ravel()
    array([1., 1.])
    """
    q, k, v = np.asarray(q), np.asarray(k), np.asarray(v)
    return _algebra.scaled_dot_product_attention(
        q, k, v, mask, bias, scale, causal, return_weights, _XP
    )


def multi_head_attention(
    params,
    query,
    key=None,
    value=None,
    *,
    num_heads,
    mask=None,
    bias=None,
    scale=None,
    causal=False,
    return_weights=False,
):
    """Multi-head attention with the projections in ``params``; see
    ``torch_attention.multi_head_attention`` for the parameters and shapes.

    Parameters
    ----------
    params : dict of str to ndarray
        ``q_weight`` (embed_dim, query_dim), ``k_weight`` (embed_dim, key_dim), ``v_weight``
        (embed_dim, value_dim), ``out_weight`` (out_dim, embed_dim) and optionally the biases
        ``q_bias``, ``k_bias``, ``v_bias`` (embed_dim,) and ``out_bias`` (out_dim,).
    query : ndarray, shape (..., Lq, query_dim)
    key : ndarray, shape (..., Lk, key_dim), optional
        Default ``query`` (self-attention).
    value : ndarray, shape (..., Lk, value_dim), optional
        Default ``key``.
    num_heads : int
        Divides ``embed_dim``; each head has ``embed_dim // num_heads`` features.
    mask, bias : ndarray, optional
        Broadcastable to ``(..., num_heads, Lq, Lk)``. As in :func:`scaled_dot_product_attention`;
        the head axis is the third from last.
    scale : float, optional
        Default ``1 / sqrt(embed_dim // num_heads)``.
    causal, return_weights : bool
        As in :func:`scaled_dot_product_attention`.

    Returns
    -------
    out : ndarray, shape (..., Lq, out_dim)
    weights : ndarray, shape (..., num_heads, Lq, Lk)
        Only with ``return_weights=True``: every head's weights (not averaged).

    Raises
    ------
    ValueError
        ``params`` without a weight or with an unknown key, a weight or bias of another shape
        than the inputs need, ``num_heads`` that does not divide ``embed_dim``, and what
        :func:`scaled_dot_product_attention` raises.

    Examples
    --------
    The numpy twin gives what the torch one gives, from the same parameters:

    >>> import numpy as np
    >>> import torch
    >>> from zoo.attention import numpy_attention, torch_attention
    >>> params = torch_attention.init_params(8, 2, generator=torch.Generator().manual_seed(0))
    >>> x = torch.randn(3, 5, 8, generator=torch.Generator().manual_seed(1))
    >>> expected = torch_attention.multi_head_attention(params, x, num_heads=2)
    >>> arrays = {name: value.numpy() for name, value in params.items()}
    >>> out = numpy_attention.multi_head_attention(arrays, x.numpy(), num_heads=2)
    >>> out.shape, np.allclose(out, expected.numpy(), atol=1e-6)
    ((3, 5, 8), True)
    """
    query = np.asarray(query)
    key = None if key is None else np.asarray(key)
    value = None if value is None else np.asarray(value)
    params = {name: None if p is None else np.asarray(p) for name, p in params.items()}
    return _algebra.multi_head_attention(
        params, query, key, value, num_heads, mask, bias, scale, causal, return_weights, _XP
    )


def self_attention(params, x, *, num_heads, **options):
    """Multi-head self-attention over ``x`` (..., L, dim).

    Parameters
    ----------
    params : dict of str to ndarray
        The projections, as in :func:`multi_head_attention`.
    x : ndarray, shape (..., L, dim)
        The sequence: queries, keys and values.
    num_heads : int
        Divides ``embed_dim``.
    **options
        ``mask``, ``bias``, ``scale``, ``causal``, ``return_weights``, as in
        :func:`multi_head_attention`.

    Returns
    -------
    out : ndarray, shape (..., L, out_dim)
    weights : ndarray, shape (..., num_heads, L, L)
        Only with ``return_weights=True``.

    Raises
    ------
    ValueError
        As :func:`multi_head_attention`.

    Examples
    --------
    >>> import numpy as np
    >>> from zoo.attention import numpy_attention as attn
    >>> rng = np.random.default_rng(0)
    >>> params = {f"{n}_weight": rng.normal(size=(8, 8)) for n in ("q", "k", "v", "out")}
    >>> x = rng.normal(size=(3, 5, 8))
    >>> out, weights = attn.self_attention(params, x, num_heads=2, return_weights=True)
    >>> out.shape, weights.shape
    ((3, 5, 8), (3, 2, 5, 5))
    """
    return multi_head_attention(params, x, x, x, num_heads=num_heads, **options)


def cross_attention(params, x, context, *, num_heads, **options):
    """Multi-head cross-attention: queries from ``x``, keys and values from ``context``.

    Parameters
    ----------
    params : dict of str to ndarray
        The projections, as in :func:`multi_head_attention` (``query_dim = dim``, ``key_dim =
        value_dim = context_dim``).
    x : ndarray, shape (..., Lq, dim)
        The queries' sequence.
    context : ndarray, shape (..., Lk, context_dim)
        The sequence the queries attend to.
    num_heads : int
        Divides ``embed_dim``.
    **options
        ``mask``, ``bias``, ``scale``, ``causal``, ``return_weights``, as in
        :func:`multi_head_attention`.

    Returns
    -------
    out : ndarray, shape (..., Lq, out_dim)
    weights : ndarray, shape (..., num_heads, Lq, Lk)
        Only with ``return_weights=True``.

    Raises
    ------
    ValueError
        As :func:`multi_head_attention`.

    Examples
    --------
    >>> import numpy as np
    >>> from zoo.attention import numpy_attention as attn
    >>> rng = np.random.default_rng(0)
    >>> params = {
    ...     "q_weight": rng.normal(size=(8, 8)),
    ...     "k_weight": rng.normal(size=(8, 4)),
    ...     "v_weight": rng.normal(size=(8, 4)),
    ...     "out_weight": rng.normal(size=(8, 8)),
    ... }
    >>> x, context = rng.normal(size=(3, 5, 8)), rng.normal(size=(3, 7, 4))
    >>> attn.cross_attention(params, x, context, num_heads=2).shape
    (3, 5, 8)
    """
    return multi_head_attention(params, x, context, context, num_heads=num_heads, **options)
