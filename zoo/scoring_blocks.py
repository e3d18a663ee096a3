"""What the mixtures' scoring of new data shares: the size of the blocks it works in, which
bounds its memory beyond its output, and the test for a point estimate's repeated draws, which
it scores once."""

from __future__ import annotations

import numpy as np

#: Bytes of one block's largest array in a mixture's scoring. A block holds about three such
#: arrays at once, so scoring takes about 24 MiB beyond its (S, N) output and the draws,
#: whatever the number of draws, rows, components and dimensions (the inference layer plans
#: memory for the output and the draws alone).
SCORING_BLOCK_BYTES = 2**23


def draws_repeat_first(samples: dict) -> bool:
    """Whether every draw equals the first, as a point estimate's copies do: such draws are
    scored once, not once per copy."""
    return all(np.array_equal(np.broadcast_to(v[:1], v.shape), v) for v in samples.values())
