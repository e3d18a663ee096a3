r"""Bayesian attention modules in JAX (Fan, Zhang, Chen & Zhou, NeurIPS 2020).

The twin of :mod:`zoo.bayesian_attention.torch_bam`: the same functions, arguments and
numbers (for the same noise and parameters), with a PRNG ``key`` in place of torch's
``generator`` and :class:`ContextualPrior` an ``equinox.Module``. See that module for the
model. Everything is pure and jit-compatible.

Argument checks read concrete values; under ``jax.jit`` traced values cannot be read, so
``concentration``, ``sigma`` and the prior parameters go unchecked there, and a mask that hides
every key of a query raises an ``equinox`` runtime error (``eqx.error_if``) instead of a
``ValueError``. Importing this module imports
:mod:`zoo.bayesian_attention.numpyro_distributions` (which registers NumPyro KL rules).
"""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from zoo.array_namespace import JaxOps
from zoo.bayesian_attention import _algebra, numpyro_distributions
from zoo.bayesian_attention._common import (
    ATTENTION_TYPES,
    MODES,
    PRIOR_TYPES,
    BamOutput,
    check_choice,
    check_mask_rows,
    check_num_samples,
    check_positive,
    check_prior_param,
    check_shapes,
)
from zoo.bayesian_attention.numpyro_distributions import (
    LogScaleWeibull,
    clamp_uniform,
    kl_lognormal_lognormal,
    kl_weibull_gamma,
    normal_noise,
    uniform_noise,
)

__all__ = [
    "ATTENTION_TYPES",
    "BamOutput",
    "ContextualPrior",
    "LogScaleWeibull",
    "MODES",
    "PRIOR_TYPES",
    "attention_logits",
    "attention_weights",
    "bayesian_attention",
    "kl_lognormal_lognormal",
    "kl_weibull_gamma",
    "lognormal_log_weights",
    "masked_log_softmax",
    "weibull_log_scale",
    "weibull_log_weights",
]

_XP = JaxOps()
_MASK_MESSAGE = "expected a mask that leaves every query at least one visible key"


# ------------------------------------------------------------------------------ building blocks


def attention_logits(q, k):
    r"""Scaled dot-product logits :math:`q k^\top / \sqrt{D}`.

    Parameters
    ----------
    q : array, shape (..., Lq, D)
    k : array, shape (..., Lk, D)

    Returns
    -------
    array, shape (..., Lq, Lk)
    """
    return _algebra.attention_logits(q, k, _XP)


def masked_log_softmax(logits, mask=None):
    """Log-softmax over keys (the last axis) of the visible keys; ``-inf`` on hidden keys.

    Parameters
    ----------
    logits : array, shape (..., Lq, Lk)
    mask : bool array, broadcastable to ``logits``, optional
        True where a key is visible.

    Returns
    -------
    array, the broadcast shape of ``logits`` and ``mask``
    """
    return _algebra.masked_log_softmax(logits, mask, _XP)


def weibull_log_scale(log_p, concentration):
    r""":math:`\log\lambda = \log p - \log\Gamma(1 + 1/k)`, the Weibull scale with mean ``p``.

    Parameters
    ----------
    log_p : array, shape (..., Lk)
        Log posterior means.
    concentration : float or array broadcastable to ``log_p``
        The Weibull shape :math:`k > 0`.
    """
    return _algebra.weibull_log_scale(log_p, jnp.asarray(concentration, dtype=log_p.dtype), _XP)


def weibull_log_weights(log_p, concentration, u):
    r"""Unnormalised log weights :math:`\log S = \log\lambda + \frac1k \log(-\log(1 - u))`.

    Parameters
    ----------
    log_p : array, shape (..., Lk)
        Log posterior means :math:`\log E[S]`.
    concentration : float or array
        The Weibull shape :math:`k > 0`.
    u : array broadcastable with ``log_p``
        Uniform noise in (0, 1), clamped to ``[tiny, 1 - eps]`` of its dtype.

    Returns
    -------
    array, the broadcast shape of ``log_p`` and ``u``
    """
    k = jnp.asarray(concentration, dtype=log_p.dtype)
    return _algebra.weibull_log_weights(log_p, k, clamp_uniform(u), _XP)


