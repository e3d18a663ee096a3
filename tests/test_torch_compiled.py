"""CAVI and EM with ``jit=True``: Pyro's update compiled by ``torch.compile``, the same fit to
rounding, and an update the compiler cannot handle run uncompiled with a warning."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import inference
import zoo
from inference.backends import torch_compiled
from inference.backends.torch_compiled import CompiledUpdate


def _failing_compiler(fn, **options):
    def compiled(*args):
        raise RuntimeError("no C++ compiler found\nsecond line")

    return compiled


def test_an_update_the_compiler_cannot_handle_runs_uncompiled_with_one_warning(monkeypatch):
    monkeypatch.setattr(torch_compiled.torch, "compile", _failing_compiler)
    calls = []
    update = CompiledUpdate(lambda x: calls.append(x) or 2 * x, name="update of mixture")
    with pytest.warns(RuntimeWarning, match=r"update of mixture could not be compiled.*C\+\+"):
        assert update(3) == 6
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once: later calls run the update without a word
        assert update(4) == 8
    assert calls == [3, 4]


def test_an_error_of_the_update_itself_is_raised_as_it_would_be_uncompiled(monkeypatch):
    monkeypatch.setattr(torch_compiled.torch, "compile", _failing_compiler)

    def update(x):
        raise ValueError("the covariance is not positive definite")

    with pytest.raises(ValueError, match="not positive definite"):
        CompiledUpdate(update)(1)


def _doubled_plus_one(x):
    return 2 * x + 1


def test_an_update_past_torchs_recompile_limit_says_it_runs_uncompiled():
    """torch compiles one function's code at most ``recompile_limit`` times in a process and
    then, silently, not at all: the update that reaches the limit warns that it runs uncompiled,
    and computes what it computes."""
    import torch

    torch._dynamo.reset()
    with torch._dynamo.config.patch(recompile_limit=1):
        first = CompiledUpdate(_doubled_plus_one)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            first(torch.ones(3))
        assert first.call is first.compiled
        second = CompiledUpdate(_doubled_plus_one)  # new shapes: a second compilation
        with pytest.warns(
            RuntimeWarning, match="at most 1 times in a process, its recompile_limit"
        ):
            assert torch.equal(second(torch.ones(4, 2)), torch.full((4, 2), 3.0))
        assert second.call is second.update
    torch._dynamo.reset()


def test_jit_must_be_a_bool():
    data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 50)
    with pytest.raises(TypeError, match="jit"):
        inference.fit("gmm", data, "em", "pyro", jit="yes", num_steps=2, progress=False)


def _objectives(model, algorithm, backend, jit, n=300):
    data = zoo.get_model(model).make_data(np.random.default_rng(0), n)
    result = inference.fit(
        model, data, algorithm, backend, jit=jit, num_steps=15, tol=0, progress=False, seed=0
    )
    return np.asarray(result.history["objective"])


def test_numpyro_compiles_anyway_so_jit_changes_nothing():
    on, off = (_objectives("gmm", "em", "numpyro", jit) for jit in (True, False))
    np.testing.assert_array_equal(on, off)


@pytest.mark.slow
@pytest.mark.parametrize(("model", "algorithm"), [("bayesian_gmm", "cavi"), ("gmm", "em")])
def test_a_compiled_pyro_fit_takes_the_uncompiled_fits_steps(model, algorithm, compiled_calls):
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # compiled, not fallen back
        on = _objectives(model, algorithm, "pyro", True)
    assert len(compiled_calls) == len(on)  # every update ran compiled
    off = _objectives(model, algorithm, "pyro", False)
    np.testing.assert_allclose(on, off, rtol=1e-12)
