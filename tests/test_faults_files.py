"""Paths that are not the user's to replace, and paths that would block: a FIFO, a socket or a
device is never opened for reading nor replaced by a write; a symbolic link is written through to
its target (the link stays a link); the shell never writes its result over a file it reads.
Each refusal comes before any work, with the path in the message. A figure is written whole or
not at all."""

import os
import signal
import socket
import stat
from pathlib import Path

import numpy as np
import pytest

import inference
import zoo
from inference.persistence.checkpoint import CheckpointError
from inference.tools.cli import main
from zoo import files as zoo_files


def _fifo(path: Path) -> Path:
    os.mkfifo(path)
    return path


def _socket(path: Path) -> Path:
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(str(path))
    sock.close()  # the socket file stays, as a server's does
    return path


SPECIAL = {"fifo": _fifo, "socket": _socket}


def _kind(path: Path) -> str:
    mode = os.lstat(path).st_mode
    return {stat.S_IFIFO: "fifo", stat.S_IFSOCK: "socket", stat.S_IFLNK: "link"}.get(
        stat.S_IFMT(mode), "file" if stat.S_ISREG(mode) else "other"
    )


@pytest.fixture(scope="module")
def fitted():
    x = zoo.get_model("gmm").make_data(np.random.default_rng(0), 60)["x"]
    return inference.fit("gmm", {"x": x}, "em", "numpyro", K=2, num_steps=3, progress=False)


@pytest.fixture(scope="module")
def saved(fitted, tmp_path_factory):
    path = tmp_path_factory.mktemp("saved") / "fit.zoo"
    fitted.save(path)
    return path


# --- reading: nothing blocks ------------------------------------------------------------------


@pytest.fixture
def fail_if_it_blocks():
    """A blocked open fails the test after 20 s instead of hanging the run."""

    def blocked(signum, frame):
        raise TimeoutError("the call blocked on a special file")

    previous = signal.signal(signal.SIGALRM, blocked)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize("kind", sorted(SPECIAL))
@pytest.mark.parametrize("reader", ["load", "read_header", "checkpoint.load"])
def test_reading_a_special_file_is_refused_without_opening_it(
    tmp_path, kind, reader, fail_if_it_blocks
):
    from inference.persistence import checkpoint

    path = SPECIAL[kind](tmp_path / "fit.zoo")
    read = {
        "load": inference.load,
        "read_header": checkpoint.read_header,
        "checkpoint.load": checkpoint.load,
    }[reader]
    with pytest.raises(CheckpointError, match="not a regular file") as err:
        read(path)  # a FIFO opened for reading would wait here for a writer, forever
    assert str(path) in str(err.value)


@pytest.mark.parametrize("kind", sorted(SPECIAL))
@pytest.mark.parametrize("name", ["x.npy", "x.npz"])
def test_the_shell_refuses_special_data_files(
    tmp_path, monkeypatch, capsys, kind, name, fail_if_it_blocks
):
    monkeypatch.chdir(tmp_path)
    SPECIAL[kind](tmp_path / name)
    assert main(["fit", "gmm", "--data", name, "--num-steps", "2"]) == 2
    err = capsys.readouterr().err
    assert "zoo: error: argument --data" in err and "not a regular file" in err
    assert "Traceback" not in err


def test_loading_through_a_link_reads_its_target(saved, tmp_path):
    link = tmp_path / "link.zoo"
    link.symlink_to(saved)
    np.testing.assert_array_equal(
        inference.load(link).params["means"], inference.load(saved).params["means"]
    )


# --- writing: special files are refused, links are written through ----------------------------


@pytest.mark.parametrize("kind", sorted(SPECIAL))
def test_save_refuses_a_special_file_and_leaves_it(fitted, tmp_path, kind):
    path = SPECIAL[kind](tmp_path / "fit.zoo")
    with pytest.raises(FileExistsError, match="not a regular file"):
        fitted.save(path)
    assert _kind(path) == kind
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fit.zoo"]  # no temporary left


@pytest.mark.parametrize("kind", sorted(SPECIAL))
def test_save_refuses_a_link_to_a_special_file(fitted, tmp_path, kind):
    target = SPECIAL[kind](tmp_path / "target")
    link = tmp_path / "fit.zoo"
    link.symlink_to(target)
    with pytest.raises(FileExistsError, match="not a regular file"):
        fitted.save(link)
    assert _kind(target) == kind and _kind(link) == "link"


