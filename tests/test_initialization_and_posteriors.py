"""Edge cases of the shared initialization and of two models' numpy posteriors: repeated data
rows and large offsets for ``init="random_from_data"``, a float32 GMM fit with a nearly singular
covariance, and Bernoulli pixel probabilities of exactly 0 or 1."""

import warnings

import numpy as np
import pytest
import scipy.stats

from zoo import bernoulli_mixture as bm
from zoo.bernoulli_mixture.posterior import component_log_likelihood, mixture_log_likelihood
from zoo.gmm.posterior import log_likelihood as gmm_log_likelihood
from zoo.gmm.posterior import sample_posterior as gmm_sample_posterior
from zoo.initialization import initial_responsibilities


def _brute_force_nearest(x, centres):
    """Nearest centre by explicit differences: the reference, free of the product's rounding."""
    return (((x[:, None, :] - centres[None]) ** 2).sum(-1)).argmin(1)


def test_random_from_data_centres_have_distinct_values_where_rows_repeat():
    # Three values, five rows each: drawing K=3 rows often repeats a value, and equal centres
    # left every tied point to the first of them (counts [10, 0, 0] and the like).
    x = np.repeat(np.array([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]]), 5, axis=0)
    for seed in range(10):
        resp = initial_responsibilities(x, 3, "random_from_data", seed)
        np.testing.assert_array_equal(resp.sum(0), [5.0, 5.0, 5.0])


def test_random_from_data_starts_no_component_empty_on_binary_data():
    # Binary rows repeat: 18 of these 50 seeds drew a repeated value at K=30.
    x = bm.make_data(np.random.default_rng(0), 600)["x"]
    empty = [
        seed
        for seed in range(50)
        if (initial_responsibilities(x, 30, "random_from_data", seed).sum(0) == 0).any()
    ]
    assert empty == []


def test_random_from_data_keeps_a_draw_without_repeated_values():
    # The redraw is only for repeated values: otherwise the centres are the rows the seed draws,
    # as before the fix, so earlier results are reproduced.
    x = np.random.default_rng(0).normal(size=(300, 3))
    for seed in (0, 1, 7):
        centres = x[np.random.default_rng(seed).choice(300, size=5, replace=False)]
        resp = initial_responsibilities(x, 5, "random_from_data", seed)
        np.testing.assert_array_equal(resp.argmax(1), _brute_force_nearest(x, centres))


def test_random_from_data_with_fewer_distinct_rows_than_components_warns():
    x = np.repeat(np.array([[0.0, 0.0], [1.0, 1.0]]), 5, axis=0)
    with pytest.warns(RuntimeWarning, match="2 distinct rows, fewer than K = 3"):
        resp = initial_responsibilities(x, 3, "random_from_data", 0)
    np.testing.assert_array_equal(resp.sum(0), [5.0, 5.0, 0.0])  # one component per value
    assert resp[:5].argmax(1).tolist() == [resp[0].argmax()] * 5
    with pytest.warns(RuntimeWarning, match="fewer than K = 5"):  # N < K: no longer an error
        resp = initial_responsibilities(x[[0, 5]], 5, "random_from_data", 0)
    np.testing.assert_array_equal(resp.sum(0), [1.0, 1.0, 0.0, 0.0, 0.0])


def test_random_from_data_assigns_the_nearest_centre_under_a_large_offset():
    # x . c - |c|^2 / 2 on raw rows at 1e8 loses the spread (~1) to rounding: most points went
    # to a wrong centre.
    x = np.random.default_rng(0).normal(size=(1000, 2)) + 1e8
    centres = x[np.random.default_rng(0).choice(1000, size=3, replace=False)]
    resp = initial_responsibilities(x, 3, "random_from_data", 0)
    np.testing.assert_array_equal(resp.argmax(1), _brute_force_nearest(x, centres))


def test_gmm_precisions_of_a_float32_fit_keep_a_nearly_singular_covariance_accurate():
    rho = 0.999999
    cov = np.array([[1.0, rho], [rho, 1.0]])
    x = np.random.default_rng(0).multivariate_normal([0.0, 0.0], cov, size=200)
    tril = np.linalg.cholesky(cov)[None].astype(np.float32)
    params = {
        "weights": np.ones(1, np.float32),
        "means": np.zeros((1, 2), np.float32),
        "scale_tril": tril,
    }
    draws = gmm_sample_posterior(params, None, "em", np.random.default_rng(0), 2)
    # The exact value for the same float32 factor, all in float64: float32 arithmetic was
    # 0.01 nats off over these 200 points, and a float32 copy of a float64 inverse 0.15.
    tril64 = tril.astype(np.float64)
    exact = {**draws, "precisions": np.linalg.inv(tril64 @ np.swapaxes(tril64, -1, -2))[None]}
    exact["precisions"] = np.repeat(exact["precisions"], 2, axis=0)
    got = gmm_log_likelihood(draws, {"x": x}).sum(1)
    np.testing.assert_allclose(got, gmm_log_likelihood(exact, {"x": x}).sum(1), rtol=0, atol=1e-6)
    assert draws["weights"].dtype == draws["means"].dtype == np.float32  # as fitted


def test_bernoulli_component_log_likelihood_at_probabilities_of_0_and_1():
    probs = np.array([[1.0, 0.5], [0.0, 0.5], [0.3, 1.0]])
    x = np.array([[1, 0], [0, 1], [1, 1]], dtype=np.uint8)
    expected = scipy.stats.bernoulli.logpmf(x[:, None, :], probs[None]).sum(-1)  # (N, K)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no log(0) or 0 * inf on the way
        got = component_log_likelihood(probs, x)
    np.testing.assert_allclose(got, expected, rtol=1e-12)
    assert got[0, 0] == np.log(0.5) and got[0, 1] == -np.inf and got[2, 2] == np.log(0.3)
    mixture = mixture_log_likelihood(np.ones(3) / 3, probs, x)
    assert np.isfinite(mixture).all()


def test_bernoulli_component_log_likelihood_inside_the_support_is_the_plain_product():
    rng = np.random.default_rng(0)
    probs = rng.uniform(1e-6, 1 - 1e-6, size=(5, 16))
    x = (rng.uniform(size=(40, 16)) < 0.5).astype(float)
    plain = x @ np.log(probs).T + (1.0 - x) @ np.log1p(-probs).T
    np.testing.assert_array_equal(component_log_likelihood(probs, x), plain)  # bit for bit
    probs[2, 3] = 1.0  # one component at the edge leaves the others' columns untouched
    got = component_log_likelihood(probs, x)
    np.testing.assert_array_equal(np.delete(got, 2, 1), np.delete(plain, 2, 1))
