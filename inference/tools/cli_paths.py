"""The files the shell reads and writes, checked before any work is done: ``--data`` read
(never unpickled), ``--save`` and ``--plot`` paths whose folder exists and can be written, so
that no finished run is lost to a path, and a ``--save`` that is none of the files the command
reads or its checkpoint."""

from __future__ import annotations

import math
import os
import zipfile
import zlib

import numpy as np
from numpy.lib import format as npy_format

from zoo.files import unwritable_reason

_NPY_MAGIC = b"\x93NUMPY"


def load_data(path, spec, seed, flag="--data"):
    """``--data`` (or ``--test-data``, named by ``flag``): a .npz of the model's data keys, or a
    .npy array for the one array the model takes on its own (its only key, or the one key
    its other, optional, keys may be left out beside); without a path,
    the model's built-in data. Which keys may be left out is the model's own validation's call
    (``spec.validate_data``). Arrays holding Python objects are never unpickled."""
    if path is None:
        if spec.make_data is None:
            raise ValueError(f"Model {spec.name!r} has no built-in data; pass {flag}.")
        return spec.make_data(np.random.default_rng(seed))
    if not os.path.exists(path):
        raise ValueError(f"argument {flag}: no such file {path!r}.")
    if os.path.isdir(path):
        raise ValueError(f"argument {flag}: {path!r} is a directory, not a data file.")
    if not os.path.isfile(path):  # opening a FIFO would wait for a writer, forever
        raise ValueError(
            f"argument {flag}: {path!r} is not a regular file (a FIFO, device or socket)."
        )
    keys = sorted(spec.data)
    extension = os.path.splitext(path)[1].lower()  # X.NPY as x.npy
    if extension == ".npy":
        array = _read_npy(path, flag)
        data = {_npy_key(spec, array, path, flag): array}
    elif extension == ".npz":
        data = _read_npz(path, flag)
    else:
        raise ValueError(
            f"argument {flag}: for model {spec.name!r}, give a .npz file holding the arrays "
            + (
                f"{keys} or a .npy array for {keys[0]!r}"
                if len(keys) == 1
                else f"by name (from {keys}), or a .npy array of the one it takes on its own"
            )
            + f"; got {path!r}."
        )
    missing, extra = sorted(set(keys) - set(data)), sorted(set(data) - set(keys))
    if extra:
        raise ValueError(
            f"argument {flag}: {path!r} holds the arrays {sorted(data)}; model {spec.name!r} "
            f"takes {keys} (missing {missing}, unexpected {extra})."
        )
    for key in sorted(data):
        want = spec.data[key].ndim
        if data[key].ndim != want:
            doc = f" ({spec.data[key].doc})" if spec.data[key].doc else ""
            raise ValueError(
                f"argument {flag}: the array {key!r} in {path!r} has shape {data[key].shape}; "
                f"model {spec.name!r} takes {want} dimensions{doc}."
            )
    if missing:  # optional keys may be left out: the model's validation says which
        refusal = _refusal(spec, data)
        if refusal is not None:
            raise ValueError(
                f"argument {flag}: model {spec.name!r} does not take the arrays "
                f"{sorted(data)} of {path!r} as its data: {refusal}"
            )
    return data


def _refusal(spec, data) -> str | None:
    """Why the model's own validation refuses ``data``, or None if it takes them."""
    try:
        spec.validate_data(data)
    except (ValueError, TypeError) as err:
        return str(err)
    return None


def _npy_key(spec, array: np.ndarray, path: str, flag: str) -> str:
    """The data key a .npy ``array`` stands for: the model's only key, or else the one key the
    model's validation takes on its own with this array (the others being optional)."""
    keys = sorted(spec.data)
    if len(keys) == 1:
        return keys[0]  # its shape is checked as a .npz member's is
    alone = [key for key in keys if _refusal(spec, {key: array}) is None]
    if len(alone) == 1:
        return alone[0]
    described = ", ".join(
        f"{key!r} ({spec.data[key].doc})" if spec.data[key].doc else repr(key) for key in keys
    )
    same_rank = [key for key in keys if spec.data[key].ndim == array.ndim]
    reason = (
        f" As {same_rank[0]!r}: {_refusal(spec, {same_rank[0]: array})}"
        if len(same_rank) == 1 and not alone
        else ""
    )
    raise ValueError(
        f"argument {flag}: model {spec.name!r} takes the arrays {described}, and the .npy "
        f"array {path!r} (shape {array.shape}) is not its data on its own; give a .npz file "
        f"holding the arrays by name.{reason}"
    )


