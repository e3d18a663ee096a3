"""Stochastic variational inference with the model's guides (``algorithm="svi"``).

The guide name picks how discrete latents are handled: a guide the twin lists in
``ENUMERATED_GUIDES`` (``"enum"``) sums them out exactly (``TraceEnum_ELBO``), ``"gumbel"`` samples
a relaxed one-hot ``z`` whose temperature is annealed geometrically from ``temperature[0]`` to
``temperature[1]`` over ``num_steps``. A twin may instead define
``temperature_schedule(config, num_steps) -> (step -> value)``: SVI then passes that value as
``temperature`` at each step (the Bayesian attention classifier reads it as its KL weight); a
twin whose schedule does not depend on ``num_steps`` says so with ``SCHEDULE_SPANS_STEPS = False``,
and its fits may then be extended on resume.

Mixture guides start from the same responsibilities as CAVI and EM (one closed-form M-step), so
runs compare fairly; other models start from their own seeded initialisation, or from ``init``, a
dict of parameter arrays (e.g. another fit's ``raw_params``).

With ``batch_size`` each step sees a minibatch (``inference.minibatch``: every point once per
epoch) and the model's data plate scales its log-density by ``num_data / batch_size``, so the
objective is an unbiased estimate of the full-data ELBO. Data not held in memory come from a
``source`` (``inference.streaming``) one minibatch per step, sent to the device as it comes.

``data_parallel=True`` splits each step's rows over devices: NumPyro shards them over
``jax.devices()``; Pyro gives each process of a ``torch.distributed`` group (``torchrun``) its
share and averages the gradients (``docs/scaling.md``).
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from inference import learning_rate
from inference.algorithm import Info, Problem
from inference.closed_form import start_values
from inference.initialization import initial_responsibilities
from inference.minibatch import EpochBatches, binarize

#: The objectives SVI maximises (``elbo=``). ``"trace"``: the Monte-Carlo ELBO; ``"meanfield"``:
#: the ELBO with analytic KL terms where the guide and prior admit one; ``"iwae"``: the
#: importance-weighted bound of Burda et al. (2016) with ``num_particles`` samples (Renyi's bound at
#: alpha = 0). Enumerated guides always use ``TraceEnum_ELBO``.
ELBOS = ("trace", "meanfield", "iwae")


@dataclass
class SVIState:
    problem: Problem
    engine: Any  # the backend's SVIEngine
    guide: str
    schedule: Any  # step -> temperature; None: no temperature
    schedule_spans_steps: bool = True  # the schedule (if any) is spread over num_steps
    batches: EpochBatches | None = None
    grey: np.ndarray | None = None  # with dynamic binarization: the grey levels of data["x"]
    data_epoch: int = 0  # the epoch whose binarization the engine holds
    source: Any = None  # data not held in memory: one minibatch per step
    shard: tuple[int, int] | None = None  # Pyro data-parallel: (rank, world size)
    step: int = 0

    @property
    def extendable(self) -> bool:
        """Whether nothing in the run depends on ``num_steps`` (no temperature spread over it, no
        stream sized by it), so a resumed run may go on for more steps than it first asked for
        and match an uninterrupted run of the new length."""
        return not self.schedule_spans_steps and self.source is None


def _check_enumerable(backend: str, config, guide: str) -> None:
    """NumPyro's enumeration allocates no dimension to a site with a single value and then
    fails looking it up (a KeyError or a funsor shape error): a clear error instead."""
    if backend == "numpyro" and getattr(config, "K", None) == 1:
        raise ValueError(
            f"K=1 with the enumerated guide {guide!r} does not run on NumPyro, whose "
            "enumeration cannot sum over a single component. Fit a one-component model "
            "with backend='pyro', or with algorithm 'cavi' or 'em'."
        )


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
        init=None,
        lr=0.05,
        num_particles: int = 1,
        temperature=(1.0, 0.1),
        num_steps: int = 1000,
        batch_size: int | None = None,
        elbo: str = "trace",
        grey: np.ndarray | None = None,
        source=None,
        data_parallel: bool = False,
        jit: bool = False,
    ) -> SVIState:
        spec = problem.spec
        guide = guide or spec.guides[0]
        if guide not in spec.guides:
            raise ValueError(
                f"Unknown guide {guide!r} for {spec.name!r}; valid guides are {list(spec.guides)}."
            )
        lr = learning_rate.parse(lr)
        if (
            isinstance(num_particles, bool)
            or not isinstance(num_particles, int | np.integer)
            or num_particles < 1
        ):
            raise ValueError(
                f"num_particles must be an int in the range [1, inf); got {num_particles}."
            )
        if elbo not in ELBOS:
            raise ValueError(f"elbo must be one of {list(ELBOS)}; got {elbo!r}.")
        twin = spec.twin(problem.backend.NAME)
        start_values = self._start_values(problem, init)
        data, config = problem.backend_data(), problem.backend_config()
        spans_steps = True
        if guide == "gumbel":
            if isinstance(temperature, str) or len(np.atleast_1d(temperature)) != 2:
                raise ValueError(
                    f"temperature must be a pair (start, end) of positive floats, annealed "
                    f"geometrically over num_steps; got {temperature!r}."
                )
            schedule = geometric_schedule(*temperature, num_steps)
        elif hasattr(twin, "temperature_schedule"):  # e.g. a KL-weight warm-up the model reads
            schedule = twin.temperature_schedule(problem.config, num_steps)
            spans_steps = getattr(twin, "SCHEDULE_SPANS_STEPS", True)
        else:
            schedule = None
        batches = shard = None
        model = spec.build_model(problem.backend.NAME, config, start_values)
        guide_fn = twin.make_guide(guide, config, start_values)
        if data_parallel and problem.backend.NAME == "pyro":
            shard = problem.backend.init_data_parallel()
        if batch_size is not None or source is not None or shard is not None:
            if not spec.minibatch:
                raise ValueError(
                    f"Model {spec.name!r} does not support minibatches (batch_size=, data not in "
                    "memory, or data_parallel on Pyro); fit it on the full data."
                )
            if source is None and batch_size is not None:
                batches = EpochBatches(problem.num_data, batch_size, problem.seed)
            model = functools.partial(model, num_data=problem.num_data)
            guide_fn = functools.partial(guide_fn, num_data=problem.num_data)
        batch_rows = batches.batch_size if batches is not None else None
        if shard is not None:
            rank, world = shard
            rows = batch_rows or (None if source is not None else problem.num_data)
            if rows is not None and rows % world:
                raise ValueError(
                    f"data_parallel=True splits the rows of each step over the {world} processes "
                    f"of the torch.distributed group; {rows} rows do not split evenly. Use a "
                    f"batch_size (or data size) that is a multiple of {world}."
                )
            if batches is None and source is None:  # full batch: each process keeps its share
                data = {k: v[self._share(problem.num_data, shard)] for k, v in data.items()}
        enumerated = guide in getattr(twin, "ENUMERATED_GUIDES", ())
        if enumerated:
            _check_enumerable(problem.backend.NAME, config, guide)
        engine = problem.backend.SVIEngine(
            model,
            guide_fn,
            data,
            config,
            elbo="enum" if enumerated else elbo,
            lr=lr,
            num_particles=int(num_particles),
            seed=problem.seed,
            device=problem.device,
            init_temperature=None if schedule is None else schedule(0),
            data_parallel=bool(data_parallel),
            batch_rows=batch_rows,
            jit=bool(jit),
        )
        return SVIState(
            problem=problem,
            engine=engine,
            guide=guide,
            schedule=schedule,
            schedule_spans_steps=schedule is not None and spans_steps,
            batches=batches,
            grey=grey,
            source=source,
            shard=shard,
        )

    @staticmethod
    def _share(num_rows: int, shard):
        """The slice of a step's rows that process ``rank`` of ``world`` works on."""
        rank, world = shard
        size = num_rows // world
        return slice(rank * size, (rank + 1) * size)

    def _start_values(self, problem, init) -> dict[str, np.ndarray] | None:
        """Starting parameters: ``init`` itself when it is a dict of arrays; for models with
        closed-form updates, one M-step from the initial responsibilities; else None (the
        model's own seeded initialisation)."""
        if isinstance(init, Mapping):
            given = {k: np.asarray(v) for k, v in init.items()}
            if problem.spec.closed_form is None:  # a network's own checks see to its names
                return given
            return self._checked_start(problem, given, self._start_values(problem, None))
        if problem.spec.closed_form is not None:
            x = problem.data["x"]
            init = "kmeans" if init is None else init
            resp = initial_responsibilities(x, problem.config.K, init, problem.seed)
            return start_values(
                problem.spec, x, resp, problem.config, problem.backend, problem.device
            )
        if init is not None:
            raise ValueError(
                f"init for model {problem.spec.name!r} must be None (its own initialisation) or "
                f"a dict of parameter arrays such as a fit's raw_params; got {init!r}."
            )
        return None

    @staticmethod
    def _checked_start(problem, given, default):
        """``given`` parameters over the k-means start ``default``: the names must be the
        model's, the shapes those of its K components, the values finite."""
        name = problem.spec.name
        unknown = sorted(set(given) - set(default))
        if unknown:
            raise ValueError(
                f"init names {unknown}, which are not parameters of {name!r}; its parameters "
                f"are {sorted(default)} (a fit's raw_params; the rest start from k-means)."
            )
        for key, value in given.items():
            if value.shape != default[key].shape:
                raise ValueError(
                    f"init[{key!r}] must have shape {default[key].shape} for K="
                    f"{problem.config.K} and the data's width; got {value.shape}."
                )
            if value.dtype.kind not in "fiu" or not np.isfinite(value).all():
                raise ValueError(f"init[{key!r}] must hold finite numbers.")
        return {**default, **given}

    def step(self, state: SVIState):
        if state.grey is not None:
            self._refresh_binarization(state)
        rows = batch = None
        if state.source is not None:
            p = state.problem
            batch = state.source.batch(state.step)
            if state.shard is not None:
                rows = len(next(iter(batch.values())))
                if rows % state.shard[1]:
                    raise ValueError(
                        f"The minibatch of step {state.step + 1} has {rows} rows, which do not "
                        f"split over the {state.shard[1]} processes of the group."
                    )
                batch = {k: v[self._share(rows, state.shard)] for k, v in batch.items()}
            batch = {k: p.backend.asarray(v, p.device, p.dtype) for k, v in batch.items()}
            rows = None
        elif state.batches is not None:
            rows = state.batches.indices(state.step)
            if state.shard is not None:
                rows = rows[self._share(len(rows), state.shard)]
        temperature = None if state.schedule is None else state.schedule(state.step)
        elbo = state.engine.step(temperature, rows, batch=batch)
        state.step += 1
        return state, Info(objective=elbo)

    def _refresh_binarization(self, state: SVIState) -> None:
        """Dynamic binarization: a fresh draw of the training pixels at each epoch."""
        steps_per_epoch = state.batches.steps_per_epoch if state.batches else 1
        epoch = state.step // steps_per_epoch
        if epoch != state.data_epoch:
            p = state.problem
            x = binarize(state.grey, p.seed, epoch)
            state.engine.data = {**state.engine.data, "x": p.backend.asarray(x, p.device, p.dtype)}
            state.data_epoch = epoch

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
    _check_enumerable(back.NAME, config, "enum")
    params = dict(result.raw_params)

    engine = back.SVIEngine(
        spec.build_model(back.NAME, config, params),
        twin.make_guide("enum", config, params),
        problem.backend_data(),
        config,
        elbo="enum",
        lr=1e-3,
        num_particles=1,
        seed=seed,
        device=problem.device,
    )
    return engine.elbo(num_particles=num_particles, seed=seed)
