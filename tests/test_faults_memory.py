"""Scoring with many posterior draws stays in bounded memory: ``log_marginal_likelihood`` draws
more than fit at once in chunks and adds them up with a running log-sum-exp (an ordinary call is
one draw, as before), and ``sample_posterior``/``pointwise_log_likelihood`` refuse a request
that cannot fit with the memory it needs and what to pass instead."""

import dataclasses

import numpy as np
import pytest
from scipy.special import logsumexp

import inference
import inference.result
import zoo
from inference.evaluation import LogSumExp, chunk_seed
from zoo.memory import InsufficientMemoryError

pytestmark = pytest.mark.usefixtures("one_torch_thread")

BACKENDS = ["pyro", "numpyro"]


@pytest.fixture(scope="module")
def x():
    return zoo.get_model("gmm").make_data(np.random.default_rng(0), 60)["x"]


@pytest.fixture(scope="module", params=BACKENDS)
def cavi(request, x):
    return inference.fit(
        "bayesian_gmm", {"x": x}, "cavi", request.param, K=2, num_steps=10, tol=0, progress=False
    )


@pytest.fixture(scope="module")
def binary():
    return zoo.get_model("bernoulli_mixture").make_data(np.random.default_rng(0), 40)["x"][:, :3]


def recording_draws(spec, asked: list):
    """``spec`` with a ``sample_posterior`` that records in ``asked`` how many draws it is asked
    for, in order."""

    def sample_posterior(params, config, family, rng, num_samples):
        asked.append(int(num_samples))
        return spec.sample_posterior(params, config, family, rng, num_samples)

    return dataclasses.replace(spec, sample_posterior=sample_posterior)


# --- the running log-sum-exp -------------------------------------------------------------------


@pytest.mark.parametrize("sizes", [[5], [1, 1, 1], [3, 7, 2]])
def test_a_running_log_sum_exp_equals_one_over_all_chunks(sizes):
    w = np.random.default_rng(0).normal(scale=50.0, size=(sum(sizes), 4))
    w[:, 1] = -np.inf  # a column that is -inf throughout: -inf, not NaN
    w[0, 2] = -np.inf
    total = LogSumExp()
    for chunk in np.split(w, np.cumsum(sizes)[:-1]):
        total.add(chunk)
    np.testing.assert_allclose(total.value(), logsumexp(w, axis=0), rtol=1e-13)


# --- log_marginal_likelihood in chunks ---------------------------------------------------------


def test_an_ordinary_call_is_one_draw_as_before(cavi, x):
    ll = cavi.pointwise_log_likelihood(x[:7], num_samples=200, seed=4)
    expected = logsumexp(ll, axis=0) - np.log(200)
    # The same draws: equal to rounding (scipy's log-sum-exp may sum in another order), where
    # draws seeded otherwise would differ in the second decimal.
    got = cavi.log_marginal_likelihood(x[:7], 200, seed=4)
    np.testing.assert_allclose(got, expected, rtol=1e-14)


@pytest.mark.parametrize("per_chunk", [1, 7])
def test_chunks_give_the_log_sum_exp_of_their_draws_made_in_one_go(cavi, x, monkeypatch, per_chunk):
    rows = x[:5]
    per_draw = cavi._scoring_bytes_per_draw(len(rows))
    monkeypatch.setattr(inference.result, "CHUNK_BYTES", per_chunk * per_draw)
    got = cavi.log_marginal_likelihood(rows, num_samples=30, seed=2)
    spec = zoo.get_model("bayesian_gmm")
    ll = np.concatenate(
        [
            spec.log_likelihood(
                spec.sample_posterior(
                    cavi.raw_params, cavi.config, cavi.guide_family,
                    np.random.default_rng(chunk_seed(2, 0, i)), min(per_chunk, 30 - start),
                ),
                {"x": rows},
            )
            for i, start in enumerate(range(0, 30, per_chunk))
        ]
    )  # fmt: skip
    assert ll.shape == (30, 5)
    np.testing.assert_allclose(got, logsumexp(ll, axis=0) - np.log(30), rtol=1e-12)


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_huge_num_samples_is_drawn_in_chunks_that_fit(binary, backend, monkeypatch):
    """10**8 draws of a point estimate in chunks of 4 MiB: never more draws are asked for than
    their log-likelihoods of 2 rows (16 bytes a draw) fit in, and every draw being the same, the
    estimate is log p(x | theta) itself."""
    res = inference.fit(
        "bernoulli_mixture", {"x": binary}, "em", backend, K=2, num_steps=3, tol=0,
        progress=False,
    )  # fmt: skip
    exact = res.log_marginal_likelihood(binary[:2], num_samples=1)
    monkeypatch.setattr(inference.result, "CHUNK_BYTES", 4 * 2**20)
    requested = []
    res.spec = recording_draws(res.spec, requested)  # the result draws through its own spec
    got = res.log_marginal_likelihood(binary[:2], num_samples=10**8)
    assert max(requested) * 16 <= 4 * 2**20
    assert sum(n for n in requested if n > 1) >= 10**8 - 1
    np.testing.assert_allclose(got, exact, rtol=1e-9)


# --- refusals before allocating ----------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_too_many_posterior_draws_are_refused_with_the_memory_they_need(x, backend):
    res = inference.fit("gmm", {"x": x}, "em", backend, K=2, num_steps=3, tol=0, progress=False)
    with pytest.raises(InsufficientMemoryError) as caught:
        res.sample_posterior(num_samples=10**13)
    message = str(caught.value)
    assert "sample_posterior(num_samples=10,000,000,000,000) would need at least" in message
    assert "GiB available" in message and "Pass num_samples <= " in message
    with pytest.raises(InsufficientMemoryError, match="use log_marginal_likelihood()"):
        res.pointwise_log_likelihood(x, num_samples=10**13)


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_views_of_a_point_estimate_are_not_refused(binary, backend):
    """The Bernoulli mixture's draws are views of its one point: they take no memory."""
    res = inference.fit(
        "bernoulli_mixture", {"x": binary}, "em", backend, K=2, num_steps=3, tol=0,
        progress=False,
    )  # fmt: skip
    draws = res.sample_posterior(num_samples=10**13)
    assert draws["probs"].shape == (10**13, 2, 3)
    with pytest.raises(InsufficientMemoryError, match="of 40 rows would need at least"):
        res.pointwise_log_likelihood(binary, num_samples=10**13)
