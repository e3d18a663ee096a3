"""Pyro twin of the maximum-likelihood GMM: parameters are ``pyro.param``s, ``z`` is enumerated."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from pyro.ops.indexing import Vindex

from zoo.bayesian_gmm.pyro_model import means_constraint
from zoo.torch_distributions import scale_free_lower_cholesky
from zoo.weights import pyro_param_init


def model(data, config, temperature=None, init=None):
    """``init`` (numpy arrays by param name) gives the parameters' starting values."""
    x = data["x"]
    like = dict(dtype=x.dtype, device=x.device)
    init = init or {}

    def param(name, default, constraint):
        value = pyro_param_init(init, name, like) if name in init else default
        return pyro.param(name, value, constraint=constraint)

    K, d = config.K, config.dim
    weights = param("weights", torch.full((K,), 1.0 / K, **like), constraints.simplex)
    # Adam's steps are a fixed size in the unconstrained coordinates: the means move in units
    # of the data's (config.units, powers of two near each column's standard deviation) and
    # each Cholesky factor's entries relative to its diagonal, so that a fit of data measured
    # in thousandths or in thousands takes the same steps as one of unit-scale data.
    means = param("means", x[:K].clone(), means_constraint(config, x))
    scale_tril = param(
        "scale_tril", torch.eye(d, **like).expand(K, d, d), scale_free_lower_cholesky
    )
    with pyro.plate("data", x.shape[0]):
        z = pyro.sample("z", dist.Categorical(probs=weights))
        pyro.sample(
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
