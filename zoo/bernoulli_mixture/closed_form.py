r"""MAP-EM for the Bernoulli mixture, written once for both backends.

With the features ``phi(x) = [1, x]`` (N, D + 1) of the data, computed once, an iteration is two
matrix products:

* E-step: ``log p(x_n, z_n = k) = phi_n @ coef[:, k]`` with
  ``coef[0, k] = log weights_k + sum_d log(1 - probs_kd)`` and
  ``coef[1 + d, k] = log probs_kd - log(1 - probs_kd)``, i.e.
  ``x @ log(probs).T + (1 - x) @ log(1 - probs).T + log weights`` as one product;
* M-step: ``resp.T @ phi = [N_k, S_kd]`` with ``S_kd = sum_n r_nk x_nd``, then
  ``weights_k = (N_k + alpha - 1) / (N + K (alpha - 1))`` and
  ``probs_kd = (S_kd + a - 1) / (N_k + a + b - 2)``.

The objective is the log joint ``log p(X | weights, probs) + log Dirichlet(weights | alpha) +
sum_kd log Beta(probs_kd | a, b)`` in nats with every constant, which EM never decreases. ``xp`` is
an array namespace of ``zoo.array_namespace``: the same code runs on torch tensors and,
jit-compiled, on JAX.
"""

from __future__ import annotations

import math


def init_cache(x, config, xp) -> dict:
    """The features ``[1, x]`` of the (N, D) data in the backend's layout."""
    n = x.shape[0]
    features = xp.concatenate([xp.ones((n, 1), like=x), x], axis=1)
    return {"features": xp.layout_features(features)}


def m_step(stats, config, xp) -> dict:
    """MAP weights (K,) and probs (K, D) from ``stats = resp.T @ [1, x]`` (K, D + 1)."""
    nk, sx = stats[:, 0], stats[:, 1:]
    alpha, a, b = config.weight_concentration_prior, config.probs_prior_a, config.probs_prior_b
    weights = (nk + (alpha - 1.0)) / (xp.sum(nk) + config.K * (alpha - 1.0))
    probs = (sx + (a - 1.0)) / (nk[:, None] + (a + b - 2.0))
    return {"weights": weights, "probs": probs}


def log_prior(weights, probs, config, xp):
    """``log Dirichlet(weights | alpha 1_K) + sum_kd log Beta(probs_kd | a, b)``, in nats."""
    K, d = config.K, config.dim
    alpha, a, b = config.weight_concentration_prior, config.probs_prior_a, config.probs_prior_b
    dirichlet_norm = math.lgamma(K * alpha) - K * math.lgamma(alpha)
    beta_norm = K * d * (math.lgamma(a + b) - math.lgamma(a) - math.lgamma(b))
    return (
        dirichlet_norm
        + (alpha - 1.0) * xp.sum(xp.log(weights))
        + beta_norm
        + (a - 1.0) * xp.sum(xp.log(probs))
        + (b - 1.0) * xp.sum(xp.log(1.0 - probs))
    )


def coefficients(weights, probs, xp):
    """``coef`` (D + 1, K) with ``[1, x_n] @ coef[:, k] = log weights_k + log p(x_n | probs_k)``."""
    log_p, log_q = xp.log(probs), xp.log(1.0 - probs)
    const = xp.log(weights) + xp.sum(log_q, axis=1)
    return xp.concatenate([const[None, :], (log_p - log_q).T], axis=0)


def init_state(resp, cache, config, xp) -> dict:
    """MAP parameters after the first M-step from initial responsibilities ``resp`` (N, K)."""
    stats = xp.weighted_feature_sums(xp.layout_resp(resp), cache["features"])
    return m_step(stats, config, xp)


def update(state, cache, config, xp):
    """One EM iteration; returns (state, log joint in nats of the parameters it started from)."""
    weights, probs = state["weights"], state["probs"]
    coef = coefficients(weights, probs, xp)
    resp, log_norm = xp.softmax_logits(cache["features"], coef)
    stats = xp.weighted_feature_sums(resp, cache["features"])
    objective = xp.sum(log_norm) + log_prior(weights, probs, config, xp)
    return m_step(stats, config, xp), objective


def raw_params(state, cache, xp) -> dict:
    """The parameters under the names of the SVI guide's (Delta) parameters."""
    return {"weights_map": state["weights"], "probs_map": state["probs"]}


def guide_init(raw: dict, resp) -> dict:
    """The Delta guide starts at the M-step; the model has no parameters."""
    return dict(raw)
