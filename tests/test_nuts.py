"""NUTS (``algorithm="nuts"``) on both backends: draws against the exact posterior of the linear
regression, r-hat on the built-in mixture, results with chains, exact resume, comparisons
against a reference posterior, and clear errors for what it cannot do."""

import dataclasses
import warnings

import arviz as az
import numpy as np
import pytest

import inference
import zoo

REGRESSION = "bayesian_linear_regression"
#: The sampler's settings on the linear regression (small: the posterior is a 3-D Gaussian).
SHORT = {"num_chains": 4, "num_warmup": 200, "num_draws": 300}


@pytest.fixture(scope="module")
def regression_data(regression_spec):
    return regression_spec.make_data(np.random.default_rng(0), 100)


@pytest.fixture(scope="module", params=["numpyro", "pyro"])
def regression_nuts(request, regression_data):
    return inference.fit(
        REGRESSION, regression_data, "nuts", request.param, seed=1, progress=False, **SHORT
    )


@pytest.fixture(scope="module", params=["numpyro", "pyro"])
def brief_regression_nuts(request, regression_data):
    """A run too short to converge, for what a result of draws does (save, load, checks), not
    for its accuracy: a tenth of ``regression_nuts``'s steps."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", inference.ConvergenceWarning)
        return inference.fit(
            REGRESSION, regression_data, "nuts", request.param, seed=1, progress=False,
            num_chains=4, num_warmup=20, num_draws=30,
        )  # fmt: skip


@pytest.fixture(scope="session")
def gmm_nuts():
    """NUTS with its default settings on the built-in mixture data (600 points, four
    clusters), K=4."""
    data = zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(0))
    res = inference.fit(
        "bayesian_gmm", data, "nuts", "numpyro", progress=False, K=4,
        weight_prior="dirichlet_distribution",
    )  # fmt: skip
    return data, res


@pytest.mark.slow
def test_nuts_matches_the_exact_posterior_of_the_linear_regression(
    regression_nuts, regression_spec, regression_data
):
    """Means within 4 Monte-Carlo standard errors (from the bulk ESS); sds within 10%."""
    from zoo_linear_regression.posterior import exact_posterior

    config = regression_spec.prepare(regression_spec.validate_data(regression_data))
    mean, covariance = exact_posterior(regression_data, config)
    sd = np.sqrt(np.diag(covariance))
    coef = regression_nuts.draws["coef"]  # (chains, draws, D)
    assert coef.shape == (4, 300, 3)
    ess = az.ess(az.from_dict(posterior={"coef": coef}), method="bulk")["coef"].values
    draws = coef.reshape(-1, 3)
    standard_error = draws.std(axis=0) / np.sqrt(ess)
    assert np.all(np.abs(draws.mean(axis=0) - mean) < 4 * standard_error)
    np.testing.assert_allclose(draws.std(axis=0), sd, rtol=0.1)
    assert float(az.rhat(regression_nuts.to_arviz()).to_array().max()) < 1.01
    assert regression_nuts.converged  # its chains passed their diagnostics


@pytest.mark.slow
def test_a_result_of_draws_gives_chains_stats_and_loo(regression_nuts):
    idata = regression_nuts.to_arviz()
    assert dict(idata.posterior.sizes)["chain"] == 4
    assert dict(idata.posterior.sizes)["draw"] == 300
    stats = set(idata.sample_stats.data_vars)
    assert {"diverging", "step_size", "tree_depth", "acceptance_rate", "lp"} <= stats
    assert idata.log_likelihood["x,y"].shape == (4, 300, 100)
    assert np.isfinite(az.loo(idata).elpd_loo)
    # The posterior's mean, and a held-out log predictive averaged over the draws.
    assert regression_nuts.params["coef_mean"].shape == (3,)
    assert regression_nuts.sample_posterior(10_000)["coef"].shape == (1200, 3)
    assert regression_nuts.sample_posterior(12)["coef"].shape == (12, 3)
    assert np.all(np.isfinite(regression_nuts.log_marginal_likelihood(regression_nuts.data)))


@pytest.mark.parametrize("backend", ["numpyro", "pyro"])
def test_the_same_seed_gives_the_same_draws(regression_data, backend):
    options = dict(seed=2, progress=False, num_chains=2, num_warmup=30, num_draws=30)
    first = inference.fit(REGRESSION, regression_data, "nuts", backend, **options)
    again = inference.fit(REGRESSION, regression_data, "nuts", backend, **options)
    np.testing.assert_array_equal(again.draws["coef"], first.draws["coef"])


def test_every_result_records_the_hamiltonian_of_its_draws(brief_regression_nuts):
    """``energy`` on Pyro as on NumPyro: the draw's potential energy (``-lp``) plus a kinetic
    energy, never negative and not constant, and what ArviZ's BFMI reads."""
    stats = brief_regression_nuts.sample_stats
    assert stats["energy"].shape == (4, 30)
    kinetic = stats["energy"] + stats["lp"]
    assert np.all(kinetic >= 0) and np.ptp(kinetic) > 0
    assert np.all(np.isfinite(az.bfmi(stats["energy"])))


