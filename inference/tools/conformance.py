"""The conformance suite: the contract every model of the zoo meets, checked by fitting it.

* :func:`check_model` runs the whole suite on one model (what ``tests/test_conformance.py``
  runs on every registered model) and returns a :class:`ConformanceReport` of what passes,
  what fails and why: the registration checks, the twins' log-joint and their guides
  (``zoo.testing``), then a short fit with every registered algorithm that supports the model,
  on both backends.
* :func:`check_algorithm_improves` is one such fit: finite, improving where the algorithm's
  traits say it must, and evaluable (posterior draws, or per-datum ELBOs).
* :func:`check_closed_form_objective` holds a fit by the closed-form updates (``cavi``,
  ``em``) to the twins: the objective it reports is the twins' at its parameters, and where it
  converged, the twins' objective is at a maximum. ``check_model`` runs it on the same fit as
  :func:`check_algorithm_improves`.

Each check raises ``ModelSpecError`` (registration) or ``AssertionError`` (the rest) with a
message that names the broken contract and how to fix it.
"""

from __future__ import annotations

import contextlib
import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from inference.algorithms.closed_form import CAVI, EM
from inference.api import fit
from inference.backends import get_backend
from inference.convergence import ConvergenceWarning, exact_converged
from inference.registry import get_algorithm, list_algorithms
from zoo import BACKENDS, GuideKind, ModelSpec, ModelSpecError, get_model
from zoo.array_namespace import convert_config
from zoo.testing import (
    backend_arrays,
    check_registration,
    check_twin_guides,
    check_twins_and_log_joint,
    describe_error,
    example_problem,
)
from zoo.weights import canonical_name

#: What each check of :func:`check_model` requires, as its report states it.
CONTRACTS = {
    "registration": (
        "a complete spec; both twins import and trace on make_data's data with the same sample "
        "sites and plates; every guide samples every latent site"
    ),
    "twins_and_log_joint": (
        "both twins start from init and give the same log-joint at the same point, at the start "
        "and with parameters and options moved off it"
    ),
    "twin_guides": (
        "each guide has the same parameters and sites in both twins, starts from init, and has "
        "the same log-density at the same parameters and draws, at both points"
    ),
    "fit": (
        "a short fit runs, its objective is finite and improves, and it gives posterior draws "
        "(to_arviz) or per-datum ELBOs"
    ),
}
CONTRACTS["closed_form_fit"] = (
    CONTRACTS["fit"] + "; the objective it reports is the twins' at its parameters, which, "
    "once it converged, are where the twins' objective is at a maximum"
)


def short_run(alg, num_steps: int) -> dict:
    """The ``fit`` arguments of a short run of ``alg`` of about ``num_steps`` steps: its traits'
    ``short_run`` where its options set its length (a sampler), else ``num_steps`` (an
    algorithm of the older contract with its own ``short_run`` is asked)."""
    older = getattr(alg, "short_run", None)
    if callable(older):
        return older(num_steps)
    if alg.traits.short_run is not None:
        return alg.traits.short_run(num_steps)
    return {"num_steps": num_steps}


def check_algorithm_improves(
    spec: ModelSpec, algorithm: str, backend: str, num_steps: int = 40, **options
) -> None:
    """A short fit is finite, improves its objective (where the algorithm's traits say it must),
    and gives an ``arviz.InferenceData`` or per-datum ELBOs."""
    data, res = _short_fit(spec, algorithm, backend, num_steps, None, **options)
    _check_fit_improves(spec, algorithm, backend, data, res)


def _short_fit(spec, algorithm, backend, num_steps, callback, **options):
    """``(data, result)``: a fit of ``num_steps`` steps (``short_run``) on the example problem,
    with ``tol=0``, no progress bar and ``callback``."""
    data, _, _ = example_problem(spec, **options)
    options = {**spec.example_options, **options}
    short = short_run(get_algorithm(algorithm), num_steps)
    with warnings.catch_warnings():  # a run this short is not meant to converge: not said
        warnings.simplefilter("ignore", ConvergenceWarning)
        res = fit(
            spec,
            data,
            algorithm,
            backend,
            tol=0.0,
            progress=False,
            callback=callback,
            **short,
            **options,
        )
    return data, res


