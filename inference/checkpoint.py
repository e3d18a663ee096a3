"""Atomic, pickle-free files: a zip of ``.npy`` arrays plus one JSON header.

Loading never runs code from the file: arrays are read with ``allow_pickle=False`` and the header is
plain JSON.
"""

from __future__ import annotations

import io
import json
import os
import tempfile
import zipfile

import numpy as np

FORMAT = "ppl-zoo/1"
_HEADER = "__header__"


class CheckpointError(ValueError):
    """A checkpoint or saved fit that cannot be read, or that belongs to another run."""


def save(path, header: dict, arrays: dict[str, np.ndarray]) -> None:
    """Write ``header`` (JSON-able) and ``arrays`` to ``path`` atomically.

    The file is written next to its destination and renamed over it, so an interrupted save leaves
    the previous file intact.
    """
    path = os.fspath(path)
    payload = {_HEADER: np.frombuffer(json.dumps({"format": FORMAT, **header}).encode(), np.uint8)}
    for key, value in arrays.items():
        value = np.asarray(value)
        if value.dtype == object:
            raise TypeError(f"Cannot save {key!r}: object arrays would need pickle.")
        payload[key] = value
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=".zoo")
    try:
        with os.fdopen(fd, "wb") as f:
            np.savez(f, **payload)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.remove(tmp)
        raise


def load(path) -> tuple[dict, dict[str, np.ndarray]]:
    """Read a file written by :func:`save`; a damaged file raises :class:`CheckpointError`."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"No checkpoint or saved fit at {path!r}.")
    try:
        with open(path, "rb") as f:
            blob = f.read()
        with np.load(io.BytesIO(blob), allow_pickle=False) as npz:
            arrays = {key: npz[key] for key in npz.files}
        header = json.loads(arrays.pop(_HEADER).tobytes().decode())
    except (zipfile.BadZipFile, KeyError, ValueError, OSError, EOFError) as err:
        raise CheckpointError(
            f"{path!r} is not a readable zoo file (corrupt or truncated?): {err}"
        ) from err
    if header.get("format") != FORMAT:
        raise CheckpointError(f"{path!r} has format {header.get('format')!r}; expected {FORMAT!r}.")
    return header, arrays
