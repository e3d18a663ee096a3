"""Devices by name for each backend, and numpy arrays placed on them.

``"cpu"``, ``"cuda"`` or ``"cuda:N"`` (NumPyro also takes ``"gpu"``); a device that is not there
is a clear error that lists the ones that are. Each backend is imported only when asked for.

Several host CPU devices (``XLA_FLAGS=--xla_force_host_platform_device_count=N`` or
``jax_num_cpu_devices``, for data-parallel runs without accelerators) share one pool of XLA
threads, which has to be larger than XLA makes it on its own: ``reserve_host_threads``.
"""

from __future__ import annotations

import os
import re
import sys
import warnings

import numpy as np

from zoo.options import did_you_mean

DTYPES = ("float32", "float64")

# XLA's CPU client runs the programs of all its host devices on one pool of threads, sized when
# JAX starts: PJRT_NPROC (or NPROC) if set, else the CPUs this process may run on, and never fewer
# threads than devices (a collective holds one thread per device until all have arrived). A
# thread also stays blocked while a batched linear-algebra kernel of jaxlib (triangular solve,
# Cholesky, eigh... in jaxlib 0.10.2) waits for the parts of its batch that it has handed to that
# same pool. With as many threads as devices, every device can hold one that waits and none is
# left to do the work: the step deadlocks (data-parallel SVI of the Bayesian GMM, K=3 on 4-D
# data, on 2 host devices of a 2-CPU machine: from 6,250 rows, where jaxlib starts splitting the
# likelihood's triangular solve in two). XLA runs at most 4 threads of one program at a time
# (best effort), so 4 per device and one more cannot all be waiting.
THREADS_PER_HOST_DEVICE = 4


def host_device_count() -> int:
    """The host CPU devices JAX makes in this process: ``jax_num_cpu_devices`` if set, else
    ``--xla_force_host_platform_device_count`` of ``XLA_FLAGS``, else 1."""
    if "jax" in sys.modules:
        import jax

        count = jax.config.jax_num_cpu_devices
    else:
        count = _integer(os.environ.get("JAX_NUM_CPU_DEVICES"))
    if count is not None and count > 0:
        return count
    flags = re.findall(
        r"--xla_force_host_platform_device_count=(\d+)", os.environ.get("XLA_FLAGS", "")
    )
    return int(flags[-1]) if flags else 1


def host_thread_pool_size(num_devices: int) -> int:
    """The threads of XLA's CPU pool for ``num_devices`` host devices in this environment, as
    XLA counts them when JAX starts."""
    for name in ("PJRT_NPROC", "NPROC"):
        value = _integer(os.environ.get(name))
        if value is not None:
            return max(value, num_devices, 1)
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return max(cpus or 1, num_devices)


def host_threads_needed(num_devices: int) -> int:
    """Threads of XLA's CPU pool that ``num_devices`` host devices cannot all hold waiting."""
    return THREADS_PER_HOST_DEVICE * num_devices + 1


def reserve_host_threads() -> None:
    """Before JAX starts, size XLA's CPU pool for the host devices asked for (``PJRT_NPROC``),
    when there are several and the pool XLA would make could deadlock (see
    ``THREADS_PER_HOST_DEVICE``). A pool size the user set (``PJRT_NPROC``, ``NPROC``) is kept;
    once JAX has started, its pool can no longer change and nothing is done."""
    if any(_integer(os.environ.get(name)) is not None for name in ("PJRT_NPROC", "NPROC")):
        return
    if _jax_started():
        return
    count = host_device_count()
    needed = host_threads_needed(count)
    if count > 1 and host_thread_pool_size(count) < needed:
        os.environ["PJRT_NPROC"] = str(needed)


def _jax_started() -> bool:
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src.xla_bridge import backends_are_initialized
    except ImportError:  # cannot tell: leave the pool to the user
        return True
    return backends_are_initialized()


