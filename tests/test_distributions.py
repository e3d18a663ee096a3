"""Tests for zoo.distributions (NumPyro) and zoo.torch_distributions (Pyro).

JAX work is wrapped in ``jax.jit``: compiling one function is much cheaper than compiling every
eager op separately, which keeps this file fast on a small CPU.
"""

from __future__ import annotations

from functools import partial

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.contrib.funsor  # noqa: F401  (NumPyro's TraceEnum_ELBO needs funsor)
import numpyro.distributions as ndist
import pyro
import pyro.distributions as pdist
import pytest
import torch
from scipy.special import logsumexp
from scipy.stats import norm

from zoo.distributions import RelaxedOneHotCategorical, StickBreakingCategorical
from zoo.torch_distributions import StickBreakingCategorical as TorchStickBreaking

# The whole project runs in float64; enable it before any test builds an array.
jax.config.update("jax_enable_x64", True)

RTOL = 1e-10


@jax.jit
def _relaxed_log_prob(value, temperature, probs=None, logits=None):
    return RelaxedOneHotCategorical(temperature, probs=probs, logits=logits).log_prob(value)


@partial(jax.jit, static_argnames="sample_shape")
def _relaxed_sample(key, temperature, probs=None, logits=None, sample_shape=()):
    return RelaxedOneHotCategorical(temperature, probs=probs, logits=logits).sample(
        key, sample_shape
    )


def _torch_relaxed(temperature, probs=None, logits=None):
    def t(a):
        return None if a is None else torch.as_tensor(np.asarray(a), dtype=torch.float64)

    return torch.distributions.RelaxedOneHotCategorical(
        t(temperature), probs=t(probs), logits=t(logits)
    )


# ----------------------------------------------------------------- RelaxedOneHotCategorical


@pytest.mark.parametrize("param", ["probs", "logits"])
@pytest.mark.parametrize("batch_shape", [(), (3,), (2, 3)])
def test_relaxed_log_prob_matches_torch(param, batch_shape):
    rng = np.random.default_rng(0)
    num_events = 4
    for _ in range(3):
        temperature = rng.uniform(0.2, 3.0)
        if param == "probs":
            kwargs = {"probs": rng.dirichlet(np.ones(num_events), size=batch_shape)}
        else:
            kwargs = {"logits": rng.normal(size=batch_shape + (num_events,))}
        # Values from a Dirichlet, not from either sampler, so neither side is favoured.
        value = rng.dirichlet(np.full(num_events, 0.5), size=(5,) + batch_shape)
        expected = _torch_relaxed(temperature, **kwargs).log_prob(torch.as_tensor(value)).numpy()
        actual = _relaxed_log_prob(value, temperature, **kwargs)
        assert actual.shape == (5,) + batch_shape
        np.testing.assert_allclose(np.asarray(actual), expected, rtol=RTOL)


def test_relaxed_shapes_and_batched_temperature():
    rng = np.random.default_rng(1)
    temperature = rng.uniform(0.2, 3.0, size=3)
    probs = rng.dirichlet(np.ones(5), size=3)
    value = rng.dirichlet(np.ones(5), size=(4, 3))
    # torch only supports a scalar temperature, so compare row by row.
    actual = np.asarray(_relaxed_log_prob(value, temperature, probs=probs))
    for b in range(3):
        expected = _torch_relaxed(temperature[b], probs=probs[b]).log_prob(
            torch.as_tensor(value[:, b])
        )
        np.testing.assert_allclose(actual[:, b], expected.numpy(), rtol=RTOL)
    # A temperature with its own batch dimension broadcasts against the logits' batch.
    assert RelaxedOneHotCategorical.infer_shapes((3, 1), logits=(2, 5)) == ((3, 2), (5,))
    d = jax.eval_shape(lambda t, p: RelaxedOneHotCategorical(t, probs=p), temperature, probs)
    assert d.batch_shape == (3,) and d.event_shape == (5,)
    sample = jax.eval_shape(
        partial(_relaxed_sample, sample_shape=(7,)),
        jax.random.PRNGKey(0),
        temperature[:, None],
        logits=probs[:2],
    )
    assert sample.shape == (7, 3, 2, 5)


