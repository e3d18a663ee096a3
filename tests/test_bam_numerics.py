"""Numerical edge cases of zoo.bayesian_attention: the Weibull-Gamma KL and the Weibull variance
at a small Weibull shape, float32 draws that underflow, and the NumPyro classifier's cache of
compiled prediction functions.

Tiny shapes, eager JAX: each test takes well under a second.
"""

from __future__ import annotations

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import pytest
import torch
from numpyro.distributions.kl import kl_divergence as numpyro_kl
from numpyro.infer import Trace_ELBO
from numpyro.infer.util import log_density
from torch.distributions import kl_divergence as torch_kl

from zoo.bayesian_attention import numpyro_classifier as NC
from zoo.bayesian_attention import numpyro_distributions as ND
from zoo.bayesian_attention import pyro_classifier as PC
from zoo.bayesian_attention import torch_distributions as TD
from zoo.bayesian_attention.classifier import BAMClassifierConfig

# The project runs in float64; enable it before any test builds an array (float32 arrays are
# made explicitly).
jax.config.update("jax_enable_x64", True)

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny tensors

EULER_GAMMA = 0.5772156649015329
DTYPES = {
    "float32": (torch.float32, jnp.float32, 1e-5),
    "float64": (torch.float64, jnp.float64, 1e-12),
}


