"""Dataset loaders: MNIST, the fixed binarized MNIST, and scikit-learn's 8x8 digits.

Only numpy is imported at module import time. Files are looked up under a data directory,
resolved in this order:

1. the ``data_dir`` argument,
2. the environment variable ``ZOO_DATA_DIR``,
3. the per-user cache ``~/.cache/ppl-zoo``.

The layout below the data directory is::

    <data_dir>/mnist/train-images-idx3-ubyte[.gz]
    <data_dir>/mnist/train-labels-idx1-ubyte[.gz]
    <data_dir>/mnist/t10k-images-idx3-ubyte[.gz]
    <data_dir>/mnist/t10k-labels-idx1-ubyte[.gz]
    <data_dir>/binarized_mnist/binarized_mnist_{train,valid,test}.amat

Every file is checked against a pinned SHA-256 before it is parsed. An uncompressed MNIST file
is accepted only where its own sum is pinned (``train-images-idx3-ubyte``); otherwise the
``.gz`` file is required. Missing files are downloaded from the canonical URLs unless
``ZOO_OFFLINE=1``. The data directory is only read, except for the downloads of missing files.

Parsed arrays are cached as ``.npy`` files (never pickled) next to a small JSON file recording
the source files, so a changed source invalidates the cache. The cache is ``cache_dir=`` if
given, else ``~/.cache/ppl-zoo/cache``, whatever the data directory.
"""

from __future__ import annotations

import gzip
import hashlib
import http.client
import io
import json
import os
from pathlib import Path

import numpy as np

from zoo.files import atomic_write, probe_writable, remove_stale_temporaries

__all__ = [
    "BINARIZED_MNIST_URL",
    "DatasetError",
    "MNIST_MIRRORS",
    "SHA256",
    "download",
    "dynamic_binarize",
    "load_binarized_mnist",
    "load_digits_binarized",
    "load_mnist",
    "resolve_data_dir",
]

#: Mirrors for the four MNIST ``.gz`` files, tried in order.
MNIST_MIRRORS = (
    "https://ossci-datasets.s3.amazonaws.com/mnist/",
    "http://yann.lecun.com/exdb/mnist/",
)

#: URL template for the binarized MNIST splits (``split`` in train, valid, test).
BINARIZED_MNIST_URL = (
    "http://www.cs.toronto.edu/~larocheh/public/datasets/binarized_mnist/"
    "binarized_mnist_{split}.amat"
)

#: Pinned SHA-256 sums, keyed by the path relative to the data directory.
SHA256 = {
    "mnist/train-images-idx3-ubyte.gz": (
        "440fcabf73cc546fa21475e81ea370265605f56be210a4024d2ca8f203523609"
    ),
    "mnist/train-images-idx3-ubyte": (
        "ba891046e6505d7aadcbbe25680a0738ad16aec93bde7f9b65e87a2fc25776db"
    ),
    "mnist/train-labels-idx1-ubyte.gz": (
        "3552534a0a558bbed6aed32b30c495cca23d567ec52cac8be1a0730e8010255c"
    ),
    "mnist/t10k-images-idx3-ubyte.gz": (
        "8d422c7b0a1c1c79245a5bcf07fe86e33eeafee792b84584aec276f5a2dbc4e6"
    ),
    "mnist/t10k-labels-idx1-ubyte.gz": (
        "f7ae60f92e00ec6debd23a6088c31dbd2371eca3ffa0defaefb259924204aec6"
    ),
    "binarized_mnist/binarized_mnist_train.amat": (
        "ad693b29f94c14277b095f5238ddefbbdaaae0939789dd2f4f0205278cee3e4d"
    ),
    "binarized_mnist/binarized_mnist_valid.amat": (
        "1de3d397c40fe8eeb33dafd4099a1f665ec01e96d9be234aaeeac8a34930e2e2"
    ),
    "binarized_mnist/binarized_mnist_test.amat": (
        "e6687bfea3f820c174f33b7865140b2a2dd2930ef786f35d45795fc193b5ab2c"
    ),
}

