"""``fit`` and ``make_problem``: the facade scripts call.

``make_problem`` checks what every fit shares and builds the
:class:`~inference.algorithm.Problem` an algorithm's ``init`` takes, with the algorithm's
validated options. ``fit`` is a short pipeline of named steps: settle what runs
(``_settings``), check the run controls (``_check_controls``), make the problem (``_make``),
start the algorithm (``Algorithm.init``), plan the run (``_plan``: the checkpoint header, the
validation, how the result is made), run the loop (``inference.loop``), then make the result
and warn if the run did not converge. Everything particular to an
algorithm is left to its own entry (``inference.registry``)."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import inspect
import os
import threading
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from inference import convergence, evaluation, streaming
from inference.algorithm import (
    Problem,
    check_length,
    default_num_steps,
    ignores,
    noise_bound,
    posterior_family,
    prepare_data,
    rule_start,
    state_fact,
)
from inference.algorithms.svi import enumerated_elbo
from inference.backends import get_backend
from inference.loop import (
    DEFAULT_ADVICE,
    Checkpointing,
    Length,
    final_result,
    nonfinite_advice,
    run,
)
from inference.persistence import checkpoint_header
from inference.persistence.checkpoint_guard import check_path, exclusive
from inference.registry import DEFAULT_ALGORITHM, get_algorithm, list_algorithms, supporting
from inference.result import FitResult
from inference.validation import EarlyStopping, Validation
from zoo import devices, get_model
from zoo.options import check_types, describe, did_you_mean
from zoo.spec import ModelSpecError


def model_options(spec) -> list[str]:
    """The options of a model: the parameters of its ``prepare``."""
    return [p for p in inspect.signature(spec.prepare).parameters if p != "data"]


def _algorithms_named(names: list[str]) -> str:
    """``algorithm 'svi'``, or ``algorithms 'cavi', 'em' and 'svi'``."""
    quoted = [repr(name) for name in names]
    if len(quoted) == 1:
        return f"algorithm {quoted[0]}"
    return f"algorithms {', '.join(quoted[:-1])} and {quoted[-1]}"


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
                    f"{name}= is an option of {_algorithms_named(takers)}; "
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


def _fit_keywords() -> list[str]:
    """The names ``fit`` itself takes (``num_steps``, ``tol``, ...), for suggestions."""
    return [name for name in inspect.signature(fit).parameters if name != "options"]


def _check_run_options(seed, num_steps, tol, checkpoint_every=100, callback=None) -> None:
    evaluation.check_seed(seed)
    if callback is not None and not callable(callback):
        raise TypeError(f"callback must be callable(step, state, info); got {callback!r}.")
    if isinstance(num_steps, bool) or not isinstance(num_steps, int | np.integer) or num_steps < 1:
        raise ValueError(f"num_steps must be an int in the range [1, inf); got {num_steps!r}.")
    check_tol(tol)
    if (
        isinstance(checkpoint_every, bool)
        or not isinstance(checkpoint_every, int | np.integer)
        or checkpoint_every < 1
    ):
        raise ValueError(
            f"checkpoint_every must be an int in the range [1, inf); got {checkpoint_every!r}."
        )


def check_tol(tol) -> None:
    """A stopping tolerance is None (the algorithm's default) or a finite float >= 0."""
    if tol is not None and not (
        isinstance(tol, int | float | np.number) and not isinstance(tol, bool) and 0 <= tol < np.inf
    ):
        raise ValueError(f"tol must be a float in the range [0, inf); got {tol!r}.")


def check_flag(name: str, value) -> None:
    """A yes-or-no argument is a bool: a string such as "False" would read as true."""
    if not isinstance(value, bool | np.bool_):
        raise TypeError(f"{name} must be True or False; got {type(value).__name__} {value!r}.")


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
        ``"svi"``, ``"svi-natural"``, ``"nuts"`` and any installed plugin's. Default ``"svi"``
        (the command line's ``zoo fit`` defaults to the model's closed-form updates, ``cavi``
        or ``em``, where it has them).
    backend : {"pyro", "numpyro"}
        Default ``"numpyro"``.
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
        Or the NumPy or torch dtype. Default: the model's preference (``spec.dtype``), else
        the algorithm's.
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
        larger ``num_steps`` on resume extends the run (minibatches, from memory, a file or a
        stream, are drawn by step), unless the run depends on ``num_steps`` (a temperature
        annealed over it): then the checkpoint is refused, as is a checkpoint of another model,
        data set, seed, option, starting values (``init`` arrays are compared by value),
        validation set-up (validation data added, removed or changed) or data-parallel group
        size.
    num_data : int, optional
        With a stream of minibatches: the size of the full data set (scales the data plate).
    callback : callable(step, state, info), optional
        Runs after each step (raise to stop).
    **options :
        The algorithm's own options, each declared, checked and described in one place, its
        ``Options`` record (``get_algorithm("svi").Options`` is ``SVIOptions``: ``guide``,
        ``lr``, ``num_particles``, ...; ``zoo algorithms`` lists them all), and the model's own
        (the parameters of its ``prepare``; for ``bayesian_gmm``: ``K``, ``weight_prior``,
        priors). An option that neither takes, or that the fit would ignore, is an error.

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
    check_flag("progress", progress)
    settings = _settings(model, data, algorithm, backend, num_steps, tol, options)
    stopping = EarlyStopping(validation_data, validate_every, patience)
    checkpointing = _check_controls(
        seed, settings, callback, Checkpointing(checkpoint, checkpoint_every, resume), stopping
    )
    made = _make(
        settings, data, device=device, seed=seed, init=init, dtype=dtype, num_data=num_data
    )
    state = settings.alg.init(made.problem, settings.options)
    plan = _plan(settings, made, state, checkpointing, stopping)
    # The process that writes the checkpoint holds a lock on it from resume to the last write.
    path = plan.checkpointing.path
    guard = exclusive(path) if path is not None and plan.lead else contextlib.nullcontext()
    results = dataclasses.replace(plan.results, setup=time.perf_counter() - started)
    with guard:
        state, history, converged = run(
            settings.alg,
            state,
            plan.length,
            progress=progress and plan.lead,
            checkpointing=plan.checkpointing,
            callback=callback,
            validation=plan.validation,
            results=results,
        )
    result = final_result(results, state, history, converged)
    result.timing["wall"] = time.perf_counter() - started
    alg = settings.alg
    result = _warn_unconverged(settings, result, rule_start(alg, state), noise_bound(alg, state))
    if state_fact(alg, state, "exact_objective"):
        _warn_below_start(settings, result)
    return result


def make_problem(
    model,
    data,
    algorithm: str = DEFAULT_ALGORITHM,
    backend: str = "numpyro",
    *,
    device: str = "cpu",
    seed: int = 0,
    num_steps: int | None = None,
    init=None,
    dtype: str | None = None,
    num_data: int | None = None,
    **options,
) -> tuple[Problem, Any]:
    """The :class:`~inference.Problem` and the algorithm's validated options that
    ``algorithm``'s ``init`` takes, made as :func:`fit` makes them; for running an algorithm's
    ``init`` and ``step`` yourself.

    Everything is checked as :func:`fit` checks it (the model, algorithm and backend, whether
    the model supports the algorithm, the data, the options, the seed), the model's declared
    defaults for the algorithm are applied (``ModelSpec.algorithm_defaults``), and the data are
    prepared and validated, so that a step from ``algorithm.init(problem, options)`` is the
    step a fit would take.

    Parameters
    ----------
    model : str or ModelSpec
        A registered model name (``zoo.list_models()``) or a spec.
    data : dict of str to array-like, or an iterable of minibatches
        As for :func:`fit`.
    algorithm : str
        A registered algorithm (``inference.list_algorithms()``).
    backend : {"pyro", "numpyro"}
    device : str
        ``"cpu"``, ``"cuda"`` or ``"cuda:N"``.
    seed : int
        Seeds every random choice of the run.
    num_steps : int, optional
        The step budget (a schedule may be spread over it; ``Problem.num_steps``). Default: the
        model's, else the algorithm's.
    init : optional
        The starting point, as for :func:`fit`.
    dtype : {"float32", "float64"}, optional
        Or the NumPy or torch dtype. Default: the model's preference (``spec.dtype``), else
        the algorithm's.
    num_data : int, optional
        With a stream of minibatches: the size of the full data set.
    **options :
        The algorithm's own options and the model's, as for :func:`fit`.

    Returns
    -------
    problem : Problem
        The model's spec, the validated data, the model's config, the backend, device, dtype,
        seed, starting point and step budget.
    options : the algorithm's ``Options``
        The algorithm's options, validated, with the model's declared defaults.

    Raises
    ------
    ValueError, TypeError
        As :func:`fit` raises them for bad data or options.

    See Also
    --------
    fit : Make the problem, run the algorithm in the shared loop, and return a result.

    Examples
    --------
    Two CAVI steps on the Bayesian mixture, taken by hand:

    >>> import numpy as np
    >>> import inference, zoo
    >>> data = zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(0), 100)
    >>> problem, options = inference.make_problem("bayesian_gmm", data, "cavi", "pyro", K=2)
    >>> problem.num_data, problem.dtype, problem.config.K
    (100, 'float64', 2)
    >>> cavi = inference.get_algorithm("cavi")
    >>> state = cavi.init(problem, options)
    >>> state, info = cavi.step(state)
    >>> state, info = cavi.step(state)
    >>> print(f"{info.objective / problem.num_data:.2f} nats per point")
    -5.08 nats per point

    They are the steps a fit takes:

    >>> res = inference.fit(
    ...     "bayesian_gmm", data, "cavi", "pyro", K=2, num_steps=2, tol=0, progress=False
    ... )
    >>> bool(res.history["objective"][-1] == info.objective)
    True

    The options are the algorithm's, validated:

    >>> problem, options = inference.make_problem("gmm", data, "svi", "pyro", K=2, lr=0.05)
    >>> type(options).__name__, options.lr
    ('SVIOptions', 0.05)
    >>> inference.make_problem("gmm", data, "svi", "pyro", K=2, lr=-1.0)
    Traceback (most recent call last):
    ...
    ValueError: lr must be a float in the range (0, inf); got -1.0.
    """
    settings = _settings(model, data, algorithm, backend, num_steps, None, options)
    _check_run_options(seed, settings.num_steps, settings.tol)
    made = _make(
        settings, data, device=device, seed=seed, init=init, dtype=dtype, num_data=num_data
    )
    return made.problem, settings.options


@dataclass(frozen=True)
class _Settings:
    """What a fit runs, settled from its arguments before any data are read: the model's spec,
    the algorithm, its validated options (the model's declared defaults included) and the
    backend; the model's options; every option the caller gave (the algorithm's and the
    model's: advice on a non-finite objective names extreme ones); the step budget and
    tolerance; and whether the data are held in memory."""

    spec: Any
    alg: Any
    back: Any
    options: Any
    model_options: dict
    given: dict
    num_steps: int
    tol: float | None
    out_of_core: bool


def _settings(model, data, algorithm, backend, num_steps, tol, options: dict) -> _Settings:
    """The first step of a fit: the model, algorithm and backend looked up, the options split
    between the algorithm and the model and checked, and the defaults the caller left out
    filled in."""
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
            + streaming.listed_stream_note(spec, data)
        )
    own, model_opts = split_options(alg, spec, options)
    given_opts = alg.options(own)
    for name in own:
        reason = ignores(alg, spec, back.NAME, given_opts, name)
        if reason:
            raise ValueError(reason)
    declared = declared_defaults(alg, spec, own, num_steps, tol)
    opts = alg.options({**declared["options"], **own})
    check_length(alg, opts, num_steps, tol)
    if num_steps is None:
        num_steps = declared["num_steps"] or default_num_steps(alg, opts)
    tol = declared["tol"] if tol is None else tol
    given = {**own, **model_opts}
    return _Settings(spec, alg, back, opts, model_opts, given, num_steps, tol, out_of_core)


