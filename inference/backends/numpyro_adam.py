"""NumPyro's Adam for a learning rate in stages: it starts afresh at each stage, and keeps the
average of the last stage's iterates.

``numpyro.optim.Adam`` with the stages' schedule, except that Adam's moment estimates and their
bias correction restart with each stage's first update, and that its state holds the average of
the iterates over the last stage (``inference.learning_rate`` says why of both). Its state is
``(count, (adam, average))``: ``adam`` is ``numpyro.optim.Adam``'s, each parameter's
``(x, m, v)``, and ``average`` is one flat array of every parameter (``ravel_pytree``'s order),
since each array of the state costs a step a few microseconds however small it is. Within the
first stage its iterates are what ``numpyro.optim.Adam`` computes, operation for operation.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax.example_libraries import optimizers
from jax.flatten_util import ravel_pytree
from numpyro.optim import _NumPyroOptim


@optimizers.optimizer
def _staged_adam(stages, b1=0.9, b2=0.999, eps=1e-8):
    rate = stages.jax_schedule()

    def init(x0):
        return x0, jnp.zeros_like(x0), jnp.zeros_like(x0)

    def update(i, g, state):
        x, m, v = state
        start = stages.jax_stage_start(i)
        fresh = i == start  # the stage's first update: forget the earlier stages' moments
        m = (1 - b1) * g + b1 * jnp.where(fresh, 0, m)
        v = (1 - b2) * jnp.square(g) + b2 * jnp.where(fresh, 0, v)
        updates = i - start + 1  # this stage's updates, for the bias correction
        mhat = m / (1 - jnp.asarray(b1, m.dtype) ** updates)
        vhat = v / (1 - jnp.asarray(b2, m.dtype) ** updates)
        return x - rate(i) * mhat / (jnp.sqrt(vhat) + eps), m, v

    def get_params(state):
        return state[0]

    return init, update, get_params


class StagedAdam(_NumPyroOptim):
    """Adam over ``stages`` (``inference.learning_rate.Stages``), restarted at each stage, with
    the average of the last stage's iterates."""

    def __init__(self, stages) -> None:
        super().__init__(_staged_adam, stages)
        self.stages = stages

    def init(self, params):
        count, adam = super().init(params)
        return count, (adam, ravel_pytree(params)[0])

    def update(self, g, state, value=None):
        count, (adam, average) = state
        adam = self.update_fn(count, g, adam)
        iterate = ravel_pytree(self.get_params_fn(adam))[0]
        weight = self.stages.jax_average_weight(count + 1).astype(iterate.dtype)
        # Written from the iterate, so that a weight of 1 gives it exactly.
        return count + 1, (adam, iterate + (1 - weight) * (average - iterate))

    def get_params(self, state):
        _, (adam, _) = state
        return self.get_params_fn(adam)

    def get_average(self, state):
        """The average of the last stage's iterates (the iterate itself before that stage), in
        the unconstrained coordinates and the structure of ``get_params``."""
        _, (adam, average) = state
        return ravel_pytree(self.get_params_fn(adam))[1](average)
