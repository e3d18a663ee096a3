"""NUTS on a GPU warns when the model is small enough that the CPU is likely faster: the rule
(a pure function of the sizes and the device's platform), and its wiring into both backends'
samplers, checked on the CPU."""

import warnings

import numpy as np
import pytest

import inference
import zoo
from inference.algorithms import sampler_device
from inference.algorithms.sampler_device import (
    NUTS_GPU_MIN_SIZE,
    CPUFasterWarning,
    cpu_likely_faster,
    warn_if_cpu_faster,
)


@pytest.mark.parametrize("platform", ["cuda", "gpu", "rocm"])
def test_a_small_model_on_a_gpu_is_flagged(platform):
    assert cpu_likely_faster(18, 600, platform)
    assert cpu_likely_faster(1, NUTS_GPU_MIN_SIZE - 1, platform)
    assert not cpu_likely_faster(1, NUTS_GPU_MIN_SIZE, platform)
    assert not cpu_likely_faster(2_000, 1_000_000, platform)


def test_the_cpu_is_never_flagged():
    assert not cpu_likely_faster(1, 1, "cpu")


def test_the_warning_names_the_sizes_and_the_cpu():
    with pytest.warns(CPUFasterWarning, match=r'18 latent values x 600 data values.*device="cpu"'):
        assert warn_if_cpu_faster(18, 600, "cuda")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not warn_if_cpu_faster(18, 600, "cpu")
        assert not warn_if_cpu_faster(10_000, 10_000, "cuda")


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_both_samplers_ask_the_rule_with_their_sizes(backend, monkeypatch):
    """Each backend's sampler passes its unconstrained latent dimension (the enumerated mixture
    labels do not count), the data's number of values and its device's platform."""
    engines = __import__(f"inference.backends.{backend}_mcmc", fromlist=["NUTSEngine"])
    asked = []
    monkeypatch.setattr(engines, "warn_if_cpu_faster", lambda *args: asked.append(args) or False)
    data = zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(0), 50)
    inference.fit(
        "bayesian_gmm", data, "nuts", backend, K=3, num_chains=2, num_warmup=2, num_draws=2,
        max_tree_depth=2, progress=False,
    )  # fmt: skip
    # K=3 components in 2-D: 18 unconstrained latent values; 50 points x 2 data values.
    ((latent_dim, data_size, platform),) = asked
    assert (latent_dim, data_size, platform) == (18, 100, "cpu")
    assert sampler_device.sampling_size(latent_dim, data_size) == 1_800