def _check_controls(seed, settings: _Settings, callback, checkpointing, stopping) -> Checkpointing:
    """The run's controls checked before any work is done, so that no result is lost to a bad
    argument or checkpoint path; returns ``checkpointing`` with its path checked and its
    default ``every``."""
    path, every = checkpointing.path, checkpointing.every
    if every is not None and path is None:
        raise ValueError("checkpoint_every= needs checkpoint=PATH, the file to write.")
    every = 100 if every is None else every
    _check_run_options(seed, settings.num_steps, settings.tol, every, callback)
    check_flag("resume", checkpointing.resume)
    wants_validation = stopping.every is not None or stopping.patience is not None
    if wants_validation and stopping.validation_data is None:
        raise ValueError("validate_every= and patience= need validation_data= to validate on.")
    if checkpointing.resume and path is None:
        raise ValueError("resume=True needs checkpoint=PATH, the file to resume from.")
    if path is not None:
        path = check_path(path, resume=checkpointing.resume)
    return dataclasses.replace(checkpointing, path=path, every=int(every))


@dataclass(frozen=True)
class _Made:
    """A problem, with what a fit needs to know of how it was made: the data keys the algorithm
    drew afresh from those given (``redrawn``: a checkpoint fingerprints them as given) and the
    data a result refers to."""

    problem: Problem
    redrawn: list
    result_data: Any


