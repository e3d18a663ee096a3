"""Scaled dot-product and multi-head attention in PyTorch (the twin of ``jax_attention``).

Shapes follow ``torch.nn.functional.scaled_dot_product_attention``: the last two axes are
``(sequence, features)`` and every axis before them (batch, heads) broadcasts.
"""

from __future__ import annotations

import torch
from torch import nn

from zoo.array_namespace import TorchOps
from zoo.attention import _algebra, _docs
from zoo.docstrings import shared_sections

__all__ = [
    "MultiHeadAttention",
    "cross_attention",
    "init_params",
    "multi_head_attention",
    "scaled_dot_product_attention",
    "self_attention",
]

_XP = TorchOps()
_DOC_FIELDS = {
    "array": "Tensor",
    "float_mask": ", as in ``torch.nn.functional.scaled_dot_product_attention``",
}


def _promote(*tensors):
    """The tensors (``None`` kept) in one floating dtype, as numpy and JAX promote mixed inputs:
    torch's matmul refuses mixed dtypes. Integer and bool inputs give float64, as in the twins."""
    present = [t for t in tensors if t is not None]
    dtype = present[0].dtype
    for t in present[1:]:
        dtype = torch.promote_types(dtype, t.dtype)
    if not dtype.is_floating_point:
        dtype = torch.float64
    return [None if t is None else t.to(dtype) for t in tensors]


@shared_sections(_docs.SCALED_DOT_PRODUCT_ATTENTION, **_DOC_FIELDS)
def scaled_dot_product_attention(
    q, k, v, mask=None, bias=None, scale=None, causal=False, return_weights=False
):
    r"""``softmax(q k^T * scale + bias) v`` with masking.

    Raises
    ------
    ValueError
        For shapes that do not fit, and when a query has every key hidden (by ``mask``, a
        ``-inf`` bias or ``causal``): its weights would be 0/0 and its output NaN. The check reads
        the scores eagerly (one reduction; on a GPU, a device synchronisation). Under
        ``torch.compile`` it is a graph break; under ``torch.jit.trace`` it runs at trace time
        only, and a fully masked query then gives NaN.

    Examples
    --------
    Two queries over three keys (no batch axis):

    >>> import torch
    >>> from zoo.attention import torch_attention as attn
    >>> q = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    >>> k = torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    >>> v = torch.tensor([[1.0], [2.0], [3.0]])
    >>> out, weights = attn.scaled_dot_product_attention(q, k, v, return_weights=True)
    >>> out.shape, weights.shape
    (torch.Size([2, 1]), torch.Size([2, 3]))
    >>> weights.sum(-1)
    tensor([1., 1.])
    >>> torch.allclose(out, torch.nn.functional.scaled_dot_product_attention(q, k, v))
    True

    With ``causal=True`` the first query sees only the first key:

    >>> attn.scaled_dot_product_attention(q, k, v, causal=True)[0]
    tensor([1.])

    A query with every key masked is an error rather than a NaN:

    >>> mask = torch.tensor([[True, True, False], [False, False, False]])
    >>> attn.scaled_dot_product_attention(q, k, v, mask=mask)
    Traceback (most recent call last):
    ...
    ValueError: expected every query to attend to at least one key; got query 1 with ...
    """
    q, k, v = _promote(*map(torch.as_tensor, (q, k, v)))
    return _algebra.scaled_dot_product_attention(
        q, k, v, mask, bias, scale, causal, return_weights, _XP
    )


