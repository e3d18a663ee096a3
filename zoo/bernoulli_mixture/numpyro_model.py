"""NumPyro twin of the Bernoulli mixture: the model and its MAP guide (same sites as Pyro's)."""

from __future__ import annotations

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints
from numpyro.ops.indexing import Vindex

from zoo.distributions import simplex


def model(data, config, temperature=None, init=None):
    """The generative process in ``zoo.bernoulli_mixture``; ``z`` is summed out under SVI.

    ``temperature`` and ``init`` are accepted for a uniform signature across the zoo and unused:
    the model has no parameters (``weights`` and ``probs`` are latent, their point estimates live
    in the guide) and no relaxed guide.
    """
    x = data["x"]
    K, d = config.K, config.dim
    weights = numpyro.sample(
        "weights", dist.Dirichlet(jnp.full((K,), config.weight_concentration_prior, dtype=x.dtype))
    )
    with numpyro.plate("components", K):
        probs = numpyro.sample(
            "probs",
            dist.Beta(
                jnp.full((d,), config.probs_prior_a, dtype=x.dtype),
                jnp.full((d,), config.probs_prior_b, dtype=x.dtype),
            ).to_event(1),
        )
    with numpyro.plate("data", x.shape[0]):
        z = numpyro.sample("z", dist.Categorical(probs=weights))
        numpyro.sample("x", dist.Bernoulli(probs=Vindex(probs)[..., z, :]).to_event(1), obs=x)


def make_guide(name, config, init):
    """``"enum"``: point masses on ``weights`` and ``probs`` at the params ``weights_map`` (K,)
    and ``probs_map`` (K, D), started from ``init``; ``z`` is enumerated in the model.

    With Delta factors the ELBO is the log joint at the point, ``z`` summed out: EM's objective.
    """
    if name != "enum":
        raise ValueError(f"Unknown guide {name!r} for 'bernoulli_mixture'; valid guides: ['enum'].")

    def guide(data, config, temperature=None):
        x = data["x"]
        weights = numpyro.param(
            "weights_map",
            jnp.asarray(init["weights_map"], dtype=x.dtype),
            constraint=simplex,
        )
        probs = numpyro.param(
            "probs_map",
            jnp.asarray(init["probs_map"], dtype=x.dtype),
            constraint=constraints.unit_interval,
        )
        numpyro.sample("weights", dist.Delta(weights, event_dim=1))
        with numpyro.plate("components", config.K):
            numpyro.sample("probs", dist.Delta(probs, event_dim=1))

    return guide