def _make(settings: _Settings, data, *, device, seed, init, dtype, num_data) -> _Made:
    """The problem: the data prepared by the algorithm (dynamic binarization), then validated,
    or made a source of minibatches when they are not held in memory; the model's config from
    them."""
    spec, alg, back, opts = settings.spec, settings.alg, settings.back, settings.options
    if num_data is not None and not settings.out_of_core:
        raise ValueError("num_data= is for streams of minibatches; these data are in memory.")
    given = data
    data = prepare_data(alg, spec, data, opts, int(seed))
    # What the algorithm drew afresh (dynamic binarization) is fingerprinted as given.
    redrawn = [] if data is given else [k for k in data if data[k] is not given.get(k)]
    source = kept = None
    if settings.out_of_core:
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
            num_steps=int(settings.num_steps),
        )
        kept = data if isinstance(data, dict) else None  # what the result refers to
        data = source.init_sample()
    else:
        data = spec.validate_data(data)
    problem = Problem(
        spec=spec,
        data=data,
        config=_prepared(spec, data, settings.model_options, source),
        backend=back,
        device=back.resolve_device(device),
        dtype=devices.dtype_name(dtype or spec.dtype or alg.traits.dtype),
        seed=int(seed),
        source=source,
        num_steps=int(settings.num_steps),
        init=init,
        given=given,
    )
    if source is not None:  # later minibatches are checked against the config's bounds too
        source.config = problem.config
    return _Made(problem, redrawn, kept if settings.out_of_core else data)


