"""Pyro's closed-form updates replayed from a CUDA graph: the wrapper's logic, on the CPU.

A CUDA graph cannot be recorded without a GPU, so these tests record with ``replaying``, which
does on the CPU what a graph does: the recording computes outputs from a static copy of the
state, and each replay overwrites those outputs in place from the static state's current
values. The wrapper's part (what it copies in, what it hands out, when it runs eagerly) is then
the same as on a GPU."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import torch
from torch.utils import _pytree as pytree

import inference
import zoo
from inference.backends import cuda_graph, pyro_backend
from inference.backends.cuda_graph import GraphedUpdate
from zoo.array_namespace import TorchOps
from zoo.bayesian_gmm import closed_form


class Replaying:
    """A recorder that counts its recordings and replays."""

    def __init__(self):
        self.recordings = self.replays = 0

    def __call__(self, call, device):
        self.recordings += 1
        first = call()
        call()
        outputs = call()

        def replay():
            self.replays += 1
            fresh = pytree.tree_leaves(call())
            for target, value in zip(pytree.tree_leaves(outputs), fresh, strict=True):
                target.copy_(value)

        return first, replay, outputs


@pytest.fixture
def on_a_gpu(monkeypatch):
    """CPU tensors taken for a GPU's, so that the wrapper records."""
    monkeypatch.setattr(cuda_graph, "_cuda_device", lambda leaves: torch.device("cpu"))


@pytest.fixture
def problem(gmm_data, resp0):
    config = zoo.get_model("bayesian_gmm").prepare({"x": gmm_data}, K=resp0.shape[1])
    xp = TorchOps()
    cache = closed_form.init_cache(torch.as_tensor(gmm_data), config, xp)
    state = closed_form.init_state(torch.as_tensor(resp0), cache, config, xp)
    return (lambda state, cache: closed_form.update(state, cache, config, xp)), state, cache


def run(update, state, cache, steps):
    results = []
    for _ in range(steps):
        state, elbo = update(state, cache)
        results.append((state, elbo))
    return results


def assert_same(got, expected):
    got, expected = pytree.tree_leaves(got), pytree.tree_leaves(expected)
    assert len(got) == len(expected)
    for a, b in zip(got, expected, strict=True):
        assert torch.equal(a, b)


def test_replayed_updates_are_the_eager_updates_bit_for_bit(problem, on_a_gpu):
    """Every result, kept after later replays have overwritten the graph's outputs, is the
    eager update's."""
    update, state, cache = problem
    recorder = Replaying()
    graphed = GraphedUpdate(update, record=recorder)
    replayed = run(graphed, state, cache, 6)
    assert (recorder.recordings, recorder.replays) == (1, 5)
    assert_same(replayed, run(update, state, cache, 6))


def test_other_constants_or_another_state_run_eagerly(problem, on_a_gpu):
    update, state, cache = problem
    recorder = Replaying()
    graphed = GraphedUpdate(update, record=recorder)
    graphed(state, cache)
    other_cache = dict(cache)  # the same values, but not the objects the graph reads
    assert_same(graphed(state, other_cache), update(state, cache))
    another = {**state, "step": 3}  # another structure
    assert_same(graphed(another, cache), update(another, cache))
    assert recorder.replays == 0
    assert_same(graphed(state, cache), update(state, cache))
    assert recorder.replays == 1


def test_an_update_that_cannot_be_recorded_warns_once_and_runs_eagerly(problem, on_a_gpu):
    update, state, cache = problem

    def failing(call, device):
        raise RuntimeError("operation not permitted when stream is capturing")

    graphed = GraphedUpdate(update, name="update of a module", record=failing)
    with pytest.warns(RuntimeWarning, match="update of a module could not be recorded.*capturing"):
        first = graphed(state, cache)
    assert_same(first, update(state, cache))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once
        assert_same(graphed(state, cache), update(state, cache))


def test_cpu_tensors_are_never_recorded(problem):
    update, state, cache = problem

    def never(call, device):
        raise AssertionError("recorded on the CPU")

    graphed = GraphedUpdate(update, record=never)
    assert_same(run(graphed, state, cache, 2), run(update, state, cache, 2))


def test_the_switch_turns_the_graphs_off(problem, on_a_gpu, monkeypatch):
    update, state, cache = problem
    monkeypatch.setenv("ZOO_CUDA_GRAPHS", "0")
    recorder = Replaying()
    run(GraphedUpdate(update, record=recorder), state, cache, 2)
    assert recorder.recordings == 0


def test_pyro_wraps_the_closed_form_update_alone():
    update = pyro_backend.compile_step(lambda cf, s, c: s, {}, ("zoo.gmm.closed_form", "update"))
    assert isinstance(update, GraphedUpdate)
    assert update.name == "update of zoo.gmm.closed_form"
    init = pyro_backend.compile_step(lambda cf, d, s: s, {}, ("m", "init_cache and init_state"))
    assert not isinstance(init, GraphedUpdate)


