"""Checkpoints at their edges: a Pyro run that moves between the CPU and a GPU, a run stopped by
``sys.exit()``, vectorized NUTS resumed to the uninterrupted run's means, and a damaged file met
by a run that starts afresh."""

import dataclasses
import types
from typing import Any, ClassVar

import jax.numpy as jnp
import numpy as np
import pytest
import torch

import inference
import zoo
from inference.backends import numpyro_mcmc, pyro_backend
from inference.persistence import state_tree
from inference.persistence.checkpoint import CheckpointError, read_header

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# --- a Pyro SVI checkpoint moves between the CPU and a GPU ----------------------------------


@pytest.fixture(scope="module")
def mixture():
    return zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(0), 40)


def _svi(data, path=None, *, num_steps, resume=False):
    return inference.fit(
        "bayesian_gmm", data, "svi", "pyro", K=2, num_steps=num_steps, tol=0.0, lr=0.05,
        progress=False, checkpoint=path, resume=resume,
    )  # fmt: skip


def _as_on_a_gpu(monkeypatch):
    """The engine's random streams as a GPU's engine holds them: the CPU's and the device's
    (here a copy of the CPU's, which no step draws from: there is no GPU to run on)."""
    on_the_cpu = pyro_backend.SVIEngine._get_rng
    monkeypatch.setattr(
        pyro_backend.SVIEngine,
        "_get_rng",
        lambda self: {**on_the_cpu(self), "cuda": torch.get_rng_state().clone()},
    )


@pytest.mark.parametrize("written_on_a_gpu", [False, True], ids=["cpu-to-gpu", "gpu-to-cpu"])
def test_a_pyro_checkpoint_resumes_on_another_device(tmp_path, mixture, written_on_a_gpu):
    """Written on one device and resumed on the other, a run reaches what the uninterrupted run
    reaches (the imitated GPU's stream is drawn from by no step, so the numbers are the CPU's)."""
    whole = _svi(mixture, num_steps=8)
    path = tmp_path / "run.zoo"
    with pytest.MonkeyPatch.context() as patch:
        if written_on_a_gpu:
            _as_on_a_gpu(patch)
        _svi(mixture, path, num_steps=6)
    with pytest.MonkeyPatch.context() as patch:
        if not written_on_a_gpu:
            _as_on_a_gpu(patch)
        resumed = _svi(mixture, path, num_steps=8, resume=True)
    assert resumed.history["step"][-1] == 8
    for name, value in whole.raw_params.items():
        np.testing.assert_array_equal(resumed.raw_params[name], value)
    np.testing.assert_array_equal(resumed.history["objective"], whole.history["objective"])


@dataclasses.dataclass(frozen=True)
class _StreamState:
    """A state as a Pyro engine's holds its random streams."""

    params: Any = None
    step: int = 0
    saved_fields: ClassVar[tuple[str, ...]] = ("params", "step")


def _state(**streams):
    weights = np.arange(3.0)
    return _StreamState({"w": weights, "rng": state_tree.DeviceStreams(streams)}, 2)


def _resumed(saved, fresh):
    skeleton, arrays = state_tree.save(saved)
    tree = state_tree.read(skeleton, arrays, fresh)
    state_tree.check("run.zoo", fresh, tree, 2)
    return state_tree.restore(fresh, tree)


CPU, CUDA = np.arange(5, dtype=np.uint8), np.arange(7, dtype=np.uint8) * 3


def test_a_device_stream_the_checkpoint_lacks_is_the_one_the_run_seeded():
    seeded = CUDA + 1
    resumed = _resumed(_state(cpu=CPU), _state(cpu=CPU + 9, cuda=seeded))
    assert sorted(resumed.params["rng"]) == ["cpu", "cuda"]
    np.testing.assert_array_equal(resumed.params["rng"]["cpu"], CPU)
    np.testing.assert_array_equal(resumed.params["rng"]["cuda"], seeded)


