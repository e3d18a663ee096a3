"""Files written before algorithms became registry entries still load and resume.

``tests/data/format_v1`` holds checkpoints of runs stopped after 3 of 6 steps, a saved fit, and
the objectives of the uninterrupted runs, all written by the code of that time
(``tests/data/format_v1/write.py`` says how). Resumed now, each run must reach the same
objectives.
"""

import dataclasses
import importlib
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

import inference
import zoo
from inference.backends import numpyro_backend

FILES = Path(__file__).parent / "data" / "format_v1"
# SVI's runs were written at the learning rate that was then its default (0.05): a checkpoint
# records its options, and resuming it at today's default would be another run.
RUNS = {
    "cavi_numpyro": ("cavi", "numpyro", {}),
    "svi_pyro": ("svi", "pyro", {"guide": "enum", "lr": 0.05}),
    "svi_numpyro": ("svi", "numpyro", {"guide": "enum", "lr": 0.05}),
    "svi-natural_numpyro": ("svi-natural", "numpyro", {"batch_size": 20}),
}


@pytest.fixture(scope="module")
def data():
    return {"x": zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(0), 60)["x"]}


# NumPyro's SVI compiles for most of its 25 s: its format is read by the other NumPyro rows.
@pytest.mark.parametrize(
    "name",
    [pytest.param(n, marks=pytest.mark.slow) if n == "svi_numpyro" else n for n in sorted(RUNS)],
)
def test_an_old_checkpoint_resumes_to_the_uninterrupted_run(tmp_path, data, name, monkeypatch):
    algorithm, backend, options = RUNS[name]
    if algorithm == "svi":
        _with_the_sticks_monte_carlo_term(monkeypatch, backend)
        _in_the_first_coordinates(monkeypatch, backend)
    path = tmp_path / f"{name}.zoo"
    shutil.copy(FILES / f"{name}.zoo", path)  # resuming writes to it
    assert inference.persistence.checkpoint.load(path)[0]["step"] == 3
    resumed = inference.fit(
        "bayesian_gmm", data, algorithm, backend, num_steps=6, checkpoint=path, resume=True,
        K=2, tol=0.0, progress=False, seed=1, **options,
    )  # fmt: skip
    expected = json.loads((FILES / "expected.json").read_text())[name]
    if algorithm == "svi-natural":
        # Its steps now report the ELBO at the globals they start from (they reported it after
        # their update): the steps after the resume are today's uninterrupted run's, and so is
        # where the resumed run ends.
        today = inference.fit(
            "bayesian_gmm", data, algorithm, backend, num_steps=6, K=2, tol=0.0,
            progress=False, seed=1, **options,
        )  # fmt: skip
        expected = [*expected[:3], *today.history["objective"][3:]]
        for key, value in today.raw_params.items():
            np.testing.assert_allclose(resumed.raw_params[key], value, rtol=1e-10)
    np.testing.assert_allclose(resumed.history["objective"], expected, rtol=1e-10)


def _with_the_sticks_monte_carlo_term(monkeypatch, backend):
    """The enumerated guide as it was when the files were written: its sticks' part of the ELBO
    a Monte-Carlo term, where it now takes their KL in closed form (a step's objective differs by
    under a nat here, its draws are the same). Compiled apart from the kept functions, which
    are today's guide's."""
    twin = importlib.import_module(zoo.get_model("bayesian_gmm").backends[backend])
    monkeypatch.setattr(twin, "_stick_kl_in_closed_form", lambda *args: None)
    monkeypatch.setenv("ZOO_JAX_CACHE", "0")
    monkeypatch.setattr(numpyro_backend, "_COMPILED", {})  # today's are back after the test