def test_relaxed_samples_shape_and_simplex():
    probs = np.array([[0.1, 0.2, 0.3, 0.4], [0.7, 0.1, 0.1, 0.1]])
    # Very low temperature: softmax would give exact zeros without the clamp.
    for key, temperature in enumerate([0.3, 1e-3]):
        x = _relaxed_sample(jax.random.PRNGKey(key), temperature, probs, sample_shape=(1000,))
        assert x.shape == (1000, 2, 4)
        x = np.asarray(x)
        assert np.all(x > 0) and np.all(x < 1)
        np.testing.assert_allclose(x.sum(-1), 1.0, atol=1e-12)
        assert np.all(np.isfinite(_relaxed_log_prob(x, temperature, probs)))


def test_relaxed_samples_agree_with_torch():
    n = 20000
    probs = np.array([0.1, 0.2, 0.3, 0.4])
    temperature = 0.5
    x = np.asarray(_relaxed_sample(jax.random.PRNGKey(2), temperature, probs, sample_shape=(n,)))
    torch.manual_seed(0)
    y = _torch_relaxed(temperature, probs=probs).sample((n,)).numpy()
    z = (x.mean(0) - y.mean(0)) / np.sqrt((x.var(0) + y.var(0)) / n)
    assert np.all(np.abs(z) < 5), z
    # Gumbel-max: the argmax of a Concrete sample is Categorical(probs) at any temperature.
    freq = np.bincount(x.argmax(-1), minlength=4) / n
    assert np.all(np.abs(freq - probs) < 5 * np.sqrt(probs * (1 - probs) / n)), freq


def test_relaxed_reparameterised_gradient():
    key = jax.random.PRNGKey(3)
    weights = jnp.arange(4.0)

    def f(logits):
        return RelaxedOneHotCategorical(0.7, logits=logits).sample(key) @ weights

    grad = jax.jit(jax.grad(f))(jnp.array([0.1, -0.3, 0.5, 0.0]))
    assert np.all(np.isfinite(grad)) and np.any(grad != 0)
    assert RelaxedOneHotCategorical(0.7, logits=jnp.zeros(3)).has_rsample


def test_relaxed_pytree_jit_and_expand():
    # A distribution built inside jit comes back out through tree_unflatten ...
    probs = jnp.array([0.2, 0.3, 0.5])
    d = jax.jit(lambda p: RelaxedOneHotCategorical(0.5, probs=p))(probs)
    assert d.batch_shape == () and d.event_shape == (3,)
    value = _relaxed_sample(jax.random.PRNGKey(4), 0.5, probs, sample_shape=(6,))
    # ... and goes back in as an argument, also when expanded.
    np.testing.assert_allclose(
        jax.jit(lambda d, v: d.log_prob(v))(d, value), _relaxed_log_prob(value, 0.5, probs)
    )

    @jax.jit
    def expanded(d, key, value):
        e = d.expand((2, 3))
        return e.sample(key), e.log_prob(value)

    e = d.expand((2, 3))
    assert e.batch_shape == (2, 3) and e.event_shape == (3,)
    sample, log_prob = expanded(d, jax.random.PRNGKey(5), value[:3])
    assert sample.shape == (2, 3, 3) and log_prob.shape == (2, 3)


