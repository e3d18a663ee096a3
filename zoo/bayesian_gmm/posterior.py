"""Draws from a fitted posterior (or read from MCMC draws of the model's sites) and the mixture
likelihood, in numpy (backend-neutral).

Used for held-out log predictive densities and ``to_arviz``: both backends' fits are evaluated by
the same code.
"""

from __future__ import annotations

import numpy as np

from zoo.scoring_blocks import SCORING_BLOCK_BYTES, draws_repeat_first

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


def log_likelihood(samples, data) -> np.ndarray:
    """(S, N) log sum_k w_sk N(x_n | mu_sk, Lambda_sk^-1), in blocks of draws and rows that
    bound memory (:data:`SCORING_BLOCK_BYTES`). Draws that repeat the first (a point
    estimate) are scored once."""
    from scipy.special import logsumexp  # here: SciPy's special functions import slowly

    num_draws = samples["weights"].shape[0]
    if num_draws > 1 and draws_repeat_first(samples):
        first = log_likelihood({k: v[:1] for k, v in samples.items()}, data)
        return np.repeat(first, num_draws, axis=0)
    return _assembled(samples, data["x"], lambda joint: logsumexp(joint, axis=-1))


def component_log_joint(samples, x) -> np.ndarray:
    """(S, N, K) log w_sk + log N(x_n | mu_sk, Lambda_sk^-1) of every draw at every row, in
    blocks of draws and rows that bound the memory beyond the output."""
    return _assembled(samples, x, lambda joint: joint)


def _assembled(samples, x, of_block) -> np.ndarray:
    """(S, N, ...): ``of_block`` of each block's (draws, rows, K) component log joints, put
    together."""
    out = None
    for draws, rows, joint in _component_log_joint_blocks(samples, x):
        values = of_block(joint)
        if out is None:  # shaped and typed as the blocks' values are
            out = np.empty((samples["weights"].shape[0], len(x), *values.shape[2:]), values.dtype)
        out[draws, rows] = values
    return out


def _component_log_joint_blocks(samples, x):
    """``(draws, rows, joint)`` over blocks of draws and rows covering (S, N): ``joint`` the
    (draws, rows, K) component log joints, each block's arrays within
    :data:`SCORING_BLOCK_BYTES` (a single draw of a single row aside)."""
    num_draws, k, d = samples["means"].shape
    draws_per_block, rows_per_block = _block_shape(num_draws, len(x), k, d)
    # At least one block, empty where there are no draws or no rows, so that the output takes
    # its shape and type from a block.
    for start in range(0, max(num_draws, 1), draws_per_block):
        draws = slice(start, start + draws_per_block)
        factors = _cholesky_factors({key: v[draws] for key, v in samples.items()})
        for row in range(0, max(len(x), 1), rows_per_block):
            rows = slice(row, row + rows_per_block)
            yield draws, rows, _block_log_joint(factors, x[rows])


def _block_shape(num_draws: int, num_rows: int, k: int, d: int) -> tuple[int, int]:
    """Draws and rows of a block: rows first (all of them where they fit), then as many draws
    as fit beside them, and no more draws than their Cholesky factors (K, D, D) fit."""
    pairs = max(1, SCORING_BLOCK_BYTES // (8 * k * d))  # (draw, row) pairs of a block
    rows = max(1, min(num_rows, pairs))
    draws = min(pairs // rows, SCORING_BLOCK_BYTES // (8 * k * d * d))
    return max(1, min(num_draws, draws)), rows


def _cholesky_factors(samples) -> dict:
    """What scoring reads of a block of draws: the Cholesky factors L of the precisions
    (Lambda = L L^T), L^T mu, half the log-determinants and the log weights."""
    chol = np.linalg.cholesky(samples["precisions"])  # (S, K, D, D)
    return {
        "chol": chol,
        "projected_means": np.einsum("skij,ski->skj", chol, samples["means"]),
        "half_logdet": np.log(np.diagonal(chol, axis1=-2, axis2=-1)).sum(-1),
        "log_weights": np.log(samples["weights"]),
    }


def _block_log_joint(factors: dict, x) -> np.ndarray:
    """(S, rows, K) component log joints of a block of draws (their ``_cholesky_factors``)
    at the rows ``x``."""
    d = x.shape[1]
    # ||L^T (x - mu)||^2 with Lambda = L L^T.
    proj = np.einsum("skij,ni->snkj", factors["chol"], x) - factors["projected_means"][:, None]
    comp = -0.5 * d * LOG_2PI + factors["half_logdet"][:, None] - 0.5 * (proj**2).sum(-1)
    return comp + factors["log_weights"][:, None]
