"""The hooks a model declares for MCMC and for comparisons with a reference posterior:
``draws_from_sites`` reads draws of the latent sites as ``sample_posterior``'s draws,
``sites_from_params`` starts the chains inside every site's support, ``exact_posterior`` is the
closed-form posterior as raw parameters, and the spec check refuses a sampler with no start."""

import dataclasses

import numpy as np
import pytest

import inference
import zoo
from zoo import ModelSpecError
from zoo.testing import check_spec

REGRESSION = "bayesian_linear_regression"
NUM_DRAWS = 7

# (model, extra model options, algorithm whose raw parameters start the chains, latent sites)
CASES = {
    "bayesian_gmm/dirichlet_process": (
        "bayesian_gmm",
        {"weight_prior": "dirichlet_process"},
        "cavi",
        {"sticks", "precisions", "means"},
    ),
    "bayesian_gmm/dirichlet_distribution": (
        "bayesian_gmm",
        {"weight_prior": "dirichlet_distribution"},
        "cavi",
        {"weights", "precisions", "means"},
    ),
    # A MAP model: EM gives the raw parameters of its Delta guide.
    "bernoulli_mixture": ("bernoulli_mixture", {}, "em", {"weights", "probs"}),
    REGRESSION: (REGRESSION, {}, "cavi", {"coef"}),
}


@pytest.fixture(scope="module", params=list(CASES))
def fitted(request, regression_spec):
    """(spec, data, config, raw parameters of a short fit, latent site names) of one case."""
    name, extra, algorithm, sites = CASES[request.param]
    spec = zoo.get_model(name)
    data = spec.validate_data(spec.make_data(np.random.default_rng(0), 60))
    options = {**spec.example_options, **extra}
    result = inference.fit(
        name, data, algorithm, progress=False, num_steps=5, dtype="float64", **options
    )
    raw_params = {k: np.asarray(v) for k, v in result.raw_params.items()}
    return spec, data, spec.prepare(data, **options), raw_params, sites


def _stacked(point: dict, num_draws: int) -> dict:
    """``num_draws`` copies of a point of every site: draws as a sampler returns them."""
    return {k: np.repeat(v[None], num_draws, axis=0) for k, v in point.items()}


def test_start_point_has_every_latent_site_and_no_draw_axis(fitted):
    spec, _, config, raw_params, sites = fitted
    start = spec.sites_from_params(raw_params, config)
    assert set(start) == sites
    if "coef" in start:
        assert start["coef"].shape == (config.dim,)
    if "means" in start:
        assert start["means"].shape == (config.K, config.dim)


def test_start_point_lies_in_the_support(fitted):
    spec, _, config, raw_params, _ = fitted
    start = spec.sites_from_params(raw_params, config)
    assert all(np.isfinite(v).all() for v in start.values())
    for key in ("sticks", "weights", "probs"):
        if key in start:
            assert ((start[key] > 0) & (start[key] < 1)).all(), key
    if "weights" in start:
        np.testing.assert_allclose(start["weights"].sum(), 1.0)
    if "precisions" in start:
        precisions = start["precisions"]
        assert precisions.shape == (config.K, config.dim, config.dim)
        np.testing.assert_allclose(precisions, np.swapaxes(precisions, -1, -2))
        assert (np.linalg.eigvalsh(precisions) > 0).all()


def test_draws_from_sites_match_sample_posterior(fitted):
    spec, data, config, raw_params, _ = fitted
    family = getattr(spec.updates, "posterior_family", None)
    expected = spec.sample_posterior(
        raw_params, config, family, np.random.default_rng(0), NUM_DRAWS
    )
    sites = _stacked(spec.sites_from_params(raw_params, config), NUM_DRAWS)
    draws = spec.draws_from_sites(sites, config)
    assert set(draws) == set(expected)
    for key, value in expected.items():
        assert draws[key].shape == value.shape, key
        assert draws[key].dtype.kind == value.dtype.kind, key
    log_lik = spec.log_likelihood(draws, data)
    assert log_lik.shape == (NUM_DRAWS, len(next(iter(data.values()))))
    assert np.isfinite(log_lik).all()


def _gmm_problem(weight_prior):
    spec = zoo.get_model("bayesian_gmm")
    data = spec.make_data(np.random.default_rng(0), 60)
    return spec, spec.prepare(data, K=3, weight_prior=weight_prior)


def _gmm_raw_params(config, rng, family) -> dict:
    """Raw parameters of the CAVI family (``"cavi"``) or of the enum and gumbel guides, which
    differ only in q(means): a scale of their own instead of ``mean_precision``."""
    K, d = config.K, config.dim
    a, b = rng.uniform(0.5, 5.0, size=(2, K))
    weight_params = (
        {"stick_a": a, "stick_b": b}
        if config.weight_prior == "dirichlet_process"
        else {"weight_concentration": a}
    )
    mean_params = (
        {"mean_precision": np.ones(K)}
        if family == "cavi"
        else {"mean_scale_tril": np.broadcast_to(0.5 * np.eye(d), (K, d, d))}
    )
    tril = np.tril(rng.uniform(0.5, 1.5, size=(K, d, d)))
    return {
        **weight_params,
        **mean_params,
        "dof": np.full(K, d + 2.0),
        "scale_tril": tril,
        "mean_loc": rng.standard_normal((K, d)),
    }


