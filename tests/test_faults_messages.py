"""Fault injection: errors that say what to fix. A fault the user made (a NaN in a row of a file,
a label out of range in a later minibatch, a partial or non-finite ``init=``, a device that is
not there, a request that cannot fit in memory, an extreme model option) is named as the user
gave it, not reported as a place in a minibatch, a tracer's internals, a bare assertion, an
allocation failure deep in a backend, or a divergence blamed on the learning rate.

Kept cheap: tiny data, a few steps; most faults are found before the first step.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import inference
import zoo
from inference.minibatch import PermutedBatches
from inference.streaming import DataError

pytestmark = pytest.mark.usefixtures("one_torch_thread")

ROOT = Path(__file__).resolve().parents[1]
BACKENDS = ["pyro", "numpyro"]
GMM_X = zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(0), 40)["x"]
BAM = zoo.get_model("bam_classifier")


def _memmap(tmp_path, name, array):
    np.save(tmp_path / f"{name}.npy", array)
    return np.load(tmp_path / f"{name}.npy", mmap_mode="r")


def _row_of_step(step, num_data=40, batch_size=10, seed=0):
    """A row of the user's array that the minibatch of ``step`` (0-based) holds, not its first."""
    return int(PermutedBatches(num_data, batch_size, seed).indices(step)[3])


# --- item: rows of the user's array, ranges of integer fields, in later minibatches ----------


@pytest.mark.slow
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_nan_in_a_memory_mapped_array_names_its_row_in_the_array(backend, tmp_path):
    row = _row_of_step(1)
    x = GMM_X.copy()
    x[row, 1] = np.nan
    with pytest.raises(
        DataError, match=rf"step 2 .*data\['x'\] contains NaN or inf in 1 row\(s\): {row}\."
    ):
        inference.fit(
            "bayesian_gmm", {"x": _memmap(tmp_path, "x", x)}, "svi", backend, K=2,
            batch_size=10, num_steps=3, progress=False,
        )  # fmt: skip


# NumPyro's case compiles for 20 s; the stream's check is the layer's (NumPyro's streamed
# minibatches are checked in the default run by the latent-label case below).
@pytest.mark.parametrize("backend", ["pyro", pytest.param("numpyro", marks=pytest.mark.slow)])
def test_a_nan_in_a_streamed_minibatch_names_its_row_in_the_stream(backend):
    second = GMM_X[20:].copy()
    second[3, 0] = np.inf
    with pytest.raises(DataError, match=r"step 2 .*NaN or inf in 1 row\(s\): 23\."):
        inference.fit(
            "bayesian_gmm", iter([GMM_X[:20], second]), "svi", backend, K=2, num_data=40,
            num_steps=2, progress=False,
        )  # fmt: skip


# NumPyro's case mostly compiles; the minibatch check is the layer's, before either backend.
@pytest.mark.parametrize("backend", ["pyro", pytest.param("numpyro", marks=pytest.mark.slow)])
def test_a_label_out_of_range_in_a_later_minibatch_names_field_row_and_range(backend, tmp_path):
    data = BAM.make_data(np.random.default_rng(0), 40)
    row = _row_of_step(2)
    data["y"][row] = 12
    files = {k: _memmap(tmp_path, k, v) for k, v in data.items()}
    with pytest.raises(DataError) as caught:
        inference.fit(
            "bam_classifier", files, "svi", backend, batch_size=10, num_steps=4,
            progress=False, **BAM.example_options,
        )  # fmt: skip
    message = str(caught.value)
    assert "step 3" in message and "data['y']" in message and "[0, 10)" in message
    assert "num_classes=10" in message and f"got 12 in 1 row(s): {row}." in message
    assert "learning rate" not in message


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_latent_label_out_of_range_in_a_later_streamed_minibatch_is_named(backend):
    spec = zoo.get_model("exchangeable_tokens")
    data = spec.make_data(np.random.default_rng(0), 8)
    data["z"] = np.zeros(8, dtype=np.int64)
    data["z"][6] = 3  # K=3: labels 0..2
    halves = [{k: v[:4] for k, v in data.items()}, {k: v[4:] for k, v in data.items()}]
    with pytest.raises(
        DataError,
        match=r"step 2 .*data\['z'\] must hold values in \[0, 3\) \(K=3\); got 3 in 1 row\(s\): 6\.",
    ):
        inference.fit(
            "exchangeable_tokens", iter(halves), "svi", backend, K=3, num_data=8,
            num_steps=2, objective="supervised", progress=False,
        )  # fmt: skip


# --- item: init= partial, non-finite or wrongly shaped ----------------------------------------

