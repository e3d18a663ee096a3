"""Closed-form coordinate updates (CAVI, EM): one driver for every model that supplies them.

A model's closed-form module provides ``init_cache(x, config, xp)`` (what every iteration reuses,
computed once from the data), ``init_state(resp, cache, config, xp)``,
``update(state, cache, config, xp) -> (state, objective)`` and ``raw_params(state, cache, xp)``,
written against the array namespace ``xp`` of ``inference.backends.ops``. The JAX update is
jit-compiled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from inference.algorithm import Info, Problem
from inference.backends import tree_codec
from inference.initialization import initial_responsibilities


@dataclass
class ClosedFormState:
    problem: Problem
    inner: Any  # the model's state pytree (backend arrays)
    cache: Any  # derived from the data once; not checkpointed
    update: Any  # the compiled update
    step: int = 0


class ClosedFormAlgorithm:
    """``cavi`` and ``em`` differ only in which models offer them and what they maximise."""

    default_dtype = "float64"  # matching reference implementations to 1e-6 needs float64

    def __init__(self, name: str, objective: str):
        self.name, self.objective = name, objective

    def supports(self, spec, backend: str) -> bool:
        return self.name in spec.algorithms and spec.closed_form is not None

    def init(self, problem: Problem, *, init="kmeans", **options) -> ClosedFormState:
        if options:
            raise TypeError(f"{self.name} takes no options {sorted(options)}.")
        module = problem.spec.closed_form_module()
        ops = problem.backend.ops
        config = problem.backend_config()
        x = problem.data["x"]
        resp = initial_responsibilities(x, problem.config.K, init, problem.seed)
        as_backend = problem.backend.asarray
        cache = module.init_cache(as_backend(x, problem.device, problem.dtype), config, ops)
        inner = module.init_state(
            as_backend(resp, problem.device, problem.dtype), cache, config, ops
        )
        update = problem.backend.compile_step(lambda s, c: module.update(s, c, config, ops))
        return ClosedFormState(problem=problem, inner=inner, cache=cache, update=update)

    def step(self, state: ClosedFormState):
        inner, objective = state.update(state.inner, state.cache)
        state = ClosedFormState(state.problem, inner, state.cache, state.update, state.step + 1)
        return state, Info(objective=float(objective))

    def get_params(self, state: ClosedFormState) -> dict[str, np.ndarray]:
        module = state.problem.spec.closed_form_module()
        raw = module.raw_params(state.inner, state.cache, state.problem.backend.ops)
        return {k: state.problem.backend.to_numpy(v) for k, v in raw.items()}

    def state_dict(self, state: ClosedFormState):
        arrays: dict = {}
        to_numpy = state.problem.backend.to_numpy
        skeleton = {"inner": tree_codec.encode(state.inner, to_numpy, arrays, "inner")}
        return {**skeleton, "step": state.step}, arrays

    def load_state_dict(self, state: ClosedFormState, skeleton, arrays) -> ClosedFormState:
        p = state.problem
        inner = tree_codec.decode(
            skeleton["inner"],
            arrays,
            lambda a: p.backend.asarray(a, p.device, str(a.dtype)) if a.dtype.kind == "f" else a,
        )
        return ClosedFormState(p, inner, state.cache, state.update, int(skeleton["step"]))


def start_values(spec, x, resp, config, backend, device) -> dict[str, np.ndarray]:
    """Guide (and model) parameters after one closed-form M-step from ``resp`` (N, K), numpy.

    Computed in float64 on ``backend``; SVI and the shared model checks start from it.
    """
    module = spec.closed_form_module()
    ops = backend.ops
    bconfig = backend.backend_config(config, device, "float64")
    cache = module.init_cache(backend.asarray(x, device, "float64"), bconfig, ops)
    state = module.init_state(backend.asarray(resp, device, "float64"), cache, bconfig, ops)
    raw = {k: backend.to_numpy(v) for k, v in module.raw_params(state, cache, ops).items()}
    return module.guide_init(raw, resp)
