"""The contract every model of the zoo meets on its own, as functions a test (or an extender)
can call. Nothing here fits a model: the checks that do (a short fit with every algorithm that
supports the model) are ``inference.tools.conformance``, whose ``check_model`` runs these too.

* :func:`check_spec` checks the spec alone, with no imports; every registration runs it.
* :func:`check_registration` also imports both twins and traces them on the spec's example data:
  the same sample sites and plates, and every guide samples every latent site. ``zoo.register``
  runs it by default, and a plugin's model gets it the first time it is fetched.
* :func:`check_twins_and_log_joint`: both twins have the same model parameters (names and
  constraints), start them from ``init``, and give the same log-joint at the same point: the
  starting one, and one with every parameter and float option moved off its start.
* :func:`check_twin_guides`: each guide is the same in both twins (parameter names, sites,
  starting from ``init``, and log-density at the same parameters and draws, at both points).

Each check takes a :class:`~zoo.spec.ModelSpec` and raises ``ModelSpecError`` (registration) or
``AssertionError`` with a message that names the broken contract and how to fix it.
"""

from __future__ import annotations

import inspect
import traceback
import warnings
from collections.abc import Mapping
from typing import NamedTuple

import numpy as np

from zoo.array_namespace import TorchOps, convert_config
from zoo.plates import is_subsample_site
from zoo.spec import BACKENDS, DataField, GuideKind, ModelSpec, ModelSpecError, legacy_constants
from zoo.updates import ClosedFormUpdates
from zoo.weights import canonical_name, flatten_params

BACKEND_TITLES = {"pyro": "Pyro", "numpyro": "NumPyro"}


def example_problem(spec: ModelSpec, n: int = 60, seed: int = 0, **options):
    """Small data from the spec's generator, its config, and a start point for every backend
    (for updates that start from responsibilities, the guides' starting values after one update
    from k-means responsibilities, as SVI starts; else None)."""
    if spec.make_data is None:
        raise ModelSpecError(
            f"{spec.name}: the spec needs make_data(rng, n) -> dict of arrays: the shared checks "
            "trace and fit the model on a small synthetic data set from it."
        )
    data = spec.validate_data(spec.make_data(np.random.default_rng(seed), n))
    options = {**spec.example_options, **options}
    config = spec.prepare(data, **options)
    start = None
    if spec.updates is not None:
        resp = spec.updates.initial_point(spec.name, data, config, None, seed)
        as_tensor = backend_arrays("pyro")
        start = spec.updates.guide_start(
            data,
            resp,
            convert_config(config, as_tensor),
            TorchOps(),
            as_tensor,
            lambda t: t.numpy(),
        )
    return data, config, start


def backend_arrays(backend: str):
    """numpy -> the backend's float64 CPU arrays: what the checks trace twins on."""
    if backend == "pyro":
        import torch

        return lambda a: torch.as_tensor(np.asarray(a), dtype=torch.float64)
    import jax

    # The twins are traced in float64, which JAX allows only with its process-wide 64-bit mode
    # (the NumPyro backend of the inference layer turns it on as well).
    jax.config.update("jax_enable_x64", True)
    import jax.numpy as jnp

    return lambda a: jnp.asarray(np.asarray(a), dtype=jnp.float64)


def _pyro_traced(make, data, config, temperature=None, seed=0):
    """``make(config)``, a Pyro model or guide built on the config's torch arrays, traced once on
    ``data`` at ``temperature``: in a scratch parameter store and from torch seed ``seed``, so
    the caller's store and random stream are left as they were."""
    import pyro
    import torch

    _, tdata, tconfig = _backend_problem("pyro", data, config)
    if temperature is not None:
        temperature = torch.as_tensor(temperature, dtype=torch.float64)
    # devices=[]: the traces are on the CPU, and forking CUDA's streams would initialise CUDA
    # (a registration in a process that forks workers later must not).
    with pyro.get_param_store().scope(), torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        fn = make(tconfig)
        return pyro.poutine.trace(fn).get_trace(tdata, tconfig, temperature=temperature)


class _Point(NamedTuple):
    """What a Pyro trace holds, to score the NumPyro twin at the same point."""

    params: dict  # by the names of a fit's raw_params (canonical_name)
    draws: dict  # the latent draws, by site name
    indices: dict  # a subsampling plate's minibatch rows, by plate name
    logp: float  # the sum of every sample site's log-density, observed ones and factors included


def _pyro_point(trace) -> _Point:
    """A Pyro trace's parameters, draws, subsample indices and log-density."""
    trace.compute_log_prob()

    def numpy(site):
        return site["value"].detach().cpu().numpy()

    samples, indices = [], {}
    for name, site in trace.nodes.items():
        if site["type"] == "sample":
            if is_subsample_site(site):
                indices[name] = numpy(site)
            else:
                samples.append((name, site))
    params = {
        canonical_name(name): numpy(site)
        for name, site in trace.nodes.items()
        if site["type"] == "param"
    }
    draws = {name: numpy(site) for name, site in samples if not site["is_observed"]}
    logp = float(sum(site["log_prob_sum"].detach() for _, site in samples))
    return _Point(params, draws, indices, logp)


#: NumPyro's names for constraints that torch writes with their bounds alone.
_CONSTRAINT_ALIASES = {
    "Positive": "GreaterThan",
    "Nonnegative": "GreaterThanEq",
    "UnitInterval": "Interval",
}


def _unwrapped(constraint):
    """``constraint`` without the wrappers that make a batch an event (``independent``)."""
    while hasattr(constraint, "base_constraint"):
        constraint = constraint.base_constraint
    return constraint


