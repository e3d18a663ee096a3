"""The fitted point estimate as draws (and MCMC draws of the sites read as the same draws), the
mixture likelihood and the log joint, in numpy.

Backend-neutral: both backends' fits are evaluated by the same code (held-out likelihood,
``to_arviz``) and the tests check the closed form against :func:`log_joint`.
"""

from __future__ import annotations

import numpy as np

from zoo.scoring_blocks import SCORING_BLOCK_BYTES, draws_repeat_first


def sample_posterior(params, config, family, rng, num_samples):
    """``num_samples`` copies of the point estimate: ``weights`` (S, K), ``probs`` (S, K, D).

    Both algorithms fit a MAP point (EM, and SVI with Delta guides), so every draw is the same;
    the arrays are read-only broadcasts, not copies.
    """
    S = int(num_samples)
    w, p = np.asarray(params["weights_map"]), np.asarray(params["probs_map"])
    return {
        "weights": np.broadcast_to(w, (S, *w.shape)),
        "probs": np.broadcast_to(p, (S, *p.shape)),
    }


def draws_from_sites(sites, config) -> dict:
    """MCMC draws of the sites ``weights`` (S, K) and ``probs`` (S, K, D) (``z`` summed out): the
    draws already have the names and shapes of :func:`sample_posterior`'s."""
    return {"weights": np.asarray(sites["weights"]), "probs": np.asarray(sites["probs"])}


def sites_from_params(params, config) -> dict:
    """The MAP point (``weights_map``, ``probs_map``), strictly inside the support when the
    priors' parameters exceed 1 (``prepare`` enforces it): where the sampler's chains start."""
    return {"weights": np.asarray(params["weights_map"]), "probs": np.asarray(params["probs_map"])}


def component_log_likelihood(probs, x):
    """(N, K) ``log p(x_n | probs_k) = x @ log(probs).T + (1 - x) @ log(1 - probs).T``.

    A pixel probability of exactly 0 or 1 (a fit without a prior can reach one) adds 0 where the
    pixel agrees with it and -inf where it does not, rather than NaN (0 * -inf).
    """
    x = np.asarray(x, dtype=float)
    probs = np.asarray(probs)
    at_zero, at_one = probs == 0, probs == 1
    # log 1 = 0 stands in for the terms a pixel's own value leaves out, so the products stay
    # finite; entries strictly inside (0, 1) are computed exactly as before.
    out = (
        x @ np.log(np.where(at_zero, 1, probs)).T
        + (1.0 - x) @ np.log1p(-np.where(at_one, 0, probs)).T
    )
    edge = np.flatnonzero((at_zero | at_one).any(axis=1))
    if edge.size:  # components with a 0 or 1: -inf where a pixel contradicts one
        impossible = (x != 0) @ at_zero[edge].T | (x != 1) @ at_one[edge].T
        out[:, edge] = np.where(impossible, -np.inf, out[:, edge])
    return out


def mixture_log_likelihood(weights, probs, x):
    """(N,) ``log sum_k weights_k p(x_n | probs_k)``, in blocks of rows: a block's (rows, D)
    and (rows, K) arrays stay within :data:`SCORING_BLOCK_BYTES` whatever N."""
    from scipy.special import logsumexp  # here: SciPy's special functions import slowly

    out = np.empty(len(x))
    for rows in _row_blocks(len(x), 8 * (np.shape(x)[1] + len(weights))):
        out[rows] = logsumexp(component_log_likelihood(probs, x[rows]) + np.log(weights), axis=1)
    return out


def _row_blocks(num_rows: int, bytes_per_row: int) -> list[slice]:
    """Slices of consecutive blocks of rows, each near :data:`SCORING_BLOCK_BYTES`."""
    # BLAS's matrix product rounds a row by its place in a group of rows its kernels take
    # together, and a block of one row would take the matrix-vector product instead: blocks
    # start at multiples of 64 rows and the last takes a short remainder in, so that (BLAS on
    # one thread) every row is scored exactly as one product of all the rows scores it. On
    # more threads, which share a product's rows out by its size, the last bit can differ.
    group = 64
    size = max(group, SCORING_BLOCK_BYTES // bytes_per_row // group * group)
    starts = list(range(0, num_rows, size))
    if len(starts) > 1 and num_rows - starts[-1] < group:
        starts.pop()
    return [slice(start, end) for start, end in zip(starts, [*starts[1:], num_rows], strict=True)]


def log_likelihood(samples, data) -> np.ndarray:
    """(S, N) ``log p(x_n | weights_s, probs_s)`` for each draw ``s``.

    Draws that repeat the first (a point estimate) are evaluated once.
    """
    w, p = samples["weights"], samples["probs"]
    x = data["x"]
    if x.ndim != 2 or x.shape[1] != p.shape[-1]:
        raise ValueError(
            f"expected x with D = {p.shape[-1]} columns (the fitted model's pixels); got shape "
            f"{x.shape}."
        )
    if draws_repeat_first(samples):
        return np.repeat(mixture_log_likelihood(w[0], p[0], x)[None], w.shape[0], axis=0)
    return np.stack([mixture_log_likelihood(w[s], p[s], x) for s in range(w.shape[0])])


def log_joint(params, x, config) -> float:
    """``log p(X, weights, probs)`` with ``z`` summed out, in nats: the objective of EM and of
    SVI with the ``enum`` guide. ``params`` holds ``weights`` and ``probs`` (or the raw
    ``weights_map``, ``probs_map``). Uses scipy's densities, independently of the closed form."""
    import scipy.stats  # here, not at the top: it takes most of a second to import

    w = np.asarray(params.get("weights", params.get("weights_map")))
    p = np.asarray(params.get("probs", params.get("probs_map")))
    prior = scipy.stats.dirichlet.logpdf(w, np.full(config.K, config.weight_concentration_prior))
    prior += scipy.stats.beta.logpdf(p, config.probs_prior_a, config.probs_prior_b).sum()
    return float(mixture_log_likelihood(w, p, x).sum() + prior)
