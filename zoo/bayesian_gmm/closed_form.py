r"""Closed-form coordinate-ascent VI (CAVI) for the Bayesian GMM, written once for both backends.

The mean-field posterior is q(z) q(pi) prod_k q(mu_k, Lambda_k) with Categorical, Dirichlet (or
Beta sticks) and Normal-Wishart factors; the updates are Bishop (2006) eqs. 10.46-10.63 and the
ELBO eqs. 10.70-10.77 with every constant kept, so it is a true lower bound on log p(X) in nats.

Why it is fast: both halves of an iteration are one matrix product over the quadratic features
``phi(x) = [1, x, upper-triangle(x x^T)]`` of the (centred) data, computed once:

* E-step: ``log rho = phi @ theta`` where ``theta`` holds each component's expected log weight,
  log-normaliser, ``nu W m`` and ``-nu W / 2``;
* M-step: the sufficient statistics ``N_k, sum r x, sum r x x^T`` are ``resp.T @ phi``.

Stochastic VI (``algorithm="svi-natural"``, Hoffman et al. 2013) uses ``init_natural_state`` and
``natural_step``: the natural parameters of q(pi) and q(mu, Lambda) are the prior's plus the
statistics ``resp.T @ phi``, so the natural-gradient step ``lambda <- (1 - rho) lambda + rho
lambda_hat`` is the same convex combination of statistics, followed by the M-step.

Every function takes an array namespace ``xp`` (``zoo.array_namespace``), so the same code runs
on torch tensors (any device) and, jit-compiled, on JAX arrays.
"""

from __future__ import annotations

import math

import numpy as np

from zoo.array_namespace import LOG_2PI
from zoo.bayesian_gmm import posterior
from zoo.quadratic_features import (
    coefficients,
    quadratic_cache,
    responsibilities,
    scatter_matrices,
    statistics_from_sums,
    sufficient_statistics,
)

# scikit-learn adds this to N_k to avoid 0/0. A Python float: JAX promotes float32 arrays to
# float64 by a numpy float64 scalar, but not by a Python float.
EPS = float(10 * np.finfo(np.float64).eps)


def init_cache(x, config, xp, shift=None) -> dict:
    """Quadratic features of the centred data, with the priors moved to the same centre.

    The centre is the mean of ``x`` unless ``shift`` fixes it (the minibatches of stochastic VI
    share the centre of the first).
    """
    cache = quadratic_cache(x, xp, shift)
    d = x.shape[1]
    cache["mean_prior"] = xp.asarray(config.mean_prior, like=x) - cache["shift"]
    cache["covariance_prior"] = xp.asarray(config.covariance_prior, like=x)
    # Constant over the iterations, so made once: log |W0^-1| and the offsets i / 2 (i < D) of
    # the multivariate digamma and log-gamma functions.
    chol = xp.cholesky(cache["covariance_prior"])
    cache["logdet_covariance_prior"] = 2 * xp.sum(xp.log(xp.diagonal(chol)))
    cache["half_steps"] = xp.asarray(0.5 * np.arange(d), like=x)
    return cache


def m_step(stats, cache, config, xp) -> dict:
    """The q(pi) and q(mu, Lambda) updates given the responsibilities' statistics."""
    nk = stats["nk"] + EPS
    d = cache["shift"].shape[0]
    m0, cov0 = cache["mean_prior"], cache["covariance_prior"]
    beta0, nu0 = config.mean_precision_prior, config.degrees_of_freedom_prior
    xbar, scatter = scatter_matrices(stats, nk, xp)
    if config.reg_covar:
        scatter = scatter + config.reg_covar * nk[:, None, None] * xp.eye(d, like=nk)
    beta = beta0 + nk
    diff = xbar - m0
    scale_inv = (
        cov0 + scatter + (nk * beta0 / beta)[:, None, None] * diff[:, :, None] * diff[:, None, :]
    )
    chol_inv = xp.cholesky(scale_inv)
    q = {
        "mean_precision": beta,
        "means": (beta0 * m0 + nk[:, None] * xbar) / beta[:, None],
        "dof": nu0 + nk,
        "scale": xp.cho_inverse(chol_inv),
        "logdet_scale": -2.0 * xp.sum(xp.log(xp.diagonal(chol_inv)), axis=-1),
    }
    if config.weight_prior == "dirichlet_process":
        q["stick_a"] = 1.0 + nk
        q["stick_b"] = config.weight_concentration_prior + counts_beyond(nk, xp)
    else:
        q["weight_concentration"] = config.weight_concentration_prior + nk
    return q