def _prepared(spec, data, model_options, source):
    """The model's config; with data not in memory, made from the first minibatch, which an
    error then names (a K above its rows is not above the data set's)."""
    try:
        return spec.prepare(data, **model_options)
    except ValueError as err:
        if source is None:
            raise
        rows = len(next(iter(data.values())))
        raise ValueError(
            f"{err} (With data not in memory, the model's options are checked against the first "
            f"minibatch, of {rows} rows.)"
        ) from err


@dataclass(frozen=True)
class ResultMaker:
    """How a fit makes a :class:`FitResult` from a state and its history; everything else is
    fixed before the first step. Called as ``results(state, history, converged)``: by the loop
    for the result a :class:`~inference.NonFiniteObjectiveError` holds, by ``fit`` for the last
    one, and by the validation to score held-out data.

    ``options`` is the run's options record (``checkpoint_header.options_record``); ``data``
    what the result refers to; ``advice`` what a result that is not finite tells to try. With a
    ``validation``, a result holds the parameters of its best evaluation so far
    (``best_step``), read when the result is made. ``setup``: the seconds from the call to the
    first step, for the result's timing."""

    alg: Any
    problem: Problem
    guide: str | None
    options: dict
    data: Any
    advice: str = DEFAULT_ADVICE
    validation: Validation | None = None
    setup: float | None = None

    def __call__(self, state, history, converged) -> FitResult:
        alg, problem, validation = self.alg, self.problem, self.validation
        best = validation is not None and validation.best_params is not None
        raw = validation.best_params if best else alg.get_params(state)
        draws, sample_stats = state_fact(alg, state, "posterior_draws") or (None, None)
        result = FitResult(
            model=problem.spec.name,
            algorithm=alg.name,
            backend=problem.backend.NAME,
            guide=self.guide,
            params=_summary(alg, problem, raw, state, draws),
            raw_params=raw,
            config=problem.config,
            history={k: np.asarray(v) for k, v in history.items()},
            converged=converged,
            timing=_timing(history, self.setup),
            num_data=problem.num_data,
            seed=problem.seed,
            options=self.options,
            data=self.data,
            best_step=validation.best_step if best else None,
            draws=draws,
            sample_stats=sample_stats,
            spec=problem.spec,
            family=posterior_family(problem.spec, alg.traits, self.guide),
        )
        older = getattr(alg, "posterior_family", None)  # an algorithm of the older contract
        if callable(older):
            result.family = older(result)
        return result


