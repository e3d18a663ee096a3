"""A compiled Pyro fit calls the graphs its ELBO traced without Pyro's per-call wrapper
(``inference.backends.pyro_traced``), and takes the steps it took through the wrapper."""

import numpy as np
import pytest
from pyro.ops.jit import CompiledFunction

import inference
import zoo
from inference.backends.pyro_traced import TracedGraphs

FITS = {
    # model, options: each fit's 600 rows in minibatches of 250, one graph
    "trace": ("vae", dict(elbo="trace", latent_dim=3, hidden=(24,), lr=3e-3)),
    "meanfield": ("vae", dict(elbo="meanfield", latent_dim=3, hidden=(24,), lr=3e-3)),
    "enum": ("bayesian_gmm", dict(guide="enum", K=3)),
    # the mean-field ELBO with the annealed temperature as an input of the graph
    "gumbel": ("bayesian_gmm", dict(guide="gumbel", K=3)),
}


@pytest.mark.parametrize("case", list(FITS))
def test_compiled_steps_call_each_traced_graph_directly_and_take_the_wrappers_steps(
    case, monkeypatch
):
    model, options = FITS[case]
    data = zoo.get_model(model).make_data(np.random.default_rng(0), 600)
    fit = dict(num_steps=9, batch_size=250, tol=0, dtype="float64", jit=True, progress=False)
    calls = []
    wrapper = CompiledFunction.__call__
    monkeypatch.setattr(
        CompiledFunction,
        "__call__",
        lambda self, *a, **k: calls.append(1) or wrapper(self, *a, **k),
    )
    direct = inference.fit(model, data, "svi", "pyro", **fit, **options)
    assert len(calls) == 1  # the trace of the graph, then the graph alone

    calls.clear()
    monkeypatch.setattr(TracedGraphs, "loss_and_grads", lambda self, key, inputs: None)
    through_pyro = inference.fit(model, data, "svi", "pyro", **fit, **options)
    assert len(calls) == 9 + 1  # every step, and the throwaway trace
    np.testing.assert_array_equal(direct.history["objective"], through_pyro.history["objective"])
    for name, value in through_pyro.raw_params.items():
        np.testing.assert_array_equal(direct.raw_params[name], value, err_msg=name)


def test_an_elbo_without_a_compiled_function_keeps_no_graph():
    """Where Pyro's ELBO holds no compiled function that traced one new graph, the steps go
    through Pyro's own call, as they did before."""

    class Uncompiled:
        pass

    graphs = TracedGraphs(Uncompiled())
    assert graphs.trace("key", lambda: 3.5) == 3.5
    assert graphs.loss_and_grads("key", []) is None