NETWORKS = {  # model: (data, options, an init key to damage)
    "vae": (
        {"x": (np.random.default_rng(0).random((12, 16)) < 0.5).astype(np.float64)},
        {"latent_dim": 2, "hidden": (4,)},
        "decoder.body.hidden.0.bias",
    ),
    "exchangeable_tokens": (
        zoo.get_model("exchangeable_tokens").make_data(np.random.default_rng(0), 6),
        {"K": 3},
        "posterior.attention.k_bias",
    ),
}


@pytest.fixture(scope="module")
def raw_params():
    """A one-step fit's raw_params per (model, backend): a complete init to damage."""
    cache = {}

    def get(model, backend):
        if (model, backend) not in cache:
            data, options, _ = NETWORKS.get(model, ({"x": GMM_X}, {"K": 2}, None))
            fitted = inference.fit(
                model, data, "svi", backend, num_steps=1, progress=False, **options
            )
            cache[model, backend] = {k: np.array(v) for k, v in fitted.raw_params.items()}
        return dict(cache[model, backend])

    return get


def _fit_from(model, backend, init):
    data, options, _ = NETWORKS.get(model, ({"x": GMM_X}, {"K": 2}, None))
    return inference.fit(
        model, data, "svi", backend, num_steps=2, progress=False, init=init, **options
    )


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("model", sorted(NETWORKS))
def test_a_partial_init_names_the_missing_keys_and_those_accepted(model, backend, raw_params):
    init = raw_params(model, backend)
    key = NETWORKS[model][2]
    del init[key]
    with pytest.raises(ValueError) as caught:
        _fit_from(model, backend, init)
    message = str(caught.value).splitlines()[0]
    assert f"missing [{key!r}]" in message
    assert "init must hold every one of" in message and repr(sorted(init)[0]) in message
    assert "Tracer" not in message and "tensor(" not in message


# NumPyro's mixture compiles a one-step fit (20 s) for the init to damage: a slow test.
@pytest.mark.parametrize(
    "model, backend",
    [
        pytest.param(m, b, marks=pytest.mark.slow)
        if (m, b) == ("bayesian_gmm", "numpyro")
        else (m, b)
        for m in [*sorted(NETWORKS), "bayesian_gmm"]
        for b in BACKENDS
    ],
)
def test_a_non_finite_init_is_refused_up_front_naming_its_key(model, backend, raw_params):
    init = raw_params(model, backend)
    key = NETWORKS[model][2] if model in NETWORKS else "dof"
    init[key] = np.full(init[key].shape, np.nan)
    with pytest.raises(
        ValueError, match=rf"init\[{key!r}\] must hold finite numbers; it holds \d+ NaN or inf"
    ):
        _fit_from(model, backend, init)


@pytest.mark.parametrize("backend", ["pyro", pytest.param("numpyro", marks=pytest.mark.slow)])
@pytest.mark.parametrize("key", ["stick_a", "scale_tril", "dof"])
def test_an_init_outside_its_support_is_refused_naming_its_key(key, backend, raw_params):
    init = raw_params("bayesian_gmm", backend)
    # A negative concentration, a Cholesky factor with a negative diagonal, a Wishart's degrees
    # of freedom below the dimension less one: finite, of the right shape, and refused.
    init[key] = -np.abs(init[key]) - 1.0
    with pytest.raises(ValueError, match=rf"init\[{key!r}\] where given\) lies outside"):
        _fit_from("bayesian_gmm", backend, init)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("model", sorted(NETWORKS))
def test_a_wrongly_shaped_init_names_its_key_and_both_shapes(model, backend, raw_params):
    init = raw_params(model, backend)
    key = NETWORKS[model][2]
    expected = init[key].shape
    init[key] = np.zeros(expected + (2,))
    wrong = rf"init\[{key!r}\] has shape \({expected[0]}, 2\), expected \({expected[0]},\)"
    with pytest.raises(ValueError, match=wrong):
        _fit_from(model, backend, init)


# --- item: a GPU asked for where there is none ------------------------------------------------


def _has_gpu(backend) -> bool:
    if backend == "pyro":
        import torch

        return torch.cuda.device_count() > 0
    import jax

    return any(d.platform == "gpu" for d in jax.devices())


