"""Bad input to the command line: each is one line, ``zoo: error: ...`` naming the argument or
file at fault, a non-zero exit status, no traceback, and no file of the user's touched. Paths are
checked before any fitting starts. Runs ``inference.tools.cli.main`` in this process, except where a
real pipe is needed."""

import importlib
import io
import json
import os
import re
import select
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import numpy as np
import pytest

import inference
import zoo
from inference import loop
from inference.api import model_options
from inference.compare import Comparison
from inference.registry import first_supporting, list_algorithms
from inference.tools import cli
from inference.tools.cli import main
from zoo import files as zoo_files

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    """A folder of the user's files, good and bad, as the current directory."""
    rng = np.random.default_rng(0)
    np.save(tmp_path / "x.npy", rng.normal(size=(30, 2)))
    np.save(tmp_path / "x1d.npy", rng.normal(size=30))
    np.save(tmp_path / "object.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    objects = np.array([None, 1], dtype=object)
    np.savez(tmp_path / "objects.npz", x=objects, allow_pickle=True)
    (tmp_path / "text.npy").write_text("1.0 2.0\n3.0 4.0\n")
    (tmp_path / "data.csv").write_text("1.0,2.0\n3.0,4.0\n")
    np.savez(tmp_path / "x.npz", x=rng.normal(size=(30, 2)))
    np.savez(tmp_path / "wrongkey.npz", y=rng.normal(size=(30, 2)))
    (tmp_path / "garbage.npz").write_bytes(bytes(range(256)) * 4)
    whole = (tmp_path / "x.npz").read_bytes()
    (tmp_path / "truncated.npz").write_bytes(whole[: len(whole) // 2])
    with zipfile.ZipFile(tmp_path / "textmember.npz", "w") as z:
        z.writestr("x.npy", "not an array")
    (tmp_path / "notes.txt").write_text("a file, not a folder\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "locked").mkdir()
    (tmp_path / "locked").chmod(0o500)
    monkeypatch.chdir(tmp_path)
    yield tmp_path
    (tmp_path / "locked").chmod(0o700)


def _snapshot(root: Path) -> dict:
    """Every file and folder under ``root``, with its size, mode and modification time."""
    found = {}
    for folder, dirs, files in os.walk(root):
        for name in dirs + files:
            st = os.lstat(os.path.join(folder, name))
            found[os.path.relpath(os.path.join(folder, name), root)] = (
                st.st_size,
                st.st_mode,
                st.st_mtime_ns,
            )
    return found


def _deny_writes_to(monkeypatch, folder: Path) -> None:
    """Writes in ``folder`` fail as on a read-only file system (a folder's mode would not stop
    the superuser, whom tests may run as)."""
    real = zoo_files.probe_writable
    denied = os.path.realpath(folder)

    def probe(path, name="probe"):
        if os.path.realpath(path) == denied:
            raise PermissionError(13, "Permission denied")
        return real(path, name)

    monkeypatch.setattr(zoo_files, "probe_writable", probe)


FIT = ["fit", "gmm"]
COMPARE = ["compare", "gmm", "--algorithms", "em", "--backends", "pyro", "--num-steps", "2"]

# (name, argv, what stderr must name, whether it is refused before the fit starts). A case
# that reaches ``fit`` is refused by the checks of its options, before the first step.
CASES = [
    ("unknown model", ["fit", "no_such_model"], "'no_such_model'", True),
    ("unknown model to compare", ["compare", "no_such_model"], "'no_such_model'", True),
    ("unknown command", ["frobnicate"], "'frobnicate'", True),
    ("no command", [], "COMMAND", True),
    ("no model", ["fit"], "model", True),
    ("option of list", ["list", "--bogus"], "--bogus", True),
    ("unknown algorithm", [*FIT, "--algorithm", "nope"], "--algorithm", True),
    ("algorithm the model lacks", [*FIT, "--algorithm", "cavi"], "'cavi'", False),
    ("unknown backend", [*FIT, "--backend", "tensorflow"], "--backend", True),
    ("unknown backend in a list", ["compare", "gmm", "--backends", "pyro,jax"], "--backends", True),
    ("empty backend list", ["compare", "gmm", "--backends", ""], "--backends", True),
    ("blank in a list", ["compare", "gmm", "--algorithms", "em,,svi"], "--algorithms", True),
    ("repeated algorithm", ["compare", "gmm", "--algorithms", "em,em"], "--algorithms", True),
    (
        "unknown algorithm in a list",
        ["compare", "gmm", "--algorithms", "em,x"],
        "--algorithms",
        True,
    ),
    ("unknown guide", [*FIT, "--guide", "gumbel"], "--guide", True),
    ("guide for em", [*FIT, "--algorithm", "em", "--guide", "enum"], "guide", False),
    ("unknown device", [*FIT, "--backend", "pyro", "--device", "tpu:7"], "'tpu:7'", False),
    ("unknown option", [*FIT, "--bogus", "1"], "--bogus is not an option", False),
    ("option of the wrong type", [*FIT, "--K", "abc"], "K must be an int", False),
    ("option out of range", [*FIT, "--K", "0"], "K must be an int", False),
    ("algorithm option out of range", [*FIT, "--algorithm", "svi", "--lr", "-1"], "lr", False),
    ("--option without =", [*FIT, "--option", "K"], "--option", True),
    ("option without a value", [*FIT, "--K"], "--K", True),
    ("stray argument", [*FIT, "stray"], "'stray'", True),
    ("flag given a value", [*FIT, "--json", "yes"], "'yes'", True),
    ("seed not a number", [*FIT, "--seed", "abc"], "--seed", True),
    ("negative seed", [*FIT, "--seed", "-1"], "--seed", True),
    ("seed too large", [*FIT, "--seed", str(2**63)], "--seed", True),
    ("negative --num-steps", [*FIT, "--num-steps", "-3"], "--num-steps", True),
    ("zero --num-steps", [*FIT, "--num-steps", "0"], "--num-steps", True),
    ("fractional --num-steps", [*FIT, "--num-steps", "1.5"], "--num-steps", True),
    ("negative --tol", [*FIT, "--tol", "-1"], "--tol", True),
    ("missing data file", [*FIT, "--data", "missing.npy"], "'missing.npy'", True),
    ("data is a folder", [*FIT, "--data", "out"], "'out'", True),
    ("text file named .npy", [*FIT, "--data", "text.npy"], "'text.npy' is not a .npy", True),
    ("object array", [*FIT, "--data", "object.npy"], "'object.npy'", True),
    ("object array in a .npz", [*FIT, "--data", "objects.npz"], "'objects.npz'", True),
    ("not a zip, named .npz", [*FIT, "--data", "garbage.npz"], "'garbage.npz'", True),
    ("truncated .npz", [*FIT, "--data", "truncated.npz"], "'truncated.npz'", True),
    ("text member in a .npz", [*FIT, "--data", "textmember.npz"], "'textmember.npz'", True),
    (".npz missing a key", [*FIT, "--data", "wrongkey.npz"], "'wrongkey.npz'", True),
    ("wrong-shaped data", [*FIT, "--data", "x1d.npy"], "'x1d.npy'", True),
    ("data of an unknown type", [*FIT, "--data", "data.csv"], "'data.csv'", True),
    ("save into a folder", [*FIT, "--save", "out"], "--save", True),
    ("save, parent missing", [*FIT, "--save", "nonexistent/dir/fit.zoo"], "--save", True),
    ("save, parent a file", [*FIT, "--save", "notes.txt/fit.zoo"], "--save", True),
    ("save, folder locked", [*FIT, "--save", "locked/fit.zoo"], "--save", True),
    ("save, empty name", [*FIT, "--save", ""], "--save", True),
    ("save over a device", [*FIT, "--save", os.devnull], "--save", True),
    ("plot, unknown format", [*COMPARE, "--plot", "curves.xyz"], "--plot", True),
    ("plot, parent missing", [*COMPARE, "--plot", "nonexistent/curves.png"], "--plot", True),
    ("plot, folder locked", [*COMPARE, "--plot", "locked/curves.png"], "--plot", True),
    ("plot, empty name", [*COMPARE, "--plot", ""], "--plot", True),
    # what the shell sets by its own flags, or cannot give (a Python object), is no option
    ("progress as an option", [*FIT, "--progress", "false"], "--progress is not an option", True),
    ("model as an option", [*FIT, "--model", "vae"], "--model is not an option", True),
    ("test data missing", [*COMPARE, "--test-data", "absent.npy"], "'absent.npy'", True),
    ("guide to compare", [*COMPARE, "--guide", "enum"], "each guide of --guides NAMES", True),
    ("help of an unknown model", ["fit", "no_such_model", "--help"], "'no_such_model'", True),
]


@pytest.mark.parametrize(
    "argv, names, before_fit", [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_bad_input_is_one_clear_line(
    workdir, capsys, monkeypatch, request, argv, names, before_fit
):
    if before_fit:
        request.getfixturevalue("no_fit")
    _deny_writes_to(monkeypatch, workdir / "locked")
    before = _snapshot(workdir)
    status = main(argv)
    err = capsys.readouterr().err
    assert status != 0
    assert "zoo: error:" in err
    assert names in err
    assert "Traceback" not in err
    assert "allow_pickle" not in err  # numpy's advice to unpickle is never passed on
    assert _snapshot(workdir) == before


def test_bad_input_cases_are_many_and_distinct():
    assert len(CASES) >= 30
    assert len({tuple(c[1]) for c in CASES}) == len(CASES)


def test_help_documents_every_flag(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "2000")  # one line per flag: nothing wrapped at a hyphen
    for command in ("list", "algorithms", "fit", "compare"):
        assert main([command, "--help"]) == 0  # a status, not SystemExit
    text = capsys.readouterr().out
    for action in cli._parser()._subparsers._group_actions[0].choices["fit"]._actions:
        assert action.help, action.option_strings
    for action in cli._parser()._subparsers._group_actions[0].choices["compare"]._actions:
        assert action.help, action.option_strings
    assert main(["fit", "--help"]) == 0
    fit_help = " ".join(capsys.readouterr().out.split())
    algorithms = ", ".join(list_algorithms())
    assert f"--algorithm {{{','.join(list_algorithms())}}}" in fit_help
    assert f"one of {algorithms} (default: the model's own closed-form updates" in fit_help
    assert "--backend {pyro,numpyro} one of pyro, numpyro (default: numpyro)" in fit_help
    assert "(default: cpu)" in fit_help and "(default: 0)" in fit_help
    assert "--guide GUIDE the guide" in fit_help
    assert "--num-steps N at most N steps" in fit_help
    assert "--tol TOL the stopping rule's tolerance" in fit_help
    assert "--save FILE" in fit_help and "the folder must exist" in fit_help
    assert main(["compare", "--help"]) == 0
    compare_help = " ".join(capsys.readouterr().out.split())
    assert f"--algorithms NAMES comma-separated, from {algorithms}" in compare_help
    assert "--backends NAMES comma-separated, from pyro, numpyro" in compare_help
    assert "(default: pyro,numpyro)" in compare_help
    assert "existing directory gets MODEL-compare.png" in compare_help
    assert "usage: zoo" in text


@pytest.mark.parametrize("model", ["vae", "gmm"])
def test_fit_defaults_to_the_models_first_algorithm(capsys, model):
    # vae has SVI only; gmm has its own EM updates. Neither has CAVI.
    assert main(["fit", model, "--backend", "pyro", "--num-steps", "2", "--json"]) == 0
    fitted = json.loads(capsys.readouterr().out)
    assert fitted["algorithm"] == first_supporting(zoo.get_model(model))
    assert fitted["algorithm"] == {"vae": "svi", "gmm": "em"}[model]


def test_a_stochastic_fits_printed_objective_says_whose_it_is(capsys):
    """SVI's last objective is its last step's, not a score of the parameters it returns;
    EM's is the returned fit's."""
    for algorithm, estimate in (("svi", True), ("em", False)):
        args = ["fit", "gmm", "--algorithm", algorithm, "--backend", "pyro", "--num-steps", "3"]
        assert main([*args, "--tol", "0"]) == 0
        line = capsys.readouterr().out.splitlines()[0]
        name = "ELBO" if algorithm == "svi" else "log-likelihood"  # what the objective is
        assert line.startswith(f"gmm / {algorithm} / pyro: {name} ")
        assert ("per point; the last step's, not the returned fit's)" in line) == estimate, line


def test_save_writes_the_fit_and_a_failed_write_keeps_the_result(workdir, capsys, monkeypatch):
    args = ["fit", "gmm", "--data", "x.npy", "--backend", "pyro", "--num-steps", "2"]
    assert main([*args, "--save", "out/fit.zoo", "--json"]) == 0
    fitted = json.loads(capsys.readouterr().out)
    loaded = inference.load("out/fit.zoo")
    np.testing.assert_allclose(loaded.params["means"], fitted["params"]["means"])

    def full(self, path):
        raise OSError(28, "No space left on device", str(path))

    monkeypatch.setattr(inference.FitResult, "save", full)
    assert main([*args, "--save", "out/again.zoo"]) == 1
    out, err = capsys.readouterr()
    assert out.startswith("gmm / em / pyro: log-likelihood")  # shown before the write failed
    assert err.strip().endswith(
        "zoo: error: cannot write the fit to out/again.zoo: No space left on device. The fit's "
        "results are above; an earlier file there is kept whole."
    )
    assert "Traceback" not in err


def test_a_failed_save_names_the_file_it_could_not_write(workdir, monkeypatch):
    """A full disk fails a write to a file already open, which names no file: the error
    names the one the fit was to be saved to."""
    from inference.persistence import checkpoint

    res = inference.fit("gmm", {"x": np.load("x.npy")}, "em", "pyro", num_steps=2, progress=False)

    def full(path, header, arrays):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint, "save", full)
    with pytest.raises(OSError, match=r"No space left on device: 'out/fit.zoo'") as caught:
        res.save("out/fit.zoo")
    assert caught.value.errno == 28


@pytest.mark.parametrize(
    "target, written, magic",
    [
        ("out", "out/gmm-compare.png", b"\x89PNG"),  # a folder: a named file inside it
        ("curves", "curves", b"\x89PNG"),  # no extension: PNG, under that very name
        ("out/curves.svg", "out/curves.svg", b"<?xml"),
    ],
)
def test_plot_goes_where_it_is_asked(workdir, capsys, target, written, magic):
    before = set(_snapshot(workdir))
    assert main([*COMPARE, "--data", "x.npy", "--plot", target]) == 0
    assert set(_snapshot(workdir)) - before == {written}
    assert (workdir / written).read_bytes().startswith(magic)
    assert f"zoo: wrote the plot to {written}" in capsys.readouterr().err


def test_ctrl_c_is_one_line_and_status_130(capsys, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(cli, "fit", interrupted)
    assert main(["fit", "gmm"]) == 130
    assert capsys.readouterr().err == "zoo: interrupted\n"


def test_a_bug_is_not_hidden(monkeypatch):
    def broken(*args, **kwargs):
        raise RuntimeError("a bug")

    monkeypatch.setattr(cli, "fit", broken)
    with pytest.raises(RuntimeError, match="a bug"):
        main(["fit", "gmm"])


def test_a_reader_that_leaves_early_ends_the_command_quietly():
    # `zoo list --json | head`: the reader closes its end before the command writes.
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    proc = subprocess.Popen(
        [sys.executable, "-m", "inference", "list", "--json"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
    )
    proc.stdout.close()
    err = proc.stderr.read().decode()
    proc.stderr.close()
    assert proc.wait(timeout=60) == 1
    assert "Traceback" not in err and "BrokenPipeError" not in err


@pytest.mark.parametrize(
    "given",
    [
        ["--K", "2", "--option", "K=3"],
        ["--option", "K=2", "--option", "K=3"],
        ["--K", "2", "--K", "3"],
        ["--K=2", "--K", "2"],
    ],
)
def test_an_option_given_twice_is_refused(capsys, no_fit, given):
    assert main(["fit", "gmm", *given]) == 2
    err = capsys.readouterr().err
    assert "zoo: error: option 'K' is given twice" in err and "Traceback" not in err


def test_a_run_that_diverges_is_one_line_with_advice(capsys):
    argv = ["fit", "gmm", "--algorithm", "svi", "--backend", "numpyro", "--lr", "100"]
    assert main([*argv, "--num-steps", "50", "--json"]) == 1  # --json: no progress bar
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("zoo: error: The objective became")
    assert "Traceback" not in err[0]


def test_a_networks_weights_are_shown_by_their_shape(capsys):
    assert main(["fit", "vae", "--backend", "pyro", "--num-steps", "1"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert "encoder.body.hidden.1.weight: float32 array of shape (200, 200)" in "\n".join(out)
    assert len(out) < 60


@pytest.mark.parametrize(
    "argv, suggestion",
    [
        (["fit", "bayesian-gmm"], "Did you mean 'bayesian_gmm'?"),
        (["fit", "bayesian_gmm", "--algorithm", "cav"], "Did you mean 'cavi'?"),
        # Options in the shell's spelling, before the data are read.
        (["fit", "bayesian_gmm", "--algoritm", "cavi"], "Did you mean '--algorithm'?"),
        (["fit", "gmm", "--num-step", "3"], "Did you mean '--num-steps'?"),
        (["fit", "gmm", "--reg-covr", "0.1"], "Did you mean '--reg-covar'?"),
        (["fit", "bayesian_gmm", "--k", "3"], "Did you mean '--K'?"),
        (["compare", "bayesian_gmm", "--weight-prio", "x"], "Did you mean '--weight-prior'?"),
        (["compare", "gmm", "--algorithms", "emm"], "Did you mean 'em'?"),
    ],
)
def test_a_close_miss_is_answered_with_a_suggestion(capsys, argv, suggestion):
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "zoo: error:" in err and suggestion in err


def test_option_values_read_as_the_help_writes_them(capsys, fit_options):
    """--option NAME=VALUE takes dashes as --NAME VALUE does, and a value reads as JSON, else as
    a Python literal (True, a tuple as the help shows a default), else as a string."""
    given = fit_options
    argv = ["fit", "vae", "--option", "dynamic-binarization=True", "--hidden", "(8, 8)"]
    assert main([*argv, "--activation", "relu", "--latent-dim", "2"]) == 2
    assert given["dynamic_binarization"] is True and given["hidden"] == (8, 8)
    assert given["activation"] == "relu" and given["latent_dim"] == 2
    assert "stop here" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, said",
    [
        (["fit", "gmm", "--option", "tol=0"], "--tol is a flag of `zoo fit`: give it as --tol"),
        (["fit", "gmm", "--option", "seed=3"], "--seed is a flag of `zoo fit`"),
        (["compare", "gmm", "--option", "guide=enum"], "runs each guide of --guides NAMES"),
    ],
)
def test_a_flag_given_as_an_option_is_answered_with_the_flag(capsys, argv, said):
    assert main(argv) == 2
    assert said in capsys.readouterr().err


def test_a_string_that_reads_as_a_number_in_python_stays_a_string(capsys, fit_options):
    """Only Python's True, False, None and bracketed literals are read as Python: a checkpoint
    named 2024_11_29 or a value 1,2 stays as typed."""
    given = fit_options
    assert main(["fit", "gmm", "--checkpoint", "2024_11_29", "--init", "1,2"]) == 2
    assert given["checkpoint"] == "2024_11_29" and given["init"] == "1,2"
    # Numbers as people type them, which JSON does not read, are numbers.
    assert main(["fit", "gmm", "--reg-covar", ".001", "--lr", "1.", "--K", "+2"]) == 2
    assert (given["reg_covar"], given["lr"], given["K"]) == (0.001, 1.0, 2)
    assert type(given["K"]) is int


@pytest.mark.parametrize(
    "argv, label",
    [
        # The label is the layer's, not a backend's: Pyro here, as NumPyro would compile for
        # 20 s; the other cases run NumPyro, the command's default.
        (
            ["fit", "bayesian_gmm", "--algorithm", "svi", "--guide", "gumbel", "--backend", "pyro"],
            "relaxed ELBO",
        ),
        (["fit", "exchangeable_tokens", "--objective", "masked"], "leave-one-out log-likelihood"),
        (["fit", "exchangeable_tokens"], "ELBO"),
        (["fit", "bam_classifier", "--kl-weight", "0.5"], "ELBO with its KL weighted by 0.5"),
    ],
)
def test_the_fit_line_names_what_was_ascended(capsys, argv, label):
    assert main([*argv, "--num-steps", "2", "--tol", "0"]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line.split(": ", 1)[1].startswith(f"{label} -"), line


def test_compare_runs_the_guides_given(workdir, capsys):
    argv = ["compare", "bayesian_gmm", "--data", "x.npy", "--algorithms", "svi", "--K", "2"]
    argv += ["--backends", "pyro", "--num-steps", "3", "--guides", "gumbel", "--tol", "0"]
    assert main([*argv, "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["algorithm"], r["guide"]) for r in rows] == [("svi", "gumbel")]


def test_warnings_are_said_in_the_shells_words(capsys):
    """A ConvergenceWarning is one line, ``zoo: ConvergenceWarning: ...``, without the source
    line Python's warnings print (numpy's overflow warnings before an error: the run that
    diverges, below)."""
    assert main(["fit", "gmm", "--algorithm", "em", "--num-steps", "2", "--json"]) == 0
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("zoo: ConvergenceWarning: em on 'gmm'"), err


def test_a_samplers_fit_line_says_its_chains(workdir, capsys):
    argv = ["fit", "bayesian_gmm", "--data", "x.npy", "--algorithm", "nuts", "--K", "1"]
    assert main([*argv, "--num-warmup", "10", "--num-draws", "10", "--num-chains", "1"]) == 0
    line = capsys.readouterr().out.splitlines()[0]
    assert line.startswith("bayesian_gmm / nuts / numpyro: log joint density ")
    assert line.endswith("after 1 chain(s) of 10 warm-up and 10 draws"), line


def test_data_named_in_capitals_are_read(workdir, capsys):
    os.rename("x.npy", "X.NPY")
    assert main(["fit", "gmm", "--data", "X.NPY", "--num-steps", "2", "--tol", "0"]) == 0
    assert capsys.readouterr().out.startswith("gmm / em / numpyro: log-likelihood")


def test_save_says_where_it_wrote(workdir, capsys):
    assert main(["fit", "gmm", "--data", "x.npy", "--num-steps", "2", "--save", "out/f.zoo"]) == 0
    assert "zoo: saved the fit to out/f.zoo" in capsys.readouterr().err


def test_the_algorithms_table_is_aligned(capsys):
    assert main(["algorithms"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["algorithm", "estimate", "objective", "options"]
    starts = {line.index(line.split("  ")[-1].strip()) for line in lines if "  " in line}
    assert "[" not in "".join(lines)  # no Python list reprs
    assert len({line.find("ELBO") for line in lines if "ELBO" in line}) == 1
    assert starts


# --- what a newcomer sees: progress while waiting, defaults that finish -------------------------


class _Terminal(io.StringIO):
    """stderr as a terminal shows it: progress bars are drawn here."""

    def isatty(self):
        return True


def _bar_lines(text: str) -> list[str]:
    """The lines a terminal ends up showing: each line's last carriage-return redraw."""
    return [line.split("\r")[-1] for line in text.split("\n") if line.split("\r")[-1].strip()]


def test_compare_on_a_terminal_shows_one_line_per_run(monkeypatch):
    data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 100)
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    inference.compare(
        "bayesian_gmm", data, ["cavi", "em"], ["pyro"], seeds=(0, 1), num_steps=5, tol=0,
        num_samples=10, K=2,
    )  # fmt: skip
    lines = _bar_lines(terminal.getvalue())
    assert [line.split(":")[0] for line in lines] == [
        "cavi pyro seed 0 (1/4)",
        "cavi pyro seed 1 (2/4)",
        "em pyro seed 0 (3/4)",
        "em pyro seed 1 (4/4)",
    ]
    assert all("5/5" in line for line in lines[:2])  # how far each run went


def test_progress_stays_out_of_logs_and_off_when_asked(monkeypatch):
    """Bars are drawn on a terminal only: a log or a pipe gets no carriage-return noise."""
    data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 100)
    log = io.StringIO()
    monkeypatch.setattr(sys, "stderr", log)
    inference.fit("gmm", data, "em", "pyro", K=2, num_steps=3, tol=0)
    inference.compare("gmm", data, ["em"], ["pyro"], num_samples=10, K=2)
    assert log.getvalue() == ""
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    inference.compare("gmm", data, ["em"], ["pyro"], num_samples=10, K=2, progress=False)
    assert terminal.getvalue() == ""


def test_a_slow_first_step_does_not_inflate_the_time_estimate(monkeypatch):
    """The first step carries one-off work (JAX compiles it); the estimate is made from the
    steps after it, so a one-second first step of 40 fast ones never reads as 40 s left."""
    em = inference.get_algorithm("em")
    step, calls = em.step, []

    def compiling_first(state):
        calls.append(1)
        time.sleep(1.0 if len(calls) == 1 else 0.01)
        return step(state)

    monkeypatch.setattr(em, "step", compiling_first)
    terminal = _Terminal()
    monkeypatch.setattr(sys, "stderr", terminal)
    data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 100)
    inference.fit("gmm", data, "em", "pyro", K=2, num_steps=40, tol=0)
    left = re.findall(r"<(\d+):(\d+)", terminal.getvalue())
    assert left, terminal.getvalue()
    assert max(60 * int(m) + int(s) for m, s in left) <= 5, terminal.getvalue()


def test_compare_without_algorithms_leaves_out_nuts_and_says_how_to_add_it(monkeypatch):
    compare_module = importlib.import_module("inference.compare")
    fit = compare_module.fit

    def fit_but_no_sampler(model, data, algorithm, *args, **kwargs):
        assert algorithm != "nuts", "NUTS ran without being named: minutes, not seconds"
        return fit(model, data, algorithm, *args, **kwargs)

    monkeypatch.setattr(compare_module, "fit", fit_but_no_sampler)
    data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 60)
    with pytest.warns(UserWarning, match="Left out nuts") as said:
        table = inference.compare(
            "bayesian_gmm", data, backends=["pyro"], guides=["enum"], num_steps=2, tol=0,
            num_samples=5, K=2,
        )  # fmt: skip
    assert "algorithms=['cavi', 'em', 'nuts', 'svi', 'svi-natural']" in str(said[0].message)
    assert {row["algorithm"] for row in table.rows} == {"cavi", "em", "svi", "svi-natural"}


def test_zoo_compare_without_algorithms_says_what_it_left_out(capsys, monkeypatch):
    ran = {}

    def compare(spec, data, algorithms, *args, **kwargs):
        ran["algorithms"] = algorithms
        return Comparison(rows=[], results=[])

    monkeypatch.setattr(cli, "compare", compare)
    assert main(["compare", "bayesian_gmm", "--json"]) == 0
    assert "nuts" not in ran["algorithms"] and "cavi" in ran["algorithms"]
    err = capsys.readouterr().err
    assert "Left out nuts" in err and "--algorithms cavi,em,nuts,svi,svi-natural" in err
    assert main(["compare", "gmm", "--json"]) == 0  # EM's model has no posterior to sample
    assert "Left out" not in capsys.readouterr().err


# --- a shell that teaches -----------------------------------------------------------------------


def test_fit_model_help_lists_the_models_options(capsys):
    assert main(["fit", "bayesian_gmm", "--help"]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert "options of model bayesian_gmm" in out
    assert "--K INT Number of components, in [1, N]" in out and "[int; default: 10]" in out
    assert "--weight-prior VALUE Prior of the mixture weights" in out
    assert "default: 'dirichlet_process']" in out
    assert "--reg-covar FLOAT" in out and "[float; default: 0.0]" in out
    # the algorithms that fit this model, not every registered one (em fits its twin)
    assert "--algorithm {cavi,nuts,svi,svi-natural} one of cavi, nuts, svi, svi-natural" in out


def test_help_is_plain_text_and_its_example_option_exists(capsys):
    """No reST markup on a terminal, and the example of --option is one a user can give."""
    for argv in (["--help"], ["fit", "--help"], ["compare", "gmm", "--help"]):
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert "``" not in out and ":func:" not in out, argv
    assert main(["fit", "--help"]) == 0
    (example,) = re.findall(r"e\.g\. --option (\w+)=", " ".join(capsys.readouterr().out.split()))
    takers = [
        m for m in zoo.list_models() if example in model_options(zoo.get_model(m, check=False))
    ]
    takers += [a for a in list_algorithms() if example in inference.get_algorithm(a).option_names()]
    assert takers, f"--option {example}=... is an option of no model or algorithm"


def test_fit_model_help_answers_at_once_without_the_backends():
    """A fresh process: the help imports no backend (torch, JAX, Pyro, NumPyro), and takes well
    under a second of CPU time (wall time on a loaded machine says more about the machine)."""
    code = (
        "import sys, resource; from inference.tools.cli import main; "
        "status = main(['fit', 'bayesian_gmm', '--help']); "
        "heavy = [m for m in ('torch', 'jax', 'pyro', 'numpyro') if m in sys.modules]; "
        "usage = resource.getrusage(resource.RUSAGE_SELF); "
        "print(status, heavy, usage.ru_utime + usage.ru_stime, file=sys.stderr)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=True
    )
    line = done.stderr.strip().splitlines()[-1]
    assert line.startswith("0 [] "), line
    assert float(line.rsplit(" ", 1)[-1]) < 1.0, line
    assert "--K INT" in done.stdout and "--weight-prior" in done.stdout


def read_until(fd, text, seconds=10.0):
    """What a pseudo-terminal's main side has received once ``text`` has arrived, or when
    ``seconds`` have passed. The kernel hands writes to the main side asynchronously, so one
    read straight after a write may see only part of them on a busy machine."""
    received = b""
    deadline = time.monotonic() + seconds
    while text.encode() not in received and (left := deadline - time.monotonic()) > 0:
        if select.select([fd], [], [], left)[0]:
            received += os.read(fd, 65536)
    return received.decode(errors="replace")


@pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs pseudo-terminals (POSIX)")
def test_a_terminal_that_reports_no_size_still_shows_the_bar(monkeypatch):
    """A pseudo-terminal made without a size (``script``, some CI runners) reports 0 columns,
    and 0 rows, on which tqdm would draw an empty bar and hide it: the bar then takes 100
    columns of 24 rows."""
    main, follower = os.openpty()
    try:
        stream = os.fdopen(follower, "w", closefd=False)
        assert os.get_terminal_size(follower).columns == 0
        monkeypatch.setattr(sys, "stderr", stream)
        bar = loop.progress_bar(10, True, desc="a run")
        bar.update(5)
        bar.close()
        stream.flush()
        assert "a run:  50%" in read_until(main, "a run:  50%")
    finally:
        os.close(main)
        os.close(follower)
    assert loop.bar_size(io.StringIO()) == {}  # not a terminal: tqdm decides


def test_a_write_error_names_the_file_once():
    """The message names the file it could not write; an OS error about that file gives its
    reason alone, and one about another file (a temporary one beside it) keeps that name."""
    from inference.tools.cli_paths import reason_writing

    assert reason_writing(OSError(28, "No space left on device", "out/f.zoo"), "out/f.zoo") == (
        "No space left on device"
    )
    other = OSError(13, "Permission denied", "out/.f.zoo.part")
    assert reason_writing(other, "out/f.zoo") == "[Errno 13] Permission denied: 'out/.f.zoo.part'"
    assert reason_writing(RuntimeError("no LaTeX.\n"), "f.pgf") == "no LaTeX"
    # An error of a call on a file descriptor names it by number (it raised a TypeError).
    on_descriptor = OSError(9, "Bad file descriptor", 12345)
    assert reason_writing(on_descriptor, "out/f.zoo") == "[Errno 9] Bad file descriptor: 12345"
