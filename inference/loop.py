"""The one loop every algorithm runs in: tolerance, progress, checkpoints, NaN guard, timing."""

from __future__ import annotations

import contextlib
import contextvars
import math
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from tqdm.auto import tqdm

from inference import convergence
from inference.algorithm import Algorithm, noise_bound, progress_text, rule_start, state_fact
from inference.backends import tree_codec
from inference.persistence import checkpoint, checkpoint_header, saved_fit, state_tree
from inference.streaming import DataError

RUNNING_MEAN_STEPS = 100

#: What the progress bar of the run under way is called (``compare`` names each of its runs).
_bar_label = contextvars.ContextVar("bar_label", default=None)


@contextlib.contextmanager
def labelled_bar(label: str):
    """The runs inside show ``label`` on their progress bars (``"svi numpyro seed 0"``)."""
    token = _bar_label.set(label)
    try:
        yield
    finally:
        _bar_label.reset(token)


def progress_bar(total: int, show: bool, *, desc: str = "", initial: int = 0):
    """A tqdm bar on stderr, shown when ``show`` and stderr is a terminal (or a notebook):
    tqdm's ``disable=None`` keeps logs and pipes free of carriage-return noise."""
    return tqdm(
        total=total,
        initial=initial,
        desc=_bar_label.get() or desc,
        disable=None if show else True,
        **bar_size(sys.stderr),
    )


def bar_size(stream) -> dict:
    """tqdm's own measure of the terminal (no keywords), unless ``stream`` is a terminal that
    reports no size, as a pseudo-terminal made without one does (``script``, some CI runners):
    tqdm would then draw an empty bar and hide it below row 0, so 100 columns and 24 rows."""
    try:
        columns, rows = os.get_terminal_size(stream.fileno())
    except (AttributeError, OSError, ValueError):  # not a terminal, or no file descriptor
        return {}
    return {} if columns > 0 and rows > 0 else {"ncols": columns or 100, "nrows": rows or 24}


def count_first_step(bar, done: int) -> None:
    """Count the first step of a run (``done`` steps in all) and start the bar's clock after
    it: that step includes one-off work (JAX compilation), and a rate that included it would
    estimate every step as long ("45:05" left for a minute's run). Until the next step is done
    the bar shows no estimate."""
    if bar.disable:
        bar.n = done
        return
    started = bar.start_t
    bar.reset()  # a fresh smoothed rate (tqdm's public reset)
    bar.start_t = started  # the elapsed time still counts the first step
    bar.n = bar.last_print_n = bar.initial = done  # the rate counts the steps after this one
    bar.refresh()


class NonFiniteObjectiveError(FloatingPointError):
    """The objective became NaN or inf; ``.result`` holds the last good parameters.

    The message names the step, the parameters that are not finite, and what to try (the
    algorithm's advice, such as a lower learning rate, then the model's, such as a larger
    ``reg_covar``). A ``FloatingPointError``.

    Parameters
    ----------
    message : str
        What failed, which parameters are kept, and what to try.
    result : FitResult, optional
        The result to keep.

    Attributes
    ----------
    result : FitResult or None
        The result of the last step whose parameters are finite; else the parameters of the
        failing step as they are, or None when no result could be made.

    Examples
    --------
    EM without covariance regularisation on data with repeated points: a component collapses
    onto one point and its covariance becomes singular.

    >>> import numpy as np
    >>> import inference
    >>> x = np.repeat([[0.0, 0.0], [1.0, 1.0]], 3, axis=0)
    >>> try:
    ...     inference.fit("gmm", {"x": x}, "em", "pyro", K=2, reg_covar=0.0, progress=False)
    ... except inference.NonFiniteObjectiveError as err:
    ...     print(str(err).split(";")[0])
    ...     print(type(err.result).__name__)
    The objective became nan at step 1
    FitResult
    """

    def __init__(self, message, result=None):
        super().__init__(message)
        self.result = result


