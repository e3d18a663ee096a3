"""An algorithm written against the older, wider contract (a method for each question the layer
asks, ``state_dict``/``load_state_dict`` for checkpoints) still fits, checkpoints, resumes and
makes its result: the layer calls the older methods where a state, options or info do not say."""

from __future__ import annotations

import numpy as np
import pytest

import inference
import zoo
from inference.algorithm import Algorithm, Info, progress_text, state_fact
from inference.tools.conformance import short_run


class OlderCAVI(Algorithm):
    """CAVI behind the older hooks: states are CAVI's, saved through the older names."""

    name = "older-cavi"
    traits = inference.get_algorithm("cavi").traits

    def _cavi(self):
        return inference.get_algorithm("cavi")

    def unsupported(self, spec):
        return self._cavi().unsupported(spec)

    def init(self, problem, options):
        return _Wrapped(self._cavi().init(problem, self._cavi().options({})))

    def step(self, state):
        new, info = self._cavi().step(state.inner)
        return _Wrapped(new), Info(info.objective)

    def get_params(self, state):
        return self._cavi().get_params(state.inner)

    def state_dict(self, state):
        return self._cavi().save_state(state.inner)

    def load_state_dict(self, state, skeleton, arrays):
        return _Wrapped(self._cavi().load_state(state.inner, skeleton, arrays))

    def record(self, options, state):
        return {"older": True}

    def rule_start(self, state):
        return 0

    def describe(self, info):
        return "older"

    def posterior_family(self, result):
        return "older-family"

    def short_run(self, num_steps):
        return {"num_steps": num_steps + 1}


class _Wrapped:
    def __init__(self, inner):
        self.inner = inner


@pytest.fixture
def older():
    alg = inference.registry.register_algorithm(OlderCAVI())
    yield alg
    inference.registry.unregister_algorithm(alg.name)


def test_an_algorithm_of_the_older_contract_fits_and_resumes(older, tmp_path):
    x = zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(0), 60)["x"]
    kwargs = {"K": 2, "tol": 0, "progress": False}
    whole = inference.fit("bayesian_gmm", {"x": x}, older.name, "numpyro", num_steps=12, **kwargs)
    path = str(tmp_path / "older.ckpt")
    inference.fit("bayesian_gmm", {"x": x}, older.name, "numpyro", num_steps=5, checkpoint=path,
                  **kwargs)  # fmt: skip
    resumed = inference.fit("bayesian_gmm", {"x": x}, older.name, "numpyro", num_steps=12,
                            checkpoint=path, resume=True, **kwargs)  # fmt: skip
    assert np.array_equal(resumed.history["objective"], whole.history["objective"])
    assert whole.options["older"] is True and whole.guide_family == "older-family"
    assert progress_text(older, Info(0.0)) == "older"
    assert state_fact(older, None, "rule_start") == 0
    assert short_run(older, 4) == {"num_steps": 5}
