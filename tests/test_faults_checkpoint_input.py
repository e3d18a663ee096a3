"""A checkpoint given a damaged or hand-edited state, and the shell's checkpoint options: each
refusal is a ``CheckpointError`` or one ``zoo: error:`` line naming the field or the flag, before
any step; a file name is taken as typed; a second run on a checkpoint in use is refused without
first being told that it will replace it."""

import os
import warnings

import numpy as np
import pytest

import inference
import zoo
from inference.persistence import checkpoint
from inference.persistence.checkpoint import CheckpointError
from inference.persistence.checkpoint_guard import LOCK_SUFFIX, exclusive
from inference.tools.cli import main

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def x():
    return zoo.get_model("gmm").make_data(np.random.default_rng(0), 40)["x"]


def _fit(x, path, *, num_steps=5, resume=False):
    return inference.fit(
        "gmm", {"x": x}, "em", "pyro", K=2, num_steps=num_steps, tol=0.0, progress=False,
        checkpoint=path, resume=resume,
    )  # fmt: skip


# --- a damaged or hand-edited state --------------------------------------------------------


def _set_field(name, node):
    return lambda fields: fields.__setitem__(name, node)


def _first_param(change):
    """A change to the first item of the EM state's ``inner['params']`` dict."""

    def edit(fields):
        params = fields["inner"]["dict"][0][1]["dict"]
        change(params)

    return edit


DAMAGED_STATES = {
    "a bare step": (_set_field("step", 5), "field 'step' is 5, not a value as the zoo writes"),
    "a dict of a number": (_set_field("step", {"dict": 5}), "field 'step' is a dict whose items"),
    "an array named by a list": (_set_field("step", {"array": ["x"]}), "names its array by"),
    "a step of text": (_set_field("step", {"value": "abc"}), "field 'step' is 'abc', not a whole"),
    "a step of true": (_set_field("step", {"value": True}), "field 'step' is True, not a whole"),
    "a step behind the run's": (_set_field("step", {"value": 4}), "field 'step' is 4, and the"),
    "a step lost": (lambda fields: fields.pop("step"), "field 'step' is None"),
    "a value of a list": (_set_field("step", {"value": [5]}), "holds the value [5], not a"),
    "two kinds in one node": (
        _set_field("step", {"value": 5, "array": "inner.0.0"}),
        "field 'step' is",
    ),
    "a dict item that is no pair": (
        _first_param(lambda params: params.__setitem__(0, [{"value": "weights"}])),
        "whose item 0 is",
    ),
    "a key that cannot key": (
        _first_param(lambda params: params[0].__setitem__(0, {"list": [{"value": 1}]})),
        "whose key 0 is [1], which cannot be a key",
    ),
}


@pytest.mark.parametrize("case", DAMAGED_STATES, ids=list(DAMAGED_STATES))
def test_a_damaged_state_is_refused_naming_its_field(tmp_path, x, case):
    """Before any step, as a CheckpointError: never a TypeError from reading the file, nor a
    resume that fails at its first step."""
    change, words = DAMAGED_STATES[case]
    path = tmp_path / "run.zoo"
    _fit(x, path)
    header, arrays = checkpoint.load(path)
    change(header["state"]["fields"])
    checkpoint.save(path, header, arrays)
    with pytest.raises(CheckpointError, match="is damaged: its state's") as err:
        _fit(x, path, num_steps=8, resume=True)
    assert words in str(err.value)


@pytest.mark.parametrize("fields", [[1, 2], None, "fields"])
def test_state_fields_that_are_no_mapping_are_refused(tmp_path, x, fields):
    path = tmp_path / "run.zoo"
    _fit(x, path)
    header, arrays = checkpoint.load(path)
    header["state"]["fields"] = fields
    checkpoint.save(path, header, arrays)
    with pytest.raises(CheckpointError, match="is damaged: its state's fields are"):
        _fit(x, path, num_steps=8, resume=True)


def test_an_untouched_checkpoint_still_resumes_to_the_uninterrupted_run(tmp_path, x):
    path = tmp_path / "run.zoo"
    _fit(x, path)
    resumed = _fit(x, path, num_steps=8, resume=True)
    whole = _fit(x, tmp_path / "whole.zoo", num_steps=8)
    np.testing.assert_array_equal(resumed.params["means"], whole.params["means"])


# --- a checkpoint another run is writing ---------------------------------------------------


def _hold_as_another_process(path):
    """The lock file of ``path`` locked through a descriptor of its own, as another process
    would hold it (a lock of ``flock`` belongs to its open file, not to the process)."""
    fcntl = pytest.importorskip("fcntl")
    fd = os.open(str(path) + LOCK_SUFFIX, os.O_RDWR | os.O_CREAT, 0o666)
    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    return fd


@pytest.mark.parametrize("holder", ["this process", "another process"])
def test_a_checkpoint_in_use_is_refused_without_saying_it_will_be_replaced(tmp_path, x, holder):
    path = tmp_path / "run.zoo"
    _fit(x, path, num_steps=2)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        if holder == "this process":
            with exclusive(path), pytest.raises(inference.CheckpointInUseError):
                _fit(x, path, num_steps=2)
        else:
            fd = _hold_as_another_process(path)
            try:
                with pytest.raises(inference.CheckpointInUseError):
                    _fit(x, path, num_steps=2)
            finally:
                os.close(fd)
    assert not [w for w in said if "replaces it" in str(w.message)]
    with pytest.warns(UserWarning, match="replaces it at its first checkpoint"):
        _fit(x, path, num_steps=2)  # released: the warning is given to the run that replaces it


