"""Draws from a fitted posterior (or read from MCMC draws of the model's sites) and the mixture
likelihood, in numpy (backend-neutral).

Used for held-out log predictive densities and ``to_arviz``: both backends' fits are evaluated by
the same code.
"""

from __future__ import annotations

import numpy as np

LOG_2PI = np.log(2 * np.pi)


def _stick_breaking(sticks):
    sticks = np.clip(sticks, 1e-12, 1 - 1e-12)  # a Beta draw can round to exactly 0 or 1
    log_rest = np.cumsum(np.log1p(-sticks), axis=-1)
    return sticks * np.exp(np.concatenate([np.zeros_like(sticks[..., :1]), log_rest[..., :-1]], -1))


def sample_posterior(params, config, family, rng, num_samples, renormalise: bool = True):
    """Draws of ``weights`` (S, K), ``means`` (S, K, D), ``precisions`` (S, K, D, D).

    ``family`` is ``"cavi"`` (mu_k | Lambda_k Normal-Wishart) or a fixed-form guide name (mu_k and
    Lambda_k independent). Stick-breaking weights are renormalised over the K components kept,
    as a predictive density needs; ``renormalise=False`` keeps them as the model's likelihood
    and ELBOs read them, the truncation's mass beyond K left out.
    """
    import scipy.stats  # here, not at the top: it takes most of a second to import

    S = int(num_samples)
    if "stick_a" in params:
        weights = _stick_breaking(
            rng.beta(params["stick_a"], params["stick_b"], size=(S, config.K))
        )
    else:
        weights = rng.dirichlet(params["weight_concentration"], size=S)
    if renormalise:
        weights = weights / weights.sum(-1, keepdims=True)
    tril, dof, means = params["scale_tril"], params["dof"], params["mean_loc"]
    K, d = means.shape
    precisions = np.stack(
        [
            scipy.stats.wishart(df=dof[k], scale=tril[k] @ tril[k].T)
            .rvs(size=S, random_state=rng)
            .reshape(S, d, d)
            for k in range(K)
        ],
        axis=1,
    )
    eps = rng.standard_normal((S, K, d, 1))
    if family == "cavi":
        # mu = m + (beta Lambda)^{-1/2} eps, through the Cholesky factor of beta Lambda.
        chol = np.linalg.cholesky(params["mean_precision"][:, None, None] * precisions)
        offset = np.linalg.solve(np.swapaxes(chol, -1, -2), eps)[..., 0]
    else:
        offset = (params["mean_scale_tril"] @ eps)[..., 0]
    return {"weights": weights, "means": means + offset, "precisions": precisions}


def _normalised_weights(sites, config):
    """(S, K) mixture weights from the weight site's draws, renormalised over the K components
    kept (the stick-breaking truncation leaves mass beyond K), as ``sample_posterior`` does."""
    if config.weight_prior == "dirichlet_process":
        weights = _stick_breaking(np.asarray(sites["sticks"]))
    else:
        weights = np.asarray(sites["weights"])
    return weights / weights.sum(-1, keepdims=True)


def draws_from_sites(sites, config) -> dict:
    """MCMC draws of the sites (``sticks`` or ``weights``, ``precisions``, ``means``; ``z`` summed
    out) as the draws of :func:`sample_posterior`."""
    return {
        "weights": _normalised_weights(sites, config),
        "means": np.asarray(sites["means"]),
        "precisions": np.asarray(sites["precisions"]),
    }


def sites_from_params(params, config) -> dict:
    """The posterior mean of every latent site, from the raw parameters of the CAVI family or of
    the ``enum`` and ``gumbel`` guides (which share the global factors): a point inside every
    site's support, where the sampler's chains start."""
    tril, dof = np.asarray(params["scale_tril"]), np.asarray(params["dof"])
    sites = {
        # E[Lambda_k] = nu_k W_k for Lambda_k ~ Wishart(nu_k, W_k = L_k L_k^T).
        "precisions": dof[:, None, None] * (tril @ np.swapaxes(tril, -1, -2)),
        "means": np.asarray(params["mean_loc"]),
    }
    if config.weight_prior == "dirichlet_process":
        a, b = np.asarray(params["stick_a"]), np.asarray(params["stick_b"])
        sites["sticks"] = a / (a + b)
    else:
        concentration = np.asarray(params["weight_concentration"])
        sites["weights"] = concentration / concentration.sum()
    return sites


def log_likelihood(samples, data, chunk: int = 64) -> np.ndarray:
    """(S, N) log sum_k w_sk N(x_n | mu_sk, Lambda_sk^-1), in chunks of draws to bound memory."""
    from scipy.special import logsumexp  # here: SciPy's special functions import slowly

    out = []
    for start in range(0, samples["weights"].shape[0], chunk):
        draws = {k: v[start : start + chunk] for k, v in samples.items()}
        out.append(logsumexp(component_log_joint(draws, data["x"]), axis=-1))
    return np.concatenate(out, axis=0)


def component_log_joint(samples, x) -> np.ndarray:
    """(S, N, K) log w_sk + log N(x_n | mu_sk, Lambda_sk^-1) of every draw at every row."""
    d = x.shape[1]
    chol = np.linalg.cholesky(samples["precisions"])  # (S, K, D, D)
    # ||L^T (x - mu)||^2 with Lambda = L L^T.
    proj = (
        np.einsum("skij,ni->snkj", chol, x)
        - np.einsum("skij,ski->skj", chol, samples["means"])[:, None]
    )
    half_logdet = np.log(np.diagonal(chol, axis1=-2, axis2=-1)).sum(-1)
    comp = -0.5 * d * LOG_2PI + half_logdet[:, None] - 0.5 * (proj**2).sum(-1)
    return comp + np.log(samples["weights"])[:, None]