def _constraint_name(constraint) -> str:
    """A constraint as both backends name it: its class and scalar bounds, without the wrappers
    that make a batch an event (``GreaterThan(lower_bound=0.0)`` for torch's ``positive`` and
    NumPyro's alike)."""
    constraint = _unwrapped(constraint)
    name = type(constraint).__name__.lstrip("_")
    values = {bound: getattr(constraint, bound, None) for bound in ("lower_bound", "upper_bound")}
    bounds = [
        f"{bound}={float(value)!r}"
        for bound, value in values.items()
        if value is not None and np.size(value) == 1
    ]
    return f"{_CONSTRAINT_ALIASES.get(name, name)}({', '.join(bounds)})"


def _pyro_constraints(trace) -> dict:
    """``{raw_params name: constraint name}`` of a Pyro trace's parameters."""
    from torch.distributions import constraints

    return {
        canonical_name(name): _constraint_name(
            (site.get("kwargs") or {}).get("constraint", constraints.real)
        )
        for name, site in trace.nodes.items()
        if site["type"] == "param"
    }


def _numpyro_constraints(trace) -> dict:
    """:func:`_pyro_constraints` of a NumPyro trace (a network's leaves by the names
    ``flatten_params`` gives them, each with its site's constraint)."""
    from numpyro.distributions import constraints

    out = {}
    for name, site in trace.items():
        if site["type"] == "param":
            constraint = _constraint_name(site["kwargs"].get("constraint", constraints.real))
            out.update(dict.fromkeys(flatten_params({name: site["value"]}), constraint))
    return out


def _numpyro_log_density(spec, data, config, start, values):
    """The NumPyro model's log-density at ``values`` (draws and a plate's subsample indices by
    name, which NumPyro substitutes into its plates), and its trace."""
    import jax.numpy as jnp
    from numpyro import handlers
    from numpyro.infer.util import log_density

    _, jdata, jconfig = _backend_problem("numpyro", data, config)
    params = {k: jnp.asarray(v) for k, v in values.items()}
    model = spec.build_model("numpyro", jconfig, start)
    # Seeded: a site the Pyro twin does not have is drawn, and shows up as a difference.
    logp, trace = log_density(handlers.seed(model, rng_seed=0), (jdata, jconfig), {}, params)
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


#: How far the second point of the twin checks moves each parameter off its start: a seeded
#: standard normal draw times this, added in the parameter's unconstrained coordinates
#: (``torch.distributions.transform_to`` of its constraint), so the point stays in the support.
PARAMETER_MOVE = 0.5
#: What the second point of the twin checks multiplies each float option of ``prepare`` by
#: (divides by, where ``prepare`` refuses the product). A rate written where the other twin has
#: a scale, or a variance where it has a scale, gives the same density wherever the parameter or
#: option is 1, and starting values and an example's options often are.
OPTION_FACTOR = 1.37


class _CheckPoint(NamedTuple):
    """Where the twin checks compare the twins."""

    options: dict  # model options for the example problem
    moved: bool  # parameters moved off their start (PARAMETER_MOVE)
    changed: str  # the options moved off their values, for messages ("" for none)

    def describe(self, params_moved: bool) -> str:
        """Where the point is, for a message."""
        if not self.moved:
            return "at the starting point"
        parts = ["parameters moved off their start"] if params_moved else []
        parts += [f"options {self.changed}"] if self.changed else []
        return "at " + " and ".join(parts or ["the starting point"])


def _check_points(spec: ModelSpec, options: dict) -> list[_CheckPoint]:
    """The two points the twin checks compare the twins at: the starting parameters with the
    given options, then every parameter moved off its start (:func:`moved_params`) with every
    float option moved off its value (:func:`moved_options`)."""
    given = {**spec.example_options, **options}
    moved = moved_options(spec, **options)
    changed = ", ".join(
        f"{k}={v!r}" for k, v in moved.items() if _is_float(v) and given.get(k) != v
    )
    return [_CheckPoint(given, False, ""), _CheckPoint(moved, True, changed)]


def moved_options(spec: ModelSpec, n: int = 60, seed: int = 0, **options) -> dict:
    """The example problem's options (``spec.example_options`` under ``options``) with each
    float option of ``spec.prepare`` moved off its value: multiplied by ``OPTION_FACTOR``, or
    divided by it where ``prepare`` refuses the product, or left as it is where ``prepare``
    refuses both. An option whose value is None reads its value from the config where the
    config has a float field of that name (a default that ``prepare`` resolves). Ints, strings,
    arrays and the rest are left as they are.

    The twin checks compare the twins at these options too: a rate written where the other twin
    has a scale gives the same density wherever the option is 1, as an example's often is.

    Parameters
    ----------
    spec : ModelSpec
        The model.
    n, seed : int
        The example problem's size and seed (:func:`example_problem`).
    **options
        Model options, over ``spec.example_options``.

    Returns
    -------
    dict
        Every option given, and every float option of ``prepare``, by name.

    Examples
    --------
    >>> import zoo
    >>> from zoo.testing import moved_options
    >>> moved_options(zoo.get_model("gmm"))  # K is an int: only reg_covar moves
    {'K': 3, 'reg_covar': 1.37e-06}
    """
    if spec.make_data is None:
        return {**spec.example_options, **options}
    data = spec.validate_data(spec.make_data(np.random.default_rng(seed), n))
    moved = {**spec.example_options, **options}
    config = spec.prepare(data, **moved)
    parameters = list(inspect.signature(spec.prepare).parameters.values())[1:]
    for parameter in parameters:
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD):
            continue
        value = moved.get(parameter.name, parameter.default)
        if value is None or value is parameter.empty:
            value = getattr(config, parameter.name, None)
        if not _is_float(value):
            continue
        for candidate in (value * OPTION_FACTOR, value / OPTION_FACTOR):
            try:
                spec.prepare(data, **{**moved, parameter.name: candidate})
            except Exception:  # prepare refuses it: try the other, or leave the option be
                continue
            moved[parameter.name] = candidate
            break
    return moved