def _summary(alg, problem: Problem, raw: dict, state, draws) -> dict:
    """The user-facing parameters of a result (``FitResult.params``): the model's summary of a
    sampler's draws or of the raw parameters; an algorithm of the older contract with its own
    ``summarize`` is asked."""
    spec, config = problem.spec, problem.config
    older = getattr(alg, "summarize", None)
    if callable(older):
        return older(spec, raw, config, state)
    if draws is not None:
        return _summary_of_draws(spec, config, draws)
    return spec.summarize(raw, config) if spec.summarize else dict(raw)


def _summary_of_draws(spec, config, draws: dict) -> dict:
    """A sampler's parameters: the model's ``summarize_draws`` of its draws (pooled over
    chains), by ``summarize``'s names; without it, the draws' posterior means by
    ``sample_posterior``'s names."""
    if not draws:
        return {}
    pooled = {k: v.reshape(-1, *v.shape[2:]) for k, v in draws.items()}
    sampled = spec.draws_from_sites(pooled, config)
    if spec.summarize_draws is not None:
        return spec.summarize_draws(sampled, config)
    return {k: v.mean(axis=0) for k, v in sampled.items()}


@dataclass(frozen=True)
class _Plan:
    """How the run goes once its state is made: its length, its checkpointing (with the header
    that identifies it), its validation, how its result is made, and whether this process leads
    (a data-parallel group: the first process writes checkpoints and shows progress)."""

    length: Length
    checkpointing: Checkpointing
    validation: Validation | None
    results: ResultMaker
    lead: bool


def _plan(settings: _Settings, made: _Made, state, checkpointing, stopping) -> _Plan:
    """The run planned from its first state: a checkpoint refused for a state that cannot be
    resumed exactly, the checkpoint header, the result maker and the validation."""
    alg, problem = settings.alg, made.problem
    unsaveable = state_fact(alg, state, "unsaveable")
    if checkpointing.path is not None and unsaveable:
        raise ValueError(unsaveable)
    guide = state_fact(alg, state, "guide")
    record = checkpoint_header.options_record(alg, settings.options, state, problem)
    lead = state_fact(alg, state, "lead")
    header = checkpoint_header.header(
        alg, state, problem, record, guide=guide, redrawn=made.redrawn,
        checkpointed=checkpointing.path is not None,
    )  # fmt: skip
    # What a non-finite objective, parameter or summary is told to try, the options given first.
    advice = nonfinite_advice(alg, settings.spec, settings.given)
    results = ResultMaker(alg, problem, guide, record, made.result_data, advice)
    validation = None
    if stopping.validation_data is not None:
        validation, held_out = _validation(settings, problem, state, results, stopping)
        setup = checkpoint_header.validation_setup(held_out, validation.every, stopping.patience)
        header = {**header, "validation_setup": setup}
        results = dataclasses.replace(results, validation=validation)
    length = Length(int(settings.num_steps), settings.tol, problem.num_data)
    stream = problem.source if isinstance(problem.source, streaming.StreamSource) else None
    checkpointing = dataclasses.replace(checkpointing, header=header, write=lead, stream=stream)
    return _Plan(length, checkpointing, validation, results, lead)


