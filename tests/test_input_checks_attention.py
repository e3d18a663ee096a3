"""Inputs that the attention readings of the Bernoulli mixture, the exchangeable posterior and
the Bayesian attention sites refuse with a clear error, and the edge cases they accept."""

import warnings

import jax.numpy as jnp
import numpy as np
import pytest
import torch

from zoo import bernoulli_mixture as bm
from zoo import exchangeable as ex
from zoo.bayesian_attention import jax_bam as J
from zoo.bayesian_attention import torch_bam as T
from zoo.bernoulli_mixture.cross_attention import CrossAttentionCompleter


def _mixture(rng, K=3, D=6):
    return {"weights": rng.dirichlet(np.ones(K)), "probs": rng.uniform(0.05, 0.95, (K, D))}


@pytest.mark.parametrize(
    "backend, dtype",
    [("numpy", "int64"), ("numpy", "bool"), ("torch", "int64"), ("torch", torch.int32)]
    + [("jax", "int32"), ("numpy", "complex128")],
)
def test_completion_refuses_a_dtype_that_is_not_floating(backend, dtype):
    rng = np.random.default_rng(0)
    params, x, mask = _mixture(rng), rng.integers(0, 2, (2, 6)), np.arange(6) < 3
    for function in (bm.complete, bm.log_prob_observed, bm.log_prob_missing):
        with pytest.raises(ValueError, match="floating-point dtype"):
            function(params, x, mask, backend=backend, dtype=dtype)


def test_completion_accepts_float_dtypes():
    rng = np.random.default_rng(0)
    params, x, mask = _mixture(rng), rng.integers(0, 2, (2, 6)), np.arange(6) < 3
    ref = bm.log_prob_observed(params, x, mask)
    low = bm.log_prob_observed(params, x, mask, dtype="float32")
    assert low.dtype == np.float32
    np.testing.assert_allclose(low, ref, rtol=1e-5)


def _multi_head(rng, H=2, K=3, G=4):
    params = {
        "weights": rng.dirichlet(np.ones(K), size=H),
        "probs": rng.uniform(0.1, 0.9, size=(H, K, G)),
    }
    x = rng.integers(0, 2, size=(5, H * G)).astype(float)
    return params, np.arange(H * G).reshape(H, G), x, np.arange(H * G) < 4


def test_multi_head_refuses_parameters_that_require_grad():
    params, groups, x, mask = _multi_head(np.random.default_rng(0))
    for name in ("weights", "probs"):
        given = {**params, name: torch.tensor(params[name], requires_grad=True)}
        with pytest.raises(TypeError, match="requires_grad=True. Pass detached tensors"):
            bm.multi_head_complete(given, groups, torch.as_tensor(x), mask, backend="torch")
        with pytest.raises(TypeError, match="requires_grad=True"):
            bm.multi_head_parameters(given, groups)


def test_multi_head_accepts_detached_tensors():
    params, groups, x, mask = _multi_head(np.random.default_rng(0))
    tensors = {k: torch.tensor(v) for k, v in params.items()}
    got = bm.multi_head_complete(tensors, groups, torch.as_tensor(x), mask, backend="torch")
    ref = bm.multi_head_complete(params, groups, x, mask)
    np.testing.assert_array_equal(got.mean.numpy(), ref.mean)


def _exchangeable(K=3):
    means = ex.default_means(K, 2)
    x = np.random.default_rng(0).normal(size=(2, 4, 2))
    config = ex.prepare({"x": np.zeros((1, 2, 2))}, K=K)
    return means, x, config, ex.ideal_params(config)


@pytest.mark.parametrize("readout_length", [0, -3, 0.0, float("nan"), float("inf")])
def test_attention_posterior_refuses_a_readout_length_that_is_not_positive(readout_length):
    _, x, config, params = _exchangeable()
    with pytest.raises(ValueError, match="readout_length must be a number of tokens"):
        ex.attention_posterior(params, x, config, readout_length=readout_length)
    with pytest.raises(ValueError, match="readout_length must be a number of tokens"):
        ex.attention_logits(params, x, config, readout_length=readout_length)


def test_attention_posterior_accepts_a_fractional_readout_length():
    _, x, config, params = _exchangeable()
    q = ex.attention_posterior(params, x, config, readout_length=2.5)
    assert np.isfinite(q).all()
    np.testing.assert_allclose(q.sum(-1), 1.0)


@pytest.mark.parametrize(
    "weights", [[-0.5, 1.0, 0.5], [np.nan, 0.5, 0.5], [np.inf, 0.5, 0.5], [0.0, 0.0, 0.0]]
)
def test_exact_posterior_refuses_weights_that_are_not_a_prior(weights):
    means, x, _, _ = _exchangeable()
    with pytest.raises(ValueError, match="weights must be finite, non-negative and not all"):
        ex.exact_posterior(x, means, 1.0, weights)


