"""The conformance suite: the contract every model of the zoo meets, checked by fitting it.

* :func:`check_model` runs the whole suite on one model (what ``tests/test_conformance.py``
  runs on every registered model) and returns a :class:`ConformanceReport` of what passes,
  what fails and why: the registration checks, the twins' log-joint and their guides
  (``zoo.testing``), then a short fit with every registered algorithm that supports the model,
  on both backends.
* :func:`check_algorithm_improves` is one such fit: finite, improving where the algorithm's
  traits say it must, and evaluable (posterior draws, or per-datum ELBOs).

Each check raises ``ModelSpecError`` (registration) or ``AssertionError`` (the rest) with a
message that names the broken contract and how to fix it.
"""

from __future__ import annotations

import time
import warnings
from dataclasses import dataclass, field

import numpy as np

from inference.api import fit
from inference.convergence import ConvergenceWarning
from inference.registry import get_algorithm, list_algorithms
from zoo import BACKENDS, ModelSpec, ModelSpecError, get_model
from zoo.testing import (
    check_registration,
    check_twin_guides,
    check_twins_and_log_joint,
    describe_error,
    example_problem,
)

#: What each check of :func:`check_model` requires, as its report states it.
CONTRACTS = {
    "registration": (
        "a complete spec; both twins import and trace on make_data's data with the same sample "
        "sites and plates; every guide samples every latent site"
    ),
    "twins_and_log_joint": "both twins give the same log-joint at the same point",
    "twin_guides": (
        "each guide has the same parameters and sites in both twins, and the same log-density "
        "at the same parameters and draws"
    ),
    "fit": (
        "a short fit runs, its objective is finite and improves, and it gives posterior draws "
        "(to_arviz) or per-datum ELBOs"
    ),
}


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
    data, _, _ = example_problem(spec, **options)
    options = {**spec.example_options, **options}
    short = short_run(get_algorithm(algorithm), num_steps)
    with warnings.catch_warnings():  # a run this short is not meant to converge: not said
        warnings.simplefilter("ignore", ConvergenceWarning)
        res = fit(spec, data, algorithm, backend, tol=0.0, progress=False, **short, **options)
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
    (to_arviz) or per-datum ELBOs
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
    (:func:`check_algorithm_improves` with ``num_steps``). ``options`` are model options for the
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
      PASS  twins_and_log_joint ... s  both twins give the same log-joint at the same point
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
        checks.append(
            (
                f"{algorithm}/{backend}",
                CONTRACTS["fit"],
                lambda a=algorithm, b=backend: check_algorithm_improves(
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
