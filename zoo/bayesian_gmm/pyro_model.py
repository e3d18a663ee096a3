"""Pyro twin of the Bayesian GMM: the model and its guides (same sites as the NumPyro twin)."""

from __future__ import annotations

import functools
import math

import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints
from pyro.ops.indexing import Vindex

from zoo.bayesian_gmm import GUMBEL_GUIDES
from zoo.plates import pyro_data_plate as data_plate
from zoo.torch_distributions import (
    GumbelSoftmax,
    StickBreakingCategorical,
    Wishart,
    scale_free_lower_cholesky,
    scaled_real,
)
from zoo.weights import pyro_param_init


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

    With a temperature (the Gumbel-softmax guides), ``z_n`` is a one-hot vector drawn by the
    Gumbel-softmax trick, relaxed or straight-through (``GumbelSoftmax``), whose density is the
    discrete ``log pi_k`` of its category, and the likelihood of ``x_n`` is
    ``sum_k z_nk log N(x_n | mu_k, Lambda_k^-1)``, the discrete model's at a one-hot ``z_n``.
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
            component_lp = dist.MultivariateNormal(means, precision_matrix=precisions).log_prob(
                x.unsqueeze(-2)
            )
            log_weights = z_dist.logits.expand_as(component_lp)  # unnormalised for sticks
            z = pyro.sample("z", GumbelSoftmax(temperature, log_weights))
            pyro.factor("x", (z * component_lp).sum(-1))


def means_constraint(config, x):
    """The means' constraint: real, moved in the data's units (``config.units``, powers of two
    near each column's standard deviation; unit scale when empty), so that Adam's steps are a
    fixed fraction of the data's spread whatever its units. Shared with the
    maximum-likelihood mixture's twin."""
    return _units_constraint(config.units or (1.0,) * config.dim, x.dtype, x.device)


@functools.lru_cache(maxsize=16)
def _units_constraint(units: tuple, dtype, device):
    # Made and checked once per set-up, not at every step (on a GPU, each would copy the units
    # from the host and read their check back).
    return scaled_real(torch.tensor(units, dtype=dtype, device=device))


def _global_factors(config, init, x, mean_family, stick_kl_in_closed_form=False):
    """q(weights or sticks), q(precisions), q(means): shared by every guide. Returns their
    parameters (constrained) by name. With ``stick_kl_in_closed_form``, the sticks' part of the
    ELBO is their exact KL (:func:`_stick_kl_in_closed_form`)."""
    K, d = config.K, config.dim
    like = dict(dtype=x.dtype, device=x.device)

    params = {}

    def param(name, constraint=constraints.real):
        params[name] = pyro.param(name, pyro_param_init(init, name, like), constraint=constraint)
        return params[name]

    components = pyro.plate("components", K)
    if config.weight_prior == "dirichlet_process":
        a = param("stick_a", constraints.positive)
        b = param("stick_b", constraints.positive)
        stick_dist = dist.Beta(a, b)
        with components:
            sticks = pyro.sample("sticks", stick_dist)
        if stick_kl_in_closed_form:
            _stick_kl_in_closed_form(config, stick_dist, sticks)
    else:
        pyro.sample("weights", dist.Dirichlet(param("weight_concentration", constraints.positive)))
    dof = param("dof", constraints.greater_than(d - 1.0))
    scale_tril = param("scale_tril", scale_free_lower_cholesky)
    means = param("mean_loc", means_constraint(config, x))
    with components:
        precisions = pyro.sample("precisions", Wishart(dof, scale_tril=scale_tril))
        if mean_family == "conditional":  # the CAVI family: mu_k | Lambda_k
            beta = param("mean_precision", constraints.positive)
            mean_dist = dist.MultivariateNormal(
                means, precision_matrix=beta[:, None, None] * precisions
            )
        else:
            mean_dist = dist.MultivariateNormal(
                means, scale_tril=param("mean_scale_tril", scale_free_lower_cholesky)
            )
        pyro.sample("means", mean_dist)
    return params


