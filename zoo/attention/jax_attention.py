"""Scaled dot-product and multi-head attention in JAX (the twin of ``torch_attention``).

Shapes follow ``torch_attention`` (and ``torch.nn.functional.scaled_dot_product_attention``): the
last two axes are ``(sequence, features)`` and every axis before them (batch, heads) broadcasts.
``jax.nn.dot_product_attention`` puts heads after the sequence axis instead (``B T N H``).

Every function is pure and jit-compatible; see :func:`scaled_dot_product_attention` for how the
fully-masked-query check behaves under ``jax.jit``.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from zoo.array_namespace import JaxOps
from zoo.attention import _algebra, _checks, _docs
from zoo.docstrings import shared_sections

try:
    import equinox as eqx
except ImportError:  # pragma: no cover - equinox is a dependency; plain dicts still work
    eqx = None

__all__ = [
    "MultiHeadAttention",
    "cross_attention",
    "init_params",
    "multi_head_attention",
    "scaled_dot_product_attention",
    "self_attention",
]

_XP = JaxOps()
_DOC_FIELDS = {"array": "Array", "float_mask": " (as torch's ``attn_mask``)"}


@shared_sections(_docs.SCALED_DOT_PRODUCT_ATTENTION, **_DOC_FIELDS)
def scaled_dot_product_attention(
    q, k, v, mask=None, bias=None, scale=None, causal=False, return_weights=False
):
    r"""``softmax(q k^T * scale + bias) v`` with masking.

    Raises
    ------
    ValueError
        For shapes that do not fit, and, when called eagerly, when a query has every key hidden
        (by ``mask``, a ``-inf`` bias or ``causal``). Under ``jax.jit`` (or ``vmap``, ``grad``)
        the scores are abstract and the check cannot run: such a query then gets NaN weights and
        a NaN output, so the error still shows rather than a silent average (unlike
        ``jax.nn.dot_product_attention``, which masks with a large finite number and returns the
        mean of the values).

    Examples
    --------
    Two queries over three keys (no batch axis):

    >>> import jax
    >>> import jax.numpy as jnp
    >>> from zoo.attention import jax_attention as attn
    >>> q = jnp.array([[1.0, 0.0], [0.0, 1.0]])
    >>> k = jnp.array([[1.0, 0.0], [0.0, 1.0], [1.0, 1.0]])
    >>> v = jnp.array([[1.0], [2.0], [3.0]])
    >>> out, weights = attn.scaled_dot_product_attention(q, k, v, return_weights=True)
    >>> out.shape, weights.shape
    ((2, 1), (2, 3))
    >>> [round(float(w), 4) for w in weights[0]]
    [0.4011, 0.1978, 0.4011]
    >>> float(attn.scaled_dot_product_attention(q, k, v, causal=True)[0, 0])
    1.0

    A query with every key masked is an error when called eagerly, and a NaN under
    ``jax.jit``:

    >>> mask = jnp.array([[True, True, False], [False, False, False]])
    >>> attn.scaled_dot_product_attention(q, k, v, mask=mask)
    Traceback (most recent call last):
    ...
    ValueError: expected every query to attend to at least one key; got query 1 with ...
    >>> masked = jax.jit(lambda q, k, v, m: attn.scaled_dot_product_attention(q, k, v, mask=m))
    >>> jnp.isnan(masked(q, k, v, mask)[:, 0]).tolist()
    [False, True]
    """
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
    >>> import jax
    >>> from zoo.attention import jax_attention as attn
    >>> params = attn.init_params(8, num_heads=2, key=jax.random.key(0))
    >>> x = jax.random.normal(jax.random.key(1), (3, 5, 8))  # (batch, sequence, features)
    >>> out, weights = attn.multi_head_attention(params, x, num_heads=2, return_weights=True)
    >>> out.shape, weights.shape
    ((3, 5, 8), (3, 2, 5, 5))

    Pure, so it compiles with ``jax.jit`` (``num_heads`` is static):

    >>> compiled = jax.jit(attn.multi_head_attention, static_argnames="num_heads")
    >>> bool(jax.numpy.allclose(compiled(params, x, num_heads=2), out, atol=1e-6))
    True
    """
    return _algebra.multi_head_attention(
        params, query, key, value, num_heads, mask, bias, scale, causal, return_weights, _XP
    )


