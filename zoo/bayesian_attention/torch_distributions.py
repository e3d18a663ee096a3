r"""torch distributions and KL divergences for Bayesian attention.

Importing this module registers :math:`\mathrm{KL}(\mathrm{Weibull} \| \mathrm{Gamma})` with
:func:`torch.distributions.kl.register_kl` for ``(torch.distributions.Weibull, Gamma)`` (so also
for ``pyro.distributions.Weibull`` and ``pyro.distributions.Gamma``, their subclasses) and for
``(LogScaleWeibull, Gamma)``. torch ships no such KL; with it, ``kl_divergence`` and Pyro's
``TraceMeanField_ELBO`` use the closed form. :mod:`zoo.bayesian_attention.torch_bam` imports
this module.

For one whole attention layer, :class:`WeibullAttention` (the posterior, from the logits) and
:class:`GammaAttention` (the prior), and :class:`LogNormalAttention` (either side of log-normal
attention) hold the mask themselves and have a KL summed over the layer
(:func:`kl_weibull_gamma_attention`, :func:`kl_lognormal_attention`) that costs one pass over
the weights instead of several.

torch already has :math:`\mathrm{KL}(\mathrm{LogNormal} \| \mathrm{LogNormal})` (the KL of the
base normals). For Pyro's ``LogNormal`` this module registers :func:`kl_lognormal_lognormal`,
the same value with the terms of broadcast scales computed once per distinct value.
"""

from __future__ import annotations

import math

import pyro.distributions
import torch
from pyro.distributions import constraints
from pyro.distributions.torch_distribution import TorchDistribution
from torch.distributions import Gamma, Weibull
from torch.distributions.kl import register_kl
from torch.distributions.utils import broadcast_all

from zoo.array_namespace import TorchOps
from zoo.bayesian_attention import _algebra, _docs
from zoo.bayesian_attention._common import EULER_GAMMA
from zoo.docstrings import shared_sections

__all__ = [
    "GammaAttention",
    "LogNormalAttention",
    "LogScaleWeibull",
    "WeibullAttention",
    "clamp_uniform",
    "compact",
    "exp_keeping_log",
    "kl_lognormal_attention",
    "kl_lognormal_lognormal",
    "kl_weibull_gamma",
    "kl_weibull_gamma_attention",
    "log_of_draw",
    "masked_log_softmax",
    "weibull_log_noise",
]

_XP = TorchOps()


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
    shared = [stride == 0 and size > 1 for size, stride in zip(t.shape, t.stride(), strict=True)]
    if not any(shared):  # (indexing would add an alias to the autograd graph)
        return t
    return t[tuple(slice(0, 1) if s else slice(None) for s in shared)]


