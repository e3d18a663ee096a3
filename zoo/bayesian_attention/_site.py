"""One Bayesian attention site for either backend, written once: the argument checks in their
order, then the algebra (:mod:`~zoo.bayesian_attention._algebra`).

:mod:`~zoo.bayesian_attention.torch_bam` and :mod:`~zoo.bayesian_attention.jax_bam` take the
arguments that their ``attention_weights`` documents, pass them on as one :class:`Options` record,
and say through a :class:`Backend` how their library converts and reads arrays and draws the
noise (from a torch generator or a JAX key). Nothing here imports torch or JAX.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol

import numpy as np

from zoo.bayesian_attention import _algebra
from zoo.bayesian_attention._common import (
    ATTENTION_TYPES,
    MODES,
    PRIOR_TYPES,
    BamOutput,
    check_choice,
    check_num_samples,
    check_positive,
    check_prior_param,
    check_shapes,
)

PRIOR_PARAMETERS = ("prior_alpha", "prior_beta", "prior_mean", "prior_sigma")


class Options(NamedTuple):
    """A site's options, as ``attention_weights`` documents them; ``rng`` is the source of the
    noise (torch's ``generator``, JAX's ``key``).

    A named tuple, not a frozen dataclass: a site makes one at every call, and a tuple is
    cheaper to make (about 1 us against 3, and 1 against 4 to replace a field).
    """

    attention: str
    concentration: Any
    sigma: Any
    prior_alpha: Any
    prior_beta: Any
    prior_mean: Any
    prior_sigma: Any
    mode: str
    num_samples: int
    noise: Any
    rng: Any

    @classmethod
    def of(cls, arguments: dict, rng) -> Options:
        """The options among a public function's ``arguments`` (its ``locals()`` on entry),
        which name them as this record does."""
        return cls(*[arguments[name] for name in cls._fields[:-1]], rng)  # rng: the last field


class Backend(Protocol):
    """What a site needs of its library.

    Attributes
    ----------
    xp
        The array namespace (``zoo.array_namespace``).
    dists
        The distributions module: ``kl_weibull_gamma``, ``kl_lognormal_lognormal`` and
        ``clamp_uniform`` (written per backend for speed).
    """

    xp: Any
    dists: Any

    def asarray(self, x):
        """``x`` as the library's array."""

    def shape(self, x) -> tuple:
        """The shape of ``q``, ``k`` or ``v``."""

    def concrete(self, x) -> np.ndarray | None:
        """``x`` as a float numpy array for the checks; None for None or a value being traced."""

    def concrete_mask(self, mask) -> np.ndarray | None:
        """The (prepared) mask as numpy; None without a mask or while it is traced."""

    def prepare_mask(self, mask, logits):
        """The mask checked and broadcast to the logits' shape: ``(mask, logits)``; the logits
        may carry a check that runs when the mask is traced."""

    def concentration(self, value, like):
        """The Weibull shape as an array of ``like``'s dtype (and device)."""

    def draw_noise(self, shape, like, options: Options):
        """Uniform (``"weibull"``) or standard normal noise of ``shape`` in ``like``'s dtype,
        from ``options.rng``."""


def _check_options(options: Options, backend: Backend) -> Options:
    check_choice("attention", options.attention, ATTENTION_TYPES)
    check_choice("mode", options.mode, MODES)
    check_positive("concentration", backend.concrete(options.concentration), "the Weibull shape k")
    check_positive("sigma", backend.concrete(options.sigma), "the log-normal scale")
    return options._replace(num_samples=check_num_samples(options.num_samples, options.mode))


def attention_weights(logits, mask, options: Options, backend: Backend, prior_net=None, k=None):
    """Weights (..., Lq, Lk) and KL (..., Lq) of a site, its arguments checked.

    With a ``prior_net`` (a contextual prior of the keys ``k``), the net gives alpha or the
    prior mean, and ``options.prior_alpha`` and ``options.prior_mean`` are not used.
    """
    options = _check_options(options, backend)
    logits = backend.asarray(logits)
    mask, logits = backend.prepare_mask(mask, logits)
    visible = backend.concrete_mask(mask)
    for name in PRIOR_PARAMETERS if prior_net is None else ("prior_beta", "prior_sigma"):
        value = backend.concrete(getattr(options, name))
        if mask is not None and visible is None and value is not None and value.size > 1:
            value = None  # the mask is traced: which keys are visible is unknown here
        check_prior_param(name, value, logits.shape, visible)
    if prior_net is None:
        prior_log_param = _algebra.prior_log_param(
            options.attention, options.prior_alpha, options.prior_mean, mask, logits, backend.xp
        )
    else:
        prior_log_param = None if options.attention == "softmax" else prior_net.log_weights(k, mask)
    concentration = backend.concentration(options.concentration, logits)
    return _algebra.weights_and_kl(logits, mask, concentration, prior_log_param, options, backend)


def bayesian_attention(q, k, v, mask, prior, prior_net, options: Options, backend: Backend):
    """Output, weights and KL of a site (a :class:`BamOutput`), its arguments checked."""
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
    check_shapes(backend.shape(q), backend.shape(k), backend.shape(v))
    logits = _algebra.attention_logits(q, k, backend.xp)
    weights, kl = attention_weights(logits, mask, options, backend, prior_net, k)
    return BamOutput(weights @ v, weights, kl)