def lognormal_log_weights(log_p, sigma, eps):
    r"""Unnormalised log weights :math:`\log S = \log p - \sigma^2/2 + \sigma\varepsilon`.

    Parameters
    ----------
    log_p : array, shape (..., Lk)
        Log posterior means :math:`\log E[S]`.
    sigma : float or array
        Standard deviation of :math:`\log S`, positive.
    eps : array broadcastable with ``log_p``
        Standard normal noise.
    """
    sigma = jnp.asarray(sigma, dtype=log_p.dtype)
    return _algebra.lognormal_log_weights(log_p, sigma, eps)


class ContextualPrior(eqx.Module):
    r"""The contextual prior: which keys matter, from the keys alone.

    A two-layer network ``Linear(D, H) -> ReLU -> Linear(H, 1)`` scores each key; a softmax over
    the visible keys gives the Gamma shape :math:`\alpha` (Weibull attention) or the prior mean
    ``m`` (log-normal attention) of every query. The weights have torch's layout (``(out,
    in)``), so a torch :class:`zoo.bayesian_attention.torch_bam.ContextualPrior`'s state can be
    copied in with ``eqx.tree_at``.

    Parameters
    ----------
    key_dim : int
        ``D``, the last dimension of the keys.
    hidden_dim : int, optional
        ``H``; defaults to ``key_dim``.
    key : jax.random.PRNGKey
        Initialisation key (keyword-only).
    dtype : optional
        Parameter dtype (equinox's default floating dtype if omitted).
    """

    hidden: eqx.nn.Linear
    out: eqx.nn.Linear

    def __init__(self, key_dim: int, hidden_dim: int | None = None, *, key, dtype=None):
        hidden_dim = key_dim if hidden_dim is None else hidden_dim
        for name, value in (("key_dim", key_dim), ("hidden_dim", hidden_dim)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"expected {name} to be a positive int; got {value!r}.")
        k1, k2 = jax.random.split(key)
        self.hidden = eqx.nn.Linear(key_dim, hidden_dim, dtype=dtype, key=k1)
        self.out = eqx.nn.Linear(hidden_dim, 1, dtype=dtype, key=k2)

    def scores(self, k):
        """Unnormalised key scores, shape (..., Lk), from keys of shape (..., Lk, D)."""
        h = jax.nn.relu(k @ self.hidden.weight.T + self.hidden.bias)
        return (h @ self.out.weight.T + self.out.bias)[..., 0]

    def log_weights(self, k, mask=None):
        """Log-softmax of the scores over the visible keys.

        Parameters
        ----------
        k : array, shape (..., Lk, D)
        mask : bool array, broadcastable to (..., Lq, Lk), optional

        Returns
        -------
        array, shape (..., 1, Lk) without a mask, else the broadcast shape with ``mask``;
        ``-inf`` on hidden keys.
        """
        return masked_log_softmax(self.scores(k)[..., None, :], mask)

    def __call__(self, k, mask=None):
        """Prior weights (softmax over visible keys, zero on hidden ones); see log_weights."""
        return jnp.exp(self.log_weights(k, mask))


# ------------------------------------------------------------------------------ checks


def _concrete(x) -> np.ndarray | None:
    """``x`` as numpy, or None if it is being traced (and cannot be read)."""
    if x is None or isinstance(x, jax.core.Tracer):
        return None
    return np.asarray(x, dtype=float)


def _concrete_mask(mask) -> np.ndarray | None:
    if mask is None or isinstance(mask, jax.core.Tracer):
        return None
    return np.asarray(mask)


def _prepare_mask(mask, logits):
    """Broadcast and check the mask; returns ``(mask, logits)`` (logits carry a runtime check
    when the mask is traced)."""
    if mask is None:
        return None, logits
    dtype = getattr(mask, "dtype", None)
    if dtype is None or not jnp.issubdtype(dtype, jnp.bool_):
        got = f"dtype {dtype}" if dtype is not None else type(mask).__name__
        raise ValueError(f"expected mask to be a bool array (True = visible key); got {got}.")
    try:
        mask = jnp.broadcast_to(mask, logits.shape)
    except ValueError:
        raise ValueError(
            f"expected a mask broadcastable to the logits' shape {tuple(logits.shape)} "
            f"(..., Lq, Lk); got shape {tuple(mask.shape)}."
        ) from None
    if isinstance(mask, jax.core.Tracer):
        empty = jnp.any(~jnp.any(mask, axis=-1))
        logits = eqx.error_if(logits, empty, _MASK_MESSAGE + "; got a query whose mask hides all.")
    else:
        check_mask_rows(np.asarray(mask))
    return mask, logits


