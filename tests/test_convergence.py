"""Stochastic inference that is right at its defaults, or says it is not: SVI's stopping rule and
learning-rate schedule, models' own SVI defaults, and ``ConvergenceWarning``."""

import warnings

import numpy as np
import pytest

import inference
import zoo
from inference import convergence


def _fit_quietly(*args, **kwargs):
    """``inference.fit`` and the ConvergenceWarnings it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = inference.fit(*args, progress=False, **kwargs)
    return res, [w for w in caught if issubclass(w.category, inference.ConvergenceWarning)]


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny tensors


@pytest.fixture(scope="module")
def blobs():
    return zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(0), 200)


def test_the_warning_is_a_user_warning_exported_from_inference():
    assert issubclass(inference.ConvergenceWarning, UserWarning)
    assert "ConvergenceWarning" in inference.__all__


@pytest.mark.parametrize(
    "algorithm, backend",
    [
        ("svi", "pyro"),
        # Compiles NumPyro's SVI for 20 s; the layer's warning is the same as for Pyro's.
        pytest.param("svi", "numpyro", marks=pytest.mark.slow),
        ("cavi", "pyro"),
        ("cavi", "numpyro"),
    ],
)
def test_a_run_cut_short_warns_and_is_not_converged(blobs, algorithm, backend):
    res, caught = _fit_quietly("bayesian_gmm", blobs, algorithm, backend, K=2, num_steps=3)
    assert not res.converged and res.num_steps == 3
    assert len(caught) == 1
    message = str(caught[0].message)
    assert algorithm in message and "'bayesian_gmm'" in message and backend in message
    assert "num_steps=3" in message and "tol=0" in message
    # A stochastic run of fewer than two windows could not check its rule, and says so.
    assert ("too few steps to check its stopping rule" in message) == (algorithm == "svi")
    # tol=0 asks for a fixed number of steps: no rule, no warning.
    res, caught = _fit_quietly("bayesian_gmm", blobs, algorithm, backend, K=2, num_steps=3, tol=0)
    assert not res.converged and not caught


def test_the_warning_can_be_silenced(blobs):
    # Pyro's: the warning is the layer's, and NumPyro's SVI of this model compiles for 20 s.
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # any warning would fail the fit
        warnings.simplefilter("ignore", inference.ConvergenceWarning)
        res = inference.fit("bayesian_gmm", blobs, "svi", "pyro", K=2, num_steps=3, progress=False)
    assert not res.converged


def test_the_window_rule_waits_for_a_plateau():
    rng = np.random.default_rng(0)
    rising = np.linspace(-2.0, -1.0, 1000) + rng.normal(0, 0.05, 1000)
    flat = -1.0 + rng.normal(0, 0.01, 1000)  # the difference of two window means: sd 0.001
    assert not convergence.window_converged(rising, 5e-3, 1, 200)
    assert convergence.window_converged(flat, 5e-3, 1, 200)
    assert not convergence.window_converged(flat, 5e-3, 1, 200, start=700)  # too few since
    assert not convergence.window_converged(flat, 0.0, 1, 200)  # tol=0: never


@pytest.mark.slow
def test_explicit_options_are_used_as_given(blobs):
    res, _ = _fit_quietly("bayesian_gmm", blobs, "svi", "numpyro", K=2, num_steps=5, lr=0.05, tol=0)
    assert res.options["lr"] == 0.05 and res.num_steps == 5
    res, _ = _fit_quietly("bayesian_gmm", blobs, "svi", "numpyro", K=2, num_steps=5, tol=0)
    assert res.options["lr"] == [[3000, 0.05], [3000, 0.01], [3000, 0.002], [1, 0.0005]]


def test_compare_shows_the_converged_flag(blobs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", inference.ConvergenceWarning)
        table = inference.compare(
            "bayesian_gmm", blobs, algorithms=["cavi"], backends=["numpyro"], K=2, num_steps=3
        )
    assert "converged" in [name for name, _ in table.columns]
    assert "| False |" in table.to_markdown()


# NumPyro's case trains 150 steps after a compilation; the default rate is the layer's choice.
@pytest.mark.parametrize("backend", ["pyro", pytest.param("numpyro", marks=pytest.mark.slow)])
def test_the_vae_at_its_defaults_does_not_diverge(backend):
    """At the generic rate of 0.05 the default networks reach NaN (Pyro, step 111) or an ELBO
    of hundreds of nats per image (NumPyro) within 150 steps; at the model's own default (1e-3)
    they learn (measured: -40 to -25 nats per image)."""
    data = zoo.get_model("vae").make_data(np.random.default_rng(0), 100)
    res, _ = _fit_quietly("vae", data, "svi", backend, num_steps=150)
    h = res.history["objective"] / 100
    assert np.all(np.isfinite(h)) and h[-20:].mean() > max(h[:20].mean() + 5.0, -35.0)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_svi_at_its_defaults_reaches_cavis_elbo(blobs, backend):
    """The enumerated guide's ELBO, at SVI's default schedule and stopping rule, is within
    0.002 nats per point of that of CAVI's optimum, both with the assignments summed out
    (measured with 1,000 draws each: level with it on Pyro, 0.0002 above it on NumPyro; CAVI's
    own mean-field ELBO is 0.004 below it). The run takes about 10,000 steps (35 s on Pyro, 8 s on
    NumPyro)."""
    from inference.algorithms.closed_form import summed_out_elbo
    from inference.algorithms.svi import enumerated_elbo

    options = dict(K=3, weight_prior="dirichlet_distribution")
    cavi = inference.fit("bayesian_gmm", blobs, "cavi", backend, progress=False, **options)
    res, caught = _fit_quietly("bayesian_gmm", blobs, "svi", backend, **options)
    assert res.converged and not caught
    n = len(blobs["x"])
    elbo = enumerated_elbo(res, blobs, num_particles=1000) / n
    optimum = summed_out_elbo(cavi, blobs, num_samples=1000) / n
    assert elbo > optimum - 0.002, (elbo, optimum)


# NumPyro's case compiles for 50,000 rows (about 40 s on 2 cores): slow. Pyro's runs the same
# steps in the default run.
@pytest.mark.parametrize("backend", ["pyro", pytest.param("numpyro", marks=pytest.mark.slow)])
def test_svi_at_its_default_rate_keeps_the_covariance_factors_of_large_data(backend):
    """On 50,000 points of unit scale the guide's Cholesky factors have diagonals of about 0.01.
    When Adam's first steps at the default rate (0.05) moved their off-diagonal entries by 0.05
    each, both backends' fits failed within ten steps (a precision matrix no longer positive
    definite); taken relative to their row's diagonal, the entries move by 5% of it. At the
    defaults the whole fit converges (10,000 steps; 12 minutes on 2 cores for Pyro, 17 for
    NumPyro)."""
    x = np.random.default_rng(0).standard_normal((50_000, 10))
    res, _ = _fit_quietly("bayesian_gmm", {"x": x}, "svi", backend, K=5, num_steps=30, tol=0)
    objective = res.history["objective"]
    assert np.all(np.isfinite(objective)) and objective[-1] > objective[0]


@pytest.mark.parametrize(
    "model, means, backend",
    [
        ("gmm", "means", "pyro"),
        ("gmm", "means", "numpyro"),
        ("bayesian_gmm", "mean_loc", "pyro"),
        # NumPyro compiles the Bayesian mixture's SVI once per data scale (the units are
        # constants of its compilation): three compilations, over a minute on 2 cores. The
        # maximum-likelihood mixture's case runs the same NumPyro transform in the default run.
        pytest.param("bayesian_gmm", "mean_loc", "numpyro", marks=pytest.mark.slow),
    ],
)
def test_svi_on_a_mixture_takes_the_same_steps_in_any_units(model, means, backend):
    """A mixture's means move in units of the data's standard deviation (a power of two) and
    its Cholesky factors relative to their diagonal, so SVI's steps on data measured in
    thousandths or in thousands are its steps on the data as given: the same objectives
    (shifted by the Jacobian, N D log s) and the same means, scaled. When the means moved by
    Adam's 0.05 in the data's own units, the maximum-likelihood mixture's fit at the defaults
    on 1,000 points scaled by 0.001 stopped, converged, at 8.8030 nats/point where the data as
    given reach the equivalent of 9.6550."""
    x = zoo.get_model(model).make_data(np.random.default_rng(0), 300)["x"]
    fits = {
        s: _fit_quietly(
            model, {"x": x * s}, "svi", backend, K=3, num_steps=20, reg_covar=0.0, tol=0
        )[0]
        for s in (1.0, 1024.0, 1 / 1024)
    }  # reg_covar only in the closed-form start: 0, so the start scales with the data
    base = np.asarray(fits[1.0].history["objective"])
    for s in (1024.0, 1 / 1024):
        shifted = np.asarray(fits[s].history["objective"]) + x.size * np.log(s)
        np.testing.assert_allclose(shifted, base, rtol=1e-12)
        np.testing.assert_allclose(fits[s].raw_params[means] / s, fits[1.0].raw_params[means])


def test_a_mixtures_units_are_powers_of_two_near_each_columns_sd():
    from zoo.bayesian_gmm import data_units

    x = np.random.default_rng(0).normal(size=(2000, 3)) * np.array([0.001, 1.0, 3000.0])
    assert data_units(x) == (2.0**-10, 1.0, 2.0**12)
    assert data_units(np.ones((5, 2))) == (1.0, 1.0)  # constant columns: unit scale


def test_nuts_problems_read_arvizs_thresholds():
    import pandas as pd

    good = pd.DataFrame({"r_hat": [1.0, 1.005], "ess_bulk": [900.0, 450.0]}, index=["a", "b"])
    assert convergence.nuts_problems(good, divergences=0, num_chains=4) == []
    bad = pd.DataFrame({"r_hat": [1.0, 1.2], "ess_bulk": [900.0, 150.0]}, index=["a", "b"])
    problems = convergence.nuts_problems(bad, divergences=3, num_chains=4)
    assert len(problems) == 3 and "at b" in problems[0] and "400" in problems[1]
    assert "3 divergent" in problems[2]


def _stuck(draws):
    from types import SimpleNamespace

    return convergence.draw_problems(SimpleNamespace(draws=draws, sample_stats={}))


def test_chains_that_never_moved_are_a_problem_though_r_hat_and_ess_cannot_say():
    """ArviZ gives NaN r-hat and full ESS for constant chains, which the thresholds pass."""
    moving = np.random.default_rng(0).normal(size=(4, 500, 2))
    assert _stuck({"mu": moving}) == []
    assert _stuck({"mu": np.full((4, 500, 2), 0.3)}) == ["no chain moved from where it started"]
    one_stuck = moving.copy()
    one_stuck[2] = 0.7
    assert "chain(s) [2] never moved at 'mu' while others did" in _stuck({"mu": one_stuck})
    apart = np.broadcast_to(np.arange(4.0)[:, None, None], (4, 500, 2))
    assert "every chain stayed where it started at 'mu', apart" in _stuck({"mu": apart})
    # An entry that the model fixes (a Cholesky factor's zero) is the same in every chain.
    factor = np.random.default_rng(1).normal(size=(4, 500, 2, 2))
    factor[..., 0, 1] = 0.0
    assert _stuck({"scale_tril": factor}) == []


def test_an_r_hat_just_above_the_threshold_is_a_problem():
    """ArviZ's summary rounds to two decimals unless asked not to: an r-hat of 1.0125 read as
    1.01, which passed the 1.01 check."""
    import arviz as az

    shift = 0.11 * np.array([-1.5, -0.5, 0.5, 1.5])[:, None]  # chains apart by a little
    draws = np.random.default_rng(0).normal(size=(4, 1000)) + shift
    r_hat = float(az.rhat(draws))
    assert 1.01 < r_hat < 1.015  # what the test is about
    assert _stuck({"mu": draws}) == [f"r-hat {r_hat:.3f} > 1.01 (at mu)"]


def test_the_diagnostics_of_one_chain_print_nothing(capfd):
    """ArviZ logs, not warns, that one chain is too few for r-hat, which the check skips for
    one chain anyway: nothing reaches the terminal."""
    # A length of its own: ArviZ logs each message once per process.
    draws = np.random.default_rng(0).normal(size=(1, 457))
    assert _stuck({"mu": draws}) == []
    assert "Shape validation" not in capfd.readouterr().err


# NumPyro's sampler compiles for 20 s; its warning comes from the same check as Pyro's.
@pytest.mark.parametrize("backend", ["pyro", pytest.param("numpyro", marks=pytest.mark.slow)])
def test_a_short_nuts_run_warns(blobs, backend):
    res, caught = _fit_quietly(
        "bayesian_gmm", blobs, "nuts", backend, K=2, num_chains=2, num_warmup=10,
        num_draws=10, max_tree_depth=3,
    )  # fmt: skip
    assert len(caught) == 1 and "bulk ESS" in str(caught[0].message)
    assert "num_warmup, num_draws" in str(caught[0].message)


def test_a_nuts_run_of_fewer_than_four_draws_says_so_in_its_warning_alone(blobs, capfd):
    """ArviZ computes no r-hat or ESS from fewer than 4 draws per chain and logs a line of its
    own to stderr: the run's one warning says it, and nothing else is printed."""
    res, caught = _fit_quietly(
        "bayesian_gmm", blobs, "nuts", "pyro", K=2, num_chains=1, num_warmup=3, num_draws=3,
        max_tree_depth=2,
    )  # fmt: skip
    assert len(caught) == 1, [str(w.message) for w in caught]
    assert "3 draws per chain, too few for r-hat and bulk ESS" in str(caught[0].message)
    assert "Shape validation" not in capfd.readouterr().err