_MNIST_SPLITS = {
    "train": ("train-images-idx3-ubyte", "train-labels-idx1-ubyte", 60_000),
    "test": ("t10k-images-idx3-ubyte", "t10k-labels-idx1-ubyte", 10_000),
}
_BINARIZED_SPLITS = {"train": 50_000, "valid": 10_000, "test": 10_000}
_IDX_IMAGES_MAGIC = 0x0803
_IDX_LABELS_MAGIC = 0x0801
_AMAT_ROW_BYTES = 784 * 2  # '0'/'1' then ' ' (or '\n' after the last value)
_CHUNK = 1 << 20
#: Seconds since its last write after which a download's or a cache's temporary file is taken
#: as left over by a killed process (one being written is written to far more often).
_STALE_WRITE_S = 3600.0
_USER_CACHE = Path("~/.cache/ppl-zoo")


class DatasetError(ValueError):
    """A data file is missing, corrupt, or has an unexpected format.

    The message names the file and says what to do: where to download it and where to put it,
    or to delete a corrupt file (it is downloaded again when missing, unless
    ``ZOO_OFFLINE=1``). A ``ValueError``.

    Parameters
    ----------
    message : str
        Which file, what is wrong with it, and what to do.

    Examples
    --------
    A file whose bytes are not those of the pinned SHA-256:

    >>> import os, tempfile
    >>> from zoo import datasets
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     os.mkdir(os.path.join(folder, "mnist"))
    ...     with open(os.path.join(folder, "mnist", "t10k-images-idx3-ubyte.gz"), "wb") as f:
    ...         _ = f.write(b"not MNIST")
    ...     try:
    ...         datasets.load_mnist("test", data_dir=folder)
    ...     except datasets.DatasetError as err:
    ...         print(err)
    Checksum mismatch for ...t10k-images-idx3-ubyte.gz: expected SHA-256 8d422c7b..., got ...
    (9 bytes). The file is corrupt or truncated: delete it and download it again ...
    """


# --------------------------------------------------------------------------------------------
# directories


def resolve_data_dir(data_dir: str | os.PathLike | None = None) -> Path:
    """Return the data directory: ``data_dir``, else ``$ZOO_DATA_DIR``, else ``~/.cache/ppl-zoo``.

    Parameters
    ----------
    data_dir : str or os.PathLike, optional
        An explicit directory; wins over the environment.

    Returns
    -------
    pathlib.Path
        The (user-expanded) directory; it need not exist.

    Examples
    --------
    >>> from pathlib import Path
    >>> from zoo.datasets import resolve_data_dir
    >>> resolve_data_dir("~/data") == Path.home() / "data"
    True
    """
    if data_dir is None:
        data_dir = os.environ.get("ZOO_DATA_DIR") or _USER_CACHE
    return Path(data_dir).expanduser()


def _resolve_cache_dir(cache_dir: str | os.PathLike | None) -> Path:
    """The parsed arrays' cache: ``cache_dir``, else the per-user one. Never a folder of the data
    directory, which may be a shared copy of the canonical files that is only to be read; the
    folder is made when the first array is written to it."""
    if cache_dir is not None:
        return Path(cache_dir).expanduser()
    return _USER_CACHE.expanduser() / "cache"


# --------------------------------------------------------------------------------------------
# checksums and download


def _sha256_bytes(data) -> str:  # bytes, or a buffer such as an array's memory
    return hashlib.sha256(data).hexdigest()


def _sha256_array(arr: np.ndarray) -> str:
    """The SHA-256 of an array's bytes, hashed in place (no copy of a contiguous array)."""
    return _sha256_bytes(np.ascontiguousarray(arr).data)


def _read_verified(path: Path, rel: str) -> bytes:
    """Read ``path`` and check it against the pinned sum of ``rel``; raise DatasetError."""
    data = path.read_bytes()
    expected = SHA256[rel]
    got = _sha256_bytes(data)
    if got != expected:
        raise DatasetError(
            f"Checksum mismatch for {path}: expected SHA-256 {expected}, got {got} "
            f"({len(data)} bytes). The file is corrupt or truncated: delete it and download it "
            f"again (it is re-downloaded automatically when missing, unless ZOO_OFFLINE=1)."
        )
    return data


def _urlopen(url: str, timeout: float = 60.0):
    """Open ``url``; a module attribute so tests can replace it."""
    import urllib.request

    return urllib.request.urlopen(url, timeout=timeout)  # noqa: S310 (fixed https/http URLs)


