"""A model edited while developing, reloaded and registered again under its name runs its new
code on NumPyro: the compiled functions kept by the model's name (SVI, the importance weights
that score a fit) and by its updates' module (CAVI and EM) are forgotten when the registry
changes, not reused."""

import dataclasses
import sys
import types

import numpy as np
import pytest

import inference
import zoo
from inference import evaluation

NAME = "edited_gmm"
TWIN = "edited_gmm_numpyro_twin"
UPDATES = "edited_gmm_closed_form"


@pytest.fixture
def edited(monkeypatch):
    """A copy of the Gaussian mixture whose NumPyro twin and updates are modules of their own,
    and an ``edit()`` that replaces their code, as a reload of an edited file does."""
    real = zoo.get_model("gmm")
    twin = types.ModuleType(TWIN)
    twin.__dict__.update(vars(real.twin("numpyro")))
    updates = types.ModuleType(UPDATES)
    updates.__dict__.update(vars(real.updates.load()))
    monkeypatch.setitem(sys.modules, TWIN, twin)
    monkeypatch.setitem(sys.modules, UPDATES, updates)
    spec = dataclasses.replace(
        real,
        name=NAME,
        backends={**real.backends, "numpyro": TWIN},
        updates=dataclasses.replace(real.updates, module=UPDATES),
    )
    zoo.register(spec, check=False)

    def edit():
        """The model reads its data doubled, and the updates fit doubled data."""
        model, update, init_cache = twin.model, updates.update, updates.init_cache

        def doubled(data, *args, **kwargs):
            return model({**data, "x": 2.0 * data["x"]}, *args, **kwargs)

        def cache_of_doubled(x, *args, **kwargs):
            return init_cache(2.0 * x, *args, **kwargs)

        twin.model, updates.init_cache, updates.update = doubled, cache_of_doubled, update
        zoo.unregister(NAME)
        zoo.register(spec, check=False)

    yield spec, edit
    if NAME in zoo.list_models():
        zoo.unregister(NAME)


def _weights(result, data):
    """Importance weights of a fit's guide on the first rows (compiled once per model)."""
    fit = evaluation.fitted(result)
    return evaluation.importance_statistics(fit, {"x": data["x"][:5]}, 4, seed=0)[0]


def _fits(name, data):
    svi = inference.fit(name, data, "svi", "numpyro", K=2, num_steps=20, seed=0, progress=False)
    em = inference.fit(name, data, "em", "numpyro", K=2, num_steps=5, seed=0, progress=False)
    return svi, em


def test_a_model_edited_and_registered_again_runs_its_new_code(edited):
    spec, edit = edited
    data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 60)
    svi, em = _fits(NAME, data)
    weights = _weights(svi, data)
    edit()
    svi2, em2 = _fits(NAME, data)
    weights2 = _weights(svi, data)
    # The same edited code under a name never fitted before: compiled afresh.
    zoo.register(dataclasses.replace(spec, name="fresh_gmm"), check=False)
    try:
        svi_ref, em_ref = _fits("fresh_gmm", data)
        weights_ref = _weights(dataclasses.replace(svi, spec=zoo.get_model("fresh_gmm")), data)
    finally:
        zoo.unregister("fresh_gmm")
    assert svi2.objective != svi.objective
    assert svi2.objective == svi_ref.objective
    np.testing.assert_array_equal(em2.params["means"], em_ref.params["means"])
    # The edited updates fit the data doubled (their k-means start is the same).
    np.testing.assert_allclose(em2.params["means"], 2.0 * em.params["means"], rtol=1e-6)
    # A fit scored after the edit is scored with the edited model.
    assert not np.allclose(weights2, weights)
    np.testing.assert_array_equal(weights2, weights_ref)


def test_listeners_hear_of_registrations_and_removals():
    heard = []
    zoo.on_registry_change(heard.append)
    spec = dataclasses.replace(zoo.get_model("gmm"), name="listened_gmm")
    try:
        zoo.register(spec, check=False)
        zoo.unregister("listened_gmm")
    finally:
        zoo._LISTENERS.remove(heard.append)
    assert heard == [spec, spec]
