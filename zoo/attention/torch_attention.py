"""Scaled dot-product and multi-head attention in PyTorch (the twin of ``jax_attention``).

Shapes follow ``torch.nn.functional.scaled_dot_product_attention``: the last two axes are
``(sequence, features)`` and every axis before them (batch, heads) broadcasts.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from zoo.array_namespace import TorchOps
from zoo.attention import _algebra, _checks

__all__ = [
    "MultiHeadAttention",
    "cross_attention",
    "init_params",
    "multi_head_attention",
    "scaled_dot_product_attention",
    "self_attention",
]

_XP = TorchOps()


def scaled_dot_product_attention(
    q, k, v, mask=None, bias=None, scale=None, causal=False, return_weights=False
):
    r"""``softmax(q k^T * scale + bias) v`` with masking.

    Parameters
    ----------
    q : Tensor, shape (..., Lq, E)
        Queries.
    k : Tensor, shape (..., Lk, E)
        Keys.
    v : Tensor, shape (..., Lk, Ev)
        Values. The leading (batch, head) axes of ``q``, ``k`` and ``v`` broadcast.
    mask : Tensor, broadcastable to (..., Lq, Lk), optional
        Boolean: ``True`` where a query may attend to a key. A floating-point mask is an additive
        bias instead, as in ``torch.nn.functional.scaled_dot_product_attention``.
    bias : Tensor, broadcastable to (..., Lq, Lk), optional
        Added to the scaled scores (``-inf`` hides a key).
    scale : float, optional
        Multiplies ``q k^T``; default ``1 / sqrt(E)``.
    causal : bool
        Query ``i`` attends only to keys ``j <= i`` (top-left aligned, as torch and JAX do).
    return_weights : bool
        Also return the attention weights.

    Returns
    -------
    out : Tensor, shape (..., Lq, Ev)
    weights : Tensor, shape (..., Lq, Lk)
        Only with ``return_weights=True``; each row sums to one.

    Raises
    ------
    ValueError
        For shapes that do not fit, and when a query has every key hidden (by ``mask``, a
        ``-inf`` bias or ``causal``): its weights would be 0/0 and its output NaN. The check reads
        the scores eagerly (one reduction; on a GPU, a device synchronisation). Under
        ``torch.compile`` it is a graph break; under ``torch.jit.trace`` it runs at trace time
        only, and a fully masked query then gives NaN.
    """
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
    r"""Multi-head attention with the projections in ``params``.

    ``out = concat_h(attention(query Wq_h^T, key Wk_h^T, value Wv_h^T)) Wo^T + bo`` (each
    projection with its bias), the attention scaled dot-product per head.

    Parameters
    ----------
    params : dict of str to Tensor
        ``q_weight`` (embed_dim, query_dim), ``k_weight`` (embed_dim, key_dim), ``v_weight``
        (embed_dim, value_dim), ``out_weight`` (out_dim, embed_dim) and optionally the biases
        ``q_bias``, ``k_bias``, ``v_bias`` (embed_dim,) and ``out_bias`` (out_dim,).
    query : Tensor, shape (..., Lq, query_dim)
    key : Tensor, shape (..., Lk, key_dim), optional
        Default ``query`` (self-attention).
    value : Tensor, shape (..., Lk, value_dim), optional
        Default ``key``.
    num_heads : int
        Divides ``embed_dim``; each head has ``embed_dim // num_heads`` features.
    mask, bias : Tensor, broadcastable to (..., num_heads, Lq, Lk), optional
        As in :func:`scaled_dot_product_attention`; the head axis is the third from last, so a
        per-example mask of shape (B, Lq, Lk) is passed as ``mask[:, None]``.
    scale : float, optional
        Default ``1 / sqrt(embed_dim // num_heads)``.
    causal, return_weights : bool
        As in :func:`scaled_dot_product_attention`.

    Returns
    -------
    out : Tensor, shape (..., Lq, out_dim)
    weights : Tensor, shape (..., num_heads, Lq, Lk)
        Only with ``return_weights=True``: every head's weights (not averaged).
    """
    return _algebra.multi_head_attention(
        params, query, key, value, num_heads, mask, bias, scale, causal, return_weights, _XP
    )


def self_attention(params, x, *, num_heads, **options):
    """Multi-head self-attention: queries, keys and values all come from ``x`` (..., L, dim)."""
    return multi_head_attention(params, x, x, x, num_heads=num_heads, **options)


def cross_attention(params, x, context, *, num_heads, **options):
    """Multi-head cross-attention: queries from ``x`` (..., Lq, dim), keys and values from
    ``context`` (..., Lk, context_dim)."""
    return multi_head_attention(params, x, context, context, num_heads=num_heads, **options)


def init_params(
    embed_dim,
    num_heads,
    kdim=None,
    vdim=None,
    out_dim=None,
    bias=True,
    *,
    generator=None,
    dtype=None,
    device=None,
):
    """Random multi-head parameters: Xavier-uniform weights and zero biases (as
    ``torch.nn.MultiheadAttention`` starts), as a dict of tensors.

    ``kdim``, ``vdim`` (input sizes of keys and values) default to ``embed_dim``, and so does
    ``out_dim``; ``generator`` is a ``torch.Generator`` for reproducible draws.
    """
    _checks.check_heads(embed_dim, num_heads)
    kdim = embed_dim if kdim is None else kdim
    vdim = embed_dim if vdim is None else vdim
    out_dim = embed_dim if out_dim is None else out_dim
    like = dict(dtype=dtype or torch.get_default_dtype(), device=device)
    params = {}
    for name, (rows, cols) in (
        ("q", (embed_dim, embed_dim)),
        ("k", (embed_dim, kdim)),
        ("v", (embed_dim, vdim)),
        ("out", (out_dim, embed_dim)),
    ):
        bound = math.sqrt(6.0 / (rows + cols))
        u = torch.rand(rows, cols, generator=generator, **like)
        params[f"{name}_weight"] = (2 * u - 1) * bound
        if bias:
            params[f"{name}_bias"] = torch.zeros(rows, **like)
    return params


class MultiHeadAttention(nn.Module):
    """Multi-head attention with learned projections (:func:`multi_head_attention` as a module).

    Parameters
    ----------
    embed_dim : int
        Size of the queries (input and projected) and of the output unless ``out_dim`` is given.
    num_heads : int
        Divides ``embed_dim``.
    kdim, vdim : int, optional
        Input sizes of keys and values; default ``embed_dim``.
    out_dim : int, optional
        Output size; default ``embed_dim``.
    bias : bool
        Whether the four projections have biases.

    The parameters are named as :func:`multi_head_attention`'s dict, so
    ``dict(module.named_parameters())`` is that dict and ``jax_attention.MultiHeadAttention``
    takes it unchanged (after conversion to arrays).
    """

    def __init__(
        self,
        embed_dim,
        num_heads,
        kdim=None,
        vdim=None,
        out_dim=None,
        bias=True,
        *,
        generator=None,
        dtype=None,
        device=None,
    ):
        super().__init__()
        self.num_heads = num_heads
        params = init_params(
            embed_dim,
            num_heads,
            kdim,
            vdim,
            out_dim,
            bias,
            generator=generator,
            dtype=dtype,
            device=device,
        )
        for name, value in params.items():
            setattr(self, name, nn.Parameter(value))

    def params(self) -> dict:
        return dict(self.named_parameters())

    def forward(self, query, key=None, value=None, **options):
        """Self-attention with ``key=None``, cross-attention otherwise; ``options`` as in
        :func:`multi_head_attention` (``mask``, ``bias``, ``scale``, ``causal``,
        ``return_weights``)."""
        return multi_head_attention(
            self.params(), query, key, value, num_heads=self.num_heads, **options
        )