@pytest.mark.slow  # mostly compiling the kernel
def test_a_float32_numpyro_run_samples_in_float32():
    """NumPyro makes its momenta and step sizes in JAX's default float, float64 with the 64-bit
    mode the zoo turns on, which float32 positions (a Wishart's Cholesky factor) failed to
    compile with: a float32 run traces its sampler with that mode off."""
    x = zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(0), 60)["x"]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", inference.ConvergenceWarning)  # five draws, on purpose
        res = inference.fit(
            "bayesian_gmm", {"x": x}, "nuts", "numpyro", K=2, num_warmup=5, num_draws=5,
            num_chains=1, max_tree_depth=3, dtype="float32", progress=False,
        )  # fmt: skip
    assert {k: v.dtype for k, v in res.draws.items()} == dict.fromkeys(res.draws, np.float32)
    assert res.draws["precisions"].shape == (1, 5, 2, 2, 2)
    assert res.sample_stats["lp"].dtype == np.float32
    assert np.all(np.isfinite(res.sample_stats["lp"]))


def test_a_saved_run_of_draws_loads_with_its_chains(brief_regression_nuts, tmp_path):
    brief_regression_nuts.save(tmp_path / "nuts.zoo")
    loaded = inference.load(tmp_path / "nuts.zoo")
    np.testing.assert_array_equal(loaded.draws["coef"], brief_regression_nuts.draws["coef"])
    assert set(loaded.sample_stats) == set(brief_regression_nuts.sample_stats)
    idata = loaded.to_arviz(data=brief_regression_nuts.data)
    assert dict(idata.posterior.sizes)["chain"] == 4


@pytest.mark.slow
def test_nuts_on_the_built_in_mixture_converges(gmm_nuts):
    _, res = gmm_nuts
    assert float(az.rhat(res.to_arviz()).to_array().max()) < 1.01
    assert res.sample_stats["diverging"].sum() == 0
    assert res.converged


def test_a_numpyro_run_resumes_to_the_uninterrupted_draws(regression_data, tmp_path):
    options = dict(seed=3, progress=False, num_chains=2, num_warmup=60, num_draws=60)
    options["chunk_size"] = 20
    whole = inference.fit(REGRESSION, regression_data, "nuts", "numpyro", **options)

    def interrupt(step, state, info):
        if step == 4:  # past the warm-up's end (iteration 60) and into the draws
            raise KeyboardInterrupt

    path = tmp_path / "nuts.ckpt"
    with pytest.raises(KeyboardInterrupt):
        inference.fit(
            REGRESSION, regression_data, "nuts", "numpyro", checkpoint=path,
            checkpoint_every=1, callback=interrupt, **options,
        )  # fmt: skip
    resumed = inference.fit(
        REGRESSION, regression_data, "nuts", "numpyro", checkpoint=path, resume=True, **options
    )
    np.testing.assert_array_equal(resumed.draws["coef"], whole.draws["coef"])
    for name, values in whole.sample_stats.items():
        np.testing.assert_array_equal(resumed.sample_stats[name], values)


def test_a_pyro_run_refuses_a_checkpoint_before_sampling(regression_data, tmp_path):
    with pytest.raises(ValueError, match="Pyro NUTS run cannot be checkpointed"):
        inference.fit(
            REGRESSION, regression_data, "nuts", "pyro", checkpoint=tmp_path / "c", **SHORT
        )
    assert not (tmp_path / "c").exists()


