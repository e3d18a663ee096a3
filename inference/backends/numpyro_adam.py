"""NumPyro's Adam for a learning rate in stages: it starts afresh at each stage, and keeps the
average of the last stage's iterates.

``numpyro.optim.Adam`` with the stages' schedule, except that Adam's moment estimates and their
bias correction restart with each stage's first update, and that each parameter's state holds a
fourth array, the average of its iterates over the last stage (``inference.learning_rate`` says
why of both). Its state is otherwise ``numpyro.optim.Adam``'s, the update count and each
parameter's ``(x, m, v)``; within the first stage its iterates are what that optimiser computes,
operation for operation.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax.example_libraries import optimizers
from numpyro.optim import _NumPyroOptim


@optimizers.optimizer
def _staged_adam(stages, b1=0.9, b2=0.999, eps=1e-8):
    rate = stages.jax_schedule()

    def init(x0):
        return x0, jnp.zeros_like(x0), jnp.zeros_like(x0), x0

    def update(i, g, state):
        x, m, v, average = state
        start = stages.jax_stage_start(i)
        fresh = i == start  # the stage's first update: forget the earlier stages' moments
        m = (1 - b1) * g + b1 * jnp.where(fresh, 0, m)
        v = (1 - b2) * jnp.square(g) + b2 * jnp.where(fresh, 0, v)
        updates = i - start + 1  # this stage's updates, for the bias correction
        mhat = m / (1 - jnp.asarray(b1, m.dtype) ** updates)
        vhat = v / (1 - jnp.asarray(b2, m.dtype) ** updates)
        x = x - rate(i) * mhat / (jnp.sqrt(vhat) + eps)
        weight = stages.jax_average_weight(i + 1).astype(x.dtype)
        # Written from x, so that a weight of 1 gives x exactly.
        return x, m, v, x + (1 - weight) * (average - x)

    def get_params(state):
        return state[0]

    return init, update, get_params


class StagedAdam(_NumPyroOptim):
    """Adam over ``stages`` (``inference.learning_rate.Stages``), restarted at each stage."""

    def __init__(self, stages) -> None:
        super().__init__(_staged_adam, stages)

    def get_average(self, state):
        """The average of the last stage's iterates (the iterate itself before that stage), in
        the unconstrained coordinates of ``get_params``."""
        _, (states_flat, tree, subtrees) = state
        averages = [
            jax.tree_util.tree_unflatten(subtree, flat)[3]
            for flat, subtree in zip(states_flat, subtrees, strict=True)
        ]
        return jax.tree_util.tree_unflatten(tree, averages)
