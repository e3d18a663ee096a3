"""What a result holds and how it is scored and compared: a sampler's parameters as the docs
name them, the message for a fit scored per datum whose model has global latents, the chunked
log-sum-exp of importance weights, results compared by identity, and a model's declared
algorithm defaults checked at every fit."""

from __future__ import annotations

import dataclasses
import re
import types
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy.special import logsumexp

import inference
import zoo
from inference import api
from inference.evaluation import LogSumExp
from zoo.testing import check_spec, example_problem

DOCS = Path(__file__).resolve().parents[1] / "docs"

REGRESSION_PLUGIN = "bayesian_linear_regression"  # the example plugin (conftest registers it)
GLOBAL_LATENT_MESSAGE = "Latent site 'sticks' is outside the 'data' plate: per-datum importance"


def _documented_keys(text: str, after: str, quote: str = "`") -> list[str]:
    """The names quoted in ``text`` right after the first ``after`` (a list of them joined by
    commas and "and"), whitespace and line breaks aside."""
    flat = " ".join(text.split())
    start = flat.index(after) + len(after)
    names = re.match(rf"\s*:?\s*((?:{quote}\w+{quote}(?:,\s*|\s+and\s+)?)+)", flat[start:])
    return sorted(re.findall(rf"{quote}(\w+){quote}", names.group(1)))


def _sampler_params(spec, config, sites: dict) -> dict:
    """``FitResult.params`` of a sampler's draws of ``sites``, (chains, draws, ...), as the
    result maker makes them."""
    problem = types.SimpleNamespace(spec=spec, config=config)
    return api._summary(inference.get_algorithm("nuts"), problem, {}, None, sites)


@pytest.fixture(scope="module")
def mixture_draws():
    """Draws of ``bayesian_gmm``'s sites, 2 chains of 3 draws, for 2 components in 2-D."""
    spec = zoo.get_model("bayesian_gmm")
    data = spec.make_data(np.random.default_rng(0), 40)
    config = spec.prepare(data, K=2, weight_prior="dirichlet_distribution")
    rng = np.random.default_rng(1)
    factors = rng.normal(size=(2, 3, 2, 2, 2))
    sites = {
        "weights": rng.dirichlet([2.0, 3.0], size=(2, 3)),
        "means": rng.normal(size=(2, 3, 2, 2)),
        "precisions": factors @ np.swapaxes(factors, -1, -2) + np.eye(2),
    }
    return spec, config, sites


def test_a_samplers_params_are_the_summary_of_its_draws(mixture_draws):
    """Posterior means of the weights and means, and the covariances as CAVI and scikit-learn
    report them: the inverse of the precisions' posterior mean."""
    spec, config, sites = mixture_draws
    params = _sampler_params(spec, config, sites)
    assert sorted(params) == ["covariances", "means", "n_effective_components", "weights"]
    weights = sites["weights"] / sites["weights"].sum(-1, keepdims=True)
    np.testing.assert_allclose(params["weights"], weights.mean(axis=(0, 1)), rtol=1e-12)
    np.testing.assert_allclose(params["means"], sites["means"].mean(axis=(0, 1)), rtol=1e-12)
    mean_precision = sites["precisions"].reshape(6, 2, 2, 2).sum(axis=0) / 6
    for k in range(2):
        np.testing.assert_allclose(
            params["covariances"][k] @ mean_precision[k], np.eye(2), atol=1e-12
        )
    assert params["n_effective_components"] == 2


def test_a_component_the_draws_switch_off_is_not_counted(mixture_draws):
    spec, config, sites = mixture_draws
    sites = {**sites, "weights": np.broadcast_to([0.995, 0.005], (2, 3, 2))}
    assert _sampler_params(spec, config, sites)["n_effective_components"] == 1


@pytest.mark.parametrize("name", ["bayesian_gmm", "bernoulli_mixture", REGRESSION_PLUGIN])
def test_a_samplers_params_have_the_names_of_every_other_fits(name, request):
    """A NUTS fit's ``params`` read as a CAVI or SVI fit's: the keys and shapes of the model's
    ``summarize``, from draws at the start every algorithm shares."""
    spec = request.getfixturevalue("regression_spec") if name == REGRESSION_PLUGIN else None
    spec = spec or zoo.get_model(name)
    _, config, start = example_problem(spec)
    if start is None:  # a model whose updates start from its data: their first state
        start = {"coef_loc": np.zeros(3), "coef_scale_tril": np.eye(3)}
    sites = {
        k: np.broadcast_to(v, (2, 3, *np.shape(v))) + 0.0
        for k, v in spec.sites_from_params(start, config).items()
    }
    params = _sampler_params(spec, config, sites)
    summary = spec.summarize(start, config)
    assert {k: np.shape(v) for k, v in params.items()} == {
        k: np.shape(v) for k, v in summary.items()
    }