@pytest.mark.parametrize(
    "model,message",
    [
        ("vae", "continuous and local to each data point"),
        ("gmm", "no prior"),
        # a discrete latent: nothing says it is continuous, and nothing of networks
        (
            "exchangeable_tokens",
            r"are local to each data point and it is fitted through an amortized",
        ),
    ],
)
def test_a_model_nuts_cannot_sample_is_refused_with_the_reason(model, message):
    spec = zoo.get_model(model)
    data = spec.make_data(np.random.default_rng(0), 20)
    with pytest.raises(ValueError, match=message):
        inference.fit(model, data, "nuts", progress=False)


@pytest.mark.parametrize(
    "options,message",
    [
        ({"num_chains": 0}, r"num_chains must be an int in the range \[1, inf\); got 0"),
        ({"num_draws": -5}, r"num_draws must be an int in the range \[1, inf\)"),
        ({"num_warmup": -1}, r"num_warmup must be an int in the range \[0, inf\)"),
        ({"num_chains": 2.5}, "num_chains must be an int"),
        ({"target_accept_prob": 1.0}, r"target_accept_prob must be a float in the range \(0, 1\)"),
        ({"chain_method": "parallel"}, "chain_method must be one of"),
        ({"num_steps": 7}, "NUTS runs num_warmup \\+ num_draws iterations"),
        ({"tol": 1e-3}, "would stop sampling early"),
        ({"lr": 0.1}, "lr= is an option of algorithm 'svi'"),
    ],
)
def test_bad_sampler_options_are_refused_naming_the_option(regression_data, options, message):
    with pytest.raises((ValueError, TypeError), match=message):
        inference.fit(REGRESSION, regression_data, "nuts", "numpyro", progress=False, **options)


def test_nan_data_are_refused_before_sampling(regression_data):
    bad = {**regression_data, "y": regression_data["y"].copy()}
    bad["y"][3] = np.nan
    with pytest.raises(ValueError, match=r"data\['y'\] contains NaN or inf in 1 row"):
        inference.fit(REGRESSION, bad, "nuts", "numpyro", progress=False)


def test_compare_measures_every_run_against_the_exact_posterior(regression_data):
    table = inference.compare(
        REGRESSION, regression_data, ["cavi", "nuts"], ["numpyro"], reference="exact",
        num_steps={"cavi": 5}, num_samples=2000, **SHORT,
    )  # fmt: skip
    rows = {r["algorithm"]: r for r in table.rows}
    assert "sliced_wasserstein" in table.to_markdown()
    # CAVI is exact here, NUTS is within Monte-Carlo error of it.
    for name in ("cavi", "nuts"):
        assert rows[name]["mean_error_sd"] < 0.2
        assert 0.9 < rows[name]["sd_ratio_median"] < 1.1
        assert rows[name]["sliced_wasserstein"] < 0.1


def test_a_run_compared_with_itself_is_at_zero_distance(regression_data):
    reference = inference.fit(
        REGRESSION, regression_data, "nuts", "numpyro", seed=1, progress=False, **SHORT
    )
    table = inference.compare(
        REGRESSION, regression_data, ["nuts"], ["numpyro"], seeds=(1,),
        reference=reference, num_samples=10_000, **SHORT,
    )  # fmt: skip
    (row,) = table.rows
    assert row["mean_error_sd"] == 0.0 and row["sd_ratio_median"] == 1.0
    assert row["sliced_wasserstein"] < 1e-12


@pytest.mark.slow
def test_mixture_accuracy_does_not_depend_on_the_labels(gmm_nuts):
    data, res = gmm_nuts
    permuted = {
        k: v[:, :, [2, 0, 3, 1]] if k in ("weights", "means", "precisions") else v
        for k, v in res.draws.items()
    }
    relabelled = dataclasses.replace(res, draws=permuted)
    rows = []
    for reference in (res, relabelled):
        table = inference.compare(
            "bayesian_gmm", data, ["em", "cavi"], ["numpyro"], reference=reference, K=4,
            weight_prior="dirichlet_distribution", num_steps={"em": 50, "cavi": 50},
        )  # fmt: skip
        rows.append({r["algorithm"]: r for r in table.rows})
    for algorithm in ("em", "cavi"):
        same = pytest.approx(rows[0][algorithm]["mean_error_sd"], rel=1e-12)
        assert rows[1][algorithm]["mean_error_sd"] == same
    same = pytest.approx(rows[0]["cavi"]["sliced_wasserstein"], rel=1e-12)
    assert rows[1]["cavi"]["sliced_wasserstein"] == same
    # A point estimate has a mean error only; CAVI's posterior is near NUTS's.
    assert np.isnan(rows[0]["em"]["sd_ratio_median"])
    assert rows[0]["cavi"]["mean_error_sd"] < 0.5
    assert 0.8 < rows[0]["cavi"]["sd_ratio_median"] < 1.2


