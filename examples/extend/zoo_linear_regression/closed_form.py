r"""The exact posterior as the zoo's closed-form step (``algorithm="cavi"``).

With a Gaussian prior and Gaussian noise of known scale, p(coef | x, y) is Gaussian:

    cov^-1 = prior_precision I + x^T x / noise_scale^2,     mean = cov x^T y / noise_scale^2.

Coordinate ascent over a single Gaussian factor q(coef) lands on it in one update, and its ELBO
there is log p(y | x) exactly. The zoo's CAVI driver calls the first four functions below; they
are written against ``xp``, the small array namespace the driver passes in (torch or JAX, numpy
spelling), so one implementation runs on both backends, and JAX compiles ``update``.

Natural-gradient SVI (``algorithm="svi-natural"``, Hoffman et al. 2013) runs on minibatches with
``init_natural_state``, ``natural_step`` and ``natural_raw_params``: q(coef)'s natural parameters
(precision and precision times mean) are the prior's plus the data's sums ``x^T x`` and
``x^T y`` over the noise variance, so a step moves them a fraction ``rho`` towards what the
minibatch's sums, scaled to the full data, would give.
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
    return _expected_log_likelihood(state, cache, config, xp) - _kl(state, config, xp)


def _expected_log_likelihood(state, cache, config, xp):
    loc, tril = state["coef_loc"], state["coef_scale_tril"]
    covariance = xp.einsum("ik,jk->ij", tril, tril)
    noise_variance = config.noise_scale**2
    # E_q ||y - x coef||^2 from the cached sums: the data are not touched again.
    expected_squared_error = (
        cache["yty"]
        - 2 * xp.sum(loc * cache["xty"])
        + xp.einsum("i,ij,j->", loc, cache["xtx"], loc)
        + xp.sum(cache["xtx"] * covariance)
    )
    return (
        -0.5 * cache["num_data"] * math.log(2 * math.pi * noise_variance)
        - 0.5 * expected_squared_error / noise_variance
    )


def _kl(state, config, xp):
    """KL(q(coef) || p(coef)) with p = Normal(0, I / prior_precision)."""
    loc, tril = state["coef_loc"], state["coef_scale_tril"]
    d = loc.shape[0]
    alpha = config.prior_precision
    covariance = xp.einsum("ik,jk->ij", tril, tril)
    log_det_covariance = 2 * xp.sum(xp.log(xp.diagonal(tril)))
    return 0.5 * (
        alpha * xp.sum(xp.diagonal(covariance))
        + alpha * xp.sum(loc * loc)
        - d
        - d * math.log(alpha)
        - log_det_covariance
    )


def raw_params(state, cache, xp) -> dict:
    """The fitted q(coef), named as the full-rank guide's parameters: the zoo's evaluation
    (``sample_posterior``, ``summarize``) then treats CAVI and SVI fits alike."""
    return dict(state)


# --- Natural-gradient steps on minibatches ------------------------------------------------------


def _q_from_natural(precision, shift, xp) -> dict:
    """q(coef) from its natural parameters: the precision and precision times the mean."""
    covariance = xp.cho_inverse(xp.cholesky(precision))
    return {
        "coef_loc": xp.einsum("ij,j->i", covariance, shift),
        "coef_scale_tril": xp.cholesky(covariance),
    }


def _natural_target(cache, config, xp, scale):
    """The natural parameters a full CAVI update would give if all the data were like the
    minibatch of ``cache``, its sums scaled by ``scale = num_data / rows``."""
    noise_precision = config.noise_scale**-2
    d = cache["xty"].shape[0]
    prior = config.prior_precision * xp.eye(d, like=cache["xty"])
    return prior + (scale * noise_precision) * cache["xtx"], (scale * noise_precision) * cache[
        "xty"
    ]


def init_natural_state(cache, config, xp, scale=1.0) -> dict:
    """Start at the prior, as ``init_state`` does: the steps then move q(coef) to the data."""
    like = cache["xty"]
    d = like.shape[0]
    precision = config.prior_precision * xp.eye(d, like=like)
    shift = xp.zeros((d,), like=like)
    return {"precision": precision, "shift": shift, "q": _q_from_natural(precision, shift, xp)}


def natural_step(state, cache, config, xp, rho, scale):
    """One step ``lambda <- (1 - rho) lambda + rho lambda_hat`` on the minibatch of ``cache``;
    returns (state, the minibatch estimate of the new q's ELBO in nats)."""
    target_precision, target_shift = _natural_target(cache, config, xp, scale)
    precision = (1.0 - rho) * state["precision"] + rho * target_precision
    shift = (1.0 - rho) * state["shift"] + rho * target_shift
    q = _q_from_natural(precision, shift, xp)
    objective = scale * _expected_log_likelihood(q, cache, config, xp) - _kl(q, config, xp)
    return {"precision": precision, "shift": shift, "q": q}, objective


def natural_raw_params(state, context, xp) -> dict:
    """The fitted q(coef), named as ``raw_params`` names it."""
    return dict(state["q"])


def exact_elbo(raw: dict, config, chunks, xp, asarray) -> float:
    """The ELBO (nats) of the fitted q(coef) in ``raw`` over all the rows of ``chunks`` (dicts
    of numpy arrays), read once: the data enter only through their sums."""
    cache = None
    for rows in chunks:
        part = init_cache({k: asarray(v) for k, v in rows.items()}, config, xp)
        cache = part if cache is None else {k: cache[k] + part[k] for k in cache}
    state = {k: asarray(raw[k]) for k in ("coef_loc", "coef_scale_tril")}
    return float(elbo(state, cache, config, xp))
