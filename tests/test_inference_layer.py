"""The shared loop: SVI on every guide, checkpoints and resume, save/load, arviz, bad input."""

import importlib
import json
import subprocess
import sys

import numpy as np
import pytest

import inference
import zoo
from inference.persistence.checkpoint import CheckpointError


def test_registry():
    assert {"bayesian_gmm", "gmm"} <= set(zoo.list_models())
    with pytest.raises(ValueError, match="valid models are"):
        zoo.get_model("nope")
    with pytest.raises(ValueError, match="already registered"):
        zoo.register(zoo.get_model("gmm"))


# NumPyro's enumerated fit also improves in the conformance suite's short run of the model.
@pytest.mark.parametrize("backend", ["pyro", pytest.param("numpyro", marks=pytest.mark.slow)])
@pytest.mark.parametrize("guide", ["enum", pytest.param("gumbel", marks=pytest.mark.slow)])
def test_svi_improves(gmm_data, backend, guide):
    res = inference.fit(
        "bayesian_gmm",
        {"x": gmm_data},
        algorithm="svi",
        backend=backend,
        guide=guide,
        K=4,
        num_steps=150,
        progress=False,
        seed=0,
    )
    h = res.history["objective"]
    assert np.all(np.isfinite(h))
    assert h[-30:].mean() > h[:30].mean()


@pytest.mark.parametrize(
    "guide,options",
    [("enum", {}), ("enum", {"batch_size": 120}), ("enum", {"dtype": "float32"})],
)
def test_pyro_jit_computes_what_the_uncompiled_fit_computes(gmm_data, guide, options):
    """A compiled Pyro fit draws the same stream and takes the same steps, bit for bit: with
    minibatches (sizes 120 and 60) and in float32. (The Gumbel-softmax guides, fitted with the
    mean-field ELBO, compile and fit, but their compiled draws are not yet the uncompiled ones.)"""
    fit = dict(algorithm="svi", backend="pyro", guide=guide, K=4, num_steps=25, progress=False)
    plain = inference.fit("bayesian_gmm", {"x": gmm_data}, **fit, **options)
    compiled = inference.fit("bayesian_gmm", {"x": gmm_data}, jit=True, **fit, **options)
    np.testing.assert_array_equal(compiled.history["objective"], plain.history["objective"])
    for name, value in plain.raw_params.items():
        np.testing.assert_array_equal(compiled.raw_params[name], value, err_msg=name)


@pytest.mark.parametrize("name", ["gmm", "bayesian_gmm", "bernoulli_mixture"])
def test_a_fit_from_another_fits_params_leaves_them_alone(gmm_data, name):
    # Adam updates parameters in place: a parameter sharing the init array would write into it.
    x = (gmm_data > 0).astype(float) if name == "bernoulli_mixture" else gmm_data
    fit = dict(algorithm="svi", backend="pyro", K=3, num_steps=3, progress=False)
    first = inference.fit(name, {"x": x}, **fit)
    before = {k: v.copy() for k, v in first.raw_params.items()}
    inference.fit(name, {"x": x}, init=first.raw_params, **fit)
    for k, v in before.items():
        np.testing.assert_array_equal(first.raw_params[k], v, err_msg=k)


def test_svi_enum_elbo_parity(gmm_data):
    """Same guide parameters, same model: both backends estimate the same enumerated ELBO."""
    from inference.algorithm import Problem

    svi = inference.get_algorithm("svi")
    spec = zoo.get_model("bayesian_gmm")
    cfg = spec.prepare({"x": gmm_data}, K=4)
    values = []
    for b in ("pyro", "numpyro"):
        back = inference.get_backend(b)
        st = svi.init(
            Problem(spec, {"x": gmm_data}, cfg, back, back.resolve_device("cpu"), "float64", 0),
            svi.options({"guide": "enum"}),
        )
        values.append(st.engine.elbo(st.params, num_particles=200, seed=0))
    assert abs(values[0] - values[1]) < 0.01 * abs(values[0])


