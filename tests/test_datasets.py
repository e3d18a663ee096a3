"""Tests for zoo.datasets; they read the shared data folder and never touch the network."""

import errno
import http.client
import io
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import pytest

from zoo import datasets
from zoo.datasets import (
    DatasetError,
    dynamic_binarize,
    load_binarized_mnist,
    load_digits_binarized,
    load_mnist,
)


@pytest.fixture(autouse=True)
def _no_network(monkeypatch):
    """Any real download attempt fails the test."""

    def refuse(url, *args, **kwargs):
        raise AssertionError(f"test tried to open {url}")

    monkeypatch.setattr(datasets, "_urlopen", refuse)


@pytest.fixture(scope="module")
def mnist_test(data_dir, tmp_path_factory):
    return load_mnist("test", data_dir=data_dir, cache_dir=tmp_path_factory.mktemp("c"))


def test_mnist_test_split(data_dir, mnist_test):
    images, labels = mnist_test
    assert images.shape == (10_000, 28, 28) and images.dtype == np.uint8
    assert labels.shape == (10_000,) and labels.dtype == np.uint8
    assert images.max() == 255 and images.min() == 0
    assert set(np.unique(labels)) == set(range(10))
    assert labels[0] == 7


def test_mnist_train_split(data_dir, tmp_path):
    images, labels = load_mnist("train", data_dir=data_dir, cache_dir=tmp_path)
    assert images.shape == (60_000, 28, 28) and images.dtype == np.uint8
    assert labels.shape == (60_000,) and labels.dtype == np.uint8
    assert labels[0] == 5
    assert np.bincount(labels, minlength=10).min() > 5000
    assert 30 < images.mean() < 36  # MNIST mean grey level is about 33.3


@pytest.mark.parametrize("split", ["valid", "test"])
def test_binarized_mnist(data_dir, split, tmp_path):
    x = load_binarized_mnist(split, data_dir=data_dir, cache_dir=tmp_path)
    assert x.shape == (10_000, 784) and x.dtype == np.uint8
    assert set(np.unique(x)) == {0, 1}
    assert 0.1 < x.mean() < 0.2


def test_binarized_mnist_train_once(data_dir, tmp_path):
    x = load_binarized_mnist("train", data_dir=data_dir, cache_dir=tmp_path)
    assert x.shape == (50_000, 784) and x.dtype == np.uint8
    assert 0.1 < x.mean() < 0.2 and x.max() == 1


def test_cache_created_and_reused(data_dir, tmp_path, monkeypatch):
    t0 = time.perf_counter()
    first = load_binarized_mnist("test", data_dir=data_dir, cache_dir=tmp_path)
    t_first = time.perf_counter() - t0
    assert (tmp_path / "binarized_mnist_test.npy").is_file()
    assert (tmp_path / "binarized_mnist_test.json").is_file()

    # The second load must come from the cache: parsing and hashing would fail now.
    def fail(*args, **kwargs):
        raise AssertionError("source parsed again")

    monkeypatch.setattr(datasets, "_parse_amat", fail)
    monkeypatch.setattr(datasets, "_read_verified", fail)
    t0 = time.perf_counter()
    second = load_binarized_mnist("test", data_dir=data_dir, cache_dir=tmp_path)
    t_second = time.perf_counter() - t0
    np.testing.assert_array_equal(first, second)
    assert t_second < t_first


def test_damaged_cache_is_parsed_anew(data_dir, tmp_path):
    first = load_binarized_mnist("valid", data_dir=data_dir, cache_dir=tmp_path)
    # Same shape and dtype, valid .npy, other bytes: only the recorded checksum tells.
    np.save(tmp_path / "binarized_mnist_valid.npy", np.zeros_like(first))
    again = load_binarized_mnist("valid", data_dir=data_dir, cache_dir=tmp_path)
    np.testing.assert_array_equal(again, first)
    np.testing.assert_array_equal(np.load(tmp_path / "binarized_mnist_valid.npy"), first)