def _is_float(value) -> bool:
    """A real float (numpy's included), not a bool or an int."""
    return isinstance(value, float) and np.isfinite(value)


def moved_params(trace, scale: float = PARAMETER_MOVE, seed: int = 0) -> dict:
    """The param sites of a Pyro trace, each moved off its value in its unconstrained
    coordinates by ``scale`` times a standard normal draw (numpy's generator seeded by
    ``seed``, in the trace's order), by the names of a fit's raw_params (numpy arrays)."""
    import torch
    from torch.distributions import constraints, transform_to

    rng = np.random.default_rng(seed)
    moved = {}
    for name, site in trace.nodes.items():
        if site["type"] != "param":
            continue
        transform = transform_to((site.get("kwargs") or {}).get("constraint", constraints.real))
        free = transform.inv(site["value"].detach())
        step = torch.as_tensor(rng.standard_normal(tuple(free.shape)), dtype=free.dtype)
        moved[canonical_name(name)] = transform(free + scale * step).cpu().numpy()
    return moved


def _check_starts_from_init(where: str, backend: str, init, params: dict) -> None:
    """Raise ``AssertionError`` unless each traced parameter of ``params`` that ``init`` names
    holds init's value: a twin that ignores init would start every fit, and evaluate every
    fitted result, from its own value."""
    init = init or {}
    ignored = [
        name
        for name, value in params.items()
        if name in init
        and not (
            np.shape(value) == np.shape(init[name])
            and np.allclose(value, init[name], rtol=1e-6, atol=1e-12)
        )
    ]
    if ignored:
        first = ignored[0]
        raise AssertionError(
            f"{where} of the {BACKEND_TITLES[backend]} twin does not start from init: "
            f"parameter(s) {ignored} hold other values than init gave them ({first!r}: init "
            f"{np.asarray(init[first]).ravel()[:4]}, traced {np.asarray(params[first]).ravel()[:4]}"
            "). Read each param site's starting value from init where init holds its name, "
            "as every other parameter of the twin does: a fit's raw_params, init=, a "
            "comparison's shared start and a saved fit all reach the twin through it."
        )


def check_twins_and_log_joint(spec: ModelSpec, rtol: float = 1e-8, **options) -> None:
    """Both twins trace, with the same sites and plates, the same model parameters (names and
    constraints), start their parameters from ``init``, and give the same log-joint at two
    points.

    The Pyro twin is traced on the example problem (``spec.make_data``, in float64 on the
    CPU); the NumPyro twin's log density is evaluated at the values the Pyro trace drew (its
    parameters passed by name, as ``init``), and the two log-joints must agree. The models'
    param sites must have the same names and constraints, as a fit's ``raw_params`` moves
    between backends by name (``init=res.raw_params``), and each twin's traced parameters must
    be the values ``init`` gave them.

    The first point is the starting one, with ``options``; the second moves every model
    parameter off its start (:func:`moved_params`) and every float option of ``prepare`` off
    its value (:func:`moved_options`): a rate written where the other twin has a scale gives
    the same log-joint wherever the value is 1.

    Parameters
    ----------
    spec : ModelSpec
        The model.
    rtol : float
        The relative tolerance between the two log-joints.
    **options
        Model options for the example problem, over ``spec.example_options``.

    Returns
    -------
    None

    Raises
    ------
    AssertionError
        A twin is missing, the twins' sample sites or plates differ, their models' param sites
        have other names or constraints, a twin does not start a parameter from ``init``, or
        their log-joints differ at either point (or are not finite); the message says what to
        compare in the two twins.
    ModelSpecError
        The spec has no ``make_data`` to build the example problem from.

    Examples
    --------
    >>> import zoo
    >>> from zoo.testing import check_twins_and_log_joint
    >>> check_twins_and_log_joint(zoo.get_model("gmm"))  # passes: returns None
    """
    _require_both_twins(spec)
    for point in _check_points(spec, options):
        _check_log_joint_at(spec, point, rtol)


def _traced_at(traced, start, point: _CheckPoint):
    """``(trace, start, moved)``: ``traced(start)``, a Pyro trace from ``start``; at a point
    that moves parameters, traced again from its parameters moved off their values
    (:func:`moved_params`), which ``start`` then holds and ``moved`` names."""
    trace = traced(start)
    moved = moved_params(trace) if point.moved else {}
    if moved:
        start = {**(start or {}), **moved}
        trace = traced(start)
    return trace, start, moved


def _check_log_joint_at(spec: ModelSpec, point: _CheckPoint, rtol: float) -> None:
    data, config, start = example_problem(spec, **point.options)

    def traced(init):
        return _pyro_traced(lambda tconfig: spec.build_model("pyro", tconfig, init), data, config)

    ptrace, start, moved = _traced_at(traced, start, point)
    point_values = _pyro_point(ptrace)
    where = f"{spec.name}: the model"
    _check_starts_from_init(where, "pyro", start, point_values.params)
    pyro_logp = point_values.logp
    # Parameters (networks included) enter the NumPyro twin by name, as a fit's raw_params do.
    start = {**(start or {}), **point_values.params}
    values = {**point_values.draws, **point_values.indices}
    numpyro_logp, ntrace = _numpyro_log_density(spec, data, config, start, values)
    psig, nsig = site_signature(ptrace, "pyro"), site_signature(ntrace, "numpyro")
    if psig != nsig:
        raise AssertionError(_twin_mismatch_message(spec, psig, nsig))
    # A NumPyro param site under another name keeps its own default, which may well give the
    # same log-joint; the names and constraints are compared themselves.
    _check_same_params(where, _pyro_constraints(ptrace), _numpyro_constraints(ntrace))
    _check_starts_from_init(where, "numpyro", start, _numpyro_params(ntrace))
    if not np.isfinite(pyro_logp) or not np.isclose(pyro_logp, numpyro_logp, rtol=rtol):
        where_point = point.describe(bool(moved))
        raise AssertionError(
            f"{spec.name}: log-joint at the same point differs ({where_point}): pyro "
            f"{pyro_logp}, numpyro {numpyro_logp}. The twins must write the same distributions: "
            "compare each site's distribution and arguments in the two twins (a scale against a "
            "variance or a precision, a rate against a scale, a missing to_event or plate are "
            "the usual causes)."
        )


