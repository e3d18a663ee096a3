"""Shape checks and error messages shared by the attention implementations (pure Python)."""

from __future__ import annotations

import math

import numpy as np


def check_qkv(q_shape, k_shape, v_shape) -> tuple[int, int]:
    """Validate ``q (..., Lq, E)``, ``k (..., Lk, E)``, ``v (..., Lk, Ev)``; return ``(Lq, Lk)``."""
    for name, shape in (("q", q_shape), ("k", k_shape), ("v", v_shape)):
        if len(shape) < 2:
            raise ValueError(
                f"expected {name} of shape (..., length, features) with at least 2 dimensions; "
                f"got shape {tuple(shape)}."
            )
    if q_shape[-1] != k_shape[-1]:
        raise ValueError(
            f"expected q and k with the same feature size (last axis); got q {tuple(q_shape)} "
            f"and k {tuple(k_shape)}."
        )
    if k_shape[-2] != v_shape[-2]:
        raise ValueError(
            f"expected k and v with the same number of keys (axis -2); got k {tuple(k_shape)} "
            f"and v {tuple(v_shape)}."
        )
    try:
        np.broadcast_shapes(q_shape[:-2], k_shape[:-2], v_shape[:-2])
    except ValueError:
        raise ValueError(
            f"expected q, k and v whose batch axes (all but the last two) broadcast; got q "
            f"{tuple(q_shape)}, k {tuple(k_shape)}, v {tuple(v_shape)}."
        ) from None
    return int(q_shape[-2]), int(k_shape[-2])


def check_scores_operand(name, shape, lq, lk) -> None:
    """``mask`` or ``bias`` must broadcast to ``(..., Lq, Lk)``."""
    shape = tuple(shape)
    trailing = shape[-2:] if len(shape) >= 2 else shape
    try:
        np.broadcast_shapes(trailing, (lq, lk))
    except ValueError:
        raise ValueError(
            f"expected {name} broadcastable to (..., Lq, Lk) = (..., {lq}, {lk}); got shape "
            f"{shape}."
        ) from None


def default_scale(scale, features: int) -> float:
    if scale is None:
        return 1.0 / math.sqrt(features)
    scale = float(scale)
    if not math.isfinite(scale):
        raise ValueError(f"expected a finite float scale; got {scale}.")
    return scale


def dead_query_error(index) -> ValueError:
    """The error for a query whose every key is masked (``index``: its position in the scores)."""
    *batch, query = (int(i) for i in index)
    where = f" of batch element {tuple(batch)}" if batch else ""
    return ValueError(
        f"expected every query to attend to at least one key; got query {query}{where} with "
        "every key masked (mask False, bias -inf or hidden by causal=True), whose attention "
        "weights would be 0/0. Unmask a key for it or drop the query."
    )


def check_heads(embed_dim: int, num_heads: int) -> int:
    if isinstance(num_heads, bool) or not isinstance(num_heads, int | np.integer) or num_heads < 1:
        raise ValueError(f"expected num_heads an int in the range [1, inf); got {num_heads!r}.")
    if embed_dim % num_heads:
        raise ValueError(
            f"expected embed_dim divisible by num_heads; got embed_dim={embed_dim}, "
            f"num_heads={num_heads}."
        )
    return embed_dim // num_heads


PARAM_NAMES = (
    "q_weight",
    "q_bias",
    "k_weight",
    "k_bias",
    "v_weight",
    "v_bias",
    "out_weight",
    "out_bias",
)


def check_params(params, query_dim: int, key_dim: int, value_dim: int, num_heads: int) -> int:
    """Validate a multi-head parameter dict against the inputs; return the head size."""
    missing = [n for n in ("q_weight", "k_weight", "v_weight", "out_weight") if n not in params]
    unknown = sorted(set(params) - set(PARAM_NAMES))
    if missing or unknown:
        raise ValueError(
            f"expected params with keys {list(PARAM_NAMES)} (biases optional); missing "
            f"{missing}, unexpected {unknown}."
        )
    embed = params["q_weight"].shape[0]
    expected = {
        "q_weight": (embed, query_dim),
        "k_weight": (embed, key_dim),
        "v_weight": (embed, value_dim),
        "out_weight": (params["out_weight"].shape[0], embed),
    }
    for name, shape in expected.items():
        if tuple(params[name].shape) != shape:
            raise ValueError(
                f"expected params[{name!r}] of shape {shape} (nn.Linear's (out, in) layout, "
                f"embed_dim={embed}); got {tuple(params[name].shape)}."
            )
    for name, size in (
        ("q_bias", embed),
        ("k_bias", embed),
        ("v_bias", embed),
        ("out_bias", params["out_weight"].shape[0]),
    ):
        if params.get(name) is not None and tuple(params[name].shape) != (size,):
            raise ValueError(
                f"expected params[{name!r}] of shape ({size},); got {tuple(params[name].shape)}."
            )
    return check_heads(embed, num_heads)