@pytest.mark.parametrize(
    "backend,algorithm",
    [
        ("pyro", "svi"),
        pytest.param("numpyro", "svi", marks=pytest.mark.slow),
        ("numpyro", "cavi"),
        ("numpyro", "svi-natural"),
    ],
)
def test_resume_reaches_the_same_result(tmp_path, gmm_data, backend, algorithm):
    kwargs = dict(
        algorithm=algorithm, backend=backend, K=4, num_steps=30, tol=0.0, progress=False, seed=3
    )
    if algorithm == "svi":
        # Stages of learning rate: the run resumes at step 25, in the middle of the last, whose
        # iterates it averages: Adam's moments and the average are both restored.
        kwargs.update(guide="gumbel", lr=[(10, 0.05), (10, 0.02), (1, 0.01)])
    if algorithm == "svi-natural":
        kwargs["batch_size"] = 64
    full = inference.fit("bayesian_gmm", {"x": gmm_data}, **kwargs)
    path = tmp_path / "run.zoo"

    def interrupt(step, state, info):
        if step == 27:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        inference.fit(
            "bayesian_gmm",
            {"x": gmm_data},
            checkpoint=path,
            checkpoint_every=5,
            callback=interrupt,
            **kwargs,
        )
    if algorithm == "svi":  # the Gumbel temperature is annealed over num_steps: it cannot grow
        with pytest.raises(CheckpointError, match="its options"):
            inference.fit(
                "bayesian_gmm",
                {"x": gmm_data},
                checkpoint=path,
                resume=True,
                **{**kwargs, "num_steps": 40},
            )
    resumed = inference.fit("bayesian_gmm", {"x": gmm_data}, checkpoint=path, resume=True, **kwargs)
    np.testing.assert_array_equal(resumed.history["objective"], full.history["objective"])
    for k in full.raw_params:
        np.testing.assert_array_equal(resumed.raw_params[k], full.raw_params[k])


def test_checkpoint_errors(tmp_path, gmm_data):
    bad = tmp_path / "bad.zoo"
    bad.write_bytes(b"not a zip")
    with pytest.raises(CheckpointError, match="not a zoo file"):
        inference.fit(
            "bayesian_gmm",
            {"x": gmm_data},
            algorithm="cavi",
            K=3,
            checkpoint=bad,
            resume=True,
            progress=False,
        )
    path = tmp_path / "gmm.zoo"
    inference.fit("gmm", {"x": gmm_data}, algorithm="em", K=3, checkpoint=path, progress=False)
    with pytest.raises(CheckpointError, match="another run"):
        inference.fit(
            "bayesian_gmm",
            {"x": gmm_data},
            algorithm="cavi",
            K=3,
            checkpoint=path,
            resume=True,
            progress=False,
        )


def _cavi(gmm_data, **kwargs):
    options = dict(algorithm="cavi", backend="numpyro", K=3, progress=False, seed=0)
    return inference.fit("bayesian_gmm", {"x": gmm_data}, **{**options, **kwargs})


def test_resuming_a_finished_run_gives_it_back(tmp_path, gmm_data):
    for tol, name in ((0.0, "steps"), (1e-3, "converged")):
        path = tmp_path / f"{name}.zoo"
        first = _cavi(gmm_data, num_steps=40, tol=tol, checkpoint=path)
        assert first.converged == (name == "converged") and len(first.history["step"]) > 1
        for _ in range(2):  # run twice: nothing is added, nothing breaks
            again = _cavi(gmm_data, num_steps=40, tol=tol, checkpoint=path, resume=True)
            assert again.converged == first.converged
            np.testing.assert_array_equal(again.history["step"], first.history["step"])
            for k, v in first.raw_params.items():
                np.testing.assert_array_equal(again.raw_params[k], v)


def test_resume_refuses_another_seed_and_names_what_differs(tmp_path, gmm_data):
    path = tmp_path / "run.zoo"
    _cavi(gmm_data, num_steps=5, tol=0.0, checkpoint=path, seed=1)
    with pytest.raises(
        CheckpointError, match="its seed does not match this run's: 1 there, 2 here"
    ):
        _cavi(gmm_data, num_steps=10, tol=0.0, checkpoint=path, resume=True, seed=2)
    with pytest.raises(CheckpointError, match="init: 'kmeans' there, 'random' here"):
        _cavi(gmm_data, num_steps=10, tol=0.0, checkpoint=path, resume=True, seed=1, init="random")
    with pytest.raises(ValueError, match="resume=True needs checkpoint"):
        _cavi(gmm_data, num_steps=10, resume=True)


def test_resume_refuses_another_validation_set_up(tmp_path, gmm_data):
    kwargs = dict(algorithm="svi", backend="numpyro", K=3, num_steps=4, progress=False)
    kwargs.update(checkpoint=tmp_path / "run.zoo", validate_every=2)
    inference.fit("gmm", {"x": gmm_data}, validation_data={"x": gmm_data[:50]}, **kwargs)
    for other in ({"validation_data": {"x": gmm_data[50:100]}}, {"validate_every": 1}, {}):
        options = {**kwargs, "validation_data": {"x": gmm_data[:50]}, **other}
        if not other:  # no validation at all
            del options["validation_data"], options["validate_every"]
        with pytest.raises(CheckpointError, match="its validation_setup does not match"):
            inference.fit("gmm", {"x": gmm_data}, resume=True, **options)


