"""SVI on the stick-breaking prior keeps the sticks of components with no data at their prior.

Those sticks sit at Beta(1, alpha0), alpha0 = 1/K, whose draws crowd at one: in float32 a fifth
of them round to ``1 - eps``, which cuts off ``log(1 - v)``. The enumerated guide takes the
sticks' KL in closed form, so no rounded draw biases its gradient; with their Monte-Carlo term
instead, a float32 fit's ``stick_b`` of such a component fell by about the learning rate at
every step and underflowed (NumPyro within 1,600 steps at the defaults)."""

from __future__ import annotations

import math
import types

import jax
import jax.numpy as jnp
import numpy as np
import numpyro.distributions as numpyro_dist
import pyro.distributions as pyro_dist
import pytest
import torch
from numpyro import handlers
from numpyro.distributions.kl import kl_divergence
from pyro import poutine

import inference
from zoo.bayesian_gmm import numpyro_model, pyro_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # small tensors

# The closed-form check below compares float64 numbers; JAX is in float32 unless a test run
# that imported the NumPyro backend first turned on its 64-bit mode.
jax.config.update("jax_enable_x64", True)

K = 10  # alpha0 = 0.1


# NumPyro's case compiles a float32 SVI of the Bayesian mixture for 25 s; a float32 NumPyro SVI
# fit runs in the default run in tests/test_faults_options.py (the maximum-likelihood mixture's).
@pytest.mark.parametrize("backend", ["pyro", pytest.param("numpyro", marks=pytest.mark.slow)])
def test_float32_svi_keeps_the_last_stick_at_its_prior(backend):
    """The last stick has no component after it, so its optimum is the prior's, Beta(1,
    alpha0), whatever the data."""
    x = np.random.default_rng(0).standard_normal((100, 2))
    result = inference.fit(
        "bayesian_gmm", {"x": x}, "svi", backend, K=K, dtype="float32", num_steps=300, tol=0.0,
        progress=False, seed=0,
    )  # fmt: skip
    stick_b = np.asarray(result.raw_params["stick_b"], dtype=float)
    # With the Monte-Carlo term, log(stick_b) was below -14 after these 300 steps.
    np.testing.assert_allclose(np.log(stick_b[-1]), math.log(1.0 / K), atol=0.25)


def test_the_sticks_factor_turns_their_monte_carlo_term_into_their_kl():
    """At any draw, ``log p(v) - log q(v)`` minus the guide's factor is ``-KL(q || p)``."""
    config = types.SimpleNamespace(weight_concentration_prior=0.1)
    a, b = np.array([1.0, 3.0, 1.2, 0.7]), np.array([0.1, 5.0, 0.3, 2.0])
    q, p = numpyro_dist.Beta(a, b), numpyro_dist.Beta(np.ones(4), 0.1 * np.ones(4))
    expected = -float(jnp.sum(kl_divergence(q, p)))
    for seed in range(3):
        v = q.sample(jax.random.PRNGKey(seed))
        site = handlers.trace(numpyro_model._stick_kl_in_closed_form).get_trace(config, q, v)
        factor = float(site["sticks_kl"]["fn"].log_prob(site["sticks_kl"]["value"]))
        monte_carlo = float(jnp.sum(p.log_prob(v) - q.log_prob(v)))
        assert monte_carlo - factor == pytest.approx(expected, rel=1e-12)

        tq, tp = (
            pyro_dist.Beta(torch.tensor(a), torch.tensor(b)),
            pyro_dist.Beta(
                torch.ones(4, dtype=torch.float64), 0.1 * torch.ones(4, dtype=torch.float64)
            ),
        )
        tv = torch.tensor(np.asarray(v))
        trace = poutine.trace(pyro_model._stick_kl_in_closed_form).get_trace(config, tq, tv)
        node = trace.nodes["sticks_kl"]
        factor = float(node["fn"].log_prob(node["value"]).sum())
        monte_carlo = float((tp.log_prob(tv) - tq.log_prob(tv)).sum())
        assert monte_carlo - factor == pytest.approx(expected, rel=1e-12)