def test_relaxed_in_plate_under_jit():
    mu = jnp.array([-2.0, 0.0, 2.0])
    x = jnp.array([-2.1, 0.3, 1.9, 2.2, -0.1])

    def model(x):
        with numpyro.plate("data", 5):
            z = numpyro.sample("z", RelaxedOneHotCategorical(0.5, probs=jnp.ones(3) / 3))
            numpyro.sample("x", ndist.Normal(z @ mu, 1.0), obs=x)

    def guide(x):
        logits = numpyro.param("logits", jnp.zeros((5, 3)))
        with numpyro.plate("data", 5):
            numpyro.sample("z", RelaxedOneHotCategorical(0.5, logits=logits))

    elbo = numpyro.infer.Trace_ELBO()
    loss = jax.jit(lambda key: elbo.loss(key, {}, model, guide, x))(jax.random.PRNGKey(6))
    assert np.isfinite(loss)


def test_relaxed_bad_input():
    with pytest.raises(ValueError):
        RelaxedOneHotCategorical(0.0, probs=jnp.ones(3) / 3, validate_args=True)
    with pytest.raises(ValueError):
        RelaxedOneHotCategorical(jnp.array([1.0, -1.0]), logits=jnp.zeros(3), validate_args=True)
    with pytest.raises(ValueError, match="probs.*logits"):
        RelaxedOneHotCategorical(1.0, probs=jnp.ones(3) / 3, logits=jnp.zeros(3))
    with pytest.raises(ValueError, match="probs.*logits"):
        RelaxedOneHotCategorical(1.0)


# ----------------------------------------------------------------- StickBreakingCategorical


def _hand_log_pi(sticks):
    out = np.empty_like(sticks)
    for k in range(sticks.shape[-1]):
        out[..., k] = np.log(sticks[..., k]) + np.log(1 - sticks[..., :k]).sum(-1)
    return out


_stick_breaking = jax.jit(StickBreakingCategorical)
_log_prob = jax.jit(lambda d, value: d.log_prob(value))


def test_stick_breaking_log_prob_both_backends():
    rng = np.random.default_rng(7)
    sticks = rng.uniform(0.05, 0.95, size=(2, 3, 5))
    expected = np.moveaxis(_hand_log_pi(sticks), -1, 0)  # (K, 2, 3)
    d = _stick_breaking(sticks)
    t = TorchStickBreaking(torch.as_tensor(sticks))
    assert d.batch_shape == (2, 3) and t.batch_shape == (2, 3)
    values = d.enumerate_support()
    assert values.shape == (5, 2, 3)
    np.testing.assert_allclose(np.asarray(_log_prob(d, values)), expected, rtol=RTOL)
    t_values = t.enumerate_support()
    np.testing.assert_allclose(t.log_prob(t_values).numpy(), expected, rtol=RTOL)
    # Defective: the mass beyond the truncation, prod(1 - v), is missing.
    total = np.exp(np.asarray(_log_prob(d, values))).sum(0)
    np.testing.assert_allclose(total, 1 - np.prod(1 - sticks, -1), rtol=RTOL)
    assert np.all(total < 1)
    np.testing.assert_allclose(np.asarray(d.logits), np.moveaxis(expected, 0, -1), rtol=RTOL)
    np.testing.assert_allclose(np.asarray(d.probs), np.exp(np.moveaxis(expected, 0, -1)))
    np.testing.assert_allclose(t.probs.numpy(), np.exp(np.moveaxis(expected, 0, -1)))
    # Enumeration-shaped values (K, 1, 1) broadcast against the batch.
    unexpanded = d.enumerate_support(expand=False)
    assert unexpanded.shape == (5, 1, 1)
    np.testing.assert_allclose(np.asarray(_log_prob(d, unexpanded)), expected, rtol=RTOL)
    t_unexpanded = t.enumerate_support(expand=False)
    np.testing.assert_allclose(t.log_prob(t_unexpanded).numpy(), expected, rtol=RTOL)


