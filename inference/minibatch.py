"""Minibatch indices for SVI: epoch-wise shuffling that a step number alone reproduces.

Every epoch visits each data point at most once, in an order drawn from ``(seed, epoch)``; the
last incomplete batch of an epoch is dropped so every step sees ``batch_size`` rows (the
``N % batch_size`` points it would have held are others in each epoch, so every point is seen
over the epochs). Because the order
is a function of the step number, a resumed run draws the same batches as an uninterrupted one
with nothing extra to checkpoint.
"""

from __future__ import annotations

import numpy as np


def check_batch_size(batch_size, num_data: int) -> int:
    if isinstance(batch_size, bool) or not isinstance(batch_size, int | np.integer):
        raise TypeError(f"batch_size must be an int; got {type(batch_size).__name__}.")
    if not 1 <= batch_size <= num_data:
        raise ValueError(
            f"batch_size must be an int in the range [1, {num_data}] (the number of data "
            f"points); got {batch_size}."
        )
    return int(batch_size)


class EpochBatches:
    """``indices(step)`` -> the (batch_size,) int64 row indices of SVI step ``step`` (0-based)."""

    def __init__(self, num_data: int, batch_size: int, seed: int):
        self.num_data = int(num_data)
        self.batch_size = check_batch_size(batch_size, self.num_data)
        self.seed = int(seed)
        self.steps_per_epoch = self.num_data // self.batch_size
        self._epoch, self._order = -1, None

    def indices(self, step: int) -> np.ndarray:
        epoch, offset = divmod(int(step), self.steps_per_epoch)
        if epoch != self._epoch:
            rng = np.random.default_rng([self.seed, epoch])
            self._epoch, self._order = epoch, rng.permutation(self.num_data)
        start = offset * self.batch_size
        return self._order[start : start + self.batch_size]


class PermutedBatches(EpochBatches):
    """``EpochBatches`` whose epoch order is a keyed pseudo-random permutation computed row by row
    (a 4-round Feistel network on ``[0, 4^h)`` with cycle walking into ``[0, num_data)``), so it
    takes no memory that grows with ``num_data``: for data larger than memory. Every point once
    per epoch, the order fixed by ``(seed, epoch)``; not the order ``EpochBatches`` draws."""

    ROUNDS = 4

    def indices(self, step: int) -> np.ndarray:
        epoch, offset = divmod(int(step), self.steps_per_epoch)
        if epoch != self._epoch:
            rng = np.random.default_rng([self.seed, epoch, 1])
            self._epoch, self._order = epoch, rng.integers(2**63, size=self.ROUNDS, dtype=np.uint64)
        start = offset * self.batch_size
        position = np.arange(start, start + self.batch_size, dtype=np.uint64)
        return self._permute(position).astype(np.int64)

    def _permute(self, values: np.ndarray) -> np.ndarray:
        half = max(1, (int(self.num_data - 1).bit_length() + 1) // 2)
        mask = np.uint64((1 << half) - 1)
        shift = np.uint64(half)

        def encrypt(v):
            left, right = v >> shift, v & mask
            for key in self._order:
                z = (right + key) * np.uint64(0x9E3779B97F4A7C15)  # splitmix64's mixer
                z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
                z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
                left, right = right, left ^ ((z ^ (z >> np.uint64(31))) & mask)
            return (left << shift) | right

        out = encrypt(values)
        outside = out >= self.num_data
        while outside.any():  # cycle walking: fewer than 4 rounds on average
            out[outside] = encrypt(out[outside])
            outside = out >= self.num_data
        return out


def check_grey_levels(x: np.ndarray) -> np.ndarray:
    """Grey levels in [0, 1], the input of dynamic binarization."""
    x = np.asarray(x)
    if x.dtype.kind != "f" or x.size and not (x.min() >= 0 and x.max() <= 1):
        low, high = (x.min(), x.max()) if x.size else (None, None)
        raise ValueError(
            "dynamic_binarization=True needs data['x'] as floats in [0, 1] (grey levels, e.g. "
            f"images / 255); got dtype {x.dtype} with values in [{low}, {high}]."
        )
    return x


def binarize(grey: np.ndarray, seed: int, epoch: int) -> np.ndarray:
    """One Bernoulli draw per pixel, ``P(1) = grey``, fixed by ``(seed, epoch)``."""
    rng = np.random.default_rng([seed, epoch, 2])
    return (rng.random(grey.shape, dtype=np.float32) < grey).astype(np.float32)