def _download(url: str, dest: Path, expected_sha256: str) -> None:
    """Download ``url`` to ``dest`` through a temp file, verifying the SHA-256 before renaming.

    Raises
    ------
    OSError, http.client.HTTPException, DatasetError
        On network/file errors, a response cut short or a checksum mismatch; ``dest`` is left
        untouched.
    """
    from tqdm.auto import tqdm

    def write(out):
        digest = hashlib.sha256()
        with _urlopen(url) as resp:
            total = resp.headers.get("Content-Length") if hasattr(resp, "headers") else None
            total = int(total) if total and total.isdigit() else None  # for the bar alone
            with tqdm(total=total, unit="B", unit_scale=True, desc=dest.name, leave=False) as bar:
                while chunk := resp.read(_CHUNK):
                    out.write(chunk)
                    digest.update(chunk)
                    bar.update(len(chunk))
        got = digest.hexdigest()
        if got != expected_sha256:
            raise DatasetError(
                f"Checksum mismatch for download of {url}: expected SHA-256 {expected_sha256}, "
                f"got {got}."
            )

    atomic_write(dest, write)


def _fetch(rel: str, data_dir: Path, urls: list[str], note: str = "") -> Path:
    """Download the file ``rel`` into ``data_dir`` from the first working URL, or raise."""
    dest = data_dir / rel
    where = (
        f"Download it from {urls[0]}"
        + (f" (mirrors: {', '.join(urls[1:])})" if len(urls) > 1 else "")
        + f" and put it at {dest}, or set ZOO_DATA_DIR (or pass data_dir=) to a directory "
        f"that already holds {rel}."
    )
    if os.environ.get("ZOO_OFFLINE") == "1":
        raise DatasetError(f"Missing data file {dest} and ZOO_OFFLINE=1. {note}{where}")
    _check_download_folder(data_dir, dest, urls[0])
    # What a download killed mid-write (SIGKILL, a power cut) left behind. One under way in
    # another process writes a chunk at a time, so its file is never this old.
    remove_stale_temporaries(dest, older_than=_STALE_WRITE_S)
    errors = []
    for url in urls:
        try:
            _download(url, dest, SHA256[rel])
            return dest
        # URLError is an OSError; a connection cut mid-response (IncompleteRead) or a reply
        # that is not HTTP is an HTTPException: either way, the next mirror.
        except (OSError, http.client.HTTPException, DatasetError) as exc:
            errors.append(f"{url}: {exc}")
    raise DatasetError(
        f"Missing data file {dest} and the download failed ({'; '.join(errors)}). {note}{where}"
    )


def _check_download_folder(data_dir: Path, dest: Path, url: str) -> None:
    """Make the folder a download of ``dest`` goes to, and check that a file can be written in
    it, before any download: an error in writing there is no failed download of each mirror."""
    try:
        dest.parent.mkdir(parents=True, exist_ok=True)
        probe_writable(dest.parent, dest.name)
    except OSError as err:
        reason = f"{err.strerror or err}: {err.filename}" if err.filename else str(err)
        raise DatasetError(
            f"Missing data file {dest}, and the data directory {data_dir} cannot be created or "
            f"written ({reason}), so it cannot be downloaded there. Set ZOO_DATA_DIR (or pass "
            f"data_dir=) to a folder that can be written, or that already holds the files, or put "
            f"the file at {dest} yourself (from {url})."
        ) from err


def _check_present(data_dir: Path, *paths: Path) -> None:
    """A data directory that is not a folder, or a data file's name taken by a folder, FIFO or
    device, is an error that says so (a download could not put the file there, and reading a
    FIFO would wait forever)."""
    if data_dir.exists() and not data_dir.is_dir():
        raise DatasetError(
            f"The data directory {data_dir} is not a folder (ZOO_DATA_DIR or data_dir= names a "
            "file); point it at a folder."
        )
    for path in paths:
        if path.exists() and not path.is_file():
            kind = "a folder" if path.is_dir() else "not a regular file (a FIFO, device or socket)"
            raise DatasetError(
                f"The data file {path} is {kind}; remove it, and put the data file there or let "
                "the loader download it."
            )