@shared_sections(_docs.SELF_ATTENTION, **_DOC_FIELDS)
def self_attention(params, x, *, num_heads, **options):
    """Multi-head self-attention: queries, keys and values all come from ``x`` (..., L, dim).

    Examples
    --------
    >>> import jax
    >>> from zoo.attention import jax_attention as attn
    >>> params = attn.init_params(8, num_heads=2, key=jax.random.key(0))
    >>> x = jax.random.normal(jax.random.key(1), (3, 5, 8))
    >>> attn.self_attention(params, x, num_heads=2, causal=True).shape
    (3, 5, 8)
    """
    return multi_head_attention(params, x, x, x, num_heads=num_heads, **options)


@shared_sections(_docs.CROSS_ATTENTION, **_DOC_FIELDS)
def cross_attention(params, x, context, *, num_heads, **options):
    """Multi-head cross-attention: queries from ``x`` (..., Lq, dim), keys and values from
    ``context`` (..., Lk, context_dim).

    Examples
    --------
    >>> import jax
    >>> from zoo.attention import jax_attention as attn
    >>> params = attn.init_params(8, num_heads=2, kdim=4, vdim=4, key=jax.random.key(0))
    >>> x = jax.random.normal(jax.random.key(1), (3, 5, 8))
    >>> context = jax.random.normal(jax.random.key(2), (3, 7, 4))
    >>> out, weights = attn.cross_attention(params, x, context, num_heads=2, return_weights=True)
    >>> out.shape, weights.shape
    ((3, 5, 8), (3, 2, 5, 7))
    """
    return multi_head_attention(params, x, context, context, num_heads=num_heads, **options)


#: ``init_params``' own parameters, for its docstring.
_INIT_DRAW = """\
key : jax.random key
    Draws the weights.
dtype : dtype, optional
    Default: JAX's default float (float64 when its 64-bit mode is on)."""


@shared_sections(_docs.INIT_PARAMS, draw=_INIT_DRAW, **_DOC_FIELDS)
def init_params(
    embed_dim, num_heads, kdim=None, vdim=None, out_dim=None, bias=True, *, key, dtype=None
):
    """Random multi-head parameters: Xavier-uniform weights and zero biases, as a dict of arrays.

    ``kdim``, ``vdim`` (input sizes of keys and values) default to ``embed_dim``, and so does
    ``out_dim``; ``key`` is a ``jax.random`` key.

    Examples
    --------
    >>> import jax
    >>> from zoo.attention import jax_attention as attn
    >>> params = attn.init_params(8, 2, vdim=4, bias=False, key=jax.random.key(0))
    >>> {name: value.shape for name, value in params.items()}
    {'q_weight': (8, 8), 'k_weight': (8, 8), 'v_weight': (8, 4), 'out_weight': (8, 8)}
    """
    dtype = dtype or jnp.zeros(()).dtype

    def uniform(index, shape, bound):
        # The same four keys at every call: weight ``index`` gets the ``index``-th.
        subkey = jax.random.split(key, 4)[index]
        return jax.random.uniform(subkey, shape, dtype=dtype, minval=-bound, maxval=bound)

    def zeros(shape):
        return jnp.zeros(shape, dtype=dtype)

    return _algebra.init_params(embed_dim, num_heads, kdim, vdim, out_dim, bias, uniform, zeros)


