"""Atomic, pickle-free files: a zip of ``.npy`` arrays plus one JSON header.

Loading never runs code from the file: arrays are read without pickle and the header is plain
JSON. What a load reads is capped by the file's own size: the arrays of a file this project wrote
are stored uncompressed, so a member that would expand far beyond it (a zip bomb), or an array
header that declares more bytes than the member holds, is refused before memory is set aside.
"""

from __future__ import annotations

import json
import math
import os
import zipfile

import numpy as np

from zoo.files import atomic_write

FORMAT = "ppl-zoo/1"
_HEADER = "__header__"
_SUFFIX = ".npy"

#: A load reads at most this many times the file's size, plus :data:`EXPANSION_SLACK` bytes.
MAX_EXPANSION = 2
EXPANSION_SLACK = 1 << 20


class CheckpointError(ValueError):
    """A checkpoint or saved fit that cannot be read, or that belongs to another run.

    Raised by :func:`inference.load` for a file that is not a saved fit (or is damaged), and by
    :func:`inference.fit` for ``checkpoint=`` naming an existing file that is not a checkpoint
    (never overwritten) or, on ``resume=True``, a checkpoint of another run. A ``ValueError``;
    :class:`~inference.CheckpointInUseError` is one too.

    Parameters
    ----------
    message : str
        Which file, and what is wrong with it.

    Examples
    --------
    >>> import os, tempfile
    >>> import inference
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "notes.txt")
    ...     with open(path, "w") as f:
    ...         _ = f.write("not a fit")
    ...     try:
    ...         inference.load(path)
    ...     except inference.CheckpointError as err:
    ...         print(err)
    '...notes.txt' is not a zoo file, or is corrupt or truncated (no readable zip archive: ...).
    """


def _plain(value):
    """JSON for the numpy scalars a header may hold (an option given as ``np.int64(50)``)."""
    if isinstance(value, np.generic):
        return value.item()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


def save(path, header: dict, arrays: dict[str, np.ndarray]) -> None:
    """Write ``header`` (JSON-able) and ``arrays`` to ``path`` atomically and durably.

    The file is written next to its destination and renamed over it, so an interrupted save leaves
    the previous file intact. The destination's directory must exist.
    """
    header = {**header, "arrays": _manifest(arrays)}
    text = json.dumps({"format": FORMAT, **header}, default=_plain)
    payload = {_HEADER: np.frombuffer(text.encode(), np.uint8)}
    for key, value in arrays.items():
        value = np.asarray(value)
        if value.dtype == object:
            raise TypeError(f"Cannot save {key!r}: object arrays would need pickle.")
        payload[key] = value
    atomic_write(path, lambda f: np.savez(f, **payload), durable=True, make_parents=False)


