r"""NumPyro (JAX) distributions and KL divergences for Bayesian attention.

The twins of :mod:`zoo.bayesian_attention.torch_distributions`. NumPyro already has
``kl_divergence(Weibull, Gamma)``; :func:`kl_weibull_gamma` computes the same closed form from
the log-scale (tested against NumPyro's). NumPyro has no ``kl_divergence(LogNormal,
LogNormal)``: importing this module registers one (only if NumPyro still lacks it), and
``kl_divergence(LogScaleWeibull, Gamma)``, so NumPyro's ``TraceMeanField_ELBO`` uses the closed
forms. :mod:`zoo.bayesian_attention.jax_bam` imports this module.
"""

from __future__ import annotations

import math

import jax.numpy as jnp
from jax import lax, random
from jax.scipy.special import gammaln
from numpyro.distributions import Distribution, Gamma, LogNormal, MaskedDistribution, constraints
from numpyro.distributions.kl import kl_divergence
from numpyro.distributions.util import promote_shapes, validate_sample

from zoo.bayesian_attention._common import EULER_GAMMA

__all__ = [
    "GammaPrior",
    "LogNormalFlatNoise",
    "LogNormalPrior",
    "LogScaleWeibull",
    "clamp_uniform",
    "kl_lognormal_lognormal",
    "kl_weibull_gamma",
    "normal_noise",
    "uniform_noise",
]


def uniform_noise(key, shape, dtype):
    """``random.uniform(key, shape, dtype)``, drawn as one flat vector and reshaped.

    The same distribution; XLA on CPU compiles a multi-dimensional threefry draw about ten
    times slower than a flat one (seconds for an attention-sized 4-D shape), so every draw of
    this package goes through here or :func:`normal_noise`.
    """
    shape = tuple(shape)
    return random.uniform(key, (math.prod(shape),), dtype=dtype).reshape(shape)


def normal_noise(key, shape, dtype):
    """``random.normal(key, shape, dtype)``, drawn flat and reshaped (see uniform_noise)."""
    shape = tuple(shape)
    return random.normal(key, (math.prod(shape),), dtype=dtype).reshape(shape)


def clamp_uniform(u):
    """Clamp uniform noise to ``[tiny, 1 - eps]`` of its dtype (``log(-log(1 - u))`` finite)."""
    finfo = jnp.finfo(jnp.result_type(u, float))
    return jnp.clip(u, finfo.tiny, 1.0 - finfo.eps)


def _exp_draw(log_value):
    """``exp(log_value)``, at least the smallest normal number of its dtype: a draw that
    underflowed to 0 would put a log of -inf into the attention weights. Its log-density is
    taken from ``log_value``, kept as the draw's intermediates (see :class:`_MaskedKeepingLog`)."""
    tiny = jnp.finfo(log_value.dtype).tiny
    value = jnp.exp(log_value)
    # A select, not jnp.maximum: the gradient of a floored draw is then 0, where maximum's
    # would multiply the (overflowing) gradient of a log of it by 0, giving NaN.
    return jnp.where(value < tiny, tiny, value)


def kl_weibull_gamma(concentration, log_scale, alpha, beta):
    r"""Closed-form :math:`\mathrm{KL}(\mathrm{Weibull}(k, \lambda) \| \mathrm{Gamma}(\alpha,
    \beta))`, elementwise.

    .. math::
        \log k + \log\Gamma(\alpha) + \alpha\left(\frac{\gamma}{k} - \log\lambda - \log\beta
        \right) + \beta\lambda\,\Gamma(1 + 1/k) - \gamma - 1.

    Parameters
    ----------
    concentration : array or float
        Weibull shape :math:`k > 0`.
    log_scale : array
        :math:`\log\lambda`.
    alpha, beta : array or float
        Gamma shape and rate, positive.

    Returns
    -------
    array, the broadcast shape of the arguments

    Examples
    --------
    NumPyro's own ``kl_divergence(Weibull, Gamma)``, from the log-scale:

    >>> import numpyro.distributions as dist
    >>> from numpyro.distributions.kl import kl_divergence
    >>> from zoo.bayesian_attention.numpyro_distributions import kl_weibull_gamma
    >>> round(float(kl_weibull_gamma(2.0, 0.0, 2.0, 1.0)), 4)  # k = 2, lambda = 1, Gamma(2, 1)
    0.5794
    >>> round(float(kl_divergence(dist.Weibull(1.0, 2.0), dist.Gamma(2.0, 1.0))), 4)
    0.5794
    """
    k = concentration
    log_beta = jnp.log(beta)
    constant = (
        jnp.log(k) + gammaln(alpha) + alpha * (EULER_GAMMA / k - log_beta) - (EULER_GAMMA + 1)
    )
    # beta * E[S] in log space: for a small k, Gamma(1 + 1/k) overflows and lambda underflows
    # (inf * 0; in float32 on CPU a lambda below the normal range is flushed to zero).
    log_mean_factor = gammaln(1 + 1 / k) + log_beta
    return constant - alpha * log_scale + jnp.exp(log_scale + log_mean_factor)


