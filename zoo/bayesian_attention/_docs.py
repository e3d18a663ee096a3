"""The sections of the Bayesian attention functions' docstrings that the torch and JAX modules share
(``zoo.docstrings.shared_sections``): ``$array`` is the module's array type (``Tensor`` or
``array``), ``$rng`` the name of its source of noise (``generator`` or ``key``). Each function's
summary, and its ``Raises`` where it differs, stay in its own module.
"""

ATTENTION_LOGITS = """
    Parameters
    ----------
    q : $array, shape (..., Lq, D)
    k : $array, shape (..., Lk, D)

    Returns
    -------
    $array, shape (..., Lq, Lk)
"""

MASKED_LOG_SOFTMAX = """
    Parameters
    ----------
    logits : $array, shape (..., Lq, Lk)
    mask : bool $array, broadcastable to ``logits``, optional
        True where a key is visible.

    Returns
    -------
    $array, the broadcast shape of ``logits`` and ``mask``
"""

WEIBULL_LOG_SCALE = """
    Parameters
    ----------
    log_p : $array, shape (..., Lk)
        Log posterior means.
    concentration : float or $array broadcastable to ``log_p``
        The Weibull shape :math:`k > 0`.
"""

WEIBULL_LOG_WEIGHTS = """
    Parameters
    ----------
    log_p : $array, shape (..., Lk)
        Log posterior means :math:`\\log E[S]`.
    concentration : float or $array
        The Weibull shape :math:`k > 0`.
    u : $array broadcastable with ``log_p``
        Uniform noise in (0, 1), clamped to ``[tiny, 1 - eps]`` of its dtype.

    Returns
    -------
    $array, the broadcast shape of ``log_p`` and ``u``
"""

LOGNORMAL_LOG_WEIGHTS = """
    Parameters
    ----------
    log_p : $array, shape (..., Lk)
        Log posterior means :math:`\\log E[S]`.
    sigma : float or $array
        Standard deviation of :math:`\\log S`, positive.
    eps : $array broadcastable with ``log_p``
        Standard normal noise.
"""

CONTEXTUAL_LOG_WEIGHTS = """
    Parameters
    ----------
    k : $array, shape (..., Lk, D)
    mask : bool $array, broadcastable to (..., Lq, Lk), optional

    Returns
    -------
    $array, shape (..., 1, Lk) without a mask, else the broadcast shape with ``mask``;
    ``-inf`` on hidden keys.
"""

ATTENTION_WEIGHTS = """
    Parameters
    ----------
    logits : $array, shape (..., Lq, Lk)
        Attention logits; the posterior mean of :math:`S` is their softmax over visible keys.
    mask : bool $array, broadcastable to ``logits``, optional
        True where a key is visible; every query must see at least one key.
    attention : {"softmax", "weibull", "lognormal"}
    concentration : float or $array
        Weibull shape :math:`k > 0`; larger is less noisy (coefficient of variation about
        :math:`1.28/k`).
    sigma : float or $array
        Standard deviation of :math:`\\log S` for ``"lognormal"``, positive.
    prior_alpha, prior_beta : float or $array broadcastable to ``logits``
        Gamma prior of ``"weibull"`` (shape, rate), positive. Like ``prior_mean``, may come
        from a contextual prior (``ContextualPrior(k, mask)``): values on hidden keys are
        ignored (and their gradients are zero).
    prior_mean : float or $array broadcastable to ``logits``, optional
        Prior mean of :math:`S` for ``"lognormal"``, positive; default ``1 / (number of visible
        keys)``, the uniform attention.
    prior_sigma : float or $array broadcastable to ``logits``
        Prior standard deviation of :math:`\\log S` for ``"lognormal"``, positive.
    mode : {"train", "eval"}
        ``"train"`` draws one sample; ``"eval"`` returns the posterior-mean weights (the
        softmax) or, with ``num_samples > 0``, the average of that many draws.
    num_samples : int
        0 or 1 in ``"train"``; >= 0 in ``"eval"``.
    noise : $array, optional
        The noise to use instead of drawing it: uniform ``u`` in (0, 1) for ``"weibull"``,
        standard normal for ``"lognormal"``; shape ``logits.shape`` in ``"train"``,
        ``(num_samples,) + logits.shape`` in ``"eval"``. Ignored when nothing is drawn.
    $rng : $rng_type, optional
        $rng_meaning

    Returns
    -------
    weights : $array, shape (..., Lq, Lk)
        Normalised weights, zero on hidden keys; differentiable in ``logits`` (pathwise).
    kl : $array, shape (..., Lq)
        Analytic ``KL(q(S) || p(S))`` summed over the visible keys (the same in both modes).
"""

BAYESIAN_ATTENTION = """
    Parameters
    ----------
    q : $array, shape (..., Lq, D)
    k : $array, shape (..., Lk, D)
    v : $array, shape (..., Lk, Dv)
    mask : bool $array, broadcastable to (..., Lq, Lk), optional
        True where a key is visible to a query; every query must see at least one key.
    attention : {"softmax", "weibull", "lognormal"}
    concentration, sigma
        As in :func:`attention_weights`.
    prior : {"fixed", "contextual"}
        ``"fixed"``: ``prior_alpha`` / ``prior_mean`` as given. ``"contextual"``:
        ``prior_net(k, mask)`` gives :math:`\\alpha` (``"weibull"``) or the prior mean
        (``"lognormal"``); ``prior_beta`` and ``prior_sigma`` stay fixed.
    prior_net : ContextualPrior, optional
        Required with ``prior="contextual"``, not allowed with ``"fixed"``.
    prior_alpha, prior_beta, prior_mean, prior_sigma, mode, num_samples, noise, $rng
        As in :func:`attention_weights`.

    Returns
    -------
    BamOutput
        ``output`` (..., Lq, Dv) ``= weights @ v``, ``weights`` (..., Lq, Lk), ``kl`` (..., Lq).

    Raises
    ------
    ValueError
        As :func:`attention_weights`, and for an unknown ``prior``, a missing or unexpected
        ``prior_net``, or shapes of q, k, v that do not fit.
"""