def test_the_example_plugin_summarizes_draws_by_their_mean_and_covariance(regression_spec):
    rng = np.random.default_rng(3)
    coef = rng.normal(size=(2, 50, 3)) @ np.array([[1.0, 0.3, 0.0], [0, 1, 0.5], [0, 0, 2]])
    config = regression_spec.prepare(regression_spec.make_data(rng, 20))
    params = _sampler_params(regression_spec, config, {"coef": coef})
    pooled = coef.reshape(100, 3)
    np.testing.assert_allclose(params["coef_mean"], pooled.mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(params["coef_covariance"], np.cov(pooled.T), rtol=1e-12)
    np.testing.assert_allclose(params["coef_sd"], pooled.std(axis=0, ddof=1), rtol=1e-12)


def test_summarize_draws_without_draws_is_refused():
    spec = dataclasses.replace(
        zoo.get_model("gmm"), name="no_draws", summarize_draws=lambda draws, config: {}
    )
    with pytest.raises(zoo.ModelSpecError, match="summarize_draws summarizes a sampler's draws"):
        check_spec(spec)


def test_the_docs_name_a_samplers_params_as_a_fit_gives_them(mixture_draws):
    spec, config, sites = mixture_draws
    keys = sorted(_sampler_params(spec, config, sites))
    nuts_page = (DOCS / "algorithms" / "nuts.md").read_text()
    bullet = nuts_page[nuts_page.index("- `res.params`") :]
    assert _documented_keys(bullet, "for `bayesian_gmm`") == keys
    getting_started = (DOCS / "getting_started.md").read_text()
    sampler = getting_started[getting_started.index("A sampler's (NUTS's)") :]
    assert _documented_keys(sampler, "for `bayesian_gmm`") == keys
    docstring = inference.FitResult.__doc__
    sampler = docstring[docstring.index("A sampler's have") :]
    assert _documented_keys(sampler, "for ``bayesian_gmm``", quote="``") == keys


@pytest.mark.slow
def test_a_nuts_fit_has_the_documented_params():
    """A real NumPyro run (its compilation takes most of a minute here)."""
    data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 30)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", inference.ConvergenceWarning)
        res = inference.fit(
            "bayesian_gmm", data, "nuts", "numpyro", K=2, num_warmup=5, num_draws=5,
            num_chains=1, progress=False,
        )  # fmt: skip
    nuts_page = (DOCS / "algorithms" / "nuts.md").read_text()
    bullet = nuts_page[nuts_page.index("- `res.params`") :]
    assert _documented_keys(bullet, "for `bayesian_gmm`") == sorted(res.params)
    pooled = {k: v.reshape(-1, *v.shape[2:]) for k, v in res.draws.items()}
    draws = res.spec.draws_from_sites(pooled, res.config)
    np.testing.assert_allclose(res.params["means"], draws["means"].mean(axis=0), rtol=1e-12)
    np.testing.assert_allclose(
        res.params["covariances"], np.linalg.inv(draws["precisions"].mean(axis=0)), rtol=1e-10
    )


def test_pyro_scores_a_model_with_global_latents_with_the_sites_message():
    """With more particles than rows, Pyro's vectorised trace fails on the model's shapes before
    the sites are read; the error names the global site, as NumPyro's does."""
    data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 20)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", inference.ConvergenceWarning)
        res = inference.fit("bayesian_gmm", data, "svi", "pyro", K=2, num_steps=2, progress=False)
    for rows, num_samples in [(3, 5), (3, 3), (3, 1), (4, 2)]:
        with pytest.raises(ValueError, match=GLOBAL_LATENT_MESSAGE):
            res.elbo(data["x"][:rows], num_samples=num_samples)