def _mnist_source(name: str, data_dir: Path) -> tuple[Path, str]:
    """Find (or download) the verified-able source of MNIST file ``name``: (path, rel key)."""
    raw_rel, gz_rel = f"mnist/{name}", f"mnist/{name}.gz"
    raw, gz = data_dir / raw_rel, data_dir / gz_rel
    _check_present(data_dir, raw, gz)
    if raw_rel in SHA256 and raw.is_file():
        return raw, raw_rel
    if gz.is_file():
        return gz, gz_rel
    note = ""
    if raw.is_file():
        note = f"(The uncompressed {raw} has no pinned checksum, so the .gz file is required.) "
    return _fetch(gz_rel, data_dir, [m + f"{name}.gz" for m in MNIST_MIRRORS], note), gz_rel


def _binarized_source(split: str, data_dir: Path) -> tuple[Path, str]:
    rel = f"binarized_mnist/binarized_mnist_{split}.amat"
    path = data_dir / rel
    _check_present(data_dir, path)
    if path.is_file():
        return path, rel
    return _fetch(rel, data_dir, [BINARIZED_MNIST_URL.format(split=split)]), rel


def download(data_dir: str | os.PathLike | None = None) -> Path:
    """Make sure every MNIST and binarized MNIST file is in the data directory, downloading the
    missing ones (each download checked against its pinned SHA-256 before it is kept; a file
    already there is checked when a loader reads it).

    Parameters
    ----------
    data_dir : str or os.PathLike, optional
        Default: ``$ZOO_DATA_DIR``, else ``~/.cache/ppl-zoo``.

    Returns
    -------
    pathlib.Path
        The data directory.

    Raises
    ------
    DatasetError
        At the first file that is missing and cannot be downloaded (offline, or
        ``ZOO_OFFLINE=1``), or whose download does not match its pinned SHA-256; the message
        says where to put it.

    Examples
    --------
    With ``ZOO_DATA_DIR`` naming a directory that holds the files, nothing is downloaded:

    >>> from zoo import datasets
    >>> data_dir = datasets.download()
    >>> data_dir == datasets.resolve_data_dir()
    True
    >>> (data_dir / "binarized_mnist" / "binarized_mnist_test.amat").is_file()
    True
    """
    data_dir = resolve_data_dir(data_dir)
    for images, labels, _ in _MNIST_SPLITS.values():
        _mnist_source(images, data_dir)
        _mnist_source(labels, data_dir)
    for split in _BINARIZED_SPLITS:
        _binarized_source(split, data_dir)
    return data_dir


# --------------------------------------------------------------------------------------------
# parsing


def _parse_idx(data: bytes, magic: int, shape_tail: tuple[int, ...], name: str) -> np.ndarray:
    """Parse an IDX file of unsigned bytes, checking the magic number and dimensions."""
    ndim = 1 + len(shape_tail)
    header = 4 + 4 * ndim
    if len(data) < header:
        raise DatasetError(f"{name}: too short for an IDX header ({len(data)} bytes).")
    got_magic = int(np.frombuffer(data, ">u4", count=1)[0])
    if got_magic != magic:
        raise DatasetError(f"{name}: IDX magic number {got_magic:#06x}, expected {magic:#06x}.")
    dims = tuple(int(d) for d in np.frombuffer(data, ">u4", count=ndim, offset=4))
    if dims[1:] != shape_tail:
        raise DatasetError(f"{name}: IDX dimensions {dims}, expected (N, {shape_tail}).")
    if len(data) - header != int(np.prod(dims)):
        raise DatasetError(
            f"{name}: IDX payload has {len(data) - header} bytes, dimensions {dims} need "
            f"{int(np.prod(dims))}."
        )
    return np.frombuffer(data, np.uint8, offset=header).reshape(dims).copy()


