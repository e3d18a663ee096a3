"""The contract every model of the zoo meets, as functions a test (or an extender) can call.

* :func:`check_model` runs the whole conformance suite on one model (what
  ``tests/test_conformance.py`` runs on every registered model) and returns a
  :class:`ConformanceReport` of what passes, what fails and why.
* :func:`check_spec` checks the spec alone, with no imports; every registration runs it.
* :func:`check_registration` also imports both twins and traces them on the spec's example data:
  the same sample sites and plates, and every guide samples every latent site. ``zoo.register``
  runs it by default, and a plugin's model gets it the first time it is fetched.
* :func:`check_twins_and_log_joint` and :func:`check_algorithm_improves` are the checks of the
  suite that need more than a trace: the same log-joint in both twins, and a short fit with each
  algorithm.

Each check takes a :class:`~zoo.spec.ModelSpec` and raises ``ModelSpecError`` (registration) or
``AssertionError`` (the rest) with a message that names the broken contract and how to fix it.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from zoo.spec import BACKENDS, DataField, ModelSpec, ModelSpecError

#: What each check of :func:`check_model` requires, as its report states it.
CONTRACTS = {
    "registration": (
        "a complete spec; both twins import and trace on make_data's data with the same sample "
        "sites and plates; every guide samples every latent site"
    ),
    "twins_and_log_joint": "both twins give the same log-joint at the same point",
    "fit": (
        "a short fit runs, its objective is finite and improves, and it gives posterior draws "
        "(to_arviz) or per-datum ELBOs"
    ),
}
BACKEND_TITLES = {"pyro": "Pyro", "numpyro": "NumPyro"}


def example_problem(spec: ModelSpec, n: int = 60, seed: int = 0, **options):
    """Small data from the spec's generator, its config, and a start point for every backend."""
    from inference.api import get_backend
    from inference.closed_form import start_values
    from inference.initialization import initial_responsibilities

    if spec.make_data is None:
        raise ModelSpecError(
            f"{spec.name}: the spec needs make_data(rng, n) -> dict of arrays: the shared checks "
            "trace and fit the model on a small synthetic data set from it."
        )
    data = spec.validate_data(spec.make_data(np.random.default_rng(seed), n))
    options = {**spec.example_options, **options}
    config = spec.prepare(data, **options)
    start = None
    if spec.closed_form is not None:
        back = get_backend("numpyro")
        resp = initial_responsibilities(data["x"], config.K, "kmeans", seed)
        start = start_values(spec, data["x"], resp, config, back, back.resolve_device("cpu"))
    return data, config, start


def _pyro_trace(spec, data, config, start, seed=0):
    import pyro
    import torch

    from inference.api import get_backend

    back = get_backend("pyro")
    dev = back.resolve_device("cpu")
    pyro.clear_param_store()
    tdata = {k: back.asarray(v, dev, "float64") for k, v in data.items()}
    tconfig = back.backend_config(config, dev, "float64")
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = spec.build_model("pyro", tconfig, start)
        trace = pyro.poutine.trace(model).get_trace(tdata, tconfig)
    trace.compute_log_prob()
    return trace


def _numpyro_log_density(spec, data, config, start, values):
    import jax.numpy as jnp
    from numpyro.infer.util import log_density

    from inference.api import get_backend

    back = get_backend("numpyro")
    dev = back.resolve_device("cpu")
    jdata = {k: back.asarray(v, dev, "float64") for k, v in data.items()}
    jconfig = back.backend_config(config, dev, "float64")
    params = {k: jnp.asarray(v) for k, v in values.items()}
    model = spec.build_model("numpyro", jconfig, start)
    logp, trace = log_density(model, (jdata, jconfig), {}, params)
    return float(logp), trace