@pytest.mark.parametrize("existing", [True, False])
@pytest.mark.parametrize("relative", [True, False])
def test_save_through_a_link_writes_its_target(fitted, tmp_path, existing, relative):
    target = tmp_path / "store" / "fit.zoo"
    target.parent.mkdir()
    if existing:
        target.write_bytes(b"an older fit")
    link = tmp_path / "fit.zoo"
    link.symlink_to(os.path.relpath(target, tmp_path) if relative else target)
    fitted.save(link)
    assert _kind(link) == "link" and _kind(target) == "file"
    np.testing.assert_array_equal(inference.load(target).params["means"], fitted.params["means"])
    assert sorted(p.name for p in target.parent.iterdir()) == ["fit.zoo"]


def test_save_through_a_chain_of_links(fitted, tmp_path):
    target = tmp_path / "fit.zoo"
    (tmp_path / "one").symlink_to(target)
    (tmp_path / "two").symlink_to(tmp_path / "one")
    fitted.save(tmp_path / "two")
    assert [_kind(tmp_path / n) for n in ("two", "one", "fit.zoo")] == ["link", "link", "file"]


def test_save_through_a_link_to_a_folder_that_does_not_exist(fitted, tmp_path):
    link = tmp_path / "fit.zoo"
    link.symlink_to(tmp_path / "missing" / "fit.zoo")
    with pytest.raises(FileNotFoundError, match="does not exist"):
        fitted.save(link)
    assert _kind(link) == "link"


@pytest.mark.parametrize("kind", sorted(SPECIAL))
def test_atomic_write_refuses_special_files(tmp_path, kind):
    path = SPECIAL[kind](tmp_path / "out")
    with pytest.raises(FileExistsError, match="not a regular file"):
        zoo_files.atomic_write(path, lambda f: f.write(b"data"))
    assert _kind(path) == kind


def test_a_file_that_cannot_be_made_is_named_by_the_path_asked_for(tmp_path, monkeypatch):
    """A read-only folder (as seen by a user that is not root): the error names the file the
    caller asked for, not the hidden temporary file beside it."""

    def refuse(path, *args):
        raise PermissionError(13, "Permission denied", path)

    monkeypatch.setattr(zoo_files.os, "open", refuse)
    with pytest.raises(PermissionError) as info:
        zoo_files.write_text(tmp_path / "results.json", "{}")
    assert info.value.filename == str(tmp_path / "results.json")
    assert ".tmp-" not in str(info.value)


@pytest.mark.parametrize("kind", sorted(SPECIAL))
def test_unwritable_reason_names_special_files_and_links_to_them(tmp_path, kind):
    target = SPECIAL[kind](tmp_path / "target")
    (tmp_path / "link").symlink_to(target)
    for path in (target, tmp_path / "link"):
        assert zoo_files.unwritable_reason(path) == "exists and is not a regular file"


def test_unwritable_reason_follows_a_link_to_its_folder(tmp_path):
    link = tmp_path / "link"
    link.symlink_to(tmp_path / "missing" / "out.zoo")
    assert "does not exist" in zoo_files.unwritable_reason(link)
    (tmp_path / "ok").symlink_to(tmp_path / "out.zoo")
    assert zoo_files.unwritable_reason(tmp_path / "ok") is None


def test_checkpoint_through_a_link_writes_its_target(tmp_path):
    x = zoo.get_model("gmm").make_data(np.random.default_rng(0), 60)["x"]
    target = tmp_path / "runs" / "fit.ckpt"
    target.parent.mkdir()
    link = tmp_path / "fit.ckpt"
    link.symlink_to(target)
    inference.fit(
        "gmm", {"x": x}, "em", "numpyro", K=2, num_steps=3, tol=0, checkpoint=link, progress=False
    )
    assert _kind(link) == "link" and _kind(target) == "file"


# --- the shell does not write over what it reads ------------------------------------------------


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    np.save(tmp_path / "x.npy", np.random.default_rng(0).normal(size=(30, 2)))
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _spellings(folder: Path) -> dict[str, str]:
    """Other names of ``x.npy``: another spelling, a symbolic link and a hard link."""
    (folder / "sub").mkdir()
    (folder / "link.npy").symlink_to(folder / "x.npy")
    os.link(folder / "x.npy", folder / "hard.npy")
    return {
        "same": "x.npy",
        "dotted": "./sub/../x.npy",
        "absolute": str(folder / "x.npy"),
        "symlink": "link.npy",
        "hardlink": "hard.npy",
    }