@contextlib.contextmanager
def _deferred_interrupt():
    """Yields a list that a first Ctrl-C appends to instead of raising; the loop raises it once
    the step and its bookkeeping are done (a Pyro step updates its parameters in place, and one
    interrupted half way would be checkpointed half done). A second Ctrl-C raises at once.
    Installed once around the loop, not per step."""
    caught = []
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGINT) is not signal.default_int_handler
    ):  # not ours to change (another thread, or a handler the caller installed)
        yield caught
        return

    def first_interrupt(signum, frame):
        caught.append(signum)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        sys.stderr.write("\nInterrupted: stopping after this step (Ctrl-C again to stop now).\n")

    signal.signal(signal.SIGINT, first_interrupt)
    try:
        yield caught
    finally:
        signal.signal(signal.SIGINT, signal.default_int_handler)


#: The advice on a non-finite objective where the model has none of its own.
#: A model that declares no advice of its own (``ModelSpec.numerical_advice``): a new model's
#: guide whose draws leave a latent's support (a Normal for a positive rate) gives a NaN at
#: any learning rate.
DEFAULT_ADVICE = (
    "Check the data scale, or use float64; and that each guide distribution's support is its "
    "latent's (a Normal guide for a positive latent gives NaN at any learning rate)."
)

#: What a step raises when it meets parameters that are no longer finite: a distribution's
#: check of its parameters (ValueError), a factorisation of a matrix of infinities (numpy's
#: LinAlgError is a ValueError, torch's a RuntimeError), an overflow.
NUMERICAL_ERRORS = (ValueError, ArithmeticError, RuntimeError)


def _draw_not_factorised(alg, err) -> bool:
    """Whether ``err`` is a failed matrix factorisation (numpy's or torch's ``LinAlgError``) in
    a step of a stochastic algorithm. A learning rate too large for the data takes a guide to
    parameters whose draws rounding leaves not positive definite (a Wishart draw whose Cholesky
    factor fails): on one backend that is an error of the factorisation, on another a NaN
    objective, and both mean what a non-finite objective means."""
    linalg = any(kind.__name__.endswith("LinAlgError") for kind in type(err).__mro__)
    return linalg and bool(alg.traits.stochastic)


def nonfinite_parameters(alg, state) -> list[str]:
    """The names of the parameters of ``state`` that hold NaN or inf, or that lie outside
    their constraint (the state's ``outside_support``: a positive value rounded to zero); empty when all are good, or when they cannot be read."""
    try:
        params = alg.get_params(state)
    except Exception:
        return []
    return sorted({*state_fact(alg, state, "outside_support"), *_nonfinite_names(params)})


def _nonfinite_names(params: dict) -> list[str]:
    """The names of the float arrays of ``params`` that hold NaN or inf."""
    bad = []
    for name, value in params.items():
        value = np.asarray(value)
        if value.dtype.kind in "fc" and not np.isfinite(value).all():
            bad.append(name)
    return bad


def final_result(results, state, history, converged):
    """The fit's result from its last state, made by ``results``
    (``inference.api.ResultMaker``), or :class:`NonFiniteObjectiveError` where the parameters
    cannot be summarised (a singular matrix to invert) or their summary is not finite (a
    covariance that overflows though its Cholesky factor does not); the error says what
    ``results.advice`` tells to try."""
    last = history["step"][-1] if history["step"] else 0
    try:
        result = results(state, history, converged)
    except (np.linalg.LinAlgError, ArithmeticError) as err:
        raise NonFiniteObjectiveError(
            f"The parameters of step {last} cannot be summarised ({type(err).__name__}: "
            f"{first_line(err)}); no parameters are kept. {results.advice}"
        ) from err
    bad = _nonfinite_names(result.params)
    if bad:
        raise NonFiniteObjectiveError(
            f"The summary of the parameters of step {last} is not finite ({', '.join(bad)}); "
            f"error.result holds it as it is. {results.advice}",
            result,
        )
    return result


def _without_last_step(history: dict) -> dict:
    return {k: v[:-1] if k in ("step", "objective", "time") else v for k, v in history.items()}


