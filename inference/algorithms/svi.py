"""Stochastic variational inference with the model's guides (``algorithm="svi"``).

The guide's kind, which the spec declares (``ModelSpec.guide_kinds``, read by
``ModelSpec.guide_kind``), picks how discrete latents are handled: an enumerated guide sums them
out exactly (``TraceEnum_ELBO``); a relaxed (Gumbel-softmax) guide samples a relaxed one-hot
``z`` whose temperature is annealed geometrically from ``temperature[0]`` to ``temperature[1]``
by the learning rate's last stage (or over ``num_steps``, see ``SVIOptions.temperature``); a
guide of kind ``closed_form_kl`` is always fitted with the mean-field ELBO, which takes the
closed-form KL at the sites that have one (Jang et al.'s Gumbel-softmax objective). A twin
may instead define ``temperature_schedule(config, num_steps) -> (step -> value)``: SVI then
passes that value as ``temperature`` at each step (the Bayesian attention classifier reads it as
its KL weight), and no temperature where the twin returns None for the config; a twin whose
schedule does not depend on ``num_steps`` says so with ``SCHEDULE_SPANS_STEPS = False``, and its
fits may then be extended on resume.

Guides of a model whose closed-form updates start from responsibilities (a mixture) start from
one update from the same responsibilities as CAVI and EM, so runs compare fairly; other models
start from their own seeded initialisation, or from ``init``, a dict of parameter arrays (e.g.
another fit's ``raw_params``).

With ``batch_size`` each step sees a minibatch (``inference.minibatch``: every point at most once
per epoch) and the model's data plate scales its log-density by ``num_data / batch_size``, so the
objective is an unbiased estimate of the full-data ELBO. Data not held in memory come from a
``source`` (``inference.streaming``) one minibatch per step, sent to the device as it comes.

``data_parallel=True`` splits each step's rows over devices: NumPyro shards them over
``jax.devices()``; Pyro gives each process of a ``torch.distributed`` group (``torchrun``) its
share and averages the gradients (``docs/scaling.md``).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np

from inference import evaluation, learning_rate, streaming
from inference.algorithm import Algorithm, Problem, Traits, check_choice, check_int
from inference.algorithms.closed_form import start_values
from inference.backends import get_backend
from inference.backends.svi_setup import SVISetup
from inference.convergence import STOCHASTIC_TOL
from inference.minibatch import EpochBatches, binarize, check_grey_levels
from zoo.memory import available_memory, check_fits
from zoo.options import did_you_mean

#: The objectives SVI maximises (``elbo=``). ``"trace"``: the Monte-Carlo ELBO; ``"meanfield"``:
#: the ELBO with analytic KL terms where the guide and prior admit one; ``"iwae"``: the
#: importance-weighted bound of Burda et al. (2016) with ``num_particles`` samples (Renyi's bound at
#: alpha = 0), each row's on minibatches of a model whose latents are all in the data plate.
#: Enumerated guides always use ``TraceEnum_ELBO``.
ELBOS = ("trace", "meanfield", "iwae")

#: Adam's learning rate where neither the caller nor the model names one: stages that decay
#: 0.05 -> 0.01 -> 0.002 -> 0.0005. A constant rate leaves the iterates jittering at a noise floor
#: that grows with the rate; the first stage travels, the later ones settle (the stopping rule
#: waits for the last stage). Adam starts afresh at each stage, and the fit returns the average of
#: the last stage's iterates (``inference.learning_rate``).
DEFAULT_LR = ((3000, 0.05), (3000, 0.01), (3000, 0.002), (1, 0.0005))


@dataclass(frozen=True)
class SVIOptions:
    """SVI's options.

    Parameters
    ----------
    guide : str, optional
        The model's guide, one of ``spec.guides`` (default: the first). A guide that sums the
        discrete latents out is fitted with ``TraceEnum_ELBO``; a relaxed (Gumbel-softmax) guide
        samples a relaxed one-hot ``z``.
    lr : float or list of (int, float)
        Adam's learning rate (a float in (0, inf)), or piecewise-constant stages
        ``[(num_steps, lr), ...]``: the first ``num_steps`` updates use the first rate, and so
        on; the last rate holds once every stage has run, and a resumed run continues the
        stages where it stopped. Adam's moment estimates start afresh at each stage, and a fit
        of two stages or more returns the average of its last stage's iterates. Default:
        the model's (``ModelSpec.algorithm_defaults``), else :data:`DEFAULT_LR`, 3,000 updates
        each at 0.05, 0.01 and 0.002, then 0.0005. The stopping rule (``tol``) applies from the
        start of the last stage.
    num_particles : int
        Monte-Carlo samples per step (``>= 1``); with ``elbo="iwae"``, the importance samples.
    temperature : (float, float)
        A relaxed guide's temperature schedule ``(start, end)``, both positive: annealed
        geometrically from ``start`` to ``end`` over the steps before the learning rate's last
        stage (9,000 at the default rate), where the stopping rule starts; with a constant
        rate over the first half of ``num_steps``, and the rule starts there; with fewer steps
        than the stages, over ``num_steps``. Giving it for a guide that is not relaxed is an
        error.
    batch_size : int, optional
        The minibatch size, in ``[1, N]`` (default: full batch). Each epoch visits every point
        at most once (the last incomplete batch is dropped) and the data plate scales the log-density
        by ``num_data / batch_size``. Needed for memory-mapped arrays; a stream of minibatches
        gives its own, and ``batch_size`` is then an error.
    elbo : {"trace", "meanfield", "iwae"}
        The objective, one of ``ELBOS``: ``"trace"``, the Monte-Carlo ELBO; ``"meanfield"``,
        the ELBO with analytic KL terms where the guide and prior admit one; ``"iwae"``, the
        importance-weighted bound of Burda et al. (2016) with ``num_particles >= 2`` samples
        of a reparameterised guide: on minibatches, the sum of the rows' bounds times
        ``num_data / batch_size`` where every latent is in the data plate (with global latents
        the bound does not split into rows, and a fit on minibatches warns that it does not
        train it). Enumerated guides always use ``TraceEnum_ELBO``.
    dynamic_binarization : bool
        The model's binary data keys hold grey levels in [0, 1], and every epoch trains on a
        fresh Bernoulli draw of each (drawn from the seed and the epoch, so a resumed run sees
        the same draws).
    data_parallel : bool
        Split each step's rows over devices (``docs/scaling.md``): NumPyro shards them over
        ``jax.devices()``; Pyro gives each process of a ``torch.distributed`` group its share
        and averages the gradients.
    jit : bool
        Pyro: compile the ELBO and its gradient with ``torch.jit.trace`` (NumPyro always
        compiles). In float64 the compiled fit gives the uncompiled fit's numbers bit for bit,
        in float32 to float32's rounding; the model must run the same operations at every step.
    """

    guide: str | None = None
    lr: Any = DEFAULT_LR
    num_particles: int = 1
    temperature: Any = (1.0, 0.1)
    batch_size: int | None = None
    elbo: str = "trace"
    dynamic_binarization: bool = False
    data_parallel: bool = False
    jit: bool = False

    def __post_init__(self):
        learning_rate.parse(self.lr)
        check_int("num_particles", self.num_particles)
        check_choice("elbo", self.elbo, ELBOS)
        if self.guide is not None and not isinstance(self.guide, str):
            raise TypeError(f"guide must be a guide's name (str); got {self.guide!r}.")
        check_temperature(self.temperature)
        if self.batch_size is not None and (
            isinstance(self.batch_size, bool) or not isinstance(self.batch_size, int | np.integer)
        ):
            raise TypeError(f"batch_size must be an int; got {type(self.batch_size).__name__}.")

    def ignores(self, spec, backend: str, name: str) -> str | None:
        """The temperature anneals a relaxed guide only; an enumerated guide has its own
        objective (TraceEnum_ELBO); a guide that draws nothing at random (a deterministic one:
        point masses and enumerated discrete sites) has an exact ELBO, which more particles or
        another estimator do not change; and an importance-weighted bound of one particle is the
        ELBO itself."""
        guide = self.guide or spec.guides[0]
        if guide not in spec.guides:
            return None  # not this option's fault: init names the unknown guide
        kind = spec.guide_kind(guide, backend)
        if name == "temperature" and not kind.relaxed:
            return (
                "temperature= anneals a relaxed (Gumbel-softmax) guide; guide "
                f"{guide!r} does not use it."
            )
        enumerated, deterministic = kind.enumerated, kind.deterministic
        if name == "elbo" and self.elbo != "meanfield" and kind.closed_form_kl:
            return (
                f"elbo={self.elbo!r} does not apply to guide {guide!r}, which is always "
                "fitted with the mean-field ELBO (elbo='meanfield': the closed-form KL between "
                "the categoricals of z)."
            )
        if name == "num_particles" and deterministic:
            return (
                f"num_particles= averages Monte-Carlo draws of the guide; guide {guide!r} of "
                f"model {spec.name!r} draws nothing at random (point masses, discrete latents "
                "summed out), so its ELBO is exact with one particle."
            )
        if name == "elbo" and self.elbo != "trace" and (enumerated or deterministic):
            how = (
                "sums the discrete latents out exactly (TraceEnum_ELBO)"
                if enumerated
                else "draws nothing at random, so its ELBO is exact"
            )
            return (
                f"elbo={self.elbo!r} does not apply to guide {guide!r}, which {how}; of the "
                f"values {list(ELBOS)}, only the default 'trace' applies to it."
            )
        if name == "elbo" and self.elbo == "iwae" and self.num_particles < 2:
            return (
                "elbo='iwae' with num_particles=1 is the ordinary ELBO (one importance sample); "
                "give num_particles >= 2 for an importance-weighted bound, or elbo='trace'."
            )
        return None

    def prepare_data(self, spec, data, seed: int):
        """Dynamic binarization: the grey levels become the first epoch's draw, before the data
        checks (which, for a Bernoulli likelihood, want 0s and 1s)."""
        if not self.dynamic_binarization:
            return data
        keys = _binary_keys(spec)
        in_memory = isinstance(data, Mapping) and not streaming.is_out_of_core(data)
        if not keys or not in_memory or not all(k in data for k in keys):
            raise ValueError(
                "dynamic_binarization=True needs data in memory whose binary keys "
                f"({keys or 'none in this model'}) hold grey levels."
            )
        return {**data, **{k: binarize(check_grey_levels(data[k]), seed, 0) for k in keys}}


def check_temperature(temperature) -> tuple[float, float]:
    """``temperature``: a pair ``(start, end)`` of positive floats (a relaxed guide's schedule)."""
    pair = temperature if isinstance(temperature, tuple | list | np.ndarray) else None
    values = [] if pair is None else list(np.asarray(pair, dtype=object).ravel())
    finite = all(
        isinstance(v, int | float | np.integer | np.floating)
        and not isinstance(v, bool)
        and np.isfinite(v)
        and v > 0
        for v in values
    )
    if len(values) != 2 or not finite:
        raise ValueError(
            "temperature must be a pair (start, end) of positive floats, the relaxed guide's "
            f"temperature annealed geometrically from start to end; got "
            f"{temperature!r}."
        )
    return float(values[0]), float(values[1])


class SVIInfo(NamedTuple):
    """A step's ELBO estimate (nats, summed over the data) and the temperature it ran at (a
    relaxed guide's, or a twin's schedule; None without one)."""

    objective: float
    temperature: float | None


@dataclass
class SVIBound:
    """What an SVI state is stepped with, made by ``init`` and never saved."""

    problem: Problem
    engine: Any  # the backend's SVIEngine: the model, guide, objective and optimiser
    schedule: Any  # step -> temperature; None: no temperature
    batches: EpochBatches | None = None
    grey: dict | None = None  # with dynamic binarization: the grey levels of the binary keys
    shard: tuple[int, int] | None = None  # Pyro data-parallel: (rank, world size)
    # With dynamic binarization, (epoch, the draw the engine trains on in that epoch): drawn from
    # the seed and the epoch, so kept here rather than in the state.
    binarized: tuple[int, dict | None] = (0, None)


@dataclass(frozen=True)
class SVIState:
    bound: SVIBound = dataclasses.field(compare=False, repr=False)
    # The engine's state: NumPyro's SVI state (a tuple of arrays); Pyro's parameters, Adam's
    # state, the random stream and the updates applied, as the engine keeps them.
    params: Any = None
    guide: str = ""
    step: int = 0
    rule_start: int = 0  # the first step of the learning rate's last stage
    record: dict = dataclasses.field(default_factory=dict)  # the options as a result records them
    schedule_spans_steps: bool = True  # the schedule (if any) is spread over num_steps

    #: What a checkpoint holds (``inference.persistence.state_tree``); the step sets the
    #: temperature and the minibatch.
    saved_fields: ClassVar[tuple[str, ...]] = ("params", "step")

    @property
    def problem(self) -> Problem:
        return self.bound.problem

    @property
    def engine(self):
        return self.bound.engine

    @property
    def extendable(self) -> bool:
        """Whether nothing in the run depends on ``num_steps`` (no temperature spread over it),
        so a resumed run may go on for more steps than it first asked for and match an
        uninterrupted run of the new length (minibatches, from memory, a file or a stream, are
        drawn or read by step)."""
        return not self.schedule_spans_steps

    @property
    def state_layout(self) -> int | None:
        """2 for a learning rate in stages, whose engine state holds the average of the last
        stage's iterates (``inference.learning_rate``); None, the first layout, otherwise."""
        return (
            2 if isinstance(learning_rate.parse(self.record["lr"]), learning_rate.Stages) else None
        )

    @property
    def processes(self) -> int:
        shard = self.bound.shard
        return 1 if shard is None else int(shard[1])

    @property
    def noise_bound(self) -> bool:
        """Minibatches (from memory or a stream) add their sampling noise to each step's
        objective, large next to ``tol``: a gain between two windows can then fall below
        ``tol`` by chance while the objective still rises, so the stopping rule also asks that
        the noise be below ``tol`` (``inference.convergence.window_noise``), or goes on to
        ``num_steps`` and says that the noise hid the verdict."""
        return self.bound.batches is not None or self.problem.source is not None

    @property
    def exact_objective(self) -> bool:
        """The guide draws nothing at random and every step scores all the data as given (no
        minibatch, shard or fresh binarization) with no temperature: each step's objective is
        the exact value of one function (``inference.convergence.fell_below_start``)."""
        bound, problem = self.bound, self.problem
        kind = problem.spec.guide_kind(self.guide, problem.backend.NAME)
        return (
            kind.deterministic
            and not self.noise_bound
            and bound.schedule is None
            and bound.shard is None
            and bound.grey is None
        )

    @property
    def lead(self) -> bool:
        shard = self.bound.shard
        return shard is None or shard[0] == 0

    @property
    def outside_support(self) -> list[str]:
        return self.engine.params_outside_support(self.params)


def check_enumerable(backend: str, K, guide: str, why: str = "") -> None:
    """NumPyro's enumeration allocates no dimension to a site with a single value and then
    fails looking it up (a KeyError or a funsor shape error): a clear error instead."""
    if backend == "numpyro" and K == 1:
        raise ValueError(
            f"K=1 with the enumerated guide {guide!r} does not run on NumPyro, whose "
            f"enumeration cannot sum over a single component{why}. Fit a one-component model "
            "with backend='pyro', or with closed-form updates."
        )


def geometric_schedule(start: float, end: float, num_steps: int):
    if not (start > 0 and end > 0):
        raise ValueError(f"temperature must be a pair of floats in (0, inf); got ({start}, {end}).")
    rate = (end / start) ** (1.0 / max(num_steps - 1, 1))
    return lambda step: (
        max(end, start * rate**step) if end <= start else min(end, start * rate**step)
    )


def _settles_at(schedule, num_steps: int) -> int:
    """The first step from which ``schedule`` (a temperature or KL weight the objective reads;
    None: none) keeps its last value, by bisection: one that keeps a value once it reaches it.
    The objective changes with the schedule until then, so the stopping rule waits for it (a
    run stopped on an objective still annealing has not converged)."""
    if schedule is None or num_steps < 2:
        return 0
    last, low, high = schedule(num_steps - 1), 0, num_steps - 1
    while low < high:
        middle = (low + high) // 2
        low, high = (low, middle) if schedule(middle) == last else (middle + 1, high)
    return low


def _binary_keys(spec) -> list[str]:
    return [key for key, field in spec.data.items() if field.binary]


class SVI(Algorithm):
    name = "svi"
    Options = SVIOptions
    # float64 unless the caller or the model asks for float32 (which both backends run).
    # At most 30,000 steps; the run stops once the mean ELBO per point over the last 500 steps
    # is less than 1e-4 nats above the mean over the 500 before (``inference.convergence``).
    traits = Traits(
        stochastic=True,
        minibatch=True,
        num_steps=30_000,
        tol=STOCHASTIC_TOL,
        window=500,
        objective="ELBO",
        advice="Lower the learning rate.",
    )

    def unsupported(self, spec) -> str | None:
        if not spec.guides:
            return f"model {spec.name!r} offers no guides (ModelSpec.guides)"
        return None

    # Longer than the layer's other functions, and kept whole: one pass from the options to an
    # engine, in which each choice (guide, temperature schedule, minibatches, data-parallel
    # shard, ELBO) constrains the next, so it reads top to bottom as the engine is assembled.
    def init(self, problem: Problem, options: SVIOptions) -> SVIState:
        spec, back = problem.spec, problem.backend
        guide = options.guide or spec.guides[0]
        if guide not in spec.guides:
            raise ValueError(
                f"Unknown guide {guide!r} for {spec.name!r}; valid guides are {list(spec.guides)}."
                + did_you_mean(guide, spec.guides)
            )
        lr = learning_rate.parse(options.lr)
        twin = spec.twin(back.NAME)
        start = self._start_values(problem, problem.init)
        data, config = problem.backend_data(), problem.backend_config()
        spans_steps = True
        settled = learning_rate.last_stage_start(lr)
        kind = spec.guide_kind(guide, back.NAME)
        if kind.relaxed:
            # The temperature reaches its end when the learning rate enters its last stage,
            # and the stopping rule waits for both: it then sees a fixed objective (annealed
            # over num_steps, the run stopped at about a third of the default 30,000, still at
            # 0.46). With a constant rate, over the first half of num_steps, so that the rule
            # has the second; with fewer steps than the stages, over num_steps.
            if settled == 0:
                anneal_steps = max(1, problem.num_steps // 2)
            else:
                anneal_steps = min(settled, problem.num_steps)
            schedule = geometric_schedule(*check_temperature(options.temperature), anneal_steps)
        elif hasattr(twin, "temperature_schedule"):  # e.g. a KL-weight warm-up the model reads
            schedule = twin.temperature_schedule(problem.config, problem.num_steps)
            spans_steps = getattr(twin, "SCHEDULE_SPANS_STEPS", True)
        else:
            schedule = None
        batches = shard = bound_num_data = None
        model = spec.build_model(back.NAME, config, start)
        guide_fn = twin.make_guide(guide, config, start)
        if options.data_parallel and back.NAME == "pyro":
            shard = back.init_data_parallel()
        source, batch_size = problem.source, options.batch_size
        if batch_size is not None or source is not None or shard is not None:
            if not spec.minibatch:
                raise ValueError(
                    f"Model {spec.name!r} does not support minibatches (batch_size=, data not in "
                    "memory, or data_parallel on Pyro); fit it on the full data."
                )
            if source is None and batch_size is not None:
                batches = EpochBatches(problem.num_data, batch_size, problem.seed)
            bound_num_data = problem.num_data
            model = functools.partial(model, num_data=bound_num_data)
            guide_fn = functools.partial(guide_fn, num_data=bound_num_data)
        batch_rows = batches.batch_size if batches is not None else None
        source_rows = source.batch_size if source is not None else problem.num_data
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
                data = {k: v[_share(problem.num_data, shard)] for k, v in data.items()}
        _check_particle_memory(problem, options.num_particles, batch_rows or source_rows)
        enumerated = kind.enumerated
        if enumerated:
            check_enumerable(back.NAME, getattr(config, "K", None), guide)
        setup = SVISetup.from_options(
            options,
            elbo="enum" if enumerated else _objective(kind, options.elbo),
            lr=lr,
            seed=problem.seed,
            device=problem.device,
            init_temperature=None if schedule is None else schedule(0),
            batch_rows=batch_rows,
            # The fits this one's compiled functions serve: same model, guide and data plate.
            compile_key=(spec.name, spec.backends[back.NAME], guide, bound_num_data),
            start=start,
            persist=spec.built_in,
            dtype=problem.dtype,
        )
        engine = back.SVIEngine(model, guide_fn, data, config, setup)
        params = engine.initial_state()
        if isinstance(problem.init, Mapping):
            _check_init_names(spec.name, problem.init, engine.params(params))
        grey = None
        if options.dynamic_binarization:
            grey = {k: check_grey_levels(problem.given[k]) for k in _binary_keys(spec)}
        bound = SVIBound(problem, engine, schedule, batches=batches, grey=grey, shard=shard)
        return SVIState(
            bound,
            params=params,
            guide=guide,
            rule_start=max(settled, _settles_at(schedule, problem.num_steps)),
            record=_record(options, problem, guide),
            schedule_spans_steps=schedule is not None and spans_steps,
        )

    def _start_values(self, problem, init) -> dict[str, np.ndarray] | None:
        """Starting parameters: ``init`` itself when it is a dict of arrays; for models whose
        updates start from responsibilities, one update from the initial responsibilities;
        else None (the model's own seeded initialisation)."""
        if isinstance(init, Mapping):
            given = _finite_start(init)
            default = start_values(problem, None)
            if default is None:  # a network's own checks see to its names
                return given
            return _checked_start(problem, given, default)
        start = start_values(problem, init)
        if start is None and init is not None:
            raise ValueError(
                f"init for model {problem.spec.name!r} must be None (its own initialisation) or "
                f"a dict of parameter arrays such as a fit's raw_params; got {init!r}."
            )
        return start

    def step(self, state: SVIState):
        bound = state.bound
        data = self._binarization(state) if bound.grey is not None else None
        rows = batch = None
        if state.problem.source is not None:
            p = state.problem
            batch = p.source.batch(state.step)
            if bound.shard is not None:
                rows = len(next(iter(batch.values())))
                if rows % bound.shard[1]:
                    raise ValueError(
                        f"The minibatch of step {state.step + 1} has {rows} rows, which do not "
                        f"split over the {bound.shard[1]} processes of the group."
                    )
                batch = {k: v[_share(rows, bound.shard)] for k, v in batch.items()}
            batch = {k: p.backend.asarray(v, p.device, p.dtype) for k, v in batch.items()}
            rows = None
        elif bound.batches is not None:
            rows = bound.batches.indices(state.step)
            if bound.shard is not None:
                rows = rows[_share(len(rows), bound.shard)]
        temperature = None if bound.schedule is None else bound.schedule(state.step)
        params, elbo = bound.engine.step(state.params, temperature, rows, batch=batch, data=data)
        new = dataclasses.replace(state, params=params, step=state.step + 1)
        return new, SVIInfo(objective=elbo, temperature=temperature)

    def _binarization(self, state: SVIState):
        """Dynamic binarization: a fresh draw of the training pixels at each epoch (None: the
        first epoch's, the engine's own data)."""
        bound = state.bound
        steps_per_epoch = bound.batches.steps_per_epoch if bound.batches else 1
        epoch = state.step // steps_per_epoch
        if epoch != bound.binarized[0]:
            p = state.problem
            drawn = {
                k: p.backend.asarray(binarize(grey, p.seed, epoch), p.device, p.dtype)
                for k, grey in bound.grey.items()
            }
            bound.binarized = (epoch, {**bound.engine.data, **drawn})
        return bound.binarized[1]

    def get_params(self, state: SVIState) -> dict[str, np.ndarray]:
        return state.engine.params(state.params)


def _record(options: SVIOptions, problem: Problem, guide: str) -> dict:
    """The options as a result and a checkpoint record them: those every result has recorded,
    then any other option (``jit``, ``data_parallel``, an option added later) only where it is
    not its default, so that checkpoints written before it existed still resume."""
    out = {
        "lr": learning_rate.record(options.lr),
        "num_particles": int(options.num_particles),
        "temperature": list(options.temperature),
        "batch_size": options.batch_size,
        "elbo": _objective(problem.spec.guide_kind(guide, problem.backend.NAME), options.elbo),
        "guide": guide,
        "num_steps": problem.num_steps,
        "dynamic_binarization": bool(options.dynamic_binarization),
    }
    for field in dataclasses.fields(options):
        value = getattr(options, field.name)
        if isinstance(field.default, bool):
            value = bool(value)
        if field.name not in out and value != field.default:
            out[field.name] = value
    return out


def _objective(kind, elbo: str) -> str:
    """The ELBO a guide of kind ``kind`` is fitted with: the mean-field one for a guide that
    takes the closed-form KL (``closed_form_kl``), else ``elbo``."""
    return "meanfield" if kind.closed_form_kl else elbo


def enumerated_guide(spec, backend: str) -> str | None:
    """The model's first guide that sums its discrete latents out, if it has one."""
    return next((g for g in spec.guides if spec.guide_kind(g, backend).enumerated), None)


def _share(num_rows: int, shard):
    """The slice of a step's rows that process ``rank`` of ``world`` works on."""
    rank, world = shard
    size = num_rows // world
    return slice(rank * size, (rank + 1) * size)


def _checked_start(problem, given, default):
    """``given`` parameters over the default start ``default``: the names must be the model's,
    the shapes those of its configuration, the values finite."""
    _check_init_names(problem.spec.name, given, default)
    for key, value in given.items():
        if value.shape != default[key].shape:
            raise ValueError(
                f"init[{key!r}] must have shape {default[key].shape} for this configuration "
                f"and the data's width; got {value.shape}."
            )
    return {**default, **given}


def _check_init_names(model: str, init, params: dict) -> None:
    """Every name of ``init`` is a parameter of the fit: one that is not (a typo, another
    model's) would otherwise be left unused without a word, the parameter it meant starting
    from the model's own value."""
    unknown = sorted(set(init) - set(params))
    if unknown:
        known = sorted(params)
        shown = known if len(known) <= 12 else [*known[:12], "..."]
        raise ValueError(
            f"init names {unknown}, which are not parameters of {model!r}; its parameters are "
            f"{shown} (a fit's raw_params)." + did_you_mean(unknown[0], known)
        )


def _check_particle_memory(problem, num_particles: int, rows: int) -> None:
    """Refuse ``num_particles`` whose step could not fit in memory. A lower bound: every
    particle scores each observed number of the step's ``rows`` at least once, and reverse-mode
    differentiation keeps that value and makes its gradient (twice the numbers)."""
    per_row = sum(int(np.prod(v.shape[1:], dtype=np.int64)) for v in problem.data.values())
    per_particle = 2 * rows * per_row * np.dtype(problem.dtype).itemsize
    check_fits(
        int(num_particles) * per_particle,
        f"num_particles={num_particles:,} on {rows:,} rows a step",
        f"Pass num_particles <= {max(1, (available_memory() or 0) // per_particle):,}, or a "
        "smaller batch_size.",
    )


def _finite_start(init) -> dict[str, np.ndarray]:
    """``init``'s arrays, each refused up front when it holds NaN or inf (or no numbers): a
    start that is not finite would end the first step as a non-finite objective, blamed on the
    learning rate."""
    given = {k: np.asarray(v) for k, v in init.items()}
    for key, value in given.items():
        if value.dtype.kind not in "fiu":
            raise ValueError(f"init[{key!r}] must hold numbers; got dtype {value.dtype}.")
        bad = int(np.size(value) - np.isfinite(value).sum())
        if bad:
            raise ValueError(
                f"init[{key!r}] must hold finite numbers; it holds {bad} NaN or inf value(s) "
                f"of {np.size(value)} (a fit that diverged leaves such parameters: start from "
                "an earlier result, or leave init=None)."
            )
    return given


def _evaluation_engine(run, data, guide: str, elbo: str, seed: int):
    """A fresh engine (no step taken) of ``run``'s model and ``guide`` at its parameters, on the
    CPU; ``run`` is a fit's result or what scoring needs of one
    (:class:`~inference.evaluation.Fitted`, a state's parameters mid-run)."""
    fit = run if isinstance(run, evaluation.Fitted) else evaluation.fitted(run)
    spec = fit.spec
    back = get_backend(fit.backend)
    device = back.resolve_device("cpu")
    config = back.backend_config(fit.config, device, fit.dtype)
    params = dict(fit.raw_params)
    if elbo == "enum":
        check_enumerable(back.NAME, getattr(config, "K", None), guide)
    setup = SVISetup(
        elbo=elbo,
        lr=1e-3,
        seed=seed,
        device=device,
        compile_key=(spec.name, spec.backends[back.NAME], guide, None),
        start=params,
        persist=spec.built_in,
        dtype=fit.dtype,
    )
    return back.SVIEngine(
        spec.build_model(back.NAME, config, params),
        spec.twin(back.NAME).make_guide(guide, config, params),
        {k: back.asarray(v, device, fit.dtype) for k, v in spec.validate_data(data).items()},
        config,
        setup,
    )


def enumerated_elbo(result, data, num_particles: int = 100, seed: int = 0) -> float:
    """The ELBO of a fitted SVI run with discrete latents summed out, in nats (sum over points).

    A Gumbel-softmax run optimises a relaxed objective; evaluating its global factors with ``z``
    enumerated (the optimal q(z) given them) puts every SVI run on the ELBO of the discrete model.
    ``result`` may also be :class:`~inference.evaluation.Fitted` (a state's parameters mid-run).
    """
    guide = enumerated_guide(result.spec, result.backend)
    if guide is None:
        raise ValueError(
            f"Model {result.spec.name!r} has no guide that sums its discrete latents out."
        )
    engine = _evaluation_engine(result, data, guide, "enum", seed)
    return engine.elbo(engine.initial_state(), num_particles=num_particles, seed=seed)


def fresh_elbo(result, data, num_particles: int) -> float:
    """A fresh Monte-Carlo ELBO of a fitted SVI run with its own guide, in nats (sum over
    points), whatever bound the run was trained with. A guide that sums discrete latents out
    (an enumerated one) draws nothing for them: its ELBO is :func:`enumerated_elbo`'s."""
    if result.spec.guide_kind(result.guide, result.backend).enumerated:
        return enumerated_elbo(result, data, num_particles, result.seed)
    # The record holds the objective the fit used (``_objective``: the mean-field one for a
    # closed-form-KL guide). A mean-field run keeps it: the same ELBO, its KL taken exactly.
    # An importance-weighted run does not: its bound with ``num_particles`` samples lies above
    # the ELBO, and would rank the run above runs whose ELBO is higher.
    elbo = "meanfield" if result.options.get("elbo") == "meanfield" else "trace"
    engine = _evaluation_engine(result, data, result.guide, elbo, result.seed)
    return engine.elbo(engine.initial_state(), num_particles=num_particles, seed=result.seed)
