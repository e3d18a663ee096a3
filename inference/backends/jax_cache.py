"""Where NumPyro fits keep their compiled functions between processes, and whether they do.

``ZOO_JAX_CACHE`` decides: unset, the per-user cache ``~/.cache/ppl-zoo``; ``0`` (or ``off``,
``false``, ``no``), nowhere; any other value, that directory. JAX's persistent compilation cache
(XLA's executables) goes in its ``jax`` folder, unless a directory was already set for JAX
(``JAX_COMPILATION_CACHE_DIR``); the traced functions (``inference.backends.exported``) go in
its ``exported`` folder.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path

import jax

#: The cache when ``ZOO_JAX_CACHE`` is unset.
DEFAULT_ROOT = Path("~/.cache/ppl-zoo")


def root() -> Path | None:
    """The cache directory, or None when ``ZOO_JAX_CACHE`` turns the caches off."""
    setting = os.environ.get("ZOO_JAX_CACHE", "").strip()
    if setting.lower() in ("0", "off", "false", "no"):
        return None
    return Path(setting or DEFAULT_ROOT).expanduser()


def enable_persistent_cache() -> str | None:
    """Turn on JAX's persistent compilation cache in ``root() / "jax"`` and return the
    directory in use (None: off). A directory already set for JAX is kept. Every compilation
    is kept, however short: a fit's set-up is many small ones."""
    directory = root()
    if directory is None:
        return jax.config.jax_compilation_cache_dir
    if not jax.config.jax_compilation_cache_dir:
        jax.config.update("jax_compilation_cache_dir", str(directory / "jax"))
        jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.0)
    return jax.config.jax_compilation_cache_dir


@contextlib.contextmanager
def empty_cache():
    """A new, empty cache (``ZOO_JAX_CACHE``) while the block runs, removed after: fits in it
    compile as a first fit does, whatever earlier runs left in the user's cache, which is
    neither read nor changed (the benchmarks that time compilation run in one).

    The zoo's NumPyro backend takes JAX's cache folder when it is first imported, and JAX reads
    ``JAX_COMPILATION_CACHE_DIR`` when it is: enter this before either (in a process that has
    fitted already, JAX keeps its folder; the zoo's traced functions still go to the new one).
    """
    saved = {name: os.environ.get(name) for name in ("ZOO_JAX_CACHE", "JAX_COMPILATION_CACHE_DIR")}
    with tempfile.TemporaryDirectory(prefix="zoo-compile-cache-") as folder:
        os.environ["ZOO_JAX_CACHE"] = folder
        os.environ.pop("JAX_COMPILATION_CACHE_DIR", None)
        try:
            yield Path(folder)
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value