def _nonfinite_error(alg, state, earlier, step, history, results, what):
    """A :class:`NonFiniteObjectiveError` for step ``step + 1``, whose ``result`` (made by
    ``results``, when given) holds the newest parameters that are all finite: those of ``state``
    (step ``step``), else those of ``earlier`` (step ``step - 1``; a backend that updates
    parameters in place has none to give back), else those of ``state`` as they are."""
    bad = nonfinite_parameters(alg, state)
    if not bad:
        candidate, at, past = state, step, history
    elif earlier is not None and not nonfinite_parameters(alg, earlier):
        candidate, at, past = earlier, step - 1, _without_last_step(history)
    else:
        candidate = None
    result = kept = None
    if candidate is not None and results is not None:
        try:
            result, kept = results(candidate, past, False), at
        except NUMERICAL_ERRORS:
            pass
    if result is None and results is not None:
        try:  # no finite parameters: those of the last step, as they are
            with np.errstate(all="ignore"):  # summarising infinities: no warnings besides
                result = results(state, history, False)
        except NUMERICAL_ERRORS:
            result = None
    cause = f"; the parameters of step {step} are not finite or out of range ({', '.join(bad)})"
    cause = cause if bad else ""
    if kept is not None:
        keep = f"the parameters of step {kept} are kept (error.result)"
    elif result is not None:
        keep = f"error.result holds the parameters of step {step} as they are"
    else:
        keep = "no parameters are kept"
    advice = DEFAULT_ADVICE if results is None else results.advice
    return NonFiniteObjectiveError(f"{what}{cause}; {keep}. {advice}", result)


#: Magnitudes of a float option beyond which it is named as the likely cause of a non-finite
#: objective. Products of two such numbers, or of one and a reciprocal, leave float32's range
#: (about 1e-38..3e38) and the squares of them float64's precision; the zoo's options (priors,
#: temperatures, learning rates, regularisation) are sensible well inside it.
EXTREME_BELOW, EXTREME_ABOVE = 1e-8, 1e8


def extreme_options(options: dict) -> list[str]:
    """``name=value`` for each option given whose floats include a non-zero magnitude outside
    ``EXTREME_BELOW..EXTREME_ABOVE`` (ints, bools and strings are never extreme: sizes, flags,
    names)."""
    named = []
    for name, value in options.items():
        try:
            numbers = np.asarray(value, dtype=object).ravel()
        except (TypeError, ValueError):
            continue
        floats = np.array(
            [v for v in numbers if isinstance(v, float | np.floating)], dtype=np.float64
        )
        size = np.abs(floats[floats != 0])
        if np.any(~np.isfinite(size) | (size < EXTREME_BELOW) | (size > EXTREME_ABOVE)):
            named.append(f"{name}={value!r}")
    return named


def nonfinite_advice(alg, spec, given: dict | None = None) -> str:
    """What to try when a fit's objective turns non-finite: first the options the user
    ``given`` whose values are extreme (the likely cause, which no step size cures), then the
    algorithm's advice (a step size), then the model's (a singular covariance: raise
    reg_covar), or a default."""
    extreme = extreme_options(given or {})
    cause = (
        f"The option(s) {', '.join(extreme)} have extreme values (a magnitude outside "
        f"{EXTREME_BELOW:g}..{EXTREME_ABOVE:g}), the likely cause: try values nearer 1."
        if extreme
        else ""
    )
    advice = (cause, alg.traits.advice, spec.numerical_advice or DEFAULT_ADVICE)
    return " ".join(a for a in advice if a)


def first_line(err: BaseException, limit: int = 200) -> str:
    """The first line of ``err``'s message, cut to ``limit`` characters."""
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _saves_itself(alg, state) -> bool:
    """Whether an algorithm saves and loads its states through hooks of its own (a plugin's
    ``save_state`` and ``load_state``, or the older contract's ``state_dict``), rather than
    through the one path every state that names its ``saved_fields`` takes
    (``inference.persistence.state_tree``)."""
    own = getattr(type(alg), "save_state", None) is not Algorithm.save_state
    older = callable(getattr(alg, "state_dict", None))
    return own or older or not state_tree.is_value(state)