def declared_defaults(alg, spec, given: dict, num_steps, tol) -> dict:
    """What a fit of ``spec`` by ``alg`` uses where the caller gave nothing: the defaults the
    model declares for the algorithm (``ModelSpec.algorithm_defaults``: a network wants a
    smaller learning rate than a mixture), else the algorithm's own. Returns ``{"options":
    the declared options the caller did not give, "num_steps": a declared step budget or None,
    "tol": the tolerance}``; what the caller gave is never replaced."""
    check_algorithm_defaults(spec)
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


def check_algorithm_defaults(spec) -> None:
    """A :class:`~zoo.ModelSpecError` for ``spec.algorithm_defaults`` that no fit would read as
    meant: a key that is not a registered algorithm (a misspelt one is otherwise never read),
    or defaults that are not a mapping of option names to values. Checked at every fit of the
    model, as an algorithm may be registered after the model."""
    declared = spec.algorithm_defaults
    example = '{"svi": {"lr": 1e-3, "num_steps": 10_000}}'
    if not isinstance(declared, Mapping):
        raise ModelSpecError(
            f"Model {spec.name!r}: algorithm_defaults must map algorithm names to their "
            f"defaults, e.g. {example}; got {describe(declared)}."
        )
    algorithms = list_algorithms()
    for name, defaults in declared.items():
        if name not in algorithms:
            raise ModelSpecError(
                f"Model {spec.name!r} declares algorithm_defaults for {name!r}, which is not a "
                f"registered algorithm; the registered algorithms are {algorithms}."
                + did_you_mean(str(name), algorithms)
                + " Correct the key in the model's spec, or register the algorithm first."
            )
        if not isinstance(defaults, Mapping):
            raise ModelSpecError(
                f"Model {spec.name!r}: algorithm_defaults[{name!r}] must map option names to "
                f"values (e.g. {{'lr': 1e-3, 'num_steps': 10_000}}); got {describe(defaults)}."
            )


def _warn_unconverged(settings: _Settings, result, start: int = 0, bounded: bool = False):
    """A :class:`~inference.convergence.ConvergenceWarning` for a run that used all of its
    ``num_steps`` without meeting its stopping rule (none for ``tol`` None or 0: a fixed number
    of steps was asked for), and for a sampler whose draws fail their diagnostics. Returns the
    result, a sampler's ``converged`` saying whether its draws passed them (a sampler has no
    stopping rule). ``start`` is the step from which the rule counted, and ``bounded`` whether
    it asked for low noise (``inference.algorithm.noise_bound``)."""
    alg, num_steps, tol = settings.alg, settings.num_steps, settings.tol
    run_name = _run_name(settings, result)
    if alg.traits.estimate == "draws":
        diagnose = getattr(alg, "diagnose", convergence.draw_problems)  # older: the algorithm's
        problems = diagnose(result)
        if problems:
            warnings.warn(
                f"{run_name}: the chains have not converged: {'; '.join(problems)}. Run more "
                "warm-up and draws (num_warmup, num_draws), more chains, or raise "
                "target_accept_prob against divergences.",
                convergence.ConvergenceWarning,
                stacklevel=4,
            )
        return dataclasses.replace(result, converged=not problems)
    ran_out = result.num_steps >= num_steps
    if result.converged or not tol or not ran_out:
        return result
    stochastic = alg.traits.stochastic
    advice = alg.traits.slow_advice or (
        "Raise num_steps, or lower the learning rate (lr), or raise tol."
        if stochastic
        else "Raise num_steps or tol."
    )
    window = alg.traits.window if stochastic else None
    noise = None
    if bounded:  # the rule asked for low noise: say where the noise hid the verdict
        objectives = result.history["objective"]
        noise = convergence.hidden_by_noise(objectives, tol, result.num_data, window)
    message = convergence.unconverged_message(
        run_name, result.num_steps, tol, advice, window, start, noise
    )
    warnings.warn(message, convergence.ConvergenceWarning, stacklevel=4)
    return result