def _parse_amat(data: bytes, name: str) -> np.ndarray:
    """Parse rows of 784 space-separated 0/1 values to uint8 ``(N, 784)``."""
    buf = np.frombuffer(data, np.uint8)
    if buf.size and buf.size % _AMAT_ROW_BYTES == 0:
        rows = buf.reshape(-1, _AMAT_ROW_BYTES)
        seps, digits = rows[:, 1::2], rows[:, 0::2]
        if (
            np.all(seps[:, :-1] == ord(" "))
            and np.all(seps[:, -1] == ord("\n"))
            and np.all((digits - ord("0")) < 2)  # uint8 wrap-around catches bytes below '0'
        ):
            return digits - np.uint8(ord("0"))
    # Slow path for other whitespace layouts.
    try:
        out = np.loadtxt(io.BytesIO(data), dtype=np.uint8, ndmin=2)
    except ValueError as exc:
        raise DatasetError(f"{name}: not a matrix of 0/1 values ({exc}).") from exc
    if out.shape[1:] != (784,) or out.max(initial=0) > 1:
        raise DatasetError(f"{name}: expected rows of 784 values in {{0, 1}}, got {out.shape}.")
    return np.ascontiguousarray(out)


# --------------------------------------------------------------------------------------------
# cache


def _source_record(path: Path, rel: str) -> dict:
    st = path.stat()
    return {
        "path": str(path.resolve()),
        "size": st.st_size,
        "mtime_ns": st.st_mtime_ns,
        "sha256": SHA256[rel],
    }


def _cache_load(
    cache_dir: Path, name: str, sources: dict, shape: tuple, dtype=np.uint8
) -> np.ndarray | None:
    """Return the cached array when its metadata matches ``sources``, shape and dtype and its
    bytes match the SHA-256 recorded when it was written (a damaged cache is parsed anew)."""
    npy, meta = cache_dir / f"{name}.npy", cache_dir / f"{name}.json"
    try:
        recorded = json.loads(meta.read_text())
        if recorded["sources"] != sources or not npy.is_file():  # a FIFO would block the read
            return None
        arr = np.load(npy, allow_pickle=False)
    except (OSError, ValueError, KeyError, TypeError, EOFError):  # EOFError: an empty file
        return None
    if arr.shape != shape or arr.dtype != dtype:
        return None
    if recorded.get("sha256") != _sha256_array(arr):
        return None
    return arr


def _cache_save(cache_dir: Path, name: str, arr: np.ndarray, sources: dict) -> None:
    """Write ``arr`` and its metadata atomically; a failure to write only warns."""
    try:
        for suffix in (".npy", ".json"):  # what a process killed while writing them left
            remove_stale_temporaries(cache_dir / f"{name}{suffix}", older_than=_STALE_WRITE_S)
        atomic_write(cache_dir / f"{name}.npy", lambda f: np.save(f, arr, allow_pickle=False))
        meta = {
            "sources": sources,
            "shape": list(arr.shape),
            "dtype": str(arr.dtype),
            "sha256": _sha256_array(arr),
        }
        atomic_write(cache_dir / f"{name}.json", lambda f: f.write(json.dumps(meta).encode()))
    except OSError as exc:
        import warnings

        warnings.warn(f"could not write dataset cache to {cache_dir}: {exc}", stacklevel=3)


def _load_cached(name, sources_rel, shape, parse, cache_dir):
    """Load from the cache, or verify and parse the sources and cache the result.

    ``sources_rel`` is a list of ``(path, rel)``; ``parse`` maps the list of verified bytes
    to the array.
    """
    sources = {rel: _source_record(path, rel) for path, rel in sources_rel}
    arr = _cache_load(cache_dir, name, sources, shape)
    if arr is not None:
        return arr
    arr = parse([_read_verified(path, rel) for path, rel in sources_rel])
    if arr.shape != shape or arr.dtype != np.uint8:
        raise DatasetError(f"{name}: parsed array has shape {arr.shape}, expected {shape}.")
    _cache_save(cache_dir, name, arr, sources)
    return arr


def _check_split(split: str, valid) -> None:
    if split not in valid:
        raise ValueError(f"unknown split {split!r}; valid splits: {', '.join(valid)}")


# --------------------------------------------------------------------------------------------
# public loaders


