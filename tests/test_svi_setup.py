"""An SVI option is declared once, in ``SVIOptions``: the engines receive it under its own name
(``SVISetup``), and results and checkpoints record it without a list to extend."""

import dataclasses

import numpy as np
import pytest

import inference
import zoo
from inference.algorithms import svi
from inference.backends.svi_setup import SVISetup


def test_setup_takes_options_by_name_and_derived_values_over_them():
    options = svi.SVIOptions(num_particles=3, jit=True, lr=0.01, elbo="iwae")
    setup = SVISetup.from_options(options, elbo="trace", lr="parsed", seed=4, device="cpu")
    assert (setup.num_particles, setup.jit, setup.data_parallel) == (3, True, False)
    assert (setup.elbo, setup.lr, setup.seed) == ("trace", "parsed", 4)


def test_every_engine_setting_named_like_an_option_comes_from_it():
    shared = {f.name for f in dataclasses.fields(SVISetup)} & {
        f.name for f in dataclasses.fields(svi.SVIOptions)
    }
    assert shared >= {"num_particles", "data_parallel", "jit"}
    options = svi.SVIOptions(num_particles=7, data_parallel=True, jit=True)
    setup = SVISetup.from_options(options, elbo="trace", lr=0.1, seed=0, device="cpu")
    for name in shared - {"elbo", "lr"}:  # the two that SVI.init works out from the option
        assert getattr(setup, name) == getattr(options, name)


@dataclasses.dataclass(frozen=True)
class WithAnotherOption(svi.SVIOptions):
    clip_norm: float | None = None


@pytest.mark.parametrize("clip_norm", [None, 5.0])
def test_an_added_option_is_recorded_only_where_set(clip_norm):
    spec = zoo.get_model("gmm")
    data = spec.make_data(np.random.default_rng(0), 20)
    problem, _ = inference.make_problem("gmm", data, "svi", "numpyro")
    record = svi._record(WithAnotherOption(clip_norm=clip_norm), problem, spec.guides[0])
    assert record == {
        **svi._record(svi.SVIOptions(), problem, spec.guides[0]),
        **({} if clip_norm is None else {"clip_norm": 5.0}),
    }
    assert "jit" not in record and "data_parallel" not in record  # the defaults, not recorded
