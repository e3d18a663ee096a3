"""NumPyro twin of the maximum-likelihood GMM: parameters are ``numpyro.param``s, ``z`` enumerated."""

from __future__ import annotations

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.ops.indexing import Vindex

from zoo.bayesian_gmm.numpyro_model import means_constraint
from zoo.distributions import scale_free_lower_cholesky, simplex


def model(data, config, temperature=None, init=None):
    """``init`` (numpy arrays by param name) gives the parameters' starting values."""
    x = data["x"]
    init = init or {}

    def param(name, default, constraint):
        value = jnp.asarray(init[name], dtype=x.dtype) if name in init else default
        return numpyro.param(name, value, constraint=constraint)

    K, d = config.K, config.dim
    weights = param("weights", jnp.full((K,), 1.0 / K, dtype=x.dtype), simplex)
    # Both in coordinates that do not depend on the data's units (see pyro_model.py).
    means = param("means", x[:K], means_constraint(config, x))
    scale_tril = param(
        "scale_tril",
        jnp.broadcast_to(jnp.eye(d, dtype=x.dtype), (K, d, d)),
        scale_free_lower_cholesky,
    )
    with numpyro.plate("data", x.shape[0]):
        z = numpyro.sample("z", dist.Categorical(probs=weights))
        numpyro.sample(
            "x",
            dist.MultivariateNormal(
                Vindex(means)[..., z, :], scale_tril=Vindex(scale_tril)[..., z, :, :]
            ),
            obs=x,
        )


def make_guide(name, config, init):
    """No latent variable but the enumerated ``z``: the guide is empty."""

    def guide(data, config, temperature=None):
        pass

    return guide
