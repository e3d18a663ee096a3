"""The command line's data files with optional keys, plot formats it cannot write, held-out data
for ``zoo compare``, the run options its help lists, and an option given before the model. Runs
``inference.tools.cli.main`` in this process on tiny data and a few steps."""

import json
import re

import numpy as np
import pytest
from scipy.special import logsumexp
from scipy.stats import multivariate_normal

import inference
import zoo
from inference.tools import cli, cli_paths
from inference.tools.cli import RUN_OPTIONS_WITHOUT_FLAGS, main

TOKENS = "exchangeable_tokens"
EM_RUN = ["--algorithms", "em", "--backends", "pyro", "--num-steps", "3", "--K", "2"]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture
def tokens(workdir):
    """The tokens model's own data (x only, as its make_data returns them), as files."""
    x = zoo.get_model(TOKENS).make_data(np.random.default_rng(0), 12)["x"]
    np.save("x.npy", x)
    np.savez("x.npz", x=x)
    np.savez("x_length.npz", x=x, length=np.full(len(x), x.shape[1]))
    np.savez("length.npz", length=np.full(len(x), x.shape[1]))
    np.save("flat.npy", x[:, 0])
    return x


def _one_error_line(err: str) -> str:
    lines = [line for line in err.splitlines() if line.startswith("zoo: error:")]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    return lines[0]


# --- --data with optional keys ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["x.npy", "x.npz"])
def test_the_tokens_models_own_data_are_read_without_their_optional_keys(tokens, name):
    spec = zoo.get_model(TOKENS)
    data = cli_paths.load_data(name, spec, seed=0)
    assert list(data) == ["x"]
    np.testing.assert_array_equal(data["x"], tokens)


def test_an_optional_key_given_is_kept(tokens):
    data = cli_paths.load_data("x_length.npz", zoo.get_model(TOKENS), seed=0)
    assert sorted(data) == ["length", "x"]
    np.testing.assert_array_equal(data["length"], np.full(12, 8))


