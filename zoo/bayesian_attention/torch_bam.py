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
from zoo.bayesian_attention import _algebra, _docs, _site, torch_distributions
from zoo.bayesian_attention._common import (
    ATTENTION_TYPES,
    MODES,
    PRIOR_TYPES,
    BamOutput,
    check_key_dims,
    check_mask_rows,
    check_prior_keys,
)
from zoo.bayesian_attention.torch_distributions import (
    LogScaleWeibull,
    clamp_uniform,
    compact,
    kl_lognormal_lognormal,
    kl_weibull_gamma,
    masked_log_softmax,
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

_XP = TorchOps()
_DOC_FIELDS = {
    "array": "Tensor",
    "rng": "generator",
    "rng_type": "torch.Generator",
    "rng_meaning": "Source of the noise when ``noise`` is None.",
}


# ------------------------------------------------------------------------------ building blocks


@shared_sections(_docs.ATTENTION_LOGITS, **_DOC_FIELDS)
def attention_logits(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    r"""Scaled dot-product logits :math:`q k^\top / \sqrt{D}`."""
    return _algebra.attention_logits(q, k, _XP)


@shared_sections(_docs.WEIBULL_LOG_SCALE, **_DOC_FIELDS)
def weibull_log_scale(log_p: torch.Tensor, concentration) -> torch.Tensor:
    r""":math:`\log\lambda = \log p - \log\Gamma(1 + 1/k)`, the Weibull scale with mean ``p``."""
    k = _BACKEND.concentration(concentration, log_p)
    return _algebra.weibull_log_scale(log_p, k, _XP)


@shared_sections(_docs.WEIBULL_LOG_WEIGHTS, **_DOC_FIELDS)
def weibull_log_weights(log_p: torch.Tensor, concentration, u: torch.Tensor) -> torch.Tensor:
    r"""Unnormalised log weights :math:`\log S = \log\lambda + \frac1k \log(-\log(1 - u))`."""
    k = _BACKEND.concentration(concentration, log_p)
    return _algebra.weibull_log_weights(log_p, k, clamp_uniform(u), _XP)


@shared_sections(_docs.LOGNORMAL_LOG_WEIGHTS, **_DOC_FIELDS)
def lognormal_log_weights(log_p: torch.Tensor, sigma, eps: torch.Tensor) -> torch.Tensor:
    r"""Unnormalised log weights :math:`\log S = \log p - \sigma^2/2 + \sigma\varepsilon`."""
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
        ``D``, the last dimension of the keys (keys of another width are refused with a
        ValueError).
    hidden_dim : int, optional
        ``H``; defaults to ``key_dim``.
    device, dtype : optional
        Passed to :class:`torch.nn.Linear`.
    """

    def __init__(self, key_dim: int, hidden_dim: int | None = None, *, device=None, dtype=None):
        super().__init__()
        hidden_dim = check_key_dims(key_dim, hidden_dim)
        self.hidden = nn.Linear(key_dim, hidden_dim, device=device, dtype=dtype)
        self.out = nn.Linear(hidden_dim, 1, device=device, dtype=dtype)

    def scores(self, k: torch.Tensor) -> torch.Tensor:
        """Unnormalised key scores, shape (..., Lk), from keys of shape (..., Lk, D)."""
        check_prior_keys(k.shape, self.hidden.in_features)
        if k.dim() >= 3 and not k.is_contiguous() and k.transpose(-3, -2).is_contiguous():
            # Keys split into heads are a transposed view (..., H, Lk, D) of (..., Lk, H, D):
            # score them in that layout, so that neither the forward nor the backward pass
            # copies the keys, and copy the (D times smaller) scores into the heads' layout,
            # where the softmax over keys reads contiguous rows.
            return self._score(k.transpose(-3, -2)).transpose(-1, -2).contiguous()
        return self._score(k)

    def _score(self, k: torch.Tensor) -> torch.Tensor:
        return self.out(torch.relu(self.hidden(k))).squeeze(-1)

    @shared_sections(_docs.CONTEXTUAL_LOG_WEIGHTS, **_DOC_FIELDS)
    def log_weights(self, k: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Log-softmax of the scores over the visible keys."""
        return masked_log_softmax(self.scores(k).unsqueeze(-2), mask)

    def forward(self, k: torch.Tensor, mask: torch.Tensor | None = None) -> torch.Tensor:
        """Prior weights (softmax over visible keys, zero on hidden ones); see log_weights."""
        return self.log_weights(k, mask).exp()


# ------------------------------------------------------------------------------ the site


class _Torch:
    """torch's side of a site (``_site.Backend``)."""

    xp = _XP
    dists = torch_distributions

    def asarray(self, x):
        return torch.as_tensor(x)

    def shape(self, x):
        return x.shape

    def concrete(self, x) -> np.ndarray | None:
        if x is None:
            return None
        if isinstance(x, torch.Tensor):
            return x.detach().cpu().numpy()
        return np.asarray(x, dtype=float)

    def concrete_mask(self, mask) -> np.ndarray | None:
        return None if mask is None else mask.cpu().numpy()

    def prepare_mask(self, mask, logits):
        if mask is None:
            return None, logits
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            got = f"dtype {mask.dtype}" if isinstance(mask, torch.Tensor) else type(mask).__name__
            raise ValueError(f"expected mask to be a bool Tensor (True = visible key); got {got}.")
        try:
            mask = mask.expand(logits.shape)
        except RuntimeError:
            raise ValueError(
                f"expected a mask broadcastable to the logits' shape {tuple(logits.shape)} "
                f"(..., Lq, Lk); got shape {tuple(mask.shape)}."
            ) from None
        check_mask_rows(mask.cpu().numpy())
        return mask, logits

    def concentration(self, value, like):
        # compact: the special functions of a broadcast Weibull shape once per distinct value.
        return compact(torch.as_tensor(value, dtype=like.dtype, device=like.device))

    def draw_noise(self, shape, like, options):
        sampler = torch.rand if options.attention == "weibull" else torch.randn
        return sampler(shape, dtype=like.dtype, device=like.device, generator=options.rng)


_BACKEND = _Torch()


@shared_sections(_docs.ATTENTION_WEIGHTS, **_DOC_FIELDS)
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

    Raises
    ------
    ValueError
        For an unknown ``attention`` or ``mode``, non-positive ``concentration``, ``sigma`` or
        prior parameters, a mask hiding every key of a query, or noise of the wrong shape.
    """
    options = _site.Options.of(locals(), rng=generator)
    return _site.attention_weights(logits, mask, options, _BACKEND)


@shared_sections(_docs.BAYESIAN_ATTENTION, **_DOC_FIELDS)
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
    r"""One Bayesian attention site: output and KL term."""
    options = _site.Options.of(locals(), rng=generator)
    return _site.bayesian_attention(q, k, v, mask, prior, prior_net, options, _BACKEND)
