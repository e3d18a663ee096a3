"""Atomic, pickle-free files: a zip of ``.npy`` arrays plus one JSON header.

Loading never runs code from the file: arrays are read with ``allow_pickle=False`` and the header is
plain JSON.
"""

from __future__ import annotations

import io
import json
import os
import zipfile

import numpy as np

from zoo.files import atomic_write

FORMAT = "ppl-zoo/1"
_HEADER = "__header__"


class CheckpointError(ValueError):
    """A checkpoint or saved fit that cannot be read, or that belongs to another run."""


def _plain(value):
    """JSON for the numpy scalars a header may hold (an option given as ``np.int64(50)``)."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def save(path, header: dict, arrays: dict[str, np.ndarray]) -> None:
    """Write ``header`` (JSON-able) and ``arrays`` to ``path`` atomically and durably.

    The file is written next to its destination and renamed over it, so an interrupted save leaves
    the previous file intact.
    """
    text = json.dumps({"format": FORMAT, **header}, default=_plain)
    payload = {_HEADER: np.frombuffer(text.encode(), np.uint8)}
    for key, value in arrays.items():
        value = np.asarray(value)
        if value.dtype == object:
            raise TypeError(f"Cannot save {key!r}: object arrays would need pickle.")
        payload[key] = value
    atomic_write(path, lambda f: np.savez(f, **payload), durable=True)


def load(path) -> tuple[dict, dict[str, np.ndarray]]:
    """Read a file written by :func:`save`; a damaged file raises :class:`CheckpointError`."""
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"No checkpoint or saved fit at {path!r}.")
    try:
        with open(path, "rb") as f:
            blob = io.BytesIO(f.read())
        # Checked first: np.load would read anything else as a lone array or a pickle, and its
        # message for the latter suggests allow_pickle=True.
        if not zipfile.is_zipfile(blob):
            raise CheckpointError(
                f"{path!r} is not a zoo file, or is corrupt or truncated (no readable zip archive)."
            )
        with np.load(blob, allow_pickle=False) as npz:
            arrays = {key: npz[key] for key in npz.files}
        header = json.loads(arrays.pop(_HEADER).tobytes().decode())
    except CheckpointError:
        raise
    except (zipfile.BadZipFile, KeyError, ValueError, OSError, EOFError, RecursionError) as err:
        raise CheckpointError(
            f"{path!r} is not a readable zoo file (corrupt or truncated?): {err}"
        ) from err
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        found = header.get("format") if isinstance(header, dict) else header
        raise CheckpointError(f"{path!r} has format {found!r}; expected {FORMAT!r}.")
    return header, arrays
