r"""torch distributions and KL divergences for Bayesian attention.

Importing this module registers :math:`\mathrm{KL}(\mathrm{Weibull} \| \mathrm{Gamma})` with
:func:`torch.distributions.kl.register_kl` for ``(torch.distributions.Weibull, Gamma)`` (so also
for ``pyro.distributions.Weibull`` and ``pyro.distributions.Gamma``, their subclasses) and for
``(LogScaleWeibull, Gamma)``. torch ships no such KL; with it, ``kl_divergence`` and Pyro's
``TraceMeanField_ELBO`` use the closed form. :mod:`zoo.bayesian_attention.torch_bam` imports
this module.

torch already has :math:`\mathrm{KL}(\mathrm{LogNormal} \| \mathrm{LogNormal})` (the KL of the
base normals). For Pyro's ``LogNormal`` this module registers :func:`kl_lognormal_lognormal`,
the same value with the terms of broadcast scales computed once per distinct value, which the
Pyro twin's mean-field ELBO then uses.
"""

from __future__ import annotations

import pyro.distributions
import torch
from pyro.distributions import constraints
from pyro.distributions.torch_distribution import TorchDistribution
from torch.distributions import Gamma, Weibull
from torch.distributions.kl import register_kl
from torch.distributions.utils import broadcast_all

from zoo.bayesian_attention._common import EULER_GAMMA

__all__ = [
    "BroadcastGamma",
    "LogNormal",
    "LogScaleWeibull",
    "clamp_uniform",
    "compact",
    "exp_keeping_log",
    "log_of_draw",
    "kl_lognormal_lognormal",
    "kl_weibull_gamma",
]


def compact(t: torch.Tensor) -> torch.Tensor:
    """The distinct values of a broadcast (``expand``-ed) tensor: size 1 along every dimension
    of stride 0, a view that broadcasts back to ``t``.

    Distribution parameters are broadcast to the batch shape as stride-0 views (a Weibull shape
    ``k`` shared by every attention weight, a contextual Gamma shape that varies over keys but
    not queries). Special functions of them (``lgamma``, ``log``) cost one evaluation per
    element of the view; of the compact view, one per distinct value.
    """
    if not isinstance(t, torch.Tensor) or t.dim() == 0:
        return t
    index = tuple(
        slice(0, 1) if stride == 0 and size > 1 else slice(None)
        for size, stride in zip(t.shape, t.stride(), strict=True)
    )
    return t[index]


def exp_keeping_log(log_value: torch.Tensor) -> torch.Tensor:
    """``exp(log_value)``, remembering ``log_value`` for :func:`log_of_draw`."""
    value = torch.exp(log_value)
    value._zoo_log = log_value  # a plain attribute: the value is this very tensor object
    return value


def log_of_draw(value: torch.Tensor) -> torch.Tensor:
    """``log(value)``: for a draw of :class:`LogScaleWeibull` or :class:`LogNormal` the log it
    was made from (no second pass over the draw, and a gradient path without ``exp``), else
    ``torch.log``. Attention weights normalise the draws in log space."""
    log_value = getattr(value, "_zoo_log", None)
    return torch.log(value) if log_value is None else log_value


def clamp_uniform(u: torch.Tensor) -> torch.Tensor:
    """Clamp uniform noise to ``[tiny, 1 - eps]`` of its dtype (``log(-log(1 - u))`` finite)."""
    finfo = torch.finfo(u.dtype)
    return u.clamp(min=finfo.tiny, max=1 - finfo.eps)