def test_stick_breaking_sample_and_expand():
    sticks = np.array([0.3, 0.5, 0.2, 0.4])
    pi = np.exp(_hand_log_pi(sticks))
    pi_normalised = pi / pi.sum()
    n = 20000
    d = _stick_breaking(sticks)
    t = TorchStickBreaking(torch.as_tensor(sticks))
    x = np.asarray(jax.jit(lambda d, key: d.sample(key, (n,)))(d, jax.random.PRNGKey(8)))
    torch.manual_seed(1)
    y = t.sample((n,)).numpy()
    se = np.sqrt(pi_normalised * (1 - pi_normalised) / n)
    for draws in (x, y):
        assert draws.shape == (n,)
        freq = np.bincount(draws, minlength=4) / n
        assert np.all(np.abs(freq - pi_normalised) < 5 * se), freq

    @jax.jit
    def expanded(d, key):
        e = d.expand((3, 2))
        return e.sample(key, (7,)), e.log_prob(e.enumerate_support())

    sample, log_prob = expanded(d, jax.random.PRNGKey(9))
    te = t.expand((3, 2))
    assert sample.shape == (7, 3, 2) and te.sample((7,)).shape == (7, 3, 2)
    assert te.sticks.shape == (3, 2, 4)
    expected = np.broadcast_to(np.log(pi)[:, None, None], (4, 3, 2))
    np.testing.assert_allclose(log_prob, expected, rtol=RTOL)
    np.testing.assert_allclose(te.log_prob(te.enumerate_support()).numpy(), expected, rtol=RTOL)


def _enumerated_gmm_loss(sticks, mu, x):
    log_pi = _hand_log_pi(sticks)
    log_lik = norm.logpdf(x[:, None], mu[None, :], 1.0)
    return -logsumexp(log_pi + log_lik, axis=-1).sum()


STICKS = np.array([0.4, 0.3, 0.6, 0.5])
MU = np.array([-3.0, -1.0, 1.0, 3.0])
X = np.array([-2.5, -0.8, 0.2, 1.1, 2.9, 3.4])


def test_stick_breaking_enumeration_numpyro():
    def model(x):
        with numpyro.plate("data", len(x)):
            z = numpyro.sample(
                "z", StickBreakingCategorical(jnp.asarray(STICKS)), infer={"enumerate": "parallel"}
            )
            numpyro.sample("x", ndist.Normal(jnp.asarray(MU)[z], 1.0), obs=x)

    def guide(x):
        pass

    elbo = numpyro.infer.TraceEnum_ELBO()
    loss = jax.jit(lambda key: elbo.loss(key, {}, model, guide, jnp.asarray(X)))(
        jax.random.PRNGKey(10)
    )
    np.testing.assert_allclose(loss, _enumerated_gmm_loss(STICKS, MU, X), rtol=RTOL)


def test_stick_breaking_enumeration_pyro():
    sticks, mu, x = (torch.as_tensor(a) for a in (STICKS, MU, X))

    def model(x):
        with pyro.plate("data", len(x)):
            z = pyro.sample("z", TorchStickBreaking(sticks), infer={"enumerate": "parallel"})
            pyro.sample("x", pdist.Normal(mu[z], 1.0), obs=x)

    def guide(x):
        pass

    pyro.clear_param_store()
    loss = pyro.infer.TraceEnum_ELBO(max_plate_nesting=1).loss(model, guide, x)
    np.testing.assert_allclose(loss, _enumerated_gmm_loss(STICKS, MU, X), rtol=RTOL)


def test_stick_breaking_bad_input():
    with pytest.raises(ValueError):
        StickBreakingCategorical(np.array([0.5, 1.5]), validate_args=True)
    with pytest.raises(ValueError):
        TorchStickBreaking(torch.tensor([0.5, -0.1]), validate_args=True)
    with pytest.raises(NotImplementedError):
        TorchStickBreaking(torch.tensor([0.5, 0.5])).entropy()


def test_wishart_is_reparameterised_in_every_parameter():
    """NumPyro's ELBOs use the pathwise gradient only for sites whose fn has_rsample."""
    from zoo.distributions import Wishart

    assert Wishart(3.0, scale_tril=jnp.eye(2)).has_rsample