def _check_common(attention, concentration, sigma, mode, num_samples):
    check_choice("attention", attention, ATTENTION_TYPES)
    check_choice("mode", mode, MODES)
    check_positive("concentration", _concrete(concentration), "the Weibull shape k")
    check_positive("sigma", _concrete(sigma), "the log-normal scale")
    return check_num_samples(num_samples, mode)


# ------------------------------------------------------------------------------ the site


def _weights_and_kl(
    logits,
    mask,
    attention,
    concentration,
    sigma,
    prior_log_param,
    prior_beta,
    prior_sigma,
    mode,
    num_samples,
    noise,
    key,
):
    """The checked core (``_algebra.weights_and_kl``) with JAX's noise."""
    dtype = logits.dtype

    def draw_noise(shape):
        if key is None:
            raise ValueError(
                f"expected a PRNG key (key=...) to draw {attention} attention weights in "
                f"mode={mode!r}, or the noise itself (noise=...); got neither."
            )
        draw = uniform_noise if attention == "weibull" else normal_noise
        return draw(key, shape, dtype)

    return _algebra.weights_and_kl(
        logits,
        mask,
        attention,
        jnp.asarray(concentration, dtype=dtype),
        sigma,
        prior_log_param,
        prior_beta,
        prior_sigma,
        mode,
        num_samples,
        noise,
        draw_noise,
        numpyro_distributions,
        _XP,
    )


def attention_weights(
    logits,
    mask=None,
    *,
    attention: str = "softmax",
    concentration=10.0,
    sigma=0.1,
    prior_alpha=1.0,
    prior_beta=1.0,
    prior_mean=None,
    prior_sigma=1.0,
    mode: str = "train",
    num_samples: int = 0,
    noise=None,
    key=None,
):
    r"""Attention weights and KL term from logits, given the prior parameters.

    Parameters
    ----------
    logits : array, shape (..., Lq, Lk)
        Attention logits; the posterior mean of :math:`S` is their softmax over visible keys.
    mask : bool array, broadcastable to ``logits``, optional
        True where a key is visible; every query must see at least one key.
    attention : {"softmax", "weibull", "lognormal"}
    concentration : float or array
        Weibull shape :math:`k > 0`; larger is less noisy (coefficient of variation about
        :math:`1.28/k`).
    sigma : float or array
        Standard deviation of :math:`\log S` for ``"lognormal"``, positive.
    prior_alpha, prior_beta : float or array broadcastable to ``logits``
        Gamma prior of ``"weibull"`` (shape, rate), positive. Like ``prior_mean``, may come
        from a contextual prior (``ContextualPrior(k, mask)``): values on hidden keys are
        ignored (and their gradients are zero).
    prior_mean : float or array broadcastable to ``logits``, optional
        Prior mean of :math:`S` for ``"lognormal"``, positive; default ``1 / (number of visible
        keys)``, the uniform attention.
    prior_sigma : float or array broadcastable to ``logits``
        Prior standard deviation of :math:`\log S` for ``"lognormal"``, positive.
    mode : {"train", "eval"}
        ``"train"`` draws one sample; ``"eval"`` returns the posterior-mean weights (the
        softmax) or, with ``num_samples > 0``, the average of that many draws.
    num_samples : int
        0 or 1 in ``"train"``; >= 0 in ``"eval"``.
    noise : array, optional
        The noise to use instead of drawing it: uniform ``u`` in (0, 1) for ``"weibull"``,
        standard normal for ``"lognormal"``; shape ``logits.shape`` in ``"train"``,
        ``(num_samples,) + logits.shape`` in ``"eval"``. Ignored when nothing is drawn.
    key : jax.random.PRNGKey, optional
        Needed to draw the noise when ``noise`` is None.

    Returns
    -------
    weights : array, shape (..., Lq, Lk)
        Normalised weights, zero on hidden keys; differentiable in ``logits`` (pathwise).
    kl : array, shape (..., Lq)
        Analytic ``KL(q(S) || p(S))`` summed over the visible keys (the same in both modes).

    Raises
    ------
    ValueError
        For an unknown ``attention`` or ``mode``, non-positive ``concentration``, ``sigma`` or
        prior parameters, a mask hiding every key of a query, noise of the wrong shape, or a
        draw without ``key`` or ``noise``.
    """
    num_samples = _check_common(attention, concentration, sigma, mode, num_samples)
    logits = jnp.asarray(logits)
    mask, logits = _prepare_mask(mask, logits)
    visible = _concrete_mask(mask)
    for name, value in (
        ("prior_alpha", prior_alpha),
        ("prior_beta", prior_beta),
        ("prior_mean", prior_mean),
        ("prior_sigma", prior_sigma),
    ):
        value = _concrete(value)
        if mask is not None and visible is None and value is not None and value.size > 1:
            value = None  # the mask is traced: which keys are visible is unknown here
        check_prior_param(name, value, logits.shape, visible)
    prior_log_param = _algebra.prior_log_param(
        attention, prior_alpha, prior_mean, mask, logits, _XP
    )
    return _weights_and_kl(
        logits,
        mask,
        attention,
        concentration,
        sigma,
        prior_log_param,
        prior_beta,
        prior_sigma,
        mode,
        num_samples,
        noise,
        key,
    )