def kl_lognormal_lognormal(loc_q, scale_q, loc_p, scale_p):
    r""":math:`\mathrm{KL}(\mathrm{LogNormal}(\mu_q, \sigma_q) \| \mathrm{LogNormal}(\mu_p,
    \sigma_p))`, elementwise: the KL of the normals of the logs (invariant under ``exp``),

    .. math::
        \log\frac{\sigma_p}{\sigma_q} + \frac{\sigma_q^2 + (\mu_q - \mu_p)^2}{2\sigma_p^2}
        - \frac12.

    Parameters
    ----------
    loc_q, scale_q, loc_p, scale_p : array or float
        Mean and standard deviation of :math:`\log S` under q and p.

    Returns
    -------
    array, the broadcast shape of the arguments

    Examples
    --------
    Registered (on import) as NumPyro's ``kl_divergence`` of two ``LogNormal``:

    >>> import numpyro.distributions as dist
    >>> from numpyro.distributions.kl import kl_divergence
    >>> from zoo.bayesian_attention.numpyro_distributions import kl_lognormal_lognormal
    >>> round(float(kl_lognormal_lognormal(0.0, 1.0, 0.5, 2.0)), 4)
    0.3494
    >>> round(float(kl_divergence(dist.LogNormal(0.0, 1.0), dist.LogNormal(0.5, 2.0))), 4)
    0.3494
    """
    ratio = scale_q / scale_p
    return (ratio**2 + ((loc_q - loc_p) / scale_p) ** 2) / 2 - jnp.log(ratio) - 0.5