if eqx is not None:

    class MultiHeadAttention(eqx.Module):
        """Multi-head attention with learned projections, as an ``equinox.Module``.

        Parameters
        ----------
        embed_dim : int
            Size of the queries (input and projected) and of the output unless ``out_dim`` is
            given.
        num_heads : int
            Divides ``embed_dim``.
        kdim, vdim, out_dim : int, optional
            Input sizes of keys and values and the output size; default ``embed_dim``.
        bias : bool
            Whether the four projections have biases.
        key : jax.random key, optional
            Draws the initial parameters (needed unless ``params`` is given).
        params : dict of str to array, optional
            Use these parameters (named as :func:`multi_head_attention`'s dict, e.g.
            ``torch_attention.MultiHeadAttention``'s ``named_parameters()`` as arrays); the sizes
            are then read from them.
        dtype : dtype, optional
            Default: JAX's default float, or that of ``params``.

        Attributes
        ----------
        num_heads : int
            As given (a static field).
        q_weight : jax.Array
            The query projection, (embed_dim, query_dim), in ``nn.Linear``'s (out, in) layout.
        k_weight : jax.Array
            The key projection, (embed_dim, key_dim).
        v_weight : jax.Array
            The value projection, (embed_dim, value_dim).
        out_weight : jax.Array
            The output projection, (out_dim, embed_dim).
        q_bias : jax.Array or None
            The query projection's bias, (embed_dim,), or None.
        k_bias : jax.Array or None
            The key projection's bias, (embed_dim,), or None.
        v_bias : jax.Array or None
            The value projection's bias, (embed_dim,), or None.
        out_bias : jax.Array or None
            The output projection's bias, (out_dim,), or None.

        Raises
        ------
        ValueError
            Neither ``params`` nor both ``embed_dim`` and ``key``; ``params`` without
            ``q_weight``, with an unknown key or with shapes that do not fit together;
            ``num_heads`` that does not divide ``embed_dim``.

        Examples
        --------
        >>> import jax
        >>> from zoo.attention import jax_attention as attn
        >>> module = attn.MultiHeadAttention(8, 2, key=jax.random.key(0))
        >>> x = jax.random.normal(jax.random.key(1), (3, 5, 8))
        >>> module(x).shape  # self-attention
        (3, 5, 8)
        >>> module(x, jax.random.normal(jax.random.key(2), (3, 7, 8))).shape  # cross-attention
        (3, 5, 8)

        The parameters of the torch module move over unchanged:

        >>> import numpy as np
        >>> import torch
        >>> from zoo.attention import torch_attention
        >>> torch_module = torch_attention.MultiHeadAttention(8, 2)
        >>> params = {name: p.detach().numpy() for name, p in torch_module.named_parameters()}
        >>> jax_module = attn.MultiHeadAttention(num_heads=2, params=params)
        >>> x = torch.randn(3, 5, 8)
        >>> expected = torch_module(x).detach().numpy()
        >>> np.allclose(np.asarray(jax_module(x.numpy())), expected, atol=1e-5)
        True
        """

        q_weight: jax.Array
        k_weight: jax.Array
        v_weight: jax.Array
        out_weight: jax.Array
        q_bias: jax.Array | None
        k_bias: jax.Array | None
        v_bias: jax.Array | None
        out_bias: jax.Array | None
        num_heads: int = eqx.field(static=True)

        def __init__(
            self,
            embed_dim=None,
            num_heads=1,
            kdim=None,
            vdim=None,
            out_dim=None,
            bias=True,
            *,
            key=None,
            params=None,
            dtype=None,
        ):
            if params is None:
                if key is None or embed_dim is None:
                    raise ValueError(
                        "expected embed_dim and key (to draw the parameters) or params; got "
                        f"embed_dim={embed_dim!r}, key={key!r}, params=None."
                    )
                params = init_params(
                    embed_dim, num_heads, kdim, vdim, out_dim, bias, key=key, dtype=dtype
                )
            params = {k: jnp.asarray(v, dtype=dtype) for k, v in params.items() if v is not None}
            w = params.get("q_weight")
            if w is None:
                raise ValueError(f"expected params with a 'q_weight'; got keys {sorted(params)}.")
            _checks.check_params(
                params,
                w.shape[1],
                params.get("k_weight", w).shape[1],
                params.get("v_weight", w).shape[1],
                num_heads,
            )
            self.num_heads = int(num_heads)
            for name in _checks.PARAM_NAMES:
                setattr(self, name, params.get(name))

        def params(self) -> dict:
            """The parameters as :func:`multi_head_attention` takes them (biases that are None
            left out)."""
            return {
                name: getattr(self, name)
                for name in _checks.PARAM_NAMES
                if getattr(self, name) is not None
            }

        def __call__(self, query, key=None, value=None, **options):
            """Self-attention with ``key=None``, cross-attention otherwise; ``options`` as in
            :func:`multi_head_attention` (``mask``, ``bias``, ``scale``, ``causal``,
            ``return_weights``)."""
            return multi_head_attention(
                self.params(), query, key, value, num_heads=self.num_heads, **options
            )

else:  # pragma: no cover

    def MultiHeadAttention(*args, **kwargs):  # noqa: N802
        raise ImportError(
            "jax_attention.MultiHeadAttention needs equinox (pip install equinox); "
            "multi_head_attention(params, ...) works with a plain dict of arrays."
        )
