"""Pyro's mean-field ELBO without the log-densities it does not use.

Pyro's ``TraceMeanField_ELBO`` scores every sample site of both traces (``log_prob`` of the
model's and the guide's distributions at the guide's draws) and then, for each latent site with
a closed-form ``KL(q || p)``, uses the KL and ignores the two log-densities. For a model with
large latent sites (a VAE's codes, the attention weights of ``bam_classifier``) those are whole
tensors of special functions computed for nothing. :class:`MeanFieldELBO` computes the same
value and gradients and scores a site only where it is used: the observed sites, and the latent
sites whose KL has no closed form (there, ``log p - log q`` at the draw, as Pyro does).

Under ``pyro.validation_enabled()`` both fall back to Pyro's own trace construction, whose shape
checks need every log-density.
"""

from __future__ import annotations

import weakref

import pyro
import pyro.ops.jit
import torch
from pyro import poutine
from pyro.distributions.util import scale_and_mask
from pyro.infer import JitTraceMeanField_ELBO, TraceMeanField_ELBO
from pyro.infer.util import check_fully_reparametrized, is_validation_enabled, torch_item
from pyro.poutine.util import prune_subsample_sites
from torch.distributions import kl_divergence

__all__ = ["JitMeanFieldELBO", "MeanFieldELBO"]


def _log_prob_sum(trace, name):
    """The scaled and masked log-density sum of one site, computed once (Pyro memoises it)."""
    trace.compute_log_prob(site_filter=lambda site_name, site: site_name == name)
    return trace.nodes[name]["log_prob_sum"]


class _LazyScores:
    """What :class:`MeanFieldELBO` and :class:`JitMeanFieldELBO` change in Pyro's classes."""

    def _get_trace(self, model, guide, args, kwargs):
        if is_validation_enabled():
            return super()._get_trace(model, guide, args, kwargs)
        guide_trace = poutine.trace(guide, graph_type="flat").get_trace(*args, **kwargs)
        replayed = poutine.replay(model, trace=guide_trace)
        model_trace = poutine.trace(replayed, graph_type="flat").get_trace(*args, **kwargs)
        return prune_subsample_sites(model_trace), prune_subsample_sites(guide_trace)

    def _differentiable_loss_particle(self, model_trace, guide_trace):
        # The loss (the negative ELBO) is summed term by term from its first term: Pyro sums
        # the ELBO from 0 and negates it at the end, which gives the same numbers (negation
        # and rounding commute) with two more operations, each a kernel launch on a GPU.
        loss = None
        for name, site in model_trace.nodes.items():
            if site["type"] != "sample":
                continue
            if site["is_observed"]:
                loss = _minus(loss, _log_prob_sum(model_trace, name))
                continue
            guide_site = guide_trace.nodes[name]
            if is_validation_enabled():
                check_fully_reparametrized(guide_site)
            try:
                kl = kl_divergence(guide_site["fn"], site["fn"])
            except NotImplementedError:  # no closed form: the single-draw estimate
                loss = _minus(loss, _log_prob_sum(model_trace, name))
                loss = _plus(loss, _log_prob_sum(guide_trace, name))
                continue
            loss = _plus(loss, scale_and_mask(kl, guide_site["scale"], guide_site["mask"]).sum())
        for name, guide_site in guide_trace.nodes.items():  # auxiliary guide sites
            if guide_site["type"] == "sample" and name not in model_trace.nodes:
                if is_validation_enabled():
                    check_fully_reparametrized(guide_site)
                loss = _plus(loss, _log_prob_sum(guide_trace, name))
        value = loss.detach() if torch._C._get_tracing_state() else torch_item(loss)
        return value, loss


def _plus(total, term):
    return term if total is None else total + term


def _minus(total, term):
    return -term if total is None else total - term


class MeanFieldELBO(_LazyScores, TraceMeanField_ELBO):
    """``TraceMeanField_ELBO`` that scores only the sites it uses (see the module)."""


class JitMeanFieldELBO(_LazyScores, JitTraceMeanField_ELBO):
    """``JitTraceMeanField_ELBO`` that scores only the sites it uses (see the module), compiled
    once per model and guide.

    Pyro's ``differentiable_loss`` asks whether it has compiled under another attribute's name
    (``_loss_and_surrogate_loss``) than the one it sets (``_differentiable_loss``), so it builds
    and traces a new graph at every step: slower than not compiling, and drawing the model's
    random numbers three times a step. Here the compiled function is built once per model and
    guide and called again.
    """

    def differentiable_loss(self, model, guide, *args, **kwargs):
        compiled_for = (id(model), id(guide))
        if getattr(self, "_compiled_for", None) != compiled_for:
            self._differentiable_loss = self._compiled_loss(model, guide)
            self._compiled_for = compiled_for
        return self._differentiable_loss(*args, **kwargs)

    def _compiled_loss(self, model, guide):
        """Pyro's compiled function of this model and guide's loss, whose particles are
        averaged from the first (Pyro's adds each particle's loss to 0 after dividing it by the
        number of particles, also when that is 1: two more operations, the same numbers)."""
        weakself = weakref.ref(self)

        @pyro.ops.jit.trace(ignore_warnings=self.ignore_jit_warnings, jit_options=self.jit_options)
        def differentiable_loss(*args, **kwargs):
            self = weakself()
            loss = None
            for model_trace, guide_trace in self._get_traces(model, guide, args, kwargs):
                _, particle = self._differentiable_loss_particle(model_trace, guide_trace)
                if self.num_particles > 1:
                    particle = particle / self.num_particles
                loss = _plus(loss, particle)
            return loss

        return differentiable_loss