@pytest.mark.parametrize(
    "reference,message",
    [
        ("exact", "declares none"),
        ("mcmc", "reference must be 'exact', a sampler"),
    ],
)
def test_a_reference_that_cannot_be_had_is_refused(gmm_data, reference, message):
    with pytest.raises(ValueError, match=message):
        inference.compare("bayesian_gmm", {"x": gmm_data}, ["cavi"], ["numpyro"], K=3,
                          reference=reference, num_steps=2)  # fmt: skip


def test_a_reference_of_other_data_or_another_model_is_refused(
    brief_regression_nuts, regression_data, gmm_data
):
    other = {k: v[:50] for k, v in regression_data.items()}
    with pytest.raises(ValueError, match="fitted to other data"):
        inference.compare(REGRESSION, other, ["cavi"], ["numpyro"], reference=brief_regression_nuts)
    with pytest.raises(ValueError, match="a fit of model 'bayesian_linear_regression'"):
        inference.compare(
            "bayesian_gmm", {"x": gmm_data}, ["cavi"], ["numpyro"], K=3,
            reference=brief_regression_nuts, num_steps=2,
        )  # fmt: skip


def test_the_numpyro_draws_are_numpyro_mcmc_draws(regression_data, regression_spec):
    """The zoo drives NumPyro's own kernel: with the same seed and settings, bare
    ``numpyro.infer.MCMC`` gives the same draws."""
    import functools

    import jax
    from numpyro.infer import MCMC, NUTS

    options = dict(num_chains=2, num_warmup=40, num_draws=40)
    ours = inference.fit(REGRESSION, regression_data, "nuts", "numpyro", seed=5, progress=False,
                         **options)  # fmt: skip
    data = {
        k: jax.numpy.asarray(v) for k, v in regression_spec.validate_data(regression_data).items()
    }
    config = regression_spec.prepare(regression_spec.validate_data(regression_data))
    model = functools.partial(regression_spec.twin("numpyro").model, data, config)
    mcmc = MCMC(NUTS(model), num_warmup=40, num_samples=40, num_chains=2,
                chain_method="sequential", progress_bar=False)  # fmt: skip
    mcmc.run(jax.random.PRNGKey(5))
    bare = np.asarray(mcmc.get_samples(group_by_chain=True)["coef"])
    np.testing.assert_allclose(ours.draws["coef"], bare, rtol=1e-12)


@pytest.mark.filterwarnings("ignore:.*the chains have not converged")  # a short run, on purpose
def test_a_compare_row_says_how_long_the_chains_ran(regression_data):
    """A sampler's length is chains x iterations per chain, not the loop's chunks of them."""
    table = inference.compare(
        REGRESSION, regression_data, ["nuts"], ["pyro"], num_chains=2, num_warmup=10,
        num_draws=15, num_samples=10,
    )  # fmt: skip
    assert table.rows[0]["steps"] == "2 x 25"
    assert "| 2 x 25 |" in table.to_markdown()


