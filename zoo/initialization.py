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
      product, so it stays cheap where k-means on large N and K does not).

    Where ``x`` has fewer than K distinct rows, ``"kmeans"`` and ``"random_from_data"`` give each
    distinct row a component of its own and start the rest empty, with a warning.
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
        return np.eye(K)[_kmeans(x, K, rng)]
    if isinstance(init, Mapping):
        raise TypeError(
            "init for CAVI, EM and natural-gradient SVI is (N, K) responsibilities or one of "
            f"{list(INIT_METHODS)}; a dict of parameters starts algorithm='svi' only."
        )
    resp = _as_float_array(init)
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


def _as_float_array(init) -> np.ndarray:
    """``init`` as an array of floats; an object numpy cannot read as one (a fit's result
    instead of its ``raw_params``, say) is refused with what init may be."""
    try:
        return np.asarray(init, dtype=float)
    except (TypeError, ValueError) as err:
        if hasattr(init, "raw_params"):  # a fit's result, passed whole
            got = f"{init!r}, whose raw_params start algorithm='svi'"
        else:
            got = f"a {type(init).__name__}, which numpy cannot read as numbers ({err})"
        raise TypeError(
            f"init for a mixture must be one of {list(INIT_METHODS)}, (N, K) responsibilities, "
            "or (for algorithm='svi' only) a dict of parameter arrays such as a fit's "
            f"raw_params; got {got}."
        ) from None


def _kmeans(x: np.ndarray, K: int, rng: np.random.Generator) -> np.ndarray:
    """Component of every row: scipy's k-means (k-means++ seeding, 10 Lloyd steps)."""
    from scipy.cluster.vq import kmeans2

    if _fewer_distinct_rows(x, K):
        # k-means++ seeding runs out of new rows to seed from, scipy divides by zero and warns
        # of an empty cluster at every step, and ends where this starts: each distinct row a
        # cluster, the rest empty.
        _, first, value_of_row = np.unique(x, axis=0, return_index=True, return_inverse=True)
        return _component_per_distinct_row(len(first), value_of_row, K, "kmeans", rng)
    _, labels = kmeans2(x, K, seed=rng, minit="++")
    return labels


def _fewer_distinct_rows(x: np.ndarray, K: int) -> bool:
    """Whether ``x`` has fewer than K distinct rows, counted in a prefix that grows fourfold:
    ordinary data show K distinct rows among their first few, and are not sorted whole."""
    size = 4 * K
    while len(np.unique(x[:size], axis=0)) < K:
        if size >= len(x):
            return True
        size *= 4
    return False


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
    return _component_per_distinct_row(len(first), value_of_row, K, "random_from_data", rng)


def _component_per_distinct_row(
    num_distinct: int, value_of_row: np.ndarray, K: int, init: str, rng: np.random.Generator
) -> np.ndarray:
    """Component of every row where ``x`` has fewer distinct rows than K: each distinct value
    (``value_of_row`` indexes them) a component of its own, in random order, the rest empty."""
    warnings.warn(
        f"x has {num_distinct} distinct rows, fewer than K = {K} components: init="
        f"{init!r} gives each distinct row a component and starts {K - num_distinct} "
        "empty. Use a smaller K, or pass init as (N, K) responsibilities.",
        RuntimeWarning,
        stacklevel=4,
    )
    return rng.permutation(num_distinct)[value_of_row.reshape(-1)]


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
