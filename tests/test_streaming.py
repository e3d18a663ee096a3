"""Data larger than memory: memory-mapped arrays, streams of minibatches, and their faults."""

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import inference
from inference.minibatch import PermutedBatches
from inference.persistence.checkpoint import load as load_checkpoint
from inference.streaming import DataError, StreamEndedError

ROOT = Path(__file__).resolve().parents[1]
N, B = 300, 50
PRIORS = dict(K=3)


@pytest.fixture
def mapped(tmp_path, gmm_data):
    np.save(tmp_path / "x.npy", gmm_data)
    return np.load(tmp_path / "x.npy", mmap_mode="r")


def same_batches(x, seed, num_steps, nan_at=None):
    """The minibatches a memory-mapped array of ``x`` gives, as a stream."""
    batches = PermutedBatches(len(x), B, seed)
    for step in range(num_steps):
        batch = np.array(x[batches.indices(step)])
        if step == nan_at:
            batch[7, 1] = np.nan
        yield batch


def fit(data, backend="numpyro", **kwargs):
    options = dict(algorithm="svi-natural", backend=backend, progress=False, seed=0, **PRIORS)
    return inference.fit("bayesian_gmm", data, **{**options, **kwargs})


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_memmap_and_stream_take_the_same_steps(mapped, gmm_data, backend):
    """A stream of the very minibatches a memory-mapped file gives: the same fit, to the bit;
    data-dependent defaults and the start come from the first minibatch in both."""
    res = fit({"x": mapped}, backend, batch_size=B, num_steps=12)
    assert isinstance(res.data["x"], np.memmap)  # the result refers to the file, no copy
    assert res.num_data == N and res.options["batch_size"] == B
    streamed = fit(same_batches(gmm_data, 0, 12), backend, num_data=N, num_steps=12)
    assert streamed.data is None and streamed.num_data == N
    np.testing.assert_array_equal(streamed.history["objective"], res.history["objective"])
    for k in res.raw_params:
        np.testing.assert_array_equal(streamed.raw_params[k], res.raw_params[k])
    # Objectives are full-data ELBO estimates (num_data / batch scaling), nats summed over N.
    assert -6 * N < res.objective < -3 * N


def test_gradient_svi_on_a_memmap(mapped):
    res = inference.fit(
        "bayesian_gmm",
        {"x": mapped},
        "svi",
        "pyro",
        guide="enum",
        batch_size=B,
        num_steps=20,
        progress=False,
        **PRIORS,
    )
    h = res.history["objective"]
    assert np.all(np.isfinite(h)) and -8 * N < h[-5:].mean() < -3 * N
    # The Gumbel-softmax guide has no parameter per data point: it fits on minibatches too.
    res = inference.fit(
        "bayesian_gmm", {"x": mapped}, "svi", "pyro", guide="gumbel", batch_size=B,
        num_steps=20, progress=False, **PRIORS,
    )  # fmt: skip
    h = res.history["objective"]
    assert np.all(np.isfinite(h)) and -8 * N < h[-5:].mean() < -3 * N


def test_stream_that_ends_early_saves_and_resumes(tmp_path, gmm_data):
    path = tmp_path / "run.zoo"
    kwargs = dict(backend="pyro", num_data=N, num_steps=20)
    full = fit(same_batches(gmm_data, 0, 20), **kwargs)
    with pytest.raises(StreamEndedError, match="ended after 13 minibatch.*step 14 of num_steps=20"):
        fit(same_batches(gmm_data, 0, 13), checkpoint=path, **kwargs)
    header, _ = load_checkpoint(path)
    assert header["step"] == 13  # the last completed step, saved as the run stopped
    # Resume: the stream from its start again; the steps taken are skipped.
    resumed = fit(same_batches(gmm_data, 0, 20), checkpoint=path, resume=True, **kwargs)
    np.testing.assert_array_equal(resumed.history["objective"], full.history["objective"])
    for k in full.raw_params:
        np.testing.assert_array_equal(resumed.raw_params[k], full.raw_params[k])


def test_resume_refuses_a_stream_of_other_minibatches(tmp_path, gmm_data):
    """A stream is identified by num_data and its first minibatch when the fit starts; the
    minibatches read again on resume must also be those the checkpointed steps took."""
    path = tmp_path / "run.zoo"
    kwargs = dict(backend="pyro", num_data=N, num_steps=12)
    with pytest.raises(StreamEndedError):
        fit(same_batches(gmm_data, 0, 6), checkpoint=path, **kwargs)
    assert load_checkpoint(path)[0]["stream_read"]["minibatches"] == 6
    first, *rest = same_batches(gmm_data, 0, 12)
    other = [first, *(b[::-1] for b in rest)]  # the same first minibatch, then other rows
    with pytest.raises(DataError, match="another stream: the first 6 minibatch"):
        fit(iter(other), checkpoint=path, resume=True, **kwargs)
    assert load_checkpoint(path)[0]["step"] == 6  # the refused resume wrote nothing