def bayesian_attention(
    q,
    k,
    v,
    mask=None,
    *,
    attention: str = "softmax",
    concentration=10.0,
    sigma=0.1,
    prior: str = "fixed",
    prior_net: ContextualPrior | None = None,
    prior_alpha=1.0,
    prior_beta=1.0,
    prior_mean=None,
    prior_sigma=1.0,
    mode: str = "train",
    num_samples: int = 0,
    noise=None,
    key=None,
) -> BamOutput:
    r"""One Bayesian attention site: output and KL term.

    Parameters
    ----------
    q : array, shape (..., Lq, D)
    k : array, shape (..., Lk, D)
    v : array, shape (..., Lk, Dv)
    mask : bool array, broadcastable to (..., Lq, Lk), optional
        True where a key is visible to a query; every query must see at least one key.
    attention : {"softmax", "weibull", "lognormal"}
    concentration, sigma
        As in :func:`attention_weights`.
    prior : {"fixed", "contextual"}
        ``"fixed"``: ``prior_alpha`` / ``prior_mean`` as given. ``"contextual"``:
        ``prior_net(k, mask)`` gives :math:`\alpha` (``"weibull"``) or the prior mean
        (``"lognormal"``); ``prior_beta`` and ``prior_sigma`` stay fixed.
    prior_net : ContextualPrior, optional
        Required with ``prior="contextual"``, not allowed with ``"fixed"``.
    prior_alpha, prior_beta, prior_mean, prior_sigma, mode, num_samples, noise, key
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
    check_choice("prior", prior, PRIOR_TYPES)
    if prior == "contextual" and prior_net is None:
        raise ValueError(
            "expected a prior_net (ContextualPrior) with prior='contextual'; got None."
        )
    if prior == "fixed" and prior_net is not None:
        raise ValueError(
            "expected prior_net=None with prior='fixed' (pass prior='contextual' to use it); "
            f"got {type(prior_net).__name__}."
        )
    check_shapes(jnp.shape(q), jnp.shape(k), jnp.shape(v))
    if prior == "fixed":
        weights, kl = attention_weights(
            attention_logits(q, k),
            mask,
            attention=attention,
            concentration=concentration,
            sigma=sigma,
            prior_alpha=prior_alpha,
            prior_beta=prior_beta,
            prior_mean=prior_mean,
            prior_sigma=prior_sigma,
            mode=mode,
            num_samples=num_samples,
            noise=noise,
            key=key,
        )
        return BamOutput(weights @ v, weights, kl)
    num_samples = _check_common(attention, concentration, sigma, mode, num_samples)
    logits = attention_logits(q, k)
    mask, logits = _prepare_mask(mask, logits)
    visible = _concrete_mask(mask)
    check_prior_param("prior_beta", _concrete(prior_beta), logits.shape, visible)
    check_prior_param("prior_sigma", _concrete(prior_sigma), logits.shape, visible)
    prior_log_param = None if attention == "softmax" else prior_net.log_weights(k, mask)
    weights, kl = _weights_and_kl(
        logits,
        mask,
        attention,
        concentration,
        sigma,
        prior_log_param,
        prior_beta,
        prior_sigma,
        mode,
        num_samples,
        noise,
        key,
    )
    return BamOutput(weights @ v, weights, kl)