def test_a_tokens_fit_from_a_file_is_the_apis_fit_of_the_same_array(tokens, capsys):
    argv = ["fit", TOKENS, "--data", "x.npz", "--backend", "pyro", "--num-steps", "2"]
    assert main([*argv, "--tol", "0", "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    res = inference.fit(TOKENS, {"x": tokens}, "svi", "pyro", num_steps=2, tol=0, progress=False)
    assert got["objective"] == res.objective
    assert got["steps"] == 2


@pytest.mark.parametrize(
    "name, said",
    [
        ("length.npz", "takes data key 'x' and optionally"),  # the required key left out
        ("flat.npy", "'x' ((S, N, D) sequences of N tokens)"),  # no key takes it on its own
    ],
)
def test_tokens_data_the_model_does_not_take_are_one_line_naming_the_file(
    tokens, capsys, no_fit, name, said
):
    assert main(["fit", TOKENS, "--data", name]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert f"argument --data: model '{TOKENS}'" in line and repr(name) in line
    assert said in line


# --- --plot formats this machine cannot write ---------------------------------------------------


@pytest.fixture
def no_latex(workdir, monkeypatch):
    """No program on the PATH: PGF's LaTeX is not found, on any machine."""
    monkeypatch.setenv("PATH", str(workdir))


def test_a_plot_format_that_cannot_be_written_is_refused_before_fitting(no_latex, capsys, no_fit):
    assert main(["compare", "gmm", *EM_RUN, "--plot", "curves.pgf"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "argument --plot: cannot write a '.pgf' plot here:" in line
    assert "not found" in line and "'curves.pgf'" in line


@pytest.mark.parametrize("fmt", ["png", "pdf", "svg", "eps", "ps"])
def test_the_usual_plot_formats_are_writable(fmt):
    assert cli_paths.unwritable_format_reason(fmt) is None


def test_a_plot_that_fails_after_the_fits_keeps_the_table(no_latex, workdir, capsys, monkeypatch):
    # The format passed its check, and then could not be written (the machine changed between).
    monkeypatch.setattr(cli_paths, "unwritable_format_reason", lambda fmt: None, raising=False)
    assert main(["compare", "gmm", *EM_RUN, "--tol", "0", "--plot", "curves.pgf"]) == 1
    captured = capsys.readouterr()
    assert captured.out.startswith("| model | algorithm |")
    assert "| gmm | em | - | pyro | 0 |" in captured.out
    line = _one_error_line(captured.err)
    assert line.startswith("zoo: error: cannot write the plot to curves.pgf: ")
    assert "The table above holds the runs' results." in line
    assert not (workdir / "curves.pgf").exists()


# --- zoo compare --test-data --------------------------------------------------------------------


def _mixture_log_density(x, params) -> float:
    """The mean log-density of ``x`` under a Gaussian mixture's parameters, by SciPy."""
    per_component = [
        np.log(w) + multivariate_normal(m, c).logpdf(x)
        for w, m, c in zip(params["weights"], params["means"], params["covariances"], strict=True)
    ]
    return float(np.mean(logsumexp(per_component, axis=0)))


def test_compare_scores_the_held_out_column_on_test_data(workdir, capsys):
    rng = np.random.default_rng(1)
    train, test = rng.normal(size=(40, 2)), rng.normal(size=(25, 2)) + 3.0
    np.save("train.npy", train)
    np.save("test.npy", test)
    argv = ["compare", "gmm", *EM_RUN, "--tol", "0", "--data", "train.npy", "--json"]
    assert main([*argv, "--test-data", "test.npy"]) == 0
    held_out = json.loads(capsys.readouterr().out)[0]["heldout_log_pred_per_point"]
    assert main(argv) == 0
    on_training = json.loads(capsys.readouterr().out)[0]["heldout_log_pred_per_point"]
    fit = ["fit", "gmm", "--algorithm", "em", "--backend", "pyro", "--K", "2"]
    assert main([*fit, "--num-steps", "3", "--tol", "0", "--data", "train.npy", "--json"]) == 0
    params = {k: np.array(v) for k, v in json.loads(capsys.readouterr().out)["params"].items()}
    assert held_out == pytest.approx(_mixture_log_density(test, params), rel=1e-9)
    assert on_training == pytest.approx(_mixture_log_density(train, params), rel=1e-9)
    assert held_out < on_training - 1.0  # the shifted test set is far less likely


def test_bad_test_data_is_refused_before_fitting(workdir, capsys, no_fit):
    np.save("flat.npy", np.zeros(5))
    assert main(["compare", "gmm", *EM_RUN, "--test-data", "flat.npy"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "argument --test-data: the array 'x' in 'flat.npy' has shape (5,)" in line
    assert main(["compare", "gmm", *EM_RUN, "--test-data", "missing.npz"]) == 2
    assert "argument --test-data: no such file 'missing.npz'" in capsys.readouterr().err


# --- zoo compare --help -------------------------------------------------------------------------


def _compare_help(capsys, monkeypatch) -> str:
    monkeypatch.setenv("COLUMNS", "2000")  # one line per option
    assert main(["compare", "--help"]) == 0
    return capsys.readouterr().out


def test_compare_help_lists_each_run_option_on_a_line_of_its_own(capsys, monkeypatch):
    text = _compare_help(capsys, monkeypatch)
    for name in RUN_OPTIONS_WITHOUT_FLAGS["compare"]:
        flag = "--" + name.replace("_", "-")
        assert re.search(rf"^  {flag} \S+ +\S", text, re.MULTILINE), flag
    assert "the run options below pass the same way" in text
    assert set(cli.COMPARE_RUN_OPTIONS) == set(RUN_OPTIONS_WITHOUT_FLAGS["compare"])


def test_compare_help_says_what_the_held_out_column_scores(capsys, monkeypatch):
    text = " ".join(_compare_help(capsys, monkeypatch).split())
    assert "--test-data FILE held-out data, as --data takes them" in text
    assert "(default: the training data, --data's or the built-in set" in text


# --- an option before the model's name ----------------------------------------------------------


@pytest.mark.parametrize("command", ["fit", "compare"])
def test_an_option_before_the_model_says_the_model_comes_first(capsys, no_fit, command):
    assert main([command, "--K", "3", "gmm"]) == 2
    line = _one_error_line(capsys.readouterr().err)
    assert "unknown model '3'" in line
    assert (
        f"the model's name comes first, options after it, as in `zoo {command} gmm --K 3`" in line
    )
