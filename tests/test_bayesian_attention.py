"""Tests for zoo.bayesian_attention: the torch and JAX Bayesian attention sites, their KL
divergences and distributions.

Everything runs in float64. The shapes are tiny, so eager JAX is cheap enough here.
"""

from __future__ import annotations

import itertools

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as ndist
import pyro
import pyro.distributions as pdist
import pytest
import torch
from jax.test_util import check_grads
from numpyro.distributions.kl import kl_divergence as numpyro_kl
from scipy import stats
from scipy.special import gamma as gamma_fn
from torch.distributions import kl_divergence as torch_kl

from zoo.bayesian_attention import jax_bam as J
from zoo.bayesian_attention import torch_bam as T
from zoo.bayesian_attention import torch_distributions as TD
from zoo.bayesian_attention.torch_distributions import compact

# The whole project runs in float64; enable it before any test builds an array.
jax.config.update("jax_enable_x64", True)

BACKENDS = ("torch", "jax")
ATTENTIONS = ("softmax", "weibull", "lognormal")
SAMPLED = ("weibull", "lognormal")


def _t(a):
    return torch.as_tensor(np.asarray(a), dtype=torch.float64)


def _problem(seed=0, batch=(2,), lq=3, lk=5, d=4, dv=3):
    """q, k, v and a mask with some hidden keys (every query sees at least one)."""
    rng = np.random.default_rng(seed)
    q = rng.normal(size=batch + (lq, d))
    k = rng.normal(size=batch + (lk, d))
    v = rng.normal(size=batch + (lk, dv))
    mask = rng.uniform(size=batch + (lq, lk)) > 0.35
    mask[..., rng.integers(lk)] = True
    return q, k, v, mask


def _noise(attention, shape, seed=1):
    rng = np.random.default_rng(seed)
    return rng.uniform(size=shape) if attention == "weibull" else rng.normal(size=shape)


def _prior_pair(key_dim, hidden_dim=6, seed=0):
    """A torch ContextualPrior and a JAX one with the same weights."""
    torch.manual_seed(seed)
    tnet = T.ContextualPrior(key_dim, hidden_dim, dtype=torch.float64)
    jnet = J.ContextualPrior(key_dim, hidden_dim, key=jax.random.PRNGKey(seed))
    params = (tnet.hidden.weight, tnet.hidden.bias, tnet.out.weight, tnet.out.bias)
    jnet = eqx.tree_at(
        lambda m: (m.hidden.weight, m.hidden.bias, m.out.weight, m.out.bias),
        jnet,
        tuple(jnp.asarray(p.detach().numpy()) for p in params),
    )
    return tnet, jnet


def _site(backend, q, k, v, mask, **kw):
    """Run one site on a backend; numpy in, numpy out."""
    if backend == "torch":
        noise = kw.pop("noise", None)
        out = T.bayesian_attention(
            _t(q),
            _t(k),
            _t(v),
            None if mask is None else torch.as_tensor(mask),
            noise=None if noise is None else _t(noise),
            **kw,
        )
        return tuple(x.detach().numpy() for x in out)
    out = J.bayesian_attention(q, k, v, None if mask is None else jnp.asarray(mask), **kw)
    return tuple(np.asarray(x) for x in out)


# ------------------------------------------------------------------------------ KL divergences

# Random parameters (k, lambda, alpha, beta), kept where the Monte-Carlo log-ratio has
# moderate variance.
_rng = np.random.default_rng(10)
WG = (
    _rng.uniform(0.8, 5.0, 6),
    _rng.uniform(0.2, 3.0, 6),
    _rng.uniform(0.3, 3.0, 6),
    _rng.uniform(0.3, 3.0, 6),
)
LN = (
    _rng.normal(0, 1, 6),
    _rng.uniform(0.2, 1.5, 6),
    _rng.normal(0, 1, 6),
    _rng.uniform(0.3, 2.0, 6),
)


def _within_4_se(draws, expected):
    mean, se = draws.mean(0), draws.std(0) / np.sqrt(len(draws))
    assert np.all(np.abs(mean - expected) < 4 * se), (mean, expected, se)