class LogScaleWeibull(Distribution):
    r"""Weibull distribution parameterised by its log-scale, reparameterised.

    Density :math:`f(x) = \frac{k}{\lambda}(x/\lambda)^{k-1} e^{-(x/\lambda)^k}` on
    :math:`x > 0`, :math:`\lambda = e^{\text{log\_scale}}`, computed in log space. Draws are
    :math:`\lambda(-\log(1 - u))^{1/k}`, differentiable in both parameters (``has_rsample``),
    and at least the dtype's smallest normal number; their logs are their intermediates, which
    ``log_prob`` takes in place of the log of the value (exact where the draw underflows).

    Parameters
    ----------
    log_scale : array or float
        :math:`\log\lambda`, unconstrained.
    concentration : array or float
        The shape :math:`k > 0`.
    validate_args : bool, optional
        Check the parameters (and values passed to ``log_prob``) against their constraints.

    Attributes
    ----------
    log_scale : array
        :math:`\log\lambda`, its shape promoted with ``concentration``'s.
    concentration : array
        :math:`k`, its shape promoted with ``log_scale``'s.

    Notes
    -----
    ``batch_shape`` is the broadcast shape of the parameters; ``event_shape`` is ``()``.

    Examples
    --------
    >>> import jax
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import numpyro.distributions as dist
    >>> from numpyro.distributions.kl import kl_divergence
    >>> from zoo.bayesian_attention.numpyro_distributions import LogScaleWeibull
    >>> d = LogScaleWeibull(0.0, 2.0)  # lambda = 1, k = 2
    >>> round(float(d.mean), 4), round(float(d.variance), 4)
    (0.8862, 0.2146)
    >>> x = jnp.array([0.5, 1.0, 1.5])
    >>> np.allclose(d.log_prob(x), dist.Weibull(1.0, 2.0).log_prob(x), atol=1e-6)
    True
    >>> round(float(kl_divergence(d, dist.Gamma(2.0, 1.0))), 4)  # registered: the closed form
    0.5794

    Draws are differentiable in the log-scale:

    >>> draw = lambda log_scale: LogScaleWeibull(log_scale, 2.0).sample(jax.random.key(0))
    >>> bool(jnp.isclose(jax.grad(draw)(0.0), draw(0.0)))  # d/d(log_scale) of lambda * E
    True
    """

    arg_constraints = {"log_scale": constraints.real, "concentration": constraints.positive}
    support = constraints.positive
    reparametrized_params = ["log_scale", "concentration"]

    def __init__(self, log_scale, concentration, *, validate_args=None):
        self.log_scale, self.concentration = promote_shapes(log_scale, concentration)
        batch_shape = lax.broadcast_shapes(jnp.shape(log_scale), jnp.shape(concentration))
        super().__init__(batch_shape=batch_shape, validate_args=validate_args)

    @property
    def scale(self):
        r"""The Weibull scale :math:`\lambda = e^{\text{log\_scale}}`."""
        return jnp.exp(self.log_scale)

    def sample_with_intermediates(self, key, sample_shape=()):
        """Reparameterised draws, shape ``sample_shape + batch_shape``, and ``[their log]``."""
        shape = sample_shape + self.batch_shape
        dtype = jnp.result_type(self.log_scale, float)
        u = clamp_uniform(uniform_noise(key, shape, dtype))
        log_value = self.log_scale + jnp.log(-jnp.log1p(-u)) / self.concentration
        return _exp_draw(log_value), [log_value]

    def sample(self, key, sample_shape=()):
        """Reparameterised draws, shape ``sample_shape + batch_shape``."""
        return self.sample_with_intermediates(key, sample_shape)[0]

    def mask(self, mask):
        return self if mask is True else _MaskedKeepingLog(self, mask)

    @validate_sample
    def log_prob(self, value, intermediates=None):
        k = self.concentration
        log_value = jnp.log(value) if intermediates is None else intermediates[0]
        z = log_value - self.log_scale
        return jnp.log(k) - self.log_scale + (k - 1) * z - jnp.exp(k * z)

    def cdf(self, value):
        return -jnp.expm1(-jnp.exp(self.concentration * (jnp.log(value) - self.log_scale)))

    @property
    def mean(self):
        return jnp.exp(self.log_scale + gammaln(1 + 1 / self.concentration))

    @property
    def variance(self):
        k = self.concentration
        log_mean_factor = gammaln(1 + 1 / k)
        # mean^2 (Gamma(1 + 2/k) / Gamma(1 + 1/k)^2 - 1), the ratio in log space: for a small k
        # each Gamma overflows, and the scale's square underflows, long before the variance does.
        mean_squared = jnp.exp(2 * (self.log_scale + log_mean_factor))
        return mean_squared * jnp.expm1(gammaln(1 + 2 / k) - 2 * log_mean_factor)

    def entropy(self):
        k = self.concentration
        return EULER_GAMMA * (1 - 1 / k) + self.log_scale - jnp.log(k) + 1


