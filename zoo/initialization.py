"""Initial responsibilities shared by every algorithm, so runs compared start from one point."""

from __future__ import annotations

import warnings
from collections.abc import Mapping

import numpy as np

INIT_METHODS = ("kmeans", "random", "random_from_data")


def initial_responsibilities(x: np.ndarray, K: int, init, seed: int) -> np.ndarray:
    """(N, K) responsibilities from ``init``: an array or one of ``INIT_METHODS``.

    * ``"kmeans"``: hard assignments of scipy's k-means (k-means++ seeding, 10 Lloyd steps);
    * ``"random"``: responsibilities drawn uniformly and normalised (near-symmetric components
      that EM must pull apart);
    * ``"random_from_data"``: K data points with distinct values drawn as centres, each point
      assigned to the nearest (scikit-learn's GaussianMixture option of that name; one matrix
      product, so it stays cheap where k-means on large N and K does not). Where ``x`` has fewer
      than K distinct rows, each distinct row gets a component of its own and the rest start
      empty (with a warning), as k-means leaves them.
    """
    n = x.shape[0]
    if x.dtype not in (np.float32, np.float64):  # scipy's k-means takes no other dtype
        x = np.asarray(x, dtype=np.float64)
    if isinstance(init, str):
        if init not in INIT_METHODS:
            raise ValueError(
                f"init must be an (N, K) array or one of {list(INIT_METHODS)}; got {init!r}."
            )
        rng = np.random.default_rng(seed)
        if init == "random":
            resp = rng.uniform(size=(n, K))
            return resp / resp.sum(axis=1, keepdims=True)
        if init == "random_from_data":
            return np.eye(K)[_random_from_data(x, K, rng)]
        from scipy.cluster.vq import kmeans2

        _, labels = kmeans2(x, K, seed=rng, minit="++")
        return np.eye(K)[labels]
    if isinstance(init, Mapping):
        raise TypeError(
            "init for CAVI, EM and natural-gradient SVI is (N, K) responsibilities or one of "
            f"{list(INIT_METHODS)}; a dict of parameters starts algorithm='svi' only."
        )
    resp = np.asarray(init, dtype=float)
    if resp.shape != (n, K):
        raise ValueError(
            f"init responsibilities must have shape (N, K) = ({n}, {K}); got {resp.shape}."
        )
    if not np.all(np.isfinite(resp)) or (resp < 0).any():
        raise ValueError("init responsibilities must be finite and non-negative.")
    sums = resp.sum(axis=1)
    if not np.allclose(sums, 1.0, rtol=1e-6, atol=1e-9):
        raise ValueError(
            f"init responsibilities must sum to 1 over components in every row; "
            f"row sums range over [{sums.min():.6g}, {sums.max():.6g}]."
        )
    return resp


def _random_from_data(x: np.ndarray, K: int, rng: np.random.Generator) -> np.ndarray:
    """Component of every row: the nearest of K data points with distinct values drawn as centres.

    K distinct rows can still repeat a value (binary or rounded data). Equal centres tie, the tie
    goes to the first, and the others start empty, so a draw with a repeated value is redrawn
    among the distinct values. A draw without one is kept as it is, so results do not change.
    """
    n = x.shape[0]
    if n >= K:
        centres = x[rng.choice(n, size=K, replace=False)]
        if len(np.unique(centres, axis=0)) == K:
            return _nearest(x, centres)
    _, first, value_of_row = np.unique(x, axis=0, return_index=True, return_inverse=True)
    if len(first) >= K:
        return _nearest(x, x[rng.choice(first, size=K, replace=False)])
    warnings.warn(
        f"x has {len(first)} distinct rows, fewer than K = {K} components: init="
        f"'random_from_data' gives each distinct row a component and starts {K - len(first)} "
        "empty. Use a smaller K, or pass init as (N, K) responsibilities.",
        RuntimeWarning,
        stacklevel=3,
    )
    return rng.permutation(len(first))[value_of_row.reshape(-1)]


def _nearest(x: np.ndarray, centres: np.ndarray, chunk: int = 4096) -> np.ndarray:
    """Index of the nearest centre (squared Euclidean) of every row, in chunks of rows."""
    # Distances are taken from the first centre, not from 0: a common offset far larger than the
    # spread (1e8) would otherwise swamp x . c in rounding. A data row as origin keeps integer
    # data (binary images) integer, so the products, and the ties among them, stay exact.
    origin = centres[0].astype(float)
    centres = centres.astype(float) - origin
    half_sq_norms = 0.5 * (centres**2).sum(axis=1)
    # argmin_k |x - c_k|^2 = argmax_k (x . c_k - |c_k|^2 / 2): one product per chunk
    return np.concatenate(
        [
            np.argmax((x[i : i + chunk] - origin) @ centres.T - half_sq_norms, axis=1)
            for i in range(0, len(x), chunk)
        ]
    )
