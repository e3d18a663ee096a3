"""``fit``: the facade scripts call. It checks what every fit shares, builds the
:class:`~inference.algorithm.Problem`, and leaves everything else to the algorithm's own entry
(``inference.registry``) and to the loop (``inference.loop``)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import inspect
import os
import threading
import time
import warnings
from collections.abc import Mapping

import numpy as np

from inference import convergence, streaming
from inference.algorithm import Problem
from inference.backends import get_backend
from inference.checkpoint_guard import check_path, exclusive
from inference.loop import final_result, nonfinite_advice, run
from inference.registry import DEFAULT_ALGORITHM, get_algorithm, list_algorithms, supporting
from inference.result import FitResult
from inference.validation import Validation
from zoo import get_model
from zoo.options import check_types, did_you_mean


def model_options(spec) -> list[str]:
    """The options of a model: the parameters of its ``prepare``."""
    return [p for p in inspect.signature(spec.prepare).parameters if p != "data"]


def split_options(alg, spec, options: dict) -> tuple[dict, dict]:
    """``(the algorithm's options, the model's options)`` from the keyword options of a fit;
    an option that is neither is an error naming who takes it, if anyone does, and a model
    option of a type its ``prepare`` is not annotated with is a ``TypeError`` naming it."""
    own, model = {}, {}
    allowed_model = model_options(spec)
    for name, value in options.items():
        if name in alg.option_names():
            own[name] = value
        elif name in allowed_model:
            model[name] = value
        else:
            takers = [a for a in list_algorithms() if name in get_algorithm(a).option_names()]
            if takers:
                raise ValueError(
                    f"{name}= is an option of algorithm {' and '.join(map(repr, takers))}; "
                    f"algorithm {alg.name!r} does not take it (got {name}={value!r})."
                )
            raise TypeError(
                f"Unknown option(s) [{name!r}] for model {spec.name!r} fitted by {alg.name!r}; "
                f"the model's options are {allowed_model}, the algorithm's "
                f"{list(alg.option_names())}."
                + did_you_mean(name, [*allowed_model, *alg.option_names(), *_fit_keywords()])
            )
    check_types(spec.prepare, model, f"model {spec.name!r}")
    return own, model


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


def init_record(init) -> str | None:
    """``init`` as a checkpoint compares it: None or the method's name as given, arrays (an
    (N, K) array of responsibilities, a dict of parameter arrays) by a fingerprint of their
    values, so that a resume from other starting values is refused. Arrays are compared as
    float64, the precision every start is computed in: the same values given as float32 or
    as ints are the same start."""
    if init is None or isinstance(init, str):
        return init
    arrays = init if isinstance(init, Mapping) else {"": init}
    values = {str(k): np.asarray(v) for k, v in arrays.items()}
    values = {k: v.astype(np.float64) if v.dtype.kind in "biuf" else v for k, v in values.items()}
    return f"array {_fingerprint(values)}"


def _fit_keywords() -> list[str]:
    """The names ``fit`` itself takes (``num_steps``, ``tol``, ...), for suggestions."""
    return [name for name in inspect.signature(fit).parameters if name != "options"]


def _check_run_options(seed, num_steps, tol, checkpoint_every, callback) -> None:
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise TypeError(f"seed must be an int; got {type(seed).__name__}.")
    if not 0 <= seed < 2**63:
        raise ValueError(f"seed must be an int in the range [0, 2**63); got {seed}.")
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be callable(step, state, info); got {callback!r}.")
    if isinstance(num_steps, bool) or not isinstance(num_steps, int | np.integer) or num_steps < 1:
        raise ValueError(f"num_steps must be an int in the range [1, inf); got {num_steps!r}.")
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


class ConcurrentFitError(RuntimeError):
    """A fit started while another was running in the same process.

    Fits share process-wide state (Pyro's parameter store, NumPyro's effect handlers), so
    :func:`fit` runs them one at a time per process: a second fit, from another thread or from
    a ``callback`` of the first, fails at its start with this error naming the first. Run fits
    in parallel in separate processes (``multiprocessing``,
    ``concurrent.futures.ProcessPoolExecutor``; started by ``spawn`` for NumPyro, see
    :class:`~inference.ForkedProcessError`). A ``RuntimeError``.

    Parameters
    ----------
    message : str
        What happened and what to do instead.

    Examples
    --------
    A fit started from the callback of another:

    >>> import numpy as np
    >>> import inference, zoo
    >>> data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 100)
    >>> def fit_again(step, state, info):
    ...     inference.fit("gmm", data, "em", "pyro", K=2, progress=False)
    >>> try:
    ...     inference.fit("gmm", data, "em", "pyro", K=2, progress=False, callback=fit_again)
    ... except inference.ConcurrentFitError as err:
    ...     print(err)
    Another fit is running in this process, in this thread (a fit started from a callback?). ...
    """


_FIT_RUNNING = threading.Lock()
_fit_owner: list[str] = []  # the thread of the fit under way, for the error


def _no_fit_after_fork() -> None:
    # A fork copies the lock as it was; a fit that was running in another thread is not.
    global _FIT_RUNNING
    _FIT_RUNNING = threading.Lock()
    _fit_owner.clear()


os.register_at_fork(after_in_child=_no_fit_after_fork)


def _one_at_a_time(fit_function):
    """Fits in one process run one at a time: Pyro keeps parameters in one store per process and
    NumPyro's handlers are process-wide too, so two fits at once would corrupt each other. The
    second one fails at its start, naming the first; run fits in parallel in separate processes
    (``multiprocessing``, ``concurrent.futures.ProcessPoolExecutor``)."""

    @functools.wraps(fit_function)
    def one_at_a_time(*args, **kwargs):
        if not _FIT_RUNNING.acquire(blocking=False):
            here = _fit_owner and _fit_owner[0] == threading.current_thread().name
            where = (
                "in this thread (a fit started from a callback?)"
                if here
                else (f"in thread {_fit_owner[0] if _fit_owner else '?'!r}")
            )
            raise ConcurrentFitError(
                f"Another fit is running in this process, {where}. Fits share process-wide "
                "state (Pyro's parameter store, NumPyro's effect handlers) and must run one at "
                "a time in a process: wait for it, or fit in separate processes (started by "
                "'spawn' for NumPyro)."
            )
        _fit_owner[:] = [threading.current_thread().name]
        try:
            return fit_function(*args, **kwargs)
        finally:
            _fit_owner.clear()
            _FIT_RUNNING.release()

    return one_at_a_time


@_one_at_a_time
def fit(
    model,
    data,
    algorithm: str = DEFAULT_ALGORITHM,
    backend: str = "numpyro",
    *,
    device: str = "cpu",
    seed: int = 0,
    num_steps: int | None = None,
    tol: float | None = None,
    init=None,
    dtype: str | None = None,
    progress: bool = True,
    checkpoint=None,
    checkpoint_every: int | None = None,
    resume: bool = False,
    callback=None,
    validation_data=None,
    validate_every: int | None = None,
    patience: int | None = None,
    num_data: int | None = None,
    **options,
) -> FitResult:
    """Fit ``model`` to ``data`` with ``algorithm`` on ``backend``; returns a :class:`FitResult`.

    Parameters
    ----------
    model : str or ModelSpec
        A registered model name (``zoo.list_models()``) or a spec.
    data : dict of str to array-like, or an iterable of minibatches
        The model's data keys, e.g. ``{"x": X}`` with ``X`` of shape (n_samples, n_features).
        Data larger than memory (minibatch algorithms: ``svi``, ``svi-natural``): memory-mapped
        arrays (``np.load(path, mmap_mode="r")``) with ``batch_size``, or an iterable of
        minibatches (dicts, or arrays for one-key models) with ``num_data``; see
        ``inference.streaming``.
    algorithm : str
        A registered algorithm (``inference.list_algorithms()``): ``"cavi"``, ``"em"``,
        ``"svi"``, ``"svi-natural"`` and any installed plugin's.
    backend : {"pyro", "numpyro"}
    device : str
        ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
    seed : int
        Seeds every random choice of the run (initialisation, Monte-Carlo draws).
    num_steps, tol :
        At most ``num_steps`` steps; stop early when the algorithm's stopping rule is met with
        ``tol`` nats per data point (``inference.convergence``: an exact objective that changes
        by less than ``tol`` in a step; a noisy one whose mean over a window of steps rises by
        less than ``tol``). ``tol=0`` runs exactly ``num_steps`` steps. Defaults: the model's
        (``ModelSpec.algorithm_defaults``), else the algorithm's (``traits``). A run that uses
        all of its steps without meeting its rule warns with
        :class:`~inference.ConvergenceWarning` and has ``converged=False``.
    init : {"kmeans", "random", "random_from_data"}, array of shape (n_samples, K), or dict of arrays, optional
        For mixtures, the initial responsibilities every algorithm starts from (default
        ``"kmeans"``). For SVI, a dict of parameter arrays (e.g. another fit's ``raw_params``,
        from either backend) starts from those values; None uses the model's own seeded
        initialisation.
    dtype : {"float32", "float64"}, optional
        Default: the model's preference (``spec.dtype``), else the algorithm's.
    validation_data, validate_every, patience :
        Held-out data (same keys as ``data``) whose per-point ELBO is evaluated every
        ``validate_every`` steps (default: one epoch with ``batch_size``, else 100 steps) into
        ``history["validation"]``; after ``patience`` evaluations without improvement the fit
        stops. With validation data the result holds the parameters of the best evaluation
        (``result.best_step``). For models with per-datum evaluation (``FitResult.elbo``).
    checkpoint, checkpoint_every, resume :
        Write an atomic checkpoint to ``checkpoint`` every ``checkpoint_every`` steps (default
        100; the last step, an interrupt and an early stop are always checkpointed); with
        ``resume=True`` continue from it (if the file exists) to the same result as an
        uninterrupted run; a run that converged or stopped early comes back as it ended. A
        larger ``num_steps`` on resume extends the run, unless the run depends on ``num_steps``
        (a temperature annealed over it, a stream): then the checkpoint is refused, as is a
        checkpoint of another model, data set, seed, option, starting values (``init`` arrays
        are compared by value), validation set-up (validation data added, removed or changed)
        or data-parallel group size.
    num_data : int, optional
        With a stream of minibatches: the size of the full data set (scales the data plate).
    callback : callable(step, state, info), optional
        Runs after each step (raise to stop).
    **options :
        The algorithm's own options (``get_algorithm(name).Options``: for ``svi`` the guide,
        ``lr``, ``num_particles``, ``temperature``, ``batch_size``, ``elbo``,
        ``dynamic_binarization``, ``data_parallel``, ``jit``; for ``svi-natural``
        ``step_size`` and ``batch_size``), and the model's own (the parameters of its
        ``prepare``; for ``bayesian_gmm``: ``K``, ``weight_prior``, priors). An option that
        neither takes, or that the fit would ignore, is an error.

    Returns
    -------
    FitResult
        The fitted parameters (``params``, ``raw_params``), the objective per step
        (``history``, a dict of arrays keyed by name), whether the run converged, its timings,
        and methods that draw from the fitted posterior and score new data.

    Raises
    ------
    ValueError, TypeError
        Bad data or options, naming the argument: an unknown model, algorithm or backend, an
        algorithm the model does not support, data that break the model's data contract, an
        option that neither the algorithm nor the model takes (or that this fit would ignore),
        a ``checkpoint=`` path that is a directory or cannot be written.
    inference.CheckpointError
        ``checkpoint=`` names a file that is not a checkpoint (it is never overwritten), or a
        checkpoint of another run (on resume).
    inference.CheckpointInUseError
        Another fit, in this process or another, is writing the same checkpoint (a
        ``CheckpointError``).
    inference.ConcurrentFitError
        Another fit is running in this process: fits run one at a time per process.
    inference.NonFiniteObjectiveError
        The objective became NaN or inf; ``error.result`` holds the last good parameters.
    inference.DataError
        With data not held in memory: a minibatch that cannot be used (NaN or inf, another
        shape than the first), or :class:`StreamEndedError` (a ``DataError``) when a stream of
        minibatches ends before ``num_steps``.

    See Also
    --------
    compare : Fit several algorithms, guides, backends and seeds, and tabulate the runs.
    load : Read a result written by :meth:`FitResult.save`.

    Examples
    --------
    Maximum-likelihood EM on a small synthetic data set (the model's own generator):

    >>> import numpy as np
    >>> import inference, zoo
    >>> data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 100)
    >>> data["x"].shape
    (100, 2)
    >>> res = inference.fit("gmm", data, "em", "pyro", K=2, progress=False)
    >>> res.converged, res.num_steps
    (True, 8)
    >>> print(f"{res.objective_per_point:.2f} nats per point")
    -4.71 nats per point
    >>> res.params["weights"].round(2)
    array([0.17, 0.83])

    The history is a dict of arrays keyed by name, one entry per step:

    >>> sorted(res.history)
    ['objective', 'step', 'time']
    >>> res.history["objective"][:3].round(1)
    array([-475.4, -473.3, -471.9])

    Coordinate-ascent VI on the Bayesian mixture, for a fixed number of steps (``tol=0`` never
    stops early):

    >>> res = inference.fit(
    ...     "bayesian_gmm", data, "cavi", "pyro", K=2, num_steps=20, tol=0, progress=False
    ... )
    >>> res.algorithm, res.num_steps, res.converged
    ('cavi', 20, False)

    An option that neither the algorithm nor the model takes is an error:

    >>> inference.fit("gmm", data, "em", "pyro", K=2, lr=0.1, progress=False)
    Traceback (most recent call last):
    ...
    ValueError: lr= is an option of algorithm 'svi'; algorithm 'em' does not take it (got lr=0.1).
    """
    started = time.perf_counter()
    setup = None  # seconds before the first step, once the loop starts
    spec = get_model(model)
    alg = get_algorithm(algorithm)
    back = get_backend(backend)
    why = alg.unsupported(spec)
    if why is not None:
        valid = supporting(spec)
        raise ValueError(
            f"Model {spec.name!r} does not support algorithm {algorithm!r} ({why}); it "
            f"supports {valid}."
        )
    out_of_core = streaming.is_out_of_core(data)
    if out_of_core and not alg.traits.minibatch:
        minibatch = [a for a in list_algorithms() if get_algorithm(a).traits.minibatch]
        raise ValueError(
            "Data not held in memory (memory-mapped arrays or a stream of minibatches) need a "
            f"minibatch algorithm, one of {minibatch}; got {algorithm!r}."
        )
    own, model_opts = split_options(alg, spec, options)
    given_opts = alg.options(own)
    for name in own:
        reason = alg.ignores(spec, back.NAME, given_opts, name)
        if reason:
            raise ValueError(reason)
    declared = declared_defaults(alg, spec, own, num_steps, tol)
    opts = alg.options({**declared["options"], **own})
    alg.check_length(opts, num_steps, tol)
    if num_steps is None:
        num_steps = declared["num_steps"] or alg.default_num_steps(opts)
    tol = declared["tol"] if tol is None else tol
    if checkpoint_every is not None and checkpoint is None:
        raise ValueError("checkpoint_every= needs checkpoint=PATH, the file to write.")
    checkpoint_every = 100 if checkpoint_every is None else checkpoint_every
    _check_run_options(seed, num_steps, tol, checkpoint_every, callback)
    source = kept = None
    if (validate_every is not None or patience is not None) and validation_data is None:
        raise ValueError("validate_every= and patience= need validation_data= to validate on.")
    if resume and checkpoint is None:
        raise ValueError("resume=True needs checkpoint=PATH, the file to resume from.")
    if checkpoint is not None:  # before any work, so that no result is lost to a bad path
        checkpoint = check_path(checkpoint, resume=resume)

    if num_data is not None and not out_of_core:
        raise ValueError("num_data= is for streams of minibatches; these data are in memory.")
    given = data
    data = alg.prepare_data(spec, data, opts, int(seed))
    # What the algorithm drew afresh (dynamic binarization) is fingerprinted as given.
    redrawn = [] if data is given else [k for k in data if data[k] is not given.get(k)]
    if out_of_core:
        if not spec.minibatch:
            raise ValueError(
                f"Model {spec.name!r} does not support minibatches; it cannot be fitted on data "
                "not held in memory."
            )
        source = streaming.make_source(
            spec,
            data,
            batch_size=getattr(opts, "batch_size", None),
            num_data=num_data,
            seed=int(seed),
            num_steps=int(num_steps),
        )
        kept = data if isinstance(data, dict) else None  # what the result refers to
        data = source.init_sample()
    else:
        data = spec.validate_data(data)
    problem = Problem(
        spec=spec,
        data=data,
        config=spec.prepare(data, **model_opts),
        backend=back,
        device=back.resolve_device(device),
        dtype=dtype or spec.dtype or alg.traits.dtype,
        seed=int(seed),
        source=source,
        num_steps=int(num_steps),
        init=init,
        given=given,
    )
    if source is not None:  # later minibatches are checked against the config's bounds too
        source.config = problem.config
    state = alg.init(problem, opts)
    if checkpoint is not None and alg.unsaveable(state):
        raise ValueError(alg.unsaveable(state))
    guide = alg.guide(state)
    record = {
        "init": init if init is None or isinstance(init, str) else "array",
        **alg.record(opts, state),
        "dtype": problem.dtype,
    }
    # A data-parallel group: the first process writes checkpoints and shows progress.
    lead = alg.lead(state)
    if out_of_core:
        data_fingerprint = streaming.fingerprint(source)
    else:
        data_fingerprint = _fingerprint({**data, **{k: np.asarray(given[k]) for k in redrawn}})
    header = {
        "model": spec.name,
        "algorithm": alg.name,
        "backend": back.NAME,
        "guide": guide,
        "seed": int(seed),
        "init": init_record(init),
        # Processes sharing each step draw their own particles for their rows (Pyro).
        "processes": alg.processes(state),
        "data_fingerprint": data_fingerprint,
        "config_fingerprint": _fingerprint(_config_arrays(problem.config)),
        # Resume may ask for more steps than the checkpointed run did (training extended).
        "options": {
            k: v for k, v in record.items() if k != "num_steps" or not alg.extendable(state)
        },
        "validation_setup": None,  # a run without validation data: one with them is another
    }

    validation = None

    def make_result(state, history, converged, use_best=True):
        best = use_best and validation is not None and validation.best_params is not None
        raw = validation.best_params if best else alg.get_params(state)
        draws, sample_stats = alg.draws(state) or (None, None)
        return FitResult(
            model=spec.name,
            algorithm=alg.name,
            backend=back.NAME,
            guide=guide,
            params=alg.summarize(spec, raw, problem.config, state),
            raw_params=raw,
            config=problem.config,
            history={k: np.asarray(v) for k, v in history.items()},
            converged=converged,
            timing=_timing(history, setup),
            num_data=problem.num_data,
            seed=int(seed),
            options=record,
            data=kept if out_of_core else data,
            best_step=validation.best_step if best else None,
            draws=draws,
            sample_stats=sample_stats,
        )

    if validation_data is not None:
        if validate_every is None:  # an epoch of minibatches, else 100 steps
            batch_size = getattr(opts, "batch_size", None)
            validate_every = problem.num_data // batch_size if batch_size else 100
        validation = _validation(
            spec, alg, problem, state, make_result, validation_data, validate_every, patience
        )
        if validation.every > num_steps:
            warnings.warn(
                f"validate_every={validation.every} exceeds num_steps={num_steps}: the "
                "validation data will never be scored.",
                stacklevel=2,
            )
        header["validation_setup"] = {
            "data_fingerprint": _fingerprint(
                spec.validate_data(validation_data, "validation_data")
            ),
            "every": validation.every,
            "patience": None if patience is None else int(patience),
        }

    # The process that writes the checkpoint holds a lock on it from resume to the last write.
    guard = exclusive(checkpoint) if checkpoint is not None and lead else contextlib.nullcontext()
    setup = time.perf_counter() - started
    # What a non-finite objective, parameter or summary is told to try, the options given first.
    advice = nonfinite_advice(alg, spec, {**own, **model_opts})
    with guard:
        state, history, converged = run(
            alg,
            state,
            num_steps=int(num_steps),
            tol=tol,
            num_data=problem.num_data,
            progress=progress and lead,
            checkpoint_path=checkpoint,
            checkpoint_every=int(checkpoint_every),
            resume=resume,
            header=header,
            callback=callback,
            make_result=make_result,
            validation=validation,
            write_checkpoints=lead,
            advice=advice,
        )
    result = final_result(make_result, state, history, converged, advice)
    result.timing["wall"] = time.perf_counter() - started
    _warn_unconverged(alg, spec, back.NAME, result, num_steps, tol)
    return result


def declared_defaults(alg, spec, given: dict, num_steps, tol) -> dict:
    """What a fit of ``spec`` by ``alg`` uses where the caller gave nothing: the defaults the
    model declares for the algorithm (``ModelSpec.algorithm_defaults``: a network wants a
    smaller learning rate than a mixture), else the algorithm's own. Returns ``{"options":
    the declared options the caller did not give, "num_steps": a declared step budget or None,
    "tol": the tolerance}``; what the caller gave is never replaced."""
    declared = dict(spec.algorithm_defaults.get(alg.name, {}))
    unknown = sorted(set(declared) - {*alg.option_names(), "num_steps", "tol"})
    if unknown:
        raise ValueError(
            f"Model {spec.name!r} declares defaults {unknown} for algorithm {alg.name!r}, which "
            f"takes {sorted({*alg.option_names(), 'num_steps', 'tol'})}."
        )
    return {
        "options": {
            k: v for k, v in declared.items() if k not in given and k not in ("num_steps", "tol")
        },
        "num_steps": declared.get("num_steps") if num_steps is None else None,
        "tol": declared.get("tol", alg.traits.tol) if tol is None else tol,
    }


def _warn_unconverged(alg, spec, backend: str, result, num_steps: int, tol) -> None:
    """A :class:`~inference.convergence.ConvergenceWarning` for a run that used all of its
    ``num_steps`` without meeting its stopping rule (none for ``tol`` None or 0: a fixed number
    of steps was asked for), and for a sampler whose draws fail their diagnostics."""
    run_name = f"{alg.name} on {spec.name!r} ({backend}" + (
        f", guide {result.guide!r})" if result.guide else ")"
    )
    if alg.traits.estimate == "draws":
        problems = alg.diagnose(result)
        if problems:
            warnings.warn(
                f"{run_name}: the chains have not converged: {'; '.join(problems)}. Run more "
                "warm-up and draws (num_warmup, num_draws), more chains, or raise "
                "target_accept_prob against divergences.",
                convergence.ConvergenceWarning,
                stacklevel=4,
            )
        return
    ran_out = result.num_steps >= num_steps
    if result.converged or not tol or not ran_out:
        return
    advice = (
        "Raise num_steps, or lower the learning rate (lr), or raise tol."
        if alg.traits.stochastic
        else "Raise num_steps or tol."
    )
    warnings.warn(
        convergence.unconverged_message(run_name, num_steps, tol, alg.traits.stochastic, advice),
        convergence.ConvergenceWarning,
        stacklevel=4,
    )


def _validation(spec, alg, problem, state, make_result, validation_data, every, patience):
    held_out = spec.validate_data(validation_data, "validation_data")
    if spec.check_data is not None:
        spec.check_data(held_out, problem.config)

    def validation_elbo(state, rows=None) -> float:
        """Per-point ELBO of the held-out data; one draw per point, the same each time."""
        scored = held_out if rows is None else {k: v[:rows] for k, v in held_out.items()}
        return float(np.mean(make_result(state, {"time": []}, False, use_best=False).elbo(scored)))

    try:  # one row now, rather than a failure at the first evaluation, steps later
        validation_elbo(state, rows=1)
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(
            f"validation_data cannot be scored for model {spec.name!r} fitted by "
            f"{alg.name!r}: validation is the per-datum ELBO of a guide over latents local "
            f"to each data point. ({type(err).__name__}: {err})"
        ) from err
    return Validation(validation_elbo, every, patience)


def _timing(history, setup=None) -> dict:
    """Seconds: ``total`` of the steps, the median step (``per_step``), the ``first_step`` (with
    the compilation of the step), and ``setup``, from the call to the first step
    (initialisation, tracing, compiling it). ``fit`` adds ``wall``, the whole call."""
    setup = float("nan") if setup is None else float(setup)
    times = np.asarray(history["time"], dtype=float)
    if len(times) == 0:
        return {"total": 0.0, "per_step": float("nan"), "first_step": float("nan"), "setup": setup}
    steps = np.diff(np.concatenate([[0.0], times]))
    # The first step carries JAX's compilation; the median step ignores it.
    return {
        "total": float(times[-1]),
        "per_step": float(np.median(steps)),
        "first_step": float(steps[0]),
        "setup": setup,
    }