def counts_beyond(nk, xp):
    """``sum_{j>k} N_j`` for each k, summed from the last component up: the total minus a
    running sum would cancel to the total's rounding, which in float32 at N = 1e6 is 0.06, far
    above a near-empty tail and the sticks' prior of about 1/K."""
    from_k_on = xp.flip(xp.cumsum(xp.flip(nk, 0), 0), 0)  # sum_{j>=k} N_j
    return xp.concatenate([from_k_on[1:], xp.zeros((1,), like=nk)])


def digammas(q, cache, config, xp) -> dict:
    """The digamma functions of q's parameters that both the expectations (E[log pi],
    E[log |Lambda|]) and the KL terms use, computed once per q: ``"weights"`` (of the sticks'
    a, b and a + b, or of the Dirichlet's alpha and its sum) and ``"dof"`` (the multivariate
    digamma of nu / 2)."""
    if config.weight_prior == "dirichlet_process":
        a, b = q["stick_a"], q["stick_b"]
        weights = (xp.digamma(a), xp.digamma(b), xp.digamma(a + b))
    else:
        alpha = q["weight_concentration"]
        weights = (xp.digamma(alpha), xp.digamma(xp.sum(alpha)))
    return {"weights": weights, "dof": _multi_digamma(0.5 * q["dof"], cache, xp)}


def expected_log_weights(q, config, xp, dg):
    """E_q[log pi_k] under the Dirichlet or the stick-breaking posterior; ``dg`` is
    ``digammas(q, ...)``."""
    if config.weight_prior == "dirichlet_process":
        dg_a, dg_b, dg_ab = dg["weights"]
        log_rest = xp.cumsum(dg_b - dg_ab, axis=0)
        zero = xp.zeros((1,), like=dg_a)
        return dg_a - dg_ab + xp.concatenate([zero, log_rest[:-1]])
    dg_alpha, dg_total = dg["weights"]
    return dg_alpha - dg_total


# The multivariate digamma and log-gamma functions of the K components are one elementwise
# function over a (K, D) grid, then a sum: a few kernels on a GPU instead of 3 D.
def _multi_digamma(a, cache, xp):
    """sum_{i<D} digamma(a_k - i / 2) for each k."""
    return xp.sum(xp.digamma(a[:, None] - cache["half_steps"]), axis=1)


def _multi_gammaln(a, cache, xp):
    """log Gamma_D(a_k) for each k."""
    d = cache["half_steps"].shape[0]
    terms = xp.gammaln(a[:, None] - cache["half_steps"])
    return 0.25 * d * (d - 1) * math.log(math.pi) + xp.sum(terms, axis=1)


def _multi_gammaln_of_float(a: float, d: int) -> float:
    """log Gamma_D(a) of the prior's degrees of freedom, a Python float."""
    return 0.25 * d * (d - 1) * math.log(math.pi) + sum(math.lgamma(a - 0.5 * i) for i in range(d))


def expected_logdet_precision(q, cache, dg):
    """E_q[log |Lambda_k|] (Bishop eq. 10.65); ``dg`` is ``digammas(q, ...)``."""
    d = cache["half_steps"].shape[0]
    return dg["dof"] + d * math.log(2.0) + q["logdet_scale"]


def log_rho_coefficients(q, cache, config, xp, dg=None):
    """theta with ``phi(x) @ theta = E_q[log pi_k + log N(x | mu_k, Lambda_k^-1)]``; (F, K).
    ``dg``: ``digammas(q, ...)``, computed here when not given."""
    d = cache["shift"].shape[0]
    dg = digammas(q, cache, config, xp) if dg is None else dg
    nu, beta, m, w = q["dof"], q["mean_precision"], q["means"], q["scale"]
    wm = xp.einsum("kij,kj->ki", w, m)
    const = (
        expected_log_weights(q, config, xp, dg)
        + 0.5 * expected_logdet_precision(q, cache, dg)
        - 0.5 * d * LOG_2PI
        - 0.5 * d / beta
        - 0.5 * nu * xp.sum(m * wm, axis=1)
    )
    return coefficients(const, nu[:, None] * wm, nu[:, None, None] * w, cache, xp)