def _exact_kl(k, log_scale, alpha, beta):
    """KL(Weibull(k, exp(log_scale)) || Gamma(alpha, beta)) in float64, term by term."""
    mean = math.exp(log_scale + math.lgamma(1 + 1 / k))
    return (
        math.log(k)
        + math.lgamma(alpha)
        + alpha * (EULER_GAMMA / k - log_scale - math.log(beta))
        + beta * mean
        - EULER_GAMMA
        - 1
    )


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [0.03, 0.02, 0.005])
def test_kl_weibull_gamma_at_a_small_shape(k, dtype):
    """Gamma(1 + 1/k) overflows and lambda underflows; their product, the mean, does not."""
    torch_dtype, jax_dtype, rtol = DTYPES[dtype]
    alpha, beta = 0.5, 2.0
    log_p = np.log([0.5, 0.3, 0.2])
    log_scale = torch.tensor(log_p - math.lgamma(1 + 1 / k), dtype=torch_dtype)
    exact = [_exact_kl(k, ls, alpha, beta) for ls in log_scale.double().tolist()]
    by_torch = TD.kl_weibull_gamma(k, log_scale, alpha, beta)
    by_jax = ND.kl_weibull_gamma(
        jnp.asarray(k, jax_dtype), jnp.asarray(log_scale.numpy()), alpha, beta
    )
    assert by_torch.dtype == torch_dtype and by_jax.dtype == jax_dtype
    np.testing.assert_allclose(by_torch.double().numpy(), exact, rtol=rtol)
    np.testing.assert_allclose(np.asarray(by_jax, np.float64), exact, rtol=rtol)
    np.testing.assert_allclose(np.asarray(by_jax), by_torch.numpy(), rtol=rtol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("masked", [False, True])
@pytest.mark.parametrize("k", [0.03, 0.02])
def test_classifier_layer_kls_at_a_small_shape(k, masked, dtype):
    """The twins' layer KLs (Pyro: WeibullAttention, NumPyro: masked LogScaleWeibull) agree
    with the float64 sum of the elementwise KL."""
    torch_dtype, jax_dtype, rtol = DTYPES[dtype]
    cfg = BAMClassifierConfig(image_size=28, concentration=k, prior_alpha=0.5, prior_beta=2.0)
    logits = np.random.default_rng(0).normal(size=(2, 2, 4, 4))
    mask = np.abs(np.arange(4)[:, None] - np.arange(4)) <= 1 if masked else None
    q64 = TD.WeibullAttention(torch.tensor(logits), k, None if mask is None else torch.tensor(mask))
    exact = TD.kl_weibull_gamma(k, q64.log_scale, 0.5, 2.0)
    exact = (exact if mask is None else exact * torch.tensor(mask)).sum((-3, -2, -1))

    t_logits, t_mask = torch.tensor(logits, dtype=torch_dtype), None
    if mask is not None:
        t_mask = torch.tensor(mask)
    by_pyro = torch_kl(
        PC.posterior(cfg, t_logits, t_mask), PC.prior(cfg, None, None, t_logits, t_mask)
    )
    j_logits = jnp.asarray(logits, jax_dtype)
    j_mask = None if mask is None else jnp.asarray(mask)
    by_numpyro = numpyro_kl(
        NC.posterior(cfg, j_logits, j_mask), NC.prior(cfg, None, None, j_logits, j_mask)
    )
    np.testing.assert_allclose(by_pyro.double().numpy(), exact.numpy(), rtol=rtol)
    np.testing.assert_allclose(np.asarray(by_numpyro, np.float64), exact.numpy(), rtol=rtol)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("k", [0.05, 0.02])
def test_weibull_variance_at_a_small_shape(k, dtype):
    torch_dtype, jax_dtype, _ = DTYPES[dtype]
    log_scale = math.log(0.3) - math.lgamma(1 + 1 / k)
    exact = 0.3**2 * math.expm1(math.lgamma(1 + 2 / k) - 2 * math.lgamma(1 + 1 / k))
    t = TD.LogScaleWeibull(
        torch.tensor(log_scale, dtype=torch_dtype), torch.tensor(k, dtype=torch_dtype)
    )
    j = ND.LogScaleWeibull(jnp.asarray(log_scale, jax_dtype), jnp.asarray(k, jax_dtype))
    rtol = 1e-4 if dtype == "float32" else 1e-10  # (float32 lgamma of 1 + 2/k ~ 400)
    np.testing.assert_allclose(t.variance.item(), exact, rtol=rtol)
    np.testing.assert_allclose(float(j.variance), exact, rtol=rtol)


def test_torch_log_scale_weibull_draws_are_as_documented():
    """``x = lambda (-log u)^(1/k)`` with ``u`` torch's uniform draw, as the docstring says."""
    assert r"(-\log u)^{1/k}" in TD.LogScaleWeibull.__doc__
    log_scale, k = torch.tensor([0.3, -1.0], dtype=torch.float64), 2.5
    d = TD.LogScaleWeibull(log_scale, torch.tensor(k, dtype=torch.float64))
    torch.manual_seed(0)
    x = d.rsample((4,))
    torch.manual_seed(0)
    u = torch.rand((4, 2), dtype=torch.float64)
    torch.testing.assert_close(x, log_scale.exp() * (-u.log()) ** (1 / k))


# ------------------------------------------------------------------------------ underflow

GAP = 200.0  # a logit gap whose softmax weight, e^-200, float32 cannot hold
MASK = np.array([[True, True, True], [True, True, False], [True, False, True]])


def _sites(attention, mask):
    """A toy model and guide with one attention site of the classifier, float32 logits whose key 1
    is ``GAP`` below the others."""
    cfg = BAMClassifierConfig(image_size=28, attention=attention, prior_alpha=0.5)
    logits = np.zeros((2, 1, 3, 3), np.float32)
    logits[..., 1] = -GAP
    mask = None if mask is None else jnp.asarray(mask)

    def model(logits):
        numpyro.sample("s", NC.prior(cfg, None, None, logits, mask))

    def guide(logits):
        numpyro.sample("s", NC.posterior(cfg, logits, mask))

    return cfg, jnp.asarray(logits), mask, model, guide


@pytest.mark.parametrize("mask", [None, MASK], ids=["unmasked", "masked"])
@pytest.mark.parametrize("attention", ["weibull", "lognormal"])
def test_numpyro_guide_scores_an_underflowing_draw_at_its_log(attention, mask):
    cfg, logits, mask, _, guide = _sites(attention, mask)
    log_q, trace = log_density(numpyro.handlers.seed(guide, 0), (logits,), {}, {})
    site = trace["s"]
    assert float(site["value"].min()) == np.finfo(np.float32).tiny  # floored, not 0
    log_draw = site["intermediates"][0]
    log_draw = log_draw if attention == "weibull" else log_draw[0]
    assert float(log_draw[..., :2, 1].max()) < -150  # (queries 0 and 1 see key 1)
    # The same density in float64, where the draws do not underflow.
    q64 = NC.posterior(cfg, logits.astype(jnp.float64), mask)
    expected = q64.log_prob(jnp.exp(log_draw.astype(jnp.float64))).sum()
    assert np.isfinite(float(log_q))
    np.testing.assert_allclose(float(log_q), float(expected), rtol=1e-4)


@pytest.mark.parametrize("mask", [None, MASK], ids=["unmasked", "masked"])
@pytest.mark.parametrize("attention", ["weibull", "lognormal"])
def test_numpyro_elbo_and_gradient_finite_when_draws_underflow(attention, mask):
    _, logits, _, model, guide = _sites(attention, mask)

    def loss(logits):
        return Trace_ELBO().loss(jax.random.PRNGKey(0), {}, model, guide, logits)

    value, grad = jax.value_and_grad(loss)(logits)
    assert np.isfinite(float(value))
    assert np.isfinite(np.asarray(grad)).all()


@pytest.mark.parametrize("mask", [None, MASK], ids=["unmasked", "masked"])
@pytest.mark.parametrize("attention", ["weibull", "lognormal"])
def test_numpyro_prior_scores_the_guides_underflowing_draw_at_its_log(attention, mask):
    """The model's prior, given the guide's draw and its log, scores the draw where it was floored
    at its log, as the Pyro twin does; any other array at the log of its value."""
    cfg, logits, mask, _, guide = _sites(attention, mask)
    _, trace = log_density(numpyro.handlers.seed(guide, 0), (logits,), {}, {})
    draw = trace["s"]["value"]
    log_draw = NC._log_of_draw(draw, trace["s"]["intermediates"])
    assert float(log_draw.min()) < -150  # floored draws: the case at stake
    scored = NC.prior(cfg, None, None, logits, mask, (draw, log_draw)).log_prob(draw)
    # Pyro's prior at the same draw, which keeps its log.
    torch_mask = None if mask is None else torch.tensor(np.array(mask))
    by_pyro = PC.prior(cfg, None, None, torch.tensor(np.array(logits)), torch_mask)
    expected = by_pyro.log_prob(TD.exp_keeping_log(torch.as_tensor(np.asarray(log_draw))))
    np.testing.assert_allclose(np.asarray(scored), expected.numpy(), rtol=1e-5)
    floored = NC.prior(cfg, None, None, logits, mask).log_prob(draw)  # a value, not the draw
    assert np.abs(np.asarray(floored) - expected.numpy()).max() > 10
    copy = jnp.array(draw, copy=True)  # the same numbers, another array: scored at its value
    np.testing.assert_array_equal(
        NC.prior(cfg, None, None, logits, mask, (draw, log_draw)).log_prob(copy), floored
    )


def test_numpyro_classifier_elbo_scores_floored_draws_at_their_logs():
    """In the classifier's ELBO the model scores the guide's draws at their logs: at a small
    Weibull shape, float32 draws underflow, and the prior's term was off by tens of nats."""
    import inference
    import zoo

    spec = zoo.get_model("bam_classifier")
    data = spec.make_data(np.random.default_rng(0), 8)
    config = spec.prepare(
        data, attention="weibull", prior="contextual", concentration=0.1, width=8, mlp_dim=8,
        num_layers=1,
    )  # fmt: skip
    back = inference.get_backend("numpyro")
    device = back.resolve_device("cpu")
    config = back.backend_config(config, device, "float32")
    batch = {name: back.asarray(v, device, "float32") for name, v in data.items()}
    model = spec.build_model("numpyro", config, None)
    guide = spec.twin("numpyro").make_guide("amortized", config, None)
    _, first = log_density(numpyro.handlers.seed(guide, 0), (batch, config), {}, {})
    params = {"net$params": first["net$params"]["value"]}
    floored = 0
    for seed in range(6):
        _, g = log_density(numpyro.handlers.seed(guide, seed), (batch, config), {}, params)
        replayed = numpyro.handlers.replay(numpyro.handlers.seed(model, 1), g)
        _, m = log_density(replayed, (batch, config), {}, params)
        site = m["attention_0"]
        log_s = g["attention_0"]["intermediates"][0]
        floored += int((log_s < np.log(np.finfo(np.float32).tiny)).sum())
        gamma = site["fn"].base_dist
        a, b = np.asarray(gamma.concentration, np.float64), np.asarray(gamma.rate, np.float64)
        log_s = np.asarray(log_s, np.float64)
        exact = a * np.log(b) - jax.scipy.special.gammaln(a) + (a - 1) * log_s - b * np.exp(log_s)
        used = site["fn"].log_prob(site["value"])
        np.testing.assert_allclose(float(used.sum()), float(exact.sum()), rtol=1e-5)
    assert floored > 0  # the case at stake happened


def test_numpyro_draws_keep_ordinary_values():
    """Away from underflow, the floor and the kept log change nothing."""
    cfg = BAMClassifierConfig(image_size=28, concentration=3.0)
    logits = jnp.asarray(np.random.default_rng(0).normal(size=(2, 2, 4, 4)))
    q = NC.posterior(cfg, logits, jnp.asarray(np.eye(4, dtype=bool) | np.eye(4, k=1, dtype=bool)))
    value, intermediates = q.sample_with_intermediates(jax.random.PRNGKey(0))
    np.testing.assert_allclose(jnp.exp(intermediates[0]), value, rtol=1e-15)
    np.testing.assert_allclose(q.log_prob(value, intermediates), q.log_prob(value), rtol=1e-12)


def test_numpyro_attention_of_draws_that_are_zero():
    """A prior draw that underflowed to 0 still gives finite attention weights."""
    s = jnp.array([[0.0, 0.0, 0.0], [0.5, 0.0, 0.0]], jnp.float32)
    np.testing.assert_allclose(NC._normalize(s, None), [[1 / 3] * 3, [1, 0, 0]], atol=1e-7)


# ------------------------------------------------------------------------------ prediction cache


@pytest.mark.parametrize("as_array", [np.asarray, jnp.asarray], ids=["numpy", "jax"])
def test_predict_cache_tells_large_masks_apart(as_array):
    """Masks of 49 x 49 tokens that differ only in the middle (where their reprs elide)."""
    a = np.ones((49, 49), bool)
    b = a.copy()
    b[20:30, :] = False
    b[20:30, 20:30] = True
    base = BAMClassifierConfig(image_size=28, patch_size=4, width=8, num_layers=1, mlp_dim=8)
    ca = dataclasses.replace(base, attention_mask=as_array(a))
    cb = dataclasses.replace(base, attention_mask=as_array(b))
    assert repr(ca) == repr(cb)
    NC._PREDICT_FUNCTIONS.clear()
    fa = NC._predict_function(ca, "mean", 2)
    assert NC._predict_function(cb, "mean", 2) is not fa
    same_as_a = dataclasses.replace(base, attention_mask=as_array(a.copy()))
    assert NC._predict_function(same_as_a, "mean", 2) is fa  # an equal mask: compiled once
    NC._PREDICT_FUNCTIONS.clear()