def test_a_run_long_enough_for_the_rule_says_it_was_still_rising(blobs):
    """Natural-gradient SVI checks SVI's rule from 1,000 steps on (two windows of 500): a run
    that ends at its default 2,000 unconverged says its objective was still rising, and what to
    change."""
    res, caught = _fit_quietly(
        "bayesian_gmm", blobs, "svi-natural", "numpyro", K=4, step_size=(1.0, 1.0), tol=1e-9
    )
    assert not res.converged and res.num_steps == 2000
    message = str(caught[0].message)
    assert "still rising by more than tol=1e-09" in message and "a smaller kappa" in message


def _rising_under_noise(sd, steps=1000, rise=1e-3, seed=0):
    """Objectives per point of 1,000 points rising by ``rise`` over ``steps``, with noise ``sd``
    (a few draws of which make the last window's mean fall below the one before)."""
    rng = np.random.default_rng(seed)
    return 1000 * (np.linspace(0.0, rise, steps) + sd * rng.standard_normal(steps))


def test_the_rule_with_a_noise_bound_waits_for_means_the_noise_cannot_hide():
    """Rising by 5e-4 per window (5 times tol) under a noise of 0.01 per step: the windows'
    means differ by less than tol for some draws, which the plain rule takes for convergence;
    with the noise bound it cannot, and quiet objectives converge as before."""
    args = dict(tol=1e-4, num_data=1000, window=500)
    noisy = [_rising_under_noise(0.01, seed=seed) for seed in range(20)]
    fooled = [o for o in noisy if convergence.window_converged(o, **args)]
    assert fooled and not any(
        convergence.window_converged(o, noise_bound=True, **args) for o in fooled
    )
    assert convergence.window_noise(fooled[0], 1000, 500) == pytest.approx(
        0.01 * np.sqrt(2 / 500), rel=0.1
    )
    flat = _rising_under_noise(1e-5, rise=0.0)
    assert convergence.window_converged(flat, noise_bound=True, **args)


