"""A converged run resumed with a tighter tol whose stopping rule its last step already meets
comes back as it ended: the same steps and parameters as an uninterrupted run at that tol. One
that does not meet it yet goes on to the uninterrupted run's result."""

import numpy as np
import pytest

import inference
import zoo

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CASES = {
    # model, algorithm, backend, data size, the first tol, a tighter one its last step meets
    "em": ("gmm", "em", "pyro", 200, 1e-2, 9.9e-3),
    "svi-natural": ("bayesian_gmm", "svi-natural", "numpyro", 200, 1e-2, 1e-4),
}


def _fit(case, tol, **options):
    model, algorithm, backend, n, _, _ = CASES[case]
    data = zoo.get_model(model).make_data(np.random.default_rng(0), n)
    return inference.fit(
        model, data, algorithm, backend, K=2, seed=4, num_steps=6000, tol=tol, progress=False,
        **options,
    )  # fmt: skip


def _same_run(resumed, fresh):
    assert resumed.converged and fresh.converged
    assert resumed.num_steps == fresh.num_steps
    np.testing.assert_array_equal(resumed.history["objective"], fresh.history["objective"])
    assert resumed.raw_params.keys() == fresh.raw_params.keys()
    for key, value in fresh.raw_params.items():
        np.testing.assert_array_equal(resumed.raw_params[key], value, err_msg=key)


@pytest.mark.parametrize("case", CASES)
def test_a_tighter_tol_already_met_ends_at_the_checkpoint(tmp_path, case):
    _, _, _, _, tol, tighter = CASES[case]
    path = str(tmp_path / "run.zoo")
    ended = _fit(case, tol, checkpoint=path)
    resumed = _fit(case, tighter, checkpoint=path, resume=True)
    fresh = _fit(case, tighter)
    assert fresh.num_steps == ended.num_steps  # the tighter tol is met where the run ended
    _same_run(resumed, fresh)


def test_a_tighter_tol_not_yet_met_goes_on(tmp_path):
    path = str(tmp_path / "run.zoo")
    ended = _fit("em", 1e-2, checkpoint=path)
    resumed = _fit("em", 1e-6, checkpoint=path, resume=True)
    fresh = _fit("em", 1e-6)
    assert fresh.num_steps > ended.num_steps
    _same_run(resumed, fresh)
