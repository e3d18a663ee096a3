"""``compare``'s scoring and reporting where it once misled: an importance-weighted run scored
by its own bound, a reference whose chains had not converged used without a word, a panel of
samplers only that could not be drawn, a reference's time in no column, and a reference that
failed losing the runs that finished."""

import importlib
import io
import json
import time
import warnings

import numpy as np
import pytest

import inference
import zoo
from inference.algorithms import svi
from inference.compare import Comparison

REGRESSION = "bayesian_linear_regression"
#: NUTS far too short to converge (ESS below 100 per chain), and quick.
BRIEF_NUTS = {"num_chains": 2, "num_warmup": 20, "num_draws": 20, "max_tree_depth": 3}


@pytest.fixture(scope="module")
def regression_data(regression_spec):
    return regression_spec.make_data(np.random.default_rng(0), 50)


@pytest.fixture(scope="module")
def brief_nuts(regression_data):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", inference.ConvergenceWarning)
        return inference.fit(
            REGRESSION, regression_data, "nuts", "numpyro", progress=False, **BRIEF_NUTS
        )


def test_an_importance_weighted_run_is_scored_by_its_elbo(iwae_vae_comparison):
    """The table's ELBO of a run trained with elbo="iwae" is the ELBO of its guide, as a run
    trained with elbo="trace" at those parameters would be scored, not the 100-sample
    importance-weighted bound, which lies above it and ranked the run too high."""
    data, table = iwae_vae_comparison
    (row,), (res,) = table.rows, table.results
    assert row["objective"] == "ELBO" and res.options["elbo"] == "iwae"

    # The ELBO at the same parameters and draws, as a run trained with elbo="trace" is scored
    # (the 100-sample bound is some nats above it here).
    engine = svi._evaluation_engine(res, data, res.guide, "trace", res.seed)
    elbo = engine.elbo(engine.initial_state(), num_particles=100, seed=res.seed)
    assert row["objective_per_point"] * res.num_data == pytest.approx(elbo, rel=1e-9)


def test_a_reference_whose_chains_did_not_converge_is_warned_about(brief_nuts, regression_data):
    """The accuracy columns measured against chains that failed their diagnostics say so,
    naming what failed; the reference is kept on the table."""
    assert not brief_nuts.converged
    with pytest.warns(inference.ConvergenceWarning, match="accuracy columns") as said:
        table = inference.compare(
            REGRESSION, regression_data, ["cavi"], ["numpyro"], reference=brief_nuts,
            num_steps=3, num_samples=20, progress=False,
        )  # fmt: skip
    (warning,) = [w for w in said if "accuracy columns" in str(w.message)]
    assert "bulk ESS" in str(warning.message) and warning.filename == __file__
    assert table.reference is brief_nuts and "mean_error_sd" in table.rows[0]


def test_a_reference_compare_fits_itself_is_kept_and_its_time_counted(
    brief_nuts, regression_data, monkeypatch
):
    """reference="nuts" with no NUTS run: the fit compare makes is the table's ``reference``
    (its diagnostics can be read), is warned about when its chains failed, and its time is in
    ``reference_s``, not lost from the table's account of the wait."""
    compare_module = importlib.import_module("inference.compare")
    real_fit, made = compare_module.fit, []

    def fit(spec, data, algorithm, *args, **kwargs):
        if algorithm != "nuts":
            return real_fit(spec, data, algorithm, *args, **kwargs)
        made.append(algorithm)
        time.sleep(0.3)  # a reference's fit takes time that no row holds
        return brief_nuts

    monkeypatch.setattr(compare_module, "fit", fit)
    with pytest.warns(inference.ConvergenceWarning, match="accuracy columns"):
        table = inference.compare(
            REGRESSION, regression_data, ["cavi"], ["numpyro"], reference="nuts",
            num_steps=3, num_samples=20, progress=False,
        )  # fmt: skip
    assert made == ["nuts"] and table.reference is brief_nuts
    assert table.reference_s >= 0.3


def test_a_comparison_without_a_reference_has_none():
    table = Comparison(rows=[], results=[])
    assert table.reference is None and table.reference_s == 0.0


