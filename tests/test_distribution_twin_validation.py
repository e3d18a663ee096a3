"""The Pyro and NumPyro twins of the zoo's distributions on bad and boundary parameters: with
validation on, both refuse a parameter with a clear error, or both accept it and give the same
numbers (checked against NumPy and SciPy)."""

from __future__ import annotations

import math
import types
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from numpyro.distributions.kl import kl_divergence as jax_kl
from scipy.special import gammaln, logsumexp
from scipy.stats import wishart as scipy_wishart
from torch.distributions import kl_divergence as torch_kl

from zoo import distributions as jd
from zoo import torch_distributions as td

# The project runs in float64; enable it before any test builds an array.
jax.config.update("jax_enable_x64", True)

pytestmark = pytest.mark.usefixtures("one_torch_thread")

NAN, INF = float("nan"), float("inf")

# ----------------------------------------------------------------------------------- Wishart

SCALE = np.array([[2.0, 0.3, 0.1], [0.3, 1.0, 0.2], [0.1, 0.2, 0.5]])  # D = 3: df > 2


def _torch_wishart(df, validate_args=True):
    with warnings.catch_warnings():
        # torch warns of singular draws for D - 1 < df < D; the density is still defined.
        warnings.filterwarnings("ignore", "Low df values detected")
        return td.Wishart(
            torch.tensor(df), covariance_matrix=torch.tensor(SCALE), validate_args=validate_args
        )


@pytest.mark.parametrize("df", [1.5, 2.0, 0.0, -1.0, NAN, [3.0, 2.0]])
def test_wishart_twins_refuse_degrees_of_freedom_not_above_d_minus_one(df):
    with pytest.raises(ValueError, match="(?i)greater ?than"):
        _torch_wishart(df)
    with pytest.raises(ValueError, match=r"greater than D - 1 = 2 for 3 x 3 matrices"):
        jd.Wishart(jnp.asarray(df), scale_matrix=jnp.asarray(SCALE), validate_args=True)


@pytest.mark.parametrize("df", [2.5, 3.0, 7.25])
def test_wishart_twins_accept_degrees_of_freedom_above_d_minus_one_with_the_same_density(df):
    value = np.array([[1.5, 0.2, -0.1], [0.2, 0.8, 0.1], [-0.1, 0.1, 0.6]])
    expected = scipy_wishart(df=df, scale=SCALE).logpdf(value)
    torch_log_prob = _torch_wishart(df).log_prob(torch.tensor(value))
    jax_wishart = jd.Wishart(df, scale_matrix=jnp.asarray(SCALE), validate_args=True)
    # torch's Wishart log-normaliser is good to about 1e-8 (SciPy's and NumPyro's agree better).
    np.testing.assert_allclose(float(torch_log_prob), expected, rtol=1e-7)
    np.testing.assert_allclose(
        float(jax_wishart.log_prob(jnp.asarray(value))), expected, rtol=1e-10
    )


def test_wishart_checks_degrees_of_freedom_only_where_validation_can_read_them():
    """NumPyro's conventions: no check with validation off, none on a traced value inside
    ``jax.jit`` (only a concrete one can be read), the same density either way."""
    identity = jnp.eye(3)
    unchecked = jd.Wishart(1.5, scale_matrix=identity, validate_args=False)
    eager = float(unchecked.log_prob(identity))

    @jax.jit
    def log_prob(df):
        return jd.Wishart(df, scale_matrix=identity, validate_args=True).log_prob(identity)

    assert float(log_prob(1.5)) == eager
    valid = jd.Wishart(3.5, scale_matrix=identity, validate_args=True).log_prob(identity)
    assert float(log_prob(3.5)) == float(valid)
    with pytest.raises(RuntimeError, match="inside jitted code"):
        jax.jit(lambda df: jd.Wishart(df, scale_matrix=identity).validate_args())(3.5)


# ----------------------------------------------------------------------------- GumbelSoftmax

# Zero-mass categories: a log-probability of -inf, as a stick equal to one leaves them.
ZERO_MASS_LOG_PROBS = [
    [0.0, -INF],
    [[math.log(0.5), -INF, math.log(0.5)], [-INF, math.log(0.25), math.log(0.75)]],
]
TEMPERATURE = 0.4