@pytest.mark.parametrize("algorithm", ["cavi", "em"])
def test_a_fit_replayed_and_queued_ahead_is_the_eager_fit(
    gmm_data, resp0, algorithm, on_a_gpu, monkeypatch
):
    """The whole loop as on a GPU (updates replayed, each queued before the last objective is
    read): the same fit, its stopping step included."""
    model = "bayesian_gmm" if algorithm == "cavi" else "gmm"

    def fit():
        return inference.fit(
            model, {"x": gmm_data}, algorithm, "pyro", K=5, init=resp0, progress=False
        )

    monkeypatch.setenv("ZOO_CUDA_GRAPHS", "0")
    eager = fit()
    monkeypatch.setenv("ZOO_CUDA_GRAPHS", "1")
    recorder = Replaying()
    monkeypatch.setattr(cuda_graph, "record_on_cuda", recorder)
    monkeypatch.setattr(pyro_backend, "runs_ahead", lambda device: True)
    replayed = fit()
    assert recorder.recordings == 1 and recorder.replays > 3
    np.testing.assert_array_equal(replayed.history["objective"], eager.history["objective"])
    assert replayed.converged == eager.converged
    for name, value in eager.params.items():
        np.testing.assert_array_equal(replayed.params[name], value)


@pytest.mark.slow
def test_a_compiled_update_is_what_the_graph_records_and_replays(
    gmm_data, resp0, on_a_gpu, monkeypatch, compiled_calls
):
    """``jit=True`` as on a GPU: the graph records the compiled update (compiled at the first of
    its eager runs) and replays it, to the uncompiled eager fit's objectives to rounding."""

    def fit(jit):
        return inference.fit(
            "bayesian_gmm", {"x": gmm_data}, "cavi", "pyro", K=5, init=resp0, progress=False,
            jit=jit, num_steps=20, tol=0,
        )  # fmt: skip

    monkeypatch.setenv("ZOO_CUDA_GRAPHS", "0")
    eager = fit(False)
    monkeypatch.setenv("ZOO_CUDA_GRAPHS", "1")
    recorder = Replaying()
    monkeypatch.setattr(cuda_graph, "record_on_cuda", recorder)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # compiled, not fallen back
        replayed = fit(True)
    assert recorder.recordings == 1 and recorder.replays > 3
    assert len(compiled_calls) >= 3 + recorder.replays  # the recording's three runs, each replay
    np.testing.assert_allclose(replayed.history["objective"], eager.history["objective"], 1e-12)


class FakeCuda:
    """What ``record_on_cuda`` asks of ``torch.cuda``, recorded: which GPU was current at each
    call and which stream the graph captured on (no GPU needed)."""

    def __init__(self):
        self.current, self.log = "cuda:0", []
        fake = self

        class Stream:
            def __init__(self, device=None):
                self.device = device
                fake.log.append(("stream made on", str(device), fake.current))

            def wait_stream(self, other):
                pass

        class Guard:
            def __init__(self, device):
                self.device, self.before = str(device), None

            def __enter__(self):
                self.before, fake.current = fake.current, self.device

            def __exit__(self, *exc):
                fake.current = self.before

        class Capture:
            def __init__(self, graph, stream=None, **options):
                self.stream = stream

            def __enter__(self):
                where = None if self.stream is None else str(self.stream.device)
                fake.log.append(("captured on", where, fake.current))

            def __exit__(self, *exc):
                pass

        self.Stream, self.device, self.graph = Stream, Guard, Capture
        self.stream = lambda stream: Guard(fake.current)
        self.current_stream = lambda device=None: Stream(device)
        self.CUDAGraph = lambda: type("Graph", (), {"replay": lambda self: None})()


def test_a_graph_for_a_second_gpu_is_recorded_on_it(monkeypatch):
    """torch's default capture stream lies on the GPU current when it was made (cuda:0): an
    update on cuda:1 recorded there would replay nothing. The recording makes cuda:1 current
    and captures on a stream of cuda:1."""
    fake, chosen = FakeCuda(), torch._C._LinalgBackend.Default
    libraries = []  # the libraries set: cuSOLVER to record, then the user's choice again
    monkeypatch.setattr(
        torch.backends.cuda,
        "preferred_linalg_library",
        lambda library=None: chosen if library is None else libraries.append(library),
    )
    monkeypatch.setattr(torch, "cuda", fake)
    first, replay, outputs = cuda_graph.record_on_cuda(lambda: "result", "cuda:1")
    assert first == outputs == "result"
    assert ("captured on", "cuda:1", "cuda:1") in fake.log
    assert all(current == "cuda:1" for _, _, current in fake.log)
    assert fake.current == "cuda:0"  # the caller's GPU is current again
    assert libraries == ["cusolver", chosen]