def test_a_step_that_fails_after_reading_its_minibatch_leaves_it_out_of_the_record(
    tmp_path, gmm_data, monkeypatch
):
    """A step that raises (a lost worker, a device out of memory) after reading its minibatch
    is not checkpointed, nor is its minibatch: a resume with that minibatch mended continues."""
    path = tmp_path / "run.zoo"
    natural = inference.get_algorithm("svi-natural")
    step, calls = natural.step, []

    def fails_on_the_fourth(state):
        calls.append(1)
        out = step(state)
        if len(calls) == 4:
            raise RuntimeError("lost the device")
        return out

    monkeypatch.setattr(natural, "step", fails_on_the_fourth)
    kwargs = dict(backend="pyro", num_data=N, num_steps=6)
    with pytest.raises(RuntimeError, match="lost the device"):
        fit(same_batches(gmm_data, 0, 6), checkpoint=path, **kwargs)
    header = load_checkpoint(path)[0]
    assert header["step"] == 3 and header["stream_read"]["minibatches"] == 3
    monkeypatch.setattr(natural, "step", step)
    mended = list(same_batches(gmm_data, 0, 6))
    mended[3] = mended[3][::-1]
    resumed = fit(iter(mended), checkpoint=path, resume=True, **kwargs)
    assert resumed.num_steps == 6


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_nan_in_a_minibatch_names_the_step(tmp_path, gmm_data, backend):
    path = tmp_path / "run.zoo"
    stream = same_batches(gmm_data, 0, 10, nan_at=6)
    # Row 7 of the seventh minibatch of B rows: row 6 * B + 7 of the stream.
    with pytest.raises(
        DataError, match=rf"minibatch of step 7 .*NaN or inf in 1 row\(s\): {6 * B + 7}\."
    ):
        fit(stream, backend, num_data=N, num_steps=10, checkpoint=path, checkpoint_every=100)
    assert load_checkpoint(path)[0]["step"] == 6
    # The refused minibatch is not among those the checkpoint says its steps took: the stream
    # mended resumes.
    full = fit(same_batches(gmm_data, 0, 10), backend, num_data=N, num_steps=10)
    resumed = fit(
        same_batches(gmm_data, 0, 10), backend, num_data=N, num_steps=10, checkpoint=path,
        resume=True,
    )  # fmt: skip
    np.testing.assert_array_equal(resumed.history["objective"], full.history["objective"])


def test_memmap_with_nan_rows(tmp_path, gmm_data):
    x = gmm_data.copy()
    x[np.arange(N) % 7 == 3, 0] = np.nan  # in every minibatch
    np.save(tmp_path / "bad.npy", x)
    with pytest.raises(DataError, match="minibatch of step 1 is not valid"):
        fit({"x": np.load(tmp_path / "bad.npy", mmap_mode="r")}, batch_size=B, num_steps=5)


def test_a_copy_on_write_map_is_read_as_edited(tmp_path, gmm_data):
    """A copy-on-write map's edits never reach its file: its rows are read through the map,
    whose pages are kept (the fit took the file's rows, and handing the pages back to the
    kernel dropped the caller's edits for good)."""
    np.save(tmp_path / "x.npy", gmm_data)
    edited = np.load(tmp_path / "x.npy", mmap_mode="c")
    edited[:, 0] += 10.0
    np.save(tmp_path / "edited.npy", np.asarray(edited))
    as_edited = np.load(tmp_path / "edited.npy", mmap_mode="r")
    a = fit({"x": edited}, "pyro", batch_size=B, num_steps=3, tol=0)
    b = fit({"x": as_edited}, "pyro", batch_size=B, num_steps=3, tol=0)
    np.testing.assert_array_equal(a.history["objective"], b.history["objective"])
    np.testing.assert_array_equal(edited, as_edited)  # the edits are still there after the fit


def test_a_list_of_tensors_is_a_list_of_minibatches(gmm_data):
    import torch

    batches = [gmm_data[i : i + B] for i in range(0, 2 * B, B)]
    tensors = fit([torch.as_tensor(b) for b in batches], "pyro", num_data=N, num_steps=2, tol=0)
    arrays = fit(batches, "pyro", num_data=N, num_steps=2, tol=0)
    np.testing.assert_array_equal(tensors.history["objective"], arrays.history["objective"])