# NumPyro's case compiles minibatched SVI for 20 s; the options are the layer's to read.
@pytest.mark.parametrize("backend", ["pyro", pytest.param("numpyro", marks=pytest.mark.slow)])
def test_numpy_scalar_options_checkpoint_and_save(tmp_path, gmm_data, backend):
    kwargs = dict(algorithm="svi", backend=backend, K=3, num_steps=4, progress=False)
    res = inference.fit(
        "bayesian_gmm",
        {"x": gmm_data},
        batch_size=np.int64(50),
        num_particles=np.int64(1),
        checkpoint=tmp_path / "run.zoo",
        checkpoint_every=2,
        **kwargs,
    )
    res.save(tmp_path / "fit.zoo")
    assert inference.load(tmp_path / "fit.zoo").options["batch_size"] == 50


@pytest.fixture
def ctrl_c_raises():
    """Ctrl-C raises KeyboardInterrupt, as in a Python started from a terminal (a process
    started in the background may inherit SIGINT ignored, and then the loop leaves it so)."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    yield
    signal.signal(signal.SIGINT, previous)


@pytest.mark.usefixtures("ctrl_c_raises")
def test_an_interrupt_inside_a_step_waits_for_the_step(tmp_path, gmm_data, monkeypatch):
    """Ctrl-C half way through a step (here: between the update and the step count) is raised
    after the step, so the checkpoint holds a whole step and the resumed run matches."""
    import os
    import signal

    ALGORITHM = inference.get_algorithm("svi")
    kwargs = dict(algorithm="svi", backend="pyro", K=3, num_steps=8, tol=0.0, progress=False)
    full = inference.fit("bayesian_gmm", {"x": gmm_data}, **kwargs)
    step, calls = ALGORITHM.step, []

    def step_with_ctrl_c(state):
        out = step(state)
        calls.append(1)
        if len(calls) == 4:
            os.kill(os.getpid(), signal.SIGINT)
        return out

    path = tmp_path / "run.zoo"
    with monkeypatch.context() as patch:
        patch.setattr(ALGORITHM, "step", step_with_ctrl_c)
        with pytest.raises(KeyboardInterrupt):
            inference.fit("bayesian_gmm", {"x": gmm_data}, checkpoint=path, **kwargs)
    assert inference.persistence.checkpoint.load(path)[0]["step"] == 4
    resumed = inference.fit("bayesian_gmm", {"x": gmm_data}, checkpoint=path, resume=True, **kwargs)
    for k, v in full.raw_params.items():
        np.testing.assert_array_equal(resumed.raw_params[k], v)


def _ctrl_c_in_step(monkeypatch, alg, at_call: int, times: int = 1):
    """Patch ``alg.step`` to send itself ``times`` Ctrl-Cs after its ``at_call``-th update;
    returns the list of calls that ran to their end."""
    import os
    import signal

    step, finished = alg.step, []

    def step_with_ctrl_c(state):
        out = step(state)
        if len(finished) + 1 == at_call:
            for _ in range(times):
                os.kill(os.getpid(), signal.SIGINT)
        finished.append(1)
        return out

    monkeypatch.setattr(alg, "step", step_with_ctrl_c)
    return finished


@pytest.mark.usefixtures("ctrl_c_raises")
def test_an_interrupt_on_the_converging_step_keeps_its_bookkeeping(tmp_path, gmm_data, monkeypatch):
    ALGORITHM = inference.get_algorithm("cavi")
    kwargs = dict(algorithm="cavi", backend="numpyro", K=3, num_steps=50, tol=1e-3, progress=False)
    full = inference.fit("bayesian_gmm", {"x": gmm_data}, **kwargs)
    assert full.converged
    path = tmp_path / "run.zoo"
    with monkeypatch.context() as patch:
        _ctrl_c_in_step(patch, ALGORITHM, at_call=full.num_steps)
        with pytest.raises(KeyboardInterrupt):
            inference.fit("bayesian_gmm", {"x": gmm_data}, checkpoint=path, **kwargs)
    resumed = inference.fit("bayesian_gmm", {"x": gmm_data}, checkpoint=path, resume=True, **kwargs)
    assert resumed.converged and resumed.num_steps == full.num_steps
    # A tighter tolerance on resume goes on from where the run stopped.
    tighter = inference.fit(
        "bayesian_gmm", {"x": gmm_data}, checkpoint=path, resume=True, **{**kwargs, "tol": 1e-9}
    )
    assert tighter.num_steps > full.num_steps


@pytest.mark.usefixtures("ctrl_c_raises")
def test_a_second_interrupt_stops_the_step_at_once(gmm_data, monkeypatch):
    ALGORITHM = inference.get_algorithm("cavi")
    finished = _ctrl_c_in_step(monkeypatch, ALGORITHM, at_call=2, times=2)
    with pytest.raises(KeyboardInterrupt):
        inference.fit("bayesian_gmm", {"x": gmm_data}, "cavi", K=3, num_steps=5, tol=0.0)
    assert len(finished) == 1  # the second call raised before it ended


@pytest.mark.parametrize("name,algorithm", [("gmm", "em"), ("bayesian_gmm", "cavi")])
def test_new_data_of_another_width_are_refused(gmm_data, name, algorithm):
    res = inference.fit(name, {"x": gmm_data}, algorithm, "numpyro", K=3, num_steps=3)
    for x in (gmm_data[:3, :1], np.hstack([gmm_data[:3], gmm_data[:3]])):
        with pytest.raises(ValueError, match=r"must have 2 columns, as the fitted model"):
            res.log_marginal_likelihood(x, num_samples=5)
        with pytest.raises(ValueError, match=r"must have 2 columns"):
            res.to_arviz(num_samples=5, data=x)
    with pytest.raises(ValueError, match=r"must have 2 columns"):
        inference.fit(
            "gmm", {"x": gmm_data}, "svi", K=3, num_steps=3, validation_data={"x": gmm_data[:, :1]}
        )


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_an_enumerated_guide_is_scored_with_its_latents_summed_out(gmm_data, backend):
    """The maximum-likelihood mixture's guide is empty and SVI sums ``z`` out, so its ELBO
    of a point is exactly ``log p(x_n)``: ``elbo()`` and the validation history score that,
    not ``z`` drawn from the model (about 7 nats per point lower)."""
    held_out = gmm_data[:50]
    res = inference.fit(
        "gmm", {"x": gmm_data[50:]}, "svi", backend, K=3, num_steps=4, tol=0, progress=False,
        validation_data={"x": held_out}, validate_every=2,
    )  # fmt: skip
    exact = res.log_marginal_likelihood(held_out)
    np.testing.assert_allclose(res.elbo(held_out, num_samples=3), exact, rtol=1e-10)
    last_validation = res.history["validation"][-1]
    np.testing.assert_allclose(last_validation, exact.mean(), rtol=1e-10)


def test_validation_that_would_never_run_warns(gmm_data):
    with pytest.warns(UserWarning, match="will never be scored"):
        inference.fit(
            "gmm", {"x": gmm_data}, "svi", K=3, num_steps=2, validation_data={"x": gmm_data},
            validate_every=5, progress=False,
        )  # fmt: skip


@pytest.mark.slow
def test_compare_gives_guide_options_to_the_guides_that_read_them(gmm_data):
    table = inference.compare(
        "bayesian_gmm", {"x": gmm_data}, ["svi"], ["numpyro"], K=3, num_steps=2,
        temperature=(2.0, 0.5), elbo="meanfield",
    )  # fmt: skip
    rows = {r["guide"]: r for r in table.rows}
    assert set(rows) == {"enum", "gumbel", "gumbel-st"}
    options = {res.guide: res.options for res in table.results}
    assert options["gumbel"]["temperature"] == [2.0, 0.5]
    assert options["gumbel"]["elbo"] == "meanfield" and options["enum"]["elbo"] == "trace"


def test_validation_data_a_model_cannot_score_are_refused_before_training(gmm_data):
    with pytest.raises(ValueError, match="validation_data cannot be scored"):
        inference.fit(
            "bayesian_gmm",
            {"x": gmm_data},
            "svi",
            K=3,
            num_steps=3,
            validation_data={"x": gmm_data},
        )


@pytest.mark.parametrize(
    "bad,message",
    [
        ({"k": 3}, r"unknown option\(s\) \['k'\]"),
        ({"num_step": 2}, r"unknown option\(s\) \['num_step'\]"),
        ({"checkpoint": "run.zoo"}, r"unknown option\(s\) \['checkpoint'\]"),
        ({"backends": "pyro"}, "backends must be a non-empty list"),
        ({"backends": ["pyro", "numpy"]}, "Unknown backend 'numpy'"),
        ({"seeds": ()}, "seeds must be a non-empty list"),
        ({"num_steps": {"cavii": 2}}, r"num_steps names \['cavii'\]"),
    ],
)
def test_compare_refuses_what_it_would_ignore(gmm_data, bad, message):
    kwargs = {"algorithms": ["cavi"], "backends": ["numpyro"], "num_steps": 2, **bad}
    with pytest.raises((TypeError, ValueError), match=message):
        inference.compare("bayesian_gmm", {"x": gmm_data}, **kwargs)


@pytest.mark.parametrize(
    "algorithm,option",
    [
        ("cavi", {"lr": 0.1}),
        ("cavi", {"lr": 0.05}),  # SVI's default, given: still not CAVI's option
        ("cavi", {"num_particles": 5}),
        ("em", {"temperature": (2.0, 0.1)}),
        ("cavi", {"elbo": "iwae"}),
        ("svi", {"step_size": (5.0, 0.6)}),
        ("svi-natural", {"lr": 0.1}),
    ],
)
def test_an_option_the_algorithm_would_ignore_is_an_error(gmm_data, algorithm, option):
    name = "gmm" if algorithm == "em" else "bayesian_gmm"
    with pytest.raises(ValueError, match=f"{next(iter(option))}= is an option of algorithm"):
        inference.fit(name, {"x": gmm_data}, algorithm, K=3, num_steps=2, **option)
    with pytest.raises(ValueError, match="need validation_data"):
        inference.fit(name, {"x": gmm_data}, algorithm, K=3, num_steps=2, patience=3)


def test_one_component_on_numpyro_enumeration_is_a_clear_error(gmm_data):
    with pytest.raises(ValueError, match="K=1 with the enumerated guide 'enum'"):
        inference.fit("gmm", {"x": gmm_data}, "svi", "numpyro", K=1, num_steps=2, progress=False)
    one = inference.fit("gmm", {"x": gmm_data}, "svi", "pyro", K=1, num_steps=2, progress=False)
    assert np.isfinite(one.objective)


@pytest.mark.parametrize(
    "name,algorithm,options,message",
    [
        ("gmm", "em", {"x": np.zeros((0, 2)), "K": 1}, r"data\['x'\] is empty"),
        ("bayesian_gmm", "cavi", {"mean_prior": [np.nan, 0.0]}, "mean_prior must be finite"),
        ("bayesian_gmm", "cavi", {"degrees_of_freedom_prior": np.inf}, "must be finite and"),
        ("bayesian_gmm", "cavi", {"covariance_prior": np.diag([1.0, np.inf])}, "must be finite"),
        ("bayesian_gmm", "cavi", {"reg_covar": np.nan}, "reg_covar must be a float"),
        ("gmm", "em", {"reg_covar": np.inf}, "reg_covar must be a float"),
        ("gmm", "em", {"seed": -1}, r"seed must be an int in the range \[0, 2\*\*63\)"),
        ("gmm", "em", {"callback": 5}, "callback must be callable"),
        ("gmm", "svi", {"init": {"means": np.zeros((4, 2))}}, r"must have shape \(3, 2\)"),
        ("gmm", "svi", {"init": {"meanz": np.zeros((3, 2))}}, r"init names \['meanz'\]"),
        ("gmm", "svi", {"init": {"means": np.full((3, 2), np.nan)}}, "must hold finite"),
        ("gmm", "em", {"tol": "a"}, "tol must be a float"),
        ("gmm", "em", {"device": "cpu:abc"}, "Unknown device 'cpu:abc'"),
        (
            "gmm",
            "em",
            {"init": {"means": np.zeros((3, 2))}},
            "a dict of parameters starts algorithm='svi'",
        ),
        ("gmm", "svi", {"num_particles": 1.7}, "num_particles must be an int"),
        ("gmm", ["em"], {}, r"algorithm must be a name \(str\)"),
        (["gmm"], "em", {}, r"model must be a name \(str\) or a ModelSpec"),
        ("gmm", "em", {"checkpoint_every": "x", "checkpoint": "fit.ckpt"}, "checkpoint_every must"),
        ("bayesian_gmm", "svi", {"guide": "gumbel", "temperature": (1.0,)}, "must be a pair"),
        ("bayesian_gmm", "svi", {"guide": "enum", "temperature": (2.0, 0.1)}, "does not use it"),
        ("bayesian_gmm", "svi", {"guide": "enum", "elbo": "iwae"}, "sums the discrete latents"),
    ],
)
def test_bad_options_priors_and_inits_are_clear_errors(gmm_data, name, algorithm, options, message):
    options = {"x": gmm_data, "K": 3, **options}
    x = options.pop("x")
    with pytest.raises((ValueError, TypeError), match=message):
        inference.fit(name, {"x": x}, algorithm, num_steps=2, progress=False, **options)


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_a_singular_covariance_stops_em_the_same_way_on_both_backends(gmm_data, backend):
    constant_column = np.hstack([gmm_data, np.ones((len(gmm_data), 1))])
    with pytest.raises(inference.NonFiniteObjectiveError, match="raise reg_covar") as info:
        inference.fit(
            "gmm", {"x": constant_column}, "em", backend, K=3, reg_covar=0.0, progress=False
        )
    assert info.value.result is not None


def test_half_precision_data_start_from_kmeans(gmm_data):
    res = inference.fit("gmm", {"x": gmm_data.astype(np.float16)}, "em", K=3, num_steps=2)
    assert np.isfinite(res.objective)
    with pytest.raises(ValueError, match="is not available"):
        res.log_marginal_likelihood(gmm_data[:3], num_samples=2, device="cuda:9")


def test_a_list_of_rows_is_not_taken_for_a_stream(gmm_data):
    with pytest.raises(TypeError, match="data must be a dict"):
        inference.fit("gmm", gmm_data.tolist(), "em", K=3)
    batches = [gmm_data[i : i + 50] for i in range(0, 300, 50)]  # a list of minibatches is
    res = inference.fit(
        "bayesian_gmm", batches, "svi-natural", K=3, num_data=300, num_steps=6, progress=False
    )
    assert res.num_steps == 6


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_a_singular_start_for_svi_is_a_clear_error(gmm_data, backend):
    constant_column = np.hstack([gmm_data, np.ones((len(gmm_data), 1))])
    with pytest.raises(ValueError, match="starting parameters .* are not finite"):
        inference.fit("gmm", {"x": constant_column}, "svi", backend, K=3, reg_covar=0.0)


def test_compare_of_one_component_on_numpyro_enumeration_is_a_clear_error(gmm_data, monkeypatch):
    """A relaxed guide's runs are scored by the enumerated guide, which NumPyro cannot run at
    K=1: refused before any fit, not after the fits."""

    def no_fit(*args, **kwargs):
        raise AssertionError("compare fitted a run before refusing the comparison")

    monkeypatch.setattr(importlib.import_module("inference.compare"), "fit", no_fit)
    with pytest.raises(ValueError, match="K=1 with the enumerated guide 'enum'.*'gumbel' runs"):
        inference.compare(
            "bayesian_gmm", {"x": gmm_data}, ["svi"], ["numpyro"], guides=["gumbel"], K=1,
            num_steps=2,
        )  # fmt: skip


def test_a_partial_init_starts_the_rest_from_kmeans(gmm_data):
    fit = dict(algorithm="svi", backend="numpyro", K=3, num_steps=2, progress=False, seed=0)
    kmeans = inference.fit("gmm", {"x": gmm_data}, **fit)
    means = kmeans.raw_params["means"] + 1.0
    partial = inference.fit("gmm", {"x": gmm_data}, init={"means": means}, **fit)
    assert np.isfinite(partial.objective)
    assert not np.allclose(partial.raw_params["means"], kmeans.raw_params["means"])
    em = inference.fit("gmm", {"x": gmm_data}, "em", K=3, num_steps=2)
    with pytest.raises(ValueError, match="a fit by 'em' has none"):
        em.elbo(gmm_data)
    with pytest.raises(ValueError, match="num_samples must be an int in the range"):
        em.sample_posterior(0)


def test_save_load_arviz_and_predictive(tmp_path, gmm_data):
    import arviz as az

    res = inference.fit(
        "bayesian_gmm", {"x": gmm_data}, algorithm="cavi", backend="pyro", K=6, progress=False
    )
    assert res.converged and int(res.params["n_effective_components"]) <= 6
    path = tmp_path / "fit.zoo"
    res.save(path)
    back = inference.load(path)
    for k in res.params:
        np.testing.assert_array_equal(back.params[k], res.params[k])
    np.testing.assert_array_equal(back.history["objective"], res.history["objective"])
    lml = res.log_marginal_likelihood(gmm_data[:50], num_samples=200)
    assert lml.shape == (50,) and np.all(np.isfinite(lml))
    np.testing.assert_allclose(back.log_marginal_likelihood(gmm_data[:50], num_samples=200), lml)
    idata = res.to_arviz(num_samples=100)
    assert any(name.startswith("means[") for name in az.summary(idata).index)
    assert idata.log_likelihood["x"].shape == (1, 100, len(gmm_data))
    # A loaded fit has no training data: its log-likelihood group needs them given.
    assert "log_likelihood" not in back.to_arviz(num_samples=10).groups()
    assert back.to_arviz(num_samples=10, data=gmm_data).log_likelihood["x"].shape[-1] == len(
        gmm_data
    )


def test_nan_guard_keeps_last_good_params(gmm_data, monkeypatch):
    from inference.algorithm import Info

    alg = inference.get_algorithm("cavi")
    real_step = alg.step

    def step_that_fails_at_4(state):
        new_state, info = real_step(state)
        return new_state, (Info(float("nan")) if new_state.step == 4 else info)

    kwargs = dict(algorithm="cavi", K=3, num_steps=10, tol=0.0, progress=False)
    three = inference.fit("bayesian_gmm", {"x": gmm_data}, **{**kwargs, "num_steps": 3})
    monkeypatch.setattr(alg, "step", step_that_fails_at_4)
    with pytest.raises(inference.NonFiniteObjectiveError, match="at step 4") as err:
        inference.fit("bayesian_gmm", {"x": gmm_data}, **kwargs)
    kept = err.value.result
    assert kept.num_steps == 3
    for k in three.raw_params:
        np.testing.assert_array_equal(kept.raw_params[k], three.raw_params[k])


@pytest.mark.parametrize(
    "data,options,message",
    [
        ({"x": np.array([[0.0, 1.0], [np.nan, 1.0], [1.0, np.inf]])}, {}, "rows?\\(s\\): 1, 2"),
        ({"x": np.zeros(5)}, {}, "must have 2 dimensions"),
        ({"x": np.zeros((5, 2), dtype=complex)}, {}, "must hold floating-point numbers"),
        ({"y": np.zeros((5, 2))}, {}, "missing \\['x'\\]"),
        (None, {"K": 0}, "range \\[1, inf\\)"),
        (None, {"K": 1000}, "exceeds the number of data points"),
        (None, {"algorithm": "mcmc"}, "valid algorithms are"),
        (None, {"backend": "tf"}, "valid backends are"),
        (None, {"algorithm": "svi", "guide": "nope"}, "valid guides are"),
        (None, {"device": "cuda:7"}, "not available"),
        (None, {"algorithm": "em"}, "supports \\['cavi', 'nuts', 'svi', 'svi-natural'\\]"),
        (None, {"weight_prior": "pitman_yor"}, "weight_prior must be one of"),
        (None, {"init": np.ones((3, 3))}, "shape \\(N, K\\)"),
        (None, {"num_steps": 0}, "num_steps must be"),
    ],
)
def test_bad_input_is_a_clear_error(gmm_data, data, options, message):
    data = {"x": gmm_data} if data is None else data
    kwargs = {"algorithm": "cavi", "K": 3, "progress": False, **options}
    with pytest.raises((ValueError, TypeError), match=message):
        inference.fit("bayesian_gmm", data, **kwargs)


def test_cli_list_fit_and_compare(tmp_path, gmm_data):
    out = subprocess.run(
        [sys.executable, "-m", "inference", "list", "--json"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert {m["name"] for m in json.loads(out.stdout)} >= {"bayesian_gmm", "gmm"}
    path = tmp_path / "x.npy"
    np.save(path, gmm_data)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "inference",
            "fit",
            "bayesian_gmm",
            "--data",
            str(path),
            "--K",
            "4",
            "--json",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    fitted = json.loads(out.stdout)
    assert fitted["algorithm"] == "cavi" and np.isfinite(fitted["objective"])
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "inference",
            "fit",
            "bayesian_gmm",
            "--data",
            str(path),
            "--algorithm",
            "nope",
        ],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "valid algorithms" in bad.stderr
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "inference",
            "compare",
            "bayesian_gmm",
            "--data",
            str(path),
            "--K",
            "3",
            "--algorithms",
            "cavi,em",
            "--backends",
            "pyro",
            "--num-steps",
            "5",
            "--json",
            "--plot",
            str(tmp_path / "curves.png"),
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    rows = json.loads(out.stdout)
    assert [(r["model"], r["algorithm"]) for r in rows] == [("bayesian_gmm", "cavi"), ("gmm", "em")]
    assert (tmp_path / "curves.png").stat().st_size > 0


def test_each_plot_panel_spans_its_own_curves():
    """EM's log-likelihoods (within 0.1 nats/point of each other) once shared a range 2 nats
    deep and lay flat along the top edge."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 200)
    table = inference.compare(
        "gmm", data, algorithms=["em"], backends=["pyro"], K=3, progress=False
    )
    fig, ax = plt.subplots()
    table._plot_model(ax, "gmm")
    low, high = ax.get_ylim()
    y = table.results[0].history["objective"] / 200
    plt.close(fig)
    assert low <= y.min() and high >= y.max() and high - low < 2 * (y.max() - y.min()) + 0.02


