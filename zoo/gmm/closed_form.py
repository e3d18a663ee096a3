"""Expectation-maximisation for the Gaussian mixture, written once for both backends.

The same steps as ``sklearn.mixture.GaussianMixture(covariance_type="full")``, each one matrix
product over the quadratic features of the data (see ``zoo.quadratic_features``).
"""

from __future__ import annotations

from zoo.array_namespace import LOG_2PI
from zoo.bayesian_gmm.closed_form import EPS
from zoo.quadratic_features import (
    coefficients,
    quadratic_cache,
    responsibilities,
    scatter_matrices,
    sufficient_statistics,
)


def m_step(stats, cache, config, xp) -> dict:
    """Maximum-likelihood weights, means and covariances given the responsibilities."""
    nk = stats["nk"] + EPS
    d = cache["shift"].shape[0]
    xbar, scatter = scatter_matrices(stats, nk, xp)
    cov = scatter / nk[:, None, None] + config.reg_covar * xp.eye(d, like=nk)
    chol = xp.cholesky(cov)
    precision = xp.cho_inverse(chol)
    half_logdet_precision = -xp.sum(xp.log(xp.diagonal(chol)), axis=-1)
    weights = nk / xp.sum(nk)
    pm = xp.einsum("kij,kj->ki", precision, xbar)
    const = (
        xp.log(weights)
        - 0.5 * d * LOG_2PI
        + half_logdet_precision
        - 0.5 * xp.sum(xbar * pm, axis=1)
    )
    return {
        "weights": weights,
        "means": xbar,
        "scale_tril": chol,
        "theta": coefficients(const, pm, precision, cache, xp),
    }


def init_cache(x, config, xp) -> dict:
    return quadratic_cache(x, xp)


def init_state(resp, cache, config, xp) -> dict:
    """Parameters after the first M-step from initial responsibilities ``resp`` (N, K)."""
    stats = sufficient_statistics(xp.layout_resp(resp), cache, xp)
    return {"params": m_step(stats, cache, config, xp)}


def update(state, cache, config, xp):
    """One EM iteration; returns (state, log-likelihood in nats of the parameters it started from)."""
    resp, log_norm = responsibilities(state["params"]["theta"], cache, xp)
    stats = sufficient_statistics(resp, cache, xp)
    return {"params": m_step(stats, cache, config, xp)}, xp.sum(log_norm)


def raw_params(state, cache, xp) -> dict:
    p = state["params"]
    return {
        "weights": p["weights"],
        "means": p["means"] + cache["shift"],
        "scale_tril": p["scale_tril"],
    }


def guide_init(raw: dict, resp) -> dict:
    """The model's parameters start at the M-step; the guide has none."""
    return dict(raw)
