r"""Bayesian attention modules in torch (Fan, Zhang, Chen & Zhou, NeurIPS 2020).

One attention site: from queries, keys and values, the deterministic softmax weights
:math:`p = \mathrm{softmax}(q k^\top / \sqrt{D})` over the visible keys, then

* ``"softmax"``: weights :math:`p`, no KL;
* ``"weibull"``: :math:`S \sim \mathrm{Weibull}(k, \lambda)`, :math:`\lambda = p / \Gamma(1 +
  1/k)` (so :math:`E[S] = p`), drawn as :math:`\lambda(-\log(1 - u))^{1/k}`; prior
  :math:`\mathrm{Gamma}(\alpha, \beta)`;
* ``"lognormal"``: :math:`\log S \sim \mathcal N(\log p - \sigma^2/2, \sigma^2)` (so
  :math:`E[S] = p`); prior :math:`\log S \sim \mathcal N(\log m - \sigma_0^2/2, \sigma_0^2)`
  (mean ``m``);

and the weights :math:`S / \sum_j S_j`, computed in log space (a softmax of :math:`\log S`).
The prior is ``"fixed"`` or ``"contextual"``: :math:`\alpha` or ``m`` is
:class:`ContextualPrior` of the keys, a softmax over keys. In ``mode="eval"`` the weights are
the posterior-mean weights :math:`p` or, with ``num_samples=S``, the average of ``S`` draws.

The twin :mod:`zoo.bayesian_attention.jax_bam` has the same names and, for the same noise and
parameters, gives the same numbers. The argument checks read the mask and any array-valued
parameters on the host (one device synchronisation per call on a GPU). Importing this module
registers ``KL(Weibull || Gamma)`` with torch (see
:mod:`zoo.bayesian_attention.torch_distributions`).
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from zoo.array_namespace import TorchOps
from zoo.bayesian_attention import _algebra, torch_distributions
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
from zoo.bayesian_attention.torch_distributions import (
    LogScaleWeibull,
    clamp_uniform,
    compact,
    kl_lognormal_lognormal,
    kl_weibull_gamma,
    masked_log_softmax,
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

_XP = TorchOps()


# ------------------------------------------------------------------------------ building blocks


def attention_logits(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    r"""Scaled dot-product logits :math:`q k^\top / \sqrt{D}`.

    Parameters
    ----------
    q : Tensor, shape (..., Lq, D)
    k : Tensor, shape (..., Lk, D)

    Returns
    -------
    Tensor, shape (..., Lq, Lk)
    """
    return _algebra.attention_logits(q, k, _XP)


def weibull_log_scale(log_p: torch.Tensor, concentration) -> torch.Tensor:
    r""":math:`\log\lambda = \log p - \log\Gamma(1 + 1/k)`, the Weibull scale with mean ``p``.

    Parameters
    ----------
    log_p : Tensor, shape (..., Lk)
        Log posterior means.
    concentration : float or Tensor broadcastable to ``log_p``
        The Weibull shape :math:`k > 0`.
    """
    k = compact(torch.as_tensor(concentration, dtype=log_p.dtype, device=log_p.device))
    return _algebra.weibull_log_scale(log_p, k, _XP)


def weibull_log_weights(log_p: torch.Tensor, concentration, u: torch.Tensor) -> torch.Tensor:
    r"""Unnormalised log weights :math:`\log S = \log\lambda + \frac1k \log(-\log(1 - u))`.

    Parameters
    ----------
    log_p : Tensor, shape (..., Lk)
        Log posterior means :math:`\log E[S]`.
    concentration : float or Tensor
        The Weibull shape :math:`k > 0`.
    u : Tensor, shape (...) broadcastable with ``log_p``
        Uniform noise in (0, 1), clamped to ``[tiny, 1 - eps]`` of its dtype.

    Returns
    -------
    Tensor, the broadcast shape of ``log_p`` and ``u``
    """
    k = compact(torch.as_tensor(concentration, dtype=log_p.dtype, device=log_p.device))
    return _algebra.weibull_log_weights(log_p, k, clamp_uniform(u), _XP)


def lognormal_log_weights(log_p: torch.Tensor, sigma, eps: torch.Tensor) -> torch.Tensor:
    r"""Unnormalised log weights :math:`\log S = \log p - \sigma^2/2 + \sigma\varepsilon`.

    Parameters
    ----------
    log_p : Tensor, shape (..., Lk)
        Log posterior means :math:`\log E[S]`.
    sigma : float or Tensor
        Standard deviation of :math:`\log S`, positive.
    eps : Tensor broadcastable with ``log_p``
        Standard normal noise.
    """
    sigma = torch.as_tensor(sigma, dtype=log_p.dtype, device=log_p.device)
    return _algebra.lognormal_log_weights(log_p, sigma, eps)


class ContextualPrior(nn.Module):
    r"""The contextual prior: which keys matter, from the keys alone.

    A two-layer network ``Linear(D, H) -> ReLU -> Linear(H, 1)`` scores each key; a softmax over
    the visible keys turns the scores into the Gamma shape :math:`\alpha` (Weibull attention) or
    the prior mean ``m`` (log-normal attention) of every query (the query is not seen).

    Parameters
    ----------
    key_dim : int
        ``D``, the last dimension of the keys.
    hidden_dim : int, optional
        ``H``; defaults to ``key_dim``.
    device, dtype : optional
        Passed to :class:`torch.nn.Linear`.
    """

    def __init__(self, key_dim: int, hidden_dim: int | None = None, *, device=None, dtype=None):
        super().__init__()
        hidden_dim = key_dim if hidden_dim is None else hidden_dim
        for name, value in (("key_dim", key_dim), ("hidden_dim", hidden_dim)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"expected {name} to be a positive int; got {value!r}.")
        self.hidden = nn.Linear(key_dim, hidden_dim, device=device, dtype=dtype)
        self.out = nn.Linear(hidden_dim, 1, device=device, dtype=dtype)

    def scores(self, k: torch.Tensor) -> torch.Tensor:
        """Unnormalised key scores, shape (..., Lk), from keys of shape (..., Lk, D)."""
        if k.dim() >= 3 and not k.is_contiguous() and k.transpose(-3, -2).is_contiguous():
            # Keys split into heads are a transposed view (..., H, Lk, D) of (..., Lk, H, D):
            # score them in that layout, so that neither the forward nor the backward pass
            # copies the keys, and copy the (D times smaller) scores into the heads' layout,
            # where the softmax over keys reads contiguous rows.
            return self._score(k.transpose(-3, -2)).transpose(-1, -2).contiguous()
        return self._score(k)

    def _score(self, k: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(k))).squeeze(-1)

    def log_weights(self, k: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Log-softmax of the scores over the visible keys.

        Parameters
        ----------
        k : Tensor, shape (..., Lk, D)
        mask : bool Tensor, broadcastable to (..., Lq, Lk), optional

        Returns
        -------
        Tensor, shape (..., 1, Lk) without a mask, else the broadcast shape with ``mask``;
        ``-inf`` on hidden keys.
        """
        return masked_log_softmax(self.scores(k).unsqueeze(-2), mask)

    def forward(self, k: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Prior weights (softmax over visible keys, zero on hidden ones); see log_weights."""
        return self.log_weights(k, mask).exp()


# ------------------------------------------------------------------------------ checks


def _concrete(x) -> np.ndarray | None:
    if x is None:
        return None
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return np.asarray(x, dtype=float)


def _prepare_mask(mask, shape) -> torch.Tensor | None:
    if mask is None:
        return None
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        got = f"dtype {mask.dtype}" if isinstance(mask, torch.Tensor) else type(mask).__name__
        raise ValueError(f"expected mask to be a bool Tensor (True = visible key); got {got}.")
    try:
        mask = mask.expand(shape)
    except RuntimeError:
        raise ValueError(
            f"expected a mask broadcastable to the logits' shape {tuple(shape)} (..., Lq, Lk); "
            f"got shape {tuple(mask.shape)}."
        ) from None
    check_mask_rows(mask.cpu().numpy())
    return mask


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
    generator,
):
    """The checked core (``_algebra.weights_and_kl``) with torch's noise."""
    dtype, device = logits.dtype, logits.device

    def draw_noise(shape):
        sampler = torch.rand if attention == "weibull" else torch.randn
        return sampler(shape, dtype=dtype, device=device, generator=generator)

    # compact: the special functions of a broadcast Weibull shape once per distinct value.
    k = compact(torch.as_tensor(concentration, dtype=dtype, device=device))
    return _algebra.weights_and_kl(
        logits,
        mask,
        attention,
        k,
        sigma,
        prior_log_param,
        prior_beta,
        prior_sigma,
        mode,
        num_samples,
        noise,
        draw_noise,
        torch_distributions,
        _XP,
    )


def attention_weights(
    logits: torch.Tensor,
    mask: torch.Tensor | None = None,
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
    noise: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    r"""Attention weights and KL term from logits, given the prior parameters.

    Parameters
    ----------
    logits : Tensor, shape (..., Lq, Lk)
        Attention logits; the posterior mean of :math:`S` is their softmax over visible keys.
    mask : bool Tensor, broadcastable to ``logits``, optional
        True where a key is visible; every query must see at least one key.
    attention : {"softmax", "weibull", "lognormal"}
    concentration : float or Tensor
        Weibull shape :math:`k > 0`; larger is less noisy (coefficient of variation about
        :math:`1.28/k`).
    sigma : float or Tensor
        Standard deviation of :math:`\log S` for ``"lognormal"``, positive.
    prior_alpha, prior_beta : float or Tensor broadcastable to ``logits``
        Gamma prior of ``"weibull"`` (shape, rate), positive. Like ``prior_mean``, may come
        from a contextual prior (``ContextualPrior(k, mask)``): values on hidden keys are
        ignored (and their gradients are zero).
    prior_mean : float or Tensor broadcastable to ``logits``, optional
        Prior mean of :math:`S` for ``"lognormal"``, positive; default ``1 / (number of visible
        keys)``, the uniform attention.
    prior_sigma : float or Tensor broadcastable to ``logits``
        Prior standard deviation of :math:`\log S` for ``"lognormal"``, positive.
    mode : {"train", "eval"}
        ``"train"`` draws one sample; ``"eval"`` returns the posterior-mean weights (the
        softmax) or, with ``num_samples > 0``, the average of that many draws.
    num_samples : int
        0 or 1 in ``"train"``; >= 0 in ``"eval"``.
    noise : Tensor, optional
        The noise to use instead of drawing it: uniform ``u`` in (0, 1) for ``"weibull"``,
        standard normal for ``"lognormal"``; shape ``logits.shape`` in ``"train"``,
        ``(num_samples,) + logits.shape`` in ``"eval"``. Ignored when nothing is drawn.
    generator : torch.Generator, optional
        Source of the noise when ``noise`` is None.

    Returns
    -------
    weights : Tensor, shape (..., Lq, Lk)
        Normalised weights, zero on hidden keys; differentiable in ``logits`` (pathwise).
    kl : Tensor, shape (..., Lq)
        Analytic ``KL(q(S) || p(S))`` summed over the visible keys (the same in both modes).

    Raises
    ------
    ValueError
        For an unknown ``attention`` or ``mode``, non-positive ``concentration``, ``sigma`` or
        prior parameters, a mask hiding every key of a query, or noise of the wrong shape.
    """
    num_samples = _check_common(attention, concentration, sigma, mode, num_samples)
    logits = torch.as_tensor(logits)
    mask = _prepare_mask(mask, logits.shape)
    visible = None if mask is None else mask.cpu().numpy()
    for name, value in (
        ("prior_alpha", prior_alpha),
        ("prior_beta", prior_beta),
        ("prior_mean", prior_mean),
        ("prior_sigma", prior_sigma),
    ):
        check_prior_param(name, _concrete(value), logits.shape, visible)
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
        generator,
    )


def bayesian_attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    mask: torch.Tensor | None = None,
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
    noise: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> BamOutput:
    r"""One Bayesian attention site: output and KL term.

    Parameters
    ----------
    q : Tensor, shape (..., Lq, D)
    k : Tensor, shape (..., Lk, D)
    v : Tensor, shape (..., Lk, Dv)
    mask : bool Tensor, broadcastable to (..., Lq, Lk), optional
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
    prior_alpha, prior_beta, prior_mean, prior_sigma, mode, num_samples, noise, generator
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
    check_shapes(q.shape, k.shape, v.shape)
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
            generator=generator,
        )
        return BamOutput(weights @ v, weights, kl)
    num_samples = _check_common(attention, concentration, sigma, mode, num_samples)
    logits = attention_logits(q, k)
    mask = _prepare_mask(mask, logits.shape)
    visible = None if mask is None else mask.cpu().numpy()
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
        generator,
    )
    return BamOutput(weights @ v, weights, kl)
