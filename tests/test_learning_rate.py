"""Learning-rate stages (``lr=[(num_steps, lr), ...]``): parsing, both backends' rule, a fit."""

import jax.numpy as jnp
import numpy as np
import pytest

import inference
from inference.learning_rate import Stages, parse, record


def test_stages_hold_each_rate_for_its_steps_then_the_last():
    stages = parse([(2, 0.1), (3, 0.01)])
    assert stages == Stages(ends=(2, 5), values=(0.1, 0.01))
    assert [stages.at(t) for t in range(7)] == [0.1, 0.1, 0.01, 0.01, 0.01, 0.01, 0.01]
    rate = stages.jax_schedule()
    np.testing.assert_allclose(
        [float(rate(jnp.asarray(t))) for t in range(7)], [stages.at(t) for t in range(7)], rtol=1e-6
    )
    assert record([(2, 0.1), (3, 0.01)]) == [[2, 0.1], [3, 0.01]]
    assert parse(record([(2, 0.1), (3, 0.01)])) == stages
    assert record(0.5) == 0.5


@pytest.mark.parametrize(
    "lr,match",
    [
        (0.0, r"range \(0, inf\)"),
        (float("nan"), r"range \(0, inf\)"),
        ("fast", r"range \(0, inf\)"),
        ([], "at least one"),
        ([(0, 0.1)], "num_steps must be an int >= 1"),
        ([(1.5, 0.1)], "num_steps must be an int >= 1"),
        ([(3, -0.1)], r"range \(0, inf\)"),
        ([(3, 0.1, 2)], r"\(num_steps, lr\) pairs"),
    ],
)
def test_bad_learning_rates_are_refused(lr, match):
    with pytest.raises(ValueError, match=match):
        parse(lr)


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_a_fit_switches_rate_when_a_stage_ends(backend):
    """After a first stage of 8 updates the rate drops to 1e-30: the parameters stop moving.
    (A small VAE: every parameter is Adam's, none has a closed-form update.)"""
    x = (np.random.default_rng(0).random((64, 16)) < 0.3).astype(np.float64)

    def fit(num_steps, lr):
        return inference.fit(
            "vae",
            {"x": x},
            "svi",
            backend,
            num_steps=num_steps,
            lr=lr,
            progress=False,
            latent_dim=2,
            hidden=(8,),
        ).raw_params

    stages = [(8, 0.05), (1, 1e-30)]
    after_stage, later, constant = fit(8, stages), fit(14, stages), fit(14, 0.05)
    assert any(not np.allclose(constant[k], after_stage[k]) for k in constant)
    for k in after_stage:
        np.testing.assert_allclose(later[k], after_stage[k], rtol=1e-12, atol=1e-20)
