"""Resume refuses a checkpoint of another run: whatever changes a fit's result and was given
differently (starting arrays, validation data, a model option that is an array, the size of a
data-parallel group) is named in the refusal, and a checkpoint written before a key was
recorded still resumes the run it was written by."""

import warnings
import zipfile

import numpy as np
import pytest

import inference
import zoo
from inference.persistence import checkpoint
from inference.persistence.checkpoint import CheckpointError

pytestmark = pytest.mark.usefixtures("one_torch_thread")

BACKENDS = ["pyro", "numpyro"]


@pytest.fixture(scope="module")
def x():
    return zoo.get_model("gmm").make_data(np.random.default_rng(0), 40)["x"]


@pytest.fixture(scope="module")
def responsibilities(x):
    return np.random.default_rng(1).dirichlet(np.ones(2), size=len(x))


def _fit(x, backend, path, *, model="gmm", num_steps=2, resume=False, K=2, **options):
    return inference.fit(
        model, {"x": x}, "svi", backend, K=K, num_steps=num_steps, tol=0.0, progress=False,
        checkpoint=path, resume=resume, **options,
    )  # fmt: skip


def _refused(x, backend, path, match, **options):
    with pytest.raises(CheckpointError, match=f"was written by another run; its {match}"):
        _fit(x, backend, path, num_steps=4, resume=True, **options)


def _rewrite_header(path, change) -> None:
    """The checkpoint at ``path`` with its header changed by ``change(header)``, in place."""
    header, arrays = checkpoint.load(path)
    change(header)
    checkpoint.save(path, header, arrays)


def _as_older_file(header) -> None:
    """A header as written before the starting values, the size of a data-parallel group and a
    fit without validation were recorded."""
    header.pop("init", None), header.pop("processes", None)
    if header.get("validation_setup", "") is None:
        del header["validation_setup"]


# --- starting values ---------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_other_starting_responsibilities_are_refused(tmp_path, x, responsibilities, backend):
    path = tmp_path / "run.zoo"
    _fit(x, backend, path, init=responsibilities)
    other = responsibilities[::-1].copy()
    _refused(x, backend, path, "init does not match this run's: 'array ", init=other)


@pytest.mark.parametrize("backend", BACKENDS)
def test_other_starting_parameters_are_refused(tmp_path, x, backend):
    start = _fit(x, backend, None).raw_params
    path = tmp_path / "run.zoo"
    _fit(x, backend, path, init=start)
    other = {k: v + 0.5 if k == "means" else v for k, v in start.items()}
    _refused(x, backend, path, "init does not match", init=other)


@pytest.mark.parametrize("backend", BACKENDS)
def test_starting_arrays_added_or_removed_are_refused(tmp_path, x, responsibilities, backend):
    with_init, without = tmp_path / "with.zoo", tmp_path / "without.zoo"
    _fit(x, backend, with_init, init=responsibilities)
    _fit(x, backend, without)
    # No init is the start it stands for, k-means, in the message.
    _refused(x, backend, with_init, "options do not match .*init: 'array' there, 'kmeans' here")
    _refused(x, backend, without, "options do not match .*init: 'kmeans' there, 'array' here",
             init=responsibilities)  # fmt: skip


@pytest.mark.parametrize("older", [False, True], ids=["", "older-file"])
@pytest.mark.parametrize("first, then", [(None, "kmeans"), ("kmeans", None)])
def test_no_init_and_the_start_it_stands_for_resume_each_other(tmp_path, x, first, then, older):
    """A mixture given no init starts from k-means: a run given init="kmeans" is the same run."""
    path = tmp_path / "run.zoo"
    _fit(x, "pyro", path, init=first)
    if older:  # as written before the default start was recorded
        _rewrite_header(path, lambda header: header.pop("default_init"))
    resumed = _fit(x, "pyro", path, num_steps=4, resume=True, init=then)
    whole = _fit(x, "pyro", None, num_steps=4, init=first)
    np.testing.assert_array_equal(resumed.history["step"], [1, 2, 3, 4])
    assert resumed.objective == whole.objective
    _refused(x, "pyro", path, "options do not match .*init: 'kmeans' there, 'random' here",
             init="random")  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
