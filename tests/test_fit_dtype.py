"""A fit computes in the dtype it asks for.

- A float64 fit on Pyro: torch's default dtype stays float32 during it, so a tensor made from
  Python numbers (``torch.tensor(0.5)``, an integer count times a float) is float32 unless it
  is told otherwise, and the arithmetic it joins is rounded to float32's precision without an
  error.
- A float32 fit: on a GPU float64 arithmetic is several times slower. On NumPyro, JAX's 64-bit
  mode (on for the process) makes ``jax.random`` draw float64 unless told otherwise, which once
  turned the float32 VAE's decoder float64, and NumPyro's Beta, Dirichlet, Wishart and
  multivariate normal draw float64, its Bernoulli scores the data in float64 and its
  precision-matrix factorisation is against a float64 identity: a float32 fit's SVI functions
  are therefore traced with the mode off (``numpyro_backend.traced_in_precision``).

The tests watch every operation of a fit's steps, once its parameters exist: Pyro's as torch
dispatches them, NumPyro's in the compiled update's program."""

from __future__ import annotations

import collections
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

import inference
import zoo
from inference import evaluation
from inference.backends.numpyro_backend import traced_in_precision
from inference.learning_rate import parse
from inference.registry import supporting

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # small tensors

#: torch's wrapping of a host (numpy) array as it is, before its conversion to the fit's dtype:
#: a minibatch read from a stream of float64 rows.
HOST_ARRAY_WRAP = "lift_fresh"


class ResultsOfDtype(TorchDispatchMode):
    """Counts, by operation, the tensors of ``dtype`` with at least ``min_dims`` dimensions
    and an element that operations return (Pyro's plates make an empty tensor to find the
    default device: it holds no number), but those of the operations named in ``ignore``."""

    def __init__(self, dtype, min_dims: int = 0, ignore: tuple[str, ...] = ()):
        super().__init__()
        self.dtype, self.min_dims, self.ignore = dtype, min_dims, ignore
        self.seen = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        result = func(*args, **(kwargs or {}))
        if func.__name__.startswith(self.ignore):
            return result
        for value in pytree.tree_leaves(result):
            if (
                isinstance(value, torch.Tensor)
                and value.dtype == self.dtype
                and value.dim() >= self.min_dims
                and value.numel()
            ):
                self.seen[func.__name__] += 1
        return result


def _started(model, data, algorithm, backend, dtype, **options):
    """The state after the first step of a fit (which creates the parameters and the
    optimiser's state, torch's float32 step counters among them)."""
    kept = {}
    inference.fit(
        model, data, algorithm, backend, dtype=dtype, tol=0.0, progress=False, num_steps=1,
        callback=lambda step, state, info: kept.update(state=state), **options,
    )  # fmt: skip
    return kept["state"]


def _pyro_results_of_steps(model, data, algorithm, dtype, watch, **options) -> dict:
    """``watch``'s counts over two steps of a Pyro fit in ``dtype``, after its first."""
    state = _started(model, data, algorithm, "pyro", dtype, **options)
    algo = inference.get_algorithm(algorithm)
    with watch:
        for _ in range(2):
            state, _ = algo.step(state)
    return dict(watch.seen)


def _cases():
    for name in zoo.list_models():
        spec = zoo.get_model(name)
        for algorithm in supporting(spec):
            if algorithm != "nuts":  # (its sampler's adaptation runs on the host in float64)
                yield pytest.param(name, algorithm, id=f"{name}-{algorithm}")


def _example(model):
    spec = zoo.get_model(model)
    return spec, spec.validate_data(spec.make_data(np.random.default_rng(0), 120))


@pytest.mark.parametrize(("model", "algorithm"), list(_cases()))
def test_pyro_steps_of_a_float64_fit_make_no_float32_tensor(model, algorithm):
    spec, data = _example(model)
    watch = ResultsOfDtype(torch.float32)
    assert (
        _pyro_results_of_steps(spec, data, algorithm, "float64", watch, **spec.example_options)
        == {}
    )


@pytest.mark.parametrize(("model", "algorithm"), list(_cases()))
def test_pyro_steps_of_a_float32_fit_make_no_float64_array(model, algorithm):
    """A float64 number with no dimensions joins float32 arithmetic as float32 (torch promotes
    across dimensions only by category), so only arrays count; so does a stream's float64
    minibatch as it is wrapped for its conversion."""
    spec, data = _example(model)
    watch = ResultsOfDtype(torch.float64, min_dims=1, ignore=(HOST_ARRAY_WRAP,))
    assert (
        _pyro_results_of_steps(spec, data, algorithm, "float32", watch, **spec.example_options)
        == {}
    )