def kl_weights(q, config, xp, dg):
    """KL(q(pi) || p(pi)), or the sum of the sticks' Beta KLs; ``dg`` is ``digammas(q, ...)``."""
    if config.weight_prior == "dirichlet_process":
        a, b, g = q["stick_a"], q["stick_b"], config.weight_concentration_prior
        dg_a, dg_b, dg_ab = dg["weights"]
        log_beta_q = xp.gammaln(a) + xp.gammaln(b) - xp.gammaln(a + b)
        log_beta_p = math.lgamma(1.0) + math.lgamma(g) - math.lgamma(1.0 + g)
        kl = log_beta_p - log_beta_q + (a - 1.0) * dg_a + (b - g) * dg_b + (1.0 - a + g - b) * dg_ab
        return xp.sum(kl)
    alpha, a0 = q["weight_concentration"], config.weight_concentration_prior
    dg_alpha, dg_total = dg["weights"]
    k = alpha.shape[0]
    return (
        xp.gammaln(xp.sum(alpha))
        - xp.sum(xp.gammaln(alpha))
        - math.lgamma(k * a0)
        + k * math.lgamma(a0)
        + xp.sum((alpha - a0) * (dg_alpha - dg_total))
    )


def kl_normal_wishart(q, cache, config, xp, dg):
    """sum_k KL(NW(m_k, beta_k, W_k, nu_k) || NW(m0, beta0, W0, nu0))."""
    d = cache["shift"].shape[0]
    nu, beta, m, w = q["dof"], q["mean_precision"], q["means"], q["scale"]
    m0, cov0 = cache["mean_prior"], cache["covariance_prior"]
    beta0, nu0 = config.mean_precision_prior, config.degrees_of_freedom_prior
    diff = m - m0
    # diff_k^T W_k diff_k as two products of two operands: torch plans a product of three
    # through opt_einsum on every call, host time that costs more than the product itself.
    mahalanobis = xp.einsum("ki,ki->k", diff, xp.einsum("kij,kj->ki", w, diff))
    # E_{Lambda}[KL(N(m, (beta Lambda)^-1) || N(m0, (beta0 Lambda)^-1))], with E[Lambda] = nu W.
    kl_mean = 0.5 * (d * beta0 / beta - d + d * xp.log(beta / beta0) + beta0 * nu * mahalanobis)
    logdet_cov0 = cache["logdet_covariance_prior"]
    trace = xp.einsum("ij,kji->k", cov0, w)  # tr(W0^-1 W_k)
    kl_wishart = (
        -0.5 * nu0 * (logdet_cov0 + q["logdet_scale"])
        + 0.5 * nu * (trace - d)
        + _multi_gammaln_of_float(0.5 * nu0, d)
        - _multi_gammaln(0.5 * nu, cache, xp)
        + 0.5 * (nu - nu0) * dg["dof"]
    )
    return xp.sum(kl_mean + kl_wishart)


def init_state(resp, cache, config, xp) -> dict:
    """State after the first M-step from initial responsibilities ``resp`` (N, K)."""
    stats = sufficient_statistics(xp.layout_resp(resp), cache, xp)
    q = m_step(stats, cache, config, xp)
    return {"q": q, "theta": log_rho_coefficients(q, cache, config, xp)}


def update(state, cache, config, xp):
    """One CAVI sweep: q(z), then q(pi) and q(mu, Lambda); returns (state, elbo in nats).

    ``cache`` (the features) is an argument, not part of the state, so a compiled update does not
    copy it out every iteration.
    """
    resp, log_norm = responsibilities(state["theta"], cache, xp)
    stats = sufficient_statistics(resp, cache, xp)
    # sum_nk r log r = sum_nk r (phi_n . theta_k - log_norm_n) = sum_k stats_k . theta_k - sum_n
    # log_norm_n: the entropy of q(z) from the statistics, without another pass over (N, K).
    neg_entropy = xp.sum(stats["raw"] * state["theta"].T) - xp.sum(log_norm)
    q = m_step(stats, cache, config, xp)
    dg = digammas(q, cache, config, xp)
    theta = log_rho_coefficients(q, cache, config, xp, dg)
    # E_q[log p(x, z | pi, mu, Lambda)] is linear in the statistics: sum_k stats_k . theta_k.
    expected_log_joint = xp.sum(stats["raw"] * theta.T)
    elbo = (
        expected_log_joint
        - neg_entropy
        - kl_weights(q, config, xp, dg)
        - kl_normal_wishart(q, cache, config, xp, dg)
    )
    return {"q": q, "theta": theta}, elbo