@partial(jax.jit, static_argnames=("wishart", "sample_shape"))
def _wishart_draw(key, concentration, scale_tril, wishart, sample_shape):
    # As numpyro.sample draws: through the base distribution (sample_with_intermediates).
    draw, _ = wishart(concentration, scale_tril=scale_tril).sample_with_intermediates(
        key, sample_shape
    )
    return draw


@pytest.mark.slow  # compiles three Wishart samplers (Gamma rejection loops)
def test_wishart_draws_in_the_dtype_of_its_parameters_and_float64_as_numpyro_does():
    """Under JAX's x64 mode NumPyro's Wishart draws float64 whatever its parameters; the
    zoo's keeps float32, and its float64 draws are NumPyro's to the bit."""
    import numpyro.distributions as ndist

    from zoo.distributions import Wishart

    key = jax.random.PRNGKey(3)
    concentration = jnp.array([3.5, 6.0])
    scale_tril = jnp.array([[[1.0, 0.0], [0.3, 0.7]], [[2.0, 0.0], [-0.4, 0.5]]])
    ours = _wishart_draw(key, concentration, scale_tril, Wishart, (3,))
    numpyros = _wishart_draw(key, concentration, scale_tril, ndist.Wishart, (3,))
    assert ours.dtype == jnp.float64 and ours.shape == (3, 2, 2, 2)
    np.testing.assert_array_equal(np.asarray(ours), np.asarray(numpyros))
    # float32 draws are another random stream: they are checked against the Wishart's mean.
    single = _wishart_draw(
        key, concentration.astype(jnp.float32), scale_tril.astype(jnp.float32), Wishart, (20_000,)
    )
    assert single.dtype == jnp.float32 and single.shape == (20_000, 2, 2, 2)
    draws = np.asarray(single, dtype=np.float64)
    mean = np.asarray(concentration)[:, None, None] * np.asarray(scale_tril @ scale_tril.mT)
    standard_error = draws.std(0) / np.sqrt(len(draws))
    assert np.all(np.abs(draws.mean(0) - mean) < 4 * standard_error)


def test_torch_wishart_draws_as_drawn():
    """torch's Wishart redraws (and warns about) positive-definite draws; the zoo's does not,
    and its draws have the Wishart's mean, df times the scale matrix, and gradients."""
    import warnings

    from zoo.torch_distributions import Wishart

    torch.manual_seed(0)
    df = torch.tensor(4.0, dtype=torch.float64, requires_grad=True)
    scale_tril = torch.tensor([[1.0, 0.0], [0.5, 2.0]], dtype=torch.float64)
    wishart = Wishart(df, scale_tril=scale_tril).expand((3,))
    assert isinstance(wishart, Wishart)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        draws = wishart.rsample((20_000,))  # (20000, 3, 2, 2)
    assert bool((torch.linalg.eigvalsh(draws) > 0).all())
    flat = draws.detach().reshape(-1, 2, 2)
    standard_error = flat.std(0) / flat.shape[0] ** 0.5
    mean = (df * scale_tril @ scale_tril.T).detach()
    assert bool(((flat.mean(0) - mean).abs() < 4 * standard_error).all())
    draws.sum().backward()
    assert df.grad is not None and torch.isfinite(df.grad)


def test_normal_draws_in_the_dtype_of_its_parameters():
    """Under JAX's x64 mode NumPyro's Normal draws float64 noise; the zoo's keeps float32."""
    import numpyro.distributions as ndist

    import inference.backends.numpyro_backend  # noqa: F401  (turns x64 on, as every fit does)
    from zoo.distributions import Normal

    loc, scale = jnp.zeros(3, jnp.float32), jnp.ones(3, jnp.float32)
    key = jax.random.PRNGKey(0)
    assert ndist.Normal(loc, scale).sample(key).dtype == jnp.float64  # why the class exists
    draw = Normal(loc, scale).sample(key, (4,))
    assert draw.dtype == jnp.float32 and draw.shape == (4, 3)
    np.testing.assert_allclose(
        Normal(loc, scale).log_prob(draw), ndist.Normal(loc, scale).log_prob(draw), rtol=1e-6
    )