@shared_sections(_docs.MASKED_LOG_SOFTMAX, array="Tensor")
def masked_log_softmax(logits: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
    """Log-softmax over keys (the last axis) of the visible keys; ``-inf`` on hidden keys."""
    return _algebra.masked_log_softmax(logits, mask, _XP)


def exp_keeping_log(log_value: torch.Tensor) -> torch.Tensor:
    """``exp(log_value)``, remembering ``log_value`` for :func:`log_of_draw`."""
    value = torch.exp(log_value)
    value._zoo_log = log_value  # a plain attribute: the value is this very tensor object
    return value


def log_of_draw(value: torch.Tensor) -> torch.Tensor:
    """``log(value)``: for a draw of :class:`LogScaleWeibull`, :class:`WeibullAttention` or
    :class:`LogNormalAttention` the log it was made from (no second pass over the draw, and a
    gradient path without ``exp``), else ``torch.log``. Attention weights normalise the draws in
    log space."""
    log_value = getattr(value, "_zoo_log", None)
    return torch.log(value) if log_value is None else log_value


def weibull_log_noise(shape, like: torch.Tensor, factor: float = 1.0) -> torch.Tensor:
    """``log(factor * E)`` for standard exponential draws ``E`` of ``shape`` (``like``'s dtype and
    device): a Weibull draw of shape k and scale lambda is ``lambda * exp(log(E) / k)``, and a
    constant ``factor`` folds a shift of ``log(factor) / k`` into the same passes.

    Made in place from uniform ``u`` as ``log(-factor log u)``, allocating one tensor (the noise
    needs no gradient). ``-log u`` is a standard exponential draw, as is the ``-log(1 - u)`` of
    the textbook formula; torch's own ``exponential_`` is several times slower on CPU.
    """
    noise = torch.rand(shape, dtype=like.dtype, device=like.device)
    finfo = torch.finfo(noise.dtype)  # log u finite, and -log u above 0
    return noise.clamp_(finfo.tiny, 1 - finfo.eps).log_().mul_(-factor).log_()


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

    Examples
    --------
    The closed form that ``kl_divergence`` uses for a Weibull against a Gamma:

    >>> import torch
    >>> from torch.distributions import Gamma, Weibull, kl_divergence
    >>> from zoo.bayesian_attention.torch_distributions import kl_weibull_gamma
    >>> kl_weibull_gamma(2.0, torch.tensor(0.0), 2.0, 1.0)  # k = 2, lambda = 1, Gamma(2, 1)
    tensor(0.5794)
    >>> kl_divergence(Weibull(1.0, 2.0), Gamma(2.0, 1.0))
    tensor(0.5794)
    """
    log_scale = torch.as_tensor(log_scale)
    k, alpha, beta = (
        compact(torch.as_tensor(a, dtype=log_scale.dtype, device=log_scale.device))
        for a in (concentration, alpha, beta)
    )
    # Grouped so that only a few operations touch the full shape of log_scale; the rest has the
    # (often much smaller) shapes of the parameters.
    log_beta = torch.log(beta)
    constant = (
        torch.log(k)
        + torch.lgamma(alpha)
        + alpha * (EULER_GAMMA / k - log_beta)
        - (EULER_GAMMA + 1)
    )
    # beta * E[S] in log space: for a small k, Gamma(1 + 1/k) overflows and lambda underflows
    # (inf * 0) long before their product does.
    log_mean_factor = torch.lgamma(1 + 1 / k) + log_beta
    return constant - alpha * log_scale + torch.exp(log_scale + log_mean_factor)


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

    Examples
    --------
    >>> import torch
    >>> from torch.distributions import LogNormal, kl_divergence
    >>> from zoo.bayesian_attention.torch_distributions import kl_lognormal_lognormal
    >>> kl_lognormal_lognormal(0.0, 1.0, 0.5, 2.0)
    tensor(0.3494)
    >>> kl_divergence(LogNormal(0.0, 1.0), LogNormal(0.5, 2.0))
    tensor(0.3494)
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
    :math:`x = \lambda (-\log u)^{1/k}` with :math:`u \sim U(0, 1)`, differentiable in
    both parameters, so a guide can ``pyro.sample`` it under ``Trace_ELBO`` or, against a
    ``Gamma`` prior, ``TraceMeanField_ELBO`` (the KL is registered).

    Parameters
    ----------
    log_scale : Tensor or float
        :math:`\log\lambda`, unconstrained.
    concentration : Tensor or float
        The shape :math:`k > 0`.
    validate_args : bool, optional
        Check the parameters (and values passed to ``log_prob``) against their constraints.

    Attributes
    ----------
    log_scale : Tensor
        :math:`\log\lambda`, broadcast with ``concentration``.
    concentration : Tensor
        :math:`k`, broadcast with ``log_scale``.

    Notes
    -----
    ``batch_shape`` is the broadcast shape of the parameters; ``event_shape`` is ``()``.

    Examples
    --------
    >>> import torch
    >>> from torch.distributions import Gamma, Weibull, kl_divergence
    >>> from zoo.bayesian_attention.torch_distributions import LogScaleWeibull
    >>> d = LogScaleWeibull(torch.tensor(0.0), torch.tensor(2.0))  # lambda = 1, k = 2
    >>> d.mean, d.variance
    (tensor(0.8862), tensor(0.2146))
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> x = d.rsample((3,))
    >>> torch.allclose(d.log_prob(x), Weibull(1.0, 2.0).log_prob(x))
    True
    >>> kl_divergence(d, Gamma(2.0, 1.0))  # registered: the closed form
    tensor(0.5794)
    """

    arg_constraints = {"log_scale": constraints.real, "concentration": constraints.positive}
    support = constraints.positive
    has_rsample = True

    def __init__(self, log_scale, concentration, validate_args=None):
        self.log_scale, self.concentration = broadcast_all(log_scale, concentration)
        super().__init__(self.log_scale.shape, validate_args=validate_args)

    @property
    def scale(self) -> torch.Tensor:
        r"""The Weibull scale :math:`\lambda = e^{\text{log\_scale}}`."""
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
        noise = weibull_log_noise(shape, self.log_scale)
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
        log_mean_factor = torch.lgamma(1 + 1 / k)
        # mean^2 (Gamma(1 + 2/k) / Gamma(1 + 1/k)^2 - 1), the ratio in log space: for a small k
        # each Gamma overflows, and the scale's square underflows, long before the variance does.
        mean_squared = torch.exp(2 * (self.log_scale + log_mean_factor))
        return mean_squared * torch.expm1(torch.lgamma(1 + 2 / k) - 2 * log_mean_factor)

    def entropy(self) -> torch.Tensor:
        k = self.concentration
        return EULER_GAMMA * (1 - 1 / k) + self.log_scale - torch.log(k) + 1


def _event_sum(t: torch.Tensor) -> torch.Tensor:
    return t.sum((-3, -2, -1))


class _AttentionLayer(TorchDistribution):
    """Positive, reparameterised weights of one attention layer: one event of shape (heads,
    queries, keys), the mask held inside. A subclass sets up a copy for a new full shape in
    ``_init_expanded``."""

    arg_constraints = {}
    support = constraints.independent(constraints.positive, 3)
    has_rsample = True

    def expand(self, batch_shape, _instance=None):
        batch_shape = torch.Size(batch_shape)
        if _instance is None and batch_shape == self.batch_shape:
            return self  # (Pyro expands every site's distribution to the plates' shape)
        new = self._get_checked_instance(type(self), _instance)
        self._init_expanded(new, batch_shape + self.event_shape)
        new._validate_args = self._validate_args
        return new

    def _init_expanded(self, new, shape: torch.Size) -> None:
        raise NotImplementedError


def _pair_shape(q: _AttentionLayer, p: _AttentionLayer) -> torch.Size:
    """The broadcast full shape of two layers (the usual case, equal shapes, skips torch's
    broadcast_shapes, slow in Python)."""
    shape, p_shape = q.batch_shape + q.event_shape, p.batch_shape + p.event_shape
    return shape if shape == p_shape else torch.broadcast_shapes(shape, p_shape)


class WeibullAttention(_AttentionLayer):
    r"""q(S) of one attention layer: independent Weibull weights whose means are the softmax
    weights ``p`` of the logits over the visible keys (shape ``k``, scale
    :math:`\lambda = p / \Gamma(1 + 1/k)`); one event of shape (heads, queries, keys).

    Hidden keys (``mask`` False) have no weight: they are left out of the log-density and the KL,
    and their draws are placeholders. Draws keep their log (:func:`log_of_draw`). Against
    :class:`GammaAttention` the KL, summed over the event, has a closed form in which the only
    work on the whole event is one sum of ``log p`` (:func:`kl_weibull_gamma_attention`).

    Parameters
    ----------
    logits : Tensor, shape (..., heads, queries, keys)
    concentration : float
        The Weibull shape :math:`k > 0`, shared by every weight.
    mask : bool Tensor broadcastable to (queries, keys), optional
        True where a key is visible; every query must see a key.
    validate_args : bool, optional
        Check values passed to ``log_prob`` against the support.

    Attributes
    ----------
    log_p : Tensor, shape (..., heads, queries, keys)
        The log softmax weights over the visible keys (0 on hidden keys).
    concentration : float
        As given.
    mask : bool Tensor or None
        As given.

    Examples
    --------
    One layer of 2 heads, 3 queries and 4 keys; the queries see 2, 3 and 4 keys:

    >>> import torch
    >>> from torch.distributions import kl_divergence
    >>> from zoo.bayesian_attention.torch_distributions import GammaAttention, WeibullAttention
    >>> logits = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0))
    >>> mask = torch.arange(4) <= torch.arange(1, 4)[:, None]
    >>> q = WeibullAttention(logits, concentration=10.0, mask=mask)
    >>> q.batch_shape, q.event_shape
    (torch.Size([]), torch.Size([2, 3, 4]))
    >>> q.mean[0]  # the softmax weights over the visible keys
    tensor([[0.5066, 0.4934, 0.0000, 0.0000],
            [0.4615, 0.3945, 0.1440, 0.0000],
            [0.1998, 0.1069, 0.5301, 0.1633]])
    >>> weights = q.rsample()
    >>> weights.shape, q.log_prob(weights).shape  # one event: the log-density is summed
    (torch.Size([2, 3, 4]), torch.Size([]))

    Against a Gamma prior, the KL of the whole layer in closed form:

    >>> prior = GammaAttention(torch.tensor(1.0), 1.0, (2, 3, 4), mask=mask)
    >>> kl_divergence(q, prior)
    tensor(43.0464)
    """

    def __init__(self, logits, concentration: float, mask=None, validate_args=None):
        log_p = masked_log_softmax(logits, mask)
        if mask is not None:  # a finite placeholder, as for the draws
            log_p = torch.where(mask, log_p, 0.0)
        self._set(log_p, float(concentration), mask, validate_args)

    def _set(self, log_p, concentration, mask, validate_args):
        self.log_p, self.concentration, self.mask = log_p, concentration, mask
        self.log_mean_factor = math.lgamma(1 + 1 / concentration)  # log p - log(lambda)
        super().__init__(log_p.shape[:-3], log_p.shape[-3:], validate_args=validate_args)

    def _init_expanded(self, new, shape):
        new._set(self.log_p.expand(shape), self.concentration, self.mask, validate_args=False)

    @property
    def log_scale(self) -> torch.Tensor:
        r"""The Weibull log-scale of each weight, :math:`\log p - \log\Gamma(1 + 1/k)`."""
        return self.log_p - self.log_mean_factor

    @property
    def mean(self) -> torch.Tensor:
        """The softmax weights ``p`` (0 on hidden keys)."""
        p = self.log_p.exp()
        return p if self.mask is None else torch.where(self.mask, p, 0.0)

    def rsample(self, sample_shape=()) -> torch.Tensor:
        # log S = log p - c + log(E) / k with c the log mean factor, written
        # log p + log(E exp(-kc)) / k: the noise made in place, then one operation.
        k = self.concentration
        shape = self._extended_shape(sample_shape)
        noise = weibull_log_noise(shape, self.log_p, math.exp(-k * self.log_mean_factor))
        return exp_keeping_log(torch.add(self.log_p, noise, alpha=1 / k))

    def log_prob(self, value) -> torch.Tensor:
        if self._validate_args:
            self._validate_sample(value)
        k, log_scale = self.concentration, self.log_scale
        z = log_of_draw(value) - log_scale
        log_density = math.log(k) - log_scale + (k - 1) * z - torch.exp(k * z)
        if self.mask is not None:
            log_density = torch.where(self.mask, log_density, 0.0)
        return _event_sum(log_density)


def _compact_to(param: torch.Tensor, shape: torch.Size, name: str) -> torch.Tensor:
    """``param`` with its dimensions aligned to ``shape`` (size 1 on the left where missing) and
    kept as its distinct values (:func:`compact`), not expanded: slicing an expanded tensor back
    would make the backward pass fill a tensor of the full shape with zeros."""
    lead = len(shape) - param.dim()
    if lead < 0 or any(c not in (1, s) for c, s in zip(param.shape, shape[lead:], strict=True)):
        raise ValueError(
            f"expected a {name} broadcastable to {tuple(shape)}; got shape {tuple(param.shape)}."
        )
    if lead:
        param = param.reshape((1,) * lead + param.shape)
    return compact(param)


class GammaAttention(_AttentionLayer):
    r"""p(S) of one attention layer: independent Gamma(:math:`\alpha`, :math:`\beta`) weights
    on the visible keys; one event of shape (heads, queries, keys).

    The shape is kept as its distinct values (:func:`compact`): a contextual prior's shape per
    key, shared by every query, costs one ``lgamma`` per key.

    Parameters
    ----------
    concentration : Tensor broadcastable to ``shape``
        :math:`\alpha > 0`.
    rate : float
        :math:`\beta > 0`, shared by every weight.
    shape : torch.Size
        Batch shape + (heads, queries, keys).
    mask : bool Tensor broadcastable to (queries, keys), optional
        True where a key is visible.
    validate_args : bool, optional
        Check values passed to ``log_prob`` against the support.

    Attributes
    ----------
    concentration : Tensor
        :math:`\alpha`, as its distinct values (broadcastable to ``shape``).
    rate : float
        As given.
    mask : bool Tensor or None
        As given.

    Raises
    ------
    ValueError
        ``concentration`` does not broadcast to ``shape``.

    Examples
    --------
    A contextual prior's shape per key, shared by the heads and queries:

    >>> import torch
    >>> from zoo.bayesian_attention.torch_distributions import GammaAttention
    >>> alpha = torch.tensor([0.5, 1.0, 2.0, 4.0])
    >>> prior = GammaAttention(alpha, 1.0, (2, 3, 4))
    >>> prior.batch_shape, prior.event_shape, prior.concentration.shape
    (torch.Size([]), torch.Size([2, 3, 4]), torch.Size([1, 1, 4]))
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> weights = prior.rsample((5,))
    >>> weights.shape, prior.log_prob(weights).shape
    (torch.Size([5, 2, 3, 4]), torch.Size([5]))
    """

    def __init__(self, concentration, rate: float, shape, mask=None, validate_args=None):
        shape = torch.Size(shape)
        self.concentration = _compact_to(concentration, shape, "concentration")
        self.rate, self.mask = float(rate), mask
        super().__init__(shape[:-3], shape[-3:], validate_args=validate_args)

    def _init_expanded(self, new, shape):
        GammaAttention.__init__(new, self.concentration, self.rate, shape, self.mask, False)

    def rsample(self, sample_shape=()) -> torch.Tensor:
        shape = self._extended_shape(sample_shape)
        draws = torch._standard_gamma(self.concentration.expand(shape)) / self.rate
        return draws.clamp_min(torch.finfo(draws.dtype).tiny)

    def log_prob(self, value) -> torch.Tensor:
        if self._validate_args:
            self._validate_sample(value)
        alpha, beta = self.concentration, self.rate
        log_density = (
            alpha * math.log(beta)
            - torch.lgamma(alpha)
            + (alpha - 1) * log_of_draw(value)
            - beta * value
        )
        if self.mask is not None:
            log_density = torch.where(self.mask, log_density, 0.0)
        return _event_sum(log_density)


class LogNormalAttention(_AttentionLayer):
    r"""Independent log-normal weights :math:`\log S \sim \mathcal N(\log m - \sigma^2/2,
    \sigma^2)` on the visible keys (so :math:`E[S] = m`); one event of shape (heads, queries,
    keys). Both sides of log-normal attention: the posterior with ``m`` the softmax weights
    ``p`` of the logits, the prior with ``m`` a fixed or contextual prior mean.

    The log-mean is kept as its distinct values (:func:`compact`): a contextual prior mean per
    key, shared by every query, is not expanded. Against another ``LogNormalAttention`` the KL,
    summed over the event, costs one pass over the weights (:func:`kl_lognormal_attention`).
    Draws keep their log (:func:`log_of_draw`).

    Parameters
    ----------
    log_mean : Tensor broadcastable to ``shape``
        :math:`\log m`; finite on hidden keys (a placeholder there).
    scale : float
        :math:`\sigma > 0`, shared by every weight.
    shape : torch.Size
        Batch shape + (heads, queries, keys).
    mask : bool Tensor broadcastable to (queries, keys), optional
        True where a key is visible; hidden keys are left out of the log-density and the KL.
    validate_args : bool, optional
        Check values passed to ``log_prob`` against the support.

    Attributes
    ----------
    log_mean : Tensor
        :math:`\log m`, as its distinct values (broadcastable to ``shape``).
    scale : float
        As given.
    mask : bool Tensor or None
        As given.

    Raises
    ------
    ValueError
        ``log_mean`` does not broadcast to ``shape``.

    Examples
    --------
    The posterior around the softmax weights, the prior around uniform weights over 4 keys:

    >>> import math
    >>> import torch
    >>> from torch.distributions import kl_divergence
    >>> from zoo.bayesian_attention.torch_distributions import LogNormalAttention
    >>> logits = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0))
    >>> q = LogNormalAttention(torch.log_softmax(logits, -1), 0.5, (2, 3, 4))
    >>> p = LogNormalAttention(torch.full((4,), -math.log(4)), 1.0, (2, 3, 4))
    >>> q.mean.sum(-1)  # E[S] = m: each query's mean weights sum to one
    tensor([[1.0000, 1.0000, 1.0000],
            [1.0000, 1.0000, 1.0000]])
    >>> kl_divergence(q, p)
    tensor(15.4639)
    """

    def __init__(self, log_mean, scale: float, shape, mask=None, validate_args=None):
        shape = torch.Size(shape)
        self.log_mean = _compact_to(log_mean, shape, "log-mean")
        self.scale, self.mask = float(scale), mask
        super().__init__(shape[:-3], shape[-3:], validate_args=validate_args)

    def _init_expanded(self, new, shape):
        LogNormalAttention.__init__(new, self.log_mean, self.scale, shape, self.mask, False)

    @property
    def loc(self) -> torch.Tensor:
        r"""The mean of :math:`\log S`, :math:`\log m - \sigma^2/2` (compact)."""
        return self.log_mean - self.scale**2 / 2

    @property
    def mean(self) -> torch.Tensor:
        """:math:`E[S] = m` (0 on hidden keys), shape ``batch_shape + event_shape``."""
        m = self.log_mean.exp().expand(self.batch_shape + self.event_shape)
        return m if self.mask is None else torch.where(self.mask, m, 0.0)

    def rsample(self, sample_shape=()) -> torch.Tensor:
        shape = self._extended_shape(sample_shape)
        eps = torch.randn(shape, dtype=self.log_mean.dtype, device=self.log_mean.device)
        return exp_keeping_log(torch.add(self.loc, eps, alpha=self.scale))

    def log_prob(self, value) -> torch.Tensor:
        if self._validate_args:
            self._validate_sample(value)
        log_value = log_of_draw(value)
        z = (log_value - self.loc) / self.scale
        log_density = -z.square() / 2 - log_value - math.log(self.scale * math.sqrt(2 * math.pi))
        if self.mask is not None:
            log_density = torch.where(self.mask, log_density, 0.0)
        return _event_sum(log_density)


@register_kl(LogNormalAttention, LogNormalAttention)
def kl_lognormal_attention(q: LogNormalAttention, p: LogNormalAttention) -> torch.Tensor:
    r""":math:`\mathrm{KL}(q \| p)` of one attention layer, summed over its visible weights.

    Per weight (see :func:`kl_lognormal_lognormal`), with :math:`d = \mu_q - \mu_p`,

    .. math::
        \log\frac{\sigma_p}{\sigma_q} + \frac{\sigma_q^2}{2\sigma_p^2} - \frac12
        + \frac{d^2}{2\sigma_p^2}:

    the constant times the number of visible weights, plus one sum of squares over the event.

    Registered with ``torch.distributions.kl_divergence`` for a pair of
    :class:`LogNormalAttention`.

    Parameters
    ----------
    q, p : LogNormalAttention
        The two layers, of shapes that broadcast; the mask is ``q``'s, else ``p``'s.

    Returns
    -------
    Tensor, shape ``batch_shape``
        The KL summed over the visible weights of each event.

    Examples
    --------
    The sum of the elementwise KL (:func:`kl_lognormal_lognormal`) over the layer:

    >>> import math
    >>> import torch
    >>> from zoo.bayesian_attention.torch_distributions import (
    ...     LogNormalAttention, kl_lognormal_attention, kl_lognormal_lognormal,
    ... )
    >>> logits = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0))
    >>> q = LogNormalAttention(torch.log_softmax(logits, -1), 0.5, (2, 3, 4))
    >>> p = LogNormalAttention(torch.full((4,), -math.log(4)), 1.0, (2, 3, 4))
    >>> kl_lognormal_attention(q, p)
    tensor(15.4639)
    >>> kl_lognormal_lognormal(q.loc, q.scale, p.loc, p.scale).sum()
    tensor(15.4639)
    """
    shape = _pair_shape(q, p)
    # mu_q - mu_p = log m_q - (log m_p + (sigma_q^2 - sigma_p^2) / 2): the constant joins the
    # prior's (usually compact) log-mean, so one pass over the layer makes d.
    d = q.log_mean - (p.log_mean + (q.scale**2 - p.scale**2) / 2)
    if d.shape != shape:
        d = d.expand(shape)
    mask = q.mask if q.mask is not None else p.mask
    if mask is None:
        total = math.prod(shape[-3:])
    else:
        d = torch.where(mask, d, 0.0)
        # In d's dtype: an integer sum times a Python float would be of torch's default dtype
        # (float32 in a float64 fit).
        total = mask.expand(shape[-3:]).sum(dtype=d.dtype)
    ratio = q.scale / p.scale
    constant = ratio**2 / 2 - math.log(ratio) - 0.5
    flat = d.flatten(-3)
    return constant * total + torch.linalg.vecdot(flat, flat) / (2 * p.scale**2)


@register_kl(WeibullAttention, GammaAttention)
def kl_weibull_gamma_attention(q: WeibullAttention, p: GammaAttention) -> torch.Tensor:
    r""":math:`\mathrm{KL}(q \| p)` of one attention layer, summed over its visible weights.

    Per weight (see :func:`kl_weibull_gamma`, with :math:`\lambda\Gamma(1 + 1/k) = p`),

    .. math::
        \log k - \gamma - 1 + \log\Gamma(\alpha) + \alpha\left(\frac{\gamma}{k} - \log\beta
        + \log\Gamma(1 + 1/k)\right) - \alpha \log p + \beta p.

    Summed: the terms of :math:`\alpha` alone are weighted by how many visible weights each
    distinct :math:`\alpha` stands for; :math:`\sum \alpha \log p` sums ``log p`` over the
    axes :math:`\alpha` is shared along first; and :math:`\sum \beta p` is :math:`\beta` per
    query row, since ``p`` sums to one over each row's visible keys.

    Registered with ``torch.distributions.kl_divergence`` for (:class:`WeibullAttention`,
    :class:`GammaAttention`).

    Parameters
    ----------
    q : WeibullAttention
        The posterior of the layer; its mask says which weights are visible.
    p : GammaAttention
        The prior of the layer.

    Returns
    -------
    Tensor, shape ``batch_shape``
        The KL summed over the visible weights of each event.

    Examples
    --------
    The sum of the elementwise KL (:func:`kl_weibull_gamma`) over the visible weights:

    >>> import torch
    >>> from zoo.bayesian_attention.torch_distributions import (
    ...     GammaAttention, WeibullAttention, kl_weibull_gamma, kl_weibull_gamma_attention,
    ... )
    >>> logits = torch.randn(2, 3, 4, generator=torch.Generator().manual_seed(0))
    >>> mask = torch.arange(4) <= torch.arange(1, 4)[:, None]
    >>> q = WeibullAttention(logits, concentration=10.0, mask=mask)
    >>> p = GammaAttention(torch.tensor(1.0), 1.0, (2, 3, 4), mask=mask)
    >>> kl_weibull_gamma_attention(q, p)
    tensor(43.0464)
    >>> (kl_weibull_gamma(10.0, q.log_scale, 1.0, 1.0) * mask).sum()
    tensor(43.0464)
    """
    shape = _pair_shape(q, p)
    ndim = len(shape)
    alpha = p.concentration
    if alpha.dim() < ndim:
        alpha = alpha.reshape((1,) * (ndim - alpha.dim()) + alpha.shape)
    k, beta = q.concentration, p.rate
    shared = tuple(d for d in range(ndim - 3, ndim) if alpha.shape[d] == 1 and shape[d] > 1)
    # How many visible weights of each event one value of alpha stands for, how many there are
    # in all, and how many query rows see a key (over the heads).
    if q.mask is None:
        counts = math.prod(shape[d] for d in shared)
        total = math.prod(shape[-3:])
        rows = shape[-3] * shape[-2]
    else:
        visible = q.mask.to(alpha.dtype).expand((1,) * (ndim - 3) + tuple(shape[-3:]))
        counts = visible.sum(shared, keepdim=True) if shared else visible
        total = visible.sum()
        rows = visible.amax(-1).sum()
    log_p = q.log_p.sum(shared, keepdim=True) if shared else q.log_p  # hidden keys hold 0
    # Per distinct alpha: counts * (lgamma(alpha) + alpha c) - alpha log_p, written so that a
    # count that is a number costs no operation of its own (each one a kernel on a GPU).
    c = EULER_GAMMA / k - math.log(beta) + q.log_mean_factor
    terms = alpha * (counts * c - log_p)
    lgamma = torch.lgamma(alpha)
    if isinstance(counts, torch.Tensor):
        terms = terms + counts * lgamma
    else:
        terms = torch.add(terms, lgamma, alpha=counts)
    kl = _event_sum(terms) + ((math.log(k) - EULER_GAMMA - 1) * total + beta * rows)
    return kl.expand(shape[:-3])


@register_kl(Weibull, Gamma)
def _kl_weibull_gamma(p, q):
    return kl_weibull_gamma(p.concentration, torch.log(p.scale), q.concentration, q.rate)


@register_kl(LogScaleWeibull, Gamma)
def _kl_log_scale_weibull_gamma(p, q):
    return kl_weibull_gamma(p.concentration, p.log_scale, q.concentration, q.rate)


@register_kl(pyro.distributions.LogNormal, pyro.distributions.LogNormal)
def _kl_pyro_lognormal(p, q):
    return kl_lognormal_lognormal(p.loc, p.scale, q.loc, q.scale)