def kl_weibull_gamma(concentration, log_scale, alpha, beta) -> torch.Tensor:
    r"""Closed-form :math:`\mathrm{KL}(\mathrm{Weibull}(k, \lambda) \| \mathrm{Gamma}(\alpha,
    \beta))`, elementwise.

    .. math::
        \log k + \log\Gamma(\alpha) + \alpha\left(\frac{\gamma}{k} - \log\lambda - \log\beta
        \right) + \beta\lambda\,\Gamma(1 + 1/k) - \gamma - 1,

    with :math:`\gamma` the Euler-Mascheroni constant (from :math:`E[\log S] = \log\lambda -
    \gamma/k`, :math:`E[S] = \lambda\Gamma(1 + 1/k)` and the Weibull entropy).

    Parameters
    ----------
    concentration : Tensor or float
        Weibull shape :math:`k > 0`.
    log_scale : Tensor
        :math:`\log\lambda` (the Weibull scale in log space, so a tiny scale stays accurate).
    alpha, beta : Tensor or float
        Gamma shape and rate, positive.

    Returns
    -------
    Tensor, the broadcast shape of the arguments
    """
    log_scale = torch.as_tensor(log_scale)
    k, alpha, beta = (
        compact(torch.as_tensor(a, dtype=log_scale.dtype, device=log_scale.device))
        for a in (concentration, alpha, beta)
    )
    # Grouped so that only three products touch the full shape of log_scale; the rest has the
    # (often much smaller) shapes of the parameters.
    log_beta = torch.log(beta)
    constant = (
        torch.log(k)
        + torch.lgamma(alpha)
        + alpha * (EULER_GAMMA / k - log_beta)
        - (EULER_GAMMA + 1)
    )
    mean_factor = beta * torch.exp(torch.lgamma(1 + 1 / k))  # E[S] / lambda, times beta
    return constant - alpha * log_scale + mean_factor * torch.exp(log_scale)


def kl_lognormal_lognormal(loc_q, scale_q, loc_p, scale_p) -> torch.Tensor:
    r""":math:`\mathrm{KL}(\mathrm{LogNormal}(\mu_q, \sigma_q) \| \mathrm{LogNormal}(\mu_p,
    \sigma_p))`, elementwise: the KL of the normals of the logs (invariant under ``exp``),

    .. math::
        \log\frac{\sigma_p}{\sigma_q} + \frac{\sigma_q^2 + (\mu_q - \mu_p)^2}{2\sigma_p^2}
        - \frac12,

    with the terms of the scales alone evaluated once per distinct value (see :func:`compact`).

    Parameters
    ----------
    loc_q, scale_q, loc_p, scale_p : Tensor or float
        Mean and standard deviation of :math:`\log S` under q and p.

    Returns
    -------
    Tensor, the broadcast shape of the arguments
    """
    loc_q, scale_q, loc_p, scale_p = broadcast_all(loc_q, scale_q, loc_p, scale_p)
    scale_q, scale_p = compact(scale_q), compact(scale_p)
    ratio = scale_q / scale_p
    constant = (ratio.square() - 1) / 2 - torch.log(ratio)
    return constant + (loc_q - loc_p).square() / (2 * scale_p.square())