@shared_sections(_docs.MULTI_HEAD_ATTENTION, **_DOC_FIELDS)
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

    Examples
    --------
    The same computation as ``torch.nn.MultiheadAttention`` with these projections:

    >>> import torch
    >>> from zoo.attention import torch_attention as attn
    >>> generator = torch.Generator().manual_seed(0)
    >>> params = attn.init_params(8, num_heads=2, generator=generator)
    >>> x = torch.randn(3, 5, 8, generator=generator)  # (batch, sequence, features)
    >>> out, weights = attn.multi_head_attention(params, x, num_heads=2, return_weights=True)
    >>> out.shape, weights.shape
    (torch.Size([3, 5, 8]), torch.Size([3, 2, 5, 5]))
    >>> reference = torch.nn.MultiheadAttention(8, 2, batch_first=True)
    >>> qkv = ("q", "k", "v")
    >>> reference.load_state_dict({
    ...     "in_proj_weight": torch.cat([params[f"{n}_weight"] for n in qkv]),
    ...     "in_proj_bias": torch.cat([params[f"{n}_bias"] for n in qkv]),
    ...     "out_proj.weight": params["out_weight"],
    ...     "out_proj.bias": params["out_bias"],
    ... })
    <All keys matched successfully>
    >>> expected, expected_weights = reference(x, x, x, average_attn_weights=False)
    >>> torch.allclose(out, expected, atol=1e-6)
    True
    >>> torch.allclose(weights, expected_weights, atol=1e-6)
    True
    """
    names = list(params)
    query, key, value, *values = _promote(
        torch.as_tensor(query),
        None if key is None else torch.as_tensor(key),
        None if value is None else torch.as_tensor(value),
        *(None if params[n] is None else torch.as_tensor(params[n]) for n in names),
    )
    params = dict(zip(names, values, strict=True))
    return _algebra.multi_head_attention(
        params, query, key, value, num_heads, mask, bias, scale, causal, return_weights, _XP
    )


@shared_sections(_docs.SELF_ATTENTION, **_DOC_FIELDS)
def self_attention(params, x, *, num_heads, **options):
    """Multi-head self-attention: queries, keys and values all come from ``x`` (..., L, dim).

    Examples
    --------
    >>> import torch
    >>> from zoo.attention import torch_attention as attn
    >>> generator = torch.Generator().manual_seed(0)
    >>> params = attn.init_params(8, num_heads=2, generator=generator)
    >>> x = torch.randn(3, 5, 8, generator=generator)
    >>> out = attn.self_attention(params, x, num_heads=2, causal=True)
    >>> out.shape
    torch.Size([3, 5, 8])
    >>> torch.equal(out, attn.multi_head_attention(params, x, num_heads=2, causal=True))
    True
    """
    return multi_head_attention(params, x, x, x, num_heads=num_heads, **options)


@shared_sections(_docs.CROSS_ATTENTION, **_DOC_FIELDS)
def cross_attention(params, x, context, *, num_heads, **options):
    """Multi-head cross-attention: queries from ``x`` (..., Lq, dim), keys and values from
    ``context`` (..., Lk, context_dim).

    Examples
    --------
    >>> import torch
    >>> from zoo.attention import torch_attention as attn
    >>> generator = torch.Generator().manual_seed(0)
    >>> params = attn.init_params(8, num_heads=2, kdim=4, vdim=4, generator=generator)
    >>> x = torch.randn(3, 5, 8, generator=generator)
    >>> context = torch.randn(3, 7, 4, generator=generator)
    >>> out, weights = attn.cross_attention(params, x, context, num_heads=2, return_weights=True)
    >>> out.shape, weights.shape
    (torch.Size([3, 5, 8]), torch.Size([3, 2, 5, 7]))
    """
    return multi_head_attention(params, x, context, context, num_heads=num_heads, **options)


#: ``init_params``' own parameters, for its docstring.
_INIT_DRAW = """\
generator : torch.Generator, optional
    Draws the weights; default torch's global generator.
dtype : torch.dtype, optional
    Default ``torch.get_default_dtype()``.
