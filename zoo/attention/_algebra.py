"""Scaled dot-product and multi-head attention, written once against an array namespace ``xp``
(``zoo.array_namespace``: ``TorchOps``, ``JaxOps`` or ``NumpyOps``).

``torch_attention``, ``jax_attention`` and ``numpy_attention`` convert their inputs as their
library does and call these; parameters, shapes and errors are documented there.
"""

from __future__ import annotations

import math

from zoo.attention import _checks


def _scores_operand(name, value, like, lq, lk, xp):
    value = xp.asarray_on(value, like)
    _checks.check_scores_operand(name, value.shape, lq, lk)
    return value


def scaled_dot_product_attention(q, k, v, mask, bias, scale, causal, return_weights, xp):
    lq, lk = _checks.check_qkv(q.shape, k.shape, v.shape)
    scale = _checks.default_scale(scale, q.shape[-1])
    scores = (q @ xp.swapaxes(k, -2, -1)) * scale
    if mask is not None:
        mask = _scores_operand("mask", mask, q, lq, lk, xp)
        if xp.is_bool(mask):
            scores = xp.where(mask, scores, -float("inf"))
        elif xp.is_floating(mask):
            scores = scores + xp.astype(mask, scores.dtype)
        else:
            raise ValueError(
                f"expected a boolean mask (True = attend) or a floating-point additive mask; "
                f"got dtype {mask.dtype}."
            )
    if bias is not None:
        scores = scores + xp.astype(_scores_operand("bias", bias, q, lq, lk, xp), scores.dtype)
    if causal:
        scores = xp.where(xp.tri(lq, lk, like=scores), scores, -float("inf"))
    # Traced JAX scores cannot be read: a dead query then shows as NaN weights instead.
    if xp.is_concrete(scores):
        dead = xp.all(xp.isneginf(scores), axis=-1)
        if bool(xp.any(dead)):
            raise _checks.dead_query_error(xp.argwhere(dead)[0].tolist())
    weights = xp.softmax(scores, axis=-1)
    out = weights @ v
    return (out, weights) if return_weights else out


def _split_heads(x, num_heads, xp):
    """(..., L, H * Dh) -> (..., H, L, Dh)."""
    return xp.swapaxes(x.reshape(*x.shape[:-1], num_heads, -1), -3, -2)


def _linear(x, weight, bias):
    out = x @ weight.T
    return out if bias is None else out + bias


def multi_head_attention(
    params, query, key, value, num_heads, mask, bias, scale, causal, return_weights, xp
):
    key = query if key is None else key
    value = key if value is None else value
    _checks.check_params(params, query.shape[-1], key.shape[-1], value.shape[-1], num_heads)
    q = _split_heads(_linear(query, params["q_weight"], params.get("q_bias")), num_heads, xp)
    k = _split_heads(_linear(key, params["k_weight"], params.get("k_bias")), num_heads, xp)
    v = _split_heads(_linear(value, params["v_weight"], params.get("v_bias")), num_heads, xp)
    out, weights = scaled_dot_product_attention(
        q, k, v, mask, bias, scale, causal, return_weights=True, xp=xp
    )
    out = xp.swapaxes(out, -3, -2)  # (..., Lq, H, Dh)
    out = _linear(out.reshape(*out.shape[:-2], -1), params["out_weight"], params.get("out_bias"))
    return (out, weights) if return_weights else out


def init_params(embed_dim, num_heads, kdim, vdim, out_dim, bias, uniform, zeros):
    """Xavier-uniform weights and zero biases. The library's randomness comes in as
    ``uniform(index, shape, bound)``: weight ``index`` (0 to 3, in the order q, k, v, out),
    uniform in ``[-bound, bound]``; ``zeros(shape)`` makes a bias."""
    _checks.check_heads(embed_dim, num_heads)
    kdim = embed_dim if kdim is None else kdim
    vdim = embed_dim if vdim is None else vdim
    out_dim = embed_dim if out_dim is None else out_dim
    shapes = (
        ("q", (embed_dim, embed_dim)),
        ("k", (embed_dim, kdim)),
        ("v", (embed_dim, vdim)),
        ("out", (out_dim, embed_dim)),
    )
    params = {}
    for index, (name, (rows, cols)) in enumerate(shapes):
        bound = math.sqrt(6.0 / (rows + cols))
        params[f"{name}_weight"] = uniform(index, (rows, cols), bound)
        if bias:
            params[f"{name}_bias"] = zeros((rows,))
    return params
