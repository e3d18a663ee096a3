"""Sequences drawn from the generative model of exchangeable tokens."""

from __future__ import annotations

import numpy as np


def positive_int(name, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name} must be an int in the range [1, inf); got {value!r}.")
    return int(value)


def simulate(
    config,
    rng: np.random.Generator,
    num_sequences: int,
    length: int,
    min_length: int | None = None,
):
    """Draw ``num_sequences`` sequences from the generative model.

    Every sequence has ``length`` tokens; with ``min_length``, each has its own length drawn
    log-uniformly from ``[min_length, length]`` (as many sequences of 4 to 8 tokens as of 32 to
    64), its tokens first and zeros after.

    Returns ``{"x": (S, N, D) float64, "z": (S,) int64}``, plus ``"length": (S,) int64`` with
    ``min_length``: the data of a supervised fit (drop ``z`` for the other objectives), or fresh
    test sequences with their true latents.
    """
    num_sequences = positive_int("num_sequences", num_sequences)
    length = positive_int("length", length)
    z = rng.choice(config.K, size=num_sequences, p=config.weights)
    noise = rng.standard_normal((num_sequences, length, config.dim))
    out = {"x": config.means[z][:, None, :] + config.scale * noise, "z": z.astype(np.int64)}
    if min_length is not None:
        min_length = positive_int("min_length", min_length)
        if min_length > length:
            raise ValueError(f"min_length must be <= length={length}; got {min_length}.")
        u = rng.uniform(np.log(min_length), np.log(length + 1), size=num_sequences)
        lengths = np.clip(np.floor(np.exp(u)), min_length, length).astype(np.int64)
        out["x"] = np.where(np.arange(length)[:, None] < lengths[:, None, None], out["x"], 0.0)
        out["length"] = lengths
    return out