def _save(path, header, alg, state, history, validation=None):
    if _saves_itself(alg, state):
        skeleton, arrays = alg.save_state(state)
    else:
        skeleton, arrays = state_tree.save(state)
    arrays.update({f"history/{k}": np.asarray(v) for k, v in history.items()})
    extra = {}
    if validation is not None:
        extra["validation"], best = validation.state_dict()
        arrays.update(best)
    checkpoint.save(path, {**header, **extra, "kind": "checkpoint", "state": skeleton}, arrays)


def _check_arrays(path, fresh, saved) -> None:
    """For an algorithm that saves its states itself: every array its hook saves of this run's
    state is in the checkpoint with its dtype and shape, so that a damaged or foreign file is
    refused here, not steps later far from the cause."""
    expected = tree_codec.leaves(*fresh)
    if expected is None:  # a layout only the algorithm's own load_state can read
        return
    found = tree_codec.leaves(*saved, partial=True)
    for place, like in expected.items():
        if place not in found:
            raise checkpoint.CheckpointError(
                f"Checkpoint {path!r} lacks the state's array {place!r}."
            )
        got = found[place]
        if got.dtype != like.dtype or got.shape != like.shape:
            raise checkpoint.CheckpointError(
                f"Checkpoint {path!r} holds the state's array {place!r} with shape "
                f"{got.shape} and dtype {got.dtype}; this run's has shape {like.shape} and "
                f"dtype {like.dtype}."
            )


#: What a validation set-up is compared as when a file written before the set-up was recorded
#: shows that the run validated, but not on what.
UNRECORDED_VALIDATION = "validation data (not recorded)"


#: The header's revision numbers (None: the first), and what another revision of each meant: a
#: checkpoint's arrays are not what this version would read in them, so the file is refused.
_REVISIONS = {
    "guide_coordinates": lambda header: (
        f"whose guide for {header['model']!r} held its parameters in other coordinates"
    ),
    "state_layout": lambda header: (
        f"which saved the state of {header['algorithm']!r} in another layout"
    ),
}


def _meant_by_older_file(key, saved, header):
    """The value of ``key`` that a checkpoint written before ``key`` was recorded can only have
    meant. Where the file cannot tell (it validated, or started from arrays, or ran in a
    data-parallel group, without recording on what), this run's value: such a file resumes as
    it did when it was written."""
    options = saved.get("options", {})
    if key == "init":  # recorded among the options, arrays only as "array"
        return header.get(key) if options.get("init") == "array" else options.get("init")
    if key == "guide_coordinates":  # the first revision, for a run with a guide (SVI)
        return None if saved.get("guide") is None else 1
    if key == "processes":  # one, unless the run was data-parallel
        return header.get(key) if options.get("data_parallel") else 1
    if key == "validation_setup":
        # The validation's state ("validation") is saved whenever a run validates: without it,
        # the run had no validation data.
        if "validation" not in saved:
            return None
        return header.get(key) if header.get(key) is not None else UNRECORDED_VALIDATION
    return None


def _restore_tree(path, fresh, skeleton, arrays, step: int):
    """``fresh`` (the state ``init`` made) with the checkpoint's saved fields put back; the
    checkpoint is at ``step``."""
    try:
        tree = state_tree.read(skeleton, arrays, fresh)
    except checkpoint.CheckpointError as err:
        raise checkpoint.CheckpointError(f"Checkpoint {path!r} cannot be resumed: {err}") from err
    except ValueError as err:  # a state the zoo never writes: the file was damaged or edited
        raise checkpoint.CheckpointError(f"Checkpoint {path!r} is damaged: {err}.") from err
    state_tree.check(path, fresh, tree, step)
    return state_tree.restore(fresh, tree)


#: What every checkpoint's history holds, one entry a step.
_HISTORY = ("step", "objective", "time")