def site_signature(trace, backend):
    """{site name: (observed?, plate names)} for the sample sites of a trace."""
    from pyro.poutine.util import site_is_subsample

    out = {}
    for name, site in trace.nodes.items() if backend == "pyro" else trace.items():
        if site["type"] != "sample" or (backend == "pyro" and site_is_subsample(site)):
            continue
        plates = frozenset(f.name for f in site["cond_indep_stack"])
        out[name] = (bool(site["is_observed"]), plates)
    return out


def check_twins_and_log_joint(spec: ModelSpec, rtol: float = 1e-8, **options) -> None:
    """Both twins trace, with the same sites and plates, and the same log-joint at one point."""
    missing = sorted({"pyro", "numpyro"} - set(spec.backends))
    if missing:
        raise AssertionError(
            f"{spec.name}: no twin for backend(s) {missing}; add them to backends."
        )
    from inference.backends.pyro_backend import canonical_name

    data, config, start = example_problem(spec, **options)
    ptrace = _pyro_trace(spec, data, config, start)
    values = {
        name: site["value"].detach().cpu().numpy()
        for name, site in ptrace.nodes.items()
        if site["type"] == "sample" and not site.get("is_observed", False)
    }
    # Parameters (networks included) enter the NumPyro twin by name, as a fit's raw_params do.
    start = {
        **(start or {}),
        **{
            canonical_name(name): site["value"].detach().cpu().numpy()
            for name, site in ptrace.nodes.items()
            if site["type"] == "param"
        },
    }
    pyro_logp = float(
        sum(
            site["log_prob_sum"].detach()
            for site in ptrace.nodes.values()
            if site["type"] == "sample"
        )
    )
    numpyro_logp, ntrace = _numpyro_log_density(spec, data, config, start, values)
    psig, nsig = site_signature(ptrace, "pyro"), site_signature(ntrace, "numpyro")
    if psig != nsig:
        raise AssertionError(_twin_mismatch_message(spec, psig, nsig))
    if not np.isfinite(pyro_logp) or not np.isclose(pyro_logp, numpyro_logp, rtol=rtol):
        raise AssertionError(
            f"{spec.name}: log-joint at the same point differs: pyro {pyro_logp}, numpyro "
            f"{numpyro_logp}. The twins must write the same distributions: compare each site's "
            "distribution and arguments in the two twins (a scale against a variance or a "
            "precision, a rate against a scale, a missing to_event or plate are the usual causes)."
        )