class LogNormalFlatNoise(LogNormal):
    r"""NumPyro's ``LogNormal(loc, scale)`` whose draws :math:`\exp(\text{loc} + \text{scale}
    \cdot \varepsilon)` take their noise from :func:`normal_noise` (fast to compile); the same
    distribution, log-density and registered KL divergences. Draws are at least the dtype's
    smallest normal number; their logs are their intermediates, which ``log_prob`` takes in
    place of the log of the value (exact where the draw underflows).

    Parameters
    ----------
    loc : array or float
        The mean of :math:`\log S`.
    scale : array or float
        The standard deviation of :math:`\log S`, positive.
    validate_args : bool, optional
        Check the parameters against their constraints.

    Attributes
    ----------
    loc : array
        The mean of :math:`\log S`, broadcast to the batch shape.
    scale : array
        The standard deviation of :math:`\log S`, broadcast to the batch shape.

    Examples
    --------
    >>> import jax
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import numpyro.distributions as dist
    >>> from zoo.bayesian_attention.numpyro_distributions import LogNormalFlatNoise
    >>> d = LogNormalFlatNoise(jnp.zeros((2, 3)), 0.5)
    >>> draws = d.sample(jax.random.key(0), (4,))
    >>> draws.shape, bool((draws > 0).all())
    ((4, 2, 3), True)
    >>> np.allclose(d.log_prob(draws), dist.LogNormal(jnp.zeros((2, 3)), 0.5).log_prob(draws))
    True
    """

    def sample_with_intermediates(self, key, sample_shape=()):
        shape = sample_shape + self.batch_shape + self.event_shape
        base = self.base_dist
        dtype = jnp.result_type(base.loc, float)
        log_value = base.loc + base.scale * normal_noise(key, shape, dtype)
        return _exp_draw(log_value), [[log_value, None]]  # (the exp transform's input)

    def sample(self, key, sample_shape=()):
        return self.sample_with_intermediates(key, sample_shape)[0]

    def mask(self, mask):
        return self if mask is True else _MaskedKeepingLog(self, mask)


class _ScoresGuideDraw:
    """What :class:`GammaPrior` and :class:`LogNormalPrior` share: the guide's draw scored at its
    log."""

    guide_draw = None

    def intermediates_of(self, value):
        """The intermediates of ``value`` as the distribution's ``log_prob`` takes them (its log,
        exact where floored), or None for any array but the guide's draw."""
        if self.guide_draw is None or value is not self.guide_draw[0]:
            return None
        tiny = jnp.finfo(value.dtype).tiny
        return self._as_intermediates(jnp.where(value > tiny, jnp.log(value), self.guide_draw[1]))

    def mask(self, mask):
        return self if mask is True else _MaskedKeepingLog(self, mask)


class GammaPrior(_ScoresGuideDraw, Gamma):
    """NumPyro's ``Gamma(concentration, rate)``, a model's prior of attention weights that scores
    the guide's draw at the draw's log.

    NumPyro's ELBOs give a draw's intermediates (its exact log) to the guide's site only; the
    model's prior sees the value, which is floored at the dtype's smallest normal number where
    the draw underflowed, and would score the floor (log 1.2e-38 = -87.3 in float32 for a log
    of, say, -200). ``guide_draw``, ``(draw, log of draw)`` as the guide made them, puts the exact
    log in place of the log of that very array (``value is draw``) wherever it was floored;
    elsewhere the log of the value, the same bits as NumPyro's ``Gamma``. The Pyro twin keeps
    each draw's log with the draw (``torch_distributions.log_of_draw``). ``log_prob`` also takes
    the log of the value as its intermediates (``[log value]``, as :class:`LogScaleWeibull`
    gives them).

    Parameters
    ----------
    concentration, rate : array or float
        The Gamma's shape and rate, positive.
    guide_draw : tuple of two arrays, optional
        ``(draw, log of draw)``: the guide's draw of the site and its exact log.
    validate_args : bool, optional
        Check the parameters against their constraints.

    Examples
    --------
    Two float32 draws that underflowed, floored at the smallest normal number, 1.2e-38:

    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> from zoo.bayesian_attention.numpyro_distributions import GammaPrior
    >>> draw = jnp.full(2, jnp.finfo(jnp.float32).tiny, jnp.float32)
    >>> log_draw = jnp.array([-150.0, -200.0], jnp.float32)  # their logs, as drawn
    >>> prior = GammaPrior(jnp.float32(0.5), jnp.float32(1.0), guide_draw=(draw, log_draw))
    >>> np.round(np.asarray(prior.log_prob(draw)), 3)  # -0.5 log s - log Gamma(0.5) - s
    array([74.428, 99.428], dtype=float32)
    >>> np.round(np.asarray(prior.log_prob(draw + 0)), 3)  # another array: scored at its value
    array([43.096, 43.096], dtype=float32)
    """

    def __init__(self, concentration, rate=1.0, *, guide_draw=None, validate_args=None):
        super().__init__(concentration, rate, validate_args=validate_args)
        self.guide_draw = guide_draw

    @staticmethod
    def _as_intermediates(log_value):
        return [log_value]

    def log_prob(self, value, intermediates=None):
        intermediates = intermediates or self.intermediates_of(value)
        if not intermediates:
            return super().log_prob(value)
        a, b = self.concentration, self.rate
        # Gamma.log_prob's arithmetic, the log of the value replaced: the same bits where the
        # value was not floored.
        normalize_term = gammaln(a) - a * jnp.log(b)
        return (a - 1) * intermediates[0] - b * value - normalize_term