@pytest.mark.slow
def test_numpyro_starts_its_chains_in_one_compiled_call(monkeypatch, request):
    """NumPyro's NUTS init, run eagerly, compiles each operation of the model and its gradient on
    its own (about 550 compilations for this mixture, most of a small fit's time); the engine
    compiles the init as one function."""
    import jax

    from inference.backends import numpyro_mcmc

    compiled, during_init = [], [False]

    def count(event, seconds, **kwargs):
        if during_init[0] and event.startswith("/jax/core/compile/jaxpr_to_mlir"):
            compiled.append(event)

    jax.monitoring.register_event_duration_secs_listener(count)
    request.addfinalizer(lambda: jax.monitoring.unregister_event_duration_listener(count))
    init = numpyro_mcmc.NUTSEngine.init

    def counted_init(self):
        during_init[0] = True
        try:
            return init(self)
        finally:
            during_init[0] = False

    monkeypatch.setattr(numpyro_mcmc.NUTSEngine, "init", counted_init)
    data = zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(0), 50)
    with pytest.warns(inference.ConvergenceWarning):  # two iterations, on purpose
        inference.fit("bayesian_gmm", data, "nuts", "numpyro", K=2, num_chains=2, num_warmup=2,
                      num_draws=2, max_tree_depth=2, progress=False)  # fmt: skip
    assert 0 < len(compiled) < 200


def test_a_numpyro_start_where_the_density_is_not_finite_is_an_error():
    """Traced, NumPyro's init cannot raise its own error for an invalid start: the engine does."""
    from types import SimpleNamespace

    import jax.numpy as jnp

    from inference.backends.numpyro_mcmc import check_start

    good = SimpleNamespace(potential_energy=jnp.asarray(1.0), z_grad={"a": jnp.zeros(3)})
    check_start(good)
    check_start([good, good])
    for bad in (
        SimpleNamespace(potential_energy=jnp.asarray(jnp.inf), z_grad={"a": jnp.zeros(3)}),
        SimpleNamespace(potential_energy=jnp.asarray(1.0), z_grad={"a": jnp.array([0, jnp.nan])}),
    ):
        with pytest.raises(RuntimeError, match="Cannot find valid initial parameters"):
            check_start([good, bad])


@pytest.mark.slow
def test_numpyro_vectorized_chains_draw_what_sequential_chains_draw(regression_data):
    """chain_method="vectorized" advances the chains together (one compiled init and chunk for
    all of them) from the same random keys as one after another."""
    options = dict(seed=5, progress=False, num_chains=2, num_warmup=40, num_draws=40)
    with pytest.warns(inference.ConvergenceWarning):  # a short run, on purpose
        by_chain = {
            method: inference.fit(
                REGRESSION, regression_data, "nuts", "numpyro", chain_method=method, **options
            )  # fmt: skip
            for method in ("sequential", "vectorized")
        }
    draws = by_chain["vectorized"].draws["coef"]
    assert draws.shape == (2, 40, 3)
    np.testing.assert_allclose(draws, by_chain["sequential"].draws["coef"], rtol=1e-6)


def test_the_convergence_check_reads_the_draws_alone(brief_regression_nuts, monkeypatch):
    """The check after a sampler's run finds what ArviZ's summary of the whole result finds,
    without ``to_arviz``, which also scores every draw at every data point."""
    from inference.convergence import draw_problems, nuts_problems, stuck_problems

    summary = az.summary(brief_regression_nuts.to_arviz(), kind="diagnostics", round_to="none")
    divergences = int(np.sum(brief_regression_nuts.sample_stats["diverging"]))
    expected = nuts_problems(summary, divergences, num_chains=4)
    # Chains that never moved, which r-hat and ESS cannot say, come first.
    expected = stuck_problems(brief_regression_nuts.draws) + expected

    def not_needed(*args, **kwargs):
        raise AssertionError("the convergence check converted the whole result")

    monkeypatch.setattr(type(brief_regression_nuts), "to_arviz", not_needed)
    assert draw_problems(brief_regression_nuts) == expected
    assert brief_regression_nuts.converged == (not expected)


@pytest.mark.parametrize("problems", [[], ["r-hat 1.2 > 1.01"]])
def test_a_samplers_converged_flag_is_its_diagnostics(regression_data, monkeypatch, problems):
    """A sampler has no stopping rule: ``converged`` says whether its chains passed their
    checks, False exactly when it is warned about."""
    from inference import convergence

    monkeypatch.setattr(convergence, "draw_problems", lambda result: problems)
    options = dict(seed=2, progress=False, num_chains=1, num_warmup=5, num_draws=5)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        res = inference.fit(REGRESSION, regression_data, "nuts", "numpyro", **options)
    warned = [w for w in said if issubclass(w.category, inference.ConvergenceWarning)]
    assert res.converged == (not problems) and bool(warned) == bool(problems)
