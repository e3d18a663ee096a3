r"""torch distributions and KL divergences for Bayesian attention.

Importing this module registers :math:`\mathrm{KL}(\mathrm{Weibull} \| \mathrm{Gamma})` with
:func:`torch.distributions.kl.register_kl` for ``(torch.distributions.Weibull, Gamma)`` (so also
for ``pyro.distributions.Weibull`` and ``pyro.distributions.Gamma``, their subclasses) and for
``(LogScaleWeibull, Gamma)``. torch ships no such KL; with it, ``kl_divergence`` and Pyro's
``TraceMeanField_ELBO`` use the closed form. :mod:`zoo.bayesian_attention.torch_bam` imports
this module.

torch already has :math:`\mathrm{KL}(\mathrm{LogNormal} \| \mathrm{LogNormal})`: ``LogNormal``
is a ``TransformedDistribution`` of a ``Normal`` by ``exp``, and torch's rule for two transformed
distributions with the same transforms returns the KL of the base normals. It is used as is.
"""

from __future__ import annotations

import torch
from pyro.distributions import constraints
from pyro.distributions.torch_distribution import TorchDistribution
from torch.distributions import Gamma, LogNormal, Weibull
from torch.distributions.kl import kl_divergence, register_kl
from torch.distributions.utils import broadcast_all

from zoo.bayesian_attention._common import EULER_GAMMA

__all__ = ["LogScaleWeibull", "clamp_uniform", "kl_lognormal_lognormal", "kl_weibull_gamma"]


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
        torch.as_tensor(a, dtype=log_scale.dtype, device=log_scale.device)
        for a in (concentration, alpha, beta)
    )
    log_beta = torch.log(beta)
    mean_term = torch.exp(log_scale + log_beta + torch.lgamma(1 + 1 / k))
    return (
        torch.log(k)
        + torch.lgamma(alpha)
        + alpha * (EULER_GAMMA / k - log_scale - log_beta)
        + mean_term
        - (EULER_GAMMA + 1)
    )


def kl_lognormal_lognormal(loc_q, scale_q, loc_p, scale_p) -> torch.Tensor:
    r""":math:`\mathrm{KL}(\mathrm{LogNormal}(\mu_q, \sigma_q) \| \mathrm{LogNormal}(\mu_p,
    \sigma_p))`, elementwise, by torch's own ``kl_divergence`` (equal to the KL of the normals
    of the logs).

    Parameters
    ----------
    loc_q, scale_q, loc_p, scale_p : Tensor or float
        Mean and standard deviation of :math:`\log S` under q and p.

    Returns
    -------
    Tensor, the broadcast shape of the arguments
    """
    q = LogNormal(*broadcast_all(loc_q, scale_q), validate_args=False)
    p = LogNormal(*broadcast_all(loc_p, scale_p), validate_args=False)
    return kl_divergence(q, p)


class LogScaleWeibull(TorchDistribution):
    r"""Weibull distribution parameterised by its log-scale, reparameterised.

    Density :math:`f(x) = \frac{k}{\lambda}(x/\lambda)^{k-1} e^{-(x/\lambda)^k}` on
    :math:`x > 0` with :math:`\lambda = e^{\text{log\_scale}}`, computed in log space. Draws are
    :math:`x = \lambda (-\log(1 - u))^{1/k}` with :math:`u \sim U(0, 1)`, differentiable in both
    parameters, so a guide can ``pyro.sample`` it under ``Trace_ELBO`` or, against a ``Gamma``
    prior, ``TraceMeanField_ELBO`` (the KL is registered).

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
        """Reparameterised draws, shape ``sample_shape + batch_shape``."""
        shape = self._extended_shape(sample_shape)
        u = clamp_uniform(
            torch.rand(shape, dtype=self.log_scale.dtype, device=self.log_scale.device)
        )
        return torch.exp(self.log_scale + torch.log(-torch.log1p(-u)) / self.concentration)

    def log_prob(self, value) -> torch.Tensor:
        if self._validate_args:
            self._validate_sample(value)
        k = self.concentration
        z = torch.log(value) - self.log_scale
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


@register_kl(Weibull, Gamma)
def _kl_weibull_gamma(p, q):
    return kl_weibull_gamma(p.concentration, torch.log(p.scale), q.concentration, q.rate)


@register_kl(LogScaleWeibull, Gamma)
def _kl_log_scale_weibull_gamma(p, q):
    return kl_weibull_gamma(p.concentration, p.log_scale, q.concentration, q.rate)