def _check_run_record(path, saved: dict, arrays: dict) -> None:
    """The checkpoint's record of its run (the step it reached, why it stopped, its options and
    history) is of the types and lengths a run writes: a damaged or crafted file is refused
    here, rather than failing steps later or resuming from a step its history does not hold."""

    def refuse(what):
        raise checkpoint.CheckpointError(f"Checkpoint {path!r} is damaged: {what}.")

    step = saved.get("step")
    if not isinstance(step, int) or isinstance(step, bool) or step < 1:
        refuse(f"its step is {step!r}, not a number of steps taken")
    if saved.get("stopped") not in (None, "converged", "early_stopping"):
        refuse(f"it says it stopped for {saved.get('stopped')!r}")
    tol = saved.get("tol")
    if tol is not None and (isinstance(tol, bool) or not isinstance(tol, int | float)):
        refuse(f"its tol is {tol!r}")
    if not isinstance(saved.get("options", {}), dict):
        refuse("its options are not a mapping of names to values")
    history = {k[len("history/") :]: v for k, v in arrays.items() if k.startswith("history/")}
    missing = [k for k in _HISTORY if k not in history]
    if missing:
        refuse(f"its history lacks {missing}")
    saved_fit.check_history(path, history)
    steps = history["step"]
    if len(steps) != step or steps[-1] != step:
        refuse(f"it is at step {step}, and its history holds {len(steps)} step(s)")


def restore(path, header, alg, state, validation=None, stream=None):
    """Load a checkpoint written for the same run; returns (state, history, step, stopped), with
    ``stopped`` "converged" or "early_stopping" for a run that ended before its last step. A
    ``stream`` of minibatches is told what the checkpointed run read (older files: nothing), to
    refuse other minibatches as it skips them."""
    saved, arrays = checkpoint.load(path)
    if saved.get("kind") != "checkpoint":
        what = "a saved fit" if saved.get("kind") == "fit_result" else repr(saved.get("kind"))
        raise checkpoint.CheckpointError(f"{path!r} is {what}, not a checkpoint to resume.")
    _check_run_record(path, saved, arrays)
    # init=None and the start it stands for are one start (older files: None as written).
    saved = checkpoint_header.with_default_init(saved, header.get("default_init"))
    header = checkpoint_header.with_default_init(header, header.get("default_init"))
    if "num_steps" not in header.get("options", {}):  # an extendable run (older files record it)
        saved["options"] = {k: v for k, v in saved.get("options", {}).items() if k != "num_steps"}
    for key in (
        "model",
        "algorithm",
        "backend",
        "guide",
        "guide_coordinates",
        "seed",
        "data_fingerprint",
        "config_fingerprint",
        "options",
        "state_layout",  # after the options, on which it depends (a learning rate in stages)
        "init",  # after the options, which name an init added or removed
        "processes",
        "validation_setup",
    ):
        there = saved[key] if key in saved else _meant_by_older_file(key, saved, header)
        if key in _REVISIONS and there != header.get(key):
            raise checkpoint.CheckpointError(
                f"Checkpoint {path!r} was written by another version of the zoo, "
                f"{_REVISIONS[key](header)} (revision {there or 1}, now {header.get(key) or 1}); "
                "it cannot be resumed. Rerun the fit without resume=True, or with a new "
                "checkpoint path."
            )
        if there != header.get(key):
            what, there, here = key, there, header.get(key)
            if key == "config_fingerprint" and "config" in saved:  # name the fields
                what, there, here = "model config", saved["config"], header.get("config")
            raise checkpoint.CheckpointError(
                f"Checkpoint {path!r} was written by another run; its {what} "
                f"{'do' if what == 'options' else 'does'} not match this run's: "
                f"{checkpoint_header.differences(there, here)}."
            )
    history = {
        k[len("history/") :]: arrays.pop(k).tolist()
        for k in list(arrays)
        if k.startswith("history/")
    }
    if validation is not None and "validation" in saved:
        validation.load_state_dict(saved["validation"], arrays)
    if stream is not None and "stream_read" in saved:
        stream.expect_read(saved["stream_read"], path)
    try:
        if _saves_itself(alg, state):
            _check_arrays(path, alg.save_state(state), (saved["state"], arrays))
            state = alg.load_state(state, saved["state"], arrays)
        else:
            state = _restore_tree(path, state, saved["state"], arrays, saved["step"])
    except checkpoint.CheckpointError:
        raise
    except (KeyError, ValueError) as err:
        raise checkpoint.CheckpointError(
            f"Checkpoint {path!r} does not fit this run: {err}"
        ) from err
    stopped = saved.get("stopped")
    if stopped == "converged" and not (
        header.get("tol") is not None and header["tol"] >= saved.get("tol", math.inf)
    ):  # asked for a tighter tolerance (or none): the run goes on
        stopped = None
    return state, history, int(saved["step"]), stopped


