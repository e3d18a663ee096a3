"""Where NumPyro fits keep their compiled functions between processes, and whether they do.

``ZOO_JAX_CACHE`` decides: unset, the per-user cache ``~/.cache/ppl-zoo``; ``0`` (or ``off``,
``false``, ``no``), nowhere; any other value, that directory. JAX's persistent compilation cache
(XLA's executables) goes in its ``jax`` folder, unless a directory was already set for JAX
(``JAX_COMPILATION_CACHE_DIR``); the traced functions (``inference.backends.exported``) go in
its ``exported`` folder.
"""

from __future__ import annotations

import os
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