def test_kl_weibull_gamma_against_numpyro_registry_and_monte_carlo():
    conc, scale, alpha, beta = WG
    log_scale = np.log(scale)
    ours_torch = T.kl_weibull_gamma(_t(conc), _t(log_scale), _t(alpha), _t(beta)).numpy()
    ours_jax = np.asarray(J.kl_weibull_gamma(conc, log_scale, alpha, beta))
    numpyro_ref = np.asarray(numpyro_kl(ndist.Weibull(scale, conc), ndist.Gamma(alpha, beta)))
    np.testing.assert_allclose(ours_torch, numpyro_ref, rtol=1e-12)
    np.testing.assert_allclose(ours_jax, numpyro_ref, rtol=1e-12)
    # The torch registration answers for torch's and Pyro's classes and for LogScaleWeibull.
    for weibull, gamma in [
        (
            torch.distributions.Weibull(_t(scale), _t(conc)),
            torch.distributions.Gamma(_t(alpha), _t(beta)),
        ),
        (pdist.Weibull(_t(scale), _t(conc)), pdist.Gamma(_t(alpha), _t(beta))),
        (T.LogScaleWeibull(_t(log_scale), _t(conc)), pdist.Gamma(_t(alpha), _t(beta))),
    ]:
        np.testing.assert_allclose(torch_kl(weibull, gamma).numpy(), numpyro_ref, rtol=1e-12)
    np.testing.assert_allclose(
        numpyro_kl(J.LogScaleWeibull(log_scale, conc), ndist.Gamma(alpha, beta)),
        numpyro_ref,
        rtol=1e-12,
    )
    # Monte Carlo, independent of both: E_q[log q(S) - log p(S)] with scipy.
    rng = np.random.default_rng(11)
    s = stats.weibull_min(conc, scale=scale).rvs(size=(40000, 6), random_state=rng)
    log_ratio = stats.weibull_min(conc, scale=scale).logpdf(s) - stats.gamma(
        alpha, scale=1 / beta
    ).logpdf(s)
    _within_4_se(log_ratio, numpyro_ref)


def test_kl_lognormal_against_torch_numpyro_and_monte_carlo():
    loc_q, scale_q, loc_p, scale_p = LN
    ours_jax = np.asarray(J.kl_lognormal_lognormal(loc_q, scale_q, loc_p, scale_p))
    # torch already has it (LogNormal is an exp-transformed Normal); ours is registered for
    # Pyro's LogNormal and computes the scales' terms on their distinct values.
    torch_ref = torch_kl(
        torch.distributions.LogNormal(_t(loc_q), _t(scale_q)),
        torch.distributions.LogNormal(_t(loc_p), _t(scale_p)),
    ).numpy()
    np.testing.assert_allclose(T.kl_lognormal_lognormal(*map(_t, LN)).numpy(), torch_ref)
    pyro_pair = (pdist.LogNormal(_t(loc_q), _t(scale_q)), pdist.LogNormal(_t(loc_p), _t(scale_p)))
    np.testing.assert_allclose(torch_kl(*pyro_pair).numpy(), torch_ref)
    # Broadcast (stride-0) scales give the same values as materialised ones.
    shape = (5,) + np.shape(loc_q)
    full_scale = torch.full(np.shape(loc_q), 0.3, dtype=torch.float64)
    materialised = T.kl_lognormal_lognormal(_t(loc_q), full_scale, _t(loc_p), _t(scale_p))
    expanded = T.kl_lognormal_lognormal(
        _t(loc_q).expand(shape), _t(0.3).expand(shape), _t(loc_p).expand(shape), _t(scale_p)
    )
    np.testing.assert_allclose(expanded.numpy(), materialised.expand(shape).numpy())
    np.testing.assert_allclose(ours_jax, torch_ref, rtol=1e-12)
    normal_ref = numpyro_kl(ndist.Normal(loc_q, scale_q), ndist.Normal(loc_p, scale_p))
    np.testing.assert_allclose(ours_jax, normal_ref, rtol=1e-12)
    # The rule registered with NumPyro for LogNormal pairs.
    registered = numpyro_kl(ndist.LogNormal(loc_q, scale_q), ndist.LogNormal(loc_p, scale_p))
    np.testing.assert_allclose(registered, torch_ref, rtol=1e-12)
    rng = np.random.default_rng(12)
    q = stats.lognorm(scale_q, scale=np.exp(loc_q))
    s = q.rvs(size=(40000, 6), random_state=rng)
    log_ratio = q.logpdf(s) - stats.lognorm(scale_p, scale=np.exp(loc_p)).logpdf(s)
    _within_4_se(log_ratio, torch_ref)


def test_kl_gradients_against_finite_differences():
    params_wg = (WG[0][:3], np.log(WG[1][:3]), WG[2][:3], WG[3][:3])
    params_ln = tuple(a[:3] for a in LN)
    for fn, params in ((T.kl_weibull_gamma, params_wg), (T.kl_lognormal_lognormal, params_ln)):
        inputs = tuple(_t(a).requires_grad_() for a in params)
        assert torch.autograd.gradcheck(fn, inputs)
    for fn, params in ((J.kl_weibull_gamma, params_wg), (J.kl_lognormal_lognormal, params_ln)):
        check_grads(fn, tuple(jnp.asarray(a) for a in params), order=1, modes=("rev",))


