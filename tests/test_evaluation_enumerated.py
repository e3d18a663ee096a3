"""Scoring new data under a guide that SVI fits with discrete latents summed out
(``inference.evaluation``): a latent the guide draws is scored at the guide's draw, one the
model leaves to enumeration is summed out, on both backends; and the compiled scoring functions
are kept by the config's values, so a fit is never scored with another fit's config."""

import dataclasses
import warnings

import numpy as np
import pytest
from scipy.special import logsumexp
from scipy.stats import multivariate_normal

import inference
import zoo
from inference import evaluation
from zoo import exchangeable as ex

#: Draws per sequence: the Monte-Carlo error of the estimates is a few hundredths of a nat.
NUM_SAMPLES = 4000


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _fit(data, backend, **options):
    """One SVI step: what the tests score is the parameters they set afterwards."""
    with warnings.catch_warnings():  # one step does not converge
        warnings.simplefilter("ignore", inference.ConvergenceWarning)
        return inference.fit(
            "exchangeable_tokens", data, "svi", backend, num_steps=1, progress=False, **options
        )


@pytest.fixture(scope="module")
def tokens():
    """K=3 components in 2-D, five sequences of two tokens (a posterior over z that is not
    sharp), an attention guide at fixed random parameters, and its fits on both backends."""
    rng = np.random.default_rng(0)
    config = ex.prepare({"x": np.zeros((1, 2, 2))}, K=3)
    x = ex.simulate(config, rng, 5, 2)["x"]
    params = {k: 0.3 * rng.normal(size=s) for k, s in ex.param_shapes(config).items()}
    pyro = dataclasses.replace(_fit({"x": x}, "pyro", K=3), raw_params=params)
    return config, x, params, {"pyro": pyro, "numpyro": _on_numpyro(pyro)}


def _on_numpyro(fit):
    """``fit`` scored on NumPyro: the twins name their parameters alike, and scoring reads the
    backend, config, guide and parameters of a fit, not how it was fitted (no SVI step to
    compile)."""
    return dataclasses.replace(fit, backend="numpyro")


def _log_joint(config, x):
    """(S, K): log p(X_s, z_s = k), by hand: iid Normal(mu_k, scale^2 I) tokens."""
    cov = config.scale**2 * np.eye(config.dim)
    return np.stack(
        [
            np.log(config.weights[k]) + multivariate_normal(config.means[k], cov).logpdf(x).sum(-1)
            for k in range(config.K)
        ],
        axis=-1,
    )


def _exact_and_errors(config, x, params):
    """The exact per-sequence ELBO and log p(X), and the standard errors of their estimates from
    ``NUM_SAMPLES`` draws of z ~ q (the second by the delta method, from the variance of the
    importance ratio p(z | X) / q(z), whose mean is 1)."""
    log_joint = _log_joint(config, x)
    log_q = ex.attention_log_posterior(params, x, config)
    q, w = np.exp(log_q), log_joint - log_q
    elbo = (q * w).sum(-1)
    log_p = logsumexp(log_joint, axis=-1)
    ratio = np.exp(w - log_p[:, None])
    elbo_error = np.sqrt(((q * w**2).sum(-1) - elbo**2) / NUM_SAMPLES)
    log_p_error = np.sqrt(((q * ratio**2).sum(-1) - 1) / NUM_SAMPLES)
    return elbo, elbo_error, log_p, log_p_error


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_a_latent_the_guide_draws_is_scored_at_its_draw(tokens, backend):
    """The attention guide marks z ``enumerate="parallel"`` (summed out in training) and draws it
    when scoring: each weight is log p(X, z) - log q(z), so elbo() estimates the exact ELBO and
    log_marginal_likelihood() log p(X). Summing z out of the model again would give
    log p(X) + H(q) and log p(X) + log K."""
    config, x, params, fits = tokens
    elbo, elbo_error, log_p, log_p_error = _exact_and_errors(config, x, params)
    fit = fits[backend]
    estimate = fit.elbo({"x": x}, num_samples=NUM_SAMPLES)
    np.testing.assert_array_less(np.abs(estimate - elbo), 5 * elbo_error + 1e-9)
    estimate = fit.log_marginal_likelihood({"x": x}, num_samples=NUM_SAMPLES)
    np.testing.assert_array_less(np.abs(estimate - log_p), 5 * log_p_error + 1e-9)