def init_natural_state(resp, cache, config, xp, scale=1.0) -> dict:
    """Stochastic VI's state after the first M-step from ``resp`` of the rows in ``cache``, whose
    statistics count ``scale`` times (``num_data / rows``)."""
    raw = scale * sufficient_statistics(xp.layout_resp(resp), cache, xp)["raw"]
    q = m_step(statistics_from_sums(raw, cache), cache, config, xp)
    return {"q": q, "theta": log_rho_coefficients(q, cache, config, xp), "raw": raw}


def natural_step(state, cache, config, xp, rho, scale):
    """One stochastic natural-gradient step on the minibatch in ``cache``; returns (state, the
    minibatch's unbiased estimate of the ELBO, in nats, at the globals before the step).

    Local step: q(z) of the minibatch given the current globals. Global step: the minibatch
    statistics, times ``scale = num_data / batch_size``, are what a full CAVI update would see;
    the state's statistics move a fraction ``rho`` towards them (Hoffman et al. 2013, eq. 25),
    and the globals follow. With ``rho = 1`` and the whole data in one batch this is ``update``.
    """
    resp, log_norm = responsibilities(state["theta"], cache, xp)
    # The ELBO at the globals the minibatch was drawn under, with its rows' optimal q(z): an
    # unbiased estimate of the full ELBO there (the globals do not depend on the draw). Scored
    # after the update, under globals just fitted to these rows, it would read high, and the
    # stopping rule would see it fall as the steps shrink while the ELBO rises.
    elbo = scale * xp.sum(log_norm) - kl_globals(state["q"], cache, config, xp)
    batch = sufficient_statistics(resp, cache, xp)["raw"]
    raw = (1.0 - rho) * state["raw"] + (rho * scale) * batch
    q = m_step(statistics_from_sums(raw, cache), cache, config, xp)
    theta = log_rho_coefficients(q, cache, config, xp, digammas(q, cache, config, xp))
    return {"q": q, "theta": theta, "raw": raw}, elbo


def natural_raw_params(state, shift, xp) -> dict:
    """``raw_params`` of a natural-gradient state whose minibatches are centred at ``shift``."""
    return raw_params(state, {"shift": shift}, xp)


def elbo_terms(state, cache, config, xp):
    """(sum_n log sum_k exp(phi_n . theta_k), KL of the globals) at the current q of the globals
    and the optimal q(z) of the rows in ``cache``: the ELBO is ``scale * first - second``."""
    _, log_norm = responsibilities(state["theta"], cache, xp)
    return xp.sum(log_norm), kl_globals(state["q"], cache, config, xp)


def kl_globals(q, cache, config, xp):
    """KL(q(pi) prod_k q(mu_k, Lambda_k) || p(pi) prod_k p(mu_k, Lambda_k)) of the factors
    ``q``, the priors read from ``cache`` (centred as ``q``'s means are)."""
    dg = digammas(q, cache, config, xp)
    return kl_weights(q, config, xp, dg) + kl_normal_wishart(q, cache, config, xp, dg)


def raw_params(state, cache, xp) -> dict:
    """Variational parameters in the data's coordinates, named as the CAVI guide's params."""
    q = state["q"]
    out = {
        "mean_precision": q["mean_precision"],
        "mean_loc": q["means"] + cache["shift"],
        "dof": q["dof"],
        "scale_tril": xp.cholesky(q["scale"]),
    }
    for key in ("stick_a", "stick_b", "weight_concentration"):
        if key in q:
            out[key] = q[key]
    return out


def exact_elbo(raw: dict, config, chunks, xp, asarray) -> float:
    """The exact ELBO (nats, summed over the rows of ``chunks``, dicts of numpy arrays) of the
    fitted globals ``raw`` (``raw_params``), with q(z) optimal given them; ``asarray`` puts a
    numpy array on the backend. The globals are centred on the fitted means' mean (any centre
    gives the same ELBO)."""
    shift, q = _centred_factors(raw, asarray)
    state, total, kl = None, 0.0, 0.0
    for rows in chunks:
        cache = init_cache(asarray(rows["x"]), config, xp, asarray(shift))
        if state is None:
            state = {"q": q, "theta": log_rho_coefficients(q, cache, config, xp)}
        part, kl = elbo_terms(state, cache, config, xp)
        total += float(part)
    return total - float(kl)


def global_kl(raw: dict, config, xp, asarray) -> float:
    """KL(q(pi) prod_k q(mu_k, Lambda_k) || p(pi) prod_k p(mu_k, Lambda_k)) in nats, of the
    fitted globals ``raw`` (``raw_params``)."""
    shift, q = _centred_factors(raw, asarray)
    # The cache of one row at the centre: the KL reads only the priors, moved to that centre.
    cache = init_cache(asarray(shift[None]), config, xp, asarray(shift))
    return float(kl_globals(q, cache, config, xp))