def _stick_kl_in_closed_form(config, stick_dist, sticks):
    """A guide factor that turns the sticks' Monte-Carlo term ``log p(v) - log q(v)`` of the
    ELBO into ``-KL(q(v) || p(v))``, exactly (value and gradient); why and how: the NumPyro
    twin's function of the same name."""
    a, b = stick_dist.concentration1, stick_dist.concentration0
    total = torch.digamma(a + b)
    log_v_gap = torch.digamma(a) - total - torch.log(sticks)
    log_rest_gap = torch.digamma(b) - total - torch.log1p(-sticks)
    gap = (a - 1.0) * log_v_gap + (b - config.weight_concentration_prior) * log_rest_gap
    pyro.factor("sticks_kl", gap.sum(-1), has_rsample=True)


def assignment_logits(x, config, params):
    """Log-probabilities of q(z_n), the CAVI update of q(z) from the global factors ``params``
    (the independent mean family): ``log rho_nk = E[log pi_k] + E[log N(x_n | mu_k,
    Lambda_k^-1)] + const``, normalised over ``k``; shape (N, K)."""
    d = config.dim
    if config.weight_prior == "dirichlet_process":
        a, b = params["stick_a"], params["stick_b"]
        total = torch.digamma(a + b)
        log_rest = torch.nn.functional.pad(torch.cumsum(torch.digamma(b) - total, -1)[:-1], (1, 0))
        log_weights = torch.digamma(a) - total + log_rest
    else:
        alpha = params["weight_concentration"]
        log_weights = torch.digamma(alpha) - torch.digamma(alpha.sum())
    dof, scale_tril = params["dof"], params["scale_tril"]
    mean, mean_tril = params["mean_loc"], params["mean_scale_tril"]
    logdet = sum(torch.digamma(0.5 * (dof - i)) for i in range(d)) + d * math.log(2.0)
    logdet = logdet + 2.0 * torch.diagonal(scale_tril, dim1=-2, dim2=-1).log().sum(-1)
    # E[(x - mu)^T Lambda (x - mu)] = nu (|T^T (x - m)|^2 + |T^T S|_F^2), W = T T^T, S S^T = Cov mu
    projected = torch.einsum("kij,nki->nkj", scale_tril, x.unsqueeze(-2) - mean)
    spread = torch.einsum("kij,kil->kjl", scale_tril, mean_tril).pow(2).sum((-2, -1))
    quadratic = dof * (projected.pow(2).sum(-1) + spread)
    return torch.log_softmax(log_weights + 0.5 * logdet - 0.5 * quadratic, -1)


def make_guide(name, config, init):
    """Guide ``name`` with parameters initialised from ``init`` (numpy arrays by param name).

    ``"enum"``: reparameterised global factors; ``z`` is summed out in the model.
    ``"gumbel"``: the same, plus q(z_n) = Categorical(rho_n), ``rho_n`` the CAVI update of
    q(z_n) from the global factors' parameters (:func:`assignment_logits`: no parameter per data
    point, so it fits on minibatches), drawn as a relaxed one-hot vector (``GumbelSoftmax`` at
    the annealed temperature; Jang et al., 2017).
    ``"gumbel-st"``: as ``"gumbel"``, the draw straight-through (one-hot forward, the relaxed
    draw's gradient).
    ``"cavi"``: the free-form CAVI family (mu_k | Lambda_k Normal-Wishart, q(z) Categorical).
    """

    def guide(data, config, temperature=None, num_data=None):
        x = data["x"]
        if name == "cavi" and num_data is not None and num_data != x.shape[0]:
            raise ValueError(
                f"Guide {name!r} has a parameter per data point (assignment_logits), so it "
                "cannot be fitted on minibatches or shards of the data; use guide='enum'."
            )
        params = _global_factors(
            config,
            init,
            x,
            "conditional" if name == "cavi" else "independent",
            stick_kl_in_closed_form=name == "enum",
        )
        if name == "enum":
            return
        if name in GUMBEL_GUIDES:
            log_probs = assignment_logits(x, config, params)
            with data_plate(x.shape[0], num_data):
                pyro.sample("z", GumbelSoftmax(temperature, log_probs, name == "gumbel-st"))
            return
        logits = pyro.param(
            "assignment_logits",
            pyro_param_init(init, "assignment_logits", dict(dtype=x.dtype, device=x.device)),
        )
        with pyro.plate("data", x.shape[0]):
            pyro.sample("z", dist.Categorical(logits=logits))

    return guide
