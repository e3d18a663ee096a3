"""Minibatch sources: data in memory, memory-mapped arrays and streams of minibatches.

``fit`` takes, besides a dict of in-memory arrays,

* a dict whose arrays are memory-mapped (``np.load(path, mmap_mode="r")`` or ``np.memmap``): each
  step gathers its rows (``inference.minibatch.PermutedBatches``: every row at most once per epoch, in an
  order computed from ``(seed, epoch)`` row by row, so a resumed run draws the same batches and
  no (N,) permutation is held) and only those rows are read and sent to the device. Pages of a
  mapping that a process touches count towards its resident memory (on this machine's kernel a
  touched row maps up to 2 MiB of its file), so rows are read from the file behind the map with
  ``os.pread`` (the page cache is not the process's memory); a mapping without a plain file
  behind it is read through the map in runs of rows, handing the pages back to the kernel
  (``madvise(MADV_DONTNEED)``) after each run. Peak memory stays flat however large the file.
* an iterable of minibatches (dicts of the model's data keys, or arrays for a model with one data
  key) with ``num_data=`` the size of the full data set, so the data plate scales each minibatch
  by ``num_data / rows``. One minibatch per step; a stream that runs out before ``num_steps`` is a
  :class:`StreamEndedError`. On ``resume=True`` pass the stream from its start again: the
  minibatches of the steps already taken are read and skipped, and a checkpoint records a
  digest of those its run read, so a stream that gives other minibatches is refused.

Data-dependent model defaults (e.g. the GMM's ``mean_prior`` and ``covariance_prior``) and the
initial responsibilities come from the first minibatch when the data are not in memory; pass the
priors explicitly to fix them. Every minibatch is checked: NaN or inf, or an integer field out of
its bounds (a label past ``num_classes``), is a :class:`DataError` that names the step and the
rows of the data set (of the array, or counted from the stream's first row).
"""

from __future__ import annotations

import hashlib
import mmap
import os
from collections.abc import Iterable, Mapping

import numpy as np

from inference.minibatch import EpochBatches, PermutedBatches

#: Bytes of pages read from a memory-mapped array after which they are handed back.
RELEASE_BYTES = 8 * 2**20
#: What one row read through a mapping may map: a faulting page brings its neighbours ("fault
#: around"), or its whole large folio of the page cache (measured: up to 2 MiB).
ROW_FOOTPRINT = 2 * 2**20


class DataError(ValueError):
    """A minibatch that cannot be used (NaN, wrong shape) or a stream that ended early.

    Data not held in memory (memory-mapped arrays, streams of minibatches) are checked one
    minibatch at a time, as each step reads it; the message names the step. A ``ValueError``;
    :class:`StreamEndedError` is one too.

    Parameters
    ----------
    message : str
        Which step, and what is wrong with its minibatch.

    Examples
    --------
    A stream whose second minibatch holds a NaN:

    >>> import numpy as np
    >>> import inference, zoo
    >>> x = zoo.get_model("gmm").make_data(np.random.default_rng(0), 40)["x"]
    >>> second = x[20:].copy()
    >>> second[3, 0] = np.nan
    >>> inference.fit(
    ...     "bayesian_gmm", iter([x[:20], second]), "svi", "pyro", num_data=40, num_steps=2,
    ...     K=2, progress=False,
    ... )
    Traceback (most recent call last):
    ...
    inference.streaming.DataError: The minibatch of step 2 is not valid: data['x'] contains NaN ...
    """


class StreamEndedError(DataError):
    """The stream of minibatches ended before ``num_steps``.

    With ``checkpoint=`` the last completed step was saved, and ``resume=True`` continues from
    it (pass the stream from its start again: the minibatches of the steps already taken are
    read and skipped). A :class:`DataError`.

    Parameters
    ----------
    message : str
        How many minibatches the stream gave, and what to do.

    Examples
    --------
    Two minibatches for five steps:

    >>> import numpy as np
    >>> import inference, zoo
    >>> x = zoo.get_model("gmm").make_data(np.random.default_rng(0), 40)["x"]
    >>> inference.fit(
    ...     "bayesian_gmm", iter([x[:20], x[20:]]), "svi", "pyro", num_data=40, num_steps=5,
    ...     K=2, progress=False,
    ... )
    Traceback (most recent call last):
    ...
    inference.streaming.StreamEndedError: The data stream ended after 2 minibatch(es): step 3 ...
    """


def is_array_like(data) -> bool:
    """Whether numpy reads ``data`` as one array (a pandas DataFrame or Series, a torch or JAX
    tensor, anything with ``__array__`` or the array interface): data in memory, however
    iterating it goes (over a DataFrame's column names, a tensor's rows)."""
    return hasattr(data, "__array__") or hasattr(data, "__array_interface__")


