"""The sections of the attention functions' docstrings that the torch, JAX and numpy modules share
(``zoo.docstrings.shared_sections``): ``$array`` is the module's array type, ``$float_mask`` where
an additive mask comes from, ``$draw`` the entries of ``init_params``' own parameters. Each
function's summary, ``Raises`` (where it differs) and ``Examples`` stay in its own module.
"""

from string import Template

SCALED_DOT_PRODUCT_ATTENTION = """
    Parameters
    ----------
    q : $array, shape (..., Lq, E)
        Queries.
    k : $array, shape (..., Lk, E)
        Keys.
    v : $array, shape (..., Lk, Ev)
        Values. The leading (batch, head) axes of ``q``, ``k`` and ``v`` broadcast.
    mask : $array, broadcastable to (..., Lq, Lk), optional
        Boolean: ``True`` where a query may attend to a key. A floating-point mask is an additive
        bias instead$float_mask.
    bias : $array, broadcastable to (..., Lq, Lk), optional
        Added to the scaled scores (``-inf`` hides a key).
    scale : float, optional
        Multiplies ``q k^T``; default ``1 / sqrt(E)``.
    causal : bool
        Query ``i`` attends only to keys ``j <= i`` (top-left aligned, as torch and JAX do).
    return_weights : bool
        Also return the attention weights.

    Returns
    -------
    out : $array, shape (..., Lq, Ev)
    weights : $array, shape (..., Lq, Lk)
        Only with ``return_weights=True``; each row sums to one.
"""

MULTI_HEAD_ATTENTION = """
    Parameters
    ----------
    params : dict of str to $array
        ``q_weight`` (embed_dim, query_dim), ``k_weight`` (embed_dim, key_dim), ``v_weight``
        (embed_dim, value_dim), ``out_weight`` (out_dim, embed_dim) and optionally the biases
        ``q_bias``, ``k_bias``, ``v_bias`` (embed_dim,) and ``out_bias`` (out_dim,).
    query : $array, shape (..., Lq, query_dim)
    key : $array, shape (..., Lk, key_dim), optional
        Default ``query`` (self-attention).
    value : $array, shape (..., Lk, value_dim), optional
        Default ``key``.
    num_heads : int
        Divides ``embed_dim``; each head has ``embed_dim // num_heads`` features.
    mask, bias : $array, optional
        Broadcastable to ``(..., num_heads, Lq, Lk)``. As in :func:`scaled_dot_product_attention`;
        the head axis is the third from last, so a per-example mask of shape (B, Lq, Lk) is passed
        as ``mask[:, None]``.
    scale : float, optional
        Default ``1 / sqrt(embed_dim // num_heads)``.
    causal, return_weights : bool
        As in :func:`scaled_dot_product_attention`.

    Returns
    -------
    out : $array, shape (..., Lq, out_dim)
    weights : $array, shape (..., num_heads, Lq, Lk)
        Only with ``return_weights=True``: every head's weights (not averaged).

    Raises
    ------
    ValueError
        ``params`` without a weight or with an unknown key, a weight or bias of another shape
        than the inputs need, ``num_heads`` that does not divide ``embed_dim``, and what
        :func:`scaled_dot_product_attention` raises.
"""

#: The options that self- and cross-attention pass on, and what they return and raise.
_OPTIONS = """
    num_heads : int
        Divides ``embed_dim``.
    **options
        ``mask``, ``bias``, ``scale``, ``causal``, ``return_weights``, as in
        :func:`multi_head_attention`.

    Returns
    -------
    out : $array, shape (..., $lq, out_dim)
    weights : $array, shape (..., num_heads, $lq, $lk)
        Only with ``return_weights=True``.

    Raises
    ------
    ValueError
        As :func:`multi_head_attention`.
"""

SELF_ATTENTION = """
    Parameters
    ----------
    params : dict of str to $array
        The projections, as in :func:`multi_head_attention` (``query_dim = key_dim =
        value_dim = dim``).
    x : $array, shape (..., L, dim)
        The sequence.""" + Template(_OPTIONS).safe_substitute(lq="L", lk="L")

CROSS_ATTENTION = """
    Parameters
    ----------
    params : dict of str to $array
        The projections, as in :func:`multi_head_attention` (``query_dim = dim``, ``key_dim =
        value_dim = context_dim``).
    x : $array, shape (..., Lq, dim)
        The queries' sequence.
    context : $array, shape (..., Lk, context_dim)
        The sequence the queries attend to.""" + Template(_OPTIONS).safe_substitute(
    lq="Lq", lk="Lk"
)

INIT_PARAMS = """
    Parameters
    ----------
    embed_dim : int
        The size of the queries (input and projected), and of the output by default.
    num_heads : int
        Divides ``embed_dim``.
    kdim, vdim : int, optional
        Input sizes of keys and values; default ``embed_dim``.
    out_dim : int, optional
        Output size; default ``embed_dim``.
    bias : bool
        Whether to include the four (zero) biases.
    $draw

    Returns
    -------
    dict of str to $array
        ``q_weight`` (embed_dim, embed_dim), ``k_weight`` (embed_dim, kdim), ``v_weight``
        (embed_dim, vdim), ``out_weight`` (out_dim, embed_dim) in ``nn.Linear``'s (out, in)
        layout, and with ``bias=True`` ``q_bias``, ``k_bias``, ``v_bias`` (embed_dim,) and
        ``out_bias`` (out_dim,).

    Raises
    ------
    ValueError
        ``num_heads`` is not a positive int, or does not divide ``embed_dim``.
"""
