"""Posterior accuracy measures on draws with known answers."""

import numpy as np
import pytest

from inference.accuracy import MEASURES, match_components, posterior_accuracy, relabel

COMPONENT_KEYS = ("weights", "means", "precisions")
SD_MEASURES = ("sd_ratio_median", "sd_ratio_min", "sd_ratio_max", "sliced_wasserstein")


def _regression_draws(num_draws=1000, seed=0):
    rng = np.random.default_rng(seed)
    coef = rng.normal([1.0, -2.0, 0.5], [0.3, 1.0, 0.1], size=(num_draws, 3))
    noise_scale = np.exp(rng.normal(-1.0, 0.2, size=num_draws))
    return {"coef": coef, "noise_scale": noise_scale}


def _mixture_draws(num_draws=500, seed=0):
    """A 3-component, 2-D Gaussian mixture posterior with well-separated components."""
    rng = np.random.default_rng(seed)
    centers = np.array([[-5.0, 0.0], [0.0, 5.0], [5.0, 0.0]])
    weights = rng.dirichlet([30.0, 50.0, 20.0], size=num_draws)
    means = centers + 0.2 * rng.standard_normal((num_draws, 3, 2))
    scales = np.exp(0.1 * rng.standard_normal((num_draws, 3, 2)))
    precisions = np.einsum("skd,de->skde", 1.0 / scales**2, np.eye(2))
    return {"weights": weights, "means": means, "precisions": precisions}


def _permute_components(draws, order):
    return {k: v[:, order] if k in COMPONENT_KEYS else v for k, v in draws.items()}


def test_run_against_itself_is_exact():
    draws = _regression_draws()
    acc = posterior_accuracy(draws, draws)
    assert tuple(acc) == MEASURES
    assert acc["mean_error_sd"] == 0.0
    assert acc["mean_error_sd_median"] == 0.0
    for key in ("sd_ratio_median", "sd_ratio_min", "sd_ratio_max"):
        assert acc[key] == 1.0
    assert acc["sliced_wasserstein"] < 1e-12


def test_halved_sds_around_the_same_mean():
    ref = _regression_draws()
    run = {k: v.mean(axis=0) + 0.5 * (v - v.mean(axis=0)) for k, v in ref.items()}
    acc = posterior_accuracy(run, ref)
    for key in ("sd_ratio_median", "sd_ratio_min", "sd_ratio_max"):
        assert acc[key] == pytest.approx(0.5, abs=1e-12)
    assert acc["mean_error_sd"] < 1e-12


def test_mean_shifted_by_two_reference_sds():
    ref = _regression_draws()
    coef = ref["coef"].copy()
    coef[:, 1] += 2.0 * ref["coef"][:, 1].std(ddof=1)
    acc = posterior_accuracy({**ref, "coef": coef}, ref)
    assert acc["mean_error_sd"] == pytest.approx(2.0, abs=1e-9)
    assert acc["mean_error_sd_median"] < 1e-9  # the other three coordinates are untouched
    assert acc["sd_ratio_min"] == pytest.approx(1.0, abs=1e-12)
    assert acc["sd_ratio_max"] == pytest.approx(1.0, abs=1e-12)


def test_fewer_run_draws_than_reference_draws():
    ref = _regression_draws(num_draws=3000, seed=0)
    run = _regression_draws(num_draws=400, seed=1)
    acc = posterior_accuracy(run, ref)
    assert acc["mean_error_sd"] < 0.25
    assert 0.85 < acc["sd_ratio_min"] <= acc["sd_ratio_median"] <= acc["sd_ratio_max"] < 1.15
    assert acc["sliced_wasserstein"] < 0.15


def test_mixture_is_matched_to_the_reference_labelling():
    ref = _mixture_draws()
    run = _permute_components(ref, [2, 0, 1])
    acc = posterior_accuracy(run, ref, components=COMPONENT_KEYS)
    assert acc["mean_error_sd"] < 1e-12
    assert acc["sliced_wasserstein"] < 1e-12
    unmatched = posterior_accuracy(run, ref)
    assert unmatched["sliced_wasserstein"] > 1.0
    assert unmatched["mean_error_sd"] > 1.0


def test_match_components_recovers_a_known_permutation():
    ref = _mixture_draws(seed=0)
    order = [2, 0, 1]
    # An independent sample, so the match rests on the means rather than on equal draws.
    run = _permute_components(_mixture_draws(seed=1), order)
    perm = match_components(run, ref, COMPONENT_KEYS)
    np.testing.assert_array_equal(perm, np.argsort(order))
    assert np.issubdtype(perm.dtype, np.integer)
    relabelled = relabel(run, perm, COMPONENT_KEYS)
    np.testing.assert_array_equal(relabelled["means"], _mixture_draws(seed=1)["means"])


def test_match_components_on_a_subset_of_keys():
    ref = _mixture_draws()
    run = _permute_components(ref, [1, 2, 0])
    np.testing.assert_array_equal(match_components(run, ref, ("means",)), np.argsort([1, 2, 0]))
    np.testing.assert_array_equal(match_components(run, ref, "means"), np.argsort([1, 2, 0]))


def test_no_component_keys_means_no_relabelling():
    draws = _mixture_draws()
    assert match_components(draws, draws, ()) is None
    assert relabel(draws, None, COMPONENT_KEYS) is draws