def test_atomic_write_gives_the_umask_permissions(tmp_path):
    from zoo.files import atomic_write

    old = os.umask(0o027)
    try:
        atomic_write(tmp_path / "f.bin", lambda f: f.write(b"x"), durable=True)
    finally:
        os.umask(old)
    assert (tmp_path / "f.bin").stat().st_mode & 0o777 == 0o640
    assert [p.name for p in tmp_path.iterdir()] == ["f.bin"]
    (tmp_path / "f.bin").chmod(0o600)  # a file written anew keeps the mode it had
    atomic_write(tmp_path / "f.bin", lambda f: f.write(b"y"))
    assert (tmp_path / "f.bin").stat().st_mode & 0o777 == 0o600
    assert (tmp_path / "f.bin").read_bytes() == b"y"


def test_cache_invalidated_by_changed_source(data_dir, tmp_path):
    data = tmp_path / "data"
    (data / "mnist").mkdir(parents=True)
    for name in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        shutil.copy(data_dir / "mnist" / name, data / "mnist" / name)
    cache = tmp_path / "cache"
    load_mnist("test", data_dir=data, cache_dir=cache)
    assert (cache / "mnist_test_labels.npy").is_file()
    # Replace the labels with a corrupt copy: the cache must not hide it.
    lab = data / "mnist" / "t10k-labels-idx1-ubyte.gz"
    blob = bytearray(lab.read_bytes())
    blob[-1] ^= 0xFF
    lab.write_bytes(bytes(blob))
    os.utime(lab, ns=(1, 1))
    with pytest.raises(DatasetError, match="Checksum"):
        load_mnist("test", data_dir=data, cache_dir=cache)