def test_a_device_stream_the_run_has_no_device_for_is_left_out():
    resumed = _resumed(_state(cpu=CPU, cuda=CUDA), _state(cpu=CPU + 9))
    assert sorted(resumed.params["rng"]) == ["cpu"]
    np.testing.assert_array_equal(resumed.params["rng"]["cpu"], CPU)


def test_a_device_stream_stays_as_saved_on_the_same_device():
    resumed = _resumed(_state(cpu=CPU, cuda=CUDA), _state(cpu=CPU + 9, cuda=CUDA + 1))
    np.testing.assert_array_equal(resumed.params["rng"]["cuda"], CUDA)


def test_the_host_stream_and_every_other_array_are_still_required():
    without_host = _state(cuda=CUDA)
    with pytest.raises(
        CheckpointError, match=r"lacks the state's array \"params\['rng'\]\['cpu'\]"
    ):
        _resumed(without_host, _state(cpu=CPU, cuda=CUDA))
    without_weights = _StreamState({"rng": state_tree.DeviceStreams(cpu=CPU)}, 2)
    with pytest.raises(CheckpointError, match=r"lacks the state's array \"params\['w'\]\""):
        _resumed(without_weights, _state(cpu=CPU))
    other = _StreamState({"w": np.arange(3.0), "v": np.ones(2), "rng": {"cpu": CPU}}, 2)
    with pytest.raises(CheckpointError, match="has no place for"):
        _resumed(other, _state(cpu=CPU))


# --- a run stopped by sys.exit() --------------------------------------------------------------


@pytest.fixture(scope="module")
def two_clusters():
    return zoo.get_model("gmm").make_data(np.random.default_rng(0), 40)


def _em(data, path=None, *, num_steps=20, callback=None, resume=False):
    return inference.fit(
        "gmm", data, "em", "pyro", K=2, num_steps=num_steps, tol=0.0, progress=False,
        checkpoint=path, checkpoint_every=None if path is None else 5, callback=callback,
        resume=resume,
    )  # fmt: skip


def test_a_callback_that_calls_sys_exit_has_its_step_checkpointed(tmp_path, two_clusters):
    path = tmp_path / "run.zoo"

    def stop_at_seven(step, state, info):
        if step == 7:
            raise SystemExit(3)

    with pytest.raises(SystemExit) as stopped:
        _em(two_clusters, path, callback=stop_at_seven)
    assert stopped.value.code == 3  # propagated as it was raised
    assert read_header(path)["step"] == 7  # not 5, the last periodic checkpoint
    resumed = _em(two_clusters, path, num_steps=10, resume=True)
    whole = _em(two_clusters, num_steps=10)
    np.testing.assert_array_equal(resumed.history["objective"], whole.history["objective"])
    for name, value in whole.params.items():
        np.testing.assert_array_equal(resumed.params[name], value)


# --- vectorized NUTS keeps its draws as a checkpoint reads them back -------------------------


def _vectorized_chunk(records):
    """An engine of vectorized chains whose compiled chunk records ``records`` (iterations
    first, then chains, as the compiled loop writes them)."""
    return types.SimpleNamespace(
        vectorized=True, _chunk=lambda states, length: (states, (records, {}))
    )


def test_vectorized_draws_are_kept_as_a_checkpoint_reads_them(tmp_path):
    """The mean over chains and draws of the kept chunks (a result's ``raw_params``) is the
    mean of the same chunks read back from a file, bit for bit: their layout is the same."""
    rng = np.random.default_rng(0)
    kept, read_back = [], []
    for chunk in range(2):
        records = {"x": jnp.asarray(rng.normal(size=(6, 3, 2)))}  # (iterations, chains, 2)
        _, sites, _ = numpyro_mcmc.NUTSEngine.run(_vectorized_chunk(records), None, 5)
        assert sites["x"].shape == (3, 5, 2)  # chains, iterations
        np.save(tmp_path / f"{chunk}.npy", sites["x"])
        kept.append(sites["x"])
        read_back.append(np.load(tmp_path / f"{chunk}.npy"))
    means = np.concatenate(kept, axis=1).mean(axis=(0, 1))
    np.testing.assert_array_equal(means, np.concatenate(read_back, axis=1).mean(axis=(0, 1)))
    assert all(chunk.flags.c_contiguous for chunk in kept)