def test_time_to_target_counts_a_run_that_reached_it_on_the_tables_objective():
    """A run's time to target is when its history reached the target, if its final objective
    as the table scores it did; a relaxed guide's history (the relaxed ELBO) tells no time; a
    run whose history never reached it, but whose returned parameters did, reached it by its
    end."""
    from types import SimpleNamespace

    from inference.compare import _add_time_to_target

    spec = zoo.get_model("bayesian_gmm")
    ramp = np.linspace(-5.0, -3.0, 11) * 10  # per point -5.0 ... -3.0, ten points
    runs = [  # guide, final objective per point, history per point
        ("enum", -3.0, ramp),  # the best: reaches -3.01 at its last step
        ("gumbel", -3.5, ramp),  # its relaxed history crosses the line; its objective does not
        ("gumbel", -3.005, ramp),  # within the target, but its history is the relaxed ELBO
        ("enum", -3.005, ramp - 1.0),  # its history (iterates) never did; its parameters did
        ("enum", -3.2, ramp),  # history crossed (noise), its objective did not
    ]
    rows, results = [], []
    for guide, final, history in runs:
        rows.append({"model": "bayesian_gmm", "guide": guide, "backend": "numpyro",
                     "objective_per_point": final})  # fmt: skip
        time = np.arange(len(history), dtype=float)
        # (a deterministic algorithm's name: the history is not smoothed)
        results.append(SimpleNamespace(spec=spec, algorithm="cavi", num_data=10,
                                       history={"objective": history, "time": time}))  # fmt: skip
    _add_time_to_target(rows, results)
    times = [row["time_to_target_s"] for row in rows]
    assert times[0] == 10.0 and times[3] == 10.0
    assert all(np.isnan(t) for t in (times[1], times[2], times[4]))


