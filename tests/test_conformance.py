"""Every registered model meets the zoo's contract, on every algorithm that supports it.

These are the checks ``inference.tools.conformance.check_model(spec)`` runs and reports on one model:
the registration, log-joint and guide checks of ``zoo.testing``, and a short fit per algorithm.
"""

import pytest

import zoo
from inference.tools import conformance
from zoo import testing

MODELS = zoo.list_models()
#: Short fits that are mostly compilation, run with the slow tests (their Pyro twins stay in the
#: default run).
SLOW_RUNS = {("bayesian_gmm", "svi", "numpyro"), ("bayesian_gmm", "nuts", "numpyro")}


@pytest.mark.parametrize("name", MODELS)
def test_registration_checks(name):
    testing.check_registration(zoo.get_model(name))


@pytest.mark.parametrize("name", MODELS)
def test_twins_trace_with_same_sites_and_log_joint(name):
    testing.check_twins_and_log_joint(zoo.get_model(name))


@pytest.mark.parametrize("name", MODELS)
def test_twins_guides_are_the_same_distribution(name):
    testing.check_twin_guides(zoo.get_model(name))


@pytest.mark.parametrize(
    "name,algorithm,backend",
    [
        pytest.param(m, a, b, marks=pytest.mark.slow) if (m, a, b) in SLOW_RUNS else (m, a, b)
        for m in MODELS
        for a, b in conformance.supported_runs(zoo.get_model(m, check=False))
    ],
)
def test_objective_improves_and_to_arviz(name, algorithm, backend):
    conformance.check_algorithm_improves(zoo.get_model(name), algorithm, backend)
