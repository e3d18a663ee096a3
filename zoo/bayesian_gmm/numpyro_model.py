"""NumPyro twin of the Bayesian GMM: the model and its guides (same sites as the Pyro twin)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from jax.scipy.special import digamma
from numpyro.distributions import constraints
from numpyro.ops.indexing import Vindex

from zoo.bayesian_gmm import GUMBEL_GUIDES
from zoo.distributions import (
    GumbelSoftmax,
    StickBreakingCategorical,
    Wishart,
    sampleable_concentration,
    scale_free_lower_cholesky,
    scaled_real,
)
from zoo.plates import numpyro_data_plate as data_plate


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

    With a temperature (the Gumbel-softmax guides), ``z_n`` is a one-hot vector drawn by the
    Gumbel-softmax trick, relaxed or straight-through (``GumbelSoftmax``), whose density is the
    discrete ``log pi_k`` of its category, and the likelihood of ``x_n`` is
    ``sum_k z_nk log N(x_n | mu_k, Lambda_k^-1)``, the discrete model's at a one-hot ``z_n``.
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
            log_weights = jnp.broadcast_to(z_dist.logits, (n, config.K))  # unnormalised for sticks
            z = numpyro.sample("z", GumbelSoftmax(temperature, log_weights))
            component_lp = dist.MultivariateNormal(means, precision_matrix=precisions).log_prob(
                x[..., None, :]
            )
            numpyro.factor("x", (z * component_lp).sum(-1))


def means_constraint(config, x):
    """The means' constraint: real, moved in the data's units (``config.units``, powers of two
    near each column's standard deviation; unit scale when empty). A NumPy constant, not an
    argument of the compiled step: NumPyro's SVI keeps the transforms it made at its start.
    Shared with the maximum-likelihood mixture's twin."""
    return scaled_real(np.asarray(config.units or (1.0,) * config.dim, dtype=x.dtype))


def _global_factors(config, init, x, mean_family, stick_kl_in_closed_form=False):
    """q(weights or sticks), q(precisions), q(means): shared by every guide. Returns their
    parameters (constrained) by name. With ``stick_kl_in_closed_form``, the sticks' part of the
    ELBO is their exact KL (:func:`_stick_kl_in_closed_form`)."""
    K, d = config.K, config.dim

    params = {}

    def param(name, constraint=constraints.real):
        value = jnp.asarray(init[name], dtype=x.dtype)
        params[name] = numpyro.param(name, value, constraint=constraint)
        return params[name]

    if config.weight_prior == "dirichlet_process":
        a = param("stick_a", constraints.positive)
        b = param("stick_b", constraints.positive)
        stick_dist = dist.Beta(sampleable_concentration(a), sampleable_concentration(b))
        with numpyro.plate("components", K):
            sticks = numpyro.sample("sticks", stick_dist)
        if stick_kl_in_closed_form:
            _stick_kl_in_closed_form(config, stick_dist, sticks)
    else:
        alpha = param("weight_concentration", constraints.positive)
        numpyro.sample("weights", dist.Dirichlet(sampleable_concentration(alpha)))
    dof = param("dof", constraints.greater_than(d - 1.0))
    scale_tril = param("scale_tril", scale_free_lower_cholesky)
    means = param("mean_loc", means_constraint(config, x))
    with numpyro.plate("components", K):
        precisions = numpyro.sample(
            "precisions", Wishart(sampleable_concentration(dof), scale_tril=scale_tril)
        )
        if mean_family == "conditional":  # the CAVI family: mu_k | Lambda_k
            beta = param("mean_precision", constraints.positive)
            mean_dist = dist.MultivariateNormal(
                means, precision_matrix=beta[:, None, None] * precisions
            )
        else:
            mean_dist = dist.MultivariateNormal(
                means, scale_tril=param("mean_scale_tril", scale_free_lower_cholesky)
            )
        numpyro.sample("means", mean_dist)
    return params


def _stick_kl_in_closed_form(config, stick_dist, sticks):
    """A guide factor that turns the sticks' Monte-Carlo term ``log p(v) - log q(v)`` of the
    ELBO into ``-KL(q(v) || p(v))``, exactly (value and gradient).

    A Beta draw near one rounds to ``1 - eps`` (float32: 1.2e-7), which cuts off the tail of
    ``log(1 - v)``. The sticks of components that hold no data sit at Beta(1, alpha0) with
    alpha0 = 1/K, where a fifth of float32 draws round, and the Monte-Carlo term's gradient
    then pushes their ``stick_b`` down until it underflows (in float64, 3% of draws round and
    ``stick_b`` settles a fifth below its optimum). The KL has no draw to round.

    With q = Beta(a, b) and p = Beta(1, alpha0), ``KL + log p(v) - log q(v)`` is
    ``(a - 1) (E_q[log v] - log v) + (b - alpha0) (E_q[log(1 - v)] - log(1 - v))``: the normalising
    constants cancel, and the draw's logarithms are replaced by their expectations,
    ``psi(a) - psi(a + b)`` and ``psi(b) - psi(a + b)``.
    """
    a, b = stick_dist.concentration1, stick_dist.concentration0
    total = digamma(a + b)
    log_v_gap = digamma(a) - total - jnp.log(sticks)
    log_rest_gap = digamma(b) - total - jnp.log1p(-sticks)
    gap = (a - 1.0) * log_v_gap + (b - config.weight_concentration_prior) * log_rest_gap
    numpyro.factor("sticks_kl", gap.sum(-1))


def assignment_logits(x, config, params):
    """Log-probabilities of q(z_n), the CAVI update of q(z) from the global factors ``params``
    (the independent mean family): ``log rho_nk = E[log pi_k] + E[log N(x_n | mu_k,
    Lambda_k^-1)] + const``, normalised over ``k``; shape (N, K)."""
    d = config.dim
    if config.weight_prior == "dirichlet_process":
        a, b = params["stick_a"], params["stick_b"]
        total = digamma(a + b)
        log_rest = jnp.cumsum(digamma(b) - total, -1)[:-1]
        log_weights = digamma(a) - total + jnp.concatenate([jnp.zeros_like(a[:1]), log_rest])
    else:
        alpha = params["weight_concentration"]
        log_weights = digamma(alpha) - digamma(alpha.sum())
    dof, scale_tril = params["dof"], params["scale_tril"]
    mean, mean_tril = params["mean_loc"], params["mean_scale_tril"]
    logdet = sum(digamma(0.5 * (dof - i)) for i in range(d)) + d * math.log(2.0)
    logdet = logdet + 2.0 * jnp.log(jnp.diagonal(scale_tril, axis1=-2, axis2=-1)).sum(-1)
    # E[(x - mu)^T Lambda (x - mu)] = nu (|T^T (x - m)|^2 + |T^T S|_F^2), W = T T^T, S S^T = Cov mu
    projected = jnp.einsum("kij,nki->nkj", scale_tril, x[..., None, :] - mean)
    spread = (jnp.einsum("kij,kil->kjl", scale_tril, mean_tril) ** 2).sum((-2, -1))
    quadratic = dof * ((projected**2).sum(-1) + spread)
    return jax.nn.log_softmax(log_weights + 0.5 * logdet - 0.5 * quadratic, -1)


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
                numpyro.sample("z", GumbelSoftmax(temperature, log_probs, name == "gumbel-st"))
            return
        logits = numpyro.param(
            "assignment_logits", jnp.asarray(init["assignment_logits"], dtype=x.dtype)
        )
        with numpyro.plate("data", x.shape[0]):
            numpyro.sample("z", dist.Categorical(logits=logits))

    return guide
