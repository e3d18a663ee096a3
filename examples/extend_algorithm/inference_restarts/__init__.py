"""Coordinate ascent from several starts at once, the best one kept (scikit-learn's ``n_init``).

A mixture's closed-form updates climb to a local optimum of their objective that depends on the
initial responsibilities. ``cavi-restarts`` and ``em-restarts`` run the zoo's own ``cavi`` or
``em`` from ``starts`` initial responsibilities side by side, one update of each per step, and
report the best objective among them; the fit's parameters are those of the best start. Start 0
is the plain run (the fit's own seed), so the best is never worse than it.

The algorithm is built from the inference layer's public contract alone: it composes the
registered ``cavi`` or ``em`` through ``inference.get_algorithm``, and its checkpoints hold
each start's own checkpoint state, so a resumed run matches an uninterrupted one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import numpy as np

import inference
from inference import Algorithm, Info, Problem, Traits


@dataclass(frozen=True)
class RestartOptions:
    """``starts``: how many initial responsibilities to climb from (at least 1)."""

    starts: int = 4

    def __post_init__(self):
        if isinstance(self.starts, bool) or not isinstance(self.starts, int) or self.starts < 1:
            raise ValueError(f"starts must be an int in the range [1, inf); got {self.starts!r}.")


@dataclass(frozen=True)
class RestartState:
    starts: tuple  # the base algorithm's state of each start
    objectives: tuple  # each start's last objective (-inf before its first step)

    @property
    def best(self) -> int:
        return int(np.argmax(self.objectives))

    @property
    def record(self) -> dict:
        """The options as a result and a checkpoint record them."""
        return {"starts": len(self.starts)}


class _Restarts(Algorithm):
    """The shared driver; a subclass names the algorithm it restarts (``base``)."""

    base: str
    Options = RestartOptions

    def _base(self) -> Algorithm:
        return inference.get_algorithm(self.base)

    @property
    def traits(self) -> Traits:
        """The restarted algorithm's: the best of its objectives is one of them."""
        return self._base().traits

    def unsupported(self, spec) -> str | None:
        why = self._base().unsupported(spec)
        if why is not None:
            return why
        if spec.updates.start != "responsibilities":
            return f"the updates of {spec.name!r} start from one point, so restarts would repeat it"
        return None

    def init(self, problem: Problem, options: RestartOptions) -> RestartState:
        if problem.init is not None and not isinstance(problem.init, str):
            raise ValueError(
                "init for restarts is a method ('kmeans', 'random', 'random_from_data') that "
                "each start draws from its own seed, not one array of responsibilities."
            )
        base = self._base()
        states = []
        for start in range(options.starts):
            # Start 0 is the fit's own run; the others draw their start from a seed of their own.
            seed = problem.seed if start == 0 else _seed(problem.seed, start)
            states.append(base.init(dataclasses.replace(problem, seed=seed), base.options({})))
        return RestartState(tuple(states), (-np.inf,) * options.starts)

    def step(self, state: RestartState):
        base = self._base()
        stepped = [base.step(s) for s in state.starts]
        objectives = tuple(info.objective for _, info in stepped)
        new = RestartState(tuple(s for s, _ in stepped), objectives)
        return new, Info(objective=max(objectives))

    def get_params(self, state: RestartState) -> dict[str, np.ndarray]:
        return self._base().get_params(state.starts[state.best])

    def save_state(self, state: RestartState):
        skeletons, arrays = [], {}
        for i, start in enumerate(state.starts):
            skeleton, own = self._base().save_state(start)
            skeletons.append(skeleton)
            arrays.update({f"start{i}/{k}": v for k, v in own.items()})
        return {"starts": skeletons, "objectives": list(state.objectives)}, arrays

    def load_state(self, state: RestartState, skeleton, arrays) -> RestartState:
        if len(skeleton["starts"]) != len(state.starts):
            raise ValueError(
                f"the checkpoint holds {len(skeleton['starts'])} starts; this run has "
                f"{len(state.starts)}."
            )
        starts = []
        for i, (start, saved) in enumerate(zip(state.starts, skeleton["starts"], strict=True)):
            prefix = f"start{i}/"
            own = {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}
            starts.append(self._base().load_state(start, saved, own))
        return RestartState(tuple(starts), tuple(float(v) for v in skeleton["objectives"]))


class CAVIRestarts(_Restarts):
    """Coordinate-ascent VI from several starts; the best ELBO kept."""

    name = "cavi-restarts"
    base = "cavi"


class EMRestarts(_Restarts):
    """EM from several starts; the best log-likelihood (or log joint) kept."""

    name = "em-restarts"
    base = "em"


def _seed(seed: int, start: int) -> int:
    """A distinct, reproducible seed for each start."""
    return int(np.random.SeedSequence([seed, start]).generate_state(1)[0])
