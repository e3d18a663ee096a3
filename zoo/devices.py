"""Devices by name for each backend, and numpy arrays placed on them.

``"cpu"``, ``"cuda"`` or ``"cuda:N"`` (NumPyro also takes ``"gpu"``); a device that is not there
is a clear error that lists the ones that are. Each backend is imported only when asked for.
"""

from __future__ import annotations

import warnings

import numpy as np

DTYPES = ("float32", "float64")


def check_dtype(dtype: str) -> str:
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {list(DTYPES)}; got {dtype!r}.")
    return dtype


def available(backend: str) -> list[str]:
    if backend == "pyro":
        import torch

        return ["cpu"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    import jax

    return [f"{d.platform}:{d.id}" for d in jax.devices()] + ["cpu"]


def resolve(backend: str, device: str = "cpu"):
    """The backend's device object for the name ``device``."""
    if backend == "pyro":
        return _torch_device(device)
    return _jax_device(device)


def _torch_device(device):
    import torch

    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"Unknown device {device!r}; available: {available('pyro')}.") from err
    if dev.type == "cuda":
        index = 0 if dev.index is None else dev.index
        if index >= torch.cuda.device_count():
            raise ValueError(f"Device {device!r} is not available; available: {available('pyro')}.")
        return torch.device("cuda", index)
    if dev.type != "cpu":
        raise ValueError(f"Unknown device {device!r}; available: {available('pyro')}.")
    return dev


def _jax_device(device):
    import jax

    name, colon, index = str(device).partition(":")
    if colon and not index.isdigit():
        raise ValueError(f"Unknown device {device!r}; available: {available('numpyro')}.")
    platform = {"cuda": "gpu", "gpu": "gpu", "cpu": "cpu"}.get(name)
    try:
        devices = jax.devices(platform) if platform else []
    except RuntimeError:
        devices = []
    i = int(index) if index.isdigit() else 0
    if not devices or i >= len(devices):
        raise ValueError(f"Device {device!r} is not available; available: {available('numpyro')}.")
    return devices[i]


def for_torch(value) -> np.ndarray:
    """``value`` as a numpy array torch takes: torch refuses arrays with negative strides
    (``x[::-1]``) and arrays in the other byte order, which numpy and JAX read; those are
    copied, others passed as they are."""
    array = np.asarray(value)
    if not array.dtype.isnative:
        array = array.astype(array.dtype.newbyteorder("="))
    if any(stride < 0 for stride in array.strides):
        array = array.copy()
    return array


def asarray(backend: str, value, device, dtype: str):
    """``value`` as a ``dtype`` array of the backend on ``device`` (a device object)."""
    if backend == "pyro":
        import torch

        with warnings.catch_warnings():
            # Read-only arrays (memory-mapped data, pandas' copy-on-write columns) are shared,
            # not copied: the zoo never writes into a data tensor in place.
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            return torch.as_tensor(
                for_torch(value), dtype=getattr(torch, check_dtype(dtype)), device=device
            )
    import jax
    import jax.numpy as jnp

    return jax.device_put(jnp.asarray(np.asarray(value), dtype=check_dtype(dtype)), device)
