r"""The exact posterior as the zoo's closed-form step (``algorithm="cavi"``).

With a Gaussian prior and Gaussian noise of known scale, p(coef | x, y) is Gaussian:

    cov^-1 = prior_precision I + x^T x / noise_scale^2,     mean = cov x^T y / noise_scale^2.

Coordinate ascent over a single Gaussian factor q(coef) lands on it in one update, and its ELBO
there is log p(y | x) exactly. The zoo's CAVI driver calls these four functions; they are written
against ``xp``, the small array namespace the driver passes in (torch or JAX, numpy spelling),
so one implementation runs on both backends, and JAX compiles ``update``.
"""

from __future__ import annotations

import math


def init_cache(data, config, xp) -> dict:
    """The data enter only through these sums: computed once, reused by every update."""
    x, y = data["x"], data["y"]
    return {
        "xtx": xp.einsum("ni,nj->ij", x, x),
        "xty": xp.einsum("ni,n->i", x, y),
        "yty": xp.sum(y * y),
        "num_data": xp.sum(xp.ones(y.shape, like=y)),
    }


def init_state(cache, config, xp) -> dict:
    """Start at the prior, q(coef) = p(coef), so the first objective is the prior's ELBO."""
    like = cache["xty"]
    d = like.shape[0]
    return {
        "coef_loc": xp.zeros((d,), like=like),
        "coef_scale_tril": config.prior_precision**-0.5 * xp.eye(d, like=like),
    }


def update(state, cache, config, xp):
    """Returns (the exact posterior, the ELBO of ``state``).

    Like EM's log-likelihood, the objective is that of the state the update starts from: the
    history shows the step from the prior to the posterior, then log p(y | x) at every step.
    """
    objective = elbo(state, cache, config, xp)
    noise_precision = config.noise_scale**-2
    d = cache["xty"].shape[0]
    precision = (
        config.prior_precision * xp.eye(d, like=cache["xty"]) + noise_precision * cache["xtx"]
    )
    covariance = xp.cho_inverse(xp.cholesky(precision))
    loc = noise_precision * xp.einsum("ij,j->i", covariance, cache["xty"])
    return {"coef_loc": loc, "coef_scale_tril": xp.cholesky(covariance)}, objective


def elbo(state, cache, config, xp):
    """E_q[log p(y | x, coef)] - KL(q(coef) || p(coef)) for q = Normal(loc, L L^T), in nats."""
    loc, tril = state["coef_loc"], state["coef_scale_tril"]
    covariance = xp.einsum("ik,jk->ij", tril, tril)
    d = loc.shape[0]
    noise_variance = config.noise_scale**2
    # E_q ||y - x coef||^2 from the cached sums: the data are not touched again.
    expected_squared_error = (
        cache["yty"]
        - 2 * xp.sum(loc * cache["xty"])
        + xp.einsum("i,ij,j->", loc, cache["xtx"], loc)
        + xp.sum(cache["xtx"] * covariance)
    )
    expected_log_likelihood = (
        -0.5 * cache["num_data"] * math.log(2 * math.pi * noise_variance)
        - 0.5 * expected_squared_error / noise_variance
    )
    alpha = config.prior_precision
    log_det_covariance = 2 * xp.sum(xp.log(xp.diagonal(tril)))
    kl = 0.5 * (
        alpha * xp.sum(xp.diagonal(covariance))
        + alpha * xp.sum(loc * loc)
        - d
        - d * math.log(alpha)
        - log_det_covariance
    )
    return expected_log_likelihood - kl


def raw_params(state, cache, xp) -> dict:
    """The fitted q(coef), named as the full-rank guide's parameters: the zoo's evaluation
    (``sample_posterior``, ``summarize``) then treats CAVI and SVI fits alike."""
    return dict(state)