@pytest.mark.parametrize("attention", ["weibull", "lognormal"])
def test_masked_bayesian_attention_steps_stay_float64(attention):
    """Bayesian attention with a mask and the contextual prior: the layer KL counts the visible
    weights, an integer sum that must join the float64 arithmetic as float64."""
    spec, data = _example("bam_classifier")
    i = np.arange(16)
    options = dict(
        batch_size=60, elbo="meanfield", attention=attention, prior="contextual",
        attention_mask=np.abs(i[:, None] - i[None, :]) <= 2, width=8, num_heads=2,
        num_layers=2, mlp_dim=8,
    )  # fmt: skip
    watch = ResultsOfDtype(torch.float32)
    assert _pyro_results_of_steps(spec, data, "svi", "float64", watch, **options) == {}


def _float64_arrays(jaxpr, found: collections.Counter) -> collections.Counter:
    """The operations of ``jaxpr`` (and of the programs inside it) that make a float64 array.
    A weakly typed value (a Python number's) takes the dtype of what it meets: not counted."""
    for eqn in jaxpr.eqns:
        for var in eqn.outvars:
            aval = var.aval
            if getattr(aval, "dtype", None) == np.float64 and not aval.weak_type:
                found[eqn.primitive.name] += 1
        for param in eqn.params.values():
            for inner in param if isinstance(param, list | tuple) else [param]:
                inner = getattr(inner, "jaxpr", inner)
                if hasattr(inner, "eqns"):
                    _float64_arrays(inner, found)
    return found


@pytest.mark.slow  # (each model's update compiles: seconds)
@pytest.mark.parametrize("model", sorted(zoo.list_models()))
def test_numpyro_svi_update_of_a_float32_fit_makes_no_float64_array(model):
    spec, data = _example(model)
    state = _started(spec, data, "svi", "numpyro", "float32", **spec.example_options)
    engine, batches = state.bound.engine, state.bound.batches
    rows = None if batches is None else batches.indices(0)
    program = jax.make_jaxpr(engine._compiled.update.fn)(
        state.params, engine.data, engine._arrays, rows, None
    )
    assert dict(_float64_arrays(program.jaxpr, collections.Counter())) == {}


def test_a_float32_trace_makes_float32_where_nothing_says_a_dtype():
    """What ``traced_in_precision`` changes, without compiling a model: a draw, an identity
    and a staged learning rate read at a traced update count, with no int64 warning."""
    rate = parse([[3, 0.1], [2, 0.01]]).jax_schedule()

    def made(key, updates):
        return jax.random.normal(key, (2,)), jnp.eye(2), rate(updates)

    count = np.asarray(4, dtype=np.int32)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        draw, eye, lr = jax.jit(traced_in_precision(made, "float32"))(jax.random.PRNGKey(0), count)
        wide = jax.jit(traced_in_precision(made, "float64"))(jax.random.PRNGKey(0), count)
    assert (draw.dtype, eye.dtype, lr.dtype) == (np.float32,) * 3
    assert float(lr) == pytest.approx(0.01)
    assert (wide[0].dtype, wide[1].dtype) == (np.float64, np.float64)  # the process's mode


@pytest.mark.parametrize("model", ["gmm", "vae"])
def test_numpyro_importance_weights_of_a_float32_fit_make_no_float64_array(model):
    """The held-out scores of a float32 fit (``evaluation.importance_statistics``) compute in
    float32, as its steps do: the mixture's draws were float64."""
    spec, data = _example(model)
    fit = inference.fit(
        model, data, "svi", "numpyro", num_steps=1, tol=0, dtype="float32", progress=False,
        **spec.example_options,
    )  # fmt: skip
    scored = evaluation.fitted(fit)
    back = inference.get_backend("numpyro")
    device = back.resolve_device("cpu")
    config = back.backend_config(scored.config, device, "float32")
    weights = evaluation._weight_function(
        spec, scored.guide, back, config, device, "float32", repr(scored.config)
    )
    rows = {k: back.asarray(v[:5], device, "float32") for k, v in data.items()}
    params = back.as_params(scored.raw_params, device, "float32")
    program = jax.make_jaxpr(weights.compiled, static_argnums=3)(
        rows, params, jax.random.PRNGKey(0), 2
    )
    assert dict(_float64_arrays(program.jaxpr, collections.Counter())) == {}
