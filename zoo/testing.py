"""The contract every model of the zoo meets, as functions a test (or an extender) can call.

Each check takes a :class:`~zoo.spec.ModelSpec` and raises ``AssertionError`` with a message that
names the broken contract and how to fix it.
"""

from __future__ import annotations

import numpy as np

from zoo.spec import ModelSpec


def example_problem(spec: ModelSpec, n: int = 60, seed: int = 0, **options):
    """Small data from the spec's generator, its config, and a start point for every backend."""
    from inference.api import get_backend
    from inference.closed_form import start_values
    from inference.initialization import initial_responsibilities

    if spec.make_data is None:
        raise AssertionError(
            f"{spec.name}: the spec needs make_data(rng, n) for the shared checks."
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
        raise AssertionError(
            f"{spec.name}: the twins' sample sites differ (name: (observed, plates)):\n"
            f"  pyro:    {psig}\n  numpyro: {nsig}\nUse the same site and plate names in both."
        )
    if not np.isfinite(pyro_logp) or not np.isclose(pyro_logp, numpyro_logp, rtol=rtol):
        raise AssertionError(
            f"{spec.name}: log-joint at the same point differs: pyro {pyro_logp}, numpyro "
            f"{numpyro_logp}. The twins must write the same distributions."
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
        raise AssertionError(f"{spec.name}/{algorithm}/{backend}: non-finite objective {h}.")
    window = max(1, len(h) // 4)
    if not h[-window:].mean() > h[:window].mean():
        raise AssertionError(
            f"{spec.name}/{algorithm}/{backend}: the objective did not improve "
            f"({h[:window].mean():.4f} -> {h[-window:].mean():.4f})."
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