def test_the_backends_agree(tokens):
    config, x, params, fits = tokens
    _, elbo_error, _, log_p_error = _exact_and_errors(config, x, params)
    scores = {
        backend: (
            fit.elbo({"x": x}, num_samples=NUM_SAMPLES),
            fit.log_marginal_likelihood({"x": x}, num_samples=NUM_SAMPLES),
        )
        for backend, fit in fits.items()
    }
    (pyro_elbo, pyro_log_p), (numpyro_elbo, numpyro_log_p) = scores["pyro"], scores["numpyro"]
    np.testing.assert_array_less(np.abs(pyro_elbo - numpyro_elbo), 10 * elbo_error + 1e-9)
    np.testing.assert_array_less(np.abs(pyro_log_p - numpyro_log_p), 10 * log_p_error + 1e-9)


def test_a_latent_the_model_enumerates_is_still_summed_out():
    """A mixture's ``enum`` guide draws nothing and leaves z to the model: on NumPyro every
    weight is log p(x_n) = logsumexp_k log w_k + log N(x_n | mu_k, Sigma_k) at the fitted
    parameters, exactly."""
    spec = zoo.get_model("gmm")
    data = spec.make_data(np.random.default_rng(1), 30)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", inference.ConvergenceWarning)
        fit = inference.fit(
            "gmm", data, "svi", "pyro", guide="enum", num_steps=3, progress=False, K=2
        )
    fit = _on_numpyro(fit)
    p = fit.params
    exact = logsumexp(
        [
            np.log(p["weights"][k])
            + multivariate_normal(p["means"][k], p["covariances"][k]).logpdf(data["x"])
            for k in range(2)
        ],
        axis=0,
    )
    np.testing.assert_allclose(fit.elbo(data, num_samples=3), exact, rtol=1e-12)
    np.testing.assert_allclose(fit.log_marginal_likelihood(data, num_samples=3), exact, rtol=1e-12)


def _means_differing_in_the_middle():
    """Two (4, 300) arrays of means, 1200 numbers (numpy's repr elides the middle of an array
    of more than 1000), that differ only away from the corners a repr prints."""
    rng = np.random.default_rng(2)
    first = 0.1 * rng.normal(size=(4, 300))
    second = first.copy()
    second[1:3, 5:-5] += 0.5
    assert repr(first) == repr(second)
    return first, second


def test_each_fit_is_scored_with_its_own_config(monkeypatch):
    """Two fits whose configs differ only where a repr elides: each scores as a fresh evaluation
    does, whichever was scored first."""
    first, second = _means_differing_in_the_middle()
    config = ex.prepare({"x": np.zeros((1, 2, 300))}, means=first)
    x = ex.simulate(config, np.random.default_rng(3), 4, 3)["x"]
    fits = [_fit({"x": x}, "pyro", means=means) for means in (first, second)]
    assert repr(fits[0].config) == repr(fits[1].config)
    scored = [fit.elbo({"x": x}, num_samples=5) for fit in fits]
    for fit, score in zip(fits, scored, strict=True):
        monkeypatch.setattr(evaluation, "_WEIGHT_FUNCTIONS", {})
        np.testing.assert_array_equal(score, fit.elbo({"x": x}, num_samples=5))
    assert np.abs(scored[0] - scored[1]).max() > 1, scored  # where z fell on a changed mean


def test_the_config_key_is_the_configs_values():
    """Equal values share a key (a new fit of the same config reuses the compiled function);
    a difference in an array's elided middle or in a field computed from the data does not."""
    first, second = _means_differing_in_the_middle()
    data = {"x": np.zeros((1, 2, 300))}
    key = evaluation.config_key(ex.prepare(data, means=first))
    assert evaluation.config_key(ex.prepare(data, means=first.copy())) == key
    assert evaluation.config_key(ex.prepare(data, means=second)) != key
    x = np.random.default_rng(4).normal(size=(4, 2))
    gmm = zoo.get_model("gmm").prepare({"x": x}, K=2)
    other_units = dataclasses.replace(gmm, units=tuple(2 * u for u in gmm.units))
    assert evaluation.config_key(other_units) != evaluation.config_key(gmm)
