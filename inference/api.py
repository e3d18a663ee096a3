"""``fit`` and ``compare``: the facade scripts call."""

from __future__ import annotations

import dataclasses
import hashlib
import importlib
import inspect
import warnings
from collections.abc import Mapping

import numpy as np

from inference import cavi, em, learning_rate, streaming, svi, svi_natural
from inference.algorithm import Problem
from inference.loop import run
from inference.minibatch import binarize, check_grey_levels
from inference.result import FitResult
from inference.validation import Validation
from zoo import BACKENDS, get_model

ALGORITHMS = {
    "cavi": cavi.ALGORITHM,
    "em": em.ALGORITHM,
    "svi": svi.ALGORITHM,
    "svi-natural": svi_natural.ALGORITHM,
}
DEFAULT_NUM_STEPS = {"cavi": 500, "em": 500, "svi": 2000, "svi-natural": 1000}
DEFAULT_TOL = {"cavi": 1e-6, "em": 1e-6, "svi": None, "svi-natural": None}
SVI_OPTIONS = ("guide", "lr", "num_particles", "temperature", "batch_size", "elbo")
MINIBATCH_ALGORITHMS = ("svi", "svi-natural")  # the ones that take data not in memory


def get_backend(name: str):
    if name not in BACKENDS:
        raise ValueError(f"Unknown backend {name!r}; valid backends are {list(BACKENDS)}.")
    return importlib.import_module(f"inference.backends.{name}_backend")


def get_algorithm(name: str):
    if not isinstance(name, str):
        raise TypeError(f"algorithm must be a name (str); got {type(name).__name__}.")
    if name not in ALGORITHMS:
        raise ValueError(f"Unknown algorithm {name!r}; valid algorithms are {sorted(ALGORITHMS)}.")
    return ALGORITHMS[name]


def _prepare(spec, data, model_options):
    allowed = [p for p in inspect.signature(spec.prepare).parameters if p != "data"]
    unknown = sorted(set(model_options) - set(allowed))
    if unknown:
        raise TypeError(
            f"Unknown option(s) {unknown} for model {spec.name!r}; its options are {allowed}, "
            f"and SVI takes {list(SVI_OPTIONS)}."
        )
    return spec.prepare(data, **model_options)


def _config_arrays(config) -> dict:
    """The model config as named arrays, for a fingerprint (a checkpoint of another
    architecture or other priors is refused on resume)."""
    return {
        f.name: np.asarray(getattr(config, f.name), dtype=object).astype(str)
        if not isinstance(getattr(config, f.name), np.ndarray)
        else getattr(config, f.name)
        for f in dataclasses.fields(config)
    }


def _fingerprint(data) -> str:
    digest = hashlib.sha256()
    for key in sorted(data):
        digest.update(key.encode())
        digest.update(str(data[key].shape).encode())
        digest.update(np.ascontiguousarray(data[key]).tobytes())
    return digest.hexdigest()[:16]


#: Options read by some algorithms only, and their defaults. fit() takes them as None when not
#: given, so that one given to an algorithm that would ignore it is an error.
ALGORITHM_OPTIONS = {
    "lr": (("svi",), 0.05),
    "num_particles": (("svi",), 1),
    "temperature": (("svi",), (1.0, 0.1)),
    "elbo": (("svi",), "trace"),
    "step_size": (("svi-natural",), (1.0, 0.7)),
}


def _algorithm_options(algorithm: str, given: dict) -> dict:
    """``given`` (None where not given) with the defaults filled in; an option given to an
    algorithm that does not read it is an error."""
    out = {}
    for name, value in given.items():
        takers, default = ALGORITHM_OPTIONS[name]
        if value is not None and algorithm not in takers:
            raise ValueError(
                f"{name}= is an option of algorithm {' and '.join(map(repr, takers))}; "
                f"algorithm {algorithm!r} does not take it (got {name}={value!r})."
            )
        out[name] = default if value is None else value
    return out


