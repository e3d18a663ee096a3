r"""Scaled dot-product and multi-head attention for torch, JAX and numpy: the algebra is written
once (``_algebra``, against ``zoo.array_namespace``); each module converts inputs as its library
does.

``torch_attention``, ``jax_attention`` and ``numpy_attention`` define the same functions with the
same arguments and shape conventions (the last two axes are ``(sequence, features)``; every axis
before them is a batch or head axis and broadcasts)::

    scaled_dot_product_attention(q, k, v, mask=None, bias=None, scale=None, causal=False,
                                 return_weights=False)
    multi_head_attention(params, query, key=None, value=None, *, num_heads, ...)
    self_attention(params, x, *, num_heads, ...)
    cross_attention(params, x, context, *, num_heads, ...)

and the torch and JAX modules ``init_params(...)`` (random projection weights, a dict of arrays).

``torch_attention.MultiHeadAttention`` is an ``nn.Module`` and
``jax_attention.MultiHeadAttention`` an ``equinox.Module`` (when equinox is installed) holding the
same parameters under the same names (``q_weight``, ``q_bias``, ``k_weight``, ``k_bias``,
``v_weight``, ``v_bias``, ``out_weight``, ``out_bias``; weights in ``nn.Linear``'s ``(out, in)``
layout), so a parameter dict moves between them unchanged.

Attention reads as inference in a mixture: ``softmax(q K^T + b)`` is the posterior over ``Lk``
components given an observation whose log-likelihood under component ``k`` is linear in a feature
vector ``q``, and ``softmax(...) V`` the posterior mean of ``V``. ``zoo.bernoulli_mixture`` computes
its posterior predictive exactly this way.

The submodules import their array library; import the one you need::

    from zoo.attention import torch_attention as attn
"""

__all__ = ["jax_attention", "numpy_attention", "torch_attention"]