# --- the shell's checkpoint options --------------------------------------------------------


@pytest.fixture
def workdir(tmp_path, monkeypatch):
    np.save(tmp_path / "x.npy", np.random.default_rng(0).normal(size=(30, 2)))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _other_names(folder):
    """Other names of ``run.zoo``, which need not exist yet: itself, another spelling and a
    symbolic link to it."""
    (folder / "sub").mkdir()
    (folder / "link.zoo").symlink_to(folder / "run.zoo")
    return {"same": "run.zoo", "dotted": "./sub/../run.zoo", "symlink": "link.zoo"}


@pytest.mark.parametrize("exists", [False, True], ids=["new", "existing"])
@pytest.mark.parametrize("spelling", ["same", "dotted", "symlink"])
def test_save_naming_the_checkpoint_is_refused_up_front(workdir, capsys, no_fit, spelling, exists):
    """The fit is saved after its last checkpoint: over it, the run could not be resumed."""
    save = _other_names(workdir)[spelling]
    if exists:
        _fit(np.load(workdir / "x.npy"), workdir / "run.zoo", num_steps=2)
    argv = ["fit", "gmm", "--data", "x.npy", "--checkpoint", "run.zoo", "--save", save]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "zoo: error: argument --save" in err and "is the file --checkpoint names" in err
    if not exists:
        assert not (workdir / "run.zoo").exists()


def test_a_hard_link_to_the_checkpoint_is_refused_as_save(workdir, capsys, no_fit):
    _fit(np.load(workdir / "x.npy"), workdir / "run.zoo", num_steps=2)
    os.link(workdir / "run.zoo", workdir / "hard.zoo")
    argv = ["fit", "gmm", "--checkpoint", "run.zoo", "--save", "hard.zoo"]
    assert main(argv) == 2
    assert "is the file --checkpoint names" in capsys.readouterr().err


def test_save_next_to_the_checkpoint_writes_both(workdir, capsys):
    argv = ["fit", "gmm", "--data", "x.npy", "--backend", "pyro", "--num-steps", "2"]
    assert main([*argv, "--tol", "0", "--checkpoint", "run.zoo", "--save", "fit.zoo"]) == 0
    assert checkpoint.read_header("run.zoo")["kind"] == "checkpoint"
    assert inference.load("fit.zoo").model == "gmm"


@pytest.mark.parametrize(
    "argv",
    [
        ["--checkpoint", "null"],
        ["--checkpoint", "100"],
        ["--checkpoint", "true"],
        ["--option", "checkpoint=null"],
        ["--checkpoint=[1]"],
    ],
)
def test_a_checkpoint_name_is_taken_as_typed(capsys, fit_options, argv):
    """A file named null is that file, not no checkpoint; one named 100 is not a number."""
    given = fit_options
    assert main(["fit", "gmm", *argv]) == 2
    typed = argv[-1].partition("=")[2] if "=" in argv[-1] else argv[-1]
    assert given["checkpoint"] == typed


def test_the_other_run_options_are_still_read_as_values(capsys, fit_options):
    given = fit_options
    argv = ["--checkpoint", "run.zoo", "--checkpoint-every", "5", "--resume", "true"]
    assert main(["fit", "gmm", *argv, "--dtype", "float32"]) == 2
    assert given["checkpoint_every"] == 5 and given["resume"] is True
    assert given["dtype"] == "float32"


def test_a_checkpoint_named_as_a_number_is_written_under_that_name(workdir, capsys):
    argv = ["fit", "gmm", "--data", "x.npy", "--backend", "pyro", "--num-steps", "2"]
    assert main([*argv, "--tol", "0", "--checkpoint", "100"]) == 0
    assert checkpoint.read_header("100")["kind"] == "checkpoint"
    assert main([*argv, "--tol", "0", "--checkpoint", "100", "--resume", "true"]) == 0


@pytest.mark.parametrize(
    "argv, said",
    [
        (["--checkpoint-every", "3"], "--checkpoint-every needs --checkpoint FILE"),
        (["--resume", "true"], "--resume true needs --checkpoint FILE"),
    ],
)
def test_checkpoint_options_without_a_checkpoint_are_said_in_the_shells_words(
    capsys, no_fit, argv, said
):
    assert main(["fit", "gmm", *argv]) == 2
    err = capsys.readouterr().err
    assert f"zoo: error: {said}" in err and "=" not in err


def test_fit_help_names_the_checkpoint_options(capsys, monkeypatch):
    monkeypatch.setenv("COLUMNS", "2000")
    assert main(["fit", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    for flag in ("--checkpoint FILE", "--checkpoint-every N", "--resume true"):
        assert flag in text


def test_the_guide_shows_the_shells_checkpoint_options():
    """The guide and getting started agree: the shell takes checkpoints too."""
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for page in ("docs/guide/checkpoints.md", "docs/getting_started.md"):
        with open(os.path.join(root, page), encoding="utf-8") as f:
            text = " ".join(f.read().split())
        assert "--checkpoint" in text and "--resume true" in text, page
        assert "checkpoints are an option of `inference.fit`" not in text, page
