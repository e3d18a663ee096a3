"""NumPyro twin of the Bayesian GMM: the model and its guides (same sites as the Pyro twin)."""

from __future__ import annotations

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints
from numpyro.ops.indexing import Vindex

from zoo.distributions import (
    RelaxedOneHotCategorical,
    StickBreakingCategorical,
    Wishart,
    lower_cholesky,
)
from zoo.plates import numpyro_data_plate as data_plate

ENUMERATED_GUIDES = ("enum",)
# A relaxed one-hot z at a temperature that SVI anneals (its temperature= option).
RELAXED_GUIDES = ("gumbel",)


def _mixture_weights(config, like):
    """Sample the weight site; return the distribution of ``z`` given it."""
    K = config.K
    ones = jnp.ones(K, dtype=like.dtype)
    if config.weight_prior == "dirichlet_process":
        with numpyro.plate("components", K):
            sticks = numpyro.sample(
                "sticks", dist.Beta(ones, config.weight_concentration_prior * ones)
            )
        return StickBreakingCategorical(sticks)
    weights = numpyro.sample("weights", dist.Dirichlet(config.weight_concentration_prior * ones))
    return dist.Categorical(probs=weights)


def model(data, config, temperature=None, init=None, num_data=None):
    """The generative process in ``zoo.bayesian_gmm``; ``temperature`` relaxes ``z``.

    ``init`` is accepted for a uniform signature across the zoo and unused: every unknown of this
    model is a latent variable, none is a parameter. With ``num_data``, ``data`` is a minibatch
    (or a shard) of a data set of that size and the data plate scales its log-density.

    With a temperature, ``z`` is a relaxed one-hot vector (Gumbel-softmax) and the likelihood of
    ``x_n`` is ``sum_k z_nk log N(x_n | mu_k, Lambda_k^-1)``, equal to the discrete model's at a
    one-hot ``z``.
    """
    x = data["x"]
    n = x.shape[0]
    z_dist = _mixture_weights(config, x)
    with numpyro.plate("components", config.K):
        precisions = numpyro.sample(
            "precisions",
            Wishart(config.degrees_of_freedom_prior, rate_matrix=config.covariance_prior),
        )
        means = numpyro.sample(
            "means",
            dist.MultivariateNormal(
                config.mean_prior, precision_matrix=config.mean_precision_prior * precisions
            ),
        )
    with data_plate(n, num_data):
        if temperature is None:
            z = numpyro.sample("z", z_dist)
            numpyro.sample(
                "x",
                dist.MultivariateNormal(
                    Vindex(means)[..., z, :], precision_matrix=Vindex(precisions)[..., z, :, :]
                ),
                obs=x,
            )
        else:
            z = numpyro.sample("z", RelaxedOneHotCategorical(temperature, logits=z_dist.logits))
            component_lp = dist.MultivariateNormal(means, precision_matrix=precisions).log_prob(
                x[..., None, :]
            )
            numpyro.factor("x", (z * component_lp).sum(-1))


def _global_factors(config, init, x, mean_family):
    """q(weights or sticks), q(precisions), q(means): shared by every guide."""
    K, d = config.K, config.dim

    def param(name, constraint=constraints.real):
        return numpyro.param(name, jnp.asarray(init[name], dtype=x.dtype), constraint=constraint)

    if config.weight_prior == "dirichlet_process":
        a = param("stick_a", constraints.positive)
        b = param("stick_b", constraints.positive)
        with numpyro.plate("components", K):
            numpyro.sample("sticks", dist.Beta(a, b))
    else:
        numpyro.sample(
            "weights", dist.Dirichlet(param("weight_concentration", constraints.positive))
        )
    dof = param("dof", constraints.greater_than(d - 1.0))
    scale_tril = param("scale_tril", lower_cholesky)
    means = param("mean_loc")
    with numpyro.plate("components", K):
        precisions = numpyro.sample("precisions", Wishart(dof, scale_tril=scale_tril))
        if mean_family == "conditional":  # the CAVI family: mu_k | Lambda_k
            beta = param("mean_precision", constraints.positive)
            mean_dist = dist.MultivariateNormal(
                means, precision_matrix=beta[:, None, None] * precisions
            )
        else:
            mean_dist = dist.MultivariateNormal(
                means, scale_tril=param("mean_scale_tril", lower_cholesky)
            )
        numpyro.sample("means", mean_dist)


def make_guide(name, config, init):
    """Guide ``name`` with parameters initialised from ``init`` (numpy arrays by param name).

    ``"enum"``: reparameterised global factors; ``z`` is summed out in the model.
    ``"gumbel"``: the same, plus q(z_n) = RelaxedOneHotCategorical(temperature, logits_n).
    ``"cavi"``: the free-form CAVI family (mu_k | Lambda_k Normal-Wishart, q(z) Categorical).
    """

    def guide(data, config, temperature=None, num_data=None):
        x = data["x"]
        if name != "enum" and num_data is not None and num_data != x.shape[0]:
            raise ValueError(
                f"Guide {name!r} has a parameter per data point (assignment_logits), so it "
                "cannot be fitted on minibatches or shards of the data; use guide='enum'."
            )
        _global_factors(config, init, x, "conditional" if name == "cavi" else "independent")
        if name == "enum":
            return
        logits = numpyro.param(
            "assignment_logits", jnp.asarray(init["assignment_logits"], dtype=x.dtype)
        )
        with numpyro.plate("data", x.shape[0]):
            if name == "gumbel":
                numpyro.sample("z", RelaxedOneHotCategorical(temperature, logits=logits))
            else:
                numpyro.sample("z", dist.Categorical(logits=logits))

    return guide