def test_integer_data_are_read_as_numbers():
    """Observations given as integers fit as the same numbers given as floats (scikit-learn
    reads them so); the dtype may be named by NumPy's or torch's type."""
    import torch

    x = np.round(zoo.get_model("gmm").make_data(np.random.default_rng(0), 80)["x"] * 10)
    fit = dict(K=2, num_steps=5, tol=0, progress=False, seed=0)
    as_ints = inference.fit("gmm", {"x": x.astype(np.int64)}, "em", "numpyro", **fit)
    as_floats = inference.fit("gmm", {"x": x}, "em", "numpyro", **fit)
    np.testing.assert_array_equal(as_ints.history["objective"], as_floats.history["objective"])
    for dtype in (np.float32, torch.float32):
        assert (
            inference.fit("gmm", {"x": x}, "em", "pyro", dtype=dtype, **fit).options["dtype"]
            == "float32"
        )


def test_held_out_data_that_do_not_fit_the_model_are_named_as_given(gmm_data, monkeypatch):
    """Validation and test data of another width are refused in their own names, test data
    before any run of a comparison; scoring data with NaN says to drop them, not to refit."""
    narrow = {"x": gmm_data[:, :1]}
    with pytest.raises(ValueError, match=r"^validation_data\['x'\] must have 2 columns"):
        inference.fit("bayesian_gmm", {"x": gmm_data}, "svi", "numpyro", K=2, num_steps=2,
                      progress=False, validation_data=narrow)  # fmt: skip
    monkeypatch.setattr(importlib.import_module("inference.compare"), "fit", None)  # no run
    with pytest.raises(ValueError, match=r"^test_data\['x'\] must have 2 columns"):
        inference.compare("bayesian_gmm", {"x": gmm_data}, ["cavi"], ["numpyro"], K=2,
                          test_data=narrow)  # fmt: skip
    res = inference.fit("gmm", {"x": gmm_data}, "em", "numpyro", K=2, num_steps=2, tol=0,
                        progress=False)  # fmt: skip
    with_nan = gmm_data.copy()
    with_nan[1, 0] = np.nan
    with pytest.raises(
        ValueError, match=r"NaN or inf in 1 row\(s\): 1\. Drop or impute them first"
    ):
        res.log_marginal_likelihood(with_nan)