def guide_ignores(spec, backend: str, guide: str | None, option: str) -> bool:
    """Whether SVI with ``guide`` ignores the fit() option ``option``: the temperature anneals
    the Gumbel-softmax guide only, and an enumerated guide has its own objective
    (TraceEnum_ELBO). fit() refuses such an option; compare() does not pass it."""
    if option == "temperature":
        return guide != "gumbel"
    if option == "elbo":
        return guide in getattr(spec.twin(backend), "ENUMERATED_GUIDES", ())
    return False


def _check_guide_options(spec, backend: str, guide: str, given: set, elbo: str) -> None:
    """SVI options that the chosen guide would ignore are errors too."""
    if "temperature" in given and guide_ignores(spec, backend, guide, "temperature"):
        raise ValueError(
            f"temperature= anneals the Gumbel-softmax guide ('gumbel'); guide {guide!r} does not "
            "use it."
        )
    if "elbo" in given and elbo != "trace" and guide_ignores(spec, backend, guide, "elbo"):
        raise ValueError(
            f"elbo={elbo!r} does not apply to guide {guide!r}, which sums the discrete "
            "latents out exactly (TraceEnum_ELBO)."
        )


def fit(
    model,
    data,
    algorithm: str = "svi",
    backend: str = "numpyro",
    *,
    guide: str | None = None,
    device: str = "cpu",
    seed: int = 0,
    num_steps: int | None = None,
    tol: float | None = None,
    init=None,
    dtype: str | None = None,
    progress: bool = True,
    checkpoint=None,
    checkpoint_every: int = 100,
    resume: bool = False,
    callback=None,
    lr=None,
    num_particles: int | None = None,
    temperature=None,
    batch_size: int | None = None,
    elbo: str | None = None,
    dynamic_binarization: bool = False,
    validation_data=None,
    validate_every: int | None = None,
    patience: int | None = None,
    num_data: int | None = None,
    step_size=None,
    data_parallel: bool = False,
    jit: bool = False,
    **model_options,
) -> FitResult:
    """Fit ``model`` to ``data`` with ``algorithm`` on ``backend``; returns a :class:`FitResult`.

    Parameters
    ----------
    model : str or ModelSpec
        A registered model name (``zoo.list_models()``) or a spec.
    data : dict of str to array-like, or an iterable of minibatches
        The model's data keys, e.g. ``{"x": X}`` with ``X`` of shape (n_samples, n_features).
        Data larger than memory (``svi``, ``svi-natural``): memory-mapped arrays
        (``np.load(path, mmap_mode="r")``) with ``batch_size``, or an iterable of minibatches
        (dicts, or arrays for one-key models) with ``num_data``; see ``inference.streaming``.
    algorithm : {"cavi", "em", "svi", "svi-natural"}
    backend : {"pyro", "numpyro"}
    guide : str, optional
        SVI guide (``spec.guides``; the first is the default).
    device : str
        ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
    seed : int
        Seeds every random choice of the run (initialisation, Monte-Carlo draws).
    num_steps, tol :
        At most ``num_steps`` steps; stop early when the objective per data point changes by less
        than ``tol`` nats (default 1e-6 for closed-form updates, off for SVI).
    init : {"kmeans", "random", "random_from_data"}, array of shape (n_samples, K), or dict of arrays, optional
        For mixtures, the initial responsibilities every algorithm starts from (default
        ``"kmeans"``). For SVI, a dict of parameter arrays (e.g. another fit's ``raw_params``,
        from either backend) starts from those values; None uses the model's own seeded
        initialisation.
    dtype : {"float32", "float64"}, optional
        Default: the model's preference (``spec.dtype``), else float64.
    lr, num_particles, temperature, batch_size, elbo :
        SVI options: Adam's learning rate (default 0.05), Monte-Carlo samples per step (1), the
        Gumbel-softmax temperature schedule ``(start, end)`` (``(1.0, 0.1)``), the minibatch
        size (default: full batch) and the objective (``"trace"``, the default, ``"meanfield"``,
        ``"iwae"``; see ``inference.svi.ELBOS``). Given to another algorithm, an error.
        ``lr`` may also be piecewise-constant stages ``[(num_steps, lr), ...]``, the last rate
        held after its stage (``inference.learning_rate``).
    dynamic_binarization : bool
        SVI on binary-pixel models: ``data["x"]`` holds grey levels in [0, 1] and every epoch
        trains on a fresh Bernoulli draw of each pixel (drawn from ``seed`` and the epoch, so a
        resumed run sees the same draws).
    validation_data, validate_every, patience :
        Held-out data (same keys as ``data``) whose per-point ELBO is evaluated every
        ``validate_every`` steps (default: one epoch with ``batch_size``, else 100 steps) into
        ``history["validation"]``; after ``patience`` evaluations without improvement the fit
        stops. With validation data the result holds the parameters of the best evaluation
        (``result.best_step``). For models with per-datum evaluation (``FitResult.elbo``).
    checkpoint, checkpoint_every, resume :
        Write an atomic checkpoint to ``checkpoint`` every ``checkpoint_every`` steps; with
        ``resume=True`` continue from it (if the file exists) to the same result as an
        uninterrupted run; a run that converged or stopped early comes back as it ended. A
        larger ``num_steps`` on resume extends the run, unless the run depends on ``num_steps``
        (a temperature annealed over it, a stream): then the checkpoint is refused, as is a
        checkpoint of another model, data set, seed, option or validation set-up.
    num_data : int, optional
        With a stream of minibatches: the size of the full data set (scales the data plate).
    step_size : (tau, kappa)
        ``svi-natural``: the Robbins-Monro step ``rho_t = (t + tau) ** -kappa`` (default
        ``(1.0, 0.7)``); ``batch_size`` is its minibatch (default: the whole data).
    data_parallel : bool
        ``svi``: split each step's data over devices (NumPyro: every ``jax.devices()``; Pyro: the
        processes of a ``torch.distributed`` group, e.g. under ``torchrun``). See
        ``docs/scaling.md``.
    jit : bool
        ``svi`` on Pyro: compile the ELBO and its gradient with ``torch.jit.trace`` (Pyro's
        ``JitTrace_ELBO`` and ``JitTraceEnum_ELBO``, the zoo's ``JitMeanFieldELBO``; not
        ``"iwae"``).
        The model must have a static structure. NumPyro always compiles (``jax.jit``).
    **model_options :
        The model's own options (for ``bayesian_gmm``: ``K``, ``weight_prior``, priors).
    """
    spec = get_model(model)
    alg = get_algorithm(algorithm)
    back = get_backend(backend)
    if not alg.supports(spec, backend):
        valid = [a for a in ALGORITHMS if ALGORITHMS[a].supports(spec, backend)]
        raise ValueError(
            f"Model {spec.name!r} does not support algorithm {algorithm!r}; it supports {valid}."
        )
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise TypeError(f"seed must be an int; got {type(seed).__name__}.")
    if not 0 <= seed < 2**63:
        raise ValueError(f"seed must be an int in the range [0, 2**63); got {seed}.")
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be callable(step, state, info); got {callback!r}.")
    num_steps = DEFAULT_NUM_STEPS[algorithm] if num_steps is None else num_steps
    if isinstance(num_steps, bool) or not isinstance(num_steps, int | np.integer) or num_steps < 1:
        raise ValueError(f"num_steps must be an int in the range [1, inf); got {num_steps!r}.")
    tol = DEFAULT_TOL[algorithm] if tol is None else tol
    if tol is not None and not (
        isinstance(tol, int | float | np.number) and not isinstance(tol, bool) and 0 <= tol < np.inf
    ):
        raise ValueError(f"tol must be a float in the range [0, inf); got {tol!r}.")
    if (
        isinstance(checkpoint_every, bool)
        or not isinstance(checkpoint_every, int | np.integer)
        or checkpoint_every < 1
    ):
        raise ValueError(
            f"checkpoint_every must be an int in the range [1, inf); got {checkpoint_every!r}."
        )
    requested = dict(
        lr=lr, num_particles=num_particles, temperature=temperature, elbo=elbo, step_size=step_size
    )
    given = {name for name, value in requested.items() if value is not None}
    lr, num_particles, temperature, elbo, step_size = _algorithm_options(
        algorithm, requested
    ).values()
    if (validate_every is not None or patience is not None) and validation_data is None:
        raise ValueError("validate_every= and patience= need validation_data= to validate on.")
    if resume and checkpoint is None:
        raise ValueError("resume=True needs checkpoint=PATH, the file to resume from.")
    source = kept = None
    out_of_core = streaming.is_out_of_core(data)
    if out_of_core and algorithm not in MINIBATCH_ALGORITHMS:
        raise ValueError(
            "Data not held in memory (memory-mapped arrays or a stream of minibatches) need a "
            f"minibatch algorithm, one of {list(MINIBATCH_ALGORITHMS)}; got {algorithm!r}."
        )
    if num_data is not None and not out_of_core:
        raise ValueError("num_data= is for streams of minibatches; these data are in memory.")
    grey = None
    if dynamic_binarization:
        if algorithm != "svi":
            raise ValueError(
                f"dynamic_binarization is an SVI option; algorithm {algorithm!r} does not take it."
            )
        if out_of_core or not isinstance(data, Mapping) or "x" not in data:
            raise ValueError("dynamic_binarization=True needs data={'x': grey levels} in memory.")
        # Binarized before the data checks, which (for a Bernoulli likelihood) want 0s and 1s.
        grey = check_grey_levels(data["x"])
        data = {**data, "x": binarize(grey, int(seed), 0)}
    if not out_of_core:
        data = spec.validate_data(data)
    if out_of_core or algorithm == "svi-natural":
        if algorithm == "svi" and not spec.minibatch:
            raise ValueError(
                f"Model {spec.name!r} does not support minibatches; it cannot be fitted by SVI on "
                "data not held in memory."
            )
        source = streaming.make_source(
            spec,
            data,
            batch_size=batch_size,
            num_data=num_data,
            seed=int(seed),
            num_steps=int(num_steps),
        )
        if out_of_core:
            kept = data if isinstance(data, dict) else None  # what the result refers to
            data = source.init_sample()
    config = _prepare(spec, data, model_options)
    problem = Problem(
        spec=spec,
        data=data,
        config=config,
        backend=back,
        device=back.resolve_device(device),
        dtype=dtype or spec.dtype or alg.default_dtype,
        seed=int(seed),
        source=source if out_of_core else None,
    )
    options = {"init": init if init is None or isinstance(init, str) else "array"}
    if data_parallel:
        options["data_parallel"] = True
    if algorithm == "svi-natural":
        for name, value in (("guide", guide), ("data_parallel", data_parallel), ("jit", jit)):
            if value:
                raise ValueError(
                    f"{name}= is an SVI option; algorithm 'svi-natural' does not take it."
                )
        tau, kappa = svi_natural.check_step_size(step_size)
        options.update(batch_size=source.batch_size, step_size=[tau, kappa])
        state = alg.init(
            problem, source=source, init="kmeans" if init is None else init, step_size=(tau, kappa)
        )
    elif algorithm == "svi":
        guide = guide or spec.guides[0]
        _check_guide_options(spec, back.NAME, guide, given, elbo)
        svi_options = dict(
            lr=learning_rate.record(lr),
            num_particles=num_particles,
            temperature=list(temperature),
            batch_size=batch_size,
            elbo=elbo,
        )
        if jit:  # recorded only when on, so checkpoints written before the option still resume
            svi_options["jit"] = True
        options.update(
            svi_options,
            guide=guide,
            num_steps=int(num_steps),
            dynamic_binarization=bool(dynamic_binarization),
        )
        state = alg.init(
            problem,
            guide=guide,
            init=init,
            num_steps=int(num_steps),
            grey=grey,
            source=problem.source,
            data_parallel=bool(data_parallel),
            **svi_options,
        )
    else:
        for name, value, default in (("guide", guide, None), ("batch_size", batch_size, None)):
            if value != default:
                raise ValueError(
                    f"{name}= is an SVI option; algorithm {algorithm!r} does not take it."
                )
        for name, value in (("data_parallel", data_parallel), ("jit", jit)):
            if value:
                raise ValueError(
                    f"{name}= is an SVI option; algorithm {algorithm!r} does not take it."
                )
        state = alg.init(problem, init="kmeans" if init is None else init)
    options["dtype"] = problem.dtype
    # A data-parallel Pyro group: the first process writes checkpoints and shows progress.
    lead = getattr(state, "shard", None) is None or state.shard[0] == 0
    progress = progress and lead
    if out_of_core:
        data_fingerprint = streaming.fingerprint(source)
    else:
        data_fingerprint = _fingerprint(data if grey is None else {**data, "x": grey})
    header = {
        "model": spec.name,
        "algorithm": algorithm,
        "backend": backend,
        "guide": guide,
        "seed": int(seed),
        "data_fingerprint": data_fingerprint,
        "config_fingerprint": _fingerprint(_config_arrays(config)),
        "options": options,
    }
    if getattr(state, "extendable", False):
        # Resume may ask for more steps than the checkpointed run did (training extended).
        header["options"] = {k: v for k, v in options.items() if k != "num_steps"}

    validation = None

    def make_result(state, history, converged, use_best=True):
        best = use_best and validation is not None and validation.best_params is not None
        raw = validation.best_params if best else alg.get_params(state)
        return FitResult(
            model=spec.name,
            algorithm=algorithm,
            backend=backend,
            guide=guide,
            params=spec.summarize(raw, config) if spec.summarize else dict(raw),
            raw_params=raw,
            config=config,
            history={k: np.asarray(v) for k, v in history.items()},
            converged=converged,
            timing=_timing(history),
            num_data=problem.num_data,
            seed=int(seed),
            options=options,
            data=kept if out_of_core else data,
            best_step=validation.best_step if best else None,
        )

    if validation_data is not None:
        held_out = spec.validate_data(validation_data)
        if spec.check_data is not None:
            spec.check_data(held_out, config)

        def validation_elbo(state, rows=None) -> float:
            """Per-point ELBO of the held-out data; one draw per point, the same each time."""
            scored = held_out if rows is None else {k: v[:rows] for k, v in held_out.items()}
            return float(
                np.mean(make_result(state, {"time": []}, False, use_best=False).elbo(scored))
            )

        try:  # one row now, rather than a failure at the first evaluation, steps later
            validation_elbo(state, rows=1)
        except (ValueError, KeyError, TypeError) as err:
            raise ValueError(
                f"validation_data cannot be scored for model {spec.name!r} fitted by "
                f"{algorithm!r}: validation is the per-datum ELBO of a guide over latents local "
                f"to each data point. ({type(err).__name__}: {err})"
            ) from err

        if validate_every is None:
            validate_every = problem.num_data // batch_size if batch_size else 100
        validation = Validation(validation_elbo, validate_every, patience)
        if validation.every > num_steps:
            warnings.warn(
                f"validate_every={validation.every} exceeds num_steps={num_steps}: the "
                "validation data will never be scored.",
                stacklevel=2,
            )
        header["validation_setup"] = {
            "data_fingerprint": _fingerprint(held_out),
            "every": validation.every,
            "patience": None if patience is None else int(patience),
        }

    state, history, converged = run(
        alg,
        state,
        num_steps=int(num_steps),
        tol=tol,
        num_data=problem.num_data,
        progress=progress,
        checkpoint_path=checkpoint,
        checkpoint_every=int(checkpoint_every),
        resume=resume,
        header=header,
        callback=callback,
        make_result=make_result,
        validation=validation,
        write_checkpoints=lead,
    )
    return make_result(state, history, converged)


def _timing(history) -> dict:
    times = np.asarray(history["time"], dtype=float)
    if len(times) == 0:
        return {"total": 0.0, "per_step": float("nan"), "first_step": float("nan")}
    steps = np.diff(np.concatenate([[0.0], times]))
    # The first step carries JAX's compilation; the median step ignores it.
    return {
        "total": float(times[-1]),
        "per_step": float(np.median(steps)),
        "first_step": float(steps[0]),
    }
