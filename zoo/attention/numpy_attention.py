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
    ``torch_attention.multi_head_attention`` for the parameters and shapes."""
    query = np.asarray(query)
    key = None if key is None else np.asarray(key)
    value = None if value is None else np.asarray(value)
    params = {name: None if p is None else np.asarray(p) for name, p in params.items()}
    return _algebra.multi_head_attention(
        params, query, key, value, num_heads, mask, bias, scale, causal, return_weights, _XP
    )


def self_attention(params, x, *, num_heads, **options):
    """Multi-head self-attention over ``x`` (..., L, dim)."""
    return multi_head_attention(params, x, x, x, num_heads=num_heads, **options)


def cross_attention(params, x, context, *, num_heads, **options):
    """Multi-head cross-attention: queries from ``x``, keys and values from ``context``."""
    return multi_head_attention(params, x, context, context, num_heads=num_heads, **options)
