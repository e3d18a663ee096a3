"""``compare`` refuses, before its first fit, what would otherwise fail after runs had finished
(a reference it cannot measure against, a seed, an option or a start that a later run refuses),
and reads each run's history as the objective it is."""

import importlib
import warnings
from types import SimpleNamespace

import numpy as np
import pytest

import inference
import zoo
from inference.compare import Comparison, _add_time_to_target, objective_label

N = 60
#: Bayesian GMM priors given, not derived from the data: a fit to other data has this config.
PRIORS = {"mean_prior": [0.0, 0.0], "covariance_prior": [[1.0, 0.0], [0.0, 1.0]]}


@pytest.fixture(scope="module")
def data():
    return zoo.get_model("gmm").make_data(np.random.default_rng(0), N)


@pytest.fixture(scope="module")
def other_data():
    return zoo.get_model("gmm").make_data(np.random.default_rng(7), N)


class Started(Exception):
    """What the stand-in for a run's fit raises: the comparison got as far as a fit."""


@pytest.fixture
def fits(monkeypatch):
    """The runs' fits ``compare`` starts, recorded by algorithm and seed; none is made (each
    raises :class:`Started`)."""
    started = []

    def fit(model, data, algorithm, backend, **options):
        started.append((algorithm, options.get("seed")))
        raise Started(algorithm)

    monkeypatch.setattr(importlib.import_module("inference.compare"), "fit", fit)
    return started


def _quiet_fit(*args, **kwargs):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", inference.ConvergenceWarning)
        return inference.fit(*args, progress=False, **kwargs)


def _compare(model, data, algorithms, **kwargs):
    return inference.compare(
        model, data, algorithms, ["numpyro"], num_samples=20, progress=False, **kwargs
    )


# --- a reference that cannot be measured against ----------------------------------------------


def test_a_reference_of_another_model_config_is_refused_before_any_fit(data, fits):
    reference = _quiet_fit("bayesian_gmm", data, "cavi", "numpyro", K=3)
    with pytest.raises(ValueError, match=r"model config differs .*K: 3 in the reference, 4 here"):
        _compare("bayesian_gmm", data, ["cavi", "em"], K=4, reference=reference)
    assert fits == []


def test_a_point_estimate_reference_is_refused_before_any_fit(data, fits):
    """EM's draws are copies of one point: no sd to measure in. A reference must be a
    posterior, and the message says which are."""
    reference = _quiet_fit("gmm", data, "em", "numpyro", K=2)
    with pytest.raises(ValueError, match=r"point estimate \(a fit of 'em'\).*must be a posterior"):
        _compare("gmm", data, ["em", "svi"], K=2, num_steps=2, reference=reference)
    assert fits == []


def test_a_reference_with_a_guide_of_point_masses_is_refused_before_any_fit(data, fits):
    reference = _quiet_fit("gmm", data, "svi", "pyro", K=2, num_steps=2, tol=0)
    with pytest.raises(ValueError, match=r"guide 'enum', of point masses"):
        _compare("gmm", data, ["em"], K=2, reference=reference)
    assert fits == []


