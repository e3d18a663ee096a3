"""A Pyro SVI fit keeps its parameters in a store of its own: the user's Pyro parameter store
is as it was after the fit, whether the fit ends or raises, and what it holds does not change
the fit."""

import numpy as np
import pyro
import pytest
import torch
from torch.distributions import constraints

import inference
import zoo

pytestmark = [
    pytest.mark.filterwarnings("ignore:`torch.jit.trace` is deprecated:DeprecationWarning"),
]

FIT = dict(K=2, num_steps=4, tol=0, seed=3, progress=False)


@pytest.fixture
def data():
    return zoo.get_model("gmm").make_data(np.random.default_rng(0), 100)


@pytest.fixture
def user_store():
    """The user's parameters, one of them named as a parameter of the model; the store that
    holds them is emptied after the test."""
    pyro.clear_param_store()
    pyro.param("my_weight", torch.tensor(3.0))
    pyro.param("weights", torch.tensor([0.9, 0.1]), constraint=constraints.simplex)
    store = pyro.get_param_store()
    yield {name: store._params[name] for name in store.keys()}
    pyro.clear_param_store()


def _check_untouched(before):
    store = pyro.get_param_store()
    assert sorted(store.keys()) == sorted(before)
    for name, tensor in before.items():
        assert store._params[name] is tensor, name  # the user's own tensor, not a copy
    assert pyro.param("my_weight").item() == 3.0
    np.testing.assert_allclose(pyro.param("weights").detach().numpy(), [0.9, 0.1], rtol=1e-6)


@pytest.mark.parametrize("jit", [False, True])
def test_a_fit_leaves_the_users_store_and_is_the_fit_from_an_empty_one(data, user_store, jit):
    res = inference.fit("gmm", data, "svi", "pyro", jit=jit, **FIT)
    _check_untouched(user_store)
    pyro.clear_param_store()
    alone = inference.fit("gmm", data, "svi", "pyro", jit=jit, **FIT)
    np.testing.assert_array_equal(res.history["objective"], alone.history["objective"])
    for name, value in alone.raw_params.items():
        np.testing.assert_array_equal(res.raw_params[name], value, err_msg=name)


def test_a_fit_that_raises_leaves_the_users_store(data, user_store):
    def stop(step, state, info):
        if step == 2:
            raise RuntimeError("stopped by the callback")

    with pytest.raises(RuntimeError, match="stopped by the callback"):
        inference.fit("gmm", data, "svi", "pyro", callback=stop, **FIT)
    _check_untouched(user_store)