def _numpyro_params(trace) -> dict:
    """The param sites of a NumPyro trace by the names of a fit's raw_params (numpy)."""
    return flatten_params(
        {name: site["value"] for name, site in trace.items() if site["type"] == "param"}
    )


def _require_both_twins(spec: ModelSpec) -> None:
    missing = sorted(set(BACKENDS) - set(spec.backends))
    if missing:
        raise AssertionError(
            f"{spec.name}: no twin for backend(s) {missing}; add them to backends."
        )


def check_twin_guides(spec: ModelSpec, rtol: float = 1e-8, **options) -> None:
    """Each guide of ``spec.guides`` is the same distribution in both twins: the same parameter
    names and constraints, the same sample sites, parameters started from ``init``, and the
    same log-density at the same parameters and draws, at two points.

    Each Pyro guide is traced on the example problem (``spec.make_data``, float64 on the CPU)
    at the temperature SVI starts from, in a scratch parameter store; the NumPyro guide is
    built from the Pyro guide's parameters (``init``, networks included) and its log-density
    evaluated at the Pyro trace's draws. Each twin's traced parameters must be the values
    ``init`` gave them. The log-joint check (:func:`check_twins_and_log_joint`) holds the
    models to each other; this holds the guides: two twins whose guides differ fit different
    posteriors, and their ELBOs differ at the same parameters.

    The first point is the guide's start, with ``options``; the second moves every parameter
    of the guide off its start (:func:`moved_params`) and every float option of ``prepare``
    off its value (:func:`moved_options`): a rate written where the other twin has a scale
    gives the same log-density wherever the value is 1.

    Parameters
    ----------
    spec : ModelSpec
        The model.
    rtol : float
        The relative tolerance between the two log-densities.
    **options
        Model options for the example problem, over ``spec.example_options``.

    Returns
    -------
    None

    Raises
    ------
    AssertionError
        A twin is missing; a guide's parameter names, their constraints or its sample sites
        differ between the twins; a twin does not start a parameter from ``init``; or its
        log-densities differ at either point (or are not finite). The message names the guide
        and what to compare.
    ModelSpecError
        The spec has no ``make_data`` to build the example problem from.

    Examples
    --------
    >>> import zoo
    >>> from zoo.testing import check_twin_guides
    >>> check_twin_guides(zoo.get_model("gmm"))  # passes: returns None
    """
    _require_both_twins(spec)
    for point in _check_points(spec, options):
        data, config, start = example_problem(spec, **point.options)
        for guide in spec.guides:
            _check_guide_at(spec, guide, point, (data, config, start), rtol)


def _check_guide_at(spec: ModelSpec, guide: str, point: _CheckPoint, problem, rtol) -> None:
    data, config, start = problem
    kind = spec.guide_kind(guide, "pyro")
    temperature = _svi_temperature(spec.twin("pyro"), kind, config)

    def traced(init):
        return _pyro_traced(_guide_maker(spec, "pyro", guide, init), data, config, temperature)

    trace, start, moved = _traced_at(traced, start, point)
    point_values = _pyro_point(trace)
    params, draws, pyro_logq = point_values.params, point_values.draws, point_values.logp
    where = f"{spec.name}: guide {guide!r}"
    _check_starts_from_init(where, "pyro", start, params)
    init = {**(start or {}), **params}
    numpyro_trace, numpyro_logq = _numpyro_guide_density(
        spec, guide, data, config, init, {**draws, **point_values.indices}, temperature
    )
    _check_same_params(where, _pyro_constraints(trace), _numpyro_constraints(numpyro_trace))
    _check_starts_from_init(where, "numpyro", init, _numpyro_params(numpyro_trace))
    numpyro_draws = {
        name
        for name, site in numpyro_trace.items()
        if site["type"] == "sample" and not site["is_observed"] and not is_subsample_site(site)
    }
    if set(draws) != numpyro_draws:
        raise AssertionError(
            f"{where} samples other sites in the two twins: Pyro {sorted(draws)}, NumPyro "
            f"{sorted(numpyro_draws)}."
        )
    if not np.isfinite(pyro_logq) or not np.isclose(pyro_logq, numpyro_logq, rtol=rtol):
        raise AssertionError(
            f"{where}: log-density at the same parameters and draws differs "
            f"({point.describe(bool(moved))}): pyro {pyro_logq}, numpyro {numpyro_logq}. The "
            "twins' guides must write the same distributions: compare each site's distribution "
            "and arguments, and each parameter's constraint (a rate against a scale, a scale "
            "against a variance, a softplus against an exp, a missing to_event or plate are "
            "the usual causes)."
        )