def test_zoo_normal_draws_what_torch_draws_and_traces_to_one_random_operation():
    """``zoo.torch_distributions.Normal`` (the VAE guide's): torch's draws, with one operation
    in a ``torch.jit.trace`` where torch's traced draw fills tensors of zeros and ones."""
    from zoo.torch_distributions import Normal

    loc = torch.randn(5, 3, dtype=torch.float64)
    scale = torch.rand(5, 3, dtype=torch.float64) + 0.5
    torch.manual_seed(0)
    ours = Normal(loc, scale).rsample((2,))
    torch.manual_seed(0)
    assert torch.equal(ours, torch.distributions.Normal(loc, scale).rsample((2,)))
    graph = torch.jit.trace(lambda m, s: Normal(m, s).rsample(), (loc, scale)).graph
    kinds = [node.kind() for node in graph.nodes()]
    assert "aten::randn" in kinds
    assert not {"aten::zeros", "aten::ones", "aten::normal"} & set(kinds)


def _operations(fn, *args) -> int:
    """The operations of a ``torch.jit.trace`` of ``fn``, views and constants left out."""
    graph = torch.jit.trace(fn, args).graph
    skip = ("prim::", "aten::expand", "aten::view", "aten::size", "aten::Int", "aten::slice")
    return sum(not node.kind().startswith(skip) for node in graph.nodes())


@pytest.mark.filterwarnings("ignore:`torch.jit.trace` is deprecated:DeprecationWarning")
@pytest.mark.filterwarnings("ignore::torch.jit.TracerWarning")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_standard_normal_gives_torchs_numbers_in_fewer_operations(dtype):
    """``zoo.torch_distributions.StandardNormal`` (the VAE prior's): torch's log-density,
    KL from a Normal and draws, bit for bit, in fewer operations; broadcast as torch's; a
    location or scale that is not 0 or 1 is refused under validation."""
    from zoo.torch_distributions import Normal, StandardNormal

    zero, one = torch.zeros((), dtype=dtype), torch.ones((), dtype=dtype)
    ours, torchs = StandardNormal(zero, one).expand([4, 3]), torch.distributions.Normal(zero, one)
    torchs = torchs.expand([4, 3])
    assert type(ours) is StandardNormal and ours.batch_shape == (4, 3)
    value = torch.randn(2, 4, 3, dtype=dtype) * 3
    assert torch.equal(ours.log_prob(value), torchs.log_prob(value))
    assert torch.equal(ours.log_prob(value[0, 0]), torchs.log_prob(value[0, 0]))  # broadcast
    loc = torch.randn(4, 3, dtype=dtype, requires_grad=True)
    scale = (torch.rand(4, 3, dtype=dtype) + 0.1).requires_grad_()
    for q in (Normal(loc, scale), torch.distributions.Normal(loc[0], scale[0])):
        kl = torch.distributions.kl_divergence(q, ours)
        expected = torch.distributions.kl_divergence(q, torchs)
        assert kl.shape == expected.shape == (4, 3) and torch.equal(kl, expected)
        grads = torch.autograd.grad(kl.sum(), (loc, scale))
        assert all(map(torch.equal, grads, torch.autograd.grad(expected.sum(), (loc, scale))))
    torch.manual_seed(0)
    draw = ours.rsample((2,))
    torch.manual_seed(0)
    assert torch.equal(draw, torchs.rsample((2,)))

    def log_density_and_kl(cls):
        def fn(z, m, s):
            prior = cls(zero, one).expand(z.shape)
            return prior.log_prob(z), torch.distributions.kl_divergence(Normal(m, s), prior)

        return fn

    args = (value[0], loc.detach(), scale.detach())
    with pyro.validation_enabled(False):
        counts = [_operations(log_density_and_kl(cls), *args) for cls in (Normal, StandardNormal)]
    assert counts[1] <= counts[0] - 9, counts  # six in the log-density, three in the KL

    with pyro.validation_enabled(True):
        for loc0, scale0 in ((zero + 0.5, one), (zero, one * 2)):
            with pytest.raises(ValueError, match="location of 0 and a scale of 1"):
                StandardNormal(loc0, scale0)