# ------------------------------------------------------------------------------ the weights


@pytest.mark.parametrize("attention", SAMPLED)
def test_unnormalised_weights_have_mean_p(attention):
    """E[S] = p: the Weibull scale p / Gamma(1 + 1/k) and the log-normal -sigma^2/2 shift."""
    log_p = np.log(np.array([0.05, 0.15, 0.3, 0.5]))
    n = 40000
    noise = _noise(attention, (n, 4), seed=13)
    param = 3.0 if attention == "weibull" else 0.6
    for mod, cast in ((T, _t), (J, jnp.asarray)):
        fn = mod.weibull_log_weights if attention == "weibull" else mod.lognormal_log_weights
        s = np.exp(np.asarray(fn(cast(log_p), param, cast(noise))))
        _within_4_se(s, np.exp(log_p))
    if attention == "weibull":  # and they are Weibull(k, lambda) draws: compare quantiles
        lam = np.exp(log_p) / gamma_fn(1 + 1 / param)
        expected = stats.weibull_min(param, scale=lam).ppf(noise)
        np.testing.assert_allclose(s, expected, rtol=1e-10)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("attention", ATTENTIONS)
def test_weights_shapes_simplex_and_modes(backend, attention):
    q, k, v, mask = _problem(seed=2)
    key = {"key": jax.random.PRNGKey(0)} if backend == "jax" else {}
    out, weights, kl = _site(backend, q, k, v, mask, attention=attention, **key)
    assert out.shape == (2, 3, 3) and weights.shape == (2, 3, 5) and kl.shape == (2, 3)
    assert np.all(np.isfinite(out)) and np.all(np.isfinite(kl))
    np.testing.assert_allclose(weights.sum(-1), 1.0, rtol=1e-12)
    assert np.all(weights[~mask] == 0) and np.all(weights[mask] > 0)
    np.testing.assert_allclose(out, weights @ v, rtol=1e-12)
    # eval without samples: exactly the masked softmax; the KL does not depend on the mode.
    logits = np.where(mask, q @ np.swapaxes(k, -1, -2) / 2.0, -np.inf)
    softmax = np.exp(logits - logits.max(-1, keepdims=True))
    softmax /= softmax.sum(-1, keepdims=True)
    _, mean_weights, kl_eval = _site(backend, q, k, v, mask, attention=attention, mode="eval")
    np.testing.assert_allclose(mean_weights, softmax, rtol=1e-12)
    np.testing.assert_allclose(kl_eval, kl, rtol=1e-12)
    if attention == "softmax":
        np.testing.assert_allclose(weights, softmax, rtol=1e-12)
        assert np.all(kl == 0)
        return
    assert np.all(kl > 0) and not np.allclose(weights, softmax)
    # eval with S samples: the average of S train-mode draws with the same noise.
    noise = _noise(attention, (3, 2, 3, 5))
    _, avg, _ = _site(
        backend, q, k, v, mask, attention=attention, mode="eval", num_samples=3, noise=noise
    )
    draws = [_site(backend, q, k, v, mask, attention=attention, noise=n)[1] for n in noise]
    np.testing.assert_allclose(avg, np.mean(draws, 0), rtol=1e-12)


@pytest.mark.parametrize("attention", SAMPLED)
def test_noise_is_drawn_reproducibly(attention):
    q, k, v, mask = _problem(seed=3)
    gen = [torch.Generator().manual_seed(5) for _ in range(2)]
    a, b = (_site("torch", q, k, v, mask, attention=attention, generator=g)[1] for g in gen)
    np.testing.assert_array_equal(a, b)
    key = jax.random.PRNGKey(5)
    a, b = (_site("jax", q, k, v, mask, attention=attention, key=key)[1] for _ in range(2))
    np.testing.assert_array_equal(a, b)
    c = _site("jax", q, k, v, mask, attention=attention, key=jax.random.PRNGKey(6))[1]
    assert not np.allclose(a, c)


# ------------------------------------------------------------------------------ gradients