def is_out_of_core(data) -> bool:
    """Whether ``data`` is a stream or holds memory-mapped arrays (not read whole into memory)."""
    if isinstance(data, Mapping):
        return any(isinstance(v, np.memmap) for v in data.values())
    if isinstance(data, list | tuple):  # a list of minibatches (dicts or arrays), not of rows
        first = data[0] if data else None
        return isinstance(first, Mapping | np.ndarray) or (
            is_array_like(first) and getattr(first, "ndim", 0) >= 1  # torch or JAX arrays
        )
    return (
        isinstance(data, Iterable) and not isinstance(data, str | bytes) and not is_array_like(data)
    )


def _advise(array, option: str) -> None:
    mm = getattr(array, "_mmap", None)
    if mm is not None and hasattr(mm, "madvise") and hasattr(mmap, option):
        mm.madvise(getattr(mmap, option))


def _copy_on_write(array) -> bool:
    """Whether ``array`` is a copy-on-write map (``mmap_mode="c"``): its pages may hold the
    caller's edits, which never reach its file."""
    return getattr(array, "mode", None) == "c"


def release(array) -> None:
    """Hand the pages of a memory-mapped array back to the kernel (no-op for other arrays, and
    for a copy-on-write map, whose edits the kernel would drop for the file's contents)."""
    if not _copy_on_write(array):
        _advise(array, "MADV_DONTNEED")


def _checked(spec, batch, step: int, row_ids, config=None) -> dict[str, np.ndarray]:
    """The model's data contract (keys, ranks, dtypes, finite values) on one minibatch, and once
    the model's config is known its fields' bounds (a label past ``num_classes`` that only a
    later minibatch holds); messages name the rows of the user's data (``row_ids``), not the
    places in the minibatch."""
    try:
        out = spec.validate_data(batch, row_ids=row_ids)
        if config is not None:
            spec.check_bounds(out, config, row_ids=row_ids)
    except (TypeError, ValueError) as err:
        raise DataError(f"The minibatch of step {step + 1} is not valid: {err}") from err
    lengths = {key: len(value) for key, value in out.items()}
    if len(set(lengths.values())) > 1:  # row i of every array is data point i
        raise DataError(
            f"The minibatch of step {step + 1} holds arrays of different numbers of rows "
            f"{lengths}; each data point is one row of every array."
        )
    return out


def _file_rows(value):
    """(path, byte offset of row 0, row stride, bytes per row) of a memory-mapped array whose rows
    are contiguous runs of a plain file, else None. A copy-on-write map is None: what it holds
    may differ from the file."""
    mm, path = getattr(value, "_mmap", None), getattr(value, "filename", None)
    if mm is None or path is None or value.strides[0] <= 0 or value.dtype.hasobject:
        return None
    if _copy_on_write(value):
        return None
    row = value.dtype.itemsize * int(np.prod(value.shape[1:], dtype=np.int64))
    if value.ndim > 1 and not value[0].flags.c_contiguous:
        return None
    if not os.path.isfile(path):
        return None
    base = np.frombuffer(mm, dtype=np.uint8).ctypes.data  # where the mapping starts
    # np.memmap maps from its offset rounded down to the allocation granularity.
    start = value.offset - value.offset % mmap.ALLOCATIONGRANULARITY
    return path, start + (value.ctypes.data - base), value.strides[0], row


