"""The GPU paths' host-side logic, on the CPU: what keeps a step from waiting for the device
(uploads through pinned memory, index tensors made once where the data live)."""

from __future__ import annotations

import numpy as np
import torch

from inference.backends.pyro_backend import upload
from zoo.array_namespace import JaxOps, TorchOps
from zoo.quadratic_features import quadratic_cache


def test_upload_to_the_cpu_is_a_plain_move():
    rows = torch.as_tensor(np.array([3, 1, 2]))
    assert upload(rows, torch.device("cpu")) is rows


def test_feature_indices_are_device_tensors_on_torch_and_constants_on_jax():
    """A numpy index moves to a GPU at every use of it, and each move waits for the device:
    torch's cache holds the indices as tensors where the data live; JAX's keeps them as numpy."""
    x = np.random.default_rng(0).normal(size=(5, 3))
    torch_cache = quadratic_cache(torch.as_tensor(x), TorchOps())
    for key in ("triangle", "tri_rows", "tri_cols"):
        assert isinstance(torch_cache[key], torch.Tensor)
    jax_cache = quadratic_cache(np.asarray(x), JaxOps())
    for key in ("triangle", "tri_rows", "tri_cols"):
        assert isinstance(jax_cache[key], np.ndarray)