def _check_same_params(where: str, pyro_constraints: dict, numpyro_constraints: dict) -> None:
    """Raise ``AssertionError`` unless the twins' param sites (``{raw_params name: constraint
    name}``, :func:`_pyro_constraints` and :func:`_numpyro_constraints`) have the same names
    and constraints: ``init=res.raw_params`` moves a fit between backends by these names, and
    the optimiser moves each parameter through its constraint's transform."""
    only_pyro = sorted(set(pyro_constraints) - set(numpyro_constraints))
    only_numpyro = sorted(set(numpyro_constraints) - set(pyro_constraints))
    if only_pyro or only_numpyro:
        raise AssertionError(
            f"{where} has other parameters in the two twins: only in Pyro {only_pyro}, only in "
            f"NumPyro {only_numpyro}. Name each param site the same in both twins: a fit's "
            "raw_params, init and saved fits hold them by name."
        )
    constrained_otherwise = [
        f"{name!r} ({constraint} in Pyro, {numpyro_constraints[name]} in NumPyro)"
        for name, constraint in sorted(pyro_constraints.items())
        if constraint != numpyro_constraints[name]
    ]
    if constrained_otherwise:
        raise AssertionError(
            f"{where} constrains parameters otherwise in the two twins: "
            f"{', '.join(constrained_otherwise)}. The optimiser moves each parameter on the "
            "real line through its constraint's transform: give each param site the same "
            "constraint in both twins (real when none is given)."
        )


def _numpyro_guide_density(spec, guide, data, config, init, values, temperature):
    """The NumPyro guide built from ``init`` and scored at ``values`` (draws and a plate's
    subsample indices by name): ``(its trace, its log-density)``."""
    import jax.numpy as jnp
    from numpyro import handlers
    from numpyro.infer.util import log_density

    _, jdata, jconfig = _backend_problem("numpyro", data, config)
    fn = _guide_maker(spec, "numpyro", guide, init)(jconfig)
    # Seeded: a site the Pyro guide does not have is drawn, and shows up as a difference.
    logq, trace = log_density(
        handlers.seed(fn, rng_seed=0),
        (jdata, jconfig),
        {"temperature": temperature},
        {k: jnp.asarray(v) for k, v in values.items()},
    )
    return trace, float(logq)


# --- The spec alone -------------------------------------------------------------------------


def check_spec(spec: ModelSpec) -> None:
    """The spec is complete and consistent; imports nothing of the model. Raises
    ``ModelSpecError`` listing every problem found, each with what to change.

    Every registration runs it: the name, a twin for each backend, the data contract, the
    hooks (functions or None, ``sample_posterior`` with ``log_likelihood``), the closed-form
    updates' declaration and the sampling hooks.

    Parameters
    ----------
    spec : ModelSpec
        The model.

    Returns
    -------
    None

    Raises
    ------
    ModelSpecError
        Every problem found, one per line.

    Examples
    --------
    >>> import dataclasses
    >>> import zoo
    >>> from zoo.testing import check_spec
    >>> spec = zoo.get_model("gmm")
    >>> check_spec(spec)  # passes: returns None
    >>> pyro_only = dataclasses.replace(
    ...     spec, name="pyro_only", backends={"pyro": "zoo.gmm.pyro_model"}
    ... )
    >>> check_spec(pyro_only)
    Traceback (most recent call last):
    ...
    zoo.spec.ModelSpecError: Model 'pyro_only' does not meet the zoo's contract:
      - no twin for backend(s) ['numpyro']: every model of the zoo is written for both ...
    """
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
    if not isinstance(spec.guides, tuple) or not all(isinstance(g, str) for g in spec.guides):
        problems.append(f"guides must be a tuple of guide names; got {spec.guides!r}.")
    elif len(set(spec.guides)) < len(spec.guides):
        repeated = sorted({g for g in spec.guides if spec.guides.count(g) > 1})
        problems.append(
            f"guides lists {repeated} more than once; name each guide once (a fit, a comparison "
            "and the checks pick a guide by its name)."
        )
    problems.extend(_guide_kind_problems(spec))
    if spec.updates is not None:
        if not isinstance(spec.updates, ClosedFormUpdates):
            problems.append(
                "updates must be a zoo.ClosedFormUpdates(module, objective=...) naming the "
                f"closed-form updates; got {spec.updates!r}."
            )
        else:
            problems.extend(spec.updates.problems())
    if not spec.guides and spec.updates is None:
        problems.append(
            "nothing can fit this model: name its guides (for SVI) or its closed-form updates "
            "(updates=zoo.ClosedFormUpdates(...), for coordinate-ascent VI or EM)."
        )
    twin = spec.maximum_likelihood_twin
    if twin is not None and (not isinstance(twin, str) or twin == name):
        problems.append(
            "maximum_likelihood_twin must be the registered name of another model (this model "
            f"without its priors); got {twin!r}."
        )
    if not isinstance(spec.numerical_advice, str):
        problems.append("numerical_advice must be a string (a sentence of advice).")
    coordinates = spec.guide_coordinates
    if isinstance(coordinates, bool) or not isinstance(coordinates, int) or coordinates < 1:
        problems.append(
            "guide_coordinates must be a positive int (the revision of the guides' parameter "
            f"coordinates, starting at 1); got {coordinates!r}."
        )
    if not isinstance(spec.data, Mapping) or not spec.data:
        problems.append("data must map each data key to a zoo.DataField, e.g. {'x': DataField(2)}.")
    elif not all(isinstance(contract, DataField) for contract in spec.data.values()):
        problems.append("data must map each data key to a zoo.DataField(ndim, kind, doc).")
    else:
        for key, contract in spec.data.items():
            problems.extend(contract.problems(key))
    if not callable(spec.prepare):
        problems.append("prepare must be a function: prepare(data, **options) -> config.")
    hooks = ("make_data", "summarize", "sample_posterior", "log_likelihood", "check_data")
    hooks += ("draws_from_sites", "summarize_draws", "sites_from_params", "exact_posterior")
    for hook in hooks:
        if getattr(spec, hook) is not None and not callable(getattr(spec, hook)):
            problems.append(f"{hook} must be a function or None.")
    if (spec.sample_posterior is None) != (spec.log_likelihood is None):
        problems.append(
            "sample_posterior and log_likelihood come together: evaluation draws global latents "
            "from the one and scores data with the other. Give both, or neither (then every "
            "latent must be local to a data point, in the 'data' plate)."
        )
    problems.extend(_sampling_problems(spec))
    if problems:
        raise ModelSpecError(
            f"Model {name!r} does not meet the zoo's contract:\n"
            + "\n".join(f"  - {p}" for p in problems)
            + "\n(docs/extending.md describes every field of ModelSpec.)"
        )


