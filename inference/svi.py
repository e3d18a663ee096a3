"""Stochastic variational inference with the model's guides (``algorithm="svi"``).

The guide name picks how discrete latents are handled: ``"enum"`` sums them out exactly
(``TraceEnum_ELBO``), ``"gumbel"`` samples a relaxed one-hot ``z`` whose temperature is annealed
geometrically from ``temperature[0]`` to ``temperature[1]`` over ``num_steps``. Guides start from
the same responsibilities as CAVI and EM (one closed-form M-step), so runs compare fairly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from inference.algorithm import Info, Problem
from inference.closed_form import start_values
from inference.initialization import initial_responsibilities


@dataclass
class SVIState:
    problem: Problem
    engine: Any  # the backend's SVIEngine
    guide: str
    schedule: Any  # step -> temperature or None
    step: int = 0


def geometric_schedule(start: float, end: float, num_steps: int):
    if not (start > 0 and end > 0):
        raise ValueError(f"temperature must be a pair of floats in (0, inf); got ({start}, {end}).")
    rate = (end / start) ** (1.0 / max(num_steps - 1, 1))
    return lambda step: (
        max(end, start * rate**step) if end <= start else min(end, start * rate**step)
    )


class SVIAlgorithm:
    name = "svi"
    objective = "elbo"
    # float64: under JAX x64, numpyro's lower-Cholesky transform mixes dtypes for float32 params.
    default_dtype = "float64"

    def supports(self, spec, backend: str) -> bool:
        return bool(spec.guides) and backend in spec.backends

    def init(
        self,
        problem: Problem,
        *,
        guide: str | None = None,
        init="kmeans",
        lr: float = 0.05,
        num_particles: int = 1,
        temperature=(1.0, 0.1),
        num_steps: int = 1000,
    ) -> SVIState:
        spec = problem.spec
        guide = guide or spec.guides[0]
        if guide not in spec.guides:
            raise ValueError(
                f"Unknown guide {guide!r} for {spec.name!r}; valid guides are {list(spec.guides)}."
            )
        if not lr > 0:
            raise ValueError(f"lr must be a float in the range (0, inf); got {lr}.")
        if int(num_particles) < 1:
            raise ValueError(
                f"num_particles must be an int in the range [1, inf); got {num_particles}."
            )
        twin = spec.twin(problem.backend.NAME)
        start_values = self._start_values(problem, init)
        data, config = problem.backend_data(), problem.backend_config()
        schedule = (
            geometric_schedule(*temperature, num_steps) if guide == "gumbel" else (lambda s: None)
        )

        def model(data, config, temperature=None):
            return twin.model(data, config, temperature=temperature, init=start_values)

        engine = problem.backend.SVIEngine(
            model,
            twin.make_guide(guide, config, start_values),
            data,
            config,
            enumerate=guide in twin.ENUMERATED_GUIDES,
            lr=lr,
            num_particles=int(num_particles),
            seed=problem.seed,
            device=problem.device,
            init_temperature=schedule(0),
        )
        return SVIState(problem=problem, engine=engine, guide=guide, schedule=schedule)

    def _start_values(self, problem, init) -> dict[str, np.ndarray]:
        """Guide (and model) parameters after one closed-form M-step from the responsibilities."""
        x = problem.data["x"]
        resp = initial_responsibilities(x, problem.config.K, init, problem.seed)
        return start_values(problem.spec, x, resp, problem.config, problem.backend, problem.device)

    def step(self, state: SVIState):
        elbo = state.engine.step(state.schedule(state.step))
        state.step += 1
        return state, Info(objective=elbo)

    def get_params(self, state: SVIState) -> dict[str, np.ndarray]:
        return state.engine.params()

    def state_dict(self, state: SVIState):
        skeleton, arrays = state.engine.state_dict()
        return {"engine": skeleton, "step": state.step}, arrays  # the step sets the temperature

    def load_state_dict(self, state: SVIState, skeleton, arrays) -> SVIState:
        state.engine.load_state_dict(skeleton["engine"], arrays)
        state.step = int(skeleton["step"])
        return state


ALGORITHM = SVIAlgorithm()


def enumerated_elbo(result, data, num_particles: int = 100, seed: int = 0) -> float:
    """The ELBO of a fitted SVI run with discrete latents summed out, in nats (sum over points).

    A Gumbel-softmax run optimises a relaxed objective; evaluating its global factors with ``z``
    enumerated (the optimal q(z) given them) puts every SVI run on the ELBO of the discrete model.
    """
    from inference.api import get_backend
    from zoo import get_model

    spec = get_model(result.model)
    back = get_backend(result.backend)
    problem = Problem(
        spec,
        spec.validate_data(data),
        result.config,
        back,
        back.resolve_device("cpu"),
        result.options.get("dtype", "float64"),
        result.seed,
    )
    twin = spec.twin(back.NAME)
    config = problem.backend_config()
    params = dict(result.raw_params)

    def model(data, config, temperature=None):
        return twin.model(data, config, temperature=temperature, init=params)

    engine = back.SVIEngine(
        model,
        twin.make_guide("enum", config, params),
        problem.backend_data(),
        config,
        enumerate=True,
        lr=1e-3,
        num_particles=1,
        seed=seed,
        device=problem.device,
    )
    return engine.elbo(num_particles=num_particles, seed=seed)
