"""Whether a sampler runs on the right device: NUTS of a small model on a GPU warns.

A NUTS iteration is a trajectory of leapfrog steps taken one after another, each one gradient
of the log density. On a GPU every gradient is a sequence of kernels, and while they hold few
values each one costs about its launch, whatever the model: a small model samples faster on the
CPU. A fit on a GPU whose size (latent dimension x data size, :func:`sampling_size`) is below
:data:`NUTS_GPU_MIN_SIZE` for its backend warns with :class:`CPUFasterWarning` and goes on.
"""

from __future__ import annotations

import warnings

import numpy as np

#: NUTS on a GPU warns below this latent dimension x data size, per backend: the number of
#: unconstrained latent values (discrete sites summed out do not count) times the number of
#: data values.
# Where the figures come from: `python benchmarks/gpu_check.py` (docs/results/gpu.md) timed a
# leapfrog step of the Bayesian GMM (K=3) on the GPU and on its machine's CPU.
# Pyro: on an NVIDIA H200 (2026-11-26) the GPU was 1.8x to 2.0x slower at sizes 10,800 and
# 360,000 and 1.7x faster at 10,800,000, crossing over at 2.2 and 2.4 million in two runs; on an
# NVIDIA H100 (2026-11-27) 2.7x and 1.6x slower and 1.1x faster, crossing over at 6.2 million.
# The threshold sits between the machines. NumPyro compiles the whole trajectory, so its
# launches cost less: on the H100 the GPU was 5.4x slower at 10,800 and 4.2x and 16x faster at
# 360,000 and 10,800,000, crossing over at about 72,000.
NUTS_GPU_MIN_SIZE = {"pyro": 4_000_000, "numpyro": 100_000}

#: Device platforms that count as a GPU: torch's device type, JAX's platform names.
GPU_PLATFORMS = ("cuda", "gpu", "rocm")


class CPUFasterWarning(UserWarning):
    """A sampler runs on a GPU where the CPU is likely faster (a small model: see
    :data:`NUTS_GPU_MIN_SIZE`). Fit with ``device="cpu"``, or silence the warning with
    ``warnings.filterwarnings("ignore", category=CPUFasterWarning)``."""


def sampling_size(latent_dim: int, data_size: int) -> int:
    """What the rule compares with :data:`NUTS_GPU_MIN_SIZE`: latent dimension x data size."""
    return int(latent_dim) * int(data_size)


def cpu_likely_faster(latent_dim: int, data_size: int, platform: str, backend: str) -> bool:
    """Whether NUTS of ``backend`` (``"pyro"`` or ``"numpyro"``) on a device of ``platform``
    (``"cpu"``, ``"cuda"``, ``"gpu"``, ...) is likely slower than on the CPU: a GPU, and a size
    below the backend's :data:`NUTS_GPU_MIN_SIZE`.

    >>> cpu_likely_faster(17, 600, "cuda", "pyro"), cpu_likely_faster(17, 600, "cpu", "pyro")
    (True, False)
    >>> size = (20, 100_000)  # latent values, data values: 2,000,000
    >>> cpu_likely_faster(*size, "gpu", "pyro"), cpu_likely_faster(*size, "gpu", "numpyro")
    (True, False)
    """
    size = sampling_size(latent_dim, data_size)
    return platform in GPU_PLATFORMS and size < NUTS_GPU_MIN_SIZE[backend]


def count_values(data: dict) -> int:
    """The number of values in a dict of arrays (numpy, torch or JAX)."""
    return sum(int(np.prod(np.shape(value))) for value in data.values())


def warn_if_cpu_faster(latent_dim: int, data_size: int, platform: str, backend: str) -> bool:
    """Warn (:class:`CPUFasterWarning`) when :func:`cpu_likely_faster`; returns whether it
    warned."""
    if not cpu_likely_faster(latent_dim, data_size, platform, backend):
        return False
    warnings.warn(
        f"NUTS on a GPU ({platform}) for a small model: {latent_dim} latent values x "
        f"{data_size} data values = {sampling_size(latent_dim, data_size):,}, below "
        f"{NUTS_GPU_MIN_SIZE[backend]:,} for {backend}. Each leapfrog step is many small GPU "
        'kernels whose launches dominate: device="cpu" is likely faster.',
        CPUFasterWarning,
        stacklevel=4,
    )
    return True