def _warn_below_start(settings: _Settings, result) -> None:
    """A :class:`~inference.convergence.ConvergenceWarning` for a run whose exact objective met
    its stopping rule below its first value (:func:`~inference.convergence.fell_below_start`):
    it says it converged, to parameters worse than its start. A run stopped early on held-out
    data returns its best step's parameters, not its last, and is not judged here."""
    if not result.converged or result.best_step is not None:
        return
    objectives = result.history["objective"]
    drop = convergence.fell_below_start(objectives, settings.tol, result.num_data)
    if drop is not None:
        message = convergence.below_start_message(
            _run_name(settings, result), objectives, result.num_data, drop
        )
        warnings.warn(message, convergence.ConvergenceWarning, stacklevel=4)


def _run_name(settings: _Settings, result) -> str:
    """The run as a warning names it: algorithm, model, backend and guide."""
    return f"{settings.alg.name} on {settings.spec.name!r} ({settings.back.NAME}" + (
        f", guide {result.guide!r})" if result.guide else ")"
    )


def _validation(settings: _Settings, problem, state, results, stopping) -> tuple:
    """The held-out data checked and scored once, and the :class:`Validation` that scores them
    every so many steps; returns ``(validation, the held-out data as validated)``. A state is
    scored from its own parameters (never the best so far) under the guide ``results`` names,
    without making a result of it."""
    spec, alg, every = settings.spec, settings.alg, stopping.every
    if every is None:  # an epoch of minibatches, else 100 steps
        batch_size = getattr(settings.options, "batch_size", None)
        every = problem.num_data // batch_size if batch_size else 100
    held_out = spec.validate_data(stopping.validation_data, "validation_data")
    spec.check_against_fit(held_out, problem.config, "validation_data")

    def fitted_at(state) -> evaluation.Fitted:
        fit = evaluation.Fitted(
            spec, problem.backend.NAME, problem.config, problem.dtype, results.guide,
            alg.get_params(state),
        )  # fmt: skip
        evaluation.check_guide(fit, alg.name, "elbo")
        return fit

    def validation_elbo(state, rows=None) -> float:
        """Per-point ELBO of the held-out data; one draw per point, the same each time. A guide
        that sums its discrete latents out (an enumerated one) is scored as training scores it,
        summed out: a draw of them would flip as the guide changes, and early stopping would
        act on that noise."""
        scored = held_out if rows is None else {k: v[:rows] for k, v in held_out.items()}
        fit = fitted_at(state)
        if spec.guide_kind(fit.guide, fit.backend).enumerated:
            total = enumerated_elbo(fit, scored, num_particles=1, seed=0)
            return total / len(next(iter(scored.values())))
        return float(np.mean(evaluation.importance_statistics(fit, scored, 1)[0]))

    try:  # one row now, rather than a failure at the first evaluation, steps later
        validation_elbo(state, rows=1)
        fit = fitted_at(state)
        if spec.guide_kind(fit.guide, fit.backend).enumerated:
            # Scored above without it: importance_statistics refuses a latent outside the data
            # plate, where the enumerated ELBO would not be a sum per point.
            evaluation.importance_statistics(fit, {k: v[:1] for k, v in held_out.items()}, 1)
    except (ValueError, KeyError, TypeError) as err:
        raise ValueError(
            f"validation_data cannot be scored for model {spec.name!r} fitted by "
            f"{alg.name!r}: validation is the per-datum ELBO of a guide over latents local "
            f"to each data point. ({type(err).__name__}: {err})"
        ) from err
    validation = Validation(validation_elbo, every, stopping.patience)
    if validation.every > settings.num_steps:
        warnings.warn(
            f"validate_every={validation.every} exceeds num_steps={settings.num_steps}: the "
            "validation data will never be scored.",
            stacklevel=4,  # past _validation, _plan and fit: the frame that called fit's body
        )
    return validation, held_out


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
