"""Pyro twin of the Bayesian GMM: the model and its guides (same sites as the NumPyro twin)."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from pyro.ops.indexing import Vindex

from zoo.plates import pyro_data_plate as data_plate
from zoo.torch_distributions import StickBreakingCategorical, Wishart
from zoo.weights import pyro_param_init

ENUMERATED_GUIDES = ("enum",)
# A relaxed one-hot z at a temperature that SVI anneals (its temperature= option).
RELAXED_GUIDES = ("gumbel",)


def _mixture_weights(config, like, components):
    """Sample the weight site; return the distribution of ``z`` given it."""
    K = config.K
    ones = torch.ones(K, dtype=like.dtype, device=like.device)
    if config.weight_prior == "dirichlet_process":
        with components:
            sticks = pyro.sample(
                "sticks", dist.Beta(ones, config.weight_concentration_prior * ones)
            )
        return sticks, StickBreakingCategorical(sticks)
    weights = pyro.sample("weights", dist.Dirichlet(config.weight_concentration_prior * ones))
    return weights, dist.Categorical(probs=weights)


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
    # One plate object, entered twice: Pyro records a plate once per trace.
    components = pyro.plate("components", config.K)
    weight_value, z_dist = _mixture_weights(config, x, components)
    with components:
        precisions = pyro.sample(
            "precisions",
            Wishart(config.degrees_of_freedom_prior, precision_matrix=config.covariance_prior),
        )
        means = pyro.sample(
            "means",
            dist.MultivariateNormal(
                config.mean_prior, precision_matrix=config.mean_precision_prior * precisions
            ),
        )
    with data_plate(n, num_data):
        if temperature is None:
            z = pyro.sample("z", z_dist)
            pyro.sample(
                "x",
                dist.MultivariateNormal(
                    Vindex(means)[..., z, :], precision_matrix=Vindex(precisions)[..., z, :, :]
                ),
                obs=x,
            )
        else:
            z = pyro.sample("z", dist.RelaxedOneHotCategorical(temperature, logits=z_dist.logits))
            component_lp = dist.MultivariateNormal(means, precision_matrix=precisions).log_prob(
                x.unsqueeze(-2)
            )
            pyro.factor("x", (z * component_lp).sum(-1))


def _global_factors(config, init, x, mean_family):
    """q(weights or sticks), q(precisions), q(means): shared by every guide."""
    K, d = config.K, config.dim
    like = dict(dtype=x.dtype, device=x.device)

    def param(name, constraint=constraints.real):
        return pyro.param(name, pyro_param_init(init, name, like), constraint=constraint)

    components = pyro.plate("components", K)
    if config.weight_prior == "dirichlet_process":
        a = param("stick_a", constraints.positive)
        b = param("stick_b", constraints.positive)
        with components:
            pyro.sample("sticks", dist.Beta(a, b))
    else:
        pyro.sample("weights", dist.Dirichlet(param("weight_concentration", constraints.positive)))
    dof = param("dof", constraints.greater_than(d - 1.0))
    scale_tril = param("scale_tril", constraints.lower_cholesky)
    means = param("mean_loc")
    with components:
        precisions = pyro.sample("precisions", Wishart(dof, scale_tril=scale_tril))
        if mean_family == "conditional":  # the CAVI family: mu_k | Lambda_k
            beta = param("mean_precision", constraints.positive)
            mean_dist = dist.MultivariateNormal(
                means, precision_matrix=beta[:, None, None] * precisions
            )
        else:
            mean_dist = dist.MultivariateNormal(
                means, scale_tril=param("mean_scale_tril", constraints.lower_cholesky)
            )
        pyro.sample("means", mean_dist)


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
        logits = pyro.param(
            "assignment_logits",
            pyro_param_init(init, "assignment_logits", dict(dtype=x.dtype, device=x.device)),
        )
        with pyro.plate("data", x.shape[0]):
            if name == "gumbel":
                pyro.sample("z", dist.RelaxedOneHotCategorical(temperature, logits=logits))
            else:
                pyro.sample("z", dist.Categorical(logits=logits))

    return guide
