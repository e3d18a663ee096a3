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
from zoo.bayesian_attention import _algebra, _docs, _site, numpyro_distributions
from zoo.bayesian_attention._common import (
    ATTENTION_TYPES,
    MODES,
    PRIOR_TYPES,
    BamOutput,
    check_key_dims,
    check_mask_rows,
    check_prior_keys,
)
from zoo.bayesian_attention.numpyro_distributions import (
    LogScaleWeibull,
    clamp_uniform,
    kl_lognormal_lognormal,
    kl_weibull_gamma,
    normal_noise,
    uniform_noise,
)
from zoo.docstrings import shared_sections

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
_DOC_FIELDS = {
    "array": "array",
    "rng": "key",
    "rng_type": "jax.random.PRNGKey",
    "rng_meaning": "Needed to draw the noise when ``noise`` is None.",
}


# ------------------------------------------------------------------------------ building blocks


@shared_sections(_docs.ATTENTION_LOGITS, **_DOC_FIELDS)
def attention_logits(q, k):
    r"""Scaled dot-product logits :math:`q k^\top / \sqrt{D}`."""
    return _algebra.attention_logits(q, k, _XP)


@shared_sections(_docs.MASKED_LOG_SOFTMAX, **_DOC_FIELDS)
def masked_log_softmax(logits, mask=None):
    """Log-softmax over keys (the last axis) of the visible keys; ``-inf`` on hidden keys."""
    return _algebra.masked_log_softmax(logits, mask, _XP)


@shared_sections(_docs.WEIBULL_LOG_SCALE, **_DOC_FIELDS)
def weibull_log_scale(log_p, concentration):
    r""":math:`\log\lambda = \log p - \log\Gamma(1 + 1/k)`, the Weibull scale with mean ``p``."""
    k = _BACKEND.concentration(concentration, log_p)
    return _algebra.weibull_log_scale(log_p, k, _XP)


@shared_sections(_docs.WEIBULL_LOG_WEIGHTS, **_DOC_FIELDS)
def weibull_log_weights(log_p, concentration, u):
    r"""Unnormalised log weights :math:`\log S = \log\lambda + \frac1k \log(-\log(1 - u))`."""
    k = _BACKEND.concentration(concentration, log_p)
    return _algebra.weibull_log_weights(log_p, k, clamp_uniform(u), _XP)


@shared_sections(_docs.LOGNORMAL_LOG_WEIGHTS, **_DOC_FIELDS)
def lognormal_log_weights(log_p, sigma, eps):
    r"""Unnormalised log weights :math:`\log S = \log p - \sigma^2/2 + \sigma\varepsilon`."""
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
        ``D``, the last dimension of the keys (keys of another width are refused with a
        ValueError).
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
        hidden_dim = check_key_dims(key_dim, hidden_dim)
        k1, k2 = jax.random.split(key)
        self.hidden = eqx.nn.Linear(key_dim, hidden_dim, dtype=dtype, key=k1)
        self.out = eqx.nn.Linear(hidden_dim, 1, dtype=dtype, key=k2)

    def scores(self, k):
        """Unnormalised key scores, shape (..., Lk), from keys of shape (..., Lk, D)."""
        check_prior_keys(jnp.shape(k), self.hidden.in_features)
        h = jax.nn.relu(k @ self.hidden.weight.T + self.hidden.bias)
        return (h @ self.out.weight.T + self.out.bias)[..., 0]

    @shared_sections(_docs.CONTEXTUAL_LOG_WEIGHTS, **_DOC_FIELDS)
    def log_weights(self, k, mask=None):
        """Log-softmax of the scores over the visible keys."""
        return masked_log_softmax(self.scores(k)[..., None, :], mask)

    def __call__(self, k, mask=None):
        """Prior weights (softmax over visible keys, zero on hidden ones); see log_weights."""
        return jnp.exp(self.log_weights(k, mask))


# ------------------------------------------------------------------------------ the site


class _Jax:
    """JAX's side of a site (``_site.Backend``): values being traced go unchecked."""

    xp = _XP
    dists = numpyro_distributions

    def asarray(self, x):
        return jnp.asarray(x)

    def shape(self, x):
        return jnp.shape(x)

    def concrete(self, x) -> np.ndarray | None:
        if x is None or isinstance(x, jax.core.Tracer):
            return None
        return np.asarray(x, dtype=float)

    def concrete_mask(self, mask) -> np.ndarray | None:
        if mask is None or isinstance(mask, jax.core.Tracer):
            return None
        return np.asarray(mask)

    def prepare_mask(self, mask, logits):
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
            message = _MASK_MESSAGE + "; got a query whose mask hides all."
            logits = eqx.error_if(logits, empty, message)
        else:
            check_mask_rows(np.asarray(mask))
        return mask, logits

    def concentration(self, value, like):
        return jnp.asarray(value, dtype=like.dtype)

    def draw_noise(self, shape, like, options):
        if options.rng is None:
            raise ValueError(
                f"expected a PRNG key (key=...) to draw {options.attention} attention weights in "
                f"mode={options.mode!r}, or the noise itself (noise=...); got neither."
            )
        draw = uniform_noise if options.attention == "weibull" else normal_noise
        return draw(options.rng, shape, like.dtype)


_BACKEND = _Jax()


@shared_sections(_docs.ATTENTION_WEIGHTS, **_DOC_FIELDS)
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

    Raises
    ------
    ValueError
        For an unknown ``attention`` or ``mode``, non-positive ``concentration``, ``sigma`` or
        prior parameters, a mask hiding every key of a query, noise of the wrong shape, or a
        draw without ``key`` or ``noise``.
    """
    options = _site.Options.of(locals(), rng=key)
    return _site.attention_weights(logits, mask, options, _BACKEND)


@shared_sections(_docs.BAYESIAN_ATTENTION, **_DOC_FIELDS)
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
    r"""One Bayesian attention site: output and KL term."""
    options = _site.Options.of(locals(), rng=key)
    return _site.bayesian_attention(q, k, v, mask, prior, prior_net, options, _BACKEND)