def _integer(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


reserve_host_threads()  # importing the zoo before JAX starts is enough


def check_dtype(dtype: str) -> str:
    if dtype not in DTYPES:
        hint = did_you_mean(dtype, DTYPES) if isinstance(dtype, str) else ""
        raise ValueError(f"dtype must be one of {list(DTYPES)}; got {dtype!r}.{hint}")
    return dtype


def dtype_name(dtype) -> str:
    """``dtype`` as the zoo names it, one of ``DTYPES``: from that name, a NumPy dtype or
    scalar type (``np.float32``) or a torch dtype (``torch.float32``)."""
    if not isinstance(dtype, str):
        try:
            dtype = np.dtype(dtype).name
        except TypeError:  # a torch dtype, which NumPy does not read
            dtype = str(dtype).removeprefix("torch.")
    return check_dtype(dtype)


#: Why a GPU asked for is not there, by backend.
NO_GPU = {
    "pyro": "no CUDA device is visible to torch (no GPU here, or a torch built without CUDA)",
    "numpyro": "no CUDA device is visible to JAX (no GPU here, or a jaxlib without CUDA "
    "support: pip install 'jax[cuda12]')",
}


def available(backend: str) -> list[str]:
    if backend == "pyro":
        import torch

        return ["cpu"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    return [f"{d.platform}:{d.id}" for d in _jax_devices()] + ["cpu"]


def _jax_devices(platform: str | None = None) -> list:
    """``jax.devices(platform)``, [] for a platform that is not there. JAX_PLATFORMS naming one
    that cannot start (``cuda`` on a machine without a GPU) makes every call fail deep in JAX
    (a bare ``AssertionError``, then ``RuntimeError``s): that is a ``ValueError`` saying what to
    set."""
    reserve_host_threads()
    import jax

    try:
        return jax.devices(platform)
    except (AssertionError, RuntimeError) as err:
        forced = os.environ.get("JAX_PLATFORMS") or jax.config.jax_platforms
        if forced and "cpu" not in forced.split(","):
            raise ValueError(
                f"JAX cannot start the platform(s) JAX_PLATFORMS={forced!r} names: "
                f"{NO_GPU['numpyro']}. Unset JAX_PLATFORMS, or set JAX_PLATFORMS=cpu, to fit "
                "on the CPU." + (f" (JAX: {str(err).strip()[:200]})" if str(err).strip() else "")
            ) from err
        if platform is None:
            raise
        return []


def resolve(backend: str, device: str = "cpu"):
    """The backend's device object for the name ``device``."""
    if backend == "pyro":
        return _torch_device(device)
    return _jax_device(device)


def _torch_device(device):
    import torch

    if str(device).partition(":")[0] == "gpu":  # NumPyro's name; torch's is "cuda"
        none = f"; and {NO_GPU['pyro']}" if not torch.cuda.device_count() else ""
        raise ValueError(
            f"Unknown device {device!r} for Pyro, which names GPUs 'cuda' or 'cuda:N'{none}; "
            f"available: {available('pyro')}."
        )
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"Unknown device {device!r}; available: {available('pyro')}.") from err
    if dev.type == "cuda":
        index = 0 if dev.index is None else dev.index
        if index >= torch.cuda.device_count():
            raise ValueError(_unavailable(device, "pyro", torch.cuda.device_count()))
        return torch.device("cuda", index)
    if dev.type != "cpu":
        raise ValueError(f"Unknown device {device!r}; available: {available('pyro')}.")
    return dev


def _unavailable(device, backend: str, num_gpus: int) -> str:
    """Why ``device`` (a GPU) is not there: none at all, or fewer than its index needs."""
    why = NO_GPU[backend] if num_gpus == 0 else f"only {num_gpus} GPU(s) are visible"
    return f"Device {device!r} is not available: {why}; available: {available(backend)}."


def _jax_device(device):
    name, colon, index = str(device).partition(":")
    if colon and not index.isdigit():
        raise ValueError(f"Unknown device {device!r}; available: {available('numpyro')}.")
    platform = {"cuda": "gpu", "gpu": "gpu", "cpu": "cpu"}.get(name)
    devices = _jax_devices(platform) if platform else []
    i = int(index) if index.isdigit() else 0
    if platform == "gpu" and i >= len(devices):
        raise ValueError(_unavailable(device, "numpyro", len(devices)))
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
