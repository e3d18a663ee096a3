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

import numpy as np
from tqdm.auto import tqdm

from inference import checkpoint, convergence
from inference.backends import tree_codec
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
    )


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
DEFAULT_ADVICE = "Check the data scale, or use float64."

#: What a step raises when it meets parameters that are no longer finite: a distribution's
#: check of its parameters (ValueError), a factorisation of a matrix of infinities (numpy's
#: LinAlgError is a ValueError, torch's a RuntimeError), an overflow.
NUMERICAL_ERRORS = (ValueError, ArithmeticError, RuntimeError)


def nonfinite_parameters(alg, state) -> list[str]:
    """The names of the parameters of ``state`` that hold NaN or inf, or that lie outside
    their constraint (``Algorithm.parameters_outside_support``: a positive value rounded to
    zero); empty when all are good, or when they cannot be read."""
    try:
        params = alg.get_params(state)
    except Exception:
        return []
    return sorted({*alg.parameters_outside_support(state), *_nonfinite_names(params)})


def _nonfinite_names(params: dict) -> list[str]:
    """The names of the float arrays of ``params`` that hold NaN or inf."""
    bad = []
    for name, value in params.items():
        value = np.asarray(value)
        if value.dtype.kind in "fc" and not np.isfinite(value).all():
            bad.append(name)
    return bad


def final_result(make_result, state, history, converged, advice: str):
    """The fit's result from its last state, or :class:`NonFiniteObjectiveError` where the
    parameters cannot be summarised (a singular matrix to invert) or their summary is not
    finite (a covariance that overflows though its Cholesky factor does not)."""
    last = history["step"][-1] if history["step"] else 0
    try:
        result = make_result(state, history, converged)
    except (np.linalg.LinAlgError, ArithmeticError) as err:
        raise NonFiniteObjectiveError(
            f"The parameters of step {last} cannot be summarised ({type(err).__name__}: "
            f"{_first_line(err)}); no parameters are kept. {advice}"
        ) from err
    bad = _nonfinite_names(result.params)
    if bad:
        raise NonFiniteObjectiveError(
            f"The summary of the parameters of step {last} is not finite ({', '.join(bad)}); "
            f"error.result holds it as it is. {advice}",
            result,
        )
    return result


def _without_last_step(history: dict) -> dict:
    return {k: v[:-1] if k in ("step", "objective", "time") else v for k, v in history.items()}


def _nonfinite_error(alg, state, earlier, step, history, make_result, advice, what):
    """A :class:`NonFiniteObjectiveError` for step ``step + 1``, whose ``result`` holds the
    newest parameters that are all finite: those of ``state`` (step ``step``), else those of
    ``earlier`` (step ``step - 1``; a backend that updates parameters in place has none to give
    back), else those of ``state`` as they are."""
    bad = nonfinite_parameters(alg, state)
    if not bad:
        candidate, at, past = state, step, history
    elif earlier is not None and not nonfinite_parameters(alg, earlier):
        candidate, at, past = earlier, step - 1, _without_last_step(history)
    else:
        candidate = None
    result = kept = None
    if candidate is not None and make_result is not None:
        try:
            result, kept = make_result(candidate, past, False), at
        except NUMERICAL_ERRORS:
            pass
    if result is None and make_result is not None:
        try:  # no finite parameters: those of the last step, as they are
            with np.errstate(all="ignore"):  # summarising infinities: no warnings besides
                result = make_result(state, history, False)
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


def _first_line(err: BaseException, limit: int = 200) -> str:
    text = str(err).strip().splitlines()[0] if str(err).strip() else ""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _differences(saved, current) -> str:
    """What differs between two recorded values, naming the keys of dicts."""
    if isinstance(saved, dict) and isinstance(current, dict):
        keys = sorted(k for k in saved.keys() | current.keys() if saved.get(k) != current.get(k))
        return ", ".join(f"{k}: {saved.get(k)!r} there, {current.get(k)!r} here" for k in keys)
    return f"{saved!r} there, {current!r} here"


def _save(path, header, alg, state, history, validation=None):
    skeleton, arrays = alg.state_dict(state)
    arrays.update({f"history/{k}": np.asarray(v) for k, v in history.items()})
    extra = {}
    if validation is not None:
        extra["validation"], best = validation.state_dict()
        arrays.update(best)
    checkpoint.save(path, {**header, **extra, "kind": "checkpoint", "state": skeleton}, arrays)


