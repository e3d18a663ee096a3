"""Quadratic features ``phi(x) = [1, x, upper-triangle(x x^T)]`` shared by the Gaussian mixtures.

Any expectation that is a quadratic form in ``x`` (a Gaussian log-density under any q) is
``phi(x) @ theta`` for a coefficient vector ``theta``, and the sufficient statistics of a
responsibility-weighted Gaussian fit are ``resp.T @ phi``. Written against an array namespace
``xp`` (``zoo.array_namespace``) so torch and JAX share it.
"""

from __future__ import annotations

import numpy as np


def quadratic_cache(x, xp, shift=None) -> dict:
    """Centred quadratic features of ``x`` (N, D) and the index maps that go with them.

    The centre is the mean of ``x`` unless ``shift`` fixes it (minibatches share one centre).
    """
    n, d = x.shape
    if shift is None:
        shift = xp.sum(x, axis=0) / n  # centring keeps E[x x^T] - m m^T well conditioned
    xc = x - shift
    rows, cols = np.triu_indices(d)
    quad = xc[:, rows] * xc[:, cols]
    features = xp.concatenate([xp.ones((n, 1), like=x), xc, quad], axis=1)
    # (P, D*D) 0/1 map that scatters the upper triangle back into a symmetric matrix.
    untriu = np.zeros((len(rows), d * d))
    untriu[np.arange(len(rows)), rows * d + cols] = 1.0
    untriu[np.arange(len(rows)), cols * d + rows] = 1.0
    # Off-diagonal entries appear once in the features but twice in x^T A x.
    multiplicity = np.where(rows == cols, 1.0, 2.0)
    return {
        "features": xp.layout_features(features),
        "shift": shift,
        "untriu": xp.asarray(untriu, like=x),
        "tri_rows": rows,
        "tri_cols": cols,
        "multiplicity": xp.asarray(multiplicity, like=x),
    }


def sufficient_statistics(resp, cache, xp) -> dict:
    """N_k, sum_n r_nk x_n and sum_n r_nk x_n x_n^T from one product ``resp.T @ phi``.

    ``resp`` is in the backend's layout (``xp.layout_resp``), as ``log_responsibilities`` gives it.
    """
    return statistics_from_sums(xp.weighted_feature_sums(resp, cache["features"]), cache)


def statistics_from_sums(stats, cache) -> dict:
    """The named statistics of the (K, F) sums ``resp.T @ phi`` (or any weighted sum of them)."""
    d = cache["shift"].shape[0]
    k = stats.shape[0]
    sum_xx = (stats[:, 1 + d :] @ cache["untriu"]).reshape(k, d, d)
    return {"raw": stats, "nk": stats[:, 0], "sum_x": stats[:, 1 : 1 + d], "sum_xx": sum_xx}


def scatter_matrices(stats, nk, xp):
    """Component means and scatter ``sum_n r_nk (x_n - xbar_k)(x_n - xbar_k)^T``."""
    xbar = stats["sum_x"] / nk[:, None]
    scatter = stats["sum_xx"] - nk[:, None, None] * xbar[:, :, None] * xbar[:, None, :]
    return xbar, scatter


def coefficients(const, linear, quadratic, cache, xp):
    """theta (F, K) with ``phi(x) @ theta = const + linear . x - x^T (quadratic / 2) x``."""
    quad = -0.5 * quadratic[:, cache["tri_rows"], cache["tri_cols"]] * cache["multiplicity"]
    return xp.concatenate([const[:, None], linear, quad], axis=1).T


def log_responsibilities(theta, cache, xp):
    """Normalised log responsibilities (backend layout) and per-point log normaliser (N,)."""
    return xp.log_softmax_logits(cache["features"], theta)