def _unpickled(message: str) -> str:
    # numpy's advice for object arrays is to load them with pickle, which --data never does.
    if "pickle" in message:
        return "it holds Python objects, which are never unpickled; save numeric arrays"
    return message


def _read_npy(path: str, flag: str = "--data") -> np.ndarray:
    try:
        with open(path, "rb") as f:
            if f.read(len(_NPY_MAGIC)) == _NPY_MAGIC:
                f.seek(0)
                _check_declared_size(f, os.fstat(f.fileno()).st_size)
                f.seek(0)
                return np.load(f, allow_pickle=False)
    except (ValueError, EOFError) as err:
        raise ValueError(
            f"argument {flag}: {path!r} is not a readable .npy array: {_unpickled(str(err))}."
        ) from None
    except OSError as err:
        raise ValueError(f"argument {flag}: cannot read {path!r}: {err.strerror}.") from None
    raise ValueError(
        f"argument {flag}: {path!r} is not a .npy array (it does not start with the header "
        "numpy.save writes)."
    )


def _read_npz(path: str, flag: str = "--data") -> dict[str, np.ndarray]:
    data = None
    try:
        with open(path, "rb") as f:
            if zipfile.is_zipfile(f):
                f.seek(0)
                _check_member_sizes(f)
                f.seek(0)
                with np.load(f, allow_pickle=False) as arrays:
                    data = {key: arrays[key] for key in arrays.files}
    # zlib.error: a compressed member whose bytes were damaged.
    except (ValueError, EOFError, zipfile.BadZipFile, zlib.error) as err:
        raise ValueError(
            f"argument {flag}: {path!r} is not a readable .npz archive: {_unpickled(str(err))}."
        ) from None
    except OSError as err:
        raise ValueError(f"argument {flag}: cannot read {path!r}: {err.strerror}.") from None
    if data is None:
        raise ValueError(
            f"argument {flag}: {path!r} is not a .npz archive (not a zip file, as numpy.savez "
            "writes)."
        )
    strays = [key for key, value in data.items() if not isinstance(value, np.ndarray)]
    if strays:  # numpy reads a member that is not a .npy array as its bytes
        raise ValueError(
            f"argument {flag}: {path!r} is not a readable .npz archive: its members {strays} "
            "are not .npy arrays."
        )
    return data


def _check_declared_size(f, size: int, member: str | None = None) -> None:
    """Refuse a .npy array whose header declares more data than the ``size`` bytes of the file
    (or the archive's ``member``) ``f`` holds, from the header alone: numpy allocates the declared array
    before it reads a byte of it, so a damaged or forged header of a small file would ask for
    terabytes. ``f`` is at the start of the array; a version of the format numpy does not know,
    or an array of Python objects, is left for ``np.load`` to refuse."""
    version = npy_format.read_magic(f)
    if version == (1, 0):
        shape, _, dtype = npy_format.read_array_header_1_0(f)
    elif version in ((2, 0), (3, 0)):
        # Version 3 differs from 2 only in its header's encoding (UTF-8, for field names, not
        # latin-1), which changes no byte count.
        shape, _, dtype = npy_format.read_array_header_2_0(f)
    else:
        return
    if dtype.hasobject:
        return
    declared, holds = math.prod(shape) * dtype.itemsize, size - f.tell()
    if declared > holds:
        header, holder = (
            (f"the header of its member {member!r}", "the member")
            if member
            else ("its header", "the file")
        )
        raise ValueError(
            f"{header} declares {declared} bytes of data (shape {shape} of {dtype}), but "
            f"{holder} holds only {holds} after it: it is truncated or damaged"
        )


def _check_member_sizes(f) -> None:
    """:func:`_check_declared_size` for each .npy array in the zip archive ``f``, against the
    size the archive records for it (numpy reads a member not named ``*.npy``, or without the
    .npy header, as its bytes, which the caller refuses)."""
    with zipfile.ZipFile(f) as archive:
        for member in archive.infolist():
            if not member.filename.endswith(".npy"):
                continue
            with archive.open(member) as stream:
                if stream.read(len(_NPY_MAGIC)) != _NPY_MAGIC:
                    continue
                stream.seek(0)
                key = member.filename[: -len(".npy")]
                _check_declared_size(stream, member.file_size, key)


def check_new_file(flag: str, path: str, inputs=()) -> None:
    """A file can be written at ``path`` (its folder exists and can be written, and nothing but
    a regular file is there) and it is none of the command's ``inputs`` (paths or None), under
    any spelling or link; no folder is created."""
    reason = unwritable_reason(path)
    if reason:
        raise ValueError(f"argument {flag}: {path!r}: {reason}.")
    for given in inputs:
        if given is not None and same_file(path, given):
            raise ValueError(
                f"argument {flag}: {path!r} is the file this command reads ({given!r}); "
                "writing there would replace it. Name another file."
            )