def test_relabel_rejects_a_non_permutation():
    with pytest.raises(ValueError, match="permutation.*'means'"):
        relabel(_mixture_draws(), [0, 0, 1], ("means",))


def test_point_estimate_has_only_mean_errors():
    ref = _regression_draws()
    sd = {k: v.std(axis=0, ddof=1) for k, v in ref.items()}
    point = {k: v.mean(axis=0) + 0.5 * sd[k] for k, v in ref.items()}
    point["coef"][2] = ref["coef"][:, 2].mean() - 3.0 * sd["coef"][2]
    for num_copies in (1, 4):
        run = {k: np.repeat(v[None], num_copies, axis=0) for k, v in point.items()}
        acc = posterior_accuracy(run, ref, point=True)
        assert tuple(acc) == MEASURES
        assert acc["mean_error_sd"] == pytest.approx(3.0, abs=1e-9)
        assert acc["mean_error_sd_median"] == pytest.approx(0.5, abs=1e-9)
        for key in SD_MEASURES:
            assert np.isnan(acc[key])


def test_unshared_integer_and_constant_keys_are_ignored():
    ref = _regression_draws()
    ref_extra = {
        **ref,
        "noise_scale": np.full(1000, 0.3),  # known, repeated: no sd to measure in
        "only_in_reference": np.ones((1000, 2)),
        "assignments": np.zeros((1000, 5), dtype=np.int64),
    }
    run = {
        **ref,
        "noise_scale": np.full(1000, 0.7),
        "only_in_run": np.zeros(1000),
        "assignments": np.ones((1000, 5), dtype=np.int64),
    }
    assert posterior_accuracy(run, ref_extra) == posterior_accuracy(
        {"coef": ref["coef"]}, {"coef": ref["coef"]}
    )


def test_float32_draws_are_accepted():
    draws = {k: v.astype(np.float32) for k, v in _regression_draws().items()}
    acc = posterior_accuracy(draws, draws)
    assert acc["mean_error_sd"] == 0.0
    assert acc["sliced_wasserstein"] < 1e-12


def test_sliced_wasserstein_of_independent_samples_of_one_gaussian_is_small():
    rng = np.random.default_rng(0)
    cov = np.array([[1.0, 0.8, 0.0], [0.8, 1.0, 0.3], [0.0, 0.3, 2.0]])
    run = {"x": rng.multivariate_normal(np.zeros(3), cov, size=2000)}
    ref = {"x": rng.multivariate_normal(np.zeros(3), cov, size=2000)}
    assert posterior_accuracy(run, ref)["sliced_wasserstein"] < 0.1


def test_sliced_wasserstein_of_a_unit_shift_in_one_dimension_is_one():
    rng = np.random.default_rng(0)
    run = {"x": rng.normal(1.0, 1.0, size=2000)}
    ref = {"x": rng.normal(0.0, 1.0, size=2000)}
    assert posterior_accuracy(run, ref)["sliced_wasserstein"] == pytest.approx(1.0, abs=0.1)


def test_sliced_wasserstein_is_deterministic_and_thinned():
    rng = np.random.default_rng(0)
    run = {"x": rng.normal(size=(5000, 4))}
    ref = {"x": rng.normal(size=(3000, 4))}
    first = posterior_accuracy(run, ref, max_draws=500, num_projections=16, seed=3)
    assert first == posterior_accuracy(run, ref, max_draws=500, num_projections=16, seed=3)
    assert first["sliced_wasserstein"] < 0.2


@pytest.mark.parametrize("argument", ["run", "reference"])
def test_non_dict_is_a_type_error_naming_the_argument(argument):
    draws = _regression_draws()
    args = {"run": draws, "reference": draws, argument: [draws["coef"]]}
    with pytest.raises(TypeError, match=argument):
        posterior_accuracy(args["run"], args["reference"])


def test_reference_with_one_draw_has_no_sd():
    draws = _regression_draws()
    with pytest.raises(ValueError, match="reference needs at least 2 draws to have an sd"):
        posterior_accuracy(draws, {k: v[:1] for k, v in draws.items()})


def test_run_with_one_draw_needs_point():
    draws = _regression_draws()
    with pytest.raises(ValueError, match="point=True"):
        posterior_accuracy({k: v[:1] for k, v in draws.items()}, draws)


@pytest.mark.parametrize("side", ["run", "reference"])
def test_nan_draws_name_the_key(side):
    draws = _regression_draws()
    bad = {**draws, "coef": draws["coef"].copy()}
    bad["coef"][10, 1] = np.nan
    args = {"run": draws, "reference": draws, side: bad}
    with pytest.raises(ValueError, match=rf"{side}\['coef'\].*NaN"):
        posterior_accuracy(args["run"], args["reference"])


def test_no_shared_keys_names_both_key_lists():
    with pytest.raises(ValueError, match=r"run has \['a'\].*reference has \['b'\]"):
        posterior_accuracy({"a": np.zeros((5, 2))}, {"b": np.ones((5, 2))})


def test_mismatched_shapes_name_the_key():
    draws = _regression_draws()
    with pytest.raises(ValueError, match="'coef'"):
        posterior_accuracy({**draws, "coef": draws["coef"][:, :2]}, draws)