device : torch.device or str, optional
    Where the tensors live."""


@shared_sections(_docs.INIT_PARAMS, draw=_INIT_DRAW, **_DOC_FIELDS)
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

    Examples
    --------
    >>> import torch
    >>> from zoo.attention import torch_attention as attn
    >>> params = attn.init_params(8, 2, kdim=4, generator=torch.Generator().manual_seed(0))
    >>> {n: tuple(v.shape) for n, v in params.items()}  # doctest: +NORMALIZE_WHITESPACE
    {'q_weight': (8, 8), 'q_bias': (8,), 'k_weight': (8, 4), 'k_bias': (8,),
     'v_weight': (8, 8), 'v_bias': (8,), 'out_weight': (8, 8), 'out_bias': (8,)}
    >>> attn.init_params(8, 3)
    Traceback (most recent call last):
    ...
    ValueError: expected embed_dim divisible by num_heads; got embed_dim=8, num_heads=3.
    """
    like = dict(dtype=dtype or torch.get_default_dtype(), device=device)

    def uniform(index, shape, bound):
        # Drawn in [0, 1) and mapped, in the order of the weights, from the one generator.
        return (2 * torch.rand(*shape, generator=generator, **like) - 1) * bound

    def zeros(shape):
        return torch.zeros(shape, **like)

    return _algebra.init_params(embed_dim, num_heads, kdim, vdim, out_dim, bias, uniform, zeros)


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
    generator : torch.Generator, optional
        Draws the initial weights (:func:`init_params`).
    dtype : torch.dtype, optional
        Default ``torch.get_default_dtype()``.
    device : torch.device or str, optional
        Where the parameters live.

    Attributes
    ----------
    num_heads : int
        As given.
    q_weight : torch.nn.Parameter
        The query projection, (embed_dim, embed_dim), in ``nn.Linear``'s (out, in) layout.
    k_weight : torch.nn.Parameter
        The key projection, (embed_dim, kdim).
    v_weight : torch.nn.Parameter
        The value projection, (embed_dim, vdim).
    out_weight : torch.nn.Parameter
        The output projection, (out_dim, embed_dim).
    q_bias : torch.nn.Parameter
        The query projection's bias, (embed_dim,) (with ``bias=True``).
    k_bias : torch.nn.Parameter
        The key projection's bias, (embed_dim,) (with ``bias=True``).
    v_bias : torch.nn.Parameter
        The value projection's bias, (embed_dim,) (with ``bias=True``).
    out_bias : torch.nn.Parameter
        The output projection's bias, (out_dim,) (with ``bias=True``).

    Raises
    ------
    ValueError
        ``num_heads`` is not a positive int, or does not divide ``embed_dim``.

    Notes
    -----
    The parameters are named as :func:`multi_head_attention`'s dict, so
    ``dict(module.named_parameters())`` is that dict and ``jax_attention.MultiHeadAttention``
    takes it unchanged (after conversion to arrays).

    Examples
    --------
    >>> import torch
    >>> from zoo.attention import torch_attention as attn
    >>> module = attn.MultiHeadAttention(8, 2, generator=torch.Generator().manual_seed(0))
    >>> sorted(dict(module.named_parameters()))  # doctest: +NORMALIZE_WHITESPACE
    ['k_bias', 'k_weight', 'out_bias', 'out_weight', 'q_bias', 'q_weight', 'v_bias',
     'v_weight']
    >>> x = torch.randn(3, 5, 8)
    >>> module(x).shape  # self-attention
    torch.Size([3, 5, 8])
    >>> module(x, torch.randn(3, 7, 8)).shape  # cross-attention
    torch.Size([3, 5, 8])
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
        """The parameters as :func:`multi_head_attention` takes them (``named_parameters()``)."""
        return dict(self.named_parameters())

    def forward(self, query, key=None, value=None, **options):
        """Self-attention with ``key=None``, cross-attention otherwise; ``options`` as in
        :func:`multi_head_attention` (``mask``, ``bias``, ``scale``, ``causal``,
        ``return_weights``)."""
        return multi_head_attention(
            self.params(), query, key, value, num_heads=self.num_heads, **options
        )