def test_a_panel_of_samplers_only_is_drawn_and_says_why_it_has_no_curve():
    """A model whose runs are all samplers (no objective: NaN) gets a panel saying so; the
    plot once failed on the empty set of objectives."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    row = {"model": "bayesian_gmm", "algorithm": "nuts", "guide": None, "backend": "numpyro",
           "objective": "ELBO", "objective_per_point": float("nan")}  # fmt: skip
    table = Comparison(rows=[row], results=[None])
    figure = io.BytesIO()
    table.plot(figure)
    assert figure.getvalue()[:4] == b"\x89PNG"
    fig, ax = plt.subplots()
    table._plot_model(ax, "bayesian_gmm")
    texts = [t.get_text() for t in ax.texts]
    plt.close(fig)
    assert len(texts) == 1 and "no run of this model has an objective" in texts[0]


def test_a_plot_stopped_while_written_keeps_the_previous_one(tmp_path, monkeypatch):
    """A Ctrl-C while PIL encodes the PNG: written in place, the plot once left those first
    bytes where the previous plot was."""
    import matplotlib.pyplot as plt
    from PIL import Image

    def stopped_encoding(image, file, filename):
        file.write(b"\x89PNG\r\n\x1a\n")  # the first bytes out
        raise KeyboardInterrupt

    path = tmp_path / "curves.png"
    path.write_bytes(b"the previous plot")
    row = {"model": "bayesian_gmm", "algorithm": "nuts", "guide": None, "backend": "numpyro",
           "objective": "ELBO", "objective_per_point": float("nan")}  # fmt: skip
    open_figures = plt.get_fignums()
    monkeypatch.setitem(Image.SAVE, "PNG", stopped_encoding)
    with pytest.raises(KeyboardInterrupt):
        Comparison(rows=[row], results=[None]).plot(path)
    assert path.read_bytes() == b"the previous plot"
    assert [p.name for p in tmp_path.iterdir()] == ["curves.png"]  # and no temporary file left
    assert plt.get_fignums() == open_figures  # the figure is closed


# --- a run that raises -------------------------------------------------------------------------


@pytest.fixture
def svi_diverges(monkeypatch):
    """``compare``'s fits as they are, but SVI's, which diverge."""
    compare_module = importlib.import_module("inference.compare")
    real = compare_module.fit

    def fit(model, data, algorithm, *args, **options):
        if algorithm == "svi":
            raise inference.NonFiniteObjectiveError("the objective is nan | at step 3\nadvice")
        return real(model, data, algorithm, *args, **options)

    monkeypatch.setattr(compare_module, "fit", fit)


def _em_and_svi(**options):
    data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 100)
    return inference.compare(
        "gmm", data, ["em", "svi"], ["pyro"], K=2, num_steps=20, progress=False, **options
    )


def test_a_run_that_raises_stops_the_comparison_by_default(svi_diverges):
    with pytest.raises(inference.NonFiniteObjectiveError, match="at step 3"):
        _em_and_svi()


def test_a_run_that_raises_is_recorded_and_the_others_kept(svi_diverges):
    """on_error="record": the finished runs stay, the failed one is a row with its error."""
    with pytest.warns(RuntimeWarning, match=r"svi enum pyro seed 0 \(2/2\) failed .*at step 3"):
        table = _em_and_svi(on_error="record")
    em, failed = table.rows
    assert table.results[1] is None and "error" not in em
    assert em["converged"] and np.isfinite(em["objective_per_point"])
    assert np.isfinite(em["time_to_target_s"])  # the best run is the one that finished
    assert failed["error"] == "NonFiniteObjectiveError: the objective is nan | at step 3"
    assert np.isnan(failed["objective_per_point"]) and failed["converged"] is False
    table_text = table.to_markdown().splitlines()
    assert table_text[0].endswith("| error |") and table_text[2].endswith("| - |")
    assert table_text[3].endswith(r"| NonFiniteObjectiveError: the objective is nan \| at step 3 |")
    assert table_text[3].count(" | ") == table_text[0].count(" | ")  # its bar is escaped
    figure = io.BytesIO()
    table.plot(figure)  # the finished run's curve alone
    assert figure.getvalue()[:4] == b"\x89PNG"


def test_on_error_takes_raise_or_record():
    with pytest.raises(ValueError, match='on_error must be "raise" or "record"; got \'skip\''):
        _em_and_svi(on_error="skip")


def test_the_shell_records_a_failed_run_when_asked(svi_diverges, capsys):
    from inference.tools.cli import main

    argv = ["compare", "gmm", "--algorithms", "em,svi", "--backends", "pyro", "--K", "2"]
    assert main([*argv, "--num-steps", "20", "--on-error", "record"]) == 0
    said = capsys.readouterr()
    table = said.out.splitlines()
    assert table[0].endswith("| error |") and "NonFiniteObjectiveError" in table[3]
    assert "zoo: RuntimeWarning: svi enum pyro seed 0 (2/2) failed and is recorded" in said.err


def test_a_fresh_elbo_of_an_enumerated_guide_sums_its_latents_out():
    """An enumerated guide draws nothing for z: scored by the trace ELBO, the model drew z from
    its prior (-1398 against -478 nats on 100 points); it is the enumerated ELBO."""
    data = zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(0), 100)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", inference.ConvergenceWarning)
        res = inference.fit(
            "bayesian_gmm", data, "svi", "pyro", guide="enum", K=3, num_steps=5, progress=False
        )
    fresh = svi.fresh_elbo(res, data, num_particles=20)
    assert fresh == svi.enumerated_elbo(res, data, num_particles=20, seed=res.seed)
    assert fresh / 100 == pytest.approx(res.objective / 100, abs=0.5)


# --- a reference that raises -------------------------------------------------------------------


@pytest.fixture
def nuts_fails(monkeypatch):
    """``compare``'s fits as they are, but NUTS's, which cannot start; the calls of NUTS."""
    compare_module = importlib.import_module("inference.compare")
    real, calls = compare_module.fit, []

    def fit(model, data, algorithm, *args, **options):
        if algorithm == "nuts":
            calls.append(algorithm)
            raise RuntimeError("Cannot find valid initial parameters | in 100 tries\nadvice")
        return real(model, data, algorithm, *args, **options)

    monkeypatch.setattr(compare_module, "fit", fit)
    return calls


def _cavi_against_nuts(algorithms, **options):
    data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 100)
    return inference.compare(
        "bayesian_gmm", data, algorithms, ["pyro"], K=2, num_steps={"cavi": 5}, tol=0,
        num_samples=20, reference="nuts", progress=False, **options,
    )  # fmt: skip


def _assert_kept_unmeasured(table):
    """The CAVI run that finished is in the table, its accuracy columns NaN (shown as `-`,
    written as null), as a run measured against no posterior."""
    cavi = table.rows[0]
    assert cavi["algorithm"] == "cavi" and np.isfinite(cavi["objective_per_point"])
    assert table.results[0] is not None and table.reference is None
    accuracy_columns = [name for name, _ in Comparison.ACCURACY_COLUMNS]
    assert all(np.isnan(cavi[name]) for name in accuracy_columns)
    header, _, cavi_line = table.to_markdown().splitlines()[:3]
    names, cells = ([c.strip() for c in line.strip("|").split("|")] for line in (header, cavi_line))
    assert all(cells[names.index(name)] == "-" for name in accuracy_columns)
    assert all(json.loads(table.to_json())[0][name] is None for name in accuracy_columns)


def test_a_reference_whose_own_run_failed_is_not_fitted_again(nuts_fails):
    """reference="nuts" with a NUTS run that failed under on_error="record": NUTS is not
    fitted again (it would fail alike, after as long), the warning names the reference and its
    error, and the run that finished is kept; the comparison was once lost to the second fit."""
    with pytest.warns(RuntimeWarning) as said:
        table = _cavi_against_nuts(["cavi", "nuts"], on_error="record")
    assert nuts_fails == ["nuts"]  # the run alone
    # The run's failure, then the reference's.
    run_failed, warning = [w for w in said if issubclass(w.category, RuntimeWarning)]
    assert "nuts pyro seed 0 (2/2) failed and is recorded" in str(run_failed.message)
    assert "own nuts run on pyro, seed 0; not fitted again" in str(warning.message)
    assert "RuntimeError: Cannot find valid initial parameters | in 100 tries" in str(
        warning.message
    )
    assert warning.filename == __file__
    _assert_kept_unmeasured(table)
    assert table.rows[1]["error"].startswith("RuntimeError: Cannot find valid initial")


def test_a_reference_fit_that_fails_is_recorded_when_asked(nuts_fails):
    """reference="nuts" with no NUTS run: the fit compare makes of it fails, and under
    on_error="record" the runs that finished are kept, unmeasured, with a warning."""
    with pytest.warns(RuntimeWarning, match=r"The reference posterior \(nuts on pyro\) failed"):
        table = _cavi_against_nuts(["cavi"], on_error="record")
    assert nuts_fails == ["nuts"]
    _assert_kept_unmeasured(table)
    assert "error" not in table.rows[0]  # the run itself did not fail


def test_a_reference_fit_that_fails_stops_the_comparison_by_default(nuts_fails):
    with pytest.raises(RuntimeError, match="Cannot find valid initial parameters"):
        _cavi_against_nuts(["cavi"])