@dataclass(frozen=True)
class Length:
    """How long a run goes: at most ``num_steps`` steps, fewer once the algorithm's stopping rule
    is met with ``tol`` nats per data point (``inference.convergence``; None: never), the
    objective being a sum over ``num_data`` data points (progress shows it per point too)."""

    num_steps: int
    tol: float | None
    num_data: int


@dataclass(frozen=True)
class Checkpointing:
    """Where a run writes its checkpoint (``path``; None: nowhere), every how many steps
    (``every``; the last step, an interrupt and an early stop are always written), and whether
    it continues from the checkpoint (``resume``). ``header`` identifies the run
    (``inference.persistence.checkpoint_header``): a resume refuses a checkpoint whose header differs. With
    ``write=False`` (the other processes of a data-parallel group) the checkpoint is read on
    resume but never written. ``stream`` (``inference.streaming.StreamSource``) is the stream of
    minibatches of a stream fit: a checkpoint records a digest of those read, and a resume
    refuses a stream that gives others.

    ``fit`` builds one from its ``checkpoint``, ``checkpoint_every`` and ``resume`` as given
    (``every`` None until it is checked), then adds the header once the run is planned."""

    path: str | None = None
    every: int | None = 100
    resume: bool = False
    header: Mapping = field(default_factory=dict)
    write: bool = True
    stream: Any = None