def test_data_are_fingerprinted_for_a_checkpoint_only(tmp_path, mapped, monkeypatch):
    """The fingerprint reads a memory-mapped file whole: a fit without a checkpoint, which has
    no header to write it in, does not take it."""
    from inference import streaming

    calls = []
    real = streaming.fingerprint
    monkeypatch.setattr(streaming, "fingerprint", lambda source: calls.append(1) or real(source))
    fit({"x": mapped}, "pyro", batch_size=B, num_steps=2, tol=0)
    assert not calls
    fit({"x": mapped}, "pyro", batch_size=B, num_steps=2, tol=0, checkpoint=tmp_path / "c.zoo")
    assert calls


def test_bad_streaming_input(mapped, gmm_data):
    with pytest.raises(TypeError, match="needs num_data="):
        fit(iter([gmm_data[:B]]), num_steps=1)
    with pytest.raises(ValueError, match="batch_size= is for arrays"):
        fit(iter([gmm_data[:B]]), num_data=N, batch_size=B, num_steps=1)
    with pytest.raises(ValueError, match="need batch_size="):
        fit({"x": mapped}, num_steps=1)
    with pytest.raises(ValueError, match="need a minibatch algorithm"):
        fit({"x": mapped}, algorithm="cavi", batch_size=B)
    with pytest.raises(ValueError, match="num_data= is for streams"):
        fit({"x": gmm_data}, num_data=N)
    with pytest.raises(DataError, match="step 2 has data\\['x'\\] of shape \\(50, 3\\)"):
        fit(iter([gmm_data[:B], np.ones((B, 3))]), num_data=N, num_steps=2)
    with pytest.raises(ValueError, match=r"K=5 exceeds .*N=3.*first minibatch, of 3 rows"):
        fit(iter([gmm_data[:3], gmm_data[3:B]]), num_data=N, num_steps=2, K=5)
    with pytest.raises(DataError, match="minibatch of step 1 is not valid.*2 dimensions"):
        fit(iter([gmm_data[:B, 0]]), num_data=N, num_steps=2)


@pytest.mark.slow
def test_peak_memory_stays_flat_quick(tmp_path):
    """benchmarks/streaming_memory.py --quick: peak RSS at three sizes, each in a fresh process."""
    out = tmp_path / "mem.json"
    subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "streaming_memory.py"), "--quick"]
        + ["--backend", "pyro"]
        + ["--out", str(out), "--workdir", str(tmp_path)],
        check=True,
        timeout=300,
    )
    rows = json.loads(out.read_text())["runs"]
    assert [r["num_data"] for r in rows] == sorted(r["num_data"] for r in rows)
    file_mb = rows[-1]["file_mb"]
    growth = rows[-1]["fit_peak_rss_mb"] - rows[0]["fit_peak_rss_mb"]
    # The largest file is 10x the smallest; the fit's peak grows by far less than the file.
    assert growth < 0.25 * file_mb, rows


@pytest.mark.parametrize("algorithm", ["svi-natural", "svi"])
def test_a_stream_resumed_with_more_steps_is_the_longer_run(tmp_path, gmm_data, algorithm):
    """Nothing in a run on a stream depends on num_steps: one resumed with more steps is the
    uninterrupted run of the new length (svi-natural's ran on and said it could not; SVI's
    refused)."""
    path = tmp_path / "run.zoo"
    kwargs = dict(backend="pyro", algorithm=algorithm, num_data=N, tol=0)
    fit(same_batches(gmm_data, 0, 4), checkpoint=path, num_steps=4, **kwargs)
    more = fit(same_batches(gmm_data, 0, 8), checkpoint=path, resume=True, num_steps=8, **kwargs)
    whole = fit(same_batches(gmm_data, 0, 8), num_steps=8, **kwargs)
    np.testing.assert_array_equal(more.history["step"], np.arange(1, 9))
    np.testing.assert_array_equal(more.history["objective"], whole.history["objective"])
    for k in whole.raw_params:
        np.testing.assert_array_equal(more.raw_params[k], whole.raw_params[k])


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_a_minibatch_whose_arrays_disagree_in_rows_names_the_step(tmp_path, backend):
    """Images and labels of a later minibatch in different numbers: a DataError naming the
    step, with the steps before it checkpointed (NumPyro's shape error lost them)."""
    import zoo

    spec = zoo.get_model("bam_classifier")
    data = spec.make_data(np.random.default_rng(0), 120)
    batches = [{"x": data["x"][i : i + 40], "y": data["y"][i : i + 40]} for i in (0, 40, 80)]
    batches[2]["y"] = batches[2]["y"][:-1]
    path = tmp_path / "run.zoo"
    with pytest.raises(DataError, match=r"minibatch of step 3 .*different numbers of rows"):
        inference.fit(
            "bam_classifier", iter(batches), "svi", backend, num_data=120, num_steps=3, tol=0,
            progress=False, checkpoint=path, **spec.example_options,
        )  # fmt: skip
    assert load_checkpoint(path)[0]["step"] == 2
