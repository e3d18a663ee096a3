"""The twin checks compare the twins away from their starting point too, hold each twin to the
parameters ``init`` gives it, and hold a model's closed-form updates to the twins.

A rate written where the other twin has a scale gives the same density wherever the value is 1,
as starting parameters and an example's options often are: the checks move every parameter
and float option off its start before they compare again. A closed-form fit must report the
twins' own objective, and stop where the twins' objective is at a maximum.

The model here is a Gamma-Poisson rate, ``rate ~ Gamma(prior_shape, prior_rate)``,
``y_n ~ Poisson(rate)``, whose options default to 1, with twins, a Gamma guide and CAVI updates
written in memory; each test slips one of them.
"""

from __future__ import annotations

import dataclasses
import re
import sys
import types
from dataclasses import dataclass

import numpy as np
import pytest
from scipy import stats
from scipy.special import gammaln

import zoo
from inference.tools import conformance
from zoo import ClosedFormUpdates, DataField, ModelSpec
from zoo.testing import (
    OPTION_FACTOR,
    check_twin_guides,
    check_twins_and_log_joint,
    example_problem,
    moved_options,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


# --- The model, its twins and its updates, in memory -----------------------------------------


@dataclass(frozen=True)
class RateConfig:
    prior_shape: float
    prior_rate: float


def prepare(data, prior_shape: float = 1.0, prior_rate: float = 1.0) -> RateConfig:
    for name, value in (("prior_shape", prior_shape), ("prior_rate", prior_rate)):
        if not (np.isfinite(value) and value > 0):
            raise ValueError(f"{name} must be a float in (0, inf); got {value}.")
    return RateConfig(float(prior_shape), float(prior_rate))


def make_data(rng, n=60):
    return {"y": rng.poisson(3.0, size=n)}


def sample_posterior(raw, config, family, rng, num_samples):
    return {"rate": rng.gamma(raw["rate_conc"], 1.0 / raw["rate_rate"], size=int(num_samples))}


def log_likelihood(draws, data):
    rate = np.asarray(draws["rate"])[:, None]
    y = np.asarray(data["y"], float)[None, :]
    return y * np.log(rate) - rate - gammaln(y + 1)


def pyro_twin(ignore_init=()):
    """The Pyro twin; its guide ignores ``init`` for the parameters in ``ignore_init``."""
    import pyro
    import pyro.distributions as dist
    import torch
    from pyro.distributions import constraints

    def model(data, config, temperature=None, init=None):
        y = data["y"]
        shape, rate = (
            torch.tensor(v, dtype=y.dtype) for v in (config.prior_shape, config.prior_rate)
        )
        rate = pyro.sample("rate", dist.Gamma(shape, rate))
        with pyro.plate("data", y.shape[0]):
            pyro.sample("y", dist.Poisson(rate), obs=y)

    def make_guide(name, config, init):
        init = {k: v for k, v in (init or {}).items() if k not in ignore_init}

        def param(name, y):
            start = torch.tensor(init.get(name, 1.0), dtype=y.dtype)
            return pyro.param(name, start, constraint=constraints.positive)

        def guide(data, config, temperature=None):
            y = data["y"]
            pyro.sample("rate", dist.Gamma(param("rate_conc", y), param("rate_rate", y)))

        return guide

    return {"model": model, "make_guide": make_guide}


def numpyro_twin(prior_rate_as_scale=False, guide_rate_as_scale=False):
    """The NumPyro twin, with a rate written as a scale (its inverse) in the prior or the guide."""
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.distributions import constraints

    def model(data, config, temperature=None, init=None):
        y = data["y"]
        rate = 1.0 / config.prior_rate if prior_rate_as_scale else config.prior_rate
        rate = numpyro.sample("rate", dist.Gamma(jnp.asarray(config.prior_shape), rate))
        with numpyro.plate("data", y.shape[0]):
            numpyro.sample("y", dist.Poisson(rate), obs=y)

    def make_guide(name, config, init):
        init = init or {}

        def param(name):
            return numpyro.param(
                name, jnp.asarray(init.get(name, 1.0)), constraint=constraints.positive
            )

        def guide(data, config, temperature=None):
            b = param("rate_rate")
            numpyro.sample(
                "rate", dist.Gamma(param("rate_conc"), 1.0 / b if guide_rate_as_scale else b)
            )

        return guide

    return {"model": model, "make_guide": make_guide}


def updates_module(elbo_constant=True, counts_twice=False):
    """CAVI's updates: one lands on the exact posterior. ``elbo_constant=False`` leaves log y!
    out of the ELBO; ``counts_twice`` counts the data points twice in the posterior's rate."""

    def init_cache(data, config, xp):
        y = data["y"]
        return {
            "sum_y": xp.sum(y),
            "n": xp.sum(xp.ones(y.shape, like=y)),
            "lgf": xp.sum(xp.gammaln(y + 1.0)),
        }

    def init_state(cache, config, xp):
        like = cache["sum_y"]
        return {
            "rate_conc": config.prior_shape + 0.0 * like,
            "rate_rate": config.prior_rate + 0.0 * like,
        }

    def elbo(state, cache, config, xp):
        a, b = state["rate_conc"], state["rate_rate"]
        a0, b0 = config.prior_shape, config.prior_rate
        expected = cache["sum_y"] * (xp.digamma(a) - xp.log(b)) - cache["n"] * a / b
        if elbo_constant:
            expected = expected - cache["lgf"]
        kl = (
            (a - a0) * xp.digamma(a)
            - xp.gammaln(a)
            + xp.gammaln(a0 + 0.0 * a)
            + a0 * (xp.log(b) - xp.log(b0 + 0.0 * b))
            + a * (b0 - b) / b
        )
        return expected - kl

    def update(state, cache, config, xp):
        n = 2.0 * cache["n"] if counts_twice else cache["n"]
        new = {"rate_conc": config.prior_shape + cache["sum_y"], "rate_rate": config.prior_rate + n}
        return new, elbo(state, cache, config, xp)

    def raw_params(state, cache, xp):
        return dict(state)

    return {
        "init_cache": init_cache,
        "init_state": init_state,
        "update": update,
        "raw_params": raw_params,
    }


def _module(monkeypatch, name: str, functions: dict) -> str:
    """A module that exists only in memory, importable by ``name``."""
    module = types.ModuleType(name)
    module.__dict__.update(functions)
    monkeypatch.setitem(sys.modules, name, module)
    return name


def rate_model(monkeypatch, name: str, pyro=None, numpyro=None, updates=None) -> ModelSpec:
    """The Gamma-Poisson spec, its twins and updates the given ones (default: written right).
    Each slip has a name of its own: NumPyro keeps a compiled update by its module's name."""
    backends = {
        "pyro": _module(monkeypatch, f"{name}_pyro", pyro or pyro_twin()),
        "numpyro": _module(monkeypatch, f"{name}_numpyro", numpyro or numpyro_twin()),
    }
    module = _module(monkeypatch, f"{name}_updates", updates or updates_module())
    return ModelSpec(
        name=name,
        description="Gamma-Poisson rate",
        data={"y": DataField(ndim=1, kind="iu", doc="(N,) counts")},
        backends=backends,
        guides=("gamma",),
        prepare=prepare,
        updates=ClosedFormUpdates(module, objective="elbo"),
        make_data=make_data,
        config_type=RateConfig,
        sample_posterior=sample_posterior,
        log_likelihood=log_likelihood,
    )


# --- The twins, at a second point ------------------------------------------------------------


def test_the_model_written_right_passes_both_checks(monkeypatch):
    spec = rate_model(monkeypatch, "rate_right")
    check_twins_and_log_joint(spec)
    check_twin_guides(spec)


def test_a_prior_rate_written_as_a_scale_is_caught_with_the_options_moved(monkeypatch):
    """prior_rate is 1 in the example: the slip gives the same log-joint there, not at 1.37."""
    spec = rate_model(
        monkeypatch, "rate_prior_slip", numpyro=numpyro_twin(prior_rate_as_scale=True)
    )
    with pytest.raises(AssertionError, match="log-joint at the same point differs") as err:
        check_twins_and_log_joint(spec)
    message = str(err.value)
    assert "options prior_shape=1.37, prior_rate=1.37" in message
    assert "a rate against a scale" in message
    # The gap between the two priors at the rate r Pyro drew is 2 a0 log b0 - r (b0 - 1 / b0)
    # at a0 = b0 = 1.37: solved for r, Pyro's number is the log-joint of the example data there.
    pyro_logp, numpyro_logp = (
        float(re.search(rf"{twin} (-?\d+\.\d+)", message).group(1)) for twin in (" pyro", "numpyro")
    )
    a0 = b0 = OPTION_FACTOR
    rate = (2 * a0 * np.log(b0) - (pyro_logp - numpyro_logp)) / (b0 - 1 / b0)
    y = example_problem(spec)[0]["y"]
    log_joint = stats.gamma.logpdf(rate, a0, scale=1 / b0) + stats.poisson.logpmf(y, rate).sum()
    assert rate > 0 and pyro_logp == pytest.approx(log_joint, abs=1e-9)


def test_a_guide_rate_written_as_a_scale_is_caught_with_the_parameters_moved(monkeypatch):
    """The guide starts at rate_rate = 1, where Gamma(a, b) and Gamma(a, 1 / b) agree."""
    spec = rate_model(
        monkeypatch, "rate_guide_slip", numpyro=numpyro_twin(guide_rate_as_scale=True)
    )
    check_twins_and_log_joint(spec)  # the models agree
    with pytest.raises(AssertionError, match="guide 'gamma': log-density at the same") as err:
        check_twin_guides(spec)
    assert "at parameters moved off their start" in str(err.value)


def test_a_guide_that_ignores_init_is_named(monkeypatch):
    spec = rate_model(monkeypatch, "rate_own_start", pyro=pyro_twin(ignore_init=("rate_rate",)))
    check_twins_and_log_joint(spec)
    with pytest.raises(AssertionError, match="does not start from init") as err:
        check_twin_guides(spec)
    message = str(err.value)
    assert "guide 'gamma' of the Pyro twin" in message and "['rate_rate']" in message
    assert "traced [1.]" in message  # its own start, not init's value


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_a_model_that_ignores_init_for_a_parameter_is_named(monkeypatch, backend):
    """The built-in mixture with one twin's model starting its means from the data whatever
    init says: the log-joints agree (the NumPyro twin is given the Pyro trace's values), but
    the parameter is named."""
    spec = zoo.get_model("gmm")
    real = spec.twin(backend)

    def model(data, config, temperature=None, init=None):
        init = {k: v for k, v in (init or {}).items() if k != "means"}
        return real.model(data, config, temperature, init)

    path = _module(
        monkeypatch, f"gmm_means_own_{backend}", {"model": model, "make_guide": real.make_guide}
    )
    slipped = dataclasses.replace(
        spec, name="gmm_means_own", backends={**spec.backends, backend: path}
    )
    with pytest.raises(AssertionError, match="does not start from init") as err:
        check_twins_and_log_joint(slipped)
    title = {"pyro": "Pyro", "numpyro": "NumPyro"}[backend]
    assert f"the model of the {title} twin" in str(err.value) and "['means']" in str(err.value)


def test_float_options_move_by_the_factor_or_its_inverse_and_the_rest_stay(monkeypatch):
    """Each float option is multiplied by OPTION_FACTOR; one that prepare refuses so is divided;
    one it refuses either way stays; ints and strings stay; an option left None moves the value
    the config resolves it to."""

    @dataclass(frozen=True)
    class Config:
        scale: float
        probability: float
        fixed: float
        resolved: float
        count: int
        name: str

    def prepare(data, scale=2.0, probability=1.0, fixed=0.5, resolved=None, count=3, name="a"):
        if probability > 1.0:
            raise ValueError("probability must be at most 1")
        if fixed != 0.5:
            raise ValueError("fixed must be 0.5")
        return Config(scale, probability, fixed, 4.0 if resolved is None else resolved, count, name)

    spec = dataclasses.replace(
        rate_model(monkeypatch, "rate_options"), prepare=prepare, config_type=Config
    )
    assert moved_options(spec, count=5) == {
        "count": 5,
        "scale": 2.0 * OPTION_FACTOR,
        "probability": 1.0 / OPTION_FACTOR,
        "resolved": 4.0 * OPTION_FACTOR,
    }
    # The built-in Bayesian mixture: K is an int, weight_concentration_prior=None resolves to
    # 1 / K, and reg_covar=0 stays 0.
    moved = moved_options(zoo.get_model("bayesian_gmm"))
    assert moved["K"] == 3 and moved["reg_covar"] == 0.0
    assert moved["weight_concentration_prior"] == pytest.approx(OPTION_FACTOR / 3, rel=1e-15)
    assert moved["mean_precision_prior"] == OPTION_FACTOR
    assert moved["degrees_of_freedom_prior"] == 2 * OPTION_FACTOR  # D = 2


# --- Closed-form updates against the twins ---------------------------------------------------


def _twins_numbers(message: str) -> tuple[float, float]:
    """(the reported objective, the twins' after the last update) from the check's message."""
    reported = float(re.search(r"step \d+, (-?[\d.]+) nats", message).group(1))
    after = float(re.search(r"(-?[\d.]+) after it", message).group(1))
    return reported, after


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_an_elbo_missing_a_constant_is_caught(monkeypatch, backend):
    """The update's ELBO leaves log y! out: it reports more than the twins' ELBO, by exactly
    sum_n log y_n!."""
    spec = rate_model(monkeypatch, "rate_no_constant", updates=updates_module(elbo_constant=False))
    with pytest.raises(AssertionError, match="is not the twins' ELBO") as err:
        conformance.check_closed_form_objective(spec, "cavi", backend)
    reported, after = _twins_numbers(str(err.value))
    data, _, _ = example_problem(spec)
    assert reported - after == pytest.approx(gammaln(data["y"] + 1.0).sum(), abs=2e-6)
    # The twins' ELBO at the exact posterior is the log evidence of the Gamma-Poisson model.
    y, a0, b0 = data["y"], 1.0, 1.0
    a, b = a0 + y.sum(), b0 + len(y)
    evidence = a0 * np.log(b0) - gammaln(a0) + gammaln(a) - a * np.log(b) - gammaln(y + 1).sum()
    assert after == pytest.approx(evidence, abs=2e-6)


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_an_update_that_misses_the_maximum_is_caught(monkeypatch, backend):
    """The update counts the data twice in q's rate: it reports the ELBO of the state it lands
    on, which is the twins' too, but that state is not the maximum the update claims."""
    spec = rate_model(monkeypatch, "rate_twice", updates=updates_module(counts_twice=True))
    with pytest.raises(AssertionError, match="is not at a maximum there") as err:
        conformance.check_closed_form_objective(spec, "cavi", backend)
    gain = float(re.search(r"raises it by (-?[\d.]+) nats", str(err.value)).group(1))
    assert gain > conformance.STATIONARITY_SLACK * 60
    assert "'rate_rate'" in str(err.value)


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_updates_written_right_pass(monkeypatch, backend):
    conformance.check_closed_form_objective(rate_model(monkeypatch, "rate_right"), "cavi", backend)


def test_check_model_holds_the_updates_to_the_twins_in_each_fit_check(monkeypatch):
    """check_model reports the objective check in its closed-form fit checks (the same names)."""
    spec = rate_model(monkeypatch, "rate_no_constant", updates=updates_module(elbo_constant=False))
    report = conformance.check_model(spec, algorithms=["cavi"], backends=["pyro"], num_steps=5)
    assert [r.name for r in report.results] == [
        "registration",
        "twins_and_log_joint",
        "twin_guides",
        "cavi/pyro",
    ]
    assert [r.status for r in report.results] == ["pass", "pass", "pass", "fail"]
    assert "is not the twins' ELBO" in report["cavi/pyro"].message


def test_a_fit_no_guide_of_the_twins_holds_is_named(monkeypatch):
    updates = updates_module()
    raw_params = updates["raw_params"]
    updates["raw_params"] = lambda state, cache, xp: {
        "q_" + k: v for k, v in raw_params(state, cache, xp).items()
    }
    spec = rate_model(monkeypatch, "rate_other_names", updates=updates)
    with pytest.raises(
        AssertionError,
        match=r"no guide of the twins has the closed-form fit's parameters \['q_rate_conc', 'q_rate_rate'\]",
    ):
        conformance.check_closed_form_objective(spec, "cavi", "pyro")


@pytest.mark.parametrize(
    "name,algorithm,backend",
    [
        # NumPyro's run of the Bayesian mixture is mostly compilation: with the slow tests.
        pytest.param(*run, marks=pytest.mark.slow)
        if run[0] == "bayesian_gmm" and run[2] == "numpyro"
        else run
        for run in [
            (name, algorithm, backend)
            for name, algorithm in [
                ("gmm", "em"),
                ("bernoulli_mixture", "em"),
                ("bayesian_gmm", "cavi"),
            ]
            for backend in ("pyro", "numpyro")
        ]
    ],
)
def test_the_built_in_updates_report_the_twins_objective(name, algorithm, backend):
    conformance.check_closed_form_objective(zoo.get_model(name), algorithm, backend)
