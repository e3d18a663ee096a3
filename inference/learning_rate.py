"""The learning rates SVI's Adam takes (``lr=``): one number, or piecewise-constant stages.

Stages are ``[(num_steps, lr), ...]``: the first ``num_steps`` updates use the first rate, the
next stage's updates the next, and the last rate holds once every stage has run. Both backends
index the stages by the number of updates Adam has applied (a step skipped for a non-finite loss
does not count), and that count is part of the optimiser's state, so a resumed run continues the
schedule where it stopped. NumPyro reads the staged rates in float32 (a float64 rate would turn
float32 parameters float64); a single float ``lr`` is used as given.

Adam starts afresh at each stage: its moment estimates and their bias correction restart with
the stage's first update, on both backends. Adam's second moment remembers the squared gradients
of about its last thousand updates (``beta2 = 0.999``). A guide that starts far wider than the
posterior sees gradients thousands of times larger at first than near the optimum, and their
memory shrinks Adam's later steps for tens of thousands of updates; a fresh estimate at each
stage measures that stage's gradients alone (``docs/algorithms/svi.md`` gives the fits it
changed).

A fit with two stages or more returns an average of its iterates over the last stage, not its
last iterate. At a constant rate Adam's iterates do not settle at the optimum: each update
moves the parameters by about the rate, so they jitter around it, and on a large data set the
last stage's rate can be a sizeable fraction of a posterior standard deviation. The average is
exponential with a horizon of :data:`AVERAGE_HORIZON` updates (the stopping rule's window) and
corrected for its start as Adam's moments are, so it weighs the iterates that the rule found
stationary and forgets the stage's first ones, where the parameters still move away from the
previous stage's rate. The gradients are those of the iterates; only what the fit returns is
averaged. A constant rate (one number, or one stage) returns the last iterate.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

#: The horizon, in updates, of the average of the last stage's iterates: ``1 - 1/horizon`` is
#: its decay per update. The stopping rule's window (``inference.algorithms.svi``).
AVERAGE_HORIZON = 500


@dataclass(frozen=True)
class Stages:
    ends: tuple[int, ...]  # cumulative update counts at which each stage ends
    values: tuple[float, ...]

    def at(self, updates: int) -> float:
        """The rate of the update that follows ``updates`` applied updates."""
        return self.values[min(bisect.bisect_right(self.ends, updates), len(self.values) - 1)]

    @property
    def starts(self) -> tuple[int, ...]:
        """The update counts at which each stage starts."""
        return (0, *self.ends[:-1])

    def restarts_at(self, updates: int) -> bool:
        """Whether the update that follows ``updates`` applied updates is the first of a stage
        after the first: Adam's moments start afresh there."""
        return updates in self.starts[1:]

    @property
    def averages(self) -> bool:
        """Whether a fit returns the average of the last stage's iterates (two stages or more)."""
        return len(self.values) > 1

    def average_weight(self, updates: int) -> float:
        """The weight of the newest iterate in the average once ``updates`` updates are applied:
        1 (the average is the iterate) until the last stage's first update, then the debiased
        exponential average's ``(1 - b) / (1 - b**k)`` after its ``k``-th update."""
        if not self.averages:
            return 1.0
        return float(_average_weight(updates - self.starts[-1], np))

    def jax_average_weight(self, updates):
        """:meth:`average_weight` of a traced update count."""
        import jax.numpy as jnp

        if not self.averages:
            return jnp.ones(())
        return _average_weight(updates - self.starts[-1], jnp)

    def pairs(self) -> list[list]:
        """The stages as ``[[num_steps, lr], ...]`` (how fits record them, as JSON)."""
        return [[e - s, v] for s, e, v in zip(self.starts, self.ends, self.values, strict=True)]

    def jax_schedule(self):
        """The same rule as a function of a traced update count (``numpyro.optim``'s
        ``step_size``)."""
        import jax.numpy as jnp

        def rate(updates):
            # float32 rates: a float64 rate would promote float32 parameters to float64 under
            # x64.
            return jnp.asarray(self.values, dtype=jnp.float32)[self._jax_stage(updates)]

        return rate

    def jax_stage_start(self, updates):
        """The update count at which the stage of the update that follows ``updates`` applied
        updates began (0 in the first stage), for a traced count."""
        import jax.numpy as jnp

        starts = jnp.asarray(self.starts, dtype=jnp.result_type(updates))
        return starts[self._jax_stage(updates)]

    def _jax_stage(self, updates):
        """The index of the stage of the update that follows ``updates`` (traced) updates, as
        :meth:`at` finds it. The ends are in the count's own integer type (int32 in a float32
        fit's trace)."""
        import jax.numpy as jnp

        ends = jnp.asarray(self.ends, dtype=jnp.result_type(updates))
        stage = jnp.searchsorted(ends, updates, side="right")
        return jnp.minimum(stage, len(self.values) - 1)


def _average_weight(k, xp):
    """``(1 - b) / (1 - b**k)`` for ``k >= 1`` updates into the last stage, else 1, with
    ``b = 1 - 1/AVERAGE_HORIZON``; ``xp`` is numpy or ``jax.numpy``."""
    decay = 1.0 - 1.0 / AVERAGE_HORIZON
    # Exactly 1 at the first update (the rounding of the formula there is not).
    return xp.where(k <= 1, 1.0, (1.0 - decay) / (1.0 - decay ** xp.maximum(k, 2)))


def last_stage_start(lr) -> int:
    """The update count at which ``lr``'s last stage starts (0 for a constant rate): from there
    nothing in the rate changes, so a plateau of the objective is the optimum's, not the noise
    floor of a larger rate."""
    return lr.ends[-2] if isinstance(lr, Stages) and len(lr.ends) > 1 else 0


def record(lr):
    """``lr`` as a fit records it: the float, or the stages as ``[[num_steps, lr], ...]``."""
    lr = parse(lr)
    return lr.pairs() if isinstance(lr, Stages) else lr


def parse(lr) -> float | Stages:
    """``lr`` checked: a positive float, or :class:`Stages` from ``(num_steps, lr)`` pairs."""
    if isinstance(lr, Stages):
        return lr
    if isinstance(lr, Sequence) and not isinstance(lr, str):
        if not lr:
            raise ValueError("lr stages must hold at least one (num_steps, lr) pair; got [].")
        ends, values, total = [], [], 0
        for stage in lr:
            if not (isinstance(stage, Sequence) and len(stage) == 2):
                raise ValueError(f"lr stages are (num_steps, lr) pairs; got {stage!r}.")
            steps, value = stage
            if isinstance(steps, bool) or not isinstance(steps, int | np.integer) or steps < 1:
                raise ValueError(f"A stage's num_steps must be an int >= 1; got {steps!r}.")
            _check_rate(value)
            total += int(steps)
            ends.append(total)
            values.append(float(value))
        return Stages(tuple(ends), tuple(values))
    _check_rate(lr)
    return float(lr)


def _check_rate(value) -> None:
    is_number = isinstance(value, int | float | np.number) and not isinstance(value, bool)
    if not (is_number and 0 < value < float("inf")):
        raise ValueError(f"lr must be a float in the range (0, inf); got {value!r}.")
