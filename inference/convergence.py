"""When a run has converged, and the warning when it has not.

Two stopping rules, one per kind of objective (``Traits.stochastic``):

- an exact objective (CAVI, EM) has converged when it changes by less than ``tol`` nats per
  data point from one step to the next;
- a noisy one (SVI's Monte-Carlo ELBO) has converged when its mean over the last ``window``
  steps is less than ``tol`` nats per data point above its mean over the ``window`` steps
  before: the slope of the smoothed objective, over a window, is below the tolerance. A
  single step's change says nothing about a noisy objective; means over windows of hundreds
  of steps do (the rule of thumb of SVI convergence diagnostics, e.g. Dhaka et al. 2020).
  Where the noise can hide a gain of ``tol`` (natural-gradient SVI, and SVI on minibatches:
  ``inference.algorithm.noise_bound``), the standard error of the two means' difference must be
  below ``tol`` too, so that the rule is not met by chance.

``tol=0`` asks for a fixed number of steps: no rule stops the run, and no warning is given.

A run that reaches ``num_steps`` without meeting its rule warns with
:class:`ConvergenceWarning`, as scikit-learn's estimators do; suppress it with
``warnings.filterwarnings("ignore", category=inference.ConvergenceWarning)``.
"""

from __future__ import annotations

import contextlib
import logging
import math

import numpy as np


class ConvergenceWarning(UserWarning):
    """A run stopped at ``num_steps`` before its stopping rule was met, or a sampler's chains
    fail their diagnostics (r-hat, bulk effective sample size, divergences).

    The message names the run and what to change. A ``UserWarning``; silence it with
    ``warnings.filterwarnings("ignore", category=inference.ConvergenceWarning)``, or run a fixed
    number of steps with ``tol=0``.

    Parameters
    ----------
    message : str
        The run (algorithm, model, backend, guide), what was not met, and what to change.

    Examples
    --------
    >>> import warnings
    >>> import numpy as np
    >>> import inference, zoo
    >>> data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 100)
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     res = inference.fit("gmm", data, "em", "pyro", K=2, num_steps=2, progress=False)
    >>> res.converged, caught[0].category.__name__
    (False, 'ConvergenceWarning')
    """


def exact_converged(objectives, tol: float, num_data: int) -> bool:
    """Whether the last step changed an exact objective by less than ``tol`` nats per point."""
    if not tol or len(objectives) < 2:
        return False
    return abs(objectives[-1] - objectives[-2]) < tol * num_data


#: The default ``tol`` of a stochastic objective's stopping rule (SVI's, natural-gradient SVI's):
#: nats per data point between the means of two windows.
STOCHASTIC_TOL = 1e-4


def too_few_for_window(count: int, window: int, start: int = 0) -> bool:
    """Whether ``count`` objectives, counted from index ``start``, are too few to compare two
    windows of ``window`` steps."""
    return count - start < 2 * window


def window_converged(
    objectives, tol: float, num_data: int, window: int, start: int = 0, noise_bound=False
) -> bool:
    """Whether the mean of the last ``window`` objectives (summed over ``num_data`` points) is
    less than ``tol`` nats per point above the mean of the ``window`` before, counting only
    objectives from index ``start`` on (a learning rate that is still high leaves a noise floor
    that is not the optimum: the rule waits for its last stage). With ``noise_bound``, the
    standard error of that difference (:func:`window_noise`) must be below ``tol`` too."""
    if not tol or too_few_for_window(len(objectives), window, start):
        return False
    if noise_bound and window_noise(objectives, num_data, window) >= tol:
        return False  # a gain of tol would be lost in the noise: the rule cannot tell
    return bool(window_gain(objectives, num_data, window) < tol)


def _last_two_windows(objectives, num_data: int, window: int) -> np.ndarray:
    """The last ``2 * window`` objectives, per data point."""
    return np.asarray(objectives[-2 * window :], dtype=float) / num_data


def window_gain(objectives, num_data: int, window: int) -> float:
    """The mean of the last ``window`` objectives less the mean of the ``window`` before, in
    nats per data point."""
    recent = _last_two_windows(objectives, num_data, window)
    return float(recent[window:].mean() - recent[:window].mean())


def window_noise(objectives, num_data: int, window: int) -> float:
    """The standard error, in nats per point, of the difference between the means of the last
    two windows of ``window`` objectives: how large a gain between them the noise could hide.
    Each step's noise is taken as independent, its variance as half the mean square of the
    changes from step to step, which a smooth rise (an objective still climbing) barely
    touches."""
    recent = _last_two_windows(objectives, num_data, window)
    step_variance = np.mean(np.diff(recent) ** 2) / 2
    return float(np.sqrt(2 * step_variance / window))