@pytest.mark.parametrize("spelling", ["same", "dotted", "absolute", "symlink", "hardlink"])
def test_the_shell_never_saves_over_its_data(data_dir, capsys, no_fit, spelling):
    target = _spellings(data_dir)[spelling]
    before = (data_dir / "x.npy").read_bytes()
    assert main(["fit", "gmm", "--data", "x.npy", "--save", target]) == 2
    err = capsys.readouterr().err
    assert "zoo: error: argument --save" in err and "is the file this command reads" in err
    assert (data_dir / "x.npy").read_bytes() == before


def test_the_shell_saves_next_to_its_data(data_dir, capsys):
    assert main(["fit", "gmm", "--data", "x.npy", "--num-steps", "2", "--save", "x.zoo"]) == 0
    assert inference.load("x.zoo").model == "gmm"


# --- checkpoints: the real name checked up front, one writer per real file, no fit thrown away --


def _gmm_data():
    return {"x": zoo.get_model("gmm").make_data(np.random.default_rng(0), 60)["x"]}


def _fit_with_checkpoint(path, num_steps=6, **kwargs):
    return inference.fit(
        "gmm", _gmm_data(), "em", "numpyro", K=2, num_steps=num_steps, tol=0,
        checkpoint=path, checkpoint_every=2, progress=False, **kwargs,
    )  # fmt: skip


@pytest.mark.parametrize(
    "name, reason",
    [
        ("", "is empty"),
        ("fit.ckpt/", "ends with a path separator"),
        ("x" * 250 + ".ckpt", "name is too long"),  # the file fits, its temporary would not
        ("missing/fit.ckpt", "does not exist"),
    ],
)
def test_a_checkpoint_name_that_would_fail_at_its_first_write_is_refused_up_front(
    tmp_path, monkeypatch, name, reason
):
    monkeypatch.chdir(tmp_path)

    def started(*args, **kwargs):
        raise AssertionError("the path should have been refused before the first step")

    with pytest.raises(ValueError, match=reason):
        _fit_with_checkpoint(name, callback=started)
    assert list(tmp_path.iterdir()) == []


def test_a_checkpoint_that_cannot_be_written_does_not_lose_the_fit(tmp_path, monkeypatch):
    """A full disk at every write, the last included: the fit is returned, with a warning that
    names the path and the OS error."""
    from inference.persistence import checkpoint

    def full(path, header, arrays):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(checkpoint, "save", full)
    path = tmp_path / "fit.ckpt"
    with pytest.warns(RuntimeWarning, match=r"fit\.ckpt.*No space left on device.*returned"):
        res = _fit_with_checkpoint(path)
    assert res.num_steps == 6 and np.isfinite(res.objective)
    assert not path.exists()


def test_a_checkpoint_folder_removed_mid_run_does_not_lose_the_fit(tmp_path):
    folder = tmp_path / "runs"
    folder.mkdir()
    path = folder / "fit.ckpt"

    def remove_folder(step, state, info):
        if step == 3:
            for child in folder.iterdir():
                child.unlink()
            folder.rmdir()

    with pytest.warns(RuntimeWarning, match="Could not write the checkpoint"):
        res = _fit_with_checkpoint(path, callback=remove_folder)
    assert res.num_steps == 6


def test_a_checkpoint_named_through_a_link_is_locked_as_its_target(tmp_path):
    from inference.persistence.checkpoint_guard import exclusive

    target = tmp_path / "fit.ckpt"
    link = tmp_path / "link.ckpt"
    link.symlink_to(target)
    with exclusive(target):
        with pytest.raises(inference.CheckpointInUseError) as err:
            _fit_with_checkpoint(link)
    assert "delete" not in str(err.value)  # the holder lives: deleting its lock is no fix


