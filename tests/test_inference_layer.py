"""The shared loop: SVI on every guide, checkpoints and resume, save/load, arviz, bad input."""

import json
import subprocess
import sys

import numpy as np
import pytest

import inference
import zoo
from inference.checkpoint import CheckpointError


def test_registry():
    assert {"bayesian_gmm", "gmm"} <= set(zoo.list_models())
    with pytest.raises(ValueError, match="valid models are"):
        zoo.get_model("nope")
    with pytest.raises(ValueError, match="already registered"):
        zoo.register(zoo.get_model("gmm"))


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
@pytest.mark.parametrize("guide", ["enum", "gumbel"])
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
    from inference.svi import ALGORITHM

    spec = zoo.get_model("bayesian_gmm")
    cfg = spec.prepare({"x": gmm_data}, K=4)
    values = []
    for b in ("pyro", "numpyro"):
        back = inference.get_backend(b)
        st = ALGORITHM.init(
            Problem(spec, {"x": gmm_data}, cfg, back, back.resolve_device("cpu"), "float64", 0),
            guide="enum",
        )
        values.append(st.engine.elbo(num_particles=200, seed=0))
    assert abs(values[0] - values[1]) < 0.01 * abs(values[0])


@pytest.mark.parametrize(
    "backend,algorithm",
    [("pyro", "svi"), ("numpyro", "svi"), ("numpyro", "cavi"), ("numpyro", "svi-natural")],
)
def test_resume_reaches_the_same_result(tmp_path, gmm_data, backend, algorithm):
    kwargs = dict(
        algorithm=algorithm, backend=backend, K=4, num_steps=30, tol=0.0, progress=False, seed=3
    )
    if algorithm == "svi":
        # Stages of learning rate: the run resumes at step 15, in the middle of the second.
        kwargs.update(guide="gumbel", lr=[(10, 0.05), (10, 0.02), (1, 0.01)])
    if algorithm == "svi-natural":
        kwargs["batch_size"] = 64
    full = inference.fit("bayesian_gmm", {"x": gmm_data}, **kwargs)
    path = tmp_path / "run.zoo"

    def interrupt(step, state, info):
        if step == 17:
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
    with pytest.raises(CheckpointError, match="corrupt or truncated"):
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


def test_nan_guard_keeps_last_good_params(gmm_data, monkeypatch):
    from inference.algorithm import Info

    alg = inference.ALGORITHMS["cavi"]
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
        ({"x": np.zeros((5, 2), dtype=int)}, {}, "dtype of kind"),
        ({"y": np.zeros((5, 2))}, {}, "missing \\['x'\\]"),
        (None, {"K": 0}, "range \\[1, inf\\)"),
        (None, {"K": 1000}, "exceeds the number of data points"),
        (None, {"algorithm": "mcmc"}, "valid algorithms are"),
        (None, {"backend": "tf"}, "valid backends are"),
        (None, {"algorithm": "svi", "guide": "nope"}, "valid guides are"),
        (None, {"device": "cuda:7"}, "not available"),
        (None, {"algorithm": "em"}, "supports \\['cavi', 'svi', 'svi-natural'\\]"),
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
        [sys.executable, "-m", "zoo", "list", "--json"], capture_output=True, text=True, check=True
    )
    assert {m["name"] for m in json.loads(out.stdout)} >= {"bayesian_gmm", "gmm"}
    path = tmp_path / "x.npy"
    np.save(path, gmm_data)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "zoo",
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
            "zoo",
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
            "zoo",
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