def hidden_by_noise(objectives, tol: float, num_data: int, window: int) -> float | None:
    """The noise (:func:`window_noise`) of a run that ended unconverged where it is what hid
    the verdict: at least ``tol``, and the last gain not clearly above ``tol``; else None (the
    run was still rising)."""
    if not tol or len(objectives) < 2 * window:
        return None
    noise = window_noise(objectives, num_data, window)
    gain = window_gain(objectives, num_data, window)
    return noise if noise >= tol and gain < tol + 2 * noise else None


def converged(
    alg, objectives, tol: float | None, num_data: int, start: int = 0, noise_bound: bool = False
) -> bool:
    """The stopping rule of ``alg``'s kind of objective, after the last step of
    ``objectives``; a stochastic one with ``noise_bound`` (``inference.algorithm.noise_bound``)
    also asks that the noise of its windows be below ``tol``."""
    if tol is None:
        return False
    if alg.traits.stochastic:
        window = alg.traits.window
        if len(objectives) % max(window // 10, 1):  # checked ten times a window
            return False
        return window_converged(objectives, tol, num_data, window, start, noise_bound)
    return exact_converged(objectives, tol, num_data)


def fell_below_start(objectives, tol: float | None, num_data: int) -> float | None:
    """How far, in nats per data point, an exact objective ended below its first value, where
    that is more than ``tol`` (:data:`STOCHASTIC_TOL` where ``tol`` is None or 0); else None.

    Gradient steps on an exact objective that end below where they began did not climb to the
    optimum near the start: the first steps, too long, threw the parameters off it, and the run
    settled in a worse optimum. A covariance fitted to fewer points than dimensions, nearly
    singular, does this at SVI's default learning rate: a step that is small for every other
    entry moves it many of its own standard deviations."""
    if len(objectives) < 2:
        return None
    first, last = float(objectives[0]), float(objectives[-1])
    drop = (first - last) / num_data
    return drop if drop > (tol or STOCHASTIC_TOL) else None


def below_start_message(run: str, objectives, num_data: int, drop: float) -> str:
    """What a :class:`ConvergenceWarning` says about a run whose exact objective met its
    stopping rule below its start (:func:`fell_below_start`)."""
    first, last = objectives[0] / num_data, objectives[-1] / num_data
    return (
        f"{run} met its stopping rule at an objective of {last:.4f} nats per data point, "
        f"{drop:.3g} below its start ({first:.4f}). Its objective is exact: its steps left "
        "worse parameters than it began with, its first steps having thrown it off its start. "
        "Lower the learning rate (lr), or start from other values (init)."
    )


def unconverged_message(
    run: str,
    num_steps: int,
    tol: float,
    advice: str,
    window: int | None = None,
    start: int = 0,
    noise: float | None = None,
):
    """What a :class:`ConvergenceWarning` says about a run that stopped at ``num_steps``;
    ``window`` (and the rule's first step ``start``) for a stochastic objective, and ``noise``
    where it hid whether the run converged (:func:`hidden_by_noise`)."""
    if noise is not None and not too_few_for_window(num_steps, window, start):
        return (
            f"{run} stopped at num_steps={num_steps} without knowing whether it converged: the "
            f"noise of its objective hides a gain of tol={tol:g} nats per data point (the mean "
            f"of its last {window} steps less the mean of the {window} before has a standard "
            f"error of {noise:.2g}). Use larger minibatches (batch_size), or raise tol to about "
            f"{_ceiling(noise)}. Pass tol=0 to run a fixed number of steps without this warning."
        )
    if window is not None and too_few_for_window(num_steps, window, start):
        reason = (
            f"too few steps to check its stopping rule: it compares the mean objective over the "
            f"last {window} steps with the {window} before"
            + (f", from step {start:,} on" if start else "")
        )
    elif window is not None:
        reason = (
            f"its smoothed objective was still rising by more than tol={tol:g} nats per data point"
        )
    else:
        reason = f"its objective still changed by more than tol={tol:g} nats per data point"
    return (
        f"{run} stopped at num_steps={num_steps} before converging ({reason}). {advice} Pass "
        "tol=0 to run a fixed number of steps without this warning."
    )


def _ceiling(value: float) -> str:
    """``value`` rounded up to one significant digit, as a tol to suggest."""
    exponent = math.floor(math.log10(value))
    return f"{math.ceil(value / 10**exponent) * 10**exponent:.{max(0, -exponent)}f}"


#: Draws per chain below which ArviZ computes no r-hat or ESS (its shape check).
MIN_DRAWS_FOR_DIAGNOSTICS = 4


def nuts_problems(summary, divergences: int, num_chains: int) -> list[str]:
    """What fails in a sampler's diagnostics (ArviZ's ``summary`` table, with ``r_hat`` and
    ``ess_bulk`` columns): r-hat above 1.01, bulk ESS below 100 per chain (Vehtari et al.
    2021), divergent transitions. Empty when every check passes."""
    problems = []
    r_hats = np.asarray(summary["r_hat"], dtype=float)
    esses = np.asarray(summary["ess_bulk"], dtype=float)
    r_hat = float(np.max(r_hats[np.isfinite(r_hats)], initial=-math.inf))
    ess = float(np.min(esses[np.isfinite(esses)], initial=math.inf))
    if num_chains > 1 and r_hat > 1.01:
        worst = summary["r_hat"].idxmax()
        problems.append(f"r-hat {r_hat:.3f} > 1.01 (at {worst})")
    if ess < 100 * num_chains:
        worst = summary["ess_bulk"].idxmin()
        problems.append(f"bulk ESS {ess:.0f} < {100 * num_chains} (100 per chain, at {worst})")
    if divergences:
        problems.append(divergence_problem(divergences))
    return problems


def divergence_problem(divergences: int) -> str:
    return f"{divergences} divergent transitions after warm-up"


def draw_problems(result) -> list[str]:
    """What fails in the convergence diagnostics of a sampler's ``result`` (ArviZ's
    ``az.summary``, read by :func:`nuts_problems`), each in a phrase; empty when all pass, and
    for a result without draws."""
    if not result.draws:
        return []
    num_chains, per_chain = next(iter(result.draws.values())).shape[:2]
    divergences = int(np.sum(result.sample_stats.get("diverging", 0)))
    if per_chain < MIN_DRAWS_FOR_DIAGNOSTICS:
        # Said here: ArviZ would give NaN for both, and log a line of its own.
        too_few = (
            f"{per_chain} draws per chain, too few for r-hat and bulk ESS (they need at "
            f"least {MIN_DRAWS_FOR_DIAGNOSTICS})"
        )
        return [too_few] + ([divergence_problem(divergences)] if divergences else [])
    stuck = stuck_problems(result.draws)
    return stuck + nuts_problems(diagnostics(result.draws), divergences, num_chains)


def diagnostics(draws: dict):
    """ArviZ's diagnostics table of ``draws`` (sites of shape (chains, draws, ...)), unrounded:
    ``az.summary`` rounds to two decimals by default, and an r-hat of 1.012 read as 1.01 passed
    the 1.01 check."""
    import warnings

    import arviz as az

    # The draws alone: result.to_arviz() would also evaluate the pointwise log-likelihood of
    # every draw at every data point, which the diagnostics do not read.
    # r-hat of one chain, ESS of a constant: NaN, said here.
    with warnings.catch_warnings(), _arviz_log_off():
        warnings.simplefilter("ignore")
        data = az.from_dict(posterior=draws)
        return az.summary(data, kind="diagnostics", round_to="none")


@contextlib.contextmanager
def _arviz_log_off():
    """ArviZ's log switched off: it says through its logger, not as a warning, that one chain
    is too few for r-hat, which the run's own checks already skip for one chain."""
    import arviz as az

    # ArviZ 0.x logs through a logger of its own, arviz._log, that logging.getLogger("arviz")
    # does not return. Its disabled flag, not its level: a level change would stay in the
    # logger's cache, which logging clears only for the loggers it made.
    log = getattr(az, "_log", None) or logging.getLogger("arviz")
    was_disabled, log.disabled = log.disabled, True
    try:
        yield
    finally:
        log.disabled = was_disabled


def stuck_problems(draws: dict) -> list[str]:
    """Chains that did not move, which r-hat and ESS cannot show (ArviZ gives NaN for them,
    and an entry fixed by the model's structure, a Cholesky factor's zeros, is NaN too): an
    entry that stays put in some chains but moves in others, or stays put in every chain at
    different values, or every entry of every site in every chain at one value."""
    problems, everything_fixed = [], True
    for name, values in draws.items():
        values = np.asarray(values, dtype=float).reshape(*np.shape(values)[:2], -1)
        fixed = np.ptp(values, axis=1) == 0  # (chains, entries): no move within the chain
        some = fixed.any(axis=0) & ~fixed.all(axis=0)
        apart = fixed.all(axis=0) & (np.ptp(values[:, 0], axis=0) > 0)
        everything_fixed &= bool(fixed.all())
        if some.any():
            chains = np.flatnonzero(fixed[:, np.flatnonzero(some)[0]]).tolist()
            problems.append(f"chain(s) {chains} never moved at {name!r} while others did")
        elif apart.any():
            problems.append(f"every chain stayed where it started at {name!r}, apart")
    if everything_fixed and draws:
        problems.append("no chain moved from where it started")
    return problems