class ArraySource:
    """Minibatches of ``batch_size`` rows of arrays in memory or memory-mapped, by step number."""

    def __init__(self, spec, data: Mapping, batch_size, seed: int):
        lengths = {k: len(v) for k, v in data.items()}
        # The contract on one row: keys, ranks and dtypes, without reading the whole file.
        spec.validate_data({k: v[:1] for k, v in data.items()})
        if len(set(lengths.values())) != 1:
            raise ValueError(f"data arrays must have the same number of rows; got {lengths}.")
        self.spec, self.data = spec, dict(data)
        self.config = None  # the model's config, once prepared: its bounds are checked per batch
        self.num_data = next(iter(lengths.values()))
        if batch_size is None:
            if any(isinstance(v, np.memmap) for v in data.values()):
                raise ValueError(
                    "Memory-mapped data need batch_size= (the rows read per step); got None."
                )
            batch_size = self.num_data
        # Data in memory: the usual epoch order. Files: an order computed row by row, so no
        # (num_data,) permutation is held.
        kind = PermutedBatches if is_out_of_core(data) else EpochBatches
        self.batches = kind(self.num_data, batch_size, seed)
        self.batch_size = self.batches.batch_size
        for value in self.data.values():
            _advise(value, "MADV_RANDOM")  # no read-ahead around the rows a step reads

    def batch(self, step: int) -> dict[str, np.ndarray]:
        rows = self.batches.indices(step)
        batch = {k: self._gather(v, rows) for k, v in self.data.items()}
        return _checked(self.spec, batch, step, rows, self.config)

    def _gather(self, value, rows) -> np.ndarray:
        """``value[rows]``; from a mapped file by ``pread``, else in runs of rows whose pages are
        handed back after every ``RELEASE_BYTES``."""
        if not isinstance(value, np.memmap):
            return np.asarray(value[rows])
        located = _file_rows(value)
        if located is not None:
            path, first, stride, row_bytes = located
            fd = os.open(path, os.O_RDONLY)
            try:
                reads = (os.pread(fd, row_bytes, first + int(r) * stride) for r in rows)
                buf = bytearray().join(reads)  # writable: tensors may wrap it
            finally:
                os.close(fd)
            if len(buf) != len(rows) * row_bytes:
                raise DataError(f"{path!r} is shorter than its array header says (truncated?).")
            return np.frombuffer(buf, value.dtype).reshape((len(rows),) + value.shape[1:])
        out = np.empty((len(rows),) + value.shape[1:], dtype=value.dtype)
        per_row = max(ROW_FOOTPRINT, value.strides[0])
        chunk = max(1, RELEASE_BYTES // per_row)
        for start in range(0, len(rows), chunk):
            out[start : start + chunk] = value[rows[start : start + chunk]]
            release(value)
        return out

    def init_sample(self) -> dict[str, np.ndarray]:
        """The data the model's defaults and the initial responsibilities are computed from: all
        of it when in memory, else the first minibatch."""
        if is_out_of_core(self.data):
            return self.batch(0)
        return self.data

    def fingerprint_parts(self):
        """(name, array chunk) pairs that identify the data; files are read in chunks."""
        for key in sorted(self.data):
            value = self.data[key]
            yield key, str(value.shape)
            if not isinstance(value, np.memmap):
                yield key, np.ascontiguousarray(value)
                continue
            located = _file_rows(value)
            step = max(1, RELEASE_BYTES // max(1, value.strides[0]))
            for start in range(0, len(value), step):
                rows = np.arange(start, min(start + step, len(value)))
                if located is not None and located[2] == located[3]:  # contiguous rows: one read
                    path, first, stride, _ = located
                    with open(path, "rb") as f:
                        f.seek(first + start * stride)
                        yield key, np.frombuffer(f.read(len(rows) * stride), np.uint8)
                else:
                    yield key, self._gather(value, rows)


def listed_stream_note(spec, data) -> str:
    """For data given as a list or tuple, which is read as a stream of minibatches: how to pass
    data in memory instead (the tuple ``(x,)`` is a stream of one minibatch, not ``x``)."""
    if not isinstance(data, list | tuple):
        return ""
    example = ", ".join(f"{key!r}: np.asarray(...)" for key in sorted(spec.data))
    return (
        f" A {type(data).__name__} is read as a stream of minibatches, one per step. For data "
        f"in memory pass a dict mapping the model's keys to arrays, e.g. {{{example}}}."
    )


class StreamSource:
    """One minibatch per step from an iterable; ``num_data`` scales the data plate."""

    def __init__(self, spec, stream: Iterable, num_data, num_steps: int):
        if isinstance(num_data, bool) or not isinstance(num_data, int | np.integer):
            raise TypeError(
                "A stream of minibatches needs num_data= (an int: the size of the full data set, "
                f"which scales each minibatch); got {type(num_data).__name__}."
                + listed_stream_note(spec, stream)
            )
        if num_data < 1:
            raise ValueError(f"num_data must be an int in the range [1, inf); got {num_data}.")
        self.spec, self.num_data, self.num_steps = spec, int(num_data), int(num_steps)
        self._it = iter(stream)
        self.config = None  # the model's config, once prepared: its bounds are checked per batch
        self.consumed = 0  # minibatches read from the stream
        self.rows_read = 0  # rows of those minibatches: where the next one starts in the data
        self._first = None
        self.batch_size = None
        self._read = hashlib.sha256()  # of the minibatches the steps took, in order
        self._steps_read = 0
        self._expected_read = None  # a checkpoint's record of the minibatches its run took

    def read_record(self) -> dict:
        """How many minibatches the steps took, and a digest of them, for a checkpoint."""
        return {"minibatches": self._steps_read, "sha256": self._read.hexdigest()[:16]}

    def expect_read(self, record: dict, path: str) -> None:
        """On resume: the minibatches read again up to the checkpoint must be those its run
        took (``record``, from checkpoint ``path``); checked once as many have been read."""
        self._expected_read = (record, path)

    def _record(self, item: Mapping) -> None:
        """Add the minibatch of a step to the digest, and check the digest on resume."""
        for key in sorted(item):
            value = np.ascontiguousarray(np.asarray(item[key]))
            self._read.update(f"{key}|{value.dtype.str}|{value.shape}|".encode())
            self._read.update(value.data)  # its buffer, not a copy: this is every step
        self._steps_read += 1
        if self._expected_read is None or self._steps_read != self._expected_read[0]["minibatches"]:
            return
        record, path = self._expected_read
        self._expected_read = None
        if self.read_record() != record:
            raise DataError(
                f"Checkpoint {path!r} was written by a run on another stream: the first "
                f"{self._steps_read} minibatch(es) of this one differ from those it took. Resume "
                "with the stream from its start, as the checkpointed run had it, or start "
                "afresh without resume=True."
            )

    def _next(self, step: int):
        try:
            item = next(self._it)
        except StopIteration:
            raise StreamEndedError(
                f"The data stream ended after {self.consumed} minibatch(es): step {step + 1} of "
                f"num_steps={self.num_steps} has none. Give a longer stream or fewer num_steps; "
                "with checkpoint= the last completed step was saved and resume=True continues "
                "from it."
            ) from None
        self.consumed += 1
        if not isinstance(item, Mapping):
            keys = list(self.spec.data)
            if len(keys) != 1:
                raise DataError(
                    f"The minibatch of step {step + 1} must be a dict with keys {keys}; got "
                    f"{type(item).__name__}."
                )
            item = {keys[0]: item}
        first_row = self.rows_read
        self.rows_read += (np.shape(next(iter(item.values()), ())) or (0,))[0]
        return item, first_row

    def batch(self, step: int) -> dict[str, np.ndarray]:
        if step == 0 and self._first is not None:
            return self._first
        while self.consumed < step:  # resume: skip the minibatches of the steps taken
            self._record(self._next(self.consumed)[0])
        if self.consumed > step:
            raise DataError(f"The stream is past step {step + 1}; it cannot be rewound.")
        item, first_row = self._next(step)
        rows = np.arange(first_row, self.rows_read)  # the rows of the data set it holds
        out = _checked(self.spec, item, step, rows, self.config)
        if self._first is not None:
            for key, value in out.items():
                if value.shape[1:] != self._first[key].shape[1:]:
                    raise DataError(
                        f"The minibatch of step {step + 1} has data[{key!r}] of shape "
                        f"{value.shape}; the first had {self._first[key].shape} (rows may vary, "
                        "the other dimensions may not)."
                    )
        if len(next(iter(out.values()))) > self.num_data:
            raise DataError(
                f"The minibatch of step {step + 1} has more rows than num_data={self.num_data}."
            )
        self._record(item)  # as the stream gave it, as a resume reads it again
        return out

    def init_sample(self) -> dict[str, np.ndarray]:
        if self._first is None:
            self._first = self.batch(0)
            self.batch_size = len(next(iter(self._first.values())))
        return self._first

    def fingerprint_parts(self):
        yield "num_data", str(self.num_data)
        yield from sorted(self.init_sample().items())


def make_source(spec, data, *, batch_size, num_data, seed: int, num_steps: int):
    """An :class:`ArraySource` for a dict of arrays, a :class:`StreamSource` for an iterable."""
    if isinstance(data, Mapping):
        if num_data is not None and num_data != len(next(iter(data.values()))):
            raise ValueError(
                f"num_data={num_data} is for streams; these arrays have "
                f"{len(next(iter(data.values())))} rows."
            )
        return ArraySource(spec, data, batch_size, seed)
    if batch_size is not None:
        raise ValueError(
            "batch_size= is for arrays; a stream's minibatches have the rows it gives. Got "
            f"batch_size={batch_size}.{listed_stream_note(spec, data)}"
        )
    return StreamSource(spec, data, num_data, num_steps)


def fingerprint(source) -> str:
    digest = hashlib.sha256()
    for key, part in source.fingerprint_parts():
        digest.update(key.encode())
        digest.update(part.encode() if isinstance(part, str) else part.tobytes())
    return digest.hexdigest()[:16]


__all__ = [
    "ArraySource",
    "DataError",
    "StreamEndedError",
    "StreamSource",
    "fingerprint",
    "is_array_like",
    "is_out_of_core",
    "make_source",
    "release",
]