def test_natural_gradient_svi_on_small_minibatches_warns_that_noise_hid_convergence():
    """At its defaults on minibatches of 20 of 2,000 points the rule alone stopped the run
    (converged=True, no warning) 0.01 nats per point below the optimum."""
    x = zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(0), 2000)
    with pytest.warns(inference.ConvergenceWarning) as said:
        res = inference.fit(
            "bayesian_gmm", x, "svi-natural", "pyro", K=8, batch_size=20, progress=False
        )
    assert not res.converged and res.num_steps == 2000
    message = str(said[0].message)
    assert "without knowing whether it converged" in message
    assert "standard error of 0.012" in message and "raise tol to about 0.02" in message


def test_svi_on_small_minibatches_asks_the_noise_to_be_below_tol_and_full_batches_do_not():
    """Minibatches of 5 of 500 points: the last two windows' means differ by 0.005 nats per
    point under a standard error of 0.022, so the plain rule (tol=0.01) stopped the run at step
    1,000 as converged, by chance; with the noise bound SVI on minibatches goes on and warns
    that the noise hid the verdict. Full-batch SVI, whose objective the noise bound would not
    change, still stops at its rule. (The rule is the layer's, the same for either backend.)"""
    backend = "numpyro"
    x = zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(0), 500)
    common = dict(K=3, lr=0.01, tol=0.01, num_steps=1500)
    res, said = _fit_quietly("bayesian_gmm", x, "svi", backend, batch_size=5, **common)
    assert not res.converged and res.num_steps == 1500
    assert len(said) == 1 and "noise of its objective hides a gain of tol=0.01" in str(
        said[0].message
    )
    full, said = _fit_quietly("bayesian_gmm", x, "svi", backend, **common)
    assert full.converged and full.num_steps == 1000 and not said