def test_a_reference_that_fits_is_taken(data, fits):
    """The same model, config and data: the checks pass, and the runs start."""
    reference = _quiet_fit("bayesian_gmm", data, "cavi", "numpyro", K=3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a reference that keeps its data: nothing to warn of
        with pytest.raises(Started):
            _compare("bayesian_gmm", data, ["cavi", "em"], K=3, reference=reference)
    assert fits == [("cavi", 0)]


# --- a reference read from a file, which keeps no data ------------------------------------------


def _saved_and_loaded(result, folder):
    path = folder / "reference.zoo"
    result.save(path)
    return inference.load(path)


def test_a_loaded_reference_with_other_priors_is_refused(data, fits, tmp_path):
    """A loaded reference keeps its config: one fitted with priors given is not a posterior of
    the model with the default priors (the data's mean and covariance)."""
    fitted = _quiet_fit("bayesian_gmm", data, "cavi", "numpyro", K=3, **PRIORS)
    reference = _saved_and_loaded(fitted, tmp_path)
    assert reference.data is None and reference.num_data == N
    with pytest.raises(ValueError, match=r"mean_prior: .* in the reference.*other model options"):
        _compare("bayesian_gmm", data, ["cavi"], K=3, reference=reference)
    assert fits == []


def test_a_loaded_reference_of_other_data_is_refused_by_its_fingerprint(
    data, other_data, fits, tmp_path
):
    """With priors given, a fit to other data of the same size has this comparison's config;
    the file keeps a fingerprint of its data, which tells them apart."""
    fitted = _quiet_fit("bayesian_gmm", other_data, "cavi", "numpyro", K=3, **PRIORS)
    reference = _saved_and_loaded(fitted, tmp_path)
    assert reference.data is None and reference.data_fingerprint is not None
    with pytest.raises(ValueError, match="fitted to other data"):
        _compare("bayesian_gmm", data, ["cavi"], K=3, reference=reference, **PRIORS)
    assert fits == []


def test_a_loaded_reference_of_these_data_is_taken_without_a_warning(data, fits, tmp_path):
    fitted = _quiet_fit("bayesian_gmm", data, "cavi", "numpyro", K=3, **PRIORS)
    reference = _saved_and_loaded(fitted, tmp_path)
    # The same data passed as lists and in Fortran order have the same fingerprint.
    given = {"x": np.asfortranarray(data["x"]).tolist()}
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        with pytest.raises(Started):
            _compare("bayesian_gmm", given, ["cavi"], K=3, reference=reference, **PRIORS)
    assert fits == [("cavi", 0)]


def test_a_reference_without_data_or_fingerprint_is_warned_about_and_checked_once_given(
    data, other_data, fits, tmp_path
):
    """A file saved before fits kept a fingerprint cannot tell its data: compare says it
    checked only their number and the config; set back on the reference, the data are
    compared."""
    fitted = _quiet_fit("bayesian_gmm", other_data, "cavi", "numpyro", K=3, **PRIORS)
    reference = _saved_and_loaded(fitted, tmp_path)
    reference.data_fingerprint = None  # as read from such a file
    with pytest.warns(UserWarning, match=r"keeps neither .* only its number of data points \(60\)"):
        with pytest.raises(Started):
            _compare("bayesian_gmm", data, ["cavi"], K=3, reference=reference, **PRIORS)
    assert fits == [("cavi", 0)]

    reference.data = other_data
    with pytest.raises(ValueError, match="fitted to other data"):
        _compare("bayesian_gmm", data, ["cavi"], K=3, reference=reference, **PRIORS)
    assert fits == [("cavi", 0)]  # no run more


def test_a_saved_fit_with_a_malformed_fingerprint_is_refused(data, tmp_path):
    from inference.persistence import checkpoint

    path = tmp_path / "fit.zoo"
    _quiet_fit("bayesian_gmm", data, "cavi", "numpyro", K=2, num_steps=3).save(path)
    header, arrays = checkpoint.load(path)
    header = {k: v for k, v in header.items() if k not in ("format", "arrays")}
    checkpoint.save(path, {**header, "data_fingerprint": "not a digest"}, arrays)
    with pytest.raises(inference.CheckpointError, match="'data_fingerprint' is 'not a digest'"):
        inference.load(path)


def test_num_samples_and_tol_are_checked_before_any_fit(data, fits):
    """The held-out score's num_samples is used after each run, and tol at each run's start."""
    with pytest.raises(ValueError, match=r"num_samples must be an int in the range \[1, inf\)"):
        inference.compare(
            "bayesian_gmm", data, ["cavi"], ["numpyro"], num_samples=0, progress=False, K=3
        )
    with pytest.raises(ValueError, match=r"tol must be a float in the range \[0, inf\)"):
        _compare("bayesian_gmm", data, ["em", "svi"], guides=["enum"], K=3, tol=-1.0)
    assert fits == []


# --- each run's options and start, before the first run ------------------------------------------


def test_a_start_that_a_later_run_refuses_is_refused_before_any_fit(data, fits):
    """A dict of parameters starts SVI alone: EM, after it, would refuse it once SVI had run."""
    start = {"mean_loc": np.zeros((3, 2))}
    with pytest.raises(TypeError, match=r"a dict of parameters starts algorithm='svi' only"):
        _compare("bayesian_gmm", data, ["svi", "em"], guides=["enum"], K=3, init=start)
    assert fits == []


@pytest.mark.parametrize(
    "init,algorithms",
    [
        ({"mean_loc": np.zeros((3, 2))}, ["svi"]),  # SVI's own start: its set-up checks names
        ("random", ["svi", "cavi", "em", "nuts"]),
        (np.full((N, 3), 1 / 3), ["cavi", "em", "svi"]),
    ],
    ids=["dict-svi", "method", "responsibilities"],
)
def test_a_start_every_run_takes_is_not_refused(data, fits, init, algorithms):
    with pytest.raises(Started):
        _compare("bayesian_gmm", data, algorithms, guides=["enum"], K=3, init=init)
    assert fits == [(algorithms[0], 0)]


def test_a_start_of_another_shape_is_refused_before_any_fit(data, fits):
    responsibilities = np.full((N, 3), 1 / 3)  # of 3 components, for a comparison of 2
    with pytest.raises(ValueError, match=r"responsibilities must have shape \(N, K\) = \(60, 2\)"):
        _compare("gmm", data, ["em", "svi"], K=2, init=responsibilities)
    assert fits == []


@pytest.mark.parametrize(
    "init,refused_by", [({"coef_loc": np.zeros(3)}, "'cavi'"), ("kmeans", "'svi full_rank'")]
)
def test_a_start_of_a_model_that_starts_from_its_own_point_is_refused_before_any_fit(
    regression_spec, fits, init, refused_by
):
    """The regression's updates start from its own point: CAVI takes no start, SVI a dict of
    parameters only."""
    data = regression_spec.make_data(np.random.default_rng(0), 20)
    with pytest.raises(ValueError, match=rf"cannot start the {refused_by} runs of model"):
        _compare(regression_spec.name, data, ["svi", "cavi"], guides=["full_rank"], init=init)
    assert fits == []


def test_a_batch_size_above_the_data_is_refused_before_any_fit(data, fits):
    with pytest.raises(ValueError, match=rf"batch_size must be an int in the range \[1, {N}\]"):
        _compare("bayesian_gmm", data, ["cavi", "svi"], guides=["enum"], K=3, batch_size=10**6)
    assert fits == []


def test_a_batch_size_within_the_data_is_taken(data, fits):
    with pytest.raises(Started):
        _compare("bayesian_gmm", data, ["cavi", "svi"], guides=["enum"], K=3, batch_size=N)
    assert fits == [("cavi", 0)]


@pytest.mark.parametrize("on_error", ["raise", "record"])
@pytest.mark.parametrize(
    "seeds,error,message",
    [
        ([0, -1], ValueError, r"seeds=\[0, -1\]: seed must be an int in the range \[0, 2\*\*63\)"),
        ([0, 1.5], TypeError, r"seeds=\[0, 1.5\]: seed must be an int; got float"),
        ([0, True], TypeError, r"seeds=\[0, True\]: seed must be an int; got bool"),
    ],
    ids=["negative", "fraction", "bool"],
)
def test_seeds_are_checked_before_any_fit(data, fits, seeds, error, message, on_error):
    """Seed 0 does not run first, and a bad seed is no failed run's row (nor shown as int(1.5))."""
    with pytest.raises(error, match=message):
        _compare("bayesian_gmm", data, ["cavi", "em"], K=3, seeds=seeds, on_error=on_error)
    assert fits == []


# --- an importance-weighted run's history ---------------------------------------------------------


def test_an_importance_weighted_history_tells_no_time_to_target():
    """Two runs with one history and one final ELBO: the one trained with the ELBO reaches the
    target where its history does; the importance-weighted one's history is its bound, above
    the ELBO, and tells no time."""
    spec = zoo.get_model("vae")
    history = np.linspace(-5.0, -3.0, 11) * 10  # per point -5.0 ... -3.0, ten points
    time = np.arange(len(history), dtype=float)
    row = dict(model="vae", guide="amortized", backend="numpyro", objective_per_point=-3.0)
    rows, results = [], []
    for elbo in ("trace", "iwae"):
        rows.append(dict(row))
        # (a deterministic algorithm's name: the history is not smoothed)
        results.append(
            SimpleNamespace(
                spec=spec, algorithm="cavi", num_data=10, options={"elbo": elbo},
                history={"objective": history, "time": time},
            )
        )  # fmt: skip
    _add_time_to_target(rows, results)
    trace, iwae = (row["time_to_target_s"] for row in rows)
    assert trace == 10.0  # -3.0 >= -3.01 first at the last step, at time 10
    assert np.isnan(iwae)


def test_an_importance_weighted_run_is_shown_with_its_own_objective(iwae_vae_comparison):
    """A run trained with elbo="iwae": no time to target in the table, and its curve labelled
    by the bound it ascended, not as the table's ELBO."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    _, table = iwae_vae_comparison
    (row,), (res,) = table.rows, table.results
    assert row["objective"] == "ELBO" and np.isfinite(row["objective_per_point"])
    assert np.isnan(row["time_to_target_s"])
    svi = inference.get_algorithm("svi")
    label = objective_label(svi, res.spec, "pyro", res.guide, res.config, res.options["elbo"])
    assert label == "importance-weighted bound"
    assert objective_label(svi, res.spec, "pyro", res.guide, res.config) == "ELBO"
    fig, ax = plt.subplots()
    table._plot_model(ax, "vae")
    (text,) = [t.get_text() for t in ax.get_legend().get_texts()]
    plt.close(fig)
    assert text == "svi-amortized (pyro), importance-weighted bound"


# --- the plot's legend -----------------------------------------------------------------------


def _legend(table: Comparison, model: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots()
    table._plot_model(ax, model)
    texts = [t.get_text() for t in ax.get_legend().get_texts()]
    plt.close(fig)
    return texts


def test_runs_that_differ_by_seed_alone_are_told_apart_in_the_legend(data):
    table = _compare("gmm", data, ["em"], K=2, seeds=[0, 1])
    assert _legend(table, "gmm") == ["em (numpyro, seed 0)", "em (numpyro, seed 1)"]
    one_seed = _compare("gmm", data, ["em"], K=2)
    assert _legend(one_seed, "gmm") == ["em (numpyro)"]