def _twins(log_probs, straight_through=False):
    log_probs = np.asarray(log_probs, dtype=np.float64)
    return (
        td.GumbelSoftmax(
            torch.tensor(TEMPERATURE, dtype=torch.float64),
            torch.tensor(log_probs),
            straight_through,
            validate_args=True,
        ),
        jd.GumbelSoftmax(TEMPERATURE, jnp.asarray(log_probs), straight_through, validate_args=True),
    )


def test_gumbel_softmax_twins_accept_the_logits_of_a_stick_equal_to_one():
    sticks = [1.0, 0.5]
    torch_logits = td.StickBreakingCategorical(torch.tensor(sticks, dtype=torch.float64)).logits
    jax_logits = jd.StickBreakingCategorical(jnp.array(sticks)).logits
    np.testing.assert_array_equal(jax_logits, [0.0, -INF])
    torch_twin = td.GumbelSoftmax(1.0, torch_logits, validate_args=True)
    jax_twin = jd.GumbelSoftmax(1.0, jax_logits, validate_args=True)
    np.testing.assert_array_equal(jax_twin.log_probs, torch_twin.log_probs.numpy())


@pytest.mark.parametrize("log_probs", ZERO_MASS_LOG_PROBS)
def test_gumbel_softmax_twins_score_zero_mass_categories_alike(log_probs):
    torch_twin, jax_twin = _twins(log_probs)
    num_categories = np.shape(log_probs)[-1]
    batch_shape = np.shape(log_probs)[:-1]
    for k in range(num_categories):
        value = np.zeros(batch_shape + (num_categories,))
        value[..., k] = 1.0
        expected = np.asarray(log_probs)[..., k]
        np.testing.assert_array_equal(torch_twin.log_prob(torch.tensor(value)).numpy(), expected)
        np.testing.assert_array_equal(jax_twin.log_prob(jnp.asarray(value)), expected)


@pytest.mark.parametrize("straight_through", [False, True])
@pytest.mark.parametrize("log_probs", ZERO_MASS_LOG_PROBS)
def test_gumbel_softmax_twins_draw_alike_from_the_same_uniforms(
    log_probs, straight_through, monkeypatch
):
    """Fed the same uniforms, the twins give the relaxed draw NumPy computes, with exact zeros
    where a category has no mass (and never pick it straight through)."""
    torch_twin, jax_twin = _twins(log_probs, straight_through)
    shape = (5,) + np.shape(log_probs)
    uniforms = np.random.default_rng(0).uniform(0.05, 0.95, size=shape)
    monkeypatch.setattr(torch, "rand", lambda *args, **kwargs: torch.tensor(uniforms))
    monkeypatch.setattr(
        jd, "random", types.SimpleNamespace(uniform=lambda *args, **kwargs: jnp.asarray(uniforms))
    )
    scores = np.asarray(log_probs) - np.log(-np.log(uniforms))
    relaxed = np.exp(scores / TEMPERATURE - logsumexp(scores / TEMPERATURE, -1, keepdims=True))
    expected = np.eye(shape[-1])[scores.argmax(-1)] if straight_through else relaxed
    torch_draw = torch_twin.rsample((5,)).numpy()
    jax_draw = np.asarray(jax_twin.sample(jax.random.key(0), (5,)))
    np.testing.assert_allclose(torch_draw, expected, rtol=1e-12, atol=1e-15)
    np.testing.assert_allclose(jax_draw, expected, rtol=1e-12, atol=1e-15)
    zero_mass = np.broadcast_to(np.isneginf(log_probs), shape)
    assert np.all(torch_draw[zero_mass] == 0.0) and np.all(jax_draw[zero_mass] == 0.0)