def _guide_kind_problems(spec: ModelSpec) -> list[str]:
    """What is wrong with the declaration of the guides' kinds."""
    kinds = spec.guide_kinds
    if not isinstance(kinds, Mapping):
        return [
            "guide_kinds must map guide names to zoo.GuideKind, e.g. "
            f"{{'enum': zoo.GuideKind(enumerated=True)}}; got {kinds!r}."
        ]
    problems = []
    unknown = [g for g in kinds if not isinstance(spec.guides, tuple) or g not in spec.guides]
    if unknown:
        problems.append(
            f"guide_kinds declares the kind of {unknown}, which are not guides of the model "
            f"(guides={spec.guides!r}); declare kinds for the names in guides only."
        )
    for guide, kind in kinds.items():
        if not isinstance(kind, GuideKind):
            problems.append(
                f"guide_kinds[{guide!r}] must be a zoo.GuideKind, e.g. "
                f"zoo.GuideKind(enumerated=True); got {kind!r}."
            )
        else:
            problems.extend(kind.problems(guide))
    return problems


def _sampling_problems(spec: ModelSpec) -> list[str]:
    """What the hooks for MCMC and for comparisons with the exact posterior lack."""
    problems = []
    if spec.draws_from_sites is not None and spec.sites_from_params is None:
        problems.append(
            "draws_from_sites needs sites_from_params(raw_params, config) -> sites: a point "
            "of every latent site read from raw parameters, where the sampler starts the chains "
            "of a mixture (updates that start from responsibilities). Add sites_from_params, "
            "or leave draws_from_sites out."
        )
    if spec.summarize_draws is not None and spec.draws_from_sites is None:
        problems.append(
            "summarize_draws summarizes a sampler's draws, which draws_from_sites reads from its "
            "sites: add draws_from_sites (and sites_from_params), or leave summarize_draws out."
        )
    needs_draws = [
        hook for hook in ("draws_from_sites", "exact_posterior") if getattr(spec, hook) is not None
    ]
    if needs_draws and spec.sample_posterior is None:
        problems.append(
            f"{' and '.join(needs_draws)} give draws in the form sample_posterior gives them; "
            "add sample_posterior and log_likelihood."
        )
    components = spec.exchangeable_components
    if not isinstance(components, tuple) or not all(isinstance(k, str) for k in components):
        problems.append(
            "exchangeable_components must be a tuple of the draws' keys whose axis 1 indexes "
            f"mixture components, e.g. ('weights', 'means'); got {components!r}."
        )
    return problems


# --- The twins, traced ----------------------------------------------------------------------


def check_registration(spec: ModelSpec, **options) -> None:
    """What every registration checks: the spec (:func:`check_spec`), then both twins import,
    trace on a small data set from ``spec.make_data`` with the same sample sites (observed or
    not) in the same plates, and every guide of ``spec.guides`` samples every latent site of the
    model (discrete sites that an enumerated guide sums out excepted) and draws none that the
    model constrains (positive, in an interval, on a simplex, ...) on the whole real line.

    Traces run on the CPU in float64, in a scratch Pyro parameter store, so the caller's store
    and random streams are left as they were; JAX's process-wide 64-bit mode is turned on (as
    the inference layer's NumPyro backend does) and left on. Raises ``ModelSpecError``.

    Parameters
    ----------
    spec : ModelSpec
        The model.
    **options
        Model options for the example problem, over ``spec.example_options``.

    Returns
    -------
    None

    Raises
    ------
    ModelSpecError
        The spec is incomplete (:func:`check_spec`); a twin (or the closed-form updates'
        module) does not import or lacks a function; the example problem cannot be built; a
        twin's model or guide fails to trace; the twins' sites or plates differ; a guide misses
        a latent site, samples one the model does not have, or draws a constrained latent on
        the whole real line.

    Notes
    -----
    Importing the twins imports torch and JAX (about a second); the NumPyro twin is traced
    abstractly (``jax.eval_shape``), without running its array operations.

    Examples
    --------
    >>> import dataclasses
    >>> import zoo
    >>> from zoo.testing import check_registration
    >>> spec = zoo.get_model("gmm")
    >>> check_registration(spec)  # passes: returns None
    >>> typo = dataclasses.replace(
    ...     spec, name="typo", backends={**spec.backends, "numpyro": "zoo.gmm.numpyro_modle"}
    ... )
    >>> check_registration(typo)
    Traceback (most recent call last):
    ...
    zoo.spec.ModelSpecError: Model 'typo': its NumPyro twin 'zoo.gmm.numpyro_modle' does not ...
    """
    check_spec(spec)
    twins = {backend: _import_twin(spec, backend) for backend in BACKENDS}
    if spec.updates is not None:
        _check_updates_module(spec)
    try:
        data, config, start = example_problem(spec, **options)
    except ModelSpecError:
        raise
    except Exception as err:
        raise ModelSpecError(
            f"Model {spec.name!r}: the example problem could not be built: "
            f"{describe_error(err)}. make_data(rng, n) must return the data keys "
            f"{sorted(spec.data)} for small n, and prepare(data, **example_options) must "
            "accept them."
        ) from err
    sites = {b: _traced_model(spec, b, data, config, start, None) for b in BACKENDS}
    # site_signature's form: {name: (observed, plate names)}
    psig, nsig = (
        {name: (site.observed, site.plates) for name, site in sites[b].items()} for b in BACKENDS
    )
    if psig != nsig:
        raise ModelSpecError(_twin_mismatch_message(spec, psig, nsig))
    _check_no_legacy_constants(spec, twins)
    for guide in spec.guides:
        for backend in BACKENDS:
            kind = spec.guide_kind(guide, backend)
            temperature = _svi_temperature(twins[backend], kind, config)
            model_sites = sites[backend]
            if temperature is not None:  # e.g. a relaxed site in place of a discrete one
                model_sites = _traced_model(spec, backend, data, config, start, temperature)
            guide_sites = _traced_guide(spec, backend, guide, data, config, start, temperature)
            _check_guide_covers_model(spec, backend, guide, kind, model_sites, guide_sites)
            _check_guide_support(spec, backend, guide, model_sites, guide_sites)
            _check_deterministic_guide(spec, backend, guide, kind, guide_sites)