@pytest.mark.parametrize("algorithm", ["svi", "cavi"])
def test_jax_platforms_cuda_without_a_gpu_says_what_to_set(algorithm, tmp_path):
    script = (
        "import numpy as np, inference\n"
        "x = np.random.default_rng(0).normal(size=(20, 2))\n"
        f"inference.fit('bayesian_gmm', {{'x': x}}, {algorithm!r}, 'numpyro', K=2,"
        " num_steps=1, progress=False)\n"
    )
    env = {**os.environ, "JAX_PLATFORMS": "cuda", "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    if done.returncode == 0:
        pytest.skip("JAX found a CUDA device here")
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError: JAX cannot start the platform(s) JAX_PLATFORMS='cuda'")
    assert "no CUDA device is visible to JAX" in last
    assert "Unset JAX_PLATFORMS, or set JAX_PLATFORMS=cpu" in last


@pytest.mark.parametrize("device", ["cuda", "gpu"])
@pytest.mark.parametrize("backend", BACKENDS)
def test_a_gpu_asked_for_where_there_is_none_says_so(backend, device):
    if _has_gpu(backend):
        pytest.skip("a GPU is there")
    engine = "torch" if backend == "pyro" else "JAX"
    with pytest.raises(ValueError, match=f"{device}.*no CUDA device is visible to {engine}"):
        inference.fit(
            "bayesian_gmm", {"x": GMM_X}, "svi", backend, K=2, num_steps=1, device=device,
            progress=False,
        )  # fmt: skip


# --- item: a divergence caused by an extreme option names it before the generic advice ---------


# Pyro's fit of the first option in the default run; the others, each a NumPyro compilation or
# a longer divergence, in the slow one.
@pytest.mark.parametrize(
    "option, backend",
    [
        ("mean_precision_prior", "pyro"),
        pytest.param("mean_precision_prior", "numpyro", marks=pytest.mark.slow),
        *[pytest.param("degrees_of_freedom_prior", b, marks=pytest.mark.slow) for b in BACKENDS],
    ],
)
def test_a_divergence_from_an_extreme_option_names_it_first(option, backend):
    with pytest.raises(inference.NonFiniteObjectiveError) as caught:
        inference.fit(
            "bayesian_gmm", {"x": GMM_X}, "svi", backend, K=2, num_steps=5, progress=False,
            **{option: 1e300},
        )  # fmt: skip
    message = str(caught.value)
    named = message.find(f"{option}=1e+300 have extreme values")
    assert 0 <= named < message.find("Lower the learning rate")


def _failing_at_call(monkeypatch, algorithm: str, call: int, error: Exception):
    """``algorithm``'s steps raise ``error`` from their ``call``-th call on."""
    alg = inference.get_algorithm(algorithm)
    step, calls = alg.step, []

    def failing(state):
        calls.append(None)
        if len(calls) >= call:
            raise error
        return step(state)

    monkeypatch.setattr(alg, "step", failing)


def test_a_stochastic_step_whose_draw_cannot_be_factorised_ends_as_a_divergence(monkeypatch):
    """A guide's draw that rounding leaves not positive definite (Pyro: torch's LinAlgError from
    a Cholesky factorisation; NumPyro: a NaN objective) ends SVI with the advice of a non-finite
    objective and the last parameters; a closed-form step's LinAlgError is raised as it is."""
    import torch

    singular = torch.linalg.LinAlgError("linalg.cholesky: the input is not positive-definite")
    _failing_at_call(monkeypatch, "svi", 3, singular)
    with pytest.raises(inference.NonFiniteObjectiveError) as caught:
        inference.fit("bayesian_gmm", {"x": GMM_X}, "svi", "pyro", K=2, num_steps=5, progress=False)
    message = str(caught.value)
    assert message.startswith("Step 3 failed (")
    assert "LinAlgError: linalg.cholesky" in message and "Lower the learning rate" in message
    assert "the parameters of step 2 are kept" in message
    assert caught.value.result is not None and caught.value.__cause__ is singular
    _failing_at_call(monkeypatch, "em", 2, np.linalg.LinAlgError("Singular matrix"))
    with pytest.raises(np.linalg.LinAlgError, match="Singular matrix"):
        inference.fit("gmm", {"x": GMM_X}, "em", "pyro", K=2, num_steps=5, progress=False)


def test_ordinary_options_are_never_called_extreme():
    from inference.loop import extreme_options

    ordinary = {"K": 10**9, "lr": 0.01, "reg_covar": 0.0, "temperature": (1.0, 0.5), "guide": "x"}
    assert extreme_options(ordinary) == []
    assert extreme_options({"prior": np.array([1.0, 1e-30])}) == ["prior=array([1.e+00, 1.e-30])"]


# --- item: memory estimated before allocating ---------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_too_many_particles_are_refused_with_the_memory_they_need(backend):
    from zoo.memory import InsufficientMemoryError

    x = np.random.default_rng(0).normal(size=(1000, 2))
    with pytest.raises(InsufficientMemoryError) as caught:
        inference.fit(
            "bayesian_gmm", {"x": x}, "svi", backend, K=2, num_particles=10**7, num_steps=1,
            progress=False,
        )  # fmt: skip
    message = str(caught.value)
    assert "num_particles=10,000,000 on 1,000 rows a step would need at least" in message
    assert "GiB available" in message and "Pass num_particles <= " in message
    assert isinstance(caught.value, MemoryError) and isinstance(caught.value, ValueError)
