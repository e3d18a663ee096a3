"""Validation of a fit whose guide sums its discrete latent out (an enumerated guide): the held-out
score is the exact ELBO that training optimises, so early stopping acts on the objective and not on
a draw of the latent, and both backends stop at the same step with the same parameters."""

import warnings

import numpy as np
import pytest

import inference
from zoo.exchangeable import prepare, simulate

MODEL = "exchangeable_tokens"  # guide "attention": q(z | X) enumerated in training


def exact_heldout(data, params) -> float:
    """The per-point ELBO of ``data`` at ``params``, as training computes it: the objective of
    a step too small to move the parameters."""
    fit = inference.fit(
        MODEL, data, "svi", "pyro", K=3, num_steps=1, tol=0, init=params, lr=1e-12, progress=False
    )
    return fit.history["objective"][0] / len(data["x"])


@pytest.fixture(scope="module")
def fits():
    rng = np.random.default_rng(0)
    config = prepare({"x": np.zeros((2, 4, 2))}, K=3)
    train = {"x": simulate(config, rng, 30, 6)["x"]}
    held_out = {"x": simulate(config, rng, 11, 6)["x"]}
    options = dict(K=3, tol=0, progress=False)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        start = inference.fit(MODEL, train, "svi", "pyro", num_steps=1, **options).raw_params
        results = {
            backend: inference.fit(
                MODEL,
                train,
                "svi",
                backend,
                num_steps=40,
                init=start,
                validation_data=held_out,
                validate_every=5,
                patience=3,
                **options,
            )  # fmt: skip
            for backend in ("pyro", "numpyro")
        }
        exact = {b: exact_heldout(held_out, r.raw_params) for b, r in results.items()}
    return results, exact


def test_validation_is_the_exact_heldout_elbo(fits):
    results, exact = fits
    for backend, result in results.items():
        steps = list(result.history["validation_step"])
        best = result.history["validation"][steps.index(result.best_step)]
        assert best == pytest.approx(exact[backend], abs=1e-6), backend


def test_backends_stop_alike(fits):
    results, _ = fits
    pyro, numpyro = results["pyro"], results["numpyro"]
    assert pyro.best_step == numpyro.best_step
    np.testing.assert_allclose(pyro.history["validation"], numpyro.history["validation"], atol=1e-5)
    for name, value in pyro.raw_params.items():
        np.testing.assert_allclose(value, numpyro.raw_params[name], atol=1e-5, err_msg=name)