class LogScaleWeibull(TorchDistribution):
    r"""Weibull distribution parameterised by its log-scale, reparameterised.

    Density :math:`f(x) = \frac{k}{\lambda}(x/\lambda)^{k-1} e^{-(x/\lambda)^k}` on
    :math:`x > 0` with :math:`\lambda = e^{\text{log\_scale}}`, computed in log space. Draws are
    :math:`x = \lambda (-\log(1 - u))^{1/k}` with :math:`u \sim U(0, 1)`, differentiable in
    both parameters, so a guide can ``pyro.sample`` it under ``Trace_ELBO`` or, against a
    ``Gamma`` prior, ``TraceMeanField_ELBO`` (the KL is registered).

    Parameters
    ----------
    log_scale : Tensor or float
        :math:`\log\lambda`, unconstrained.
    concentration : Tensor or float
        The shape :math:`k > 0`.
    validate_args : bool, optional

    Notes
    -----
    ``batch_shape`` is the broadcast shape of the parameters; ``event_shape`` is ``()``.
    """

    arg_constraints = {"log_scale": constraints.real, "concentration": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, log_scale, concentration, validate_args=None):
        self.log_scale, self.concentration = broadcast_all(log_scale, concentration)
        super().__init__(self.log_scale.shape, validate_args=validate_args)

    @property
    def scale(self) -> torch.Tensor:
        return self.log_scale.exp()

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(LogScaleWeibull, _instance)
        batch_shape = torch.Size(batch_shape)
        new.log_scale = self.log_scale.expand(batch_shape)
        new.concentration = self.concentration.expand(batch_shape)
        super(LogScaleWeibull, new).__init__(batch_shape, validate_args=False)
        new._validate_args = self._validate_args
        return new

    def rsample(self, sample_shape=()) -> torch.Tensor:
        """Reparameterised draws, shape ``sample_shape + batch_shape``; the draw's log is kept
        (:func:`log_of_draw`)."""
        shape = self._extended_shape(sample_shape)
        # (-log u)^(1/k) for uniform u in place, computing log(-log u) / k: no allocation per
        # step (the noise needs no gradient). -log u is a standard exponential draw, as is the
        # -log(1 - u) of the formula; torch's own exponential_ is several times slower on CPU.
        noise = torch.rand(shape, dtype=self.log_scale.dtype, device=self.log_scale.device)
        tiny = torch.finfo(noise.dtype).tiny  # log u finite; 1 - eps keeps -log u above 0
        noise.clamp_(tiny, 1 - torch.finfo(noise.dtype).eps).log_().neg_().log_()
        noise.mul_(1 / compact(self.concentration))
        return exp_keeping_log(self.log_scale + noise)

    def log_prob(self, value) -> torch.Tensor:
        if self._validate_args:
            self._validate_sample(value)
        k = compact(self.concentration)
        z = log_of_draw(value) - self.log_scale
        return torch.log(k) - self.log_scale + (k - 1) * z - torch.exp(k * z)

    def cdf(self, value) -> torch.Tensor:
        return -torch.expm1(-torch.exp(self.concentration * (torch.log(value) - self.log_scale)))

    @property
    def mean(self) -> torch.Tensor:
        return torch.exp(self.log_scale + torch.lgamma(1 + 1 / self.concentration))

    @property
    def variance(self) -> torch.Tensor:
        k = self.concentration
        return torch.exp(2 * self.log_scale) * (
            torch.exp(torch.lgamma(1 + 2 / k)) - torch.exp(2 * torch.lgamma(1 + 1 / k))
        )

    def entropy(self) -> torch.Tensor:
        k = self.concentration
        return EULER_GAMMA * (1 - 1 / k) + self.log_scale - torch.log(k) + 1


class LogNormal(pyro.distributions.LogNormal):
    """Pyro's ``LogNormal`` whose draws keep their log (:func:`log_of_draw`)."""

    def expand(self, batch_shape, _instance=None):
        return super().expand(batch_shape, self._get_checked_instance(LogNormal, _instance))

    def rsample(self, sample_shape=()) -> torch.Tensor:
        return exp_keeping_log(self.base_dist.rsample(sample_shape))


class BroadcastGamma(pyro.distributions.Gamma):
    """Pyro's ``Gamma``, with ``lgamma`` of the shape evaluated once per distinct value (see
    :func:`compact`): the same distribution and log-density, for a shape broadcast over many
    elements (a contextual prior's shape per key, shared by every query)."""

    def expand(self, batch_shape, _instance=None):
        return super().expand(batch_shape, self._get_checked_instance(BroadcastGamma, _instance))

    def log_prob(self, value) -> torch.Tensor:
        value = torch.as_tensor(value, dtype=self.rate.dtype, device=self.rate.device)
        if self._validate_args:
            self._validate_sample(value)
        alpha, rate = compact(self.concentration), compact(self.rate)
        return (
            torch.xlogy(alpha, rate)
            + torch.xlogy(alpha - 1, value)
            - rate * value
            - torch.lgamma(alpha)
        )


@register_kl(Weibull, Gamma)
def _kl_weibull_gamma(p, q):
    return kl_weibull_gamma(p.concentration, torch.log(p.scale), q.concentration, q.rate)


@register_kl(LogScaleWeibull, Gamma)
def _kl_log_scale_weibull_gamma(p, q):
    return kl_weibull_gamma(p.concentration, p.log_scale, q.concentration, q.rate)


@register_kl(pyro.distributions.LogNormal, pyro.distributions.LogNormal)
def _kl_pyro_lognormal(p, q):
    return kl_lognormal_lognormal(p.loc, p.scale, q.loc, q.scale)