def _check_arrays(path, fresh, saved) -> None:
    """Every array of this run's state is in the checkpoint with its dtype and shape (along the
    axes a run grows, such as a sampler's draws, any length), so that a damaged or foreign file
    is refused here, not steps later far from the cause."""
    expected = tree_codec.leaves(*fresh)
    if expected is None:  # a layout only the algorithm's own load_state_dict can read
        return
    found = tree_codec.leaves(*saved, partial=True)
    for place, like in expected.items():
        if place not in found:
            raise checkpoint.CheckpointError(
                f"Checkpoint {path!r} lacks the state's array {place!r}."
            )
        got = found[place]
        grows = [n == 0 for n in like.shape]
        if (
            got.dtype != like.dtype
            or got.ndim != like.ndim
            or any(g != n and not z for g, n, z in zip(got.shape, like.shape, grows, strict=True))
        ):
            raise checkpoint.CheckpointError(
                f"Checkpoint {path!r} holds the state's array {place!r} with shape "
                f"{got.shape} and dtype {got.dtype}; this run's has shape {like.shape} and "
                f"dtype {like.dtype}."
            )


#: What a validation set-up is compared as when a file written before the set-up was recorded
#: shows that the run validated, but not on what.
UNRECORDED_VALIDATION = "validation data (not recorded)"


def _meant_by_older_file(key, saved, header):
    """The value of ``key`` that a checkpoint written before ``key`` was recorded can only have
    meant. Where the file cannot tell (it validated, or started from arrays, or ran in a
    data-parallel group, without recording on what), this run's value: such a file resumes as
    it did when it was written."""
    options = saved.get("options", {})
    if key == "init":  # recorded among the options, arrays only as "array"
        return header.get(key) if options.get("init") == "array" else options.get("init")
    if key == "processes":  # one, unless the run was data-parallel
        return header.get(key) if options.get("data_parallel") else 1
    if key == "validation_setup":
        # The validation's state ("validation") is saved whenever a run validates: without it,
        # the run had no validation data.
        if "validation" not in saved:
            return None
        return header.get(key) if header.get(key) is not None else UNRECORDED_VALIDATION
    return None


def restore(path, header, alg, state, validation=None):
    """Load a checkpoint written for the same run; returns (state, history, step, stopped), with
    ``stopped`` "converged" or "early_stopping" for a run that ended before its last step."""
    saved, arrays = checkpoint.load(path)
    if saved.get("kind") != "checkpoint":
        what = "a saved fit" if saved.get("kind") == "fit_result" else repr(saved.get("kind"))
        raise checkpoint.CheckpointError(f"{path!r} is {what}, not a checkpoint to resume.")
    if "num_steps" not in header.get("options", {}):  # an extendable run (older files record it)
        saved["options"] = {k: v for k, v in saved.get("options", {}).items() if k != "num_steps"}
    for key in (
        "model",
        "algorithm",
        "backend",
        "guide",
        "seed",
        "data_fingerprint",
        "config_fingerprint",
        "options",
        "init",  # after the options, which name an init added or removed
        "processes",
        "validation_setup",
    ):
        there = saved[key] if key in saved else _meant_by_older_file(key, saved, header)
        if there != header.get(key):
            raise checkpoint.CheckpointError(
                f"Checkpoint {path!r} was written by another run; its {key} does not match "
                f"this run's: {_differences(there, header.get(key))}."
            )
    history = {
        k[len("history/") :]: arrays.pop(k).tolist()
        for k in list(arrays)
        if k.startswith("history/")
    }
    if validation is not None and "validation" in saved:
        validation.load_state_dict(saved["validation"], arrays)
    _check_arrays(path, alg.state_dict(state), (saved["state"], arrays))
    try:
        state = alg.load_state_dict(state, saved["state"], arrays)
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