def check_algorithm_improves(
    spec: ModelSpec, algorithm: str, backend: str, num_steps: int = 40, **options
) -> None:
    """A short fit is finite, improves its objective, and gives an ``arviz.InferenceData``."""
    import inference

    data, _, _ = example_problem(spec, **options)
    options = {**spec.example_options, **options}
    res = inference.fit(
        spec, data, algorithm, backend, num_steps=num_steps, tol=0.0, progress=False, **options
    )
    h = np.asarray(res.history["objective"])
    if not np.all(np.isfinite(h)):
        raise AssertionError(
            f"{spec.name}/{algorithm}/{backend}: non-finite objective {h}. Check the data "
            "scale, the guide's starting values and positivity constraints on scales."
        )
    window = max(1, len(h) // 4)
    if not h[-window:].mean() > h[:window].mean():
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


# --- The spec alone -------------------------------------------------------------------------


def check_spec(spec: ModelSpec) -> None:
    """The spec is complete and consistent; imports nothing of the model. Raises
    ``ModelSpecError`` listing every problem found, each with what to change."""
    from inference.api import ALGORITHMS  # zoo does not import inference when it loads

    name = spec.name
    problems = []
    if not isinstance(name, str) or not name or any(c.isspace() for c in name):
        problems.append(f"name must be a non-empty string without spaces; got {name!r}.")
    if not isinstance(spec.backends, Mapping):
        problems.append(
            "backends must map each backend to its twin's module path, e.g. "
            "{'pyro': 'my_package.pyro_model', 'numpyro': 'my_package.numpyro_model'}."
        )
    else:
        missing = [b for b in BACKENDS if b not in spec.backends]
        unknown = sorted(set(spec.backends) - set(BACKENDS))
        if missing:
            problems.append(
                f"no twin for backend(s) {missing}: every model of the zoo is written for both "
                "Pyro and NumPyro, so that fits, comparisons and the shared checks run on both. "
                f"Add {', '.join(repr(b) for b in missing)} to backends, mapped to the module "
                "path of that twin (e.g. 'my_package.numpyro_model')."
            )
        if unknown:
            problems.append(f"unknown backend(s) {unknown} in backends; valid: {list(BACKENDS)}.")
        not_paths = sorted(b for b, path in spec.backends.items() if not isinstance(path, str))
        if not_paths:
            problems.append(
                f"backends[{not_paths[0]!r}] must be a module path (a string, imported when the "
                "backend is first used), not the module itself."
            )
    unknown = sorted(set(spec.algorithms) - set(ALGORITHMS))
    if not spec.algorithms or unknown:
        problems.append(
            f"algorithms must list some of {sorted(ALGORITHMS)}; got {list(spec.algorithms)}."
        )
    if not all(isinstance(g, str) for g in spec.guides):
        problems.append(f"guides must be a tuple of guide names; got {spec.guides!r}.")
    elif "svi" in spec.algorithms and not spec.guides:
        problems.append(
            "'svi' is listed in algorithms but guides is empty: name at least one guide that "
            "the twins' make_guide(name, config, init) builds (the first is SVI's default)."
        )
    closed = [a for a in ("cavi", "em") if a in spec.algorithms]
    if closed and spec.closed_form is None and spec.conjugate_updates is None:
        problems.append(
            f"{closed} need closed-form updates: set conjugate_updates='my_package.closed_form' "
            "(closed_form for a mixture whose updates start from responsibilities), or drop "
            f"{closed} from algorithms."
        )
    if spec.closed_form is not None and spec.conjugate_updates is not None:
        problems.append(
            "set closed_form (mixtures: updates started from shared responsibilities) or "
            "conjugate_updates (any other model), not both."
        )
    if not isinstance(spec.data, Mapping) or not spec.data:
        problems.append("data must map each data key to a zoo.DataField, e.g. {'x': DataField(2)}.")
    elif not all(isinstance(contract, DataField) for contract in spec.data.values()):
        problems.append("data must map each data key to a zoo.DataField(ndim, kind, doc).")
    if not callable(spec.prepare):
        problems.append("prepare must be a function: prepare(data, **options) -> config.")
    for hook in ("make_data", "summarize", "sample_posterior", "log_likelihood", "check_data"):
        if getattr(spec, hook) is not None and not callable(getattr(spec, hook)):
            problems.append(f"{hook} must be a function or None.")
    if (spec.sample_posterior is None) != (spec.log_likelihood is None):
        problems.append(
            "sample_posterior and log_likelihood come together: evaluation draws global latents "
            "from the one and scores data with the other. Give both, or neither (then every "
            "latent must be local to a data point, in the 'data' plate)."
        )
    if problems:
        raise ModelSpecError(
            f"Model {name!r} does not meet the zoo's contract:\n"
            + "\n".join(f"  - {p}" for p in problems)
            + "\n(docs/extending.md describes every field of ModelSpec.)"
        )


# --- The twins, traced ----------------------------------------------------------------------


def check_registration(spec: ModelSpec, **options) -> None:
    """What every registration checks: the spec (:func:`check_spec`), then both twins import,
    trace on a small data set from ``spec.make_data`` with the same sample sites (observed or
    not) in the same plates, and every guide of ``spec.guides`` samples every latent site of the
    model (discrete sites that an enumerated guide sums out excepted).

    Traces run on the CPU in float64, in a scratch Pyro parameter store, so the caller's store
    and random streams are left as they were. Raises ``ModelSpecError``.
    """
    check_spec(spec)
    twins = {backend: _import_twin(spec, backend) for backend in BACKENDS}
    try:
        data, config, start = example_problem(spec, **options)
    except ModelSpecError:
        raise
    except Exception as err:
        raise ModelSpecError(
            f"Model {spec.name!r}: the example problem could not be built: "
            f"{_describe_error(err)}. make_data(rng, n) must return the data keys "
            f"{sorted(spec.data)} for small n, and prepare(data, **example_options) must "
            "accept them."
        ) from err
    sites = {b: _traced_model(spec, b, data, config, start, None) for b in BACKENDS}
    # site_signature's form: {name: (observed, plate names)}
    psig, nsig = ({name: info[:2] for name, info in sites[b].items()} for b in BACKENDS)
    if psig != nsig:
        raise ModelSpecError(_twin_mismatch_message(spec, psig, nsig))
    for guide in spec.guides:
        for backend in BACKENDS:
            temperature = _svi_temperature(twins[backend], guide, config)
            model_sites = sites[backend]
            if temperature is not None:  # e.g. a relaxed site in place of a discrete one
                model_sites = _traced_model(spec, backend, data, config, start, temperature)
            guide_sites = _traced_guide(spec, backend, guide, data, config, start, temperature)
            _check_guide_covers_model(
                spec, backend, guide, twins[backend], model_sites, guide_sites
            )


def _import_twin(spec, backend):
    path = spec.backends[backend]
    try:
        twin = spec.twin(backend)
    except Exception as err:
        raise ModelSpecError(
            f"Model {spec.name!r}: its {BACKEND_TITLES[backend]} twin {path!r} does not import: "
            f"{_describe_error(err)}. backends holds module paths; check the path and that the "
            "module imports on its own (and is not named pyro.py or numpyro.py)."
        ) from err
    if not (hasattr(twin, "model") or hasattr(twin, "make_model")):
        raise ModelSpecError(
            f"Model {spec.name!r}: twin {path!r} defines neither model(data, config, "
            "temperature=None, init=None) nor make_model(config, init) (for models with networks)."
        )
    if spec.guides and not hasattr(twin, "make_guide"):
        raise ModelSpecError(
            f"Model {spec.name!r}: twin {path!r} has no make_guide(name, config, init), which "
            f"SVI calls to build the guides {list(spec.guides)}."
        )
    return twin


def _svi_temperature(twin, guide, config):
    """The temperature SVI passes at its first step (``inference.svi``), so model and guide are
    traced as SVI will call them: a relaxed (Gumbel-softmax) guide at its starting temperature,
    a twin's own schedule at step 0, else None."""
    if guide == "gumbel":
        return 1.0
    if hasattr(twin, "temperature_schedule"):
        return twin.temperature_schedule(config, 1)(0)
    return None


def _backend_problem(backend, data, config):
    from inference.api import get_backend

    back = get_backend(backend)
    device = back.resolve_device("cpu")
    arrays = {k: back.asarray(v, device, "float64") for k, v in data.items()}
    return back, arrays, back.backend_config(config, device, "float64")


def _traced(spec, backend, what, make, data, config, temperature) -> dict:
    """Trace ``make(backend_config)(data, config, temperature=...)``, a model or a guide; return
    ``{site name: (observed, plate names, discrete and enumerable)}`` of its sample sites."""
    back, bdata, bconfig = _backend_problem(backend, data, config)
    try:
        if backend == "pyro":
            import pyro
            import torch

            if temperature is not None:
                temperature = torch.as_tensor(temperature, dtype=torch.float64)
            with pyro.get_param_store().scope(), torch.random.fork_rng():
                torch.manual_seed(0)
                fn = make(bconfig)
                trace = pyro.poutine.trace(fn).get_trace(bdata, bconfig, temperature=temperature)
            return _site_summary(trace, "pyro")
        import jax
        import jax.numpy as jnp
        from numpyro import handlers

        summary = {}

        def run():
            fn = make(bconfig)
            trace = handlers.trace(handlers.seed(fn, rng_seed=0)).get_trace(
                bdata, bconfig, temperature=temperature
            )
            summary.update(_site_summary(trace, "numpyro"))
            return jnp.zeros(())

        # Abstract evaluation: the sites and plates without running (and compiling, op by op)
        # a single array operation.
        jax.eval_shape(run)
        return summary
    except Exception as err:
        raise ModelSpecError(
            f"Model {spec.name!r}: tracing the {what} of the {BACKEND_TITLES[backend]} twin "
            f"({spec.backends[backend]}) on make_data's data failed: {_describe_error(err)}. "
            "It is called as (data, config, temperature=...) with data and config converted to "
            "the backend's arrays (float64, CPU)."
        ) from err


def _site_summary(trace, backend) -> dict:
    """{name: (observed, plate names, enumerable)} of a trace's sample sites, minibatch
    bookkeeping left out."""
    from pyro.poutine.util import site_is_subsample

    nodes = trace.nodes.items() if backend == "pyro" else trace.items()
    return {
        name: (
            bool(site["is_observed"]),
            frozenset(f.name for f in site["cond_indep_stack"]),
            bool(getattr(site["fn"], "has_enumerate_support", False)),
        )
        for name, site in nodes
        if site["type"] == "sample" and not (backend == "pyro" and site_is_subsample(site))
    }


def _traced_model(spec, backend, data, config, start, temperature):
    return _traced(
        spec,
        backend,
        "model",
        lambda bconfig: spec.build_model(backend, bconfig, start),
        data,
        config,
        temperature,
    )


def _traced_guide(spec, backend, guide, data, config, start, temperature):
    return _traced(
        spec,
        backend,
        f"guide {guide!r}",
        lambda bconfig: spec.twin(backend).make_guide(guide, bconfig, start),
        data,
        config,
        temperature,
    )


def _check_guide_covers_model(spec, backend, guide, twin, model_sites, guide_sites) -> None:
    enumerated = guide in getattr(twin, "ENUMERATED_GUIDES", ())
    missing = sorted(
        name
        for name, (observed, _, enumerable) in model_sites.items()
        if not observed and name not in guide_sites and not (enumerated and enumerable)
    )
    where = f"guide {guide!r} of the {BACKEND_TITLES[backend]} twin ({spec.backends[backend]})"
    if missing:
        discrete = [name for name in missing if model_sites[name][2]]
        hint = (
            f" For a discrete site that SVI should sum out instead ({discrete}), list the guide "
            "in the twin's ENUMERATED_GUIDES."
            if discrete
            else ""
        )
        raise ModelSpecError(
            f"Model {spec.name!r}: {where} does not sample the latent site(s) {missing} of the "
            "model. SVI needs a distribution over every latent variable: add a sample statement "
            f"with the same name to the guide, e.g. sample({missing[0]!r}, ...).{hint}"
        )
    unknown = sorted(name for name in guide_sites if name not in model_sites)
    if unknown:
        raise ModelSpecError(
            f"Model {spec.name!r}: {where} samples site(s) {unknown} that the model does not "
            f"have (its sites: {sorted(model_sites)}). Guide sites take the name of the model "
            "site they stand for."
        )


def _twin_mismatch_message(spec, psig: dict, nsig: dict) -> str:
    lines = []
    only_pyro, only_numpyro = sorted(set(psig) - set(nsig)), sorted(set(nsig) - set(psig))
    if only_pyro:
        lines.append(f"sample site(s) only in the Pyro twin: {only_pyro}")
    if only_numpyro:
        lines.append(f"sample site(s) only in the NumPyro twin: {only_numpyro}")
    for name in sorted(set(psig) & set(nsig)):
        (p_observed, p_plates), (n_observed, n_plates) = psig[name], nsig[name]
        if p_plates != n_plates:
            lines.append(
                f"site {name!r} is in plate(s) {sorted(p_plates)} in the Pyro twin but "
                f"{sorted(n_plates)} in the NumPyro twin"
            )
        if p_observed != n_observed:
            lines.append(
                f"site {name!r} is observed in the {'Pyro' if p_observed else 'NumPyro'} twin only"
            )
    return (
        f"Model {spec.name!r}: the Pyro twin ({spec.backends['pyro']}) and the NumPyro twin "
        f"({spec.backends['numpyro']}) do not match:\n"
        + "\n".join(f"  - {line}" for line in lines)
        + "\nGive every sample site and plate the same name in both twins and observe the same "
        "sites: the inference layer, saved fits and these checks match them by name."
    )


def _describe_error(err: BaseException) -> str:
    """``Type: message (at file:line in function)``, the innermost frame, for reports."""
    frames = traceback.extract_tb(err.__traceback__)
    where = ""
    if frames:
        frame = frames[-1]
        where = f" (at {frame.filename}:{frame.lineno} in {frame.name})"
    return f"{type(err).__name__}: {err}{where}"


# --- The whole suite, as a report -----------------------------------------------------------


def supported_runs(spec: ModelSpec, algorithms=None, backends=None) -> list[tuple[str, str]]:
    """(algorithm, backend) pairs the spec supports, among ``algorithms`` (default: all of
    ``inference.ALGORITHMS``) and ``backends`` (default: both)."""
    from inference.api import ALGORITHMS

    algorithms = list(ALGORITHMS) if algorithms is None else list(algorithms)
    backends = list(BACKENDS) if backends is None else list(backends)
    unknown = sorted(set(algorithms) - set(ALGORITHMS)) + sorted(set(backends) - set(BACKENDS))
    if unknown:
        raise ValueError(
            f"Unknown algorithm(s) or backend(s) {unknown}; valid algorithms are "
            f"{sorted(ALGORITHMS)}, valid backends {list(BACKENDS)}."
        )
    return [(a, b) for a in algorithms for b in backends if ALGORITHMS[a].supports(spec, b)]


@dataclass
class CheckResult:
    """One check of :func:`check_model`: ``status`` is ``"pass"``, ``"fail"`` or ``"skip"``."""

    name: str
    contract: str
    status: str
    message: str = ""
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == "pass"


@dataclass
class ConformanceReport:
    """What :func:`check_model` found. ``print(report)`` shows every check; ``report.passed``
    is True when all passed; ``report.raise_for_failures()`` raises ``AssertionError`` with the
    report (for a test)."""

    model: str
    results: list[CheckResult] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def failures(self) -> list[CheckResult]:
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
        if not self.passed:
            raise AssertionError(str(self))


def check_model(
    spec: ModelSpec | str, *, algorithms=None, backends=None, num_steps: int = 40, **options
) -> ConformanceReport:
    """Run the zoo's conformance suite on one model and report every check.

    The checks are those ``tests/test_conformance.py`` runs on every registered model:
    ``registration`` (:func:`check_registration`), ``twins_and_log_joint``
    (:func:`check_twins_and_log_joint`) and, for each (algorithm, backend) the spec supports
    (:func:`supported_runs`, narrowed by ``algorithms`` and ``backends``), ``"algorithm/backend"``
    (:func:`check_algorithm_improves` with ``num_steps``). ``options`` are model options for the
    example problem (default: ``spec.example_options``). When registration fails the rest are
    skipped: their failures would only repeat it. Never raises for a failing model; read the
    report (``report.passed``, ``print(report)``).
    """
    if not isinstance(spec, ModelSpec):
        from zoo import get_model

        spec = get_model(spec, check=False)
    checks = [
        ("registration", CONTRACTS["registration"], lambda: check_registration(spec, **options)),
        (
            "twins_and_log_joint",
            CONTRACTS["twins_and_log_joint"],
            lambda: check_twins_and_log_joint(spec, **options),
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
            status, message = "fail", f"raised {_describe_error(err)}"
        report.results.append(
            CheckResult(name, contract, status, message, time.perf_counter() - start)
        )
    return report
