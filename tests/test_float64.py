"""A float64 fit on Pyro computes in float64.

torch's default dtype stays float32 during a float64 fit, so a tensor made from Python numbers
(``torch.tensor(0.5)``, an integer count times a float) is float32 unless it is told otherwise,
and the arithmetic it joins is rounded to float32's precision without an error. These tests
watch every operation of a fit's steps, once its parameters exist, for a float32 result."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

import inference
import zoo
from inference.registry import supporting

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # small tensors


class Float32Results(TorchDispatchMode):
    """Counts, by operation, the float32 tensors with elements that operations return (Pyro's
    plates make an empty tensor to find the default device: it holds no number)."""

    def __init__(self):
        super().__init__()
        self.seen = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        for value in pytree.tree_leaves(result):
            if isinstance(value, torch.Tensor) and value.dtype == torch.float32 and value.numel():
                self.seen[func.__name__] += 1
        return result


def _float32_results_of_steps(model, data, algorithm, steps=2, **options) -> dict:
    """The float32 results of ``steps`` steps of a float64 Pyro fit, after its first step (which
    creates the parameters and the optimiser's state, torch's step counters among them)."""
    kept = {}
    inference.fit(
        model, data, algorithm, "pyro", dtype="float64", tol=0.0, progress=False, num_steps=1,
        callback=lambda step, state, info: kept.update(state=state), **options,
    )  # fmt: skip
    algo = inference.get_algorithm(algorithm)
    with Float32Results() as watch:
        for _ in range(steps):
            kept["state"], _ = algo.step(kept["state"])
    return dict(watch.seen)


def _cases():
    for name in zoo.list_models():
        spec = zoo.get_model(name)
        for algorithm in supporting(spec):
            if algorithm != "nuts":  # (its sampler's adaptation runs on the host in float64)
                yield pytest.param(name, algorithm, id=f"{name}-{algorithm}")


@pytest.mark.parametrize(("model", "algorithm"), list(_cases()))
def test_steps_of_a_float64_fit_make_no_float32_tensor(model, algorithm):
    spec = zoo.get_model(model)
    data = spec.validate_data(spec.make_data(np.random.default_rng(0), 120))
    assert _float32_results_of_steps(spec, data, algorithm, **spec.example_options) == {}


@pytest.mark.parametrize("attention", ["weibull", "lognormal"])
def test_masked_bayesian_attention_steps_stay_float64(attention):
    """Bayesian attention with a mask and the contextual prior: the layer KL counts the visible
    weights, an integer sum that must join the float64 arithmetic as float64."""
    spec = zoo.get_model("bam_classifier")
    data = spec.make_data(np.random.default_rng(0), 120)
    i = np.arange(16)
    options = dict(
        batch_size=60, elbo="meanfield", attention=attention, prior="contextual",
        attention_mask=np.abs(i[:, None] - i[None, :]) <= 2, width=8, num_heads=2,
        num_layers=2, mlp_dim=8,
    )  # fmt: skip
    assert _float32_results_of_steps(spec, data, "svi", **options) == {}