class LogNormalPrior(_ScoresGuideDraw, LogNormal):
    r"""NumPyro's ``LogNormal(loc, scale)`` that scores the guide's draw ``guide_draw`` at its log
    (as :class:`GammaPrior` does); its ``log_prob`` takes the log of the value as a transformed
    distribution's intermediates (``[[log value, None]]``, as :class:`LogNormalFlatNoise` gives
    them).

    Parameters
    ----------
    loc, scale : array or float
        The mean and standard deviation of :math:`\log S`.
    guide_draw, validate_args : optional
        As :class:`GammaPrior`'s.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> from zoo.bayesian_attention.numpyro_distributions import LogNormalPrior
    >>> draw = jnp.full(2, jnp.finfo(jnp.float32).tiny, jnp.float32)  # floored in float32
    >>> log_draw = jnp.array([-150.0, -200.0], jnp.float32)
    >>> prior = LogNormalPrior(jnp.float32(-2.0), jnp.float32(1.0), guide_draw=(draw, log_draw))
    >>> np.round(np.asarray(prior.log_prob(draw)), 1)
    array([-10802.9, -19402.9], dtype=float32)
    >>> np.round(np.asarray(prior.log_prob(draw + 0)), 1)  # at the floor, log s = -87.3
    array([-3554.7, -3554.7], dtype=float32)
    """

    def __init__(self, loc=0.0, scale=1.0, *, guide_draw=None, validate_args=None):
        super().__init__(loc, scale, validate_args=validate_args)
        self.guide_draw = guide_draw

    @staticmethod
    def _as_intermediates(log_value):
        return [[log_value, None]]

    def log_prob(self, value, intermediates=None):
        intermediates = intermediates or self.intermediates_of(value)
        if not intermediates:
            return super().log_prob(value)
        return super().log_prob(value, intermediates)


class _MaskedKeepingLog(MaskedDistribution):
    """NumPyro's ``MaskedDistribution``, passing on its base's intermediates: the logs of the
    draws of :class:`LogScaleWeibull` and :class:`LogNormalFlatNoise` (whose ``mask`` makes one).

    NumPyro's ELBOs score a guide's draw with its intermediates; NumPyro's own masked
    distribution drops them, so the log-density of a draw that underflowed (floored at the
    dtype's smallest normal number) would come from the floor: -inf, or a finite but huge
    value, where the Pyro twin, which keeps each draw's log, has the exact one.
    """

    def sample_with_intermediates(self, key, sample_shape=()):
        return self.base_dist.sample_with_intermediates(key, sample_shape)

    def log_prob(self, value, intermediates=None):
        if not intermediates and isinstance(self.base_dist, _ScoresGuideDraw):
            intermediates = self.base_dist.intermediates_of(value)  # (before a select hides it)
        if not intermediates or self._mask is False:
            return super().log_prob(value)
        return jnp.where(self._mask, self.base_dist.log_prob(value, intermediates), 0.0)


@kl_divergence.register(LogScaleWeibull, Gamma)
def _kl_log_scale_weibull_gamma(p, q):
    return kl_weibull_gamma(p.concentration, p.log_scale, q.concentration, q.rate)


def _kl_lognormal(p, q):
    return kl_lognormal_lognormal(p.loc, p.scale, q.loc, q.scale)


if kl_divergence.dispatch(LogNormal, LogNormal) is None:
    kl_divergence.register(LogNormal, LogNormal)(_kl_lognormal)