def _check_fit_improves(spec, algorithm, backend, data, res) -> None:
    """:func:`check_algorithm_improves` on the fit ``res`` of ``data``."""
    h = np.asarray(res.history["objective"])
    if not np.all(np.isfinite(h)):
        raise AssertionError(
            f"{spec.name}/{algorithm}/{backend}: non-finite objective {h}. Check the data "
            "scale, the guide's starting values and positivity constraints on scales."
        )
    window = max(1, len(h) // 4)
    must_improve = get_algorithm(algorithm).traits.must_improve
    if must_improve and not h[-window:].mean() > h[:window].mean():
        raise AssertionError(
            f"{spec.name}/{algorithm}/{backend}: the objective did not improve "
            f"({h[:window].mean():.4f} -> {h[-window:].mean():.4f}) in {len(h)} steps. SVI: the "
            "guide's parameters must reach the guide's sample sites and start away from the "
            "optimum. Closed-form updates: update() returns the objective of the state it "
            "starts from, and init_state() starts somewhere other than the optimum (e.g. the "
            "prior)."
        )
    if spec.sample_posterior is None:  # local latents only: evaluate per datum instead
        elbo = res.elbo(data, num_samples=2)
        log_marginal = res.log_marginal_likelihood(data, num_samples=20)
        n = len(next(iter(data.values())))
        if elbo.shape != (n,) or not np.all(np.isfinite(log_marginal)):
            raise AssertionError(
                f"{spec.name}: elbo()/log_marginal_likelihood() must give finite (N,) arrays; "
                f"got shapes {elbo.shape}, {log_marginal.shape}."
            )
        return
    idata = res.to_arviz(num_samples=20)
    if "posterior" not in idata.groups():
        raise AssertionError(f"{spec.name}: to_arviz gave no posterior group.")


# --- Closed-form updates against the twins ---------------------------------------------------

#: Draws of the guide's latents the twins' objective is estimated from, where the guide draws
#: any (one suffices for a deterministic guide): its standard error sets the tolerances.
TWIN_OBJECTIVE_PARTICLES = 32
#: How much a converged closed-form fit's parameters may still gain, in nats per data point, by
#: a step along the gradient of the twins' objective: the fit stops short of its maximum by a
#: little (the stopping rule, EM's slow last steps, a ``reg_covar`` added in the update), a
#: wrong update by much more.
STATIONARITY_SLACK = 1e-3
#: The step sizes of that search, in the parameters' unconstrained coordinates, along the
#: gradient scaled to a largest entry of 1.
STATIONARITY_STEPS = (0.01, 0.1, 1.0)
#: How many standard errors a Monte-Carlo difference may be off.
STANDARD_ERRORS = 4.0


def is_closed_form(algorithm: str) -> bool:
    """Whether ``algorithm`` runs the model's closed-form updates step by step (``cavi``,
    ``em``), so that :func:`check_closed_form_objective` applies to it."""
    return isinstance(get_algorithm(algorithm), CAVI | EM)


class _LastTwoParams:
    """A fit's callback that keeps the parameters after its last two steps."""

    def __init__(self, algorithm: str):
        self.algorithm = get_algorithm(algorithm)
        self.kept: list[dict] = []

    def __call__(self, step, state, info) -> None:
        self.kept = [*self.kept[-1:], self.algorithm.get_params(state)]


def check_closed_form_objective(
    spec: ModelSpec, algorithm: str, backend: str, num_steps: int = 40, **options
) -> None:
    """A short fit by the closed-form updates (``cavi``, ``em``) reports the objective of the
    twins, and, once converged, stops where the twins' objective is at a maximum.

    The twins' objective at a fit's parameters is the ELBO of the model and the guide of the
    updates' posterior in the Pyro twin (``updates.family``, else the guide whose parameters,
    with the model's, are the fit's ``raw_params``), started from them: for EM an enumerated
    point-mass guide, whose ELBO is the log-likelihood or log joint itself. It is estimated
    from ``TWIN_OBJECTIVE_PARTICLES`` draws where the guide draws anything, exactly otherwise.
    Where no guide holds the fit's parameters, and the updates module gives ``exact_elbo``, that
    is the objective (the ELBO with q(z) optimal given the fitted global factors).

    * The objective the fit reports at its last step (that of the state its last update starts
      from) lies between the twins' objective at the parameters before and after that update,
      within ``STANDARD_ERRORS`` standard errors.
    * Once the fit has converged (its last step within the algorithm's ``tol``), no step along
      the gradient of the twins' objective raises it by more than ``STATIONARITY_SLACK`` nats
      per data point: a fixed point of updates that ascend an objective is a stationary point
      of it. (Not checked where the objective is the updates module's ``exact_elbo``.)

    Parameters
    ----------
    spec : ModelSpec
        The model, with closed-form updates.
    algorithm : str
        ``"cavi"`` or ``"em"`` (:func:`is_closed_form`).
    backend : str
        The backend of the fit: ``"pyro"`` or ``"numpyro"``. The twins' objective is the Pyro
        twin's (``zoo.testing`` holds the NumPyro twin to it).
    num_steps : int
        The length of the fit (at least 2).
    **options
        Model options for the example problem, over ``spec.example_options``.

    Returns
    -------
    None

    Raises
    ------
    AssertionError
        The reported objective is not the twins', the twins' objective is not at a maximum
        where the fit converged, or no guide of the twins holds the fit's parameters; the
        message says what to compare.
    """
    recorder = _LastTwoParams(algorithm)
    data, res = _short_fit(spec, algorithm, backend, max(num_steps, 2), recorder, **options)
    _check_objective_is_the_twins(spec, algorithm, backend, data, res, recorder.kept)


def _check_closed_form_run(spec, algorithm, backend, num_steps, **options) -> None:
    """:func:`check_algorithm_improves` and :func:`check_closed_form_objective` on one fit."""
    recorder = _LastTwoParams(algorithm)
    data, res = _short_fit(spec, algorithm, backend, num_steps, recorder, **options)
    _check_fit_improves(spec, algorithm, backend, data, res)
    _check_objective_is_the_twins(spec, algorithm, backend, data, res, recorder.kept)


def _check_objective_is_the_twins(spec, algorithm, backend, data, res, kept) -> None:
    """:func:`check_closed_form_objective` on the fit ``res`` of ``data``, whose parameters
    after its last two steps are ``kept``."""
    history = np.asarray(res.history["objective"])
    if len(kept) < 2 or not np.all(np.isfinite(history)):
        return  # one step has no parameters before it; a non-finite run fails its fit check
    where = f"{spec.name}/{algorithm}/{backend}"
    scoring = _twin_scoring(spec, where, data, res.config, kept[-1])
    after = scoring.value(spec, data, res.config, kept[-1])
    # A fit at its fixed point (one update lands on it for a conjugate model) holds still.
    still = all(np.array_equal(kept[0][k], kept[1][k]) for k in kept[1])
    before = after if still else scoring.value(spec, data, res.config, kept[0])
    reported = float(history[-1])
    tolerance = STANDARD_ERRORS * max(before[1], after[1]) + 1e-8 * max(1.0, abs(reported))
    low, high = min(before[0], after[0]), max(before[0], after[0])
    if not low - tolerance <= reported <= high + tolerance:
        raise AssertionError(
            f"{where}: the objective the closed-form updates report at step {len(history)}, "
            f"{reported:.6f} nats, is not the twins' {scoring.name} at the fitted parameters: "
            f"{before[0]:.6f} before the last update, {after[0]:.6f} after it (standard error "
            f"{max(before[1], after[1]):.2g}). update(state, cache, config, xp) must return the "
            "objective of the state it starts from, in nats, summed over the data points, with "
            "every constant the twins' densities hold (log y! of a Poisson, log 2 pi of a "
            f"Normal, a prior's normaliser): compare it term by term with {scoring.source}."
        )
    gain = abs(history[-1] - history[-2])
    tol = get_algorithm(algorithm).traits.tol
    if scoring.guide is not None and exact_converged(history, tol, res.num_data):
        _check_stationary(spec, where, data, res, scoring, kept[-1], gain)


def _check_stationary(spec, where, data, res, scoring, raw, gain) -> None:
    """The twins' objective at the converged fit's parameters ``raw`` gains no more than the
    slack along its gradient."""
    slack = STATIONARITY_SLACK * res.num_data
    with _twin_objective(spec, scoring.guide, scoring.kind, data, res.config, raw) as twin:
        base = twin.values(seed=1, num=scoring.particles)
        gradient = twin.gradient(seed=2, num=scoring.particles)
        largest = np.max(np.abs(gradient))
        if not largest > 0:
            return
        for size in STATIONARITY_STEPS:
            twin.move(size * gradient / largest)
            rise = twin.values(seed=1, num=scoring.particles) - base
            mean, error = _mean_and_error(rise)
            if np.isfinite(mean) and mean > slack + STANDARD_ERRORS * error:
                raise AssertionError(
                    f"{where}: the fit converged (its last step changed the objective by "
                    f"{gain:.2g} nats), but the twins' {scoring.name} is not at a maximum "
                    f"there: a step along its gradient raises it by {mean:.4g} nats (standard "
                    f"error {error:.2g}; the parameters it moves most: "
                    f"{twin.steepest(gradient)}). A fixed point of updates that ascend an "
                    "objective is a stationary point of it: check each update's formula "
                    f"against {scoring.source} (a statistic counted twice or left out, a "
                    "prior's term missing from an update are the usual causes)."
                )


def _mean_and_error(values: np.ndarray) -> tuple[float, float]:
    """The mean of Monte-Carlo values and its standard error (0 for one value)."""
    if values.size < 2:
        return float(values.mean()), 0.0
    return float(values.mean()), float(values.std(ddof=1) / np.sqrt(values.size))


@dataclass(frozen=True)
class _Scoring:
    """How a closed-form fit is scored: by the twins' model and ``guide``, or (guide None) by
    the updates module's ``exact_elbo``."""

    guide: str | None
    kind: GuideKind
    name: str  # the objective, in words
    source: str  # what the update's formula is compared with, in words

    @property
    def particles(self) -> int:
        return 1 if self.kind.deterministic else TWIN_OBJECTIVE_PARTICLES

    def value(self, spec, data, config, raw) -> tuple[float, float]:
        """(the objective at ``raw``, its standard error)."""
        if self.guide is None:
            return _exact_elbo(spec, data, config, raw), 0.0
        with _twin_objective(spec, self.guide, self.kind, data, config, raw) as twin:
            return _mean_and_error(twin.values(seed=1, num=self.particles))


def _twin_scoring(spec, where, data, config, raw) -> _Scoring:
    """How the fit with parameters ``raw`` is scored (:class:`_Scoring`): the first guide of
    the twins (``updates.family``, then ``spec.guides``) whose parameters, with the model's,
    are the names of ``raw``; else ``exact_elbo`` where the updates module gives it."""
    updates = spec.updates
    names = [updates.family] if updates.family else []
    names += [g for g in spec.guides if g not in names]
    objective = {"elbo": "ELBO", "log_likelihood": "log-likelihood", "log_joint": "log joint"}[
        updates.objective
    ]
    for guide in names:
        kind = spec.guide_kind(guide, "pyro") if guide in spec.guides else GuideKind()
        if kind.relaxed or _param_names(spec, guide, kind, data, config, raw) != set(raw):
            continue
        how = "exactly" if kind.deterministic else "from draws"
        return _Scoring(
            guide,
            kind,
            f"{objective} (the ELBO of guide {guide!r}, {how})",
            f"the Pyro twin's model and guide {guide!r}",
        )
    module = updates.load()
    if updates.objective == "elbo" and callable(getattr(module, "exact_elbo", None)):
        return _Scoring(None, GuideKind(deterministic=True), "ELBO (exact_elbo)", "exact_elbo")
    raise AssertionError(
        f"{where}: no guide of the twins has the closed-form fit's parameters "
        f"{sorted(raw)} (with the model's own), so the fit cannot be scored by the twins. Name "
        "raw_params as the parameters of the twins' guide of the updates' posterior (the "
        "guide updates.family names, or one of guides), as SVI's fits of that guide name "
        "theirs."
    )


def _param_names(spec, guide, kind, data, config, raw) -> set | None:
    """The names of the parameters of the Pyro twin's model and guide ``guide`` started from
    ``raw``; None where they do not run from it (a parameter it lacks)."""
    try:
        with _twin_objective(spec, guide, kind, data, config, raw) as twin:
            return twin.names
    except Exception:
        return None


def _exact_elbo(spec, data, config, raw) -> float:
    """The updates module's ``exact_elbo`` of the fitted parameters ``raw`` (torch, float64)."""
    back = get_backend("pyro")
    device = back.resolve_device("cpu")
    return float(
        spec.updates.exact_elbo(
            raw,
            back.backend_config(config, device, "float64"),
            [data],
            back.ops,
            lambda a: back.asarray(a, device, "float64"),
        )
    )


@contextlib.contextmanager
def _twin_objective(spec, guide, kind, data, config, params):
    """:class:`_PyroELBO` of the Pyro twin's model and ``guide`` started from ``params``, in a
    scratch parameter store and a forked torch random stream, so the caller's are left as they
    were."""
    import pyro
    import torch

    # devices=[]: on the CPU, and forking CUDA's streams would initialise CUDA.
    with pyro.get_param_store().scope(), torch.random.fork_rng(devices=[]):
        yield _PyroELBO(spec, guide, kind, data, config, params)


class _PyroELBO:
    """The ELBO of the Pyro twin's model and a guide started from given parameters: its draws,
    their gradient in the parameters' unconstrained coordinates, and those coordinates moved.
    Made inside a scratch parameter store (:func:`_twin_objective`)."""

    def __init__(self, spec, guide, kind, data, config, params):
        import pyro
        import torch
        from pyro.infer import Trace_ELBO, TraceEnum_ELBO, config_enumerate

        as_tensor = backend_arrays("pyro")
        self.data = {k: as_tensor(v) for k, v in data.items()}
        self.config = convert_config(config, as_tensor)
        model = spec.build_model("pyro", self.config, dict(params))
        self.model = config_enumerate(model) if kind.enumerated else model
        self.guide = spec.twin("pyro").make_guide(guide, self.config, dict(params))
        # max_plate_nesting=1, as the inference layer's enumerated ELBO: no twin nests plates.
        self.loss = TraceEnum_ELBO(max_plate_nesting=1) if kind.enumerated else Trace_ELBO()
        torch.manual_seed(0)
        self._draw()  # creates the parameters in the store
        store = pyro.get_param_store()
        self.names = {canonical_name(name) for name in store.keys()}
        self.free = dict(store.named_parameters())
        self.start = {k: v.detach().clone() for k, v in self.free.items()}

    def _draw(self):
        return -self.loss.differentiable_loss(self.model, self.guide, self.data, self.config)

    def values(self, seed: int, num: int) -> np.ndarray:
        """``num`` draws of the ELBO (nats), from torch seed ``seed``."""
        import torch

        torch.manual_seed(seed)
        return np.array(
            [-self.loss.loss(self.model, self.guide, self.data, self.config) for _ in range(num)]
        )

    def gradient(self, seed: int, num: int) -> np.ndarray:
        """The mean over ``num`` draws of the ELBO's gradient, flat, in the parameters'
        unconstrained coordinates (the order of ``free``)."""
        import torch

        torch.manual_seed(seed)
        leaves = list(self.free.values())
        total = np.zeros(sum(leaf.numel() for leaf in leaves))
        for _ in range(num):
            grads = torch.autograd.grad(self._draw(), leaves, allow_unused=True)
            total += np.concatenate(
                [
                    np.zeros(leaf.numel()) if g is None else g.detach().cpu().numpy().ravel()
                    for g, leaf in zip(grads, leaves, strict=True)
                ]
            )
        return total / num

    def move(self, step: np.ndarray) -> None:
        """Set the unconstrained parameters to their start plus ``step`` (flat)."""
        import torch

        offset = 0
        with torch.no_grad():
            for name, leaf in self.free.items():
                part = step[offset : offset + leaf.numel()].reshape(tuple(leaf.shape))
                leaf.copy_(self.start[name] + torch.as_tensor(part, dtype=leaf.dtype))
                offset += leaf.numel()

    def steepest(self, gradient: np.ndarray, count: int = 3) -> list[str]:
        """The names of the ``count`` parameters with the largest gradient entries."""
        sizes, offset = {}, 0
        for name, leaf in self.free.items():
            part = gradient[offset : offset + leaf.numel()]
            sizes[canonical_name(name)] = float(np.max(np.abs(part))) if part.size else 0.0
            offset += leaf.numel()
        return sorted(sizes, key=sizes.get, reverse=True)[:count]


# --- The whole suite, as a report -----------------------------------------------------------


def supported_runs(spec: ModelSpec, algorithms=None, backends=None) -> list[tuple[str, str]]:
    """(algorithm, backend) pairs the spec supports, among ``algorithms`` (default: every
    registered algorithm, ``inference.list_algorithms()``) and ``backends`` (default: both)."""
    known = list_algorithms()
    algorithms = known if algorithms is None else list(algorithms)
    backends = list(BACKENDS) if backends is None else list(backends)
    unknown = sorted(set(algorithms) - set(known)) + sorted(set(backends) - set(BACKENDS))
    if unknown:
        raise ValueError(
            f"Unknown algorithm(s) or backend(s) {unknown}; valid algorithms are "
            f"{known}, valid backends {list(BACKENDS)}."
        )
    supported = [a for a in algorithms if get_algorithm(a).supports(spec)]
    return [(a, b) for a in supported for b in backends]


@dataclass
class CheckResult:
    """One check of :func:`check_model`: ``status`` is ``"pass"``, ``"fail"`` or ``"skip"``.

    Attributes
    ----------
    name : str
        ``"registration"``, ``"twins_and_log_joint"``, ``"twin_guides"`` or
        ``"<algorithm>/<backend>"``.
    contract : str
        What the check requires, in words.
    status : {"pass", "fail", "skip"}
        Its outcome.
    message : str
        Why it failed or was skipped (empty when it passed).
    seconds : float
        How long it ran.

    Examples
    --------
    >>> from inference.tools.conformance import check_model
    >>> report = check_model("gmm", algorithms=["em"], backends=["pyro"], num_steps=5)
    >>> check = report["em/pyro"]
    >>> check.status, check.passed, check.message
    ('pass', True, '')
    >>> print(check.contract)
    a short fit runs, its objective is finite and improves, and it gives posterior draws
    (to_arviz) or per-datum ELBOs; the objective it reports is the twins' at its parameters,
    which, once it converged, are where the twins' objective is at a maximum
    """

    name: str
    contract: str
    status: str
    message: str = ""
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        """Whether the check passed (``status == "pass"``)."""
        return self.status == "pass"


@dataclass
class ConformanceReport:
    """What :func:`check_model` found. ``print(report)`` shows every check; ``report.passed``
    is True when all passed; ``report.raise_for_failures()`` raises ``AssertionError`` with the
    report (for a test).

    ``report[name]`` is the :class:`CheckResult` of the check ``name`` (a ``KeyError`` listing
    the checks for another name).

    Attributes
    ----------
    model : str
        The checked model's name.
    results : list of CheckResult
        The checks, in the order they ran.

    Examples
    --------
    A spec whose NumPyro twin names a module that does not exist fails its registration
    check, and the checks after it are skipped:

    >>> import dataclasses
    >>> import zoo
    >>> from inference.tools.conformance import check_model
    >>> spec = zoo.get_model("gmm")
    >>> broken = dataclasses.replace(
    ...     spec, name="gmm_broken", backends={**spec.backends, "numpyro": "no_such_module"}
    ... )
    >>> report = check_model(broken, algorithms=["em"], backends=["pyro"])
    >>> report.passed, [(r.name, r.status) for r in report.results]
    (False, [('registration', 'fail'), ('twins_and_log_joint', 'skip'),
     ('twin_guides', 'skip'), ('em/pyro', 'skip')])
    >>> print(report)  # doctest: +ELLIPSIS
    check_model('gmm_broken'): 0 passed, 1 failed, 3 skipped
      FAIL  registration ... a complete spec; both twins import and trace on make_data's data ...
            Model 'gmm_broken': its NumPyro twin 'no_such_module' does not import: ...
      SKIP  twins_and_log_joint ...
    >>> report.raise_for_failures()
    Traceback (most recent call last):
    ...
    AssertionError: check_model('gmm_broken'): 0 passed, 1 failed, 3 skipped ...
    """

    model: str
    results: list[CheckResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """Whether every check passed (a skipped check is not a pass)."""
        return all(r.passed for r in self.results)

    @property
    def failures(self) -> list[CheckResult]:
        """The checks that failed, in the order they ran."""
        return [r for r in self.results if r.status == "fail"]

    def __getitem__(self, name: str) -> CheckResult:
        for result in self.results:
            if result.name == name:
                return result
        raise KeyError(f"No check {name!r}; checks: {[r.name for r in self.results]}.")

    def __str__(self) -> str:
        counts = {s: sum(r.status == s for r in self.results) for s in ("pass", "fail", "skip")}
        lines = [
            f"check_model({self.model!r}): {counts['pass']} passed, {counts['fail']} failed, "
            f"{counts['skip']} skipped"
        ]
        width = max((len(r.name) for r in self.results), default=0)
        for r in self.results:
            lines.append(
                f"  {r.status.upper():<4}  {r.name:<{width}}  {r.seconds:6.1f} s  {r.contract}"
            )
            if r.status != "pass":
                lines.extend(f"        {line}" for line in r.message.splitlines())
        return "\n".join(lines)

    def raise_for_failures(self) -> None:
        """Raise when a check did not pass: for a test, whose failure then shows the report.

        Returns
        -------
        None

        Raises
        ------
        AssertionError
            With ``str(report)`` as its message, when a check failed or was skipped.
        """
        if not self.passed:
            raise AssertionError(str(self))


def check_model(
    spec: ModelSpec | str, *, algorithms=None, backends=None, num_steps: int = 40, **options
) -> ConformanceReport:
    """Run the zoo's conformance suite on one model and report every check.

    The checks are those ``tests/test_conformance.py`` runs on every registered model:
    ``registration`` (:func:`check_registration`), ``twins_and_log_joint``
    (:func:`check_twins_and_log_joint`), ``twin_guides`` (:func:`check_twin_guides`) and, for
    each (algorithm, backend) the spec supports (:func:`supported_runs`, narrowed by
    ``algorithms`` and ``backends``), ``"algorithm/backend"``
    (:func:`check_algorithm_improves` with ``num_steps``; for the closed-form updates, ``cavi``
    and ``em``, :func:`check_closed_form_objective` on the same fit too, which the test suite
    runs in ``tests/test_twin_checks_points.py``). ``options`` are model options for the
    example problem (default: ``spec.example_options``). When registration fails the rest are
    skipped: their failures would only repeat it. Never raises for a failing model; read the
    report (``report.passed``, ``print(report)``).

    The example problem is a small data set from ``spec.make_data`` (60 points, seed 0:
    :func:`zoo.testing.example_problem`); each fit runs on it with ``tol=0`` and no progress
    bar, and the defaults otherwise: SVI fits the default guide only (the first of
    ``spec.guides``), while the registration check traces every guide. The cheap checks alone,
    without fitting, are :func:`zoo.testing.check_spec` and
    :func:`zoo.testing.check_registration`.

    Parameters
    ----------
    spec : ModelSpec or str
        The model, or the name of a registered one.
    algorithms : sequence of str, optional
        Fit only with these (registered) algorithms; default: every registered algorithm
        (``inference.list_algorithms()``). Those the model does not support are left out.
    backends : sequence of str, optional
        ``"pyro"``, ``"numpyro"``; default: both.
    num_steps : int
        The length of each short fit.
    **options
        Model options for the example problem, over ``spec.example_options``.

    Returns
    -------
    ConformanceReport
        Every check with its outcome, message and time: ``report.passed``,
        ``report.failures``, ``report["em/pyro"]``, ``print(report)``.

    Raises
    ------
    ValueError
        An unknown algorithm or backend in ``algorithms`` or ``backends``, or ``spec`` names
        no registered model.
    TypeError
        ``spec`` is neither a ``ModelSpec`` nor a str.

    Examples
    --------
    The mixture model's checks, with one short EM fit on Pyro:

    >>> from inference.tools.conformance import check_model
    >>> report = check_model("gmm", algorithms=["em"], backends=["pyro"], num_steps=5)
    >>> report.passed
    True
    >>> [(check.name, check.status) for check in report.results]
    [('registration', 'pass'), ('twins_and_log_joint', 'pass'), ('twin_guides', 'pass'),
     ('em/pyro', 'pass')]
    >>> print(report)  # doctest: +ELLIPSIS
    check_model('gmm'): 4 passed, 0 failed, 0 skipped
      PASS  registration ... s  a complete spec; both twins import and trace on make_data's data ...
      PASS  twins_and_log_joint ... s  both twins start from init and give the same log-joint ...
      PASS  twin_guides ... s  each guide has the same parameters and sites in both twins, ...
      PASS  em/pyro ... s  a short fit runs, its objective is finite and improves, ...

    In a test, ``report.raise_for_failures()`` fails with the whole report.
    """
    if not isinstance(spec, ModelSpec):
        spec = get_model(spec, check=False)
    checks = [
        ("registration", CONTRACTS["registration"], lambda: check_registration(spec, **options)),
        (
            "twins_and_log_joint",
            CONTRACTS["twins_and_log_joint"],
            lambda: check_twins_and_log_joint(spec, **options),
        ),
        (
            "twin_guides",
            CONTRACTS["twin_guides"],
            lambda: check_twin_guides(spec, **options),
        ),
    ]
    for algorithm, backend in supported_runs(spec, algorithms, backends):
        closed_form = is_closed_form(algorithm)
        run = _check_closed_form_run if closed_form else check_algorithm_improves
        checks.append(
            (
                f"{algorithm}/{backend}",
                CONTRACTS["closed_form_fit" if closed_form else "fit"],
                lambda run=run, a=algorithm, b=backend: run(
                    spec, a, b, num_steps=num_steps, **options
                ),
            )
        )
    report = ConformanceReport(model=spec.name)
    for name, contract, run in checks:
        if report.results and report.results[0].status == "fail":
            report.results.append(
                CheckResult(name, contract, "skip", "skipped until the registration checks pass")
            )
            continue
        start = time.perf_counter()
        try:
            run()
            status, message = "pass", ""
        except (AssertionError, ModelSpecError) as err:
            status, message = "fail", str(err)
        except Exception as err:
            status, message = "fail", f"raised {describe_error(err)}"
        report.results.append(
            CheckResult(name, contract, status, message, time.perf_counter() - start)
        )
    return report
