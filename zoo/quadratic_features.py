"""Quadratic features ``phi(x) = [1, x, upper-triangle(x x^T)]`` shared by the Gaussian mixtures.

Any expectation that is a quadratic form in ``x`` (a Gaussian log-density under any q) is
``phi(x) @ theta`` for a coefficient vector ``theta``, and the sufficient statistics of a
responsibility-weighted Gaussian fit are ``resp.T @ phi``. Written against an array namespace
``xp`` (``zoo.array_namespace``) so torch and JAX share it.
"""

from __future__ import annotations

import os

import numpy as np


def physical_memory() -> int | None:
    """This machine's memory in bytes, where the OS says (None elsewhere)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):
        return None


def check_size(n: int, d: int, itemsize: int) -> None:
    """Refuse features that could not fit in this machine's memory, before allocating them:
    N x (1 + D + D (D + 1) / 2) numbers, which grows as D squared."""
    needed = n * (1 + d + d * (d + 1) // 2) * itemsize
    memory = physical_memory()
    if memory is not None and needed > memory:
        raise ValueError(
            f"A Gaussian mixture with full covariances on {n:,} points in {d:,} dimensions holds "
            f"{needed / 2**30:,.1f} GiB of quadratic features (N x D (D + 1) / 2 numbers), more "
            f"than this machine's {memory / 2**30:,.1f} GiB of memory. Reduce the dimension (for "
            "example with PCA) or the number of points."
        )


def quadratic_cache(x, xp, shift=None) -> dict:
    """Centred quadratic features of ``x`` (N, D) and the index maps that go with them.

    The centre is the mean of ``x`` unless ``shift`` fixes it (minibatches share one centre).
    """
    n, d = x.shape
    check_size(n, d, getattr(x.dtype, "itemsize", 8))
    if shift is None:
        shift = xp.sum(x, axis=0) / n  # centring keeps E[x x^T] - m m^T well conditioned
    xc = x - shift
    rows, cols = np.triu_indices(d)
    quad = xc[:, rows] * xc[:, cols]
    features = xp.concatenate([xp.ones((n, 1), like=x), xc, quad], axis=1)
    # For each entry (i, j) of a D x D matrix, the feature of the upper triangle that holds it:
    # a gather that makes the symmetric matrix (a dense 0/1 map would hold D^4 / 2 numbers).
    triangle = np.zeros((d, d), dtype=np.int64)
    triangle[rows, cols] = triangle[cols, rows] = np.arange(len(rows))
    # Off-diagonal entries appear once in the features but twice in x^T A x.
    multiplicity = np.where(rows == cols, 1.0, 2.0)
    return {
        "features": xp.layout_features(features),
        "shift": shift,
        "triangle": xp.index(triangle.ravel(), like=x),
        "tri_rows": xp.index(rows, like=x),
        "tri_cols": xp.index(cols, like=x),
        "multiplicity": xp.asarray(multiplicity, like=x),
    }


def sufficient_statistics(resp, cache, xp) -> dict:
    """N_k, sum_n r_nk x_n and sum_n r_nk x_n x_n^T from one product ``resp.T @ phi``.

    ``resp`` is in the backend's layout (``xp.layout_resp``), as ``responsibilities`` gives it.
    """
    return statistics_from_sums(xp.weighted_feature_sums(resp, cache["features"]), cache)


def statistics_from_sums(stats, cache) -> dict:
    """The named statistics of the (K, F) sums ``resp.T @ phi`` (or any weighted sum of them)."""
    d = cache["shift"].shape[0]
    k = stats.shape[0]
    sum_xx = stats[:, 1 + d :][:, cache["triangle"]].reshape(k, d, d)
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


def responsibilities(theta, cache, xp):
    """Responsibilities (backend layout) and per-point log normaliser (N,)."""
    return xp.softmax_logits(cache["features"], theta)