def test_pyro_importance_traces_name_the_global_site_of_a_model_that_cannot_take_particles():
    import pyro
    import pyro.distributions as dist
    import torch

    from inference.backends.pyro_importance import importance_traces

    def model(x):
        scale = pyro.sample("scale", dist.LogNormal(0.0, 1.0))
        with pyro.plate("data", len(x)):
            # The global draw enters the local site flattened, as a row of values: one per
            # particle, which the rows' plate refuses (with one particle it broadcasts).
            loc = scale.reshape(-1)
            pyro.sample("obs", dist.Normal(loc, 1.0), obs=x)

    def guide(x):
        pyro.sample("scale", dist.LogNormal(0.0, 0.5))

    x = torch.zeros(3)
    message = "Latent site 'scale' is outside the 'data' plate: per-datum importance"
    with pytest.raises(ValueError, match=message) as caught:
        importance_traces(model, guide, 5, x)
    assert "Shape mismatch" in str(caught.value.__cause__)
    model_trace, _ = importance_traces(model, guide, 1, x)  # one particle: traced as before
    assert model_trace.nodes["obs"]["value"].shape == (3,)


def _chunked(chunks) -> np.ndarray:
    total = LogSumExp()
    for chunk in chunks:
        total.add(chunk)
    return total.value()


def test_the_chunked_log_sum_exp_after_chunks_of_minus_infinity_is_scipys():
    chunks = [np.full((2, 1), -np.inf), np.array([[-800.0], [-801.0]])]
    np.testing.assert_array_equal(_chunked(chunks), logsumexp(np.concatenate(chunks), axis=0))
    rng = np.random.default_rng(0)
    for _ in range(200):
        rows = int(rng.integers(1, 5))
        chunks = []
        for _ in range(int(rng.integers(1, 6))):
            chunk = rng.normal(rng.choice([0.0, -500.0, -800.0, -1500.0]), 30.0, (3, rows))
            kind = rng.integers(4)
            if kind == 0:
                chunk[:] = -np.inf  # every weight of the chunk
            elif kind == 1:
                chunk[rng.random(chunk.shape) < 0.5] = -np.inf
            chunks.append(chunk)
        expected = logsumexp(np.concatenate(chunks), axis=0)
        with warnings.catch_warnings():
            warnings.simplefilter("error", RuntimeWarning)  # no overflow or 0 * inf on the way
            np.testing.assert_allclose(_chunked(chunks), expected, rtol=1e-12)


def _result(weights) -> inference.FitResult:
    return inference.FitResult(
        model="gmm", algorithm="em", backend="numpyro", guide=None,
        params={"weights": np.asarray(weights)}, raw_params={"weights": np.asarray(weights)},
        config=None, history={"step": np.arange(2), "objective": np.zeros(2),
                              "time": np.ones(2)},
        converged=True, timing={}, num_data=3, seed=0,
    )  # fmt: skip


def test_results_compare_by_identity():
    res = _result([0.5, 0.5])
    same_values = dataclasses.replace(res)
    assert res == res and not res != res
    assert res != same_values and not res == same_values
    assert res in [same_values, res] and res not in [same_values]
    assert len({res, same_values, res}) == 2  # hashable, by identity


@pytest.fixture(scope="module")
def gmm_data():
    return zoo.get_model("gmm").make_data(np.random.default_rng(0), 20)


def _with_defaults(declared):
    spec = zoo.get_model("gmm")
    return dataclasses.replace(spec, name="gmm_declared_defaults", algorithm_defaults=declared)


@pytest.mark.parametrize("algorithm", ["em", "svi"])
def test_a_misspelt_algorithm_in_a_models_defaults_is_refused_at_every_fit(gmm_data, algorithm):
    spec = _with_defaults({"svii": {"lr": 1e-9}})
    with pytest.raises(zoo.ModelSpecError) as caught:
        inference.fit(spec, gmm_data, algorithm, "numpyro", K=2, num_steps=2, progress=False)
    message = str(caught.value)
    assert "'gmm_declared_defaults'" in message and "'svii'" in message
    assert str(inference.list_algorithms()) in message
    assert "Did you mean 'svi'?" in message


@pytest.mark.parametrize("declared", [{"svi": 5}, {"em": None}, 5])
def test_defaults_that_are_not_a_mapping_are_refused_naming_what_was_given(gmm_data, declared):
    spec = _with_defaults(declared)
    with pytest.raises(zoo.ModelSpecError, match="must map .* got (int 5|NoneType None)"):
        inference.fit(spec, gmm_data, "em", "numpyro", K=2, num_steps=2, progress=False)


def test_a_models_declared_defaults_still_apply(gmm_data):
    spec = _with_defaults({"em": {"num_steps": 3, "tol": 0.0}})
    res = inference.fit(spec, gmm_data, "em", "numpyro", K=2, progress=False)
    assert res.num_steps == 3