def test_exact_posterior_normalises_weights_and_accepts_zeros():
    means, x, _, _ = _exchangeable()
    np.testing.assert_allclose(
        ex.exact_posterior(x, means, 1.0, [2.0, 2.0, 2.0]),
        ex.exact_posterior(x, means, 1.0),
        rtol=1e-12,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        p = ex.exact_posterior(x, means, 1.0, [0.0, 0.5, 0.5])
    assert (p[:, 0] == 0).all() and np.isfinite(p).all()


@pytest.mark.parametrize("bad", [np.nan, np.inf])
def test_exact_posterior_refuses_means_that_are_not_finite(bad):
    means, x, _, _ = _exchangeable()
    means[1, 0] = bad
    with pytest.raises(ValueError, match="means must be finite; got 1 entries"):
        ex.exact_posterior(x, means, 1.0)


def test_exact_posterior_refuses_an_infinite_scale():
    means, x, _, _ = _exchangeable()
    with pytest.raises(ValueError, match="scale must be a float in the range"):
        ex.exact_posterior(x, means, np.inf)


def _images(rng, n=20):
    return np.arange(8) < 4, rng.integers(0, 2, size=(n, 8))


def test_cross_attention_fit_refuses_no_images():
    mask, x = _images(np.random.default_rng(0))
    with pytest.raises(ValueError, match="at least one image"):
        CrossAttentionCompleter(mask, 3).fit(x[:0], epochs=1)


@pytest.mark.parametrize("batch_size", [0, -1, 2.5, True])
def test_cross_attention_fit_refuses_a_batch_size_that_is_not_a_positive_int(batch_size):
    mask, x = _images(np.random.default_rng(0))
    with pytest.raises(ValueError, match="batch_size must be a positive int"):
        CrossAttentionCompleter(mask, 3).fit(x, epochs=1, batch_size=batch_size)


def test_cross_attention_scores_no_images_as_an_empty_array():
    mask, x = _images(np.random.default_rng(0))
    layer = CrossAttentionCompleter(mask, 3).fit(x, epochs=1, batch_size=np.int64(8))
    scores = layer.log_prob_missing(x[:0])
    assert scores.shape == (0,) and scores.dtype == np.float64
    assert layer.log_prob_missing(x).shape == (len(x),)


@pytest.mark.parametrize("chunk", [0, -5, 100.0, False])
def test_cross_attention_scores_in_chunks_of_a_positive_int_only(chunk):
    """A chunk of 0 or False raised range()'s error, a negative one torch.cat's, a float a
    TypeError about range."""
    mask, x = _images(np.random.default_rng(0))
    layer = CrossAttentionCompleter(mask, 3).fit(x, epochs=1, batch_size=8)
    with pytest.raises(ValueError, match="chunk must be a positive int"):
        layer.log_prob_missing(x, chunk=chunk)
    np.testing.assert_array_equal(layer.log_prob_missing(x, chunk=7), layer.log_prob_missing(x))


def _qkv(backend, q_batch, k_batch, v_batch):
    array = torch.ones if backend == "torch" else (lambda *shape: jnp.ones(shape))
    return array(*q_batch, 3, 4), array(*k_batch, 5, 4), array(*v_batch, 5, 2)


@pytest.mark.parametrize("backend", ["torch", "jax"])
@pytest.mark.parametrize("batches", [((2,), (3,), (3,)), ((2,), (2,), (3,)), ((2, 1), (3,), (4,))])
def test_bayesian_attention_refuses_batch_dimensions_that_do_not_broadcast(backend, batches):
    module = T if backend == "torch" else J
    q, k, v = _qkv(backend, *batches)
    with pytest.raises(ValueError, match=r"leading \(batch\) dimensions broadcast.*q \(2"):
        module.bayesian_attention(q, k, v)


@pytest.mark.parametrize("backend", ["torch", "jax"])
def test_bayesian_attention_broadcasts_batch_dimensions(backend):
    module = T if backend == "torch" else J
    q, k, v = _qkv(backend, (2, 1), (3,), (1,))
    assert tuple(module.bayesian_attention(q, k, v).output.shape) == (2, 3, 3, 2)


def _contextual_prior(backend, key_dim):
    if backend == "torch":
        return T.ContextualPrior(key_dim), torch.ones
    import jax

    return J.ContextualPrior(key_dim, key=jax.random.PRNGKey(0)), lambda *s: jnp.ones(s)


@pytest.mark.parametrize("backend", ["torch", "jax"])
@pytest.mark.parametrize("shape", [(3, 5), (2, 3, 3), (4,)])
def test_a_contextual_prior_refuses_keys_of_another_width(backend, shape):
    """Keys of the wrong width raised the matrix product's own error (torch: mat1 and mat2
    shapes cannot be multiplied), and a single key with no key dimension an IndexError."""
    prior, ones = _contextual_prior(backend, 4)
    with pytest.raises(ValueError, match=r"keys of shape \(\.\.\., Lk, 4\) for a contextual"):
        prior.log_weights(ones(*shape))
    assert tuple(prior.log_weights(ones(2, 3, 4)).shape) == (2, 1, 3)