def same_file(path: str, other: str) -> bool:
    """Whether ``path`` and ``other`` name one file, under any spelling, symbolic link or hard
    link, whether or not it exists yet (a checkpoint a fit has still to write)."""
    if os.path.exists(path) and os.path.exists(other):
        return os.path.samefile(path, other)
    real = os.path.normcase(os.path.realpath(path))  # follows links, even to no file yet
    return real == os.path.normcase(os.path.realpath(other))


def save_path(path: str, inputs=(), checkpoint=None) -> str:
    """``--save``: a file, new or replaced (the fit is written next to it and renamed over it,
    so the folder must be writable and the path, if it exists, a regular file that is not one of
    the command's ``inputs``, nor the ``checkpoint`` the fit writes)."""
    if not path:
        raise ValueError("argument --save: give a file name, e.g. fit.zoo.")
    if os.path.isdir(path):
        raise ValueError(
            f"argument --save: {path!r} is a directory; give a file path such as "
            f"{os.path.join(path, 'fit.zoo')!r}."
        )
    check_new_file("--save", path, inputs)
    # The fit is saved after its last checkpoint: over it, the run could no longer be resumed.
    if checkpoint is not None and same_file(path, checkpoint):
        raise ValueError(
            f"argument --save: {path!r} is the file --checkpoint names ({checkpoint!r}); the "
            "saved fit would replace the checkpoint, and the run could not be resumed. Name "
            "another file."
        )
    return path


def plot_path(path: str, model: str) -> tuple[str, str]:
    """``--plot``: ``(the file, its format)``. An existing directory gets ``MODEL-compare.png``
    in it; a name without an extension is written as PNG under that very name. (An image's
    extension is never a data file's, so it cannot name ``--data``.) A format matplotlib lists
    but cannot write here (PGF without a LaTeX program) is refused now, not after the fits."""
    from matplotlib.backend_bases import FigureCanvasBase

    if not path:
        raise ValueError("argument --plot: give a file name, e.g. curves.png.")
    if os.path.isdir(path):
        path = os.path.join(path, f"{model}-compare.png")
        if os.path.isdir(path):
            raise ValueError(f"argument --plot: {path!r} is a directory.")
    formats = FigureCanvasBase.get_supported_filetypes()
    extension = os.path.splitext(path)[1][1:].lower()
    if extension and extension not in formats:
        raise ValueError(
            f"argument --plot: cannot write a '.{extension}' plot; give a file ending in one of "
            f"{', '.join('.' + f for f in sorted(formats))} (got {path!r})."
        )
    fmt = extension or "png"
    reason = unwritable_format_reason(fmt)
    if reason:
        raise ValueError(
            f"argument --plot: cannot write a '.{fmt}' plot here: {reason}. Give a file ending "
            f"in another format, such as .png, .pdf or .svg (got {path!r})."
        )
    check_new_file("--plot", path)
    return path, fmt


def unwritable_format_reason(fmt: str) -> str | None:
    """Why matplotlib cannot write a figure in format ``fmt`` on this machine (PGF needs a
    LaTeX program, and a format may need another external one), or None: a tiny figure is
    written to memory in that format, which costs milliseconds and tries the very writer the
    plot will use."""
    import io

    from matplotlib.figure import Figure

    figure = Figure(figsize=(1, 1))
    axes = figure.add_subplot()
    axes.plot([0, 1], [0, 1], label="a")
    axes.set_title("a")
    try:
        figure.savefig(io.BytesIO(), format=fmt)
    # Each writer raises what it will: RuntimeError for a missing LaTeX, OSError for a missing
    # program, ValueError for a setting it refuses.
    except Exception as err:
        return one_line(err)
    return None


def one_line(err: BaseException) -> str:
    """An exception's message on one line, without a trailing full stop."""
    return " ".join(str(err).split()).rstrip(".") or type(err).__name__


def reason_writing(err: BaseException, path) -> str:
    """Why writing ``path`` failed, for a message that names ``path`` already: an OS error about
    that very file gives its reason alone (``No space left on device``), where its message would
    repeat the name; any other error, its message on one line."""
    filename = err.filename if isinstance(err, OSError) and err.strerror else None
    # A call on a file descriptor (os.stat(fd)) gives an int filename, which names no path.
    if isinstance(filename, str | bytes | os.PathLike) and os.fspath(filename) == os.fspath(path):
        return err.strerror
    return one_line(err)