def test_deleting_the_lock_file_does_not_let_a_second_fit_in(tmp_path):
    from inference.persistence.checkpoint_guard import LOCK_SUFFIX, exclusive

    path = tmp_path / "fit.ckpt"
    with exclusive(path):
        os.remove(str(path) + LOCK_SUFFIX)
        with pytest.raises(inference.CheckpointInUseError, match="Wait for it to finish"):
            _fit_with_checkpoint(path)
    res = _fit_with_checkpoint(path)  # released: the next fit takes it
    assert res.num_steps == 6


def test_a_second_ctrl_c_in_the_middle_of_a_pyro_step_leaves_a_whole_checkpoint(
    tmp_path, monkeypatch
):
    """Pyro's step updates the parameters in place: one stopped half way must not be
    checkpointed. The checkpoint keeps the last step written whole, and the resumed fit is the
    uninterrupted one, bit for bit."""
    import pyro

    svi = type(inference.get_algorithm("svi"))
    data = {"x": zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(0), 60)["x"]}
    fit = dict(K=2, num_steps=8, lr=0.05, tol=0, progress=False)
    whole = inference.fit("bayesian_gmm", data, "svi", "pyro", **fit)
    fit["checkpoint_every"] = 2
    real_step = svi.step

    def half_a_step(self, state):
        if state.step == 5:
            with state.engine._own_store():  # the fit's parameters, in Pyro's store
                for value in pyro.get_param_store().values():
                    value.unconstrained().data.add_(1.0)  # part of an update, in place
            raise KeyboardInterrupt  # the second Ctrl-C
        return real_step(self, state)

    monkeypatch.setattr(svi, "step", half_a_step)
    path = tmp_path / "fit.ckpt"
    with pytest.raises(KeyboardInterrupt):
        inference.fit("bayesian_gmm", data, "svi", "pyro", checkpoint=path, **fit)
    monkeypatch.setattr(svi, "step", real_step)
    resumed = inference.fit(
        "bayesian_gmm", data, "svi", "pyro", checkpoint=path, resume=True, **fit
    )
    np.testing.assert_array_equal(resumed.history["objective"], whole.history["objective"])
    for name, value in whole.raw_params.items():
        np.testing.assert_array_equal(resumed.raw_params[name], value, err_msg=name)


# --- figures: written whole or not at all -----------------------------------------------------


def _figure(*artists):
    from matplotlib.figure import Figure

    figure = Figure(figsize=(2, 2))
    axes = figure.add_subplot()
    axes.plot([0, 1], [0, 1], label="a line")
    axes.set_title("a figure")
    for artist in artists:
        axes.add_artist(artist)
    return figure


def _interrupting_artist():
    """An artist whose drawing is stopped by Ctrl-C, as a figure's rendering may be."""
    from matplotlib.artist import Artist

    class Interrupting(Artist):
        def draw(self, renderer):
            raise KeyboardInterrupt

    return Interrupting()


@pytest.mark.parametrize("name", ["curves.png", "curves.svg", "curves.pdf", "curves"])
def test_a_figure_stopped_while_rendered_keeps_the_file_it_would_replace(tmp_path, name):
    """A Ctrl-C while the figure is drawn keeps the previous file whole (SVG's and PDF's
    writers, in place, have opened and begun the file by then) and leaves no temporary."""
    path = tmp_path / name
    path.write_bytes(b"the previous figure")
    with pytest.raises(KeyboardInterrupt):
        zoo_files.save_figure(_figure(_interrupting_artist()), path, dpi=50)
    assert path.read_bytes() == b"the previous figure"
    assert [p.name for p in tmp_path.iterdir()] == [name]  # and no temporary file left


def test_a_figure_is_written_as_savefig_writes_it(tmp_path):
    """The bytes savefig would write, in the format of the file's extension; a name without
    one is PNG, written under that very name (savefig would add ".png")."""
    figure = _figure()
    figure.savefig(tmp_path / "by_savefig.png", dpi=50)
    png = (tmp_path / "by_savefig.png").read_bytes()
    zoo_files.save_figure(figure, tmp_path / "curves.png", dpi=50)
    assert (tmp_path / "curves.png").read_bytes() == png
    zoo_files.save_figure(figure, tmp_path / "curves", dpi=50)
    assert (tmp_path / "curves").read_bytes() == png
    zoo_files.save_figure(figure, tmp_path / "curves.svg")
    assert (tmp_path / "curves.svg").read_bytes().startswith(b"<?xml")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "by_savefig.png", "curves", "curves.png", "curves.svg",
    ]  # fmt: skip
