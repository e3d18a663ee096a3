"""Atomic file writes, shared by the dataset cache and the inference layer's checkpoints."""

from __future__ import annotations

import os
import tempfile


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path, write, *, durable: bool = False) -> None:
    """Write a file by ``write(binary_file)`` next to ``path`` and rename it over ``path``.

    An interrupted or failed write leaves the previous file intact and no temporary file behind.
    The file gets the permissions a plain ``open(path, "wb")`` would give (``mkstemp`` makes it
    private to its owner). With ``durable=True`` the data and the rename are flushed to disk, so
    a power loss right after cannot leave a checkpoint half written or the old one in place.
    """
    path = os.fspath(path)
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-" + os.path.basename(path) + ".")
    try:
        with os.fdopen(fd, "wb") as f:
            write(f)
            if durable:
                f.flush()
                os.fsync(f.fileno())
        os.chmod(tmp, 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise
    if durable and hasattr(os, "O_DIRECTORY"):  # POSIX: make the rename itself durable
        dir_fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
