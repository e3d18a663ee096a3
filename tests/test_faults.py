"""Fault injection: checkpoints, saved fits, concurrent fits and datasets under bad paths, damaged
or crafted files and interference. Each fault must end in an error of the project's own classes
whose message names the argument, file or member at fault, and must change or lose no file of the
user's. (The shell's faults are in ``test_faults_cli.py``, bad options and data in
``test_faults_options.py``.)"""

import io
import json
import os
import subprocess
import sys
import textwrap
import threading
import zipfile

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import inference
from inference.api import ConcurrentFitError
from inference.persistence import checkpoint, checkpoint_guard
from zoo import datasets, files

FAST = dict(algorithm="cavi", backend="pyro", K=2, num_steps=3, progress=False)


@pytest.fixture(scope="module")
def data():
    return {"x": np.random.default_rng(0).normal(size=(40, 2))}


@pytest.fixture(scope="module")
def saved(data, tmp_path_factory):
    """A saved fit, and its bytes."""
    path = tmp_path_factory.mktemp("saved") / "fit.zoo"
    inference.fit("bayesian_gmm", data, **FAST).save(path)
    return path, path.read_bytes()


def _snapshot(folder):
    return {p: p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def _fit_never_steps(data, **kwargs):
    """A fit whose first step fails the test: the fault must be found before it."""

    def no_step(step, state, info):
        raise AssertionError("the fit took a step before finding the fault")

    return inference.fit("bayesian_gmm", data, callback=no_step, **FAST, **kwargs)


def test_a_callback_that_raises_has_its_step_checkpointed(tmp_path, data):
    """A callback may raise to stop the run: the step it saw is saved first, as on Ctrl-C."""
    path = tmp_path / "run.zoo"

    class Stop(Exception):
        pass

    def stop_at_two(step, state, info):
        if step == 2:
            raise Stop

    with pytest.raises(Stop):
        inference.fit(
            "bayesian_gmm", data, **{**FAST, "num_steps": 5}, tol=0, checkpoint=path,
            checkpoint_every=100, callback=stop_at_two,
        )  # fmt: skip
    assert checkpoint.load(path)[0]["step"] == 2


# --- checkpoint paths: found before the first step, no user file overwritten ----------------


def _user_npy(tmp_path):
    np.save(tmp_path / "mine.npy", np.arange(3.0))
    return tmp_path / "mine.npy"


def _user_text(tmp_path):
    (tmp_path / "notes.txt").write_text("my notes")
    return tmp_path / "notes.txt"


def _saved_fit(tmp_path, data):
    inference.fit("bayesian_gmm", data, **FAST).save(tmp_path / "result.zoo")
    return tmp_path / "result.zoo"


def _a_file_as_parent(tmp_path, data):
    (tmp_path / "plain").write_text("x")
    return tmp_path / "plain" / "fit.ckpt"


BAD_CHECKPOINTS = {
    "a directory": (lambda t, d: t, {}, ValueError, "is a directory"),
    "a missing directory": (lambda t, d: t / "nope" / "fit.ckpt", {}, ValueError, "not exist"),
    "a file as its directory": (_a_file_as_parent, {}, ValueError, "not exist"),
    "a user's .npy": (lambda t, d: _user_npy(t), {}, inference.CheckpointError, "not a checkpoint"),
    "a user's text": (
        lambda t, d: _user_text(t),
        {},
        inference.CheckpointError,
        "not a checkpoint",
    ),
    "a saved fit": (_saved_fit, {}, inference.CheckpointError, "a saved fit"),
    "a saved fit, resumed": (_saved_fit, {"resume": True}, inference.CheckpointError, "saved fit"),
    "a user's .npy, resumed": (
        lambda t, d: _user_npy(t),
        {"resume": True},
        inference.CheckpointError,
        "mine.npy",
    ),
    "an empty file": (
        lambda t, d: _user_text(t).write_bytes(b"") or t / "notes.txt",
        {},
        inference.CheckpointError,
        "not a checkpoint",
    ),
    "a number": (lambda t, d: 123, {}, TypeError, "checkpoint="),
}


@pytest.mark.parametrize("case", BAD_CHECKPOINTS, ids=list(BAD_CHECKPOINTS))
def test_a_bad_checkpoint_path_is_refused_before_the_first_step(case, data, tmp_path):
    make, extra, error, words = BAD_CHECKPOINTS[case]
    path = make(tmp_path, data)
    before = _snapshot(tmp_path)
    with pytest.raises(error, match=words) as info:
        _fit_never_steps(data, checkpoint=path, checkpoint_every=1000, **extra)
    assert "checkpoint" in str(info.value) or str(path) in str(info.value)
    assert _snapshot(tmp_path) == before


def test_checkpoint_every_without_a_checkpoint_is_refused(data):
    with pytest.raises(ValueError, match="checkpoint_every= needs checkpoint="):
        _fit_never_steps(data, checkpoint_every=5)


@pytest.mark.parametrize("every", [0, -1, 1.5, "10", True])
def test_a_bad_checkpoint_interval_is_refused(every, data, tmp_path):
    with pytest.raises(ValueError, match="checkpoint_every must be an int"):
        _fit_never_steps(data, checkpoint=tmp_path / "fit.ckpt", checkpoint_every=every)
    assert list(tmp_path.iterdir()) == []


def test_a_directory_that_cannot_be_written_is_refused_up_front(data, tmp_path, monkeypatch):
    # Simulated: permission bits do not stop the superuser, whom tests may run as.
    def refuse(directory, name="probe"):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(files, "probe_writable", refuse)
    with pytest.raises(ValueError, match="cannot write in .*Permission denied"):
        _fit_never_steps(data, checkpoint=tmp_path / "fit.ckpt")


def test_the_checkpoint_of_another_run_is_overwritten_by_a_fresh_run(data, tmp_path):
    path = tmp_path / "fit.ckpt"
    inference.fit("bayesian_gmm", data, checkpoint=path, checkpoint_every=1, **FAST)
    inference.fit("bayesian_gmm", data, checkpoint=path, checkpoint_every=1, seed=1, **FAST)
    assert checkpoint.read_header(path)["seed"] == 1


# --- one writer per checkpoint --------------------------------------------------------------


def test_a_checkpoint_in_use_in_this_process_is_refused(data, tmp_path):
    path = tmp_path / "fit.ckpt"
    with checkpoint_guard.exclusive(path):
        with pytest.raises(inference.CheckpointInUseError, match="this process"):
            _fit_never_steps(data, checkpoint=path)
    result = inference.fit("bayesian_gmm", data, checkpoint=path, **FAST)  # free again
    assert result.num_steps == 3
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fit.ckpt"]  # no lock file left


def test_a_checkpoint_in_use_by_another_process_names_it(data, tmp_path):
    path = tmp_path / "fit.ckpt"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import sys, time
                from inference.persistence.checkpoint_guard import exclusive
                with exclusive({str(path)!r}):
                    print("held", flush=True)
                    sys.stdin.readline()
                """
            ),
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(inference.CheckpointInUseError, match=f"process {holder.pid}"):
            _fit_never_steps(data, checkpoint=path)
    finally:
        holder.communicate("\n", timeout=60)
    assert not os.path.exists(str(path) + ".lock")


def test_a_lock_file_left_by_a_killed_run_does_not_block(data, tmp_path):
    path = tmp_path / "fit.ckpt"
    (tmp_path / "fit.ckpt.lock").write_text('{"pid": 1, "host": "elsewhere", "since": 0}')
    assert inference.fit("bayesian_gmm", data, checkpoint=path, **FAST).num_steps == 3


def test_temporary_files_of_a_killed_writer_are_removed_by_the_next_run(data, tmp_path):
    path = tmp_path / "fit.ckpt"
    stale = tmp_path / ".tmp-fit.ckpt.0123456789ab"  # what SIGKILL mid-write leaves
    stale.write_bytes(b"half a checkpoint")
    other = tmp_path / ".tmp-other.ckpt.0123456789ab"  # another file's: not ours to remove
    other.write_bytes(b"x")
    inference.fit("bayesian_gmm", data, checkpoint=path, checkpoint_every=1, **FAST)
    assert not stale.exists() and other.exists()


def test_a_checkpoint_killed_mid_write_leaves_the_previous_one(data, tmp_path, monkeypatch):
    path = tmp_path / "fit.ckpt"
    inference.fit("bayesian_gmm", data, checkpoint=path, checkpoint_every=1, **FAST)
    before = path.read_bytes()

    def dies(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(np, "savez", dies)
    with pytest.raises(KeyboardInterrupt):
        inference.fit("bayesian_gmm", data, checkpoint=path, checkpoint_every=1, seed=2, **FAST)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fit.ckpt"]


# --- one fit at a time per process ----------------------------------------------------------


def test_a_second_fit_on_another_thread_is_refused_at_its_start(data):
    started, release, errors = threading.Event(), threading.Event(), []

    def wait_in_the_first_step(step, state, info):
        started.set()
        release.wait(60)

    def first():
        try:
            inference.fit("bayesian_gmm", data, callback=wait_in_the_first_step, **FAST)
        except Exception as err:  # reported below
            errors.append(err)

    thread = threading.Thread(target=first, name="first-fit")
    thread.start()
    try:
        assert started.wait(60)
        for backend in ("pyro", "numpyro"):
            with pytest.raises(ConcurrentFitError, match="thread 'first-fit'"):
                inference.fit("bayesian_gmm", data, **{**FAST, "backend": backend})
    finally:
        release.set()
        thread.join(60)
    assert not errors
    assert inference.fit("bayesian_gmm", data, **FAST).num_steps == 3  # free again


def test_a_fit_started_from_a_callback_is_refused(data):
    def nested(step, state, info):
        inference.fit("bayesian_gmm", data, **FAST)

    with pytest.raises(ConcurrentFitError, match="callback"):
        inference.fit("bayesian_gmm", data, callback=nested, **FAST)
    assert inference.fit("bayesian_gmm", data, **FAST).num_steps == 3


# --- damaged and crafted files --------------------------------------------------------------


def _members(blob: bytes) -> dict[str, bytes]:
    with zipfile.ZipFile(io.BytesIO(blob)) as zf:
        return {info.filename: zf.read(info) for info in zf.infolist()}


def _zip(members: dict[str, bytes], compression=zipfile.ZIP_STORED) -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", compression) as zf:
        for name, payload in members.items():
            zf.writestr(name, payload)
    return out.getvalue()


def _npy(array) -> bytes:
    out = io.BytesIO()
    np.save(out, array, allow_pickle=True)
    return out.getvalue()


def _header_of(members):
    return json.loads(np.load(io.BytesIO(members["__header__.npy"])).tobytes())


def _with_header(members, header):
    return {**members, "__header__.npy": _npy(np.frombuffer(json.dumps(header).encode(), np.uint8))}


def _edit(blob, drop=(), replace=None, header=None, manifest=False):
    """The saved fit with members dropped or replaced, its header edited; with
    ``manifest=True`` the header's record of its arrays is made to agree (a crafted file)."""
    members = {k: v for k, v in _members(blob).items() if k.removesuffix(".npy") not in drop}
    for key, array in (replace or {}).items():
        members[key + ".npy"] = _npy(array)
    head = _header_of(members)
    for key, value in (header or {}).items():
        if value is None:
            head.pop(key, None)
        else:
            head[key] = value
    if manifest:
        arrays = {
            k.removesuffix(".npy"): np.load(io.BytesIO(v))
            for k, v in members.items()
            if k != "__header__.npy"
        }
        head["arrays"] = {k: [list(v.shape), v.dtype.str] for k, v in arrays.items()}
    return _zip(_with_header(members, head))


def _huge_shape(blob):
    header = b"{'descr': '<f8', 'fortran_order': False, 'shape': (1000000000000,), }"
    header += b" " * (117 - len(header)) + b"\n"
    fake = b"\x93NUMPY\x01\x00" + len(header).to_bytes(2, "little") + header + b"\0" * 64
    return _zip({**_members(blob), "raw/mean_loc.npy": fake})


def _zip_bomb(blob):
    members = _members(blob)
    bomb = _npy(np.zeros(20_000_000, np.uint8))  # 20 MB of zeros deflate to about 20 kB
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, payload in members.items():
            zf.writestr(name, payload, compress_type=zipfile.ZIP_STORED)
        zf.writestr("history/bomb.npy", bomb)
    return out.getvalue()


def _encrypted(blob):
    """The first central directory entry's "encrypted" flag bit set (one flipped bit)."""
    at = blob.index(b"PK\x01\x02") + 8
    return blob[:at] + bytes([blob[at] | 1]) + blob[at + 1 :]


def _npy_version_3(blob):
    header = b"{'descr': '<f8', 'fortran_order': False, 'shape': (2,), }"
    header += b" " * (117 - len(header) - 2) + b"\n"
    odd = b"\x93NUMPY\x03\x00" + len(header).to_bytes(4, "little") + header + bytes(16)
    return _zip({**_members(blob), "raw/stick_a.npy": odd})


DAMAGED = {
    "not a zip": (lambda b: b"plain text, not a zip", "no readable zip"),
    "empty": (lambda b: b"", "no readable zip"),
    "truncated": (lambda b: b[: len(b) // 2], "no readable zip"),
    "tail cut": (lambda b: b[:-10], "zip"),
    "a bare .npy": (lambda b: _npy(np.arange(3.0)), "no readable zip"),
    "a pickled .npy": (lambda b: _npy(np.array([{"a": 1}], dtype=object)), "no readable zip"),
    "a zip without header": (
        lambda b: _zip({"raw/a.npy": _npy(np.ones(2))}),
        "without a zoo header",
    ),
    "header not JSON": (
        lambda b: _zip({"__header__.npy": _npy(np.frombuffer(b"{not json", np.uint8))}),
        "not a readable zoo file",
    ),
    "header a list": (
        lambda b: _zip({"__header__.npy": _npy(np.frombuffer(b"[1, 2]", np.uint8))}),
        "format",
    ),
    "deeply nested header": (
        lambda b: _zip({"__header__.npy": _npy(np.frombuffer(b"[" * 100_000, np.uint8))}),
        "not a readable zoo file",
    ),
    "another format": (lambda b: _edit(b, header={"format": "other/9"}), "'other/9'"),
    "a checkpoint, not a fit": (lambda b: _edit(b, header={"kind": "checkpoint"}), "not a saved"),
    "an object array": (
        lambda b: _zip({**_members(b), "raw/x.npy": _npy(np.array([None], dtype=object))}),
        "raw/x.npy",
    ),
    "a member flagged as encrypted": (
        lambda b: _encrypted(b),
        "encrypted",
    ),
    "a member that is not .npy": (lambda b: _zip({**_members(b), "notes.txt": b"hi"}), "notes.txt"),
    "a declared terabyte": (_huge_shape, "raw/mean_loc.npy' declares"),
    "a zip bomb": (_zip_bomb, "expand"),
    "an unknown .npy version": (_npy_version_3, "raw/stick_a.npy"),
    "a raw array missing": (lambda b: _edit(b, drop=["raw/mean_loc"]), "'raw/mean_loc'"),
    "a raw array missing, crafted": (
        lambda b: _edit(b, drop=["raw/mean_loc"], manifest=True),
        "raw/mean_loc",
    ),
    "a summary missing": (lambda b: _edit(b, drop=["params/means"]), "params/means"),
    "a summary missing, crafted": (
        lambda b: _edit(b, drop=["params/means"], manifest=True),
        "params/means",
    ),
    "an extra member": (lambda b: _edit(b, replace={"raw/extra": np.ones(2)}), "raw/extra"),
    "a wrong shape": (
        lambda b: _edit(b, replace={"raw/mean_loc": np.zeros((5, 2))}),
        "raw/mean_loc",
    ),
    "a wrong shape, crafted": (
        lambda b: _edit(b, replace={"raw/mean_loc": np.zeros((5, 2))}, manifest=True),
        "raw parameters|params/",
    ),
    "a wrong dtype": (
        lambda b: _edit(b, replace={"params/weights": np.zeros(2, np.float32)}),
        "params/weights",
    ),
    "history of two lengths, crafted": (
        lambda b: _edit(b, replace={"history/step": np.arange(7)}, manifest=True),
        "history",
    ),
    "a config of the wrong type": (
        lambda b: _edit(b, header={"config": {**_header_of(_members(b))["config"], "K": "2"}}),
        "config 'K'",
    ),
    "a config missing": (
        lambda b: _edit(b, header={"config": {"K": 2}}),
        "config 'weight_prior'",
    ),
    "an unknown config": (
        lambda b: _edit(b, header={"config": {**_header_of(_members(b))["config"], "Z": 1}}),
        "config 'Z'",
    ),
    "a config array of text": (
        lambda b: _edit(b, replace={"config/mean_prior": np.array(["a", "b"])}, manifest=True),
        "config 'mean_prior'",
    ),
    "a header field missing": (lambda b: _edit(b, header={"converged": None}), "converged"),
    "a header field of the wrong type": (lambda b: _edit(b, header={"num_data": "40"}), "num_data"),
    "a negative seed": (lambda b: _edit(b, header={"seed": -1}), "seed"),
    "a bad best step": (lambda b: _edit(b, header={"best_step": "x"}), "best_step"),
    "a damaged manifest": (lambda b: _edit(b, header={"arrays": [1]}), "manifest"),
    "an unknown model": (lambda b: _edit(b, header={"model": "no_such_model"}), "no_such_model"),
}


@pytest.mark.parametrize("case", DAMAGED, ids=list(DAMAGED))
def test_a_damaged_or_crafted_file_is_refused_naming_the_cause(case, saved, tmp_path):
    make, words = DAMAGED[case]
    path = tmp_path / "fit.zoo"
    path.write_bytes(make(saved[1]))
    with pytest.raises(inference.CheckpointError, match=words) as info:
        inference.load(path)
    assert str(path) in str(info.value)


def test_a_directory_or_a_missing_file_is_refused(tmp_path):
    with pytest.raises(inference.CheckpointError, match="is a directory"):
        inference.load(tmp_path)
    with pytest.raises(FileNotFoundError, match="nope.zoo"):
        inference.load(tmp_path / "nope.zoo")


def test_a_zip64_file_loads(saved, tmp_path, monkeypatch):
    """Files with more than 65,535 members or over 4 GiB are zip64; one is made here with three
    members by lowering the count at which zipfile switches."""
    monkeypatch.setattr(zipfile, "ZIP_FILECOUNT_LIMIT", 1)
    path = tmp_path / "zip64.zoo"
    checkpoint.save(path, {"kind": "test"}, {"a": np.arange(3.0), "b": np.eye(2)})
    assert b"PK\x06\x06" in path.read_bytes()  # the zip64 end of central directory
    header, arrays = checkpoint.load(path)
    assert header["kind"] == "test"
    np.testing.assert_array_equal(arrays["b"], np.eye(2))


def test_a_loaded_fit_equals_the_saved_one_and_its_arrays_are_writable(saved):
    result = inference.load(saved[0])
    assert all(v.flags.writeable for v in result.raw_params.values())
    assert set(result.params) == {"weights", "means", "covariances", "n_effective_components"}


def test_a_checkpoint_with_an_array_of_the_wrong_shape_is_refused_on_resume(data, tmp_path):
    path = tmp_path / "fit.ckpt"
    inference.fit("bayesian_gmm", data, checkpoint=path, checkpoint_every=1, **FAST)
    blob = path.read_bytes()
    victim = next(k for k in _members(blob) if k.startswith("inner")).removesuffix(".npy")
    # Crafted, with the manifest made to agree: the state's own check refuses it.
    path.write_bytes(_edit(blob, replace={victim: np.zeros((7, 7, 7))}, manifest=True))
    with pytest.raises(inference.CheckpointError, match="state's array .* shape \\(7, 7, 7\\)"):
        inference.fit("bayesian_gmm", data, checkpoint=path, resume=True, **FAST)


def test_a_checkpoint_with_an_array_missing_is_refused_on_resume(data, tmp_path):
    path = tmp_path / "fit.ckpt"
    inference.fit("bayesian_gmm", data, checkpoint=path, checkpoint_every=1, **FAST)
    blob = path.read_bytes()
    victim = next(k for k in _members(blob) if k.startswith("inner")).removesuffix(".npy")
    path.write_bytes(_edit(blob, drop=[victim], manifest=True))
    with pytest.raises(inference.CheckpointError, match="lacks the state's array"):
        inference.fit("bayesian_gmm", data, checkpoint=path, resume=True, **FAST)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(blob=st.binary(max_size=2048))
def test_any_bytes_give_a_checkpoint_error(blob, tmp_path_factory):
    path = tmp_path_factory.mktemp("any") / "f.zoo"
    path.write_bytes(blob)
    with pytest.raises(inference.CheckpointError):
        inference.load(path)


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_a_damaged_saved_fit_loads_correctly_or_gives_a_checkpoint_error(
    data, saved, tmp_path_factory
):
    """Bytes flipped, cut or inserted anywhere: a load either fails with CheckpointError or gives
    back exactly what was saved (a flip in a zip's slack, such as a comment, changes nothing)."""
    blob = bytearray(saved[1])
    how = data.draw(st.sampled_from(["flip", "cut", "insert"]))
    at = data.draw(st.integers(0, len(blob) - 1))
    if how == "flip":
        blob[at] ^= data.draw(st.integers(1, 255))
    elif how == "cut":
        del blob[at : at + data.draw(st.integers(1, 64))]
    else:
        blob[at:at] = data.draw(st.binary(min_size=1, max_size=16))
    path = tmp_path_factory.mktemp("damaged") / "f.zoo"
    path.write_bytes(bytes(blob))
    try:
        result = inference.load(path)
    except inference.CheckpointError:
        return
    original = inference.load(saved[0])
    for key, value in original.raw_params.items():
        np.testing.assert_array_equal(result.raw_params[key], value)
    assert result.config.K == original.config.K


# --- datasets -------------------------------------------------------------------------------


@pytest.fixture
def offline(monkeypatch):
    monkeypatch.setenv("ZOO_OFFLINE", "1")


DATASET_FAULTS = {
    "mnist split": (lambda d: datasets.load_mnist("valid", data_dir=d), ValueError, "split"),
    "binarized split": (
        lambda d: datasets.load_binarized_mnist("dev", data_dir=d),
        ValueError,
        "split",
    ),
    "missing mnist, offline": (
        lambda d: datasets.load_mnist("test", data_dir=d),
        datasets.DatasetError,
        "t10k-images",
    ),
    "missing binarized, offline": (
        lambda d: datasets.load_binarized_mnist("test", data_dir=d),
        datasets.DatasetError,
        "binarized_mnist_test.amat",
    ),
    "download, offline": (lambda d: datasets.download(d), datasets.DatasetError, "ZOO_OFFLINE"),
    "mnist file of junk": (
        lambda d: (
            (d / "mnist").mkdir(),
            (d / "mnist" / "t10k-images-idx3-ubyte.gz").write_bytes(b"junk"),
            datasets.load_mnist("test", data_dir=d),
        ),
        datasets.DatasetError,
        "t10k-images-idx3-ubyte.gz",
    ),
    "binarized file of junk": (
        lambda d: (
            (d / "binarized_mnist").mkdir(),
            (d / "binarized_mnist" / "binarized_mnist_valid.amat").write_text("0 1\n"),
            datasets.load_binarized_mnist("valid", data_dir=d),
        ),
        datasets.DatasetError,
        "binarized_mnist_valid.amat",
    ),
}


@pytest.mark.parametrize("case", DATASET_FAULTS, ids=list(DATASET_FAULTS))
def test_a_dataset_fault_names_the_file_or_argument(case, tmp_path, offline):
    load, error, words = DATASET_FAULTS[case]
    with pytest.raises(error, match=words):
        load(tmp_path)


def test_the_temporary_file_pattern_matches_what_atomic_write_makes(tmp_path, monkeypatch):
    """The clean-up must recognise the names atomic_write gives its temporaries."""
    seen = []
    real_replace = os.replace

    def spy(src, dst):
        seen.append(os.path.basename(src))
        os.link(src, os.path.join(os.path.dirname(src), "kept-" + os.path.basename(src)))
        real_replace(src, dst)

    monkeypatch.setattr(os, "replace", spy)
    files.atomic_write(tmp_path / "f.bin", lambda f: f.write(b"x"))
    os.rename(tmp_path / f"kept-{seen[0]}", tmp_path / seen[0])
    assert files.remove_stale_temporaries(tmp_path / "f.bin") == [str(tmp_path / seen[0])]


# --- saving and plotting from Python ---------------------------------------------------------


def test_saving_into_a_missing_directory_or_onto_a_directory_is_refused(saved, tmp_path):
    result = inference.load(saved[0])
    with pytest.raises(FileNotFoundError, match="does not exist"):
        result.save(tmp_path / "nope" / "fit.zoo")
    with pytest.raises(IsADirectoryError, match="is a directory"):
        result.save(tmp_path)
    assert list(tmp_path.iterdir()) == []  # no directory made, nothing written


def test_plotting_a_comparison_onto_a_directory_is_refused(data, tmp_path):
    table = inference.compare(
        "bayesian_gmm", data, algorithms=["cavi"], backends=["pyro"], K=2, num_steps=2
    )
    with pytest.raises(IsADirectoryError, match="is a directory"):
        table.plot(tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_a_writability_probe_whose_file_another_writer_removed_passes(tmp_path, monkeypatch):
    """A fit that takes a checkpoint's lock removes that checkpoint's temporaries, the probe of
    a second fit on the same path included: the probe still says the folder is writable (the
    second fit is then told the checkpoint is in use), not "No such file or directory"."""
    create = files._create_temporary

    def create_then_lose(directory, name):
        fd, tmp = create(directory, name)
        files.remove_stale_temporaries(os.path.join(directory, name))
        return fd, tmp

    monkeypatch.setattr(files, "_create_temporary", create_then_lose)
    files.probe_writable(tmp_path, "run.zoo")
    assert files.unwritable_reason(tmp_path / "run.zoo") is None
