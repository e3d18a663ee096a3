"""The analytic CAVI ELBO equals a Monte-Carlo Trace_ELBO of the model with the CAVI posterior
as its guide, on both backends: the closed form and the PPL model describe the same thing."""

import numpy as np
import pytest

import inference
import zoo
from zoo.bayesian_gmm import closed_form
from zoo.quadratic_features import log_responsibilities

PARTICLES = 300


def _cavi_fit(x, weight_prior, priors=None):
    return inference.fit(
        "bayesian_gmm",
        {"x": x},
        algorithm="cavi",
        backend="numpyro",
        K=4,
        weight_prior=weight_prior,
        num_steps=500,
        tol=1e-12,
        progress=False,
        **(priors or {}),
    )


def _guide_params(res, x):
    """The CAVI guide's parameters: the fitted factors and q(z) from one E-step."""
    return {**res.raw_params, "assignment_logits": _log_rho(res, x)}


def _log_rho(res, x):
    """log q(z_n = k) from the fitted factors, by the closed-form E-step in numpy."""
    import jax.numpy as jnp

    back = inference.get_backend("numpyro")
    cache = closed_form.init_cache(jnp.asarray(x), res.config, back.ops)
    raw = res.raw_params
    tril = raw["scale_tril"]
    q = {
        k: jnp.asarray(v)
        for k, v in raw.items()
        if k in ("stick_a", "stick_b", "weight_concentration", "dof", "mean_precision")
    }
    q["means"] = jnp.asarray(raw["mean_loc"]) - cache["shift"]
    scale = tril @ np.swapaxes(tril, -1, -2)
    q["scale"] = jnp.asarray(scale)
    q["logdet_scale"] = jnp.asarray(np.linalg.slogdet(scale)[1])
    theta = closed_form.log_rho_coefficients(q, cache, res.config, back.ops)
    log_resp, _ = log_responsibilities(theta, cache, back.ops)
    return np.asarray(back.ops.rows(log_resp))


def _analytic_cases():
    """Every backend, weight prior and prior setting; in the default run, the Dirichlet
    distribution's on both backends at the default priors and on Pyro at the others (NumPyro's
    other cases mostly compile, and run with the slow tests)."""
    for other_priors in (False, True):
        for weight_prior in ("dirichlet_process", "dirichlet_distribution"):
            for backend in ("pyro", "numpyro"):
                quick = weight_prior == "dirichlet_distribution" and (
                    backend == "pyro" or not other_priors
                )
                yield pytest.param(
                    backend, weight_prior, other_priors,
                    marks=() if quick else pytest.mark.slow,
                    id=f"{'other' if other_priors else 'default'}-priors-{weight_prior}-{backend}",
                )  # fmt: skip


@pytest.mark.parametrize("backend, weight_prior, other_priors", list(_analytic_cases()))
def test_trace_elbo_matches_analytic(gmm_data, backend, weight_prior, other_priors, gmm_priors):
    """At the default priors, and at priors away from them (beta0 = 1 and nu0 = D would hide a
    slip in either in the closed-form ELBO)."""
    x = gmm_data[:150]
    res = _cavi_fit(x, weight_prior, gmm_priors if other_priors else None)
    init = _guide_params(res, x)
    spec = zoo.get_model("bayesian_gmm")
    twin = spec.twin(backend)
    back = inference.get_backend(backend)
    dev = back.resolve_device("cpu")
    data = {"x": back.asarray(x, dev, "float64")}
    config = back.backend_config(res.config, dev, "float64")
    guide = twin.make_guide("cavi", config, init)
    if backend == "numpyro":
        import jax
        from numpyro.infer import Trace_ELBO

        keys = jax.random.split(jax.random.PRNGKey(0), PARTICLES)
        loss = Trace_ELBO()
        # One compiled, vectorised pass over the particles' keys (eager calls re-trace 300
        # times; an uncompiled vmap runs each operation apart, 2.5x as long as compiling).
        particle = jax.vmap(lambda key: loss.loss(key, {}, twin.model, guide, data, config))
        values = -np.asarray(jax.jit(particle)(keys))
    else:
        import pyro
        import torch
        from pyro.infer import Trace_ELBO

        pyro.clear_param_store()
        torch.manual_seed(0)
        loss = Trace_ELBO()
        values = np.array([-loss.loss(twin.model, guide, data, config) for _ in range(PARTICLES)])
    se = values.std(ddof=1) / np.sqrt(PARTICLES)
    assert abs(values.mean() - res.objective) < 4 * se + 1e-6 * abs(res.objective), (
        values.mean(),
        res.objective,
        se,
    )