def _read_member(zf: zipfile.ZipFile, info: zipfile.ZipInfo) -> np.ndarray:
    """One ``.npy`` member, its declared shape checked against the bytes it holds before any
    memory is set aside for it (a crafted header may declare terabytes)."""
    name = info.filename
    with zf.open(info) as f:
        version = np.lib.format.read_magic(f)
        if version == (1, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
        elif version == (2, 0):
            shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
        else:
            raise CheckpointError(f"member {name!r} has .npy format version {version}.")
        if dtype.hasobject:
            raise CheckpointError(f"member {name!r} holds Python objects, which need pickle.")
        size = dtype.itemsize * math.prod(shape)
        held = info.file_size - f.tell()
        if size != held:
            raise CheckpointError(
                f"member {name!r} declares an array of shape {shape} and dtype {dtype} "
                f"({size} bytes) but holds {held} bytes."
            )
        data = bytearray(f.read(size))  # a bytearray: the array is writable, as np.load's are
    if len(data) != size:
        raise CheckpointError(f"member {name!r} is truncated.")
    return np.frombuffer(data, dtype).reshape(shape, order="F" if fortran else "C")


def _read(path: str, names=None) -> dict[str, np.ndarray]:
    """The arrays of the zip at ``path`` (only those in ``names``, when given)."""
    size = os.path.getsize(path)
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
        if names is not None:
            infos = [i for i in infos if i.filename.removesuffix(_SUFFIX) in names]
        declared = sum(i.file_size for i in infos)
        if declared > MAX_EXPANSION * size + EXPANSION_SLACK:
            raise CheckpointError(
                f"its members would expand to {declared} bytes from a file of {size}: more than "
                "a file of this project holds (this project stores arrays uncompressed)."
            )
        arrays = {}
        for info in infos:
            if not info.filename.endswith(_SUFFIX):
                raise CheckpointError(f"member {info.filename!r} is not a .npy array.")
            arrays[info.filename.removesuffix(_SUFFIX)] = _read_member(zf, info)
    return arrays


def _header(arrays: dict) -> dict:
    if _HEADER not in arrays:
        raise CheckpointError("it is a zip archive without a zoo header.")
    header = json.loads(arrays.pop(_HEADER).tobytes().decode())
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        found = header.get("format") if isinstance(header, dict) else header
        raise CheckpointError(f"it has format {found!r}; expected {FORMAT!r}.")
    return header


def _checked_read(path, names=None) -> tuple[dict, dict[str, np.ndarray]]:
    path = os.fspath(path)
    if not os.path.exists(path):
        raise FileNotFoundError(f"No checkpoint or saved fit at {path!r}.")
    if os.path.isdir(path):
        raise CheckpointError(f"{path!r} is a directory, not a checkpoint or saved fit.")
    if not os.path.isfile(path):  # opening a FIFO would wait for a writer, forever
        raise CheckpointError(
            f"{path!r} is not a regular file (a FIFO, device or socket), not a checkpoint or "
            "saved fit."
        )
    try:
        arrays = _read(path, names)
        return _header(arrays), arrays
    except CheckpointError as err:  # said of a member or the header, without the path
        raise CheckpointError(f"{path!r} is not a readable zoo file: {err}") from err
    except zipfile.BadZipFile as err:
        raise CheckpointError(
            f"{path!r} is not a zoo file, or is corrupt or truncated (no readable zip archive: "
            f"{err})."
        ) from err
    except (
        KeyError,
        ValueError,
        OSError,
        EOFError,
        RecursionError,
        NotImplementedError,  # a zip member compressed by a method zipfile lacks
        RuntimeError,  # a member flagged as encrypted
        OverflowError,
    ) as err:
        raise CheckpointError(
            f"{path!r} is not a readable zoo file (corrupt or truncated?): "
            f"{type(err).__name__}: {err}"
        ) from err


def load(path) -> tuple[dict, dict[str, np.ndarray]]:
    """Read a file written by :func:`save`; a damaged file raises :class:`CheckpointError`."""
    header, arrays = _checked_read(path)
    _check_manifest(path, header.get("arrays"), arrays)
    return header, arrays


def _manifest(arrays: dict[str, np.ndarray]) -> dict:
    """Each array's shape and dtype, which :func:`save` records in the header and :func:`load`
    checks: a member lost to a damaged zip directory (which zipfile can skip without a word) or
    replaced is named, rather than missed steps later."""
    return {k: [list(np.shape(v)), np.asarray(v).dtype.str] for k, v in arrays.items()}


def _check_manifest(path, recorded: dict | None, arrays: dict) -> None:
    """Every array the file was written with is there, with its shape and dtype, and no other
    (files written before the manifest was recorded are read as they are)."""
    if recorded is None:
        return
    if not isinstance(recorded, dict):
        raise CheckpointError(f"{path!r}: the header's array manifest is damaged.")
    for key in sorted(set(recorded) - set(arrays)):
        raise CheckpointError(f"{path!r} lacks the member {key!r} it was saved with.")
    for key in sorted(set(arrays) - set(recorded)):
        raise CheckpointError(f"{path!r} holds a member {key!r} it was not saved with.")
    for key, entry in recorded.items():
        value = arrays[key]
        try:
            shape, dtype = tuple(entry[0]), np.dtype(entry[1])
        except (TypeError, ValueError, IndexError) as err:
            raise CheckpointError(f"{path!r}: the manifest entry of {key!r} is damaged.") from err
        if value.shape != shape or value.dtype != dtype:
            raise CheckpointError(
                f"{path!r}: member {key!r} has shape {value.shape} and dtype {value.dtype}; it "
                f"was saved with shape {shape} and dtype {dtype}."
            )


def read_header(path) -> dict:
    """The JSON header of a file written by :func:`save`, without reading its arrays."""
    return _checked_read(path, names={_HEADER})[0]