def summed_out_elbo(raw: dict, config, data: dict, rng, num_samples: int, xp, asarray, to_numpy):
    """The ELBO of the fitted globals ``raw`` with ``z`` summed out, in nats over the rows of
    ``data`` (numpy): ``E_q[log p(x | theta)] - KL(q(theta) || p(theta))``, the expectation over
    ``num_samples`` draws by ``rng``. ``asarray`` and ``to_numpy`` move arrays to the backend of
    ``config`` and ``xp`` and back.

    Written as the exact mean-field ELBO plus a Monte-Carlo gap: with q(z) the optimal mean-field
    factor r given the globals, ``log p(x_n | theta) = sum_k r_nk log(pi_k N_k) + H(r_n) +
    KL(r_n || p(z_n | x_n, theta))``, and the first term's expectation under q(theta) is in the
    mean-field ELBO in closed form. Only the last term, at least 0 at every draw, is estimated:
    the estimate is never below the mean-field ELBO (to rounding), and varies far less than the
    log-likelihood itself. The weights are the model's (stick-breaking ones keep the
    truncation's mass beyond K out, as the model and its ELBOs do)."""
    from scipy.special import logsumexp  # here: SciPy's special functions import slowly

    draws = posterior.sample_posterior(raw, config, "cavi", rng, num_samples, renormalise=False)
    shift, q = _centred_factors(raw, asarray)
    x = data["x"]
    k, d = np.shape(raw["mean_loc"])
    rows = max(1, 2**25 // (num_samples * k * d))  # (draws, rows, K, D) arrays near 256 MiB
    theta, kl, mean_field, gap = None, None, 0.0, 0.0
    for start in range(0, len(x), rows):
        chunk = np.asarray(x[start : start + rows], dtype=np.float64)
        cache = init_cache(asarray(chunk), config, xp, asarray(shift))
        if theta is None:  # the factors and priors are the same in every chunk's cache
            theta = log_rho_coefficients(q, cache, config, xp)
            kl = float(kl_globals(q, cache, config, xp))
        log_resp, log_norm = xp.log_softmax_logits(cache["features"], theta)
        log_resp = to_numpy(xp.rows(log_resp))  # (rows, K)
        mean_field += float(to_numpy(log_norm).sum())
        joint = posterior.component_log_joint(draws, chunk)  # (S, rows, K)
        # log p(x_n | theta_s) - sum_k r_nk (log(pi N) - log r_nk): each row's KL, >= 0.
        kl_rows = logsumexp(joint, axis=-1) - np.sum(np.exp(log_resp) * (joint - log_resp), -1)
        gap += float(kl_rows.sum(axis=1).mean())
    return mean_field - kl + gap


def _centred_factors(raw: dict, asarray):
    """``(shift, q)``: the fitted globals ``raw`` as the updates' factors ``q`` (backend
    arrays), their means centred on the fitted means' mean ``shift`` (numpy)."""
    shift = np.asarray(raw["mean_loc"]).mean(axis=0)
    tril = np.asarray(raw["scale_tril"])
    q = {
        "mean_precision": raw["mean_precision"],
        "means": np.asarray(raw["mean_loc"]) - shift,
        "dof": raw["dof"],
        "scale": tril @ np.swapaxes(tril, -1, -2),
        "logdet_scale": 2.0 * np.log(np.diagonal(tril, axis1=-2, axis2=-1)).sum(-1),
    }
    for key in ("stick_a", "stick_b", "weight_concentration"):
        if key in raw:
            q[key] = raw[key]
    return shift, {k: asarray(v) for k, v in q.items()}


def guide_init(raw: dict, resp) -> dict:
    """Starting values of every guide's parameters from one M-step (numpy in, numpy out)."""
    tril, dof, beta = raw["scale_tril"], raw["dof"], raw["mean_precision"]
    # q(mu_k) of the fixed-form guides starts at the covariance of the CAVI factor at E[Lambda_k].
    mean_cov = np.linalg.inv(tril @ np.swapaxes(tril, -1, -2)) / (beta * dof)[:, None, None]
    return {
        **raw,
        "mean_scale_tril": np.linalg.cholesky(mean_cov),
        "assignment_logits": np.log(np.clip(resp, 1e-8, None)),
    }