@pytest.mark.parametrize("prior", ["fixed", "contextual"])
@pytest.mark.parametrize("attention", ATTENTIONS)
def test_gradient_wrt_logits_finite_and_nonzero(attention, prior):
    """The pathwise gradient flows through the drawn weights (and the KL), in both backends."""
    _, k, v, mask = _problem(seed=4)
    logits = np.random.default_rng(4).normal(size=mask.shape)
    noise = _noise(attention, mask.shape)
    tnet, jnet = _prior_pair(k.shape[-1])

    if prior == "fixed":
        torch_prior = jax_prior = {}
    else:  # a contextual prior computed from the keys, passed on as an array
        name = "prior_alpha" if attention == "weibull" else "prior_mean"
        torch_prior = {name: tnet(_t(k), torch.as_tensor(mask))}
        jax_prior = {name: jnet(jnp.asarray(k), jnp.asarray(mask))}

    lg = _t(logits).requires_grad_()
    w, kl = T.attention_weights(
        lg, torch.as_tensor(mask), attention=attention, noise=_t(noise), **torch_prior
    )
    ((w @ _t(v)).pow(2).sum() + kl.sum()).backward()
    g = lg.grad.numpy()
    assert np.all(np.isfinite(g)) and np.any(g[mask] != 0) and np.all(g[~mask] == 0)
    if prior == "contextual" and attention != "softmax":
        for p in tnet.parameters():  # the prior's gradient reaches the network, finite
            assert torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0

    def jax_loss(lg):
        w, kl = J.attention_weights(lg, mask, attention=attention, noise=noise, **jax_prior)
        return jnp.sum((w @ v) ** 2) + jnp.sum(kl)

    g_jax = np.asarray(jax.grad(jax_loss)(jnp.asarray(logits)))
    np.testing.assert_allclose(g_jax, g, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("attention", SAMPLED)
def test_site_gradients_against_finite_differences(attention):
    """Weights and KL of a sampled site, differentiated in the logits and in k / sigma."""
    _, _, _, mask = _problem(seed=5)
    rng = np.random.default_rng(5)
    logits = rng.normal(size=mask.shape)
    noise = _noise(attention, mask.shape)
    param = 2.5 if attention == "weibull" else 0.4
    name = "concentration" if attention == "weibull" else "sigma"

    def torch_fn(lg, p):
        kw = {name: p, "prior_alpha": 0.7, "prior_beta": 1.3, "prior_sigma": 0.8}
        return T.attention_weights(
            lg, torch.as_tensor(mask), attention=attention, noise=_t(noise), **kw
        )

    inputs = (_t(logits).requires_grad_(), _t(param).requires_grad_())
    assert torch.autograd.gradcheck(torch_fn, inputs)

    def jax_fn(lg, p):
        kw = {name: p, "prior_alpha": 0.7, "prior_beta": 1.3, "prior_sigma": 0.8}
        return J.attention_weights(lg, mask, attention=attention, noise=noise, **kw)

    check_grads(jax_fn, (jnp.asarray(logits), jnp.asarray(param)), order=1, modes=("rev",))


# ------------------------------------------------------------------------------ parity


@pytest.mark.parametrize(
    "attention,prior", list(itertools.product(ATTENTIONS, ["fixed", "contextual"]))
)
def test_torch_and_jax_agree(attention, prior):
    q, k, v, mask = _problem(seed=6)
    tnet, jnet = _prior_pair(k.shape[-1])
    kw = {
        "attention": attention,
        "prior": prior,
        "concentration": 1.7,
        "sigma": 0.5,
        "prior_beta": 0.8,
        "prior_sigma": 0.6,
    }
    if prior == "fixed":
        kw.update(prior_alpha=np.full((5,), 0.4), prior_mean=0.3)
    nets = {"torch": {"prior_net": tnet}, "jax": {"prior_net": jnet}} if prior != "fixed" else {}
    noise1 = _noise(attention, mask.shape)
    noise3 = _noise(attention, (3,) + mask.shape)
    for mode, extra in [
        ("train", {"noise": noise1}),
        ("eval", {}),
        ("eval", {"num_samples": 3, "noise": noise3}),
    ]:
        for m in (mask, None):
            a, b = (
                _site(be, q, k, v, m, mode=mode, **kw, **extra, **nets.get(be, {}))
                for be in BACKENDS
            )
            for x, y in zip(a, b, strict=True):
                np.testing.assert_allclose(x, y, rtol=1e-11, atol=1e-13)
    # The contextual priors themselves: softmax over the visible keys, query-independent.
    tw = tnet(_t(k), torch.as_tensor(mask)).detach().numpy()
    jw = np.asarray(jnet(jnp.asarray(k), jnp.asarray(mask)))
    np.testing.assert_allclose(tw, jw, rtol=1e-12)
    np.testing.assert_allclose(tw.sum(-1), 1.0, rtol=1e-12)
    assert np.all(tw[~mask] == 0) and np.all(tw[mask] > 0)
    assert tnet(_t(k)).shape == (2, 1, 5) and jnet(jnp.asarray(k)).shape == (2, 1, 5)


def test_contextual_prior_changes_kl_not_weights():
    q, k, v, mask = _problem(seed=7)
    tnet, _ = _prior_pair(k.shape[-1])
    noise = _noise("weibull", mask.shape)
    fixed = _site("torch", q, k, v, mask, attention="weibull", noise=noise)
    ctx = _site(
        "torch", q, k, v, mask, attention="weibull", prior="contextual", prior_net=tnet, noise=noise
    )
    np.testing.assert_allclose(fixed[1], ctx[1])
    assert not np.allclose(fixed[2], ctx[2])
    # The prior's gradient reaches the network's parameters.
    out = T.bayesian_attention(
        _t(q),
        _t(k),
        _t(v),
        torch.as_tensor(mask),
        attention="lognormal",
        prior="contextual",
        prior_net=tnet,
        noise=_t(noise),
    )
    out.kl.sum().backward()
    assert all(torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0 for p in tnet.parameters())


# ------------------------------------------------------------------------------ bad input


BAD = [
    ({"attention": "weibull", "concentration": 0.0}, r"expected concentration.*> 0.*got 0\.0"),
    ({"attention": "weibull", "concentration": -2.0}, r"expected concentration.*got -2\.0"),
    ({"attention": "lognormal", "sigma": 0.0}, r"expected sigma.*> 0.*got 0\.0"),
    ({"attention": "lognormal", "sigma": -1.0}, r"expected sigma.*got -1\.0"),
    ({"attention": "gumbel"}, r"expected attention to be one of .*softmax.*got 'gumbel'"),
    ({"prior": "informative"}, r"expected prior to be one of .*contextual.*got 'informative'"),
    ({"mode": "test"}, r"expected mode to be one of .*got 'test'"),
    ({"attention": "weibull", "prior_alpha": -1.0}, r"expected prior_alpha.*got -1\.0"),
    (
        {"attention": "weibull", "prior_alpha": np.ones(4)},
        r"expected prior_alpha broadcastable to the logits' shape \(2, 3, 5\); got shape \(4,\)",
    ),
    (
        {"attention": "lognormal", "prior_mean": np.array([1.0, 1.0, 1.0, 1.0, -0.5])},
        r"expected prior_mean \(on the visible keys\) > 0.*got an array",
    ),
    ({"mode": "train", "num_samples": 3}, r"expected num_samples in \(0, 1\).*got 3"),
    ({"prior": "contextual"}, r"expected a prior_net.*got None"),
    ({"attention": "weibull", "noise": np.full((3, 3), 0.5)}, r"expected noise of shape"),
]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("kwargs,message", BAD)
def test_bad_input(backend, kwargs, message):
    q, k, v, mask = _problem(seed=8)
    kwargs = dict(kwargs)
    if backend == "jax":
        kwargs.setdefault("key", jax.random.PRNGKey(0))
    with pytest.raises(ValueError, match=message):
        _site(backend, q, k, v, mask, **kwargs)


@pytest.mark.parametrize("backend", BACKENDS)
def test_mask_hiding_every_key_of_a_query(backend):
    q, k, v, mask = _problem(seed=9)
    mask[1, 2] = False
    key = {"key": jax.random.PRNGKey(0)} if backend == "jax" else {}
    message = r"expected a mask that leaves every query at least one visible key; got 1 .*\(1, 2\)"
    for attention in ATTENTIONS:
        with pytest.raises(ValueError, match=message):
            _site(backend, q, k, v, mask, attention=attention, **key)
    with pytest.raises(ValueError, match="expected mask to be a bool"):
        _site(backend, q, k, v, mask.astype(float))
    with pytest.raises(ValueError, match="expected a mask broadcastable"):
        _site(backend, q, k, v, np.ones((4, 4), bool))


def test_jax_checks_under_jit_and_missing_key():
    q, k, v, mask = _problem(seed=9)
    site = jax.jit(
        lambda q, k, v, m: J.bayesian_attention(q, k, v, m, attention="weibull", mode="eval")
    )
    assert np.all(np.isfinite(site(q, k, v, mask).kl))
    mask[0, 1] = False
    with pytest.raises(Exception, match="expected a mask that leaves every query"):
        jax.block_until_ready(site(q, k, v, mask))
    with pytest.raises(ValueError, match=r"expected a PRNG key.*got neither"):
        J.bayesian_attention(q, k, v, attention="lognormal")
    with pytest.raises(ValueError, match=r"expected q and k with the same last dimension"):
        J.bayesian_attention(q, k[..., :2], v)


@pytest.mark.parametrize("prior", ("fixed", "contextual"))
def test_jax_prior_values_on_hidden_keys_are_ignored_under_jit(prior):
    """A prior parameter that is not positive on hidden keys only is valid under ``jax.jit``
    (where the traced mask cannot say which keys those are) as it is eagerly, with either
    prior."""
    q, k, v, mask = _problem(seed=10)
    mask[..., -1] = False
    mask[..., 0] = True
    beta = np.where(mask, 1.5, -1.0)
    kw = dict(attention="weibull", mode="eval", prior=prior, prior_beta=beta)
    if prior == "contextual":
        kw["prior_net"] = _prior_pair(q.shape[-1])[1]
    eager = J.bayesian_attention(q, k, v, jnp.asarray(mask), **kw).kl
    jitted = jax.jit(lambda m: J.bayesian_attention(q, k, v, m, **kw).kl)(jnp.asarray(mask))
    np.testing.assert_allclose(np.asarray(jitted), np.asarray(eager), rtol=1e-12)


# ------------------------------------------------------------------------------ distributions


def test_log_scale_weibull_matches_weibull_and_is_reparameterised():
    rng = np.random.default_rng(14)
    conc, scale = rng.uniform(0.7, 4.0, 3), rng.uniform(0.3, 2.0, 3)
    x = rng.uniform(0.05, 3.0, (5, 3))
    td = T.LogScaleWeibull(_t(np.log(scale)), _t(conc))
    nd = J.LogScaleWeibull(np.log(scale), conc)
    ref = stats.weibull_min(conc, scale=scale)
    for d, cast in ((td, _t), (nd, jnp.asarray)):
        assert d.has_rsample and d.batch_shape == (3,)
        np.testing.assert_allclose(np.asarray(d.log_prob(cast(x))), ref.logpdf(x), rtol=1e-12)
        np.testing.assert_allclose(np.asarray(d.cdf(cast(x))), ref.cdf(x), rtol=1e-12)
        np.testing.assert_allclose(np.asarray(d.mean), ref.mean(), rtol=1e-12)
        np.testing.assert_allclose(np.asarray(d.variance), ref.var(), rtol=1e-12)
        np.testing.assert_allclose(np.asarray(d.entropy()), ref.entropy(), rtol=1e-12)
    torch.manual_seed(0)
    draws = {
        "torch": td.rsample((20000,)).numpy(),
        "jax": np.asarray(nd.sample(jax.random.PRNGKey(0), (20000,))),
        # The library Weibulls' own reparameterised paths, for comparison.
        "pyro": pdist.Weibull(_t(scale), _t(conc)).rsample((20000,)).numpy(),
        "numpyro": np.asarray(ndist.Weibull(scale, conc).sample(jax.random.PRNGKey(1), (20000,))),
    }
    for s in draws.values():
        assert s.shape == (20000, 3)
        _within_4_se(s, ref.mean())

    # Pathwise gradients in both parameters, equal to those of the draw x = lambda E^(1/k):
    # dx/dlog(lambda) = x and dx/dk = -x log(x / lambda) / k.
    def expected_grads(x, log_lam, k):
        return x.sum(0), (-x * (np.log(x) - log_lam) / k).sum(0)

    for weibull in (T.LogScaleWeibull, lambda ls, k: pdist.Weibull(ls.exp(), k)):
        ls, k = _t(np.log(scale)).requires_grad_(), _t(conc).requires_grad_()
        x = weibull(ls, k).expand((4, 3)).rsample()
        x.sum().backward()
        x = x.detach().numpy()
        g_ls, g_k = expected_grads(x, np.log(scale), conc)
        np.testing.assert_allclose(ls.grad.numpy(), g_ls, rtol=1e-10)
        np.testing.assert_allclose(k.grad.numpy(), g_k, rtol=1e-10)

    @jax.jit
    def jax_draws_and_grads(ls, k):
        outs = []
        for weibull in (J.LogScaleWeibull, lambda ls, k: ndist.Weibull(jnp.exp(ls), k)):
            x, vjp = jax.vjp(
                lambda ls, k, d=weibull: d(ls, k).sample(jax.random.PRNGKey(2), (4,)), ls, k
            )
            outs.append((x, vjp(jnp.ones_like(x))))
        return outs

    for x, (g_ls, g_k) in jax_draws_and_grads(jnp.log(scale), jnp.asarray(conc)):
        expected = expected_grads(np.asarray(x), np.log(scale), conc)
        np.testing.assert_allclose(g_ls, expected[0], rtol=1e-10)
        np.testing.assert_allclose(g_k, expected[1], rtol=1e-10)


def test_mean_field_elbo_uses_the_registered_kl():
    """Guide LogScaleWeibull / Weibull against a Gamma prior: the ELBO is exactly -KL."""
    log_scale, conc = np.log([0.4, 1.2, 2.0]), np.array([1.5, 3.0, 0.9])
    alpha, beta = np.array([0.5, 1.0, 2.0]), 1.3
    expected = J.kl_weibull_gamma(conc, log_scale, alpha, beta).sum()

    for weibull in (T.LogScaleWeibull, lambda ls, c: pdist.Weibull(ls.exp(), c)):

        def model():
            with pyro.plate("keys", 3):
                pyro.sample("s", pdist.Gamma(_t(alpha), beta))

        def guide(weibull=weibull):
            with pyro.plate("keys", 3):
                pyro.sample("s", weibull(_t(log_scale), _t(conc)))

        loss = pyro.infer.TraceMeanField_ELBO().differentiable_loss(model, guide)
        np.testing.assert_allclose(loss.item(), expected, rtol=1e-12)

    def nmodel():
        with numpyro.plate("keys", 3):
            numpyro.sample("s", ndist.Gamma(alpha, beta))

    def nguide():
        with numpyro.plate("keys", 3):
            numpyro.sample("s", J.LogScaleWeibull(log_scale, conc))

    loss = numpyro.infer.TraceMeanField_ELBO().loss(jax.random.PRNGKey(0), {}, nmodel, nguide)
    np.testing.assert_allclose(loss, expected, rtol=1e-12)


def test_compact_views():
    """``compact`` keeps one entry along each stride-0 dimension."""
    alpha = _t(np.random.default_rng(3).uniform(0.5, 3.0, (2, 1, 5))).expand(2, 4, 5)
    assert compact(alpha).shape == (2, 1, 5)
    assert compact(_t(1.5).expand(3, 2)).shape == (1, 1)
    assert compact(alpha.contiguous()).shape == (2, 4, 5)  # materialised: nothing to drop
    torch.testing.assert_close(compact(alpha).expand(2, 4, 5), alpha)


def _layer_case(seed, masked, contextual):
    """Shape, mask, visible weights, logits, a positive prior parameter (per key if contextual,
    else a scalar; requiring grads) and positive values for one attention layer of batch (3,),
    2 heads and 4 tokens."""
    rng = np.random.default_rng(seed)
    batch, heads, tokens = (3,), 2, 4
    shape = (*batch, heads, tokens, tokens)
    mask = torch.as_tensor(rng.random((tokens, tokens)) < 0.6) if masked else None
    if masked:
        mask[:, 0] = True  # every query sees a key
    visible = torch.ones(shape, dtype=torch.bool) if mask is None else mask.expand(shape)
    logits = _t(rng.normal(size=shape)).requires_grad_()
    prior_shape = (*batch, heads, 1, tokens) if contextual else ()
    prior_param = _t(rng.uniform(0.3, 2.0, prior_shape))
    value = _t(rng.uniform(0.05, 2.0, shape))
    return shape, mask, visible, logits, prior_param.requires_grad_(), value


def _check_layer_pair(q, p, q_ref, p_ref, weightwise_kl, params, visible, value):
    """A layer's posterior ``q`` and prior ``p`` against the weight-wise ``q_ref`` and ``p_ref``
    (``weightwise_kl`` their elementwise KL), masked and summed: the KL and its gradients in
    ``params``, log-densities; the posterior mean is the softmax, and the draws have that mean;
    expanding keeps the KL, and expanding to the own batch shape is the distribution itself."""
    batch, shape = q.batch_shape, q.batch_shape + q.event_shape
    assert p.batch_shape == batch and p.event_shape == q.event_shape

    def masked_sum(t):
        return torch.where(visible, t, 0.0).sum((-3, -2, -1))

    kl = torch_kl(q, p)
    grads = torch.autograd.grad(kl.sum(), params, retain_graph=True)
    kl_ref = masked_sum(weightwise_kl)
    grads_ref = torch.autograd.grad(kl_ref.sum(), params, retain_graph=True)
    torch.testing.assert_close(kl, kl_ref, rtol=1e-13, atol=0)  # float64 throughout
    for g, g_ref in zip(grads, grads_ref, strict=True):
        torch.testing.assert_close(g, g_ref)
    torch.testing.assert_close(q.log_prob(value), masked_sum(q_ref.log_prob(value)))
    torch.testing.assert_close(p.log_prob(value), masked_sum(p_ref.log_prob(value)))
    mean = torch.where(visible, q_ref.mean, 0.0).detach()
    torch.testing.assert_close(q.mean.detach(), mean)
    expanded = q.expand((2, *batch))
    assert expanded.batch_shape == (2, *batch)
    torch.testing.assert_close(torch_kl(expanded, p.expand((2, *batch))), kl.expand(2, *batch))
    torch.manual_seed(0)
    draws = q.rsample((4000,))
    assert draws.shape == (4000, *shape) and bool((draws > 0).all())
    _within_4_se(draws.detach()[:, visible].numpy(), mean[visible].numpy())
    assert q.expand(batch) is q and p.expand(batch) is p


@pytest.mark.parametrize("contextual", [True, False])
@pytest.mark.parametrize("masked", [True, False])
def test_weibull_and_gamma_attention_match_the_weightwise_ones(contextual, masked):
    """WeibullAttention and GammaAttention against LogScaleWeibull and Gamma per weight."""
    k, beta = 2.5, 0.8
    shape, mask, visible, logits, alpha, value = _layer_case(16, masked, contextual)
    q = TD.WeibullAttention(logits, k, mask)
    p = TD.GammaAttention(alpha, beta, shape, mask)
    log_p = torch.where(visible, T.masked_log_softmax(logits, mask), 0.0)
    q_ref = T.LogScaleWeibull(T.weibull_log_scale(log_p, k), _t(k).expand(shape))
    p_ref = pdist.Gamma(alpha.expand(shape), _t(beta).expand(shape))
    weightwise_kl = T.kl_weibull_gamma(k, q_ref.log_scale, alpha, beta)
    _check_layer_pair(q, p, q_ref, p_ref, weightwise_kl, (logits, alpha), visible, value)
    with pytest.raises(ValueError, match="broadcastable"):
        TD.GammaAttention(_t(np.ones((*shape[:-2], 1, shape[-1] + 1))), beta, shape, mask)


@pytest.mark.parametrize("contextual", [True, False])
@pytest.mark.parametrize("masked", [True, False])
def test_lognormal_attention_matches_the_weightwise_lognormals(contextual, masked):
    """LogNormalAttention, as posterior (mean the softmax) and as prior (a fixed or per-key
    mean kept compact), against Pyro's LogNormal per weight."""
    sigma_q, sigma_p = 0.3, 0.7
    shape, mask, visible, logits, prior_mean, value = _layer_case(17, masked, contextual)
    log_p = torch.where(visible, T.masked_log_softmax(logits, mask), 0.0)
    log_m = torch.log(prior_mean)
    q = TD.LogNormalAttention(log_p, sigma_q, shape, mask)
    p = TD.LogNormalAttention(log_m, sigma_p, shape, mask)
    assert p.log_mean.shape == (1,) * (len(shape) - log_m.dim()) + log_m.shape  # not expanded

    def weightwise(log_mean, sigma):
        return pdist.LogNormal(log_mean.expand(shape) - sigma**2 / 2, _t(sigma).expand(shape))

    q_ref, p_ref = weightwise(log_p, sigma_q), weightwise(log_m, sigma_p)
    weightwise_kl = torch_kl(q_ref, p_ref)
    _check_layer_pair(q, p, q_ref, p_ref, weightwise_kl, (logits, prior_mean), visible, value)
    with pytest.raises(ValueError, match="broadcastable"):
        TD.LogNormalAttention(_t(np.zeros((*shape[:-2], 1, shape[-1] + 1))), 1.0, shape, mask)


def test_draws_keep_their_log_for_the_attention_weights():
    """The guide's draws carry the log they were made from: the same value and gradient as
    ``torch.log`` of the draw, without a second pass over it; other tensors fall back to log."""
    rng = np.random.default_rng(15)
    loc, weights = rng.normal(size=(6, 5)), _t(rng.normal(size=(6, 5)))
    makers = (
        lambda p: T.LogScaleWeibull(p, _t(3.0)),
        lambda p: TD.WeibullAttention(p.reshape(1, 1, 6, 5), 3.0),
        lambda p: TD.LogNormalAttention(p.reshape(1, 1, 6, 5), 0.4, (1, 1, 6, 5)),
    )
    for make in makers:
        results = []
        for log in (TD.log_of_draw, torch.log):
            param = _t(loc).requires_grad_()
            torch.manual_seed(0)
            value = log(make(param).rsample())
            (value * weights).sum().backward()
            results.append((value.detach().numpy(), param.grad.numpy()))
        np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-12)
        np.testing.assert_allclose(results[0][1], results[1][1], rtol=1e-12)
    s = _t(rng.uniform(0.1, 2.0, 4))
    np.testing.assert_array_equal(TD.log_of_draw(s).numpy(), torch.log(s).numpy())