@pytest.mark.parametrize("family", ["cavi", "enum"])
@pytest.mark.parametrize("weight_prior", ["dirichlet_process", "dirichlet_distribution"])
def test_mixture_weights_from_sites_are_those_sample_posterior_draws(weight_prior, family):
    """The same weight-site draws give the same weights: sample_posterior draws the sticks (or
    the Dirichlet weights) first, so one seed gives both the same site draws."""
    spec, config = _gmm_problem(weight_prior)
    params = _gmm_raw_params(config, np.random.default_rng(3), family)
    expected = spec.sample_posterior(params, config, family, np.random.default_rng(5), NUM_DRAWS)
    rng = np.random.default_rng(5)
    if weight_prior == "dirichlet_process":
        sites = {"sticks": rng.beta(params["stick_a"], params["stick_b"], (NUM_DRAWS, config.K))}
    else:
        sites = {"weights": rng.dirichlet(params["weight_concentration"], NUM_DRAWS)}
    sites.update(means=expected["means"], precisions=expected["precisions"])
    draws = spec.draws_from_sites(sites, config)
    np.testing.assert_allclose(draws["weights"], expected["weights"], rtol=1e-12)
    np.testing.assert_allclose(draws["weights"].sum(-1), 1.0)


@pytest.mark.parametrize("family", ["cavi", "enum"])
@pytest.mark.parametrize("weight_prior", ["dirichlet_process", "dirichlet_distribution"])
def test_mixture_start_is_the_posterior_mean_of_either_family(weight_prior, family):
    spec, config = _gmm_problem(weight_prior)
    params = _gmm_raw_params(config, np.random.default_rng(3), family)
    start = spec.sites_from_params(params, config)
    # The mean of many posterior draws: E[Lambda_k] = nu_k W_k, E[mu_k] = m_k.
    draws = spec.sample_posterior(params, config, family, np.random.default_rng(0), 20_000)
    scale = np.abs(start["precisions"]).max()
    np.testing.assert_allclose(start["precisions"], draws["precisions"].mean(0), atol=0.05 * scale)
    np.testing.assert_allclose(start["means"], params["mean_loc"])
    if weight_prior == "dirichlet_process":
        a, b = params["stick_a"], params["stick_b"]
        np.testing.assert_allclose(start["sticks"], a / (a + b))
    else:
        np.testing.assert_allclose(start["weights"], draws["weights"].mean(0), atol=0.01)


def test_mixtures_declare_their_exchangeable_components():
    assert zoo.get_model("bayesian_gmm").exchangeable_components == (
        "weights",
        "means",
        "precisions",
    )
    assert zoo.get_model("bernoulli_mixture").exchangeable_components == ("weights", "probs")
    assert zoo.get_model("gmm").draws_from_sites is None  # maximum likelihood: nothing to sample


@pytest.fixture(scope="module")
def regression_problem(regression_spec):
    data = regression_spec.make_data(np.random.default_rng(0), 50)
    return data, regression_spec.prepare(data)


def test_exact_posterior_draws_have_its_mean_and_covariance(regression_spec, regression_problem):
    from zoo_linear_regression.posterior import exact_posterior

    data, config = regression_problem
    mean, cov = exact_posterior(data, config)
    num_draws = 200_000
    raw_params = regression_spec.exact_posterior(data, config)
    coef = regression_spec.sample_posterior(
        raw_params, config, "exact", np.random.default_rng(0), num_draws
    )["coef"]
    standard_error = np.sqrt(np.diag(cov) / num_draws)
    assert (np.abs(coef.mean(0) - mean) < 4 * standard_error).all()
    # The sample covariance of Gaussian draws: Var(C_ij) = (cov_ii cov_jj + cov_ij^2) / S.
    var = np.diag(cov)
    cov_standard_error = np.sqrt((np.outer(var, var) + cov**2) / num_draws)
    assert (np.abs(np.cov(coef.T) - cov) < 4 * cov_standard_error).all()


def test_cavi_lands_on_the_exact_posterior(regression_spec, regression_problem):
    data, config = regression_problem
    result = inference.fit(REGRESSION, data, "cavi", progress=False, dtype="float64")
    exact = regression_spec.exact_posterior(data, config)
    assert set(result.raw_params) == set(exact)
    for key, value in exact.items():
        np.testing.assert_allclose(np.asarray(result.raw_params[key]), value, rtol=0, atol=1e-10)


def test_a_sampler_without_a_start_is_refused():
    spec = dataclasses.replace(zoo.get_model("bayesian_gmm"), name="unstartable")
    spec = dataclasses.replace(spec, sites_from_params=None)
    with pytest.raises(ModelSpecError, match="draws_from_sites needs sites_from_params") as err:
        check_spec(spec)
    assert "Add sites_from_params" in str(err.value)
    with pytest.raises(ModelSpecError, match="sites_from_params"):
        zoo.register(spec, check=False)
    assert "unstartable" not in zoo.list_models()


def test_every_model_that_declares_the_hooks_passes_the_spec_check(regression_spec):
    for name in ("bayesian_gmm", "bernoulli_mixture", REGRESSION):
        check_spec(zoo.get_model(name))
