"""Closed-form coordinate updates (CAVI, EM): one driver for every model that supplies them.

A mixture's closed-form module (``spec.closed_form``) provides ``init_cache(x, config, xp)``
(what every iteration reuses, computed once from the data), ``init_state(resp, cache, config,
xp)``, ``update(state, cache, config, xp) -> (state, objective)`` and ``raw_params(state, cache,
xp)``, written against the array namespace ``xp`` of ``zoo.array_namespace``; it starts from
initial responsibilities that SVI shares. Any other model's module (``spec.conjugate_updates``)
has the same functions but ``init_cache(data, config, xp)`` takes the whole data dict and
``init_state(cache, config, xp)`` no responsibilities. The JAX update is jit-compiled.
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
        has_updates = spec.closed_form is not None or spec.conjugate_updates is not None
        return self.name in spec.algorithms and has_updates and backend in spec.backends

    def init(self, problem: Problem, *, init="kmeans", **options) -> ClosedFormState:
        if options:
            raise TypeError(f"{self.name} takes no options {sorted(options)}.")
        module = problem.spec.closed_form_module()
        ops = problem.backend.ops
        config = problem.backend_config()
        if problem.spec.closed_form is None:
            # conjugate_updates: the model starts from the data alone. fit() passes "kmeans" when
            # the caller gave no init, so that is the one value accepted.
            if not (isinstance(init, str) and init == "kmeans"):
                raise ValueError(
                    f"init is for mixtures' initial responsibilities; the closed-form updates of "
                    f"{problem.spec.name!r} start from the model's own starting point. Leave "
                    f"init=None; got {init!r}."
                )
            cache = module.init_cache(problem.backend_data(), config, ops)
            inner = module.init_state(cache, config, ops)
            update = problem.backend.compile_step(lambda s, c: module.update(s, c, config, ops))
            return ClosedFormState(problem=problem, inner=inner, cache=cache, update=update)
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
        return encode_inner(state.problem, state.inner, state.step)

    def load_state_dict(self, state: ClosedFormState, skeleton, arrays) -> ClosedFormState:
        inner = decode_inner(state.problem, skeleton, arrays)
        return ClosedFormState(
            state.problem, inner, state.cache, state.update, int(skeleton["step"])
        )


def encode_inner(problem: Problem, inner: dict, step: int):
    """``(skeleton, arrays)`` of a closed-form state's arrays ``inner`` for a checkpoint."""
    arrays: dict = {}
    encoded = tree_codec.encode(inner, problem.backend.to_numpy, arrays, "inner")
    return {"inner": encoded, "step": step}, arrays


def decode_inner(problem: Problem, skeleton, arrays) -> dict:
    """The arrays of :func:`encode_inner` back on the problem's backend and device."""

    def restore(a):
        return (
            problem.backend.asarray(a, problem.device, str(a.dtype)) if a.dtype.kind == "f" else a
        )

    return tree_codec.decode(skeleton["inner"], arrays, restore)


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
    if not all(np.isfinite(v).all() for v in raw.values()):
        raise ValueError(
            "The starting parameters (one closed-form M-step from the initial responsibilities) "
            "are not finite: a component's covariance is singular. Check the data scale and "
            "constant columns, raise reg_covar, or use float64."
        )
    return module.guide_init(raw, resp)