def _check_no_legacy_constants(spec, twins) -> None:
    """A twin that still lists guides in the constants of the previous revision, while the spec
    declares the kinds, is told that they are ignored (the spec's declaration is the one read).
    Where the spec declares none, ``ModelSpec.guide_kind`` reads them, with its own warning."""
    if not spec.guide_kinds:
        return
    for twin in twins.values():
        old = legacy_constants(twin)
        if old:
            warnings.warn(
                f"Model {spec.name!r}: twin {twin.__name__!r} still defines {', '.join(old)}, "
                "which are ignored: the spec declares the guides' kinds (guide_kinds). Delete "
                "the constants.",
                DeprecationWarning,
                stacklevel=3,
            )


def _import_twin(spec, backend):
    path = spec.backends[backend]
    try:
        twin = spec.twin(backend)
    except Exception as err:
        raise ModelSpecError(
            f"Model {spec.name!r}: its {BACKEND_TITLES[backend]} twin {path!r} does not import: "
            f"{describe_error(err)}. backends holds module paths; check the path and that the "
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


def _check_updates_module(spec) -> None:
    """The module of ``spec.updates`` imports and defines what its declaration promises."""
    updates = spec.updates
    try:
        module = updates.load()
    except Exception as err:
        raise ModelSpecError(
            f"Model {spec.name!r}: its updates module {updates.module!r} does not import: "
            f"{describe_error(err)}."
        ) from err
    missing = [name for name in updates.functions() if not callable(getattr(module, name, None))]
    if missing:
        raise ModelSpecError(
            f"Model {spec.name!r}: its updates module {updates.module!r} does not define "
            f"{missing}, which ClosedFormUpdates(start={updates.start!r}, "
            f"natural_gradient={updates.natural_gradient}) calls (zoo.updates says what each "
            "takes and returns)."
        )


def _svi_temperature(twin, kind, config):
    """The temperature SVI passes at its first step (``inference.algorithms.svi``), so model and guide are
    traced as SVI will call them: a relaxed (Gumbel-softmax) guide (``kind.relaxed``) at its
    starting temperature; a twin's own schedule at step 0; else None."""
    if kind.relaxed:
        return 1.0
    make_schedule = getattr(twin, "temperature_schedule", None)
    schedule = None if make_schedule is None else make_schedule(config, 1)
    return None if schedule is None else schedule(0)


def _backend_problem(backend, data, config):
    as_array = backend_arrays(backend)
    return as_array, {k: as_array(v) for k, v in data.items()}, convert_config(config, as_array)


def _traced(spec, backend, what, make, data, config, temperature) -> dict:
    """Trace ``make(backend_config)(data, config, temperature=...)``, a model or a guide; return
    ``{site name: _Site}`` of its sample sites."""
    try:
        if backend == "pyro":
            return _site_summary(_pyro_traced(make, data, config, temperature), "pyro")
        import jax
        import jax.numpy as jnp
        from numpyro import handlers

        _, bdata, bconfig = _backend_problem(backend, data, config)
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
            f"({spec.backends[backend]}) on make_data's data failed: {describe_error(err)}. "
            f"It is called as {_call(what)} with data and config converted to the backend's "
            "arrays (float64, CPU)."
        ) from err


def _call(what: str) -> str:
    """How the zoo calls a twin's model or guide (``zoo.spec.ModelSpec.build_model``: a model
    without ``make_model`` gets its starting values as ``init``)."""
    if what == "model":
        return "model(data, config, temperature=..., init=...) (init: None or starting values)"
    return "guide(data, config, temperature=...), made by make_guide(name, config, init)"


def _is_point_mass(fn) -> bool:
    """Whether a site's distribution is a Delta (through the wrappers that expand, mask or
    reinterpret a batch as an event, which keep theirs as ``base_dist``)."""
    while fn is not None and type(fn).__name__ != "Delta":
        fn = getattr(fn, "base_dist", None)
    return fn is not None


class _Site(NamedTuple):
    """What the checks read of a traced sample site."""

    observed: bool
    plates: frozenset
    enumerable: bool  # discrete, with a support SVI can sum over
    enumerated: bool  # marked to be summed over (infer={"enumerate": ...})
    point_mass: bool  # a Delta
    support: str  # its support's constraint, as written (``_support``)


#: ``_support`` of a distribution on the whole real line (or real vectors), in both backends.
_REAL = "Real()"


def _support(fn) -> str:
    """A distribution's support as its constraint writes itself (``GreaterThan(lower_bound=0.0)``),
    without the wrappers that make a batch an event (``Real()`` for ``real_vector``); ``""``
    where it is unknown: not a constraint object, or one that depends on the distribution's
    arguments (``constraints.dependent``)."""
    constraint = _unwrapped(getattr(fn, "support", None))
    if not hasattr(constraint, "check") or "Dependent" in type(constraint).__name__:
        return ""
    return repr(constraint)