@pytest.mark.slow  # mostly compiling the kernel
def test_vectorized_nuts_resumes_to_the_uninterrupted_means(tmp_path, regression_spec):
    data = regression_spec.make_data(np.random.default_rng(0), 40)
    options = dict(
        seed=3, progress=False, num_chains=2, num_warmup=4, num_draws=6, chunk_size=2,
        chain_method="vectorized",
    )  # fmt: skip
    name = regression_spec.name
    with pytest.warns(inference.ConvergenceWarning):  # a short run, on purpose
        whole = inference.fit(name, data, "nuts", "numpyro", **options)

    def interrupt(step, state, info):
        if step == 4:  # two chunks of draws kept
            raise KeyboardInterrupt

    path = tmp_path / "nuts.zoo"
    with pytest.raises(KeyboardInterrupt):
        inference.fit(
            name, data, "nuts", "numpyro", checkpoint=path, checkpoint_every=2,
            callback=interrupt, **options,
        )  # fmt: skip
    with pytest.warns(inference.ConvergenceWarning):
        resumed = inference.fit(
            name, data, "nuts", "numpyro", checkpoint=path, resume=True, **options
        )
    for site, value in whole.raw_params.items():
        np.testing.assert_array_equal(resumed.draws[site], whole.draws[site])
        np.testing.assert_array_equal(resumed.raw_params[site], value)


# --- a damaged file met by a run that starts afresh ------------------------------------------


def _cut(path, length) -> bytes:
    whole = path.read_bytes()
    path.write_bytes(whole[: length(len(whole))])
    return path.read_bytes()


def test_a_checkpoint_cut_short_is_named_damaged_and_kept(tmp_path, two_clusters):
    path = tmp_path / "run.zoo"
    _em(two_clusters, path, num_steps=5)
    left = _cut(path, lambda n: n // 2)
    with pytest.raises(
        CheckpointError, match="looks like a damaged checkpoint or saved fit of this"
    ):
        _em(two_clusters, path, num_steps=5)
    assert path.read_bytes() == left  # not overwritten
    with pytest.raises(CheckpointError, match="not overwritten. Delete it, or name another file"):
        _em(two_clusters, path, num_steps=5)


def test_a_saved_fit_cut_short_is_named_damaged(tmp_path, two_clusters):
    path = tmp_path / "fit.zoo"
    _em(two_clusters, num_steps=5).save(path)
    _cut(path, lambda n: n // 2)
    with pytest.raises(
        CheckpointError, match="looks like a damaged checkpoint or saved fit of this"
    ):
        _em(two_clusters, path, num_steps=5)


def test_a_file_cut_within_its_header_is_named_a_damaged_file_of_this_project(
    tmp_path, two_clusters
):
    path = tmp_path / "run.zoo"
    _em(two_clusters, path, num_steps=5)
    _cut(path, lambda n: 120)  # the zip's first member, the zoo header, cut short
    with pytest.raises(CheckpointError, match="damaged checkpoint or saved fit of this project"):
        _em(two_clusters, path, num_steps=5)


@pytest.mark.parametrize(
    "content",
    [b"PK\x03\x04 not quite a zip", b"some notes", b""],
    ids=["zip-like", "text", "empty"],
)
def test_a_file_of_another_kind_is_still_not_a_checkpoint_of_this_project(
    tmp_path, two_clusters, content
):
    path = tmp_path / "notes.zoo"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match="is not a checkpoint of this project"):
        _em(two_clusters, path, num_steps=5)
    assert path.read_bytes() == content