class _Run:
    """What one run changes as it goes: the state and the one before it (the last good one
    when the newest is not finite), the history, the step it resumed from, whether and why it
    ended before its last step; and how it takes, shows, stops and saves a step."""

    def __init__(
        self, alg, state, length: Length, checkpointing: Checkpointing, validation, results
    ):
        self.alg, self.state, self.earlier = alg, state, None
        self.length, self.checkpointing = length, checkpointing
        self.validation, self.results = validation, results
        self.header = {**checkpointing.header, "tol": length.tol}  # read on resume, not compared
        self.history = {"step": [], "objective": [], "time": []}
        self.start_step = 0
        self.stopped = None  # why a run ended before num_steps: "converged" or "early_stopping"
        self.in_step = False  # a step under way (set before it, cleared once it is recorded)
        self.saved = None  # (step, stopped) of the checkpoint this run last wrote
        self.stream_read = None  # a stream's record of the minibatches the recorded steps took
        path = checkpointing.path
        if checkpointing.resume and path is not None and os.path.exists(path):
            self.state, self.history, self.start_step, self.stopped = restore(
                path, self.header, alg, state, validation, checkpointing.stream
            )
            if self.start_step > length.num_steps:
                raise ValueError(
                    f"Checkpoint {path!r} is at step {self.start_step}, past num_steps="
                    f"{length.num_steps}; resume with num_steps >= {self.start_step}."
                )
            if self.stopped is None and self.rule_met():
                # The checkpointed step already meets this run's tol (a converged run resumed
                # with a tighter one): it ends there, as the run would have without a break.
                self.stopped = "converged"
        elapsed = self.history["time"][-1] if self.history["time"] else 0.0
        self.t0 = time.perf_counter() - elapsed
        self.converged = self.stopped == "converged"

    def steps(self) -> range:
        # A run that converged or stopped early is finished: resuming it returns it as it was.
        return range(self.start_step, self.start_step if self.stopped else self.length.num_steps)

    def take_step(self, step: int):
        """Step ``step + 1``, recorded in the history; returns its info."""
        alg, state = self.alg, self.state
        self.in_step = True
        try:
            new_state, info = alg.step(state)  # a new state: ``state`` stays as it was
        except DataError:
            raise
        except NUMERICAL_ERRORS as err:
            # A step that fails on parameters that are no longer finite (a learning rate that
            # diverged), or a stochastic step whose draw could not be factorised, ends as a
            # non-finite objective does, with advice.
            if not (nonfinite_parameters(alg, state) or _draw_not_factorised(alg, err)):
                raise
            what = f"Step {step + 1} failed ({type(err).__name__}: {first_line(err)})"
            raise self.nonfinite_error(step, what) from err
        objective = info.objective
        if not math.isfinite(objective):
            raise self.nonfinite_error(step, f"The objective became {objective} at step {step + 1}")
        self.earlier, self.state = state, new_state
        self.history["step"].append(step + 1)
        self.history["objective"].append(objective)
        self.history["time"].append(time.perf_counter() - self.t0)
        if self.checkpointing.stream is not None:  # the minibatches the steps so far took
            self.stream_read = self.checkpointing.stream.read_record()
        self.in_step = False
        return info

    def nonfinite_error(self, step: int, what: str) -> NonFiniteObjectiveError:
        return _nonfinite_error(
            self.alg, self.state, self.earlier, step, self.history, self.results, what
        )

    def show(self, bar, step: int, info, progress: bool) -> None:
        """The step on the progress bar, with the algorithm's description of it or the
        objective per data point."""
        if step == self.start_step:
            count_first_step(bar, step + 1)
        else:
            bar.update(1)
        described = progress_text(self.alg, info) if progress else None
        if described:
            bar.set_postfix_str(described, refresh=False)
        elif progress and (step % 25 == 0 or step + 1 == self.length.num_steps):
            # Stochastic objectives are noisy step to step: show their running mean.
            stochastic = self.alg.traits.stochastic
            recent = (
                self.history["objective"][-RUNNING_MEAN_STEPS:] if stochastic else [info.objective]
            )
            per_point = sum(recent) / len(recent) / self.length.num_data
            bar.set_postfix_str(f"objective/point={per_point:.4f}", refresh=False)

    def check_stop(self, step: int) -> None:
        """Whether the run ends after step ``step + 1``: the validation's early stopping, else
        the algorithm's stopping rule."""
        if self.validation is not None and self.validate(step):
            self.stopped = "early_stopping"
        elif self.rule_met():
            self.stopped, self.converged = "converged", True

    def rule_met(self) -> bool:
        """Whether the algorithm's stopping rule is met with ``tol`` after the last step taken."""
        alg, state = self.alg, self.state
        return convergence.converged(
            alg,
            self.history["objective"],
            self.length.tol,
            self.length.num_data,
            rule_start(alg, state),
            noise_bound(alg, state),
        )

    def validate(self, step: int) -> bool:
        """The validation after step ``step + 1`` (True: stop early). A held-out objective that
        is not finite, or one that fails on parameters gone out of range, ends the run as a
        non-finite training objective does: the last good parameters kept, with advice."""
        try:
            stop = self.validation.after_step(step + 1, self.state, self.alg, self.history)
        except NUMERICAL_ERRORS as err:
            # A row of the held-out data was scored when the fit was set up: an error of their
            # structure (keys, shapes), the same for every row, would have shown there. A value
            # error now is the parameters' (a scale the networks give gone to zero or out of
            # range); the error's own words are kept in the message.
            if isinstance(err, RuntimeError) and not nonfinite_parameters(self.alg, self.state):
                raise
            failure = f"{type(err).__name__}: {first_line(err)}"
            what = f"Validation after step {step + 1} failed ({failure})"
            raise self.nonfinite_error(step + 1, what) from err
        scored = self.history.get("validation_step", [])
        if scored and scored[-1] == step + 1 and not math.isfinite(self.history["validation"][-1]):
            what = (
                f"The validation objective became {self.history['validation'][-1]} after step "
                f"{step + 1}"
            )
            raise self.nonfinite_error(step + 1, what)
        return stop

    def call_back(self, callback, step: int, info) -> None:
        """``callback(step + 1, state, info)``; a callback that raises to stop the run has the
        step it saw checkpointed first, so resume=True continues from it (one that calls
        ``sys.exit()`` or is interrupted, by the loop's handler of interrupts)."""
        try:
            callback(step + 1, self.state, info)
        except Exception:
            self.save()
            raise

    def due(self, step: int) -> bool:
        """Whether a checkpoint is due after step ``step + 1``."""
        every = self.checkpointing.every
        return self.checkpointing.path is not None and (step + 1) % every == 0

    def save(self) -> None:
        """Checkpoint the last completed step, when a path is given and this call took a step."""
        path, history = self.checkpointing.path, self.history
        if path is None or not self.checkpointing.write:
            return
        if not history["step"] or history["step"][-1] <= self.start_step:
            return
        if (history["step"][-1], self.stopped) == self.saved:
            return  # written already (a checkpoint due at the last step)
        header = {**self.header, "step": history["step"][-1], "stopped": self.stopped}
        if self.stream_read is not None:  # not the minibatch of a step that failed
            header["stream_read"] = self.stream_read
        try:
            _save(path, header, self.alg, self.state, history, self.validation)
            self.saved = (history["step"][-1], self.stopped)
        except OSError as err:  # a full disk, a folder removed mid-run: keep the fit
            warnings.warn(
                f"Could not write the checkpoint {path!r} at step {history['step'][-1]} "
                f"({type(err).__name__}: {err.strerror or err}); the fit goes on and its result "
                "is returned, but it cannot be resumed from this step.",
                RuntimeWarning,
                stacklevel=2,
            )

    def check_last_update(self) -> None:
        """The last update left parameters that are not finite though the objective, computed
        before it, was: no step is left to see it, so the fit must not end as if it had."""
        last = self.history["step"][-1] if self.history["step"] else self.start_step
        if last > self.start_step and nonfinite_parameters(self.alg, self.state):
            what = f"The objective was finite to the last step, {last}"
            raise self.nonfinite_error(last, what)


