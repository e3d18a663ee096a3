"""Initial responsibilities shared by every algorithm, so runs compared start from one point."""

from __future__ import annotations

import numpy as np

INIT_METHODS = ("kmeans", "random")


def initial_responsibilities(x: np.ndarray, K: int, init, seed: int) -> np.ndarray:
    """(N, K) responsibilities from ``init``: an array, ``"kmeans"`` or ``"random"``."""
    n = x.shape[0]
    if isinstance(init, str):
        if init not in INIT_METHODS:
            raise ValueError(
                f"init must be an (N, K) array or one of {list(INIT_METHODS)}; got {init!r}."
            )
        rng = np.random.default_rng(seed)
        if init == "random":
            resp = rng.uniform(size=(n, K))
            return resp / resp.sum(axis=1, keepdims=True)
        from scipy.cluster.vq import kmeans2

        _, labels = kmeans2(x, K, seed=rng, minit="++")
        return np.eye(K)[labels]
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
