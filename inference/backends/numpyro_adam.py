"""NumPyro's Adam for a learning rate in stages: it starts afresh at each stage.

``numpyro.optim.Adam`` with the stages' schedule, except that Adam's moment estimates and their
bias correction restart with each stage's first update (``inference.learning_rate`` says why).
Its state is ``numpyro.optim.Adam``'s, the update count and each parameter's ``(x, m, v)``, so
checkpoints keep their layout; within the first stage it computes what that optimiser computes,
operation for operation.
"""

from __future__ import annotations

import jax.numpy as jnp
from jax.example_libraries import optimizers
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
    """Adam over ``stages`` (``inference.learning_rate.Stages``), restarted at each stage."""

    def __init__(self, stages) -> None:
        super().__init__(_staged_adam, stages)
