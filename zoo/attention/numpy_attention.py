"""Scaled dot-product and multi-head attention in numpy: the reference twin of
``torch_attention`` and ``jax_attention`` (same names, arguments and shapes), for code that must run
without either library."""

from __future__ import annotations

import numpy as np
from scipy.special import softmax

from zoo.attention import _checks

__all__ = [
    "cross_attention",
    "multi_head_attention",
    "scaled_dot_product_attention",
    "self_attention",
]


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
    lq, lk = _checks.check_qkv(q.shape, k.shape, v.shape)
    scale = _checks.default_scale(scale, q.shape[-1])
    scores = (q @ np.swapaxes(k, -2, -1)) * scale
    if mask is not None:
        mask = np.asarray(mask)
        _checks.check_scores_operand("mask", mask.shape, lq, lk)
        if mask.dtype == bool:
            scores = np.where(mask, scores, -np.inf)
        elif mask.dtype.kind == "f":
            scores = scores + mask
        else:
            raise ValueError(
                f"expected a boolean mask (True = attend) or a floating-point additive mask; "
                f"got dtype {mask.dtype}."
            )
    if bias is not None:
        bias = np.asarray(bias)
        _checks.check_scores_operand("bias", bias.shape, lq, lk)
        scores = scores + bias
    if causal:
        scores = np.where(np.tril(np.ones((lq, lk), dtype=bool)), scores, -np.inf)
    dead = np.all(np.isneginf(scores), axis=-1)
    if dead.any():
        raise _checks.dead_query_error(np.argwhere(dead)[0].tolist())
    weights = softmax(scores, axis=-1)
    out = weights @ v
    return (out, weights) if return_weights else out


def _split_heads(x, num_heads):
    return np.swapaxes(x.reshape(*x.shape[:-1], num_heads, -1), -3, -2)


def _linear(x, weight, bias):
    out = x @ np.asarray(weight).T
    return out if bias is None else out + bias


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
    key = query if key is None else np.asarray(key)
    value = key if value is None else np.asarray(value)
    _checks.check_params(params, query.shape[-1], key.shape[-1], value.shape[-1], num_heads)
    q = _split_heads(_linear(query, params["q_weight"], params.get("q_bias")), num_heads)
    k = _split_heads(_linear(key, params["k_weight"], params.get("k_bias")), num_heads)
    v = _split_heads(_linear(value, params["v_weight"], params.get("v_bias")), num_heads)
    out, weights = scaled_dot_product_attention(
        q, k, v, mask=mask, bias=bias, scale=scale, causal=causal, return_weights=True
    )
    out = np.swapaxes(out, -3, -2)
    out = _linear(out.reshape(*out.shape[:-2], -1), params["out_weight"], params.get("out_bias"))
    return (out, weights) if return_weights else out


def self_attention(params, x, *, num_heads, **options):
    """Multi-head self-attention over ``x`` (..., L, dim)."""
    return multi_head_attention(params, x, x, x, num_heads=num_heads, **options)


def cross_attention(params, x, context, *, num_heads, **options):
    """Multi-head cross-attention: queries from ``x``, keys and values from ``context``."""
    return multi_head_attention(params, x, context, context, num_heads=num_heads, **options)