def load_mnist(
    split: str = "train",
    data_dir: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Load MNIST images and labels.

    Parameters
    ----------
    split : {"train", "test"}
        60,000 training or 10,000 test digits.
    data_dir : str or os.PathLike, optional
        Data directory (default: ``$ZOO_DATA_DIR``, else ``~/.cache/ppl-zoo``); files are read
        from ``<data_dir>/mnist/`` and downloaded there when missing.
    cache_dir : str or os.PathLike, optional
        Where parsed ``.npy`` arrays are cached (default: ``~/.cache/ppl-zoo/cache``). Nothing
        is written in the data directory but the files downloaded there.

    Returns
    -------
    images : numpy.ndarray of uint8, shape (N, 28, 28)
        Grey levels 0..255.
    labels : numpy.ndarray of uint8, shape (N,)
        Digits 0..9.

    Raises
    ------
    ValueError
        For an unknown split.
    DatasetError
        When a file is missing (offline or download failed), corrupt, or malformed.

    Examples
    --------
    From the data directory (``$ZOO_DATA_DIR`` here), downloading the files there when they
    are missing:

    >>> import numpy as np
    >>> from zoo.datasets import load_mnist
    >>> images, labels = load_mnist("test")
    >>> images.shape, images.dtype, int(images.max())
    ((10000, 28, 28), dtype('uint8'), 255)
    >>> labels[:10]
    array([7, 2, 1, 0, 4, 1, 4, 9, 5, 9], dtype=uint8)

    As data for a model with grey levels in [0, 1]:

    >>> x = images.reshape(len(images), -1).astype(np.float32) / 255
    >>> x.shape
    (10000, 784)
    """
    _check_split(split, _MNIST_SPLITS)
    img_name, lab_name, n = _MNIST_SPLITS[split]
    data_dir = resolve_data_dir(data_dir)
    cache = _resolve_cache_dir(cache_dir)

    def parse_file(name, magic, tail):
        def parse(blobs):
            (data,) = blobs
            if data[:2] == b"\x1f\x8b":
                data = gzip.decompress(data)
            return _parse_idx(data, magic, tail, name)

        return parse

    img_src = _mnist_source(img_name, data_dir)
    images = _load_cached(
        f"mnist_{split}_images",
        [img_src],
        (n, 28, 28),
        parse_file(img_name, _IDX_IMAGES_MAGIC, (28, 28)),
        cache,
    )
    lab_src = _mnist_source(lab_name, data_dir)
    labels = _load_cached(
        f"mnist_{split}_labels",
        [lab_src],
        (n,),
        parse_file(lab_name, _IDX_LABELS_MAGIC, ()),
        cache,
    )
    if labels.max(initial=0) > 9:
        raise DatasetError(f"{lab_src[0]}: labels outside 0..9.")
    return images, labels


def load_binarized_mnist(
    split: str = "train",
    data_dir: str | os.PathLike | None = None,
    cache_dir: str | os.PathLike | None = None,
) -> np.ndarray:
    """Load the fixed binarization of MNIST by Larochelle & Murray (2011).

    Parameters
    ----------
    split : {"train", "valid", "test"}
        50,000, 10,000 or 10,000 rows.
    data_dir : str or os.PathLike, optional
        Data directory; the file is ``<data_dir>/binarized_mnist/binarized_mnist_{split}.amat``,
        downloaded there when missing (see :func:`load_mnist`).
    cache_dir : str or os.PathLike, optional
        Where the parsed ``.npy`` array is cached (default: ``~/.cache/ppl-zoo/cache``).

    Returns
    -------
    numpy.ndarray of uint8, shape (N, 784)
        Values in {0, 1}; rows are 28x28 images flattened row-major. No labels.

    Raises
    ------
    ValueError
        For an unknown split.
    DatasetError
        When the file is missing (offline or download failed), corrupt, or malformed.

    Examples
    --------
    From the data directory (``$ZOO_DATA_DIR`` here), downloading the file there when it is
    missing:

    >>> import numpy as np
    >>> from zoo.datasets import load_binarized_mnist
    >>> x = load_binarized_mnist("test")
    >>> x.shape, x.dtype, np.unique(x)
    ((10000, 784), dtype('uint8'), array([0, 1], dtype=uint8))
    >>> round(float(x.mean()), 3)  # the share of pixels that are on
    0.133
    """
    _check_split(split, _BINARIZED_SPLITS)
    data_dir = resolve_data_dir(data_dir)
    cache = _resolve_cache_dir(cache_dir)
    src = _binarized_source(split, data_dir)
    return _load_cached(
        f"binarized_mnist_{split}",
        [src],
        (_BINARIZED_SPLITS[split], 784),
        lambda blobs: _parse_amat(blobs[0], str(src[0])),
        cache,
    )


def dynamic_binarize(images: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """Sample binary images with ``pixel ~ Bernoulli(image / 255)``.

    Parameters
    ----------
    images : array_like, shape (...)
        Grey levels in [0, 255] (e.g. uint8 ``(N, 28, 28)`` from :func:`load_mnist`).
    rng : numpy.random.Generator
        Source of randomness; the same seed gives the same sample.

    Returns
    -------
    numpy.ndarray of uint8, same shape as ``images``
        Values in {0, 1}.

    Raises
    ------
    TypeError
        ``rng`` is not a ``numpy.random.Generator``.
    ValueError
        Values outside [0, 255], NaN or infinite values, floating-point images that look like
        [0, 1] (largest value at most 1), or integer images that are binary already (largest
        value 1).

    Examples
    --------
    >>> import numpy as np
    >>> from zoo.datasets import dynamic_binarize
    >>> grey = np.array([[0, 64, 128, 192, 255]], dtype=np.uint8)
    >>> dynamic_binarize(grey, np.random.default_rng(0))
    array([[0, 0, 1, 1, 1]], dtype=uint8)

    Grey levels in [0, 1] are refused (multiply them by 255), and so are images that are binary
    already:

    >>> dynamic_binarize(grey / 255, np.random.default_rng(0))
    Traceback (most recent call last):
    ...
    ValueError: images must be grey levels in [0, 255]; these look like [0, 1] ...
    >>> dynamic_binarize(np.array([[0, 1, 1]], dtype=np.uint8), np.random.default_rng(0))
    Traceback (most recent call last):
    ...
    ValueError: images must be grey levels in [0, 255]; these are binary already ...
    """
    if not isinstance(rng, np.random.Generator):
        raise TypeError(f"rng must be a numpy.random.Generator, got {type(rng).__name__}")
    images = np.asarray(images)
    if images.dtype.kind == "f" and not np.isfinite(images).all():
        raise ValueError(
            "images must be grey levels in [0, 255]; these hold NaN or infinite values: drop or "
            "replace them first."
        )
    if images.size and (images.min() < 0 or images.max() > 255):
        raise ValueError("images must have values in [0, 255]")
    if images.dtype.kind == "f" and images.size and 0 < images.max() <= 1:
        raise ValueError(
            "images must be grey levels in [0, 255]; these look like [0, 1] (largest value "
            f"{images.max()}): multiply them by 255. (fit(..., dynamic_binarization=True) takes "
            "[0, 1].)"
        )
    # Integers whose largest value is 1 are binary already (load_binarized_mnist's), not grey
    # levels: as such, nearly every pixel would come out 0.
    if images.dtype.kind in "biu" and images.size and images.max() == 1:
        raise ValueError(
            "images must be grey levels in [0, 255]; these are binary already (integers, largest "
            "value 1), as load_binarized_mnist gives: use them as they are, or binarize grey "
            "levels such as load_mnist's images."
        )
    probs = images.astype(np.float64) / 255.0
    return (rng.random(images.shape) < probs).astype(np.uint8)


def load_digits_binarized(threshold: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """Load scikit-learn's bundled 8x8 digits, binarized as ``pixel >= threshold``.

    Parameters
    ----------
    threshold : int, default 8
        Pixels (values 0..16) at or above it become 1.

    Returns
    -------
    x : numpy.ndarray of uint8, shape (1797, 64)
        Values in {0, 1}.
    labels : numpy.ndarray of uint8, shape (1797,)
        Digits 0..9.

    Raises
    ------
    ImportError
        When scikit-learn is not installed.

    Examples
    --------
    Offline data for a binary model, such as the Bernoulli mixture:

    >>> from zoo.datasets import load_digits_binarized
    >>> x, labels = load_digits_binarized()
    >>> x.shape, x.dtype, labels[:10]
    ((1797, 64), dtype('uint8'), array([0, 1, 2, 3, 4, 5, 6, 7, 8, 9], dtype=uint8))
    >>> round(float(x.mean()), 3)
    0.323
    """
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:
        raise ImportError(
            "load_digits_binarized needs scikit-learn: pip install scikit-learn"
        ) from exc
    digits = load_digits()
    x = (np.asarray(digits.data) >= threshold).astype(np.uint8)
    return x, np.asarray(digits.target).astype(np.uint8)