@pytest.mark.parametrize("how", ["flip", "truncate"])
def test_corrupt_file_raises_and_is_not_cached(data_dir, tmp_path, how):
    data = tmp_path / "data"
    (data / "mnist").mkdir(parents=True)
    shutil.copy(data_dir / "mnist" / "t10k-images-idx3-ubyte.gz", data / "mnist")
    src = data_dir / "mnist" / "t10k-labels-idx1-ubyte.gz"
    blob = bytearray(src.read_bytes())
    if how == "flip":
        blob[100] ^= 0x01
    else:
        blob = blob[: len(blob) // 2]
    (data / "mnist" / src.name).write_bytes(bytes(blob))
    cache = tmp_path / "cache"
    with pytest.raises(DatasetError) as info:
        load_mnist("test", data_dir=data, cache_dir=cache)
    msg = str(info.value)
    assert "Checksum" in msg and src.name in msg
    assert datasets.SHA256["mnist/t10k-labels-idx1-ubyte.gz"] in msg
    assert "delete" in msg
    assert not (cache / "mnist_test_labels.npy").exists()


def test_offline_missing_file_message(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_OFFLINE", "1")
    with pytest.raises(DatasetError) as info:
        load_mnist("test", data_dir=tmp_path, cache_dir=tmp_path / "cache")
    msg = str(info.value)
    expected = tmp_path / "mnist" / "t10k-images-idx3-ubyte.gz"
    assert str(expected) in msg
    assert datasets.MNIST_MIRRORS[0] + "t10k-images-idx3-ubyte.gz" in msg
    assert "ZOO_DATA_DIR" in msg

    with pytest.raises(DatasetError) as info:
        load_binarized_mnist("valid", data_dir=tmp_path, cache_dir=tmp_path / "cache")
    msg = str(info.value)
    assert datasets.BINARIZED_MNIST_URL.format(split="valid") in msg
    assert str(tmp_path / "binarized_mnist" / "binarized_mnist_valid.amat") in msg


def test_data_dir_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_DATA_DIR", str(tmp_path))
    monkeypatch.setenv("ZOO_OFFLINE", "1")
    assert datasets.resolve_data_dir() == tmp_path
    assert datasets.resolve_data_dir(tmp_path / "x") == tmp_path / "x"
    with pytest.raises(DatasetError, match=str(tmp_path / "mnist")):
        load_mnist("test")


def test_unpinned_uncompressed_file_requires_gz(tmp_path, monkeypatch):
    monkeypatch.setenv("ZOO_OFFLINE", "1")
    (tmp_path / "mnist").mkdir()
    (tmp_path / "mnist" / "t10k-images-idx3-ubyte").write_bytes(b"\x00\x00\x08\x03")
    with pytest.raises(DatasetError, match="no pinned checksum"):
        load_mnist("test", data_dir=tmp_path, cache_dir=tmp_path / "cache")


def test_download_via_patched_opener(data_dir, tmp_path, monkeypatch, mnist_test):
    served = {}
    for name in ("t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz"):
        served[name] = (data_dir / "mnist" / name).read_bytes()
    opened = []

    def opener(url, *args, **kwargs):
        opened.append(url)
        if url.startswith(datasets.MNIST_MIRRORS[0]):
            raise OSError("first mirror down")
        return io.BytesIO(served[url.rsplit("/", 1)[1]])

    monkeypatch.setattr(datasets, "_urlopen", opener)
    monkeypatch.delenv("ZOO_OFFLINE", raising=False)
    images, labels = load_mnist("test", data_dir=tmp_path, cache_dir=tmp_path / "cache")
    assert any(u.startswith(datasets.MNIST_MIRRORS[1]) for u in opened)
    for name, blob in served.items():
        assert (tmp_path / "mnist" / name).read_bytes() == blob
    np.testing.assert_array_equal(images, mnist_test[0])
    np.testing.assert_array_equal(labels, mnist_test[1])
    assert sorted(p.name for p in (tmp_path / "mnist").iterdir()) == sorted(served)


class _CutShort(io.BytesIO):
    """A response whose connection closes partway, with a Content-Length that is not a number."""

    headers = {"Content-Length": "12abc"}

    def read(self, size=-1):
        raise http.client.IncompleteRead(b"partial", 100)


def test_a_download_cut_short_tries_the_next_mirror(data_dir, tmp_path, monkeypatch):
    rel = "mnist/t10k-labels-idx1-ubyte.gz"
    blob = (data_dir / rel).read_bytes()
    urls = ["http://first.invalid/a.gz", "http://second.invalid/a.gz"]
    served = {urls[0]: _CutShort, urls[1]: lambda: io.BytesIO(blob)}
    monkeypatch.setattr(datasets, "_urlopen", lambda url, *a, **k: served[url]())
    monkeypatch.delenv("ZOO_OFFLINE", raising=False)
    assert datasets._fetch(rel, tmp_path, urls).read_bytes() == blob
    served[urls[1]] = _CutShort  # both cut short: the error says where to get the file
    (tmp_path / rel).unlink()
    with pytest.raises(DatasetError, match="IncompleteRead|partial.*Download it from"):
        datasets._fetch(rel, tmp_path, urls)
    assert not list((tmp_path / "mnist").iterdir())


def test_download_with_bad_bytes_fails(data_dir, tmp_path, monkeypatch):
    blob = (data_dir / "mnist" / "t10k-labels-idx1-ubyte.gz").read_bytes()
    monkeypatch.setattr(datasets, "_urlopen", lambda url, *a, **k: io.BytesIO(blob[:-10]))
    monkeypatch.delenv("ZOO_OFFLINE", raising=False)
    with pytest.raises(DatasetError) as info:
        datasets._fetch(
            "mnist/t10k-labels-idx1-ubyte.gz", tmp_path, ["http://example.invalid/a.gz"]
        )
    assert "Checksum" in str(info.value) and "http://example.invalid/a.gz" in str(info.value)
    assert not list((tmp_path / "mnist").iterdir())


def test_a_download_removes_what_a_killed_one_left_but_not_one_under_way(tmp_path, monkeypatch):
    """A download killed with SIGKILL leaves its temporary file; the next download of that file
    removes it, but not the temporary of a download another process is writing now."""
    rel = "mnist/t10k-labels-idx1-ubyte.gz"
    (tmp_path / "mnist").mkdir()
    killed = tmp_path / "mnist" / ".tmp-t10k-labels-idx1-ubyte.gz.0123456789ab"
    under_way = tmp_path / "mnist" / ".tmp-t10k-labels-idx1-ubyte.gz.ba9876543210"
    for path in (killed, under_way):
        path.write_bytes(b"partial")
    long_ago = time.time() - 2 * datasets._STALE_WRITE_S
    os.utime(killed, (long_ago, long_ago))
    monkeypatch.setattr(datasets, "_urlopen", lambda url, *a, **k: io.BytesIO(b"not it"))
    monkeypatch.delenv("ZOO_OFFLINE", raising=False)
    with pytest.raises(DatasetError, match="Checksum"):
        datasets._fetch(rel, tmp_path, ["http://example.invalid/a.gz"])
    assert sorted(p.name for p in (tmp_path / "mnist").iterdir()) == [under_way.name]


def test_a_cache_write_removes_what_a_killed_one_left_but_not_one_under_way(tmp_path):
    killed = tmp_path / ".tmp-x.npy.0123456789ab"
    under_way = tmp_path / ".tmp-x.json.ba9876543210"
    for path in (killed, under_way):
        path.write_bytes(b"partial")
    long_ago = time.time() - 2 * datasets._STALE_WRITE_S
    os.utime(killed, (long_ago, long_ago))
    datasets._cache_save(tmp_path, "x", np.arange(3), {})
    assert sorted(p.name for p in tmp_path.iterdir()) == [under_way.name, "x.json", "x.npy"]


def test_unknown_split():
    with pytest.raises(ValueError, match="train, test"):
        load_mnist("valid")
    with pytest.raises(ValueError, match="train, valid, test"):
        load_binarized_mnist("dev")


def test_idx_parser_checks_magic_and_dims():
    header = np.array([0x0803, 2, 28, 28], dtype=">u4").tobytes()
    payload = bytes(2 * 28 * 28)
    out = datasets._parse_idx(header + payload, 0x0803, (28, 28), "x")
    assert out.shape == (2, 28, 28) and out.dtype == np.uint8
    with pytest.raises(DatasetError, match="magic"):
        datasets._parse_idx(header + payload, 0x0801, (28, 28), "x")
    with pytest.raises(DatasetError, match="dimensions"):
        datasets._parse_idx(header + payload, 0x0803, (27, 28), "x")
    with pytest.raises(DatasetError, match="payload"):
        datasets._parse_idx(header + payload[:-1], 0x0803, (28, 28), "x")


def test_amat_parser_fast_and_slow_paths():
    rng = np.random.default_rng(0)
    x = rng.integers(0, 2, size=(3, 784)).astype(np.uint8)
    text = "".join(" ".join(map(str, row)) + "\n" for row in x).encode()
    np.testing.assert_array_equal(datasets._parse_amat(text, "t"), x)
    np.testing.assert_array_equal(datasets._parse_amat(text.replace(b"\n", b"\r\n"), "t"), x)
    with pytest.raises(DatasetError):
        datasets._parse_amat(text.replace(b"1", b"2"), "t")


def test_dynamic_binarize(data_dir, mnist_test):
    images = mnist_test[0][:2000]
    a = dynamic_binarize(images, np.random.default_rng(42))
    b = dynamic_binarize(images, np.random.default_rng(42))
    c = dynamic_binarize(images, np.random.default_rng(43))
    assert a.shape == images.shape and a.dtype == np.uint8
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert set(np.unique(a)) <= {0, 1}
    assert abs(a.mean() - images.mean() / 255) < 0.005
    with pytest.raises(TypeError):
        dynamic_binarize(images, 0)
    with pytest.raises(ValueError, match="look like \\[0, 1\\].*multiply them by 255"):
        dynamic_binarize(images / 255.0, np.random.default_rng(0))


def test_digits_binarized():
    pytest.importorskip("sklearn")
    x, labels = load_digits_binarized()
    assert x.shape == (1797, 64) and x.dtype == np.uint8
    assert labels.shape == (1797,) and set(np.unique(labels)) == set(range(10))
    assert set(np.unique(x)) == {0, 1}
    x16, _ = load_digits_binarized(threshold=16)
    assert x16.sum() < x.sum()


def test_digits_binarized_without_sklearn(monkeypatch):
    monkeypatch.setitem(sys.modules, "sklearn", None)
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)
    with pytest.raises(ImportError, match="pip install scikit-learn"):
        load_digits_binarized()


def test_module_imports_only_numpy():
    """Loaded on its own (zoo/__init__ may import more), the module pulls in no heavy deps."""
    code = (
        "import importlib.util, sys; "
        f"spec = importlib.util.spec_from_file_location('ds', {datasets.__file__!r}); "
        "spec.loader.exec_module(importlib.util.module_from_spec(spec)); "
        "bad = [m for m in ('torch', 'jax', 'sklearn', 'tqdm') if m in sys.modules]; "
        "assert not bad, bad"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_the_cache_is_cache_dir_else_the_user_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert datasets._resolve_cache_dir(tmp_path / "c") == tmp_path / "c"
    assert datasets._resolve_cache_dir("~/c") == tmp_path / "home" / "c"
    user_cache = tmp_path / "home" / ".cache" / "ppl-zoo" / "cache"
    assert datasets._resolve_cache_dir(None) == user_cache
    assert not (tmp_path / "home").exists()  # made by the first array cached, not before


# --- what stands where a data file should be ----------------------------------------------------


def _fifo(path):
    os.mkfifo(path)


def _folder(path):
    path.mkdir()


@pytest.mark.parametrize("make, kind", [(_fifo, "not a regular file"), (_folder, "a folder")])
@pytest.mark.parametrize(
    "load, rel",
    [
        (lambda d: load_binarized_mnist("valid", data_dir=d, cache_dir=d / "c"),
         "binarized_mnist/binarized_mnist_valid.amat"),
        (lambda d: load_mnist("test", data_dir=d, cache_dir=d / "c"),
         "mnist/t10k-images-idx3-ubyte.gz"),
    ],
)  # fmt: skip
def test_a_data_file_that_is_a_folder_or_fifo_is_named_as_such(
    tmp_path, monkeypatch, make, kind, load, rel
):
    monkeypatch.setenv("ZOO_OFFLINE", "1")
    path = tmp_path / rel
    path.parent.mkdir(parents=True)
    make(path)
    with pytest.raises(DatasetError, match=f"{path}.* is {kind}") as info:
        load(tmp_path)  # a FIFO opened for reading would block here
    assert "Missing data file" not in str(info.value)


@pytest.mark.parametrize("how", ["environment", "argument"])
def test_a_data_directory_that_is_a_file_is_named_as_such(tmp_path, monkeypatch, how):
    monkeypatch.setenv("ZOO_OFFLINE", "1")
    not_a_folder = tmp_path / "data.txt"
    not_a_folder.write_text("a file\n")
    monkeypatch.setenv("ZOO_DATA_DIR", str(not_a_folder))
    given = {"data_dir": not_a_folder} if how == "argument" else {}
    for load in (load_binarized_mnist, load_mnist):
        split = "valid" if load is load_binarized_mnist else "test"
        with pytest.raises(DatasetError, match="is not a folder"):
            load(split, cache_dir=tmp_path / "c", **given)


@pytest.mark.parametrize("damage", ["empty", "fifo", "folder", "text"])
def test_a_cached_array_that_cannot_be_read_is_parsed_anew(data_dir, tmp_path, damage):
    first = load_binarized_mnist("valid", data_dir=data_dir, cache_dir=tmp_path)
    npy = tmp_path / "binarized_mnist_valid.npy"
    npy.unlink()
    if damage == "empty":
        npy.write_bytes(b"")
    elif damage == "fifo":
        os.mkfifo(npy)
    elif damage == "folder":
        npy.mkdir()
    else:
        npy.write_text("not an array")
    if damage in ("fifo", "folder"):  # it cannot be replaced: parsed, used, and not cached
        with pytest.warns(UserWarning, match="could not write dataset cache"):
            again = load_binarized_mnist("valid", data_dir=data_dir, cache_dir=tmp_path)
    else:
        again = load_binarized_mnist("valid", data_dir=data_dir, cache_dir=tmp_path)
    np.testing.assert_array_equal(again, first)


# --- the data directory is only read; the cache is the user's --------------------------------


def _tree(root):
    """Every path under ``root``, relative to it, with what it is."""
    return sorted(
        (str(path.relative_to(root)), path.is_symlink(), path.is_dir()) for path in root.rglob("*")
    )


def test_a_load_writes_nothing_in_the_data_directory(data_dir, tmp_path, monkeypatch):
    """A folder of the canonical files is only read: the parsed array goes to the per-user
    cache, which is where a second load finds it."""
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    folder = tmp_path / "data" / "binarized_mnist"
    folder.mkdir(parents=True)
    rel = "binarized_mnist/binarized_mnist_test.amat"
    (tmp_path / "data" / rel).symlink_to(data_dir / rel)
    before = _tree(tmp_path / "data")
    x = load_binarized_mnist("test", data_dir=tmp_path / "data")
    assert _tree(tmp_path / "data") == before
    np.testing.assert_array_equal(x, datasets._parse_amat((data_dir / rel).read_bytes(), rel))
    cached = tmp_path / "home" / ".cache" / "ppl-zoo" / "cache" / "binarized_mnist_test.npy"
    np.testing.assert_array_equal(np.load(cached), x)
    monkeypatch.setattr(datasets, "_parse_amat", None)  # parsing again would fail now
    np.testing.assert_array_equal(load_binarized_mnist("test", data_dir=tmp_path / "data"), x)


def test_a_failed_load_creates_no_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("ZOO_OFFLINE", "1")
    mistyped = tmp_path / "typo" / "data"
    with pytest.raises(DatasetError, match="ZOO_OFFLINE=1"):
        load_binarized_mnist("test", data_dir=mistyped)
    with pytest.raises(DatasetError, match="ZOO_OFFLINE=1"):
        load_mnist("test", data_dir=mistyped)
    assert sorted(p.name for p in tmp_path.iterdir()) == []


# --- a data directory that cannot be written ---------------------------------------------------


def _through_a_file(tmp_path, monkeypatch):
    (tmp_path / "notes.txt").write_text("a file, not a folder\n")
    return tmp_path / "notes.txt" / "data", "Not a directory"


def _read_only(tmp_path, monkeypatch):
    """As on a read-only file system (a folder's mode would not stop the superuser): no file
    can be created in the data directory."""
    from zoo import files

    def refuse(directory, name):
        raise OSError(errno.EROFS, os.strerror(errno.EROFS), os.path.join(directory, name))

    monkeypatch.setattr(files, "_create_temporary", refuse)
    (tmp_path / "data").mkdir()
    return tmp_path / "data", os.strerror(errno.EROFS)


@pytest.mark.parametrize(
    "where", [_through_a_file, _read_only], ids=["through a file", "read-only"]
)
@pytest.mark.parametrize("load", [load_mnist, load_binarized_mnist])
def test_a_data_directory_that_cannot_be_written_is_named_before_any_download(
    tmp_path, monkeypatch, where, load
):
    monkeypatch.delenv("ZOO_OFFLINE", raising=False)  # a download would be tried; none is
    data, reason = where(tmp_path, monkeypatch)
    with pytest.raises(DatasetError) as info:
        load("test", data_dir=data, cache_dir=tmp_path / "cache")
    msg = " ".join(str(info.value).split())
    assert f"the data directory {data} cannot be created or written ({reason}" in msg
    assert "download failed" not in msg
    assert "Set ZOO_DATA_DIR (or pass data_dir=) to a folder that can be written" in msg
    assert "put the file at " + str(data) in msg


# --- dynamic_binarize refuses what is not grey levels ------------------------------------------


@pytest.mark.parametrize("dtype", [np.uint8, np.int64, bool])
def test_dynamic_binarize_refuses_images_that_are_binary_already(dtype):
    binary = (np.random.default_rng(0).random((5, 784)) < 0.13).astype(dtype)
    with pytest.raises(ValueError, match="binary already.*load_binarized_mnist"):
        dynamic_binarize(binary, np.random.default_rng(0))


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_dynamic_binarize_refuses_non_finite_values(bad):
    images = np.array([[0.0, 128.0, 255.0, bad]])
    with pytest.raises(ValueError, match="NaN or infinite"):
        dynamic_binarize(images, np.random.default_rng(0))


@pytest.mark.parametrize("dtype", [np.uint8, np.int64, np.float32, np.float64])
def test_dynamic_binarize_of_grey_levels_is_a_bernoulli_draw_per_pixel(dtype):
    images = np.random.default_rng(1).integers(0, 256, size=(50, 28, 28)).astype(dtype)
    images[0, 0, 0], images.flat[-1] = 0, 255
    expected = np.random.default_rng(7).random(images.shape) < images.astype(np.float64) / 255
    got = dynamic_binarize(images, np.random.default_rng(7))
    assert got.dtype == np.uint8
    np.testing.assert_array_equal(got, expected.astype(np.uint8))
    black = np.zeros((2, 3), dtype=dtype)  # all 0: no pixel on, and no error
    np.testing.assert_array_equal(dynamic_binarize(black, np.random.default_rng(0)), black)
