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


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
@pytest.mark.parametrize("platform", ["cuda", "gpu", "rocm"])
def test_a_small_model_on_a_gpu_is_flagged(platform, backend):
    threshold = NUTS_GPU_MIN_SIZE[backend]
    assert cpu_likely_faster(18, 600, platform, backend)
    assert cpu_likely_faster(1, threshold - 1, platform, backend)
    assert not cpu_likely_faster(1, threshold, platform, backend)
    assert not cpu_likely_faster(2_000, 10_000_000, platform, backend)


def test_numpyro_gains_from_a_gpu_at_smaller_sizes_than_pyro():
    """NumPyro compiles a whole trajectory; Pyro launches each operation of each leapfrog step."""
    assert NUTS_GPU_MIN_SIZE["numpyro"] < NUTS_GPU_MIN_SIZE["pyro"]
    assert cpu_likely_faster(20, 100_000, "cuda", "pyro")
    assert not cpu_likely_faster(20, 100_000, "cuda", "numpyro")


def test_the_cpu_is_never_flagged():
    assert not cpu_likely_faster(1, 1, "cpu", "pyro")
    assert not cpu_likely_faster(1, 1, "cpu", "numpyro")


def test_the_warning_names_the_sizes_the_backend_and_the_cpu():
    expected = (
        r'18 latent values x 600 data values = 10,800, below 100,000 for numpyro.*device="cpu"'
    )
    with pytest.warns(CPUFasterWarning, match=expected):
        assert warn_if_cpu_faster(18, 600, "cuda", "numpyro")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not warn_if_cpu_faster(18, 600, "cpu", "pyro")
        assert not warn_if_cpu_faster(10_000, 10_000, "cuda", "pyro")


class _Asked(Exception):
    """Raised where the sampler asks the rule, to end the fit there."""


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_both_samplers_ask_the_rule_with_their_sizes(backend, monkeypatch):
    """Each backend's sampler passes its unconstrained latent dimension (the enumerated mixture
    labels do not count), the data's number of values and its device's platform."""
    engines = __import__(f"inference.backends.{backend}_mcmc", fromlist=["NUTSEngine"])
    asked = []

    def ask(*args):
        asked.append(args)
        raise _Asked  # the chains need not run (NumPyro would compile them for 15 s)

    monkeypatch.setattr(engines, "warn_if_cpu_faster", ask)
    data = zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(0), 50)
    with pytest.raises(_Asked):
        inference.fit(
            "bayesian_gmm", data, "nuts", backend, K=3, num_chains=2, num_warmup=2, num_draws=2,
            max_tree_depth=2, progress=False,
        )  # fmt: skip
    # K=3 components in 2-D: 18 unconstrained latent values; 50 points x 2 data values.
    ((latent_dim, data_size, platform, asking),) = asked
    assert (latent_dim, data_size, platform, asking) == (18, 100, "cpu", backend)
    assert sampler_device.sampling_size(latent_dim, data_size) == 1_800
