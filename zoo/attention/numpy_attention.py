"""Scaled dot-product and multi-head attention in numpy: the reference twin of
``torch_attention`` and ``jax_attention`` (same names, arguments and shapes), for code that must run
without either library."""

from __future__ import annotations

import numpy as np

from zoo.array_namespace import NumpyOps
from zoo.attention import _algebra, _docs
from zoo.docstrings import shared_sections

__all__ = [
    "cross_attention",
    "multi_head_attention",
    "scaled_dot_product_attention",
    "self_attention",
]

_XP = NumpyOps()
_DOC_FIELDS = {"array": "ndarray", "float_mask": " (as torch's ``attn_mask``)"}


@shared_sections(_docs.SCALED_DOT_PRODUCT_ATTENTION, **_DOC_FIELDS)
def scaled_dot_product_attention(
    q, k, v, mask=None, bias=None, scale=None, causal=False, return_weights=False
):
    r"""``softmax(q k^T * scale + bias) v`` with masking.

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


@shared_sections(_docs.SELF_ATTENTION, **_DOC_FIELDS)
def self_attention(params, x, *, num_heads, **options):
    """Multi-head self-attention over ``x`` (..., L, dim).

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


@shared_sections(_docs.CROSS_ATTENTION, **_DOC_FIELDS)
def cross_attention(params, x, context, *, num_heads, **options):
    """Multi-head cross-attention: queries from ``x``, keys and values from ``context``.

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
