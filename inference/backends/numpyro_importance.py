"""Importance-weighted training on NumPyro, row by row (``elbo="iwae"``).

NumPyro's ``RenyiELBO`` splits the bound into rows only for a plate declared with
``subsample_size``; the zoo's data plate scales a minibatch's rows with ``handlers.scale``
instead, and the bound then takes each row's log-mean-exp of the particles' log-weights after
the scale ``num_data / rows`` has multiplied them (divided by the scale, it tends to the best
particle's ELBO as the scale grows). :class:`ImportanceWeightedELBO` scales each row's bound
instead, as :mod:`inference.backends.pyro_importance` does on Pyro.
"""

from __future__ import annotations

import math

import jax
from numpyro import handlers
from numpyro.infer import RenyiELBO
from numpyro.infer.elbo import ELBO

from inference.backends.sites import (
    check_reparameterised,
    data_plate_log_prob,
    data_plate_scale,
    splits_by_row,
)

__all__ = ["ImportanceWeightedELBO"]


def _traces(model, guide, key, args, kwargs):
    """``(model trace, guide trace)`` of one draw from the guide, the model replayed at it."""
    guide_key, model_key = jax.random.split(key)
    guide_trace = handlers.trace(handlers.seed(guide, guide_key)).get_trace(*args, **kwargs)
    replayed = handlers.replay(handlers.seed(model, model_key), guide_trace)
    return handlers.trace(replayed).get_trace(*args, **kwargs), guide_trace


class ImportanceWeightedELBO(ELBO):
    """Burda et al.'s bound with ``num_particles`` draws of a reparameterised guide.

    Where every latent lies in the ``data`` plate, the bound is each row's, scaled by the plate's
    scale; for a model with global latents it is ``RenyiELBO(alpha=0)``'s bound of the whole
    data (which on minibatches is not the bound: a warning says so, when the loss is traced).
    """

    def __init__(self, num_particles: int):
        super().__init__(num_particles=num_particles)
        self._whole = RenyiELBO(alpha=0, num_particles=num_particles)

    def loss(self, rng_key, param_map, model, guide, *args, **kwargs):
        fitted_model = handlers.substitute(model, data=param_map)
        fitted_guide = handlers.substitute(guide, data=param_map)
        structure = {}  # what the traces hold, read while they are traced

        def log_weights(key):
            model_trace, guide_trace = _traces(fitted_model, fitted_guide, key, args, kwargs)
            sites = model_trace.values()
            structure["by_row"] = splits_by_row(sites)
            structure["scale"] = data_plate_scale(sites)
            if not structure["by_row"]:
                return jax.numpy.zeros(())  # unused: the whole data's bound is taken
            check_reparameterised(guide_trace.values())
            scale = structure["scale"]
            return data_plate_log_prob(sites, scale) - data_plate_log_prob(
                guide_trace.values(), scale
            )

        weights = jax.vmap(log_weights)(jax.random.split(rng_key, self.num_particles))
        if not structure["by_row"]:
            return self._whole.loss(rng_key, param_map, model, guide, *args, **kwargs)
        per_row = jax.nn.logsumexp(weights, axis=0) - math.log(self.num_particles)
        return -structure["scale"] * per_row.sum()
