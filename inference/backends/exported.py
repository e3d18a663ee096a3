"""Compiled functions kept between processes as exported StableHLO (``jax.export``).

JAX's persistent compilation cache spares a new process XLA's compilation, but not the tracing
of the model and guide in Python nor the lowering of that trace, which for a small fit take
longer than the fit. A :class:`PersistentFunction` exports its function once (a trace and a
lowering, as ``jax.jit`` does) and keeps the serialized module on disk; a later process that
calls it with arguments of the same shapes loads the module instead, so the model is never run
in Python there, and XLA's executable for the module comes from JAX's cache.

A module is found again only by a key naming everything its computation depends on: the
caller's description of the function (model, guide, options), the shapes and dtypes of the
arguments, the platform, the versions of Python, JAX, jaxlib, NumPyro and funsor, JAX's
settings, and the source of the ``zoo`` and ``inference`` packages. Callers give a key only for
functions built from those packages' code: a model defined elsewhere could change without the
key changing. Each file holds a SHA-256 of its contents, so a torn or damaged file is ignored
and replaced, never loaded. The platform is the name ``jax.export`` gives it (``"cuda"`` or
``"rocm"`` for a device JAX calls ``"gpu"``). The cache only ever saves time: a kept module that
cannot run here (lowered for another platform, or not matching its key) is set aside with a
one-line warning and the function is traced as ``jax.jit`` would.

The files are in the ``exported`` folder of ``jax_cache.root()`` (``~/.cache/ppl-zoo/exported``
unless ``ZOO_JAX_CACHE`` says otherwise; ``ZOO_JAX_CACHE=0`` turns this off with JAX's cache).
Nothing removes old files: delete the folder to reclaim space.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import operator
import sys
import warnings
from collections.abc import Callable
from pathlib import Path

import jax

from inference.backends import jax_cache
from zoo.files import atomic_write

_MAGIC = b"ppl-zoo exported v1\n"
_DIGEST_BYTES = 32


def directory() -> Path | None:
    """Where exported functions are kept; None when they are not (``ZOO_JAX_CACHE=0``, or JAX
    running without compiling, ``jax.disable_jit``)."""
    root = jax_cache.root()
    return None if root is None or jax.config.jax_disable_jit else root / "exported"


@functools.cache
def _source_fingerprint() -> str:
    """SHA-256 of the versions and the source files that the exported functions are built from."""
    import inference
    import zoo

    digest = hashlib.sha256()
    digest.update(sys.version.encode())
    for dist in ("jax", "jaxlib", "numpyro", "funsor"):
        try:
            digest.update(f"{dist}={importlib.metadata.version(dist)}\n".encode())
        except importlib.metadata.PackageNotFoundError:
            digest.update(f"{dist} missing\n".encode())
    for package in (zoo, inference):
        root = Path(package.__file__).parent
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _settings() -> str:
    """JAX's settings and NumPyro's validation switch: what else a trace may depend on."""
    import numpyro.distributions.distribution as distribution

    # The values in effect here, context managers (``jax.default_matmul_precision``) included.
    values = sorted((k, repr(getattr(jax.config, k, v))) for k, v in jax.config.values.items())
    return repr((values, distribution._VALIDATION_ENABLED))


_FORM = operator.attrgetter("shape", "dtype", "weak_type")


def signature(args) -> tuple:
    """The structure, shapes, dtypes and weak types of ``args``: what a compilation depends on.
    (Computed at every step: JAX arrays take the fast path.)"""
    leaves, treedef = jax.tree_util.tree_flatten(args)
    try:
        return treedef, tuple(map(_FORM, leaves))
    except AttributeError:  # a numpy array or a Python scalar among them
        return treedef, tuple(
            (x.shape, x.dtype, getattr(x, "weak_type", False))
            if hasattr(x, "dtype")
            else (type(x).__name__,)  # a Python scalar: weakly typed
            for x in leaves
        )


def export_platform(device_platform: str) -> str:
    """``jax.export``'s name for a device's platform. JAX calls an NVIDIA or AMD device's
    platform ``"gpu"``, while an exported module names the one it was lowered for (``"cuda"`` or
    ``"rocm"``) and refuses to run under the alias."""
    if device_platform != "gpu":
        return device_platform
    for name in ("cuda", "rocm"):
        try:
            jax.devices(name)
        except RuntimeError:  # no such backend in this process
            continue
        return name
    return device_platform


def file_for(name: str, key: str, args, platform: str, folder: Path) -> Path:
    """The file in ``folder`` of function ``name`` under ``key`` for arguments like ``args`` on
    ``platform``."""
    digest = hashlib.sha256()
    for part in (key, repr(signature(args)), platform, _settings(), _source_fingerprint()):
        digest.update(part.encode())
        digest.update(b"\0")
    return folder / f"{name}-{digest.hexdigest()[:40]}.jaxexport"


def read(path: Path):
    """The ``jax.export.Exported`` kept in ``path``; None if there is none or it is damaged."""
    if not path.is_file():  # missing, or a FIFO (whose read would wait forever) or a folder
        return None
    try:
        content = path.read_bytes()
    except OSError:
        return None
    head = len(_MAGIC) + _DIGEST_BYTES
    body = content[head:]
    if (
        content[: len(_MAGIC)] != _MAGIC
        or hashlib.sha256(body).digest() != content[len(_MAGIC) : head]
    ):
        return None
    try:
        return jax.export.deserialize(bytearray(body))
    except Exception:  # a module of another JAX that passed the version check: compile anew
        return None


def write(path: Path, exported) -> bool:
    """Keep ``exported`` in ``path`` (atomically); False if it cannot be serialized or written
    (a pytree JAX cannot serialize, a read-only cache): the caller then only loses the reuse."""
    try:
        body = bytes(exported.serialize())
    except Exception:
        return False
    content = _MAGIC + hashlib.sha256(body).digest() + body
    try:
        atomic_write(path, lambda f: f.write(content))
    except OSError as error:
        warnings.warn(
            f"Could not keep a compiled function in {path.parent} ({error}); later processes "
            "will compile it again. Set ZOO_JAX_CACHE=0 to stop trying.",
            RuntimeWarning,
            stacklevel=3,
        )
        return False
    return True


class PersistentFunction:
    """``jax.jit(fn)``, whose trace is kept on disk when ``key`` is given.

    Called with arguments of a signature it has not seen in this process, it loads the exported
    function of that signature from disk, or exports ``fn`` (one trace and lowering, as
    ``jax.jit`` would do) and writes it there when ``keep()`` says the trace may be reused
    (``keep`` is asked after the trace: a trace that baked values of this call into the
    computation must not be kept). Either way the call then runs the exported module, compiled
    once by ``jax.jit`` (and by JAX's persistent cache, across processes), so a process that
    loads it computes what the process that exported it did.

    Without a key, or when exporting fails (an operation with no stable serialized form), it is
    plain ``jax.jit(fn)``. Arguments and results must be pytrees of arrays in tuples, lists,
    dicts and None for the trace to be written; other results are used in this process only.
    """

    def __init__(
        self,
        fn: Callable,
        name: str,
        key: str | None,
        device=None,
        keep: Callable[[], bool] = lambda: True,
    ):
        self.fn, self.name, self.key, self.keep = fn, name, key, keep
        self.platform = None if device is None else export_platform(device.platform)
        self._jitted = jax.jit(fn)
        self._calls: dict = {}
        self.loaded = self.exported = 0  # signatures loaded from disk, and exported here

    def __call__(self, *args):
        if self.key is None or self.platform is None:
            return self._jitted(*args)
        sig = signature(args)
        call = self._calls.get(sig)
        if call is not None:
            return call(*args)
        call = self._load_or_export(args)
        if call is not self._jitted:
            try:
                result = call(*args)
            except Exception as error:
                # A kept module that cannot run here (lowered for another platform, or one
                # whose contents do not fit its key): the cache may only save time, never
                # fail a fit. A genuine error of ``fn`` is raised again by the plain call.
                warnings.warn(
                    f"A compiled function kept on disk ({self.name}) could not run here "
                    f"({type(error).__name__}: {str(error).splitlines()[0] if str(error) else ''}"
                    "); tracing it again instead.",
                    RuntimeWarning,
                    stacklevel=2,
                )
            else:
                self._calls[sig] = call
                return result
            call = self._jitted
        self._calls[sig] = call
        return call(*args)

    def _load_or_export(self, args) -> Callable:
        folder = directory()
        if folder is None:
            return self._jitted
        path = file_for(self.name, self.key, args, self.platform, folder)
        exported = read(path)
        if exported is not None:
            self.loaded += 1
            return jax.jit(exported.call)
        try:
            exported = jax.export.export(self._jitted, platforms=[self.platform])(*args)
        except Exception:
            # Not exportable (a custom call with no stability guarantee, say): compile it as
            # usual; a genuine error of ``fn`` is raised again by that call.
            return self._jitted
        self.exported += 1
        if self.keep() and write(path, exported):
            # Run what a later process will load: the same module, so that it compiles to the
            # same executable and JAX's cache has it.
            exported = read(path) or exported
        return jax.jit(exported.call)