def run(
    alg,
    state,
    length: Length,
    *,
    progress: bool = True,
    checkpointing: Checkpointing | None = None,
    callback=None,
    validation=None,
    results=None,
):
    """Step ``alg`` from ``state`` for at most ``length.num_steps`` steps, until its stopping
    rule is met with ``length.tol`` (:class:`Length`), or until ``validation``
    (``inference.validation``) stops early. Returns ``(state, history, converged)``.

    ``callback(step, state, info)`` runs after each step (raise to stop; the step is
    checkpointed first, ``sys.exit()`` included). ``checkpointing`` (:class:`Checkpointing`)
    says where the run is checkpointed and whether it resumes. On an interrupt between steps (a
    Ctrl-C or ``SystemExit``; one that stops a step half way leaves the checkpoint of an earlier
    step), a bad minibatch (``inference.streaming.DataError``) or a failed step (``OSError``,
    ``RuntimeError``: e.g. a lost ``torch.distributed`` peer) the last completed step is
    checkpointed (when a path is given) before the exception propagates. A
    :class:`NonFiniteObjectiveError` holds the result that ``results``
    (``inference.api.ResultMaker``, or anything called as one and with an ``advice``) makes of
    the last good state, and says what ``results.advice`` tells to try.
    """
    this = _Run(alg, state, length, checkpointing or Checkpointing(), validation, results)
    bar = progress_bar(length.num_steps, progress, desc=alg.name, initial=this.start_step)
    try:
        with _deferred_interrupt() as interrupted:
            for step in this.steps():
                info = this.take_step(step)
                this.show(bar, step, info, progress)
                this.check_stop(step)
                if callback is not None:
                    this.call_back(callback, step, info)
                if this.due(step):
                    this.save()
                if interrupted:
                    raise KeyboardInterrupt
                if this.stopped:
                    break
    except (KeyboardInterrupt, SystemExit):
        # A second Ctrl-C, or a SystemExit raised inside a step, stops a step half way: a Pyro
        # step updates its parameters in place, so they may be half a step on. The checkpoint
        # on disk (the last written) stays whole. A sys.exit() between steps (a callback's) is
        # an interrupt too: the steps it stops after are kept.
        if not this.in_step:
            this.save()
        raise
    except (DataError, OSError, RuntimeError):
        # A bad minibatch or a stream that ended, a lost worker: the last completed step is
        # saved, and resume=True continues from it.
        this.save()
        raise
    finally:
        bar.close()
    this.check_last_update()
    this.save()  # early stops and the last step included
    return this.state, this.history, this.converged