def test_the_same_starting_values_in_another_dtype_resume(tmp_path, x, responsibilities, backend):
    path = tmp_path / "run.zoo"
    _fit(x, backend, path, init=responsibilities)
    resumed = _fit(x, backend, path, num_steps=4, resume=True, init=responsibilities.tolist())
    np.testing.assert_array_equal(resumed.history["step"], [1, 2, 3, 4])


# --- validation --------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
def test_validation_data_added_on_resume_are_refused(tmp_path, x, backend):
    path = tmp_path / "run.zoo"
    _fit(x, backend, path)
    _refused(x, backend, path, "validation_setup does not match this run's: None there",
             validation_data={"x": x[:10]}, validate_every=2)  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
def test_validation_data_removed_or_changed_on_resume_are_refused(tmp_path, x, backend):
    path = tmp_path / "run.zoo"
    _fit(x, backend, path, validation_data={"x": x[:10]}, validate_every=2)
    _refused(x, backend, path, "validation_setup does not match .* there, None here")
    _refused(x, backend, path, "validation_setup does not match .*data_fingerprint",
             validation_data={"x": x[10:20]}, validate_every=2)  # fmt: skip


# --- what else changes a result ----------------------------------------------------------------


# NumPyro's case compiles for 20 s; the checkpoint's check is the layer's, as for Pyro.
@pytest.mark.parametrize("backend", ["pyro", pytest.param("numpyro", marks=pytest.mark.slow)])
def test_another_model_option_array_is_refused(tmp_path, x, backend):
    path = tmp_path / "run.zoo"
    _fit(x, backend, path, model="bayesian_gmm", mean_prior=np.zeros(2))
    with pytest.raises(CheckpointError, match="its model config does not match .*: mean_prior"):
        _fit(x, backend, path, model="bayesian_gmm", num_steps=4, resume=True,
             mean_prior=np.array([0.0, 1e-9]))  # fmt: skip