def test_a_result_and_a_table_show_themselves_briefly(gmm_data):
    """repr of a fit is one line naming the run and how it ended, not its arrays; a notebook
    shows a comparison as its markdown table."""
    res = inference.fit("gmm", {"x": gmm_data}, "em", "numpyro", K=2, progress=False)
    text = repr(res)
    assert text.startswith("FitResult(model='gmm', algorithm='em', backend='numpyro', ")
    assert f"num_steps={res.num_steps}, converged=True" in text and len(text) < 200
    from inference.compare import Comparison

    table = Comparison(rows=[{"model": "gmm", "algorithm": "em"}], results=[None])
    assert table._repr_markdown_() == table.to_markdown()


def test_a_comparisons_warnings_name_the_run_and_the_callers_line(gmm_data):
    """A run's warning (too few steps to converge) is said naming the run, and points at the
    line that called compare, not at the comparison's own code."""
    with pytest.warns(inference.ConvergenceWarning) as said:
        inference.compare("bayesian_gmm", {"x": gmm_data}, ["cavi"], ["numpyro"], K=2,
                          num_steps=2)  # fmt: skip
    (warning,) = [w for w in said if w.category is inference.ConvergenceWarning]
    assert str(warning.message).startswith("cavi numpyro seed 0 (1/1): cavi on 'bayesian_gmm'")
    assert warning.filename == __file__