@pytest.mark.parametrize(
    "q, p",
    [
        ([0.0, -INF], [math.log(0.5), math.log(0.5)]),  # q has no mass where p has
        ([math.log(0.5), -INF, math.log(0.5)], [math.log(0.25), -INF, math.log(0.75)]),
        ([math.log(0.5), math.log(0.5)], [0.0, -INF]),  # p has none where q has: infinite
    ],
)
def test_gumbel_softmax_twins_have_the_same_kl_with_zero_mass_categories(q, p):
    q_probs = np.exp(q)
    with np.errstate(invalid="ignore"):
        terms = np.where(q_probs > 0, q_probs * (np.asarray(q) - np.asarray(p)), 0.0)
    expected = terms.sum()
    (torch_q, jax_q), (torch_p, jax_p) = _twins(q), _twins(p)
    np.testing.assert_allclose(float(torch_kl(torch_q, torch_p)), expected, rtol=1e-12)
    np.testing.assert_allclose(float(jax_kl(jax_q, jax_p)), expected, rtol=1e-12)


def test_gumbel_softmax_twins_refuse_nan_and_accept_infinite_log_probs_alike():
    """Validation on both sides is torch's ``real_vector``: every number but NaN."""
    with pytest.raises(ValueError, match="log_probs"):
        _twins([0.0, NAN])
    torch_twin, jax_twin = _twins([0.0, INF])
    np.testing.assert_array_equal(jax_twin.log_probs, torch_twin.log_probs.numpy())


# --------------------------------------------------------------------- ExpRelaxedCategorical

LOGITS = np.array([0.1, -0.3, 0.2])


def _exp_concrete_log_prob(value, temperature, logits):
    """The ExpConcrete log-density of Maddison et al. (2017), appendix C, in NumPy."""
    k = len(logits)
    score = logits - temperature * value
    score = (score - logsumexp(score, axis=-1, keepdims=True)).sum(-1)
    return score + gammaln(k) + (k - 1) * np.log(temperature)


@pytest.mark.parametrize("temperature", [-0.5, 0.0, NAN])
def test_exp_relaxed_twins_refuse_a_temperature_that_is_not_positive(temperature):
    logits = torch.tensor(LOGITS)
    with pytest.raises(ValueError, match="parameter temperature"):
        td.ExpRelaxedCategorical(torch.tensor(temperature), logits=logits, validate_args=True)
    with pytest.raises(ValueError, match="parameter temperature"):
        td.ExpRelaxedCategorical(temperature, logits=logits, validate_args=True)  # a number
    with pytest.raises(ValueError, match="invalid temperature parameter"):
        jd.ExpRelaxedCategorical(temperature, jnp.asarray(LOGITS), validate_args=True)


@pytest.mark.parametrize("temperature", [0.05, 0.5, 2.0])
def test_exp_relaxed_twins_accept_a_positive_temperature_with_the_same_density(temperature):
    torch_twin = td.ExpRelaxedCategorical(
        torch.tensor(temperature, dtype=torch.float64),
        logits=torch.tensor(LOGITS),
        validate_args=True,
    )
    jax_twin = jd.ExpRelaxedCategorical(temperature, jnp.asarray(LOGITS), validate_args=True)
    torch.manual_seed(0)
    value = torch_twin.rsample((4,))
    expected = _exp_concrete_log_prob(value.numpy(), temperature, LOGITS)
    np.testing.assert_allclose(torch_twin.log_prob(value).numpy(), expected, rtol=1e-10)
    np.testing.assert_allclose(jax_twin.log_prob(jnp.asarray(value.numpy())), expected, rtol=1e-10)


def test_exp_relaxed_torch_twin_takes_a_number_temperature_as_a_tensor_and_expands():
    logits = torch.tensor(LOGITS)
    as_number = td.ExpRelaxedCategorical(0.5, logits=logits, validate_args=True)
    as_tensor = td.ExpRelaxedCategorical(torch.tensor(0.5, dtype=torch.float64), logits=logits)
    torch.manual_seed(0)
    value = as_number.rsample((3,))
    torch.manual_seed(0)
    assert torch.equal(value, as_tensor.rsample((3,)))
    assert torch.equal(as_number.log_prob(value), as_tensor.log_prob(value))
    expanded = as_number.expand([2, 3])
    assert type(expanded) is td.ExpRelaxedCategorical and expanded.batch_shape == (2, 3)
    assert torch.equal(expanded.log_prob(value), as_tensor.log_prob(value).expand(2, 3))