def _scale_free_numbers(d, rng):
    """The same unconstrained numbers in the torch twin's layout (a D x D matrix whose upper
    triangle is ignored) and the NumPyro twin's (strictly lower entries row by row, then the
    log-diagonal)."""
    rows, cols = np.tril_indices(d, -1)
    lower, log_diagonal = rng.normal(size=len(rows)), rng.normal(size=d)
    matrix = np.triu(rng.normal(size=(d, d)), 1)  # ignored
    matrix[rows, cols] = lower
    matrix[np.arange(d), np.arange(d)] = log_diagonal
    return matrix, np.concatenate([lower, log_diagonal])


def test_scale_free_lower_cholesky_twins_make_the_same_factor_and_invert():
    from numpyro.distributions.transforms import biject_to as numpyro_biject_to
    from torch.distributions import transform_to

    from zoo import distributions, torch_distributions

    matrix, vector = _scale_free_numbers(4, np.random.default_rng(0))
    torch_t = transform_to(torch_distributions.scale_free_lower_cholesky)
    jax_t = numpyro_biject_to(distributions.scale_free_lower_cholesky)
    factor = torch_t(torch.as_tensor(matrix)).numpy()
    np.testing.assert_allclose(np.asarray(jax_t(jnp.asarray(vector))), factor, rtol=1e-14)
    # L = diag(exp(s)) (I + u): each off-diagonal entry is relative to its row's diagonal.
    diagonal = np.exp(np.diag(matrix))
    np.testing.assert_allclose(np.diag(factor), diagonal, rtol=1e-14)
    np.testing.assert_allclose(factor, np.tril(matrix, -1) * diagonal[:, None] + np.diag(diagonal))
    inverse = torch_t.inv(torch.as_tensor(factor)).numpy()
    np.testing.assert_allclose(inverse, np.tril(matrix), atol=1e-14)
    np.testing.assert_allclose(np.asarray(jax_t.inv(jnp.asarray(factor))), vector, atol=1e-14)
    # A float32 parameter stays float32 with JAX's 64-bit mode on.
    assert jax_t(jnp.asarray(vector, jnp.float32)).dtype == jnp.float32


def test_scale_free_lower_cholesky_log_det_jacobian_is_autograds():
    from numpyro.distributions.transforms import biject_to as numpyro_biject_to
    from torch.distributions import transform_to

    from zoo import distributions, torch_distributions

    d = 3
    matrix, vector = _scale_free_numbers(d, np.random.default_rng(1))
    torch_t = transform_to(torch_distributions.scale_free_lower_cholesky)
    rows, cols = np.tril_indices(d)  # the free entries, diagonal included

    def free_to_free(free):
        x = torch.zeros(d, d, dtype=free.dtype).index_put(
            (torch.tensor(rows), torch.tensor(cols)), free
        )
        return torch_t(x)[rows, cols]

    free = torch.as_tensor(matrix[rows, cols])
    jacobian = torch.autograd.functional.jacobian(free_to_free, free)
    expected = torch.linalg.slogdet(jacobian).logabsdet
    got = torch_t.log_abs_det_jacobian(torch.as_tensor(matrix), torch_t(torch.as_tensor(matrix)))
    torch.testing.assert_close(got, expected)
    jax_t = numpyro_biject_to(distributions.scale_free_lower_cholesky)
    jax_got = jax_t.log_abs_det_jacobian(jnp.asarray(vector), jax_t(jnp.asarray(vector)))
    np.testing.assert_allclose(float(jax_got), float(expected), rtol=1e-12)