def _in_the_first_coordinates(monkeypatch, backend):
    """The guide's parameters in the coordinates the files were written in (the Cholesky
    factors' off-diagonal entries as they are, where they are now relative to their row's
    diagonal; the means' locations in the data's own units, where they are now in units of each
    column's spread), declared as the model's first revision of its guide coordinates."""
    twin = importlib.import_module(zoo.get_model("bayesian_gmm").backends[backend])
    if backend == "pyro":
        from pyro.distributions import constraints as first
        from pyro.distributions.constraints import real
    else:
        from numpyro.distributions.constraints import real

        import zoo.distributions as first
    monkeypatch.setattr(twin, "scale_free_lower_cholesky", first.lower_cholesky)
    monkeypatch.setattr(twin, "means_constraint", lambda config, x: real)
    spec = dataclasses.replace(zoo.get_model("bayesian_gmm"), guide_coordinates=1)
    monkeypatch.setitem(zoo._REGISTRY, "bayesian_gmm", spec)


@pytest.mark.parametrize("name", ["svi_pyro", "svi_numpyro"])
def test_an_old_svi_checkpoint_in_other_coordinates_is_refused(tmp_path, data, name):
    algorithm, backend, options = RUNS[name]
    path = tmp_path / f"{name}.zoo"
    shutil.copy(FILES / f"{name}.zoo", path)
    with pytest.raises(inference.CheckpointError, match="other coordinates .revision 1, now 3"):
        inference.fit(
            "bayesian_gmm", data, algorithm, backend, num_steps=6, checkpoint=path, resume=True,
            K=2, tol=0.0, progress=False, seed=1, **options,
        )  # fmt: skip
    assert path.read_bytes() == (FILES / f"{name}.zoo").read_bytes()  # left as it was


def test_an_old_saved_fit_loads_and_evaluates(data):
    fit = inference.load(FILES / "cavi_numpyro.fit.zoo")
    assert (fit.model, fit.algorithm, fit.guide_family) == ("bayesian_gmm", "cavi", "cavi")
    assert np.all(np.isfinite(fit.log_marginal_likelihood(data["x"][:5], num_samples=10)))
    expected = json.loads((FILES / "expected.json").read_text())["cavi_numpyro"]
    np.testing.assert_allclose(fit.history["objective"], expected, rtol=1e-12)


# NumPyro's case mostly compiles; the message is the layer's.
@pytest.mark.parametrize("backend", ["pyro", pytest.param("numpyro", marks=pytest.mark.slow)])
def test_a_checkpoint_resumed_with_a_constant_rate_names_the_rate_not_a_version(tmp_path, backend):
    """A learning rate in stages keeps the state in another layout than a constant one: resumed
    with another rate, the checkpoint is another run's, and the message says so (not that the
    file comes from another version of the zoo)."""
    path = tmp_path / "run.zoo"
    x = zoo.get_model("gmm").make_data(np.random.default_rng(0), 60)["x"]
    fit = dict(K=2, tol=0.0, progress=False, seed=1, checkpoint=path, resume=True, num_steps=4)
    inference.fit("gmm", {"x": x}, "svi", backend, lr=[(2, 0.05), (2, 0.01)], **fit)
    with pytest.raises(inference.CheckpointError, match="another run; its options .*: lr: "):
        inference.fit("gmm", {"x": x}, "svi", backend, lr=0.05, **fit)


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_an_older_checkpoint_of_svi_in_stages_is_refused(tmp_path, backend):
    """``tests/data/staged_svi_v1`` holds checkpoints of SVI in learning-rate stages written
    before such a run's state held the average of its last stage's iterates: they cannot be
    resumed to what an uninterrupted run now returns, and are refused, the file left as it was."""
    original = Path(__file__).parent / "data" / "staged_svi_v1" / f"svi_{backend}.zoo"
    path = tmp_path / "run.zoo"
    shutil.copy(original, path)
    x = zoo.get_model("gmm").make_data(np.random.default_rng(0), 60)["x"]
    with pytest.raises(inference.CheckpointError, match="another layout .revision 1, now 2"):
        inference.fit(
            "gmm", {"x": x}, "svi", backend, num_steps=6, lr=[(3, 0.05), (3, 0.01)],
            checkpoint=path, resume=True, K=2, tol=0.0, progress=False, seed=1,
        )  # fmt: skip
    assert path.read_bytes() == original.read_bytes()
