"""Scoring a mixture on new data takes memory of the (S, N) output and the draws, and a little
more, not of a (draws, rows, K, D) array; a point estimate's repeated draws are scored once.
Values are checked against scipy's densities."""

import tracemalloc

import numpy as np
import pytest
import scipy.stats
from scipy.special import logsumexp

from zoo.bayesian_gmm import posterior as gaussian
from zoo.bernoulli_mixture import posterior as bernoulli
from zoo.gmm.posterior import sample_posterior as point_estimate_draws

#: Memory scoring may take beyond its output and the draws (its blocks take about 24 MiB).
SCRATCH_BYTES = 32 * 2**20


def _peak_bytes(function, *args):
    """The result of ``function(*args)`` and the peak of numpy's allocations while it ran."""
    tracemalloc.start()
    try:
        out = function(*args)
        return out, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def _gaussian_draws(rng, S, K, D):
    a = rng.normal(size=(S, K, D, D)) / np.sqrt(D)
    return {
        "weights": rng.dirichlet(np.ones(K), size=S),
        "means": rng.normal(size=(S, K, D)),
        "precisions": a @ np.swapaxes(a, -1, -2) + np.eye(D),
    }


def _scipy_gaussian_mixture(draw, x):
    """(N,) log sum_k w_k N(x | mu_k, Lambda_k^-1) by scipy's multivariate normal."""
    return logsumexp(
        [
            np.log(w) + scipy.stats.multivariate_normal(mu, np.linalg.inv(precision)).logpdf(x)
            for w, mu, precision in zip(
                draw["weights"], draw["means"], draw["precisions"], strict=True
            )
        ],
        axis=0,
    )


def test_gaussian_mixture_scoring_memory_is_bounded_and_exact():
    rng = np.random.default_rng(0)
    S, N, K, D = 4, 20_000, 8, 8  # one (S, N, K, D) array: 39 MiB
    draws = _gaussian_draws(rng, S, K, D)
    x = rng.normal(size=(N, D))
    ll, peak = _peak_bytes(gaussian.log_likelihood, draws, {"x": x})
    draw_bytes = sum(v.nbytes for v in draws.values())
    assert peak < ll.nbytes + draw_bytes + SCRATCH_BYTES
    assert ll.shape == (S, N)
    for s in range(S):
        draw = {k: v[s] for k, v in draws.items()}
        np.testing.assert_allclose(ll[s], _scipy_gaussian_mixture(draw, x), rtol=1e-12)


def test_component_log_joint_memory_is_bounded_and_exact():
    rng = np.random.default_rng(1)
    S, N, K, D = 3, 20_000, 5, 10
    draws = _gaussian_draws(rng, S, K, D)
    x = rng.normal(size=(N, D))
    joint, peak = _peak_bytes(gaussian.component_log_joint, draws, x)
    assert peak < joint.nbytes + SCRATCH_BYTES
    for s in range(S):
        for k in range(K):
            cov = np.linalg.inv(draws["precisions"][s, k])
            expected = np.log(draws["weights"][s, k]) + scipy.stats.multivariate_normal(
                draws["means"][s, k], cov
            ).logpdf(x)
            np.testing.assert_allclose(joint[s, :, k], expected, rtol=1e-12)


def test_point_estimate_is_scored_once(monkeypatch):
    # EM's posterior is a point: num_samples copies of one fit, as sample_posterior gives them.
    rng = np.random.default_rng(2)
    K, D, N = 3, 2, 500
    a = rng.normal(size=(K, D, D))
    params = {
        "weights": rng.dirichlet(np.ones(K)),
        "means": rng.normal(size=(K, D)),
        "scale_tril": np.linalg.cholesky(a @ np.swapaxes(a, -1, -2) + np.eye(D)),
    }
    draws = point_estimate_draws(params, None, None, None, 200)
    x = rng.normal(size=(N, D))
    one_draw = gaussian.log_likelihood({k: v[:1] for k, v in draws.items()}, {"x": x})

    factored, cholesky = [], np.linalg.cholesky

    def counted_cholesky(matrices):
        factored.append(len(matrices))  # the draws whose precisions are factored
        return cholesky(matrices)

    monkeypatch.setattr(np.linalg, "cholesky", counted_cholesky)
    ll = gaussian.log_likelihood(draws, {"x": x})
    assert factored == [1]  # one draw scored, its 199 copies not
    np.testing.assert_array_equal(ll, np.repeat(one_draw, 200, axis=0))
    expected = _scipy_gaussian_mixture({k: v[0] for k, v in draws.items()}, x)
    np.testing.assert_allclose(ll[0], expected, rtol=1e-12)


@pytest.mark.parametrize("num_draws", [1, 2])
def test_bernoulli_mixture_scoring_memory_is_bounded_and_exact(num_draws):
    rng = np.random.default_rng(3)
    N, K, D = 20_000, 10, 400  # one (N, D) array: 61 MiB
    x = (rng.uniform(size=(N, D)) < 0.3).astype(float)
    draws = {
        "weights": rng.dirichlet(np.ones(K), size=num_draws),
        "probs": rng.uniform(0.05, 0.95, size=(num_draws, K, D)),
    }
    ll, peak = _peak_bytes(bernoulli.log_likelihood, draws, {"x": x})
    assert peak < ll.nbytes * 2 + SCRATCH_BYTES
    rows = x[:200]  # scipy's densities of every pixel of every component: (rows, K, D)
    for s in range(num_draws):
        pixels = scipy.stats.bernoulli.logpmf(rows[:, None], draws["probs"][s][None])
        expected = logsumexp(pixels.sum(-1) + np.log(draws["weights"][s]), axis=1)
        np.testing.assert_allclose(ll[s, :200], expected, rtol=1e-12)


def test_a_fits_log_marginal_likelihood_takes_the_memory_it_plans_for(monkeypatch):
    """``log_marginal_likelihood`` plans for its (S, N) log-likelihoods and one copy of them
    (``CHUNK_BYTES`` at most, here made 32 MiB); its log-sum-exp took several more copies
    (scipy's), and the loop over chunks kept the last chunk beside the next. Values equal
    scipy's logsumexp's."""
    import inference
    from inference import result

    monkeypatch.setattr(result, "CHUNK_BYTES", 32 * 2**20)
    rng = np.random.default_rng(0)
    res = inference.fit(
        "bayesian_gmm",
        {"x": rng.normal(size=(200, 4))},
        "cavi",
        "pyro",
        K=3,
        num_steps=3,
        tol=0,
        progress=False,
    )
    x = rng.normal(size=(10_000, 4))
    for num_samples in (200, 600):  # one chunk (of 16 MB), and three
        _, peak = _peak_bytes(res.log_marginal_likelihood, x, num_samples)
        assert peak < result.CHUNK_BYTES + SCRATCH_BYTES
    ll = res.pointwise_log_likelihood(x, num_samples=200)
    np.testing.assert_allclose(
        res.log_marginal_likelihood(x, 200), logsumexp(ll, axis=0) - np.log(200), rtol=1e-13
    )