def run(
    alg,
    state,
    *,
    num_steps: int,
    tol: float | None,
    num_data: int,
    progress: bool = True,
    checkpoint_path=None,
    checkpoint_every: int = 100,
    resume: bool = False,
    header: dict | None = None,
    callback=None,
    make_result=None,
    validation=None,
    write_checkpoints: bool = True,
    advice: str = DEFAULT_ADVICE,
):
    """Step ``alg`` from ``state`` until ``num_steps``, until its stopping rule is met with
    ``tol`` (``inference.convergence``: an exact objective that changes by less than ``tol`` nats
    per data point, a noisy one whose smoothed mean does), or until ``validation``
    (``inference.validation``) stops early. Returns ``(state, history, converged)``.

    ``callback(step, state, info)`` runs after each step (raise to stop). On an interrupt between
    steps (a Ctrl-C that stops a step half way leaves the checkpoint of an earlier step), a bad
    minibatch (``inference.streaming.DataError``) or a failed step (``OSError``,
    ``RuntimeError``: e.g. a lost ``torch.distributed`` peer) the last completed step is
    checkpointed (when a path is given) before the exception propagates. With
    ``write_checkpoints=False`` (the other processes of a data-parallel group) the checkpoint is
    read on resume but never written.
    """
    header = {**(header or {}), "tol": tol}  # read back on resume, never compared
    stochastic = alg.traits.stochastic
    history = {"step": [], "objective": [], "time": []}
    start_step = 0
    stopped = None  # why a run ended before num_steps: "converged" or "early_stopping"
    if resume and checkpoint_path is not None and os.path.exists(checkpoint_path):
        state, history, start_step, stopped = restore(
            checkpoint_path, header, alg, state, validation
        )
        if start_step > num_steps:
            raise ValueError(
                f"Checkpoint {checkpoint_path!r} is at step {start_step}, past num_steps="
                f"{num_steps}; resume with num_steps >= {start_step}."
            )
    elapsed0 = history["time"][-1] if history["time"] else 0.0
    t0 = time.perf_counter() - elapsed0
    converged = stopped == "converged"
    step = start_step
    bar = progress_bar(num_steps, progress, desc=alg.name, initial=start_step)
    in_step = [False]  # whether a step is under way (set before it, cleared once it is recorded)

    def save_checkpoint():
        """The last completed step, when a path is given and this call took a step."""
        if (
            checkpoint_path is not None
            and write_checkpoints
            and history["step"]
            and history["step"][-1] > start_step
        ):
            step_header = {**header, "step": history["step"][-1], "stopped": stopped}
            try:
                _save(checkpoint_path, step_header, alg, state, history, validation)
            except OSError as err:  # a full disk, a folder removed mid-run: keep the fit
                warnings.warn(
                    f"Could not write the checkpoint {checkpoint_path!r} at step "
                    f"{history['step'][-1]} ({type(err).__name__}: {err.strerror or err}); the "
                    "fit goes on and its result is returned, but it cannot be resumed from "
                    "this step.",
                    RuntimeWarning,
                    stacklevel=2,
                )

    try:
        # A run that converged or stopped early is finished: resuming it returns it as it was.
        with _deferred_interrupt() as interrupted:
            earlier = None  # the state before ``state``: the last good one if ``state``'s is not
            for step in range(start_step, start_step if stopped else num_steps):
                in_step[0] = True
                try:
                    new_state, info = alg.step(state)  # a new state: ``state`` stays as it was
                except DataError:
                    raise
                except NUMERICAL_ERRORS as err:
                    # A step that fails on parameters that are no longer finite (a learning
                    # rate that diverged) ends as a non-finite objective does, with advice.
                    if not nonfinite_parameters(alg, state):
                        raise
                    what = f"Step {step + 1} failed ({type(err).__name__}: {_first_line(err)})"
                    raise _nonfinite_error(
                        alg, state, earlier, step, history, make_result, advice, what
                    ) from err
                objective = info.objective
                if not math.isfinite(objective):
                    what = f"The objective became {objective} at step {step + 1}"
                    raise _nonfinite_error(
                        alg, state, earlier, step, history, make_result, advice, what
                    )
                earlier, state = state, new_state
                history["step"].append(step + 1)
                history["objective"].append(objective)
                history["time"].append(time.perf_counter() - t0)
                in_step[0] = False
                if step == start_step:
                    count_first_step(bar, step + 1)
                else:
                    bar.update(1)
                described = alg.describe(info) if progress else None
                if described:
                    bar.set_postfix_str(described, refresh=False)
                elif progress and (step % 25 == 0 or step + 1 == num_steps):
                    # Stochastic objectives are noisy step to step: show their running mean.
                    recent = (
                        history["objective"][-RUNNING_MEAN_STEPS:] if stochastic else [objective]
                    )
                    bar.set_postfix_str(
                        f"objective/point={sum(recent) / len(recent) / num_data:.4f}", refresh=False
                    )
                stop = validation is not None and validation.after_step(
                    step + 1, state, alg, history
                )
                if stop:
                    stopped = "early_stopping"
                elif convergence.converged(
                    alg,
                    history["objective"],
                    tol,
                    num_data,
                    alg.rule_start(state) if stochastic else 0,
                ):
                    stopped, converged = "converged", True
                if callback is not None:
                    callback(step + 1, state, info)
                if checkpoint_path is not None and (step + 1) % checkpoint_every == 0:
                    save_checkpoint()
                if interrupted:
                    raise KeyboardInterrupt
                if stopped:
                    break
    except KeyboardInterrupt:
        # A second Ctrl-C stops a step half way: a Pyro step updates its parameters in place,
        # so they may be half a step on. The checkpoint on disk (the last written) stays whole.
        if not in_step[0]:
            save_checkpoint()
        raise
    except (DataError, OSError, RuntimeError):
        # A bad minibatch or a stream that ended, a lost worker: the last completed step is
        # saved, and resume=True continues from it.
        save_checkpoint()
        raise
    finally:
        bar.close()
    last = history["step"][-1] if history["step"] else start_step
    if last > start_step and nonfinite_parameters(alg, state):
        # The last update left parameters that are not finite though the objective, computed
        # before it, was: no step is left to see it, so the fit must not end as if it had.
        what = f"The objective was finite to the last step, {last}"
        raise _nonfinite_error(alg, state, earlier, last, history, make_result, advice, what)
    save_checkpoint()  # early stops and the last step included
    return state, history, converged
