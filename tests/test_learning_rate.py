"""Learning-rate stages (``lr=[(num_steps, lr), ...]``): parsing, both backends' rule, a fit."""

import jax.numpy as jnp
import numpy as np
import pytest

import inference
import zoo
from inference.learning_rate import AVERAGE_HORIZON, Stages, parse, record


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


# NumPyro's stages run in the default run by the Adam-restart test below.
@pytest.mark.parametrize("backend", ["pyro", pytest.param("numpyro", marks=pytest.mark.slow)])
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


def test_adam_restarts_at_the_first_update_of_every_later_stage():
    stages = parse([(2, 0.1), (3, 0.01), (1, 0.001)])  # stages start at 0, 2 and 5
    assert [t for t in range(9) if stages.restarts_at(t)] == [2, 5]
    assert [int(stages.jax_stage_start(jnp.asarray(t))) for t in range(9)] == [
        0, 0, 2, 2, 2, 5, 5, 5, 5,
    ]  # fmt: skip
    assert not parse([(4, 0.1)]).restarts_at(4)  # one stage: never


def _descend(optim, state):
    """One update of ``optim`` on ``sum((x - target)**4) / 2``, whose gradient grows steeply."""
    target = jnp.asarray([3.0, -2.0, 0.5])
    return optim.update({"x": 2 * (optim.get_params(state)["x"] - target) ** 3}, state)


def test_numpyros_staged_adam_is_adam_within_a_stage_and_fresh_adam_after():
    """Within the first stage, numpyro.optim.Adam on the stages' schedule, bit for bit; from the
    first update of the second stage on, a new numpyro.optim.Adam at that stage's rate started
    where the first stage ended (rates exact in float32, as the schedule reads them)."""
    import numpyro.optim

    from inference.backends.numpyro_adam import StagedAdam

    stages = parse([(3, 0.5), (1, 0.125)])

    def run(optim, x, steps):
        state = optim.init({"x": x})
        for _ in range(steps):
            state = _descend(optim, state)
        return optim.get_params(state)["x"]

    x0 = jnp.zeros(3)
    first = run(numpyro.optim.Adam(stages.jax_schedule()), x0, 3)
    np.testing.assert_array_equal(run(StagedAdam(stages), x0, 3), first)
    fresh = run(numpyro.optim.Adam(0.125), first, 4)
    np.testing.assert_array_equal(run(StagedAdam(stages), x0, 7), fresh)
    assert not np.allclose(run(numpyro.optim.Adam(stages.jax_schedule()), x0, 7), fresh)


def test_the_last_stage_is_averaged_with_weights_that_start_at_one():
    stages = parse([(3, 0.1), (2, 0.01)])
    assert stages.averages and not parse([(3, 0.1)]).averages
    decay = 1 - 1 / AVERAGE_HORIZON
    # The average is the iterate until the last stage's first update, then the debiased
    # exponential average: weights 1, (1-b)/(1-b^2), (1-b)/(1-b^3), ...
    # (the last stage starts after 3 updates; its k-th update makes 3 + k).
    expected = [1.0] * 5 + [(1 - decay) / (1 - decay**k) for k in (2, 3)]
    weights = [stages.average_weight(t) for t in range(7)]
    np.testing.assert_allclose(weights, expected, rtol=1e-12)
    assert weights[4] == 1.0  # exactly: the average starts as the first iterate itself
    traced = [float(stages.jax_average_weight(jnp.asarray(t))) for t in range(7)]
    # In float32 (JAX's 64-bit mode off) 1 - b and 1 - b**k keep about five digits.
    np.testing.assert_allclose(traced, expected, rtol=5e-5)
    assert parse([(3, 0.1)]).average_weight(10) == 1.0  # one stage: the last iterate
    # The horizon is the window of SVI's stopping rule: the average weighs what the rule compared.
    assert inference.get_algorithm("svi").traits.window == AVERAGE_HORIZON


def test_numpyros_staged_adam_keeps_the_average_of_the_last_stages_iterates():
    from inference.backends.numpyro_adam import StagedAdam

    stages = parse([(3, 0.5), (1, 0.125)])
    optim = StagedAdam(stages)
    state = optim.init({"x": jnp.zeros(3)})
    average = None
    for t in range(1, 9):
        state = _descend(optim, state)
        iterate = np.asarray(optim.get_params(state)["x"])
        weight = stages.average_weight(t)
        average = iterate if average is None else average + weight * (iterate - average)
        np.testing.assert_allclose(optim.get_average(state)["x"], average, rtol=1e-5)
    assert not np.allclose(optim.get_average(state)["x"], iterate)


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_a_fit_restarts_adam_when_a_stage_begins(backend):
    """A fit over two stages takes the steps of a fit of the first stage followed by a new fit
    at the second stage's rate from its parameters: Adam's moments do not carry over; it returns
    the average of the second stage's iterates. (The maximum-likelihood mixture's guide draws
    nothing, so its objective is exact.)"""
    x = zoo.get_model("gmm").make_data(np.random.default_rng(0), 200)
    common = dict(K=2, progress=False, tol=0, reg_covar=0.0)

    def fit(num_steps, lr, init=None):
        return inference.fit("gmm", x, "svi", backend, num_steps=num_steps, lr=lr, init=init,
                             **common)  # fmt: skip

    staged = fit(12, [(6, 0.05), (1, 0.01)])
    first = fit(6, 0.05)
    continued = fit(6, 0.01, init=first.raw_params)
    np.testing.assert_allclose(
        staged.history["objective"][6:], continued.history["objective"], rtol=1e-10
    )
    # The staged fit returns the average of its last stage's iterates, which are the continued
    # fit's: those of fits of 1 to 6 steps (a constant rate returns the last iterate). The means
    # move in coordinates linear in them, so their average is the average of the means.
    stages = parse([(6, 0.05), (1, 0.01)])
    average = None
    for k in range(1, 7):
        iterate = fit(k, 0.01, init=first.raw_params).raw_params["means"]
        weight = stages.average_weight(6 + k)
        average = iterate if average is None else average + weight * (iterate - average)
    np.testing.assert_allclose(staged.raw_params["means"], average, rtol=1e-6)
    assert not np.allclose(staged.raw_params["means"], continued.raw_params["means"], rtol=1e-6)