def test_an_exact_objective_that_ends_below_its_start_is_measured_against_tol():
    start_high = [-100.0, -130.0, -120.0, -110.5]
    assert convergence.fell_below_start(start_high, None, 10) == pytest.approx(1.05)
    assert convergence.fell_below_start(start_high, 2.0, 10) is None  # within tol
    assert convergence.fell_below_start([-100.0, -130.0, -99.0], None, 10) is None
    assert convergence.fell_below_start([-100.0], None, 10) is None


def _with_a_cluster_of_fewer_points_than_dimensions():
    """Two large clusters and one of 5 points in 8 dimensions, whose covariance the closed-form
    start fits nearly singular (rank 4 plus reg_covar)."""
    rng = np.random.default_rng(0)
    centers = rng.normal(0.0, 4.0, size=(3, 8))
    sizes = (200, 95, 5)
    clusters = [c + rng.normal(size=(n, 8)) for c, n in zip(centers, sizes, strict=True)]
    return {"x": np.concatenate(clusters)}


def test_svi_whose_exact_objective_ends_below_its_start_warns_though_its_rule_was_met():
    """Maximum-likelihood GMM, K=10, at SVI's defaults: the first step at 0.05 moved the nearly
    singular component many of its standard deviations (-10.87 to -12.7 nats per point), and
    the run met its stopping rule at -11.10, below its start, as converged with no warning."""
    data = _with_a_cluster_of_fewer_points_than_dimensions()
    res, said = _fit_quietly("gmm", data, "svi", "numpyro", K=10, seed=0)
    assert res.converged  # the rule was met: the warning is the only sign
    objectives = np.asarray(res.history["objective"]) / res.num_data
    assert objectives[-1] < objectives[0] - 0.1
    assert len(said) == 1
    message = str(said[0].message)
    assert "svi on 'gmm' (numpyro, guide 'enum') met its stopping rule" in message
    assert f"{objectives[-1]:.4f}" in message and f"({objectives[0]:.4f})" in message
    assert "Lower the learning rate (lr)" in message


