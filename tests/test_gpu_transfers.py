"""The GPU paths' host-side logic, on the CPU: what keeps a step from waiting for the device
(uploads through pinned memory, index tensors made once where the data live, closed-form
updates queued ahead of the objective's read)."""

from __future__ import annotations

import dataclasses
import importlib

import numpy as np
import pytest
import torch

import inference
from inference.algorithms import closed_form
from inference.backends.pyro_backend import upload
from zoo.array_namespace import JaxOps, TorchOps
from zoo.quadratic_features import quadratic_cache


def test_upload_to_the_cpu_is_a_plain_move():
    rows = torch.as_tensor(np.array([3, 1, 2]))
    assert upload(rows, torch.device("cpu")) is rows


def test_feature_indices_are_device_tensors_on_torch_and_constants_on_jax():
    """A numpy index moves to a GPU at every use of it, and each move waits for the device:
    torch's cache holds the indices as tensors where the data live; JAX's keeps them as numpy."""
    x = np.random.default_rng(0).normal(size=(5, 3))
    torch_cache = quadratic_cache(torch.as_tensor(x), TorchOps())
    for key in ("triangle", "tri_rows", "tri_cols"):
        assert isinstance(torch_cache[key], torch.Tensor)
    jax_cache = quadratic_cache(np.asarray(x), JaxOps())
    for key in ("triangle", "tri_rows", "tri_cols"):
        assert isinstance(jax_cache[key], np.ndarray)


def _fit(algorithm, backend, data, resp, **options):
    model = "bayesian_gmm" if algorithm == "cavi" else "gmm"
    return inference.fit(
        model, {"x": data}, algorithm, backend, K=5, init=resp, progress=False, **options
    )


def _queue_ahead(monkeypatch, backend):
    """Closed-form updates queued ahead of the objective's read, as on a GPU."""
    module = importlib.import_module(f"inference.backends.{backend}_backend")
    monkeypatch.setattr(module, "runs_ahead", lambda device: True)


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
@pytest.mark.parametrize("algorithm", ["cavi", "em"])
def test_updates_queued_ahead_give_the_same_fit(gmm_data, resp0, backend, algorithm, monkeypatch):
    """On a GPU the next update is queued before an objective is read; the fit, its stopping
    step included, is bit for bit the fit that reads each objective before the next update."""
    plain = _fit(algorithm, backend, gmm_data, resp0)
    _queue_ahead(monkeypatch, backend)
    ahead = _fit(algorithm, backend, gmm_data, resp0)
    np.testing.assert_array_equal(ahead.history["objective"], plain.history["objective"])
    np.testing.assert_array_equal(ahead.history["step"], plain.history["step"])
    assert ahead.converged == plain.converged
    for name, value in plain.params.items():
        np.testing.assert_array_equal(ahead.params[name], value)


def test_a_queued_update_is_used_only_for_the_state_it_was_queued_from(monkeypatch):
    """A state whose parameters were replaced (a checkpoint's, a caller's) steps from its own
    parameters, not from the update queued from the ones it replaced."""
    _queue_ahead(monkeypatch, "pyro")
    alg = inference.get_algorithm("cavi")
    x = np.random.default_rng(0).normal(size=(50, 2))
    resp = np.random.default_rng(1).dirichlet(np.ones(3), size=50)
    kept = {}
    inference.fit(
        "bayesian_gmm", {"x": x}, "cavi", "pyro", K=3, init=resp, num_steps=2, tol=None,
        progress=False, callback=lambda step, state, info: kept.setdefault(step, state),
    )  # fmt: skip
    first, second = kept[1], kept[2]
    assert first.ahead is not None and first.ahead.source is first.inner
    # The second state's parameters put under the first state's queued update:
    swapped = dataclasses.replace(second, ahead=first.ahead)
    _, info = alg.step(swapped)
    _, expected = alg.step(dataclasses.replace(second, ahead=None))
    assert info.objective == expected.objective
    assert info.objective != alg.step(first)[1].objective


def test_an_update_that_fails_when_queued_fails_at_its_own_step(monkeypatch):
    """An update that raises when queued ahead raises again at the step that takes it, so the
    run's loop names that step and keeps the parameters before it."""
    calls = []

    def update(inner, cache):
        calls.append(inner)
        if len(calls) >= 2:
            raise RuntimeError("singular")
        return inner + 1, torch.tensor(float(inner))

    problem = type("P", (), {"backend": importlib.import_module("inference.backends.pyro_backend")})
    bound = closed_form.ClosedFormBound(problem, None, update, runs_ahead=True)
    state = closed_form.ClosedFormState(bound, inner=torch.tensor(0.0))
    alg = inference.get_algorithm("cavi")
    state, info = alg.step(state)  # its update ran; the one queued after it failed
    assert info.objective == 0.0 and state.ahead is None
    with pytest.raises(RuntimeError, match="singular"):
        alg.step(state)


def test_start_read_gives_the_number_on_both_backends():
    import jax.numpy as jnp

    from inference.backends import numpyro_backend, pyro_backend

    assert pyro_backend.start_read(torch.tensor(-1.5, dtype=torch.float64))() == -1.5
    assert numpyro_backend.start_read(jnp.asarray(-1.5))() == -1.5
    assert not pyro_backend.runs_ahead(torch.device("cpu"))
    assert not numpyro_backend.runs_ahead(numpyro_backend.resolve_device("cpu"))


def test_a_run_queued_ahead_resumes_as_it_runs(gmm_data, resp0, monkeypatch, tmp_path):
    """The queued update is not saved: a run resumed from its checkpoint queues again and ends
    where the uninterrupted run ends."""
    _queue_ahead(monkeypatch, "pyro")
    whole = _fit("cavi", "pyro", gmm_data, resp0, num_steps=12, tol=None)
    path = str(tmp_path / "cavi.ckpt")
    _fit("cavi", "pyro", gmm_data, resp0, num_steps=5, tol=None, checkpoint=path)
    resumed = _fit(
        "cavi", "pyro", gmm_data, resp0, num_steps=12, tol=None, checkpoint=path, resume=True
    )
    np.testing.assert_array_equal(resumed.history["objective"], whole.history["objective"])