def _site_summary(trace, backend) -> dict:
    """{name: :class:`_Site`} of a trace's sample sites, minibatch bookkeeping left out."""
    from pyro.poutine.util import site_is_subsample

    nodes = trace.nodes.items() if backend == "pyro" else trace.items()
    return {
        name: _Site(
            observed=bool(site["is_observed"]),
            plates=frozenset(f.name for f in site["cond_indep_stack"]),
            enumerable=bool(getattr(site["fn"], "has_enumerate_support", False)),
            enumerated=(site.get("infer") or {}).get("enumerate") is not None,
            point_mass=_is_point_mass(site["fn"]),
            support=_support(site["fn"]),
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


def _guide_maker(spec, backend, guide, start):
    """``config -> guide``: how the zoo builds the guide ``guide`` of a twin."""
    return lambda config: spec.twin(backend).make_guide(guide, config, start)


def _traced_guide(spec, backend, guide, data, config, start, temperature):
    return _traced(
        spec,
        backend,
        f"guide {guide!r}",
        _guide_maker(spec, backend, guide, start),
        data,
        config,
        temperature,
    )


def _check_guide_covers_model(spec, backend, guide, kind, model_sites, guide_sites) -> None:
    enumerated = kind.enumerated
    missing = sorted(
        name
        for name, site in model_sites.items()
        if not site.observed and name not in guide_sites and not (enumerated and site.enumerable)
    )
    where = f"guide {guide!r} of the {BACKEND_TITLES[backend]} twin ({spec.backends[backend]})"
    if missing:
        discrete = [name for name in missing if model_sites[name].enumerable]
        hint = (
            f" For a discrete site that SVI should sum out instead ({discrete}), declare the "
            f"guide enumerated in the spec: guide_kinds={{{guide!r}: "
            "zoo.GuideKind(enumerated=True)}."
            if discrete
            else ""
        )
        raise ModelSpecError(
            f"Model {spec.name!r}: {where} does not sample the latent site(s) {missing} of the "
            "model. SVI needs a distribution over every latent variable: add a sample statement "
            f"with the same name to the guide, e.g. sample({missing[0]!r}, ...).{hint}"
        )
    # A guide's factor (an observed site: a term of the objective in closed form) stands for
    # no model site.
    observed = sorted(
        name
        for name, site in guide_sites.items()
        if not site.observed and name in model_sites and model_sites[name].observed
    )
    if observed:
        raise ModelSpecError(
            f"Model {spec.name!r}: {where} samples site(s) {observed}, which the model observes. "
            "A guide draws only the model's latent sites: its draw of an observed site would add "
            "a spurious -log q term to the ELBO. Remove the sample statement from the guide."
        )
    unknown = sorted(
        name for name, site in guide_sites.items() if name not in model_sites and not site.observed
    )
    if unknown:
        raise ModelSpecError(
            f"Model {spec.name!r}: {where} samples site(s) {unknown} that the model does not "
            f"have (its sites: {sorted(model_sites)}). Guide sites take the name of the model "
            "site they stand for."
        )


def _check_guide_support(spec, backend, guide, model_sites, guide_sites) -> None:
    """A guide draws each latent on the real line only where the model's latent is real too: a
    Normal guide for a positive, unit-interval or simplex latent draws values the model gives no
    density (NaN or -inf objectives, at any learning rate). Point masses are left alone (a MAP
    guide's Delta declares a real support whatever its value's)."""
    wrong = sorted(
        (name, model_sites[name].support)
        for name, site in guide_sites.items()
        if name in model_sites
        and not (site.observed or site.point_mass or model_sites[name].observed)
        and site.support == _REAL
        and model_sites[name].support not in (_REAL, "")
    )
    if wrong:
        where = f"guide {guide!r} of the {BACKEND_TITLES[backend]} twin ({spec.backends[backend]})"
        listed = ", ".join(f"{name!r} ({support})" for name, support in wrong)
        raise ModelSpecError(
            f"Model {spec.name!r}: {where} draws site(s) {[n for n, _ in wrong]} on the whole "
            f"real line, but the model's latents are constrained: {listed}. Draws outside the "
            "support have no density under the model and the objective turns NaN or -inf. "
            "Give the guide a distribution with the latent's support (LogNormal or Gamma for a "
            "positive one, Beta for the unit interval, Dirichlet for a simplex), or transform "
            "a Normal into it (TransformedDistribution(Normal(...), biject_to(support)))."
        )


def _check_deterministic_guide(spec, backend, guide, kind, guide_sites) -> None:
    """A guide declared deterministic (``GuideKind(deterministic=True)``: SVI then refuses
    ``num_particles=``, which would change nothing) draws nothing at random: its sites are point
    masses or discrete sites it marks to be summed out."""
    if not kind.deterministic:
        return
    drawn = sorted(
        name
        for name, site in guide_sites.items()
        if not (site.observed or site.point_mass or (site.enumerable and site.enumerated))
    )
    if drawn:
        where = f"guide {guide!r} of the {BACKEND_TITLES[backend]} twin ({spec.backends[backend]})"
        raise ModelSpecError(
            f"Model {spec.name!r}: {where} is declared deterministic (guide_kinds), but draws "
            f"the site(s) {drawn} at random. Declare deterministic=True only for guides whose "
            "sites are all point masses (Delta) or discrete sites that SVI sums out (sampled "
            'with infer={"enumerate": "parallel"}): SVI refuses num_particles= for them.'
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


def describe_error(err: BaseException) -> str:
    """``Type: message (at file:line in function)``, the innermost frame, for reports."""
    frames = traceback.extract_tb(err.__traceback__)
    where = ""
    if frames:
        frame = frames[-1]
        where = f" (at {frame.filename}:{frame.lineno} in {frame.name})"
    return f"{type(err).__name__}: {err}{where}"