# NumPyro's case compiles the Bayesian mixture's SVI twice for the layer's own comparison.
@pytest.mark.parametrize("backend", ["pyro", pytest.param("numpyro", marks=pytest.mark.slow)])
def test_another_model_option_is_named(tmp_path, x, backend):
    """The fields of the model's config that differ are named (K, and the weights' prior
    concentration, whose default is 1 / K)."""
    path = tmp_path / "run.zoo"
    _fit(x, backend, path, model="bayesian_gmm")
    expected = "its model config does not match this run's: K: 2 there, 4 here, weight_conc"
    with pytest.raises(CheckpointError, match=expected):
        _fit(x, backend, path, model="bayesian_gmm", num_steps=4, resume=True, K=4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_checkpoint_of_a_data_parallel_group_of_another_size_is_refused(tmp_path, x, backend):
    path = tmp_path / "run.zoo"
    _fit(x, backend, path)
    _rewrite_header(path, lambda header: header.update(processes=2))
    _refused(x, backend, path, "processes does not match this run's: 2 there, 1 here")


# --- files written before these keys were recorded ---------------------------------------------


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("given", ["init", "validation", "neither"])
def test_an_older_checkpoint_of_the_same_run_resumes(tmp_path, x, responsibilities, backend, given):
    options = {
        "init": {"init": responsibilities},
        "validation": {"validation_data": {"x": x[:10]}, "validate_every": 2},
        "neither": {},
    }[given]
    path = tmp_path / "run.zoo"
    _fit(x, backend, path, **options)
    _rewrite_header(path, _as_older_file)
    resumed = _fit(x, backend, path, num_steps=4, resume=True, **options)
    np.testing.assert_array_equal(resumed.history["step"], [1, 2, 3, 4])


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_older_checkpoint_without_validation_refuses_validation_data(tmp_path, x, backend):
    path = tmp_path / "run.zoo"
    _fit(x, backend, path)
    _rewrite_header(path, _as_older_file)
    _refused(x, backend, path, "validation_setup does not match this run's: None there",
             validation_data={"x": x[:10]}, validate_every=2)  # fmt: skip


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_older_checkpoint_that_validated_refuses_a_run_without(tmp_path, x, backend):
    """A file from before the set-up was recorded keeps the validation's state: it validated."""
    path = tmp_path / "run.zoo"
    _fit(x, backend, path, validation_data={"x": x[:10]}, validate_every=2)
    _rewrite_header(path, lambda header: header.pop("validation_setup"))
    _refused(x, backend, path, "validation_setup does not match this run's: 'validation data")


def test_an_older_float32_numpyro_checkpoint_with_an_int64_counter_resumes(tmp_path, x):
    """NumPyro's float32 SVI used to count its updates in int64 (JAX's 64-bit mode, now off in
    a float32 fit's trace): such a file resumes to the uninterrupted run."""
    path = tmp_path / "run.zoo"
    _fit(x, "numpyro", path, dtype="float32")
    header, arrays = checkpoint.load(path)
    counters = [k for k, a in arrays.items() if a.dtype == np.int32]
    assert counters  # the update count
    widened = {k: a.astype(np.int64) if k in counters else a for k, a in arrays.items()}
    checkpoint.save(path, header, widened)
    resumed = _fit(x, "numpyro", path, num_steps=4, resume=True, dtype="float32")
    uninterrupted = _fit(x, "numpyro", None, num_steps=4, dtype="float32")
    np.testing.assert_array_equal(resumed.history["objective"], uninterrupted.history["objective"])


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_checkpoint_a_fresh_run_will_replace_is_named_with_the_run_it_holds(tmp_path, x, backend):
    """resume=False (the default) starts afresh and replaces the checkpoint at its first write:
    the work in it is lost unless resume=True was meant, so the fit says so, from the caller's
    line; a resumed fit says nothing of it."""
    path = tmp_path / "run.zoo"
    _fit(x, backend, path, num_steps=3)
    with pytest.warns(
        UserWarning, match=r"holds a run of 'svi' on 'gmm' at step 3; this fit"
    ) as said:
        _fit(x, backend, path, num_steps=2)
    assert [w.filename for w in said if "holds a run" in str(w.message)] == [__file__]
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*holds a run")
        _fit(x, backend, path, num_steps=4, resume=True)


# --- a damaged or crafted record of the run ----------------------------------------------------


def _drop(key):
    return lambda header, arrays: arrays.pop(key)


def _set(key, value):
    return lambda header, arrays: header.__setitem__(key, value)


DAMAGED_RECORDS = {
    "no step": (lambda header, arrays: header.pop("step"), "its step is None"),
    "a step of text": (_set("step", "x"), "its step is 'x'"),
    "a negative step": (_set("step", -5), "its step is -5"),
    "a step past its history": (_set("step", 10), "it is at step 10, and its history holds 2"),
    "options not a mapping": (_set("options", [1]), "its options are not a mapping"),
    "an unknown reason to stop": (_set("stopped", "bored"), "it says it stopped for 'bored'"),
    "a tol of text": (_set("tol", "x"), "its tol is 'x'"),
    "a history lost": (_drop("history/time"), r"its history lacks \['time'\]"),
    "a history of two lengths": (
        lambda header, arrays: arrays.__setitem__("history/time", np.zeros(3)),
        "history arrays disagree in length",
    ),
}


@pytest.mark.parametrize("case", DAMAGED_RECORDS, ids=list(DAMAGED_RECORDS))
def test_a_damaged_record_of_the_run_is_refused_on_resume(tmp_path, x, case):
    """Written with the manifest made to agree (a crafted file): the header's and history's own
    checks refuse it, before any step, rather than a KeyError steps later or a resume from a
    step the history does not hold."""
    change, words = DAMAGED_RECORDS[case]
    path = tmp_path / "run.zoo"
    _fit(x, "pyro", path)
    header, arrays = checkpoint.load(path)
    change(header, arrays)
    checkpoint.save(path, header, arrays)
    with pytest.raises(CheckpointError, match=words):
        _fit(x, "pyro", path, num_steps=4, resume=True)


def test_a_member_a_damaged_zip_directory_drops_is_named(tmp_path, x):
    """zipfile reads an archive whose central directory lost an entry without a word: the
    header's manifest names the member that is gone."""
    path = tmp_path / "run.zoo"
    _fit(x, "pyro", path)
    with zipfile.ZipFile(path) as old:
        members = {i.filename: old.read(i) for i in old.infolist()}
    with zipfile.ZipFile(path, "w") as new:
        for name, payload in members.items():
            if name != "history/time.npy":
                new.writestr(name, payload)
    with pytest.raises(CheckpointError, match="lacks the member 'history/time' it was saved"):
        _fit(x, "pyro", path, num_steps=4, resume=True)