def test_svi_whose_exact_objective_ends_above_its_start_gives_no_warning():
    data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 300)
    res, said = _fit_quietly("gmm", data, "svi", "numpyro", K=3, seed=0)
    objectives = res.history["objective"]
    assert res.converged and objectives[-1] > objectives[0] and not said


def test_svi_on_a_fresh_binarization_at_each_step_is_not_judged_against_its_start():
    """With dynamic_binarization each step scores another draw of the data, so the first and
    last objectives are noisy draws, not values of one function: a warm start from a fit met
    its rule 0.018 nats per point below its first draw (the mean over 100 steps had risen) and
    warned that its exact objective had fallen."""
    grey = {"x": np.random.default_rng(0).uniform(0, 1, size=(100, 16))}
    options = dict(K=2, dynamic_binarization=True, lr=1e-3, num_steps=3000)
    first, _ = _fit_quietly("bernoulli_mixture", grey, "svi", "numpyro", **options)
    res, said = _fit_quietly(
        "bernoulli_mixture", grey, "svi", "numpyro", seed=3, tol=1e-2, init=first.raw_params,
        **options,
    )  # fmt: skip
    objectives = res.history["objective"]
    assert res.converged and objectives[-1] < objectives[0] - 0.01 * res.num_data
    assert not said
