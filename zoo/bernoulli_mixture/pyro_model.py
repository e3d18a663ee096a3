"""Pyro twin of the Bernoulli mixture: the model and its MAP guide (same sites as NumPyro's)."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from pyro.ops.indexing import Vindex

from zoo.weights import pyro_param_init


def model(data, config, temperature=None, init=None):
    """The generative process in ``zoo.bernoulli_mixture``; ``z`` is summed out under SVI.

    ``temperature`` and ``init`` are accepted for a uniform signature across the zoo and unused:
    the model has no parameters (``weights`` and ``probs`` are latent, their point estimates live
    in the guide) and no relaxed guide.
    """
    x = data["x"]
    like = dict(dtype=x.dtype, device=x.device)
    K, d = config.K, config.dim
    weights = pyro.sample(
        "weights", dist.Dirichlet(torch.full((K,), config.weight_concentration_prior, **like))
    )
    with pyro.plate("components", K):
        probs = pyro.sample(
            "probs",
            dist.Beta(
                torch.full((d,), config.probs_prior_a, **like),
                torch.full((d,), config.probs_prior_b, **like),
            ).to_event(1),
        )
    with pyro.plate("data", x.shape[0]):
        z = pyro.sample("z", dist.Categorical(probs=weights))
        pyro.sample("x", dist.Bernoulli(probs=Vindex(probs)[..., z, :]).to_event(1), obs=x)


def make_guide(name, config, init):
    """``"enum"``: point masses on ``weights`` and ``probs`` at the params ``weights_map`` (K,)
    and ``probs_map`` (K, D), started from ``init``; ``z`` is enumerated in the model.

    With Delta factors the ELBO is the log joint at the point, ``z`` summed out: EM's objective.
    """
    if name != "enum":
        raise ValueError(f"Unknown guide {name!r} for 'bernoulli_mixture'; valid guides: ['enum'].")

    def guide(data, config, temperature=None):
        x = data["x"]
        like = dict(dtype=x.dtype, device=x.device)
        weights = pyro.param(
            "weights_map",
            pyro_param_init(init, "weights_map", like),
            constraint=constraints.simplex,
        )
        probs = pyro.param(
            "probs_map",
            pyro_param_init(init, "probs_map", like),
            constraint=constraints.unit_interval,
        )
        pyro.sample("weights", dist.Delta(weights, event_dim=1))
        with pyro.plate("components", config.K):
            pyro.sample("probs", dist.Delta(probs, event_dim=1))

    return guide
