"""Importance weights on Pyro, row by row: what scores held-out data and what ``elbo="iwae"``
trains.

Pyro's ``RenyiELBO`` takes each row's log-mean-exp of the particles' log-weights after the data
plate's scale ``num_data / rows`` has multiplied them, so on minibatches it does not estimate
Burda et al.'s bound: divided by the scale, its objective tends to the best particle's ELBO as
the scale grows. :class:`ImportanceWeightedELBO` scales each row's bound instead,
``sum_n scale * (logsumexp_k log w_nk - log k)``, which on the whole data (scale 1) is what
``RenyiELBO`` computes.
"""

from __future__ import annotations

import math

import pyro
import torch
from pyro import poutine
from pyro.infer import RenyiELBO

from inference.backends.sites import (
    check_reparameterised,
    data_plate_log_prob,
    data_plate_scale,
    first_outside_data_plate,
    splits_by_row,
)

__all__ = ["ImportanceWeightedELBO", "importance_traces"]


def importance_traces(model, guide, num_particles: int, *args, **kwargs):
    """``(model trace, guide trace)`` of ``num_particles`` draws from the guide, vectorised by a
    plate ``particles`` left of the model's ``data`` plate, the model replayed at them.

    A model whose latents are not all in the ``data`` plate may fail to take the particles'
    plate (each particle's global draw meets the rows in a local site, a shape mismatch); such
    a failure is told as the site outside the plate, read from a trace of one particle.
    """
    try:
        return _vectorised_traces(model, guide, num_particles, *args, **kwargs)
    except ValueError as err:
        outside = None if num_particles == 1 else _outside_data_plate(model, guide, args, kwargs)
        if outside is None:
            raise
        raise outside from err


def _outside_data_plate(model, guide, args, kwargs) -> ValueError | None:
    """The error for the model's first sample site outside the ``data`` plate, read from a
    trace of one particle; None where every site is in the plate, or that trace fails too."""
    try:
        model_trace, _ = _vectorised_traces(model, guide, 1, *args, **kwargs)
    except ValueError:
        return None
    return first_outside_data_plate(model_trace.nodes.values())


def _vectorised_traces(model, guide, num_particles: int, *args, **kwargs):
    """The traces of :func:`importance_traces`, taken once."""
    with pyro.plate("particles", num_particles, dim=-2):
        guide_trace = poutine.trace(guide).get_trace(*args, **kwargs)
        replayed = poutine.replay(model, trace=guide_trace)
        model_trace = poutine.trace(replayed).get_trace(*args, **kwargs)
    return model_trace, guide_trace


class ImportanceWeightedELBO:
    """Burda et al.'s bound with ``num_particles`` draws of a reparameterised guide.

    Where every latent lies in the ``data`` plate, the bound is each row's, scaled by the plate's
    scale; for a model with global latents it is ``RenyiELBO(alpha=0)``'s bound of the whole
    data (which on minibatches is not the bound: a warning says so).
    """

    def __init__(self, num_particles: int):
        self.num_particles = num_particles
        self._whole = RenyiELBO(alpha=0, num_particles=num_particles, vectorize_particles=True)
        self._by_row = None  # decided on the first call, from the traces

    def _bound(self, model, guide, args, kwargs):
        """The bound, a tensor; None where it does not split into rows."""
        if self._by_row is False:
            return None
        model_trace, guide_trace = importance_traces(
            model, guide, self.num_particles, *args, **kwargs
        )
        sites = model_trace.nodes.values()
        if self._by_row is None:
            self._by_row = splits_by_row(sites)
            if not self._by_row:
                return None
        check_reparameterised(guide_trace.nodes.values())
        scale = data_plate_scale(sites)
        log_weights = data_plate_log_prob(sites, scale) - data_plate_log_prob(
            guide_trace.nodes.values(), scale
        )
        per_row = torch.logsumexp(log_weights, dim=0) - math.log(self.num_particles)
        return scale * per_row.sum()

    def loss(self, model, guide, *args, **kwargs) -> float:
        with torch.no_grad():
            bound = self._bound(model, guide, args, kwargs)
        if bound is None:
            return self._whole.loss(model, guide, *args, **kwargs)
        return -bound.item()

    def loss_and_grads(self, model, guide, *args, **kwargs) -> float:
        bound = self._bound(model, guide, args, kwargs)
        if bound is None:
            return self._whole.loss_and_grads(model, guide, *args, **kwargs)
        (-bound).backward()
        return -bound.item()