def test_scaled_real_twins_multiply_by_the_scale_and_invert():
    from numpyro.distributions.transforms import biject_to as numpyro_biject_to
    from torch.distributions import biject_to, transform_to

    from zoo import distributions, torch_distributions

    scale = np.array([0.25, 4.0, 1024.0])
    x = np.random.default_rng(0).normal(size=(2, 3))
    torch_t = transform_to(torch_distributions.scaled_real(torch.as_tensor(scale)))
    assert type(biject_to(torch_distributions.scaled_real(torch.as_tensor(scale)))) is type(torch_t)
    jax_t = numpyro_biject_to(distributions.scaled_real(scale))
    # Powers of two: the parameter is the unconstrained value times the scale, exactly.
    np.testing.assert_array_equal(torch_t(torch.as_tensor(x)).numpy(), x * scale)
    np.testing.assert_array_equal(np.asarray(jax_t(jnp.asarray(x))), x * scale)
    np.testing.assert_array_equal(torch_t.inv(torch.as_tensor(x * scale)).numpy(), x)
    np.testing.assert_array_equal(np.asarray(jax_t.inv(jnp.asarray(x * scale))), x)
    # A float32 parameter with a float32 scale stays float32 with JAX's 64-bit mode on.
    jax_32 = numpyro_biject_to(distributions.scaled_real(scale.astype(np.float32)))
    assert jax_32(jnp.asarray(x, jnp.float32)).dtype == jnp.float32
    assert bool(distributions.scaled_real(scale)(jnp.asarray(x)).all())


@pytest.mark.parametrize("scale", [[1.0, 0.0], [1.0, -2.0], [float("nan"), 1.0], [np.inf, 1.0]])
def test_scaled_real_refuses_a_scale_that_is_not_positive_and_finite(scale):
    from zoo import distributions, torch_distributions

    match = "scale must be positive and finite"
    with pytest.raises(ValueError, match=match):
        torch_distributions.scaled_real(torch.tensor(scale))
    with pytest.raises(ValueError, match=match):
        distributions.scaled_real(np.array(scale))


def test_gumbel_softmax_kl_has_a_finite_gradient_where_q_has_no_mass():
    """A category q gives no mass (log-probability -inf) adds nothing to KL(q || p), nor to its
    gradient (the masked product's NaN reached the gradient, on both backends)."""
    from zoo import distributions as zd
    from zoo import torch_distributions as td

    def jax_kl(log_probs):
        q = zd.GumbelSoftmax(1.0, log_probs, validate_args=False)  # a defective q, as documented
        return ndist.kl_divergence(q, zd.GumbelSoftmax(1.0, jnp.log(jnp.array([0.25, 0.25, 0.5]))))

    with np.errstate(divide="ignore"):
        log_q = np.log([0.5, 0.5, 0.0])
    assert np.all(np.isfinite(jax.grad(jax_kl)(jnp.asarray(log_q))))
    a = torch.tensor(log_q, requires_grad=True)
    p = td.GumbelSoftmax(1.0, torch.tensor([0.25, 0.25, 0.5], dtype=torch.float64).log())
    kl = torch.distributions.kl_divergence(td.GumbelSoftmax(1.0, a), p)
    kl.backward()
    assert torch.isfinite(a.grad).all()
    np.testing.assert_allclose(float(kl), np.log(2.0), rtol=1e-12)  # 2 * 0.5 log(0.5 / 0.25)
    np.testing.assert_allclose(float(jax_kl(jnp.asarray(log_q))), np.log(2.0), rtol=1e-12)


def test_zoo_normal_takes_integer_parameters():
    from zoo import distributions as zd

    draw = zd.Normal(0, 1).sample(jax.random.PRNGKey(0), (4,))
    assert jnp.issubdtype(draw.dtype, jnp.floating) and draw.shape == (4,)
