"""Inputs that are not numbers: NaN mixture parameters are rejected by the Bernoulli mixture's
completion, and NaN in the padding of exchangeable sequences is ignored by the attention
posterior as it is by the exact one."""

import numpy as np
import pytest

from zoo import bernoulli_mixture as bm
from zoo import exchangeable as ex

NOT_A_MIXTURE = "strictly inside"


def _mixture(rng, K=3, D=6):
    return {"weights": rng.dirichlet(np.ones(K)), "probs": rng.uniform(0.05, 0.95, (K, D))}


@pytest.mark.parametrize("backend", ["numpy", "torch", "jax"])
def test_completion_rejects_probs_or_weights_that_are_not_numbers(backend):
    rng = np.random.default_rng(0)
    params = _mixture(rng)
    x = rng.integers(0, 2, (4, 6)).astype(float)
    mask = rng.random(6) < 0.5
    probs, weights = params["probs"], params["weights"]
    not_numbers = [
        {**params, "probs": np.where(probs > 0.5, np.nan, probs)},
        {**params, "weights": np.r_[np.nan, weights[1:]]},
        {**params, "probs": np.where(probs > 0.5, np.inf, probs)},
        {**params, "probs": np.where(probs > 0.5, -np.inf, probs)},
        {**params, "weights": np.r_[np.inf, weights[1:]]},
    ]
    for given in not_numbers:
        with pytest.raises(ValueError, match=NOT_A_MIXTURE):
            bm.complete(given, x, mask, backend=backend)
        with pytest.raises(ValueError, match=NOT_A_MIXTURE):
            bm.log_prob_observed(given, x, mask, backend=backend)


def test_multi_head_completion_rejects_probs_that_are_not_numbers():
    rng = np.random.default_rng(1)
    H, K, G = 2, 3, 4
    params = {
        "weights": rng.dirichlet(np.ones(K), size=H),
        "probs": rng.uniform(0.05, 0.95, (H, K, G)),
    }
    groups = np.arange(H * G).reshape(H, G)
    x = rng.integers(0, 2, (5, H * G)).astype(float)
    mask = rng.random(H * G) < 0.5
    for fill in (np.nan, np.inf, -np.inf):
        probs = params["probs"].copy()
        probs[1, 2, 3] = fill
        with pytest.raises(ValueError, match=NOT_A_MIXTURE):
            bm.multi_head_complete({**params, "probs": probs}, groups, x, mask)


def _sequences(seed, K=3, dim=2, **options):
    """A config, its ideal attention parameters, random ones, padded sequences and lengths."""
    rng = np.random.default_rng(seed)
    config = ex.prepare({"x": np.zeros((1, 2, dim))}, K=K, **options)
    data = ex.simulate(config, rng, 6, 7, min_length=2)
    random_params = {k: rng.normal(size=s) for k, s in ex.param_shapes(config).items()}
    return config, ex.ideal_params(config), random_params, data["x"], data["length"]


def _pad_with(x, lengths, value):
    return np.where(np.arange(x.shape[-2])[:, None] < lengths[:, None, None], x, value)


@pytest.mark.parametrize("pad", [np.nan, np.inf, -np.inf])
def test_attention_posterior_ignores_padding_that_is_not_a_number(pad):
    config, ideal, _, x, lengths = _sequences(0)
    padded = _pad_with(x, lengths, pad)
    exact = ex.exact_posterior(padded, config.means, config.scale, config.weights, lengths)
    got = ex.attention_posterior(ideal, padded, config, lengths=lengths)
    np.testing.assert_allclose(got, exact, rtol=1e-10, atol=1e-14)
    weights = ex.attention_weights(ideal, padded, config, lengths=lengths)
    valid = np.arange(x.shape[-2]) < lengths[:, None]
    np.testing.assert_allclose(weights, (valid / lengths[:, None])[:, None, :], rtol=1e-12)


@pytest.mark.parametrize("options", [{}, {"embed_dim": 4, "num_heads": 2}])
def test_attention_logits_with_padding_are_those_of_each_sequence_alone(options):
    """Learned (random) attention: NaN padding gives, per sequence, the logits of its own
    tokens without padding, also one query per left-out token."""
    config, _, params, x, lengths = _sequences(1, **options)
    padded = _pad_with(x, lengths, np.nan)
    got = ex.attention_logits(params, padded, config, lengths=lengths)
    got_loo = ex.attention_logits(params, padded, config, lengths=lengths, leave_one_out=True)
    assert np.isfinite(got).all()
    for s, n in enumerate(lengths):
        alone = ex.attention_logits(params, x[s, :n], config)
        np.testing.assert_allclose(got[s], alone, rtol=1e-12, atol=1e-12)
        alone_loo = ex.attention_logits(params, x[s, :n], config, leave_one_out=True)
        np.testing.assert_allclose(got_loo[s, :n], alone_loo, rtol=1e-12, atol=1e-12)
