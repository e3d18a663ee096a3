"""Extending the zoo from outside: the example plugin of ``examples/extend`` is pip-installed,
found through its ``zoo.models`` entry point, passes ``inference.tools.conformance.check_model``, and every
algorithm it supports lands on its closed-form posterior on both backends. Then the errors an
extender meets: a missing backend, twins that disagree, a guide that misses a latent site, a
taken name, a broken plugin."""

import dataclasses
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import types
import warnings
from pathlib import Path

import numpy as np
import pytest
from scipy.stats import multivariate_normal

import inference
import zoo
from inference.tools import conformance
from zoo import ModelSpecError

ROOT = Path(__file__).resolve().parents[1]
PLUGIN_SOURCE = ROOT / "examples" / "extend"
ALGORITHM_SOURCE = ROOT / "examples" / "extend_algorithm"
MODEL = "bayesian_linear_regression"


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny tensors


def _pip_install(source_dir: Path, tmp: Path) -> Path:
    """``pip install`` an example package, as its users do, into a folder of its own, and put
    that folder on ``sys.path``.

    With ``--target`` the install lands beside the test environment instead of inside it, so
    nothing is left behind and other processes sharing the environment never see it; putting
    the folder on ``sys.path`` (and ``PYTHONPATH`` for subprocesses) makes it an installed
    distribution like any other, entry points included. The build runs offline in a copy of the
    sources (setuptools writes build/ and egg-info beside them).
    """
    source = tmp / "source"
    shutil.copytree(
        source_dir, source, ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info")
    )
    target = tmp / "site-packages"
    install = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--no-deps", "--no-build-isolation"]
        + ["--no-index", "--quiet", "--target", str(target), str(source)],
        capture_output=True,
        text=True,
    )
    assert install.returncode == 0, f"pip install failed:\n{install.stdout}\n{install.stderr}"
    sys.path.insert(0, str(target))
    importlib.invalidate_caches()
    return target


@pytest.fixture(scope="module")
def plugin_path(tmp_path_factory):
    """The example model plugin, installed (``_pip_install``)."""
    target = _pip_install(PLUGIN_SOURCE, tmp_path_factory.mktemp("plugin"))
    yield target
    sys.path.remove(str(target))
    for name in [m for m in sys.modules if m.split(".")[0] == "zoo_linear_regression"]:
        del sys.modules[name]
    if MODEL in zoo.list_models():
        zoo.unregister(MODEL)


@pytest.fixture(scope="module")
def plugin(plugin_path):
    """The plugin's spec, found by the zoo through its entry point (nothing imported by hand)."""
    assert MODEL in zoo.load_plugins() + zoo.list_models()
    return zoo.get_model(MODEL)


@pytest.fixture(scope="module")
def regression_data(plugin):
    return plugin.make_data(np.random.default_rng(1), 100)


def test_the_plugin_is_found_through_its_entry_point(plugin, plugin_path):
    assert MODEL in zoo.list_models()
    assert zoo.model_source(MODEL).startswith("plugin zoo-linear-regression 0.1.0")
    module = sys.modules["zoo_linear_regression"]
    assert Path(module.__file__).is_relative_to(plugin_path)  # the installed copy
    # Every algorithm x backend it supports, which the fits below go through.
    assert conformance.supported_runs(plugin) == [
        ("cavi", "pyro"),
        ("cavi", "numpyro"),
        ("nuts", "pyro"),
        ("nuts", "numpyro"),
        ("svi", "pyro"),
        ("svi", "numpyro"),
        ("svi-natural", "pyro"),
        ("svi-natural", "numpyro"),
    ]


def test_check_model_passes_on_the_plugin(plugin):
    report = conformance.check_model(MODEL)
    assert report.passed, str(report)
    assert [r.name for r in report.results] == [
        "registration",
        "twins_and_log_joint",
        "twin_guides",
        "cavi/pyro",
        "cavi/numpyro",
        "nuts/pyro",
        "nuts/numpyro",
        "svi/pyro",
        "svi/numpyro",
        "svi-natural/pyro",
        "svi-natural/numpyro",
    ]
    assert "11 passed, 0 failed" in str(report)


def _kl_gaussians(mean_q, cov_q, mean_p, cov_p) -> float:
    """KL(N(mean_q, cov_q) || N(mean_p, cov_p)), nats."""
    precision_p = np.linalg.inv(cov_p)
    diff = mean_p - mean_q
    return 0.5 * (
        np.trace(precision_p @ cov_q)
        + diff @ precision_p @ diff
        - len(mean_q)
        + np.linalg.slogdet(cov_p)[1]
        - np.linalg.slogdet(cov_q)[1]
    )


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
@pytest.mark.parametrize("algorithm,guide", [("cavi", None), ("svi", "full_rank")])
def test_every_algorithm_recovers_the_closed_form_posterior(
    plugin, regression_data, algorithm, guide, backend
):
    from zoo_linear_regression.posterior import exact_posterior

    data = regression_data
    options = {"prior_precision": 2.0, "noise_scale": 1.0}
    mean, cov = exact_posterior(data, plugin.prepare(data, **options))
    if algorithm == "cavi":
        res = inference.fit(MODEL, data, "cavi", backend, progress=False, **options)
        np.testing.assert_allclose(res.params["coef_mean"], mean, rtol=1e-10)
        np.testing.assert_allclose(res.params["coef_covariance"], cov, rtol=1e-10)
        # At the exact posterior the ELBO is the log evidence, log N(y | 0, s^2 I + X X^T / a).
        x, y = data["x"], data["y"]
        marginal_cov = np.eye(len(y)) + x @ x.T / options["prior_precision"]
        log_evidence = multivariate_normal(np.zeros(len(y)), marginal_cov).logpdf(y)
        assert res.objective == pytest.approx(log_evidence, rel=1e-10)
        assert res.history["objective"][0] < log_evidence  # the first step starts at the prior
        assert res.converged and res.num_steps <= 3
        return
    # SVI with a Gaussian guide: the exact posterior is in its family, so it must come close;
    # what is left is the noise of single-sample gradients at a constant learning rate.
    res = inference.fit(
        MODEL, data, "svi", backend, guide=guide, lr=0.01, num_steps=1000, progress=False, **options
    )
    kl = _kl_gaussians(res.params["coef_mean"], res.params["coef_covariance"], mean, cov)
    assert kl < 0.3, (kl, res.params, mean, cov)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_svi_at_its_defaults_reaches_the_exact_posterior(plugin, regression_data, backend):
    """No learning rate, no step count, no tolerance: SVI's defaults (a decaying learning rate
    and a stopping rule on the smoothed ELBO) bring the Gaussian guide within 0.2 posterior sd
    of the exact posterior's mean, and its sds within 20%, and say the run converged (the run
    takes about 10,000 steps)."""
    from zoo_linear_regression.posterior import exact_posterior

    data = regression_data
    mean, cov = exact_posterior(data, plugin.prepare(data))
    with warnings.catch_warnings():
        warnings.simplefilter("error", inference.ConvergenceWarning)
        res = inference.fit(MODEL, data, "svi", backend, guide="full_rank", progress=False)
    sd = np.sqrt(np.diag(cov))
    assert res.converged
    assert np.max(np.abs(res.params["coef_mean"] - mean) / sd) < 0.2, (res.params, mean, sd)
    fitted_sd = np.sqrt(np.diag(res.params["coef_covariance"]))
    np.testing.assert_allclose(fitted_sd, sd, rtol=0.2)


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_natural_gradient_svi_reaches_the_exact_posterior(plugin, regression_data, backend):
    """Natural-gradient steps on the model's conjugate updates: with the whole data and
    rho = 1 the first step lands on the exact posterior; on minibatches with decaying steps
    the fit approaches it."""
    from zoo_linear_regression.posterior import exact_posterior

    mean, cov = exact_posterior(regression_data, plugin.prepare(regression_data))
    one = inference.fit(
        MODEL, regression_data, "svi-natural", backend, step_size=(0.0, 0.0), num_steps=1,
        progress=False,
    )  # fmt: skip
    np.testing.assert_allclose(one.params["coef_mean"], mean, rtol=1e-10)
    np.testing.assert_allclose(one.params["coef_covariance"], cov, rtol=1e-10)
    cavi = inference.fit(MODEL, regression_data, "cavi", backend, progress=False)
    assert abs(one.objective - cavi.objective) < 1e-8 * abs(cavi.objective)
    batches = inference.fit(
        MODEL, regression_data, "svi-natural", backend, batch_size=20, step_size=(1.0, 0.6),
        num_steps=400, seed=1, progress=False,
    )  # fmt: skip
    sd = np.sqrt(np.diag(cov))
    assert np.all(np.abs(batches.params["coef_mean"] - mean) < 0.5 * sd)
    np.testing.assert_allclose(batches.params["coef_sd"], sd, rtol=0.1)


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_mean_field_svi_gets_the_means_and_the_conditional_variances(
    plugin, regression_data, backend
):
    """Mean-field VI of a Gaussian recovers its mean exactly, and variances 1 / precision_ii
    (smaller than the marginal ones when coefficients are correlated)."""
    from zoo_linear_regression.posterior import exact_posterior

    data = regression_data
    mean, cov = exact_posterior(data, plugin.prepare(data))
    res = inference.fit(
        MODEL, data, "svi", backend, guide="mean_field", lr=0.01, num_steps=800, progress=False
    )
    sd = np.sqrt(np.diag(cov))
    mean_field_sd = 1 / np.sqrt(np.diag(np.linalg.inv(cov)))
    assert np.all(np.abs(res.params["coef_mean"] - mean) < 0.6 * sd)
    np.testing.assert_allclose(res.params["coef_sd"], mean_field_sd, rtol=0.3)


def test_compare_save_and_load_run_the_plugin_like_a_built_in(plugin, regression_data, tmp_path):
    with pytest.warns(UserWarning, match="'em' does not fit model .*its runs are left out"):
        table = inference.compare(
            MODEL,
            regression_data,
            algorithms=["cavi", "svi", "em"],  # it has no EM: left out, as for any model
            backends=["pyro"],  # the other backend's fits are above; here the table is the point
            num_steps={"cavi": 10, "svi": 100},
            num_samples=100,
        )
    rows = {(r["algorithm"], r["guide"]): r for r in table.rows}
    assert set(rows) == {("cavi", None), ("svi", "full_rank"), ("svi", "mean_field")}
    # Named none: those that fit it, without a word of those that do not (EM, restarts).
    from inference.compare import default_algorithms

    assert default_algorithms(plugin) == (["cavi", "svi", "svi-natural"], ["nuts"])
    assert all(np.isfinite(r["heldout_log_pred_per_point"]) for r in table.rows)
    # CAVI is exact here: no guide's ELBO beats it.
    best_svi = max(rows[k]["objective_per_point"] for k in rows if k[0] == "svi")
    assert rows["cavi", None]["objective_per_point"] >= best_svi - 0.01
    res = table.results[0]
    res.save(tmp_path / "fit.zoo")
    loaded = inference.load(tmp_path / "fit.zoo")
    np.testing.assert_array_equal(loaded.params["coef_mean"], res.params["coef_mean"])
    assert loaded.config == res.config


def test_the_cli_lists_and_fits_the_plugin(plugin, plugin_path, regression_data, tmp_path, capsys):
    # A fresh process finds the installed plugin by its entry point alone.
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(plugin_path), str(ROOT)])}
    out = subprocess.run(
        [sys.executable, "-m", "inference", "list", "--json"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert out.returncode == 0, out.stderr
    listed = {m["name"]: m for m in json.loads(out.stdout)}
    assert {"bayesian_gmm", MODEL} <= set(listed)
    assert listed[MODEL]["source"].startswith("plugin zoo-linear-regression")
    assert listed[MODEL]["algorithms"] == ["cavi", "nuts", "svi", "svi-natural"]

    # `zoo fit ...`, run in this process (inference.tools.cli.main) to spare a second start-up.
    from zoo_linear_regression.posterior import exact_posterior

    from inference.tools.cli import main

    path = tmp_path / "regression.npz"
    np.savez(path, **regression_data)
    args = ["fit", MODEL, "--data", str(path), "--algorithm", "cavi", "--backend", "pyro"]
    assert main([*args, "--option", "prior_precision=2.0", "--json"]) == 0
    fitted = json.loads(capsys.readouterr().out)
    mean, _ = exact_posterior(regression_data, plugin.prepare(regression_data, prior_precision=2))
    np.testing.assert_allclose(fitted["params"]["coef_mean"], mean, rtol=1e-10)
    assert main([*args, "--K", "3"]) == 2  # a mixture's option: a clear error, not a traceback
    assert "--K is not an option of model 'bayesian_linear_regression'" in capsys.readouterr().err


def test_register_at_run_time_in_a_script(plugin, regression_data):
    spec = dataclasses.replace(plugin, name="my_regression")
    try:
        assert zoo.register(spec) is spec  # checked, traced: about a second
        assert "my_regression" in zoo.list_models()
        assert zoo.model_source("my_regression") == "zoo.register()"
        res = inference.fit("my_regression", regression_data, "cavi", "pyro", progress=False)
        assert res.model == "my_regression" and res.converged
    finally:
        zoo.unregister("my_regression")
    assert "my_regression" not in zoo.list_models()


# --- The errors an extender meets ---------------------------------------------------------


def _fake_twin(monkeypatch, name: str, **functions) -> str:
    """A twin module that exists only in memory, importable by ``name``."""
    module = types.ModuleType(name)
    module.__dict__.update(functions)
    monkeypatch.setitem(sys.modules, name, module)
    return name


def _numpyro_model(coef_site="coef", plate="data", precision_as_scale=False):
    """The plugin's NumPyro model with one of the slips an extender makes."""
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    def model(data, config, temperature=None, init=None):
        x, y = data["x"], data["y"]
        scale = config.prior_precision if precision_as_scale else config.prior_precision**-0.5
        coef = numpyro.sample(coef_site, dist.Normal(jnp.zeros(x.shape[-1]), scale).to_event(1))
        with numpyro.plate(plate, x.shape[0]):
            numpyro.sample("y", dist.Normal((x * coef).sum(-1), config.noise_scale), obs=y)

    return model


def _with_numpyro_twin(monkeypatch, plugin, name, **slip):
    real = plugin.twin("numpyro")
    path = _fake_twin(
        monkeypatch, f"fake_{name}_twin", model=_numpyro_model(**slip), make_guide=real.make_guide
    )
    return dataclasses.replace(plugin, name=name, backends={**plugin.backends, "numpyro": path})


def test_a_spec_missing_a_backend_is_refused(plugin):
    spec = dataclasses.replace(plugin, name="pyro_only", backends={"pyro": plugin.backends["pyro"]})
    with pytest.raises(ModelSpecError, match=r"no twin for backend\(s\) \['numpyro'\]") as err:
        zoo.register(spec)
    assert "Add 'numpyro' to backends" in str(err.value)
    assert "pyro_only" not in zoo.list_models()


@pytest.mark.parametrize(
    "slip,message",
    [
        ({"coef_site": "weights"}, r"only in the Pyro twin: \['coef'\]"),
        ({"plate": "rows"}, r"'y' is in plate\(s\) \['data'\] in the Pyro twin but \['rows'\]"),
    ],
)
def test_twins_whose_sites_or_plates_differ_are_refused(monkeypatch, plugin, slip, message):
    spec = _with_numpyro_twin(monkeypatch, plugin, "mismatched", **slip)
    with pytest.raises(ModelSpecError, match=message) as err:
        zoo.register(spec)
    assert "same name in both twins" in str(err.value)
    assert "mismatched" not in zoo.list_models()


@pytest.mark.parametrize("coordinates", [0, "2", True])
def test_a_spec_whose_guide_coordinates_are_not_a_revision_is_refused(coordinates):
    spec = dataclasses.replace(
        zoo.get_model("gmm"), name="gmm_coordinates", guide_coordinates=coordinates
    )
    with pytest.raises(ModelSpecError, match="guide_coordinates must be a positive int"):
        zoo.register(spec)
    assert "gmm_coordinates" not in zoo.list_models()


def test_a_guide_that_misses_a_latent_site_is_refused(monkeypatch, plugin):
    def make_guide(name, config, init):
        def guide(data, config, temperature=None):  # forgot pyro.sample("coef", ...)
            pass

        return guide

    path = _fake_twin(monkeypatch, "fake_forgetful_twin", model=plugin.twin("pyro").model)
    sys.modules[path].make_guide = make_guide
    spec = dataclasses.replace(plugin, name="forgetful", backends={**plugin.backends, "pyro": path})
    with pytest.raises(ModelSpecError, match=r"guide 'full_rank' of the Pyro twin") as err:
        zoo.register(spec)
    assert "does not sample the latent site(s) ['coef']" in str(err.value)
    # check_model reports it as the registration failure and skips what would only repeat it.
    report = conformance.check_model(spec, algorithms=["cavi"])
    assert [r.status for r in report.results] == ["fail", "skip", "skip", "skip", "skip"]
    assert "FAIL  registration" in str(report) and "['coef']" in str(report)


def test_a_guide_on_the_real_line_for_a_positive_latent_is_refused(monkeypatch, plugin):
    """The model's ``coef`` made positive (a Gamma prior) while the guide still draws it from a
    Normal: registration says which site, which support, and what guide fits it, where a fit
    ran into a NaN objective."""
    import pyro
    import pyro.distributions as dist
    import torch

    def model(data, config, temperature=None, init=None):
        x, y = data["x"], data["y"]
        ones = torch.ones(x.shape[-1], dtype=x.dtype)
        coef = pyro.sample("coef", dist.Gamma(ones, ones).to_event(1))
        with pyro.plate("data", x.shape[0]):
            pyro.sample("y", dist.Normal((x * coef).sum(-1), config.noise_scale), obs=y)

    real = plugin.twin("pyro")
    path = _fake_twin(monkeypatch, "fake_positive_twin", model=model, make_guide=real.make_guide)
    spec = dataclasses.replace(plugin, name="positive", backends={**plugin.backends, "pyro": path})
    with pytest.raises(ModelSpecError, match=r"guide 'full_rank' of the Pyro twin") as err:
        zoo.register(spec)
    assert "draws site(s) ['coef'] on the whole real line" in str(err.value)
    assert "'coef' (GreaterThanEq(lower_bound=0.0))" in str(
        err.value
    ) and "LogNormal or Gamma" in str(err.value)
    assert "positive" not in zoo.list_models()


def test_a_taken_name_is_refused(plugin):
    with pytest.raises(ModelSpecError, match="already registered \\(plugin zoo-linear-regression"):
        zoo.register(plugin)
    with pytest.raises(ModelSpecError, match="'gmm' is already registered \\(built-in\\)"):
        zoo.register(dataclasses.replace(plugin, name="gmm"))
    assert zoo.get_model("gmm").description.startswith("Gaussian mixture")


def test_check_model_says_which_contract_a_model_breaks(monkeypatch, plugin):
    """Same sites, different distributions (a precision read as a scale): registration passes,
    the log-joint check fails and says what to look for."""
    spec = _with_numpyro_twin(monkeypatch, plugin, "slipped", precision_as_scale=True)
    report = conformance.check_model(spec, algorithms=[], prior_precision=4.0)
    assert not report.passed
    assert report["registration"].passed
    failure = report["twins_and_log_joint"]
    assert failure.status == "fail" and "log-joint at the same point differs" in failure.message
    assert "a scale against a variance or a precision" in failure.message
    assert "FAIL  twins_and_log_joint" in str(report)
    with pytest.raises(AssertionError, match="2 passed, 1 failed"):
        report.raise_for_failures()


def _numpyro_guide(
    real_make_guide, variance_as_scale=False, loc_name="coef_loc", scale_constraint="positive"
):
    """The plugin's NumPyro guides with one of the slips an extender makes: the mean-field
    guide's scale squared (a variance where Pyro has a standard deviation), its location
    parameter under another name, or its scale under another constraint."""
    import numpyro
    import numpyro.distributions as dist
    from numpyro.distributions import constraints

    def make_guide(name, config, init):
        if name != "mean_field":
            return real_make_guide(name, config, init)
        init = init or {}

        def guide(data, config, temperature=None):
            d = data["x"].shape[-1]
            loc = numpyro.param(loc_name, init.get("coef_loc", np.zeros(d)))
            scale = numpyro.param(
                "coef_scale",
                init.get("coef_scale", np.ones(d)),
                constraint=getattr(constraints, scale_constraint),
            )
            scale = scale**2 if variance_as_scale else scale
            numpyro.sample("coef", dist.Normal(loc, scale).to_event(1))

        return guide

    return make_guide


@pytest.mark.parametrize(
    "slip,message",
    [
        ({}, None),
        ({"variance_as_scale": True}, "log-density at the same parameters and draws differs"),
        (
            {"loc_name": "coef_mean"},
            r"only in Pyro \['coef_loc'\], only in NumPyro \['coef_mean'\]",
        ),
        # The same values under another constraint: the same log-density, another fit.
        (
            {"scale_constraint": "softplus_positive"},
            r"constrains parameters otherwise in the two twins: 'coef_scale' "
            r"\(GreaterThan\(lower_bound=0\.0\) in Pyro, SoftplusPositive\(lower_bound=0\.0\)",
        ),
        (
            {"scale_constraint": "real"},
            r"'coef_scale' \(GreaterThan.* in Pyro, Real\(\) in NumPyro\)",
        ),
    ],
)
def test_check_model_holds_the_twins_guides_to_each_other(monkeypatch, plugin, slip, message):
    """Twins whose models agree but whose guides do not (another distribution, another
    parameter name) pass registration and the log-joint check; the guide check fails, naming
    the guide. The guide written right passes (the check is not one that always fails)."""
    real = plugin.twin("numpyro")
    path = _fake_twin(
        monkeypatch,
        "fake_guide_twin",
        model=real.model,
        make_guide=_numpyro_guide(real.make_guide, **slip),
    )
    spec = dataclasses.replace(
        plugin, name="guide_slip", backends={**plugin.backends, "numpyro": path}
    )
    report = conformance.check_model(spec, algorithms=[])
    assert report["registration"].passed and report["twins_and_log_joint"].passed
    check = report["twin_guides"]
    if message is None:
        assert check.passed, str(report)
        return
    assert check.status == "fail" and "guide 'mean_field'" in check.message
    assert re.search(message, check.message), check.message


def _subsampling_models(numpyro_rows="the plate's"):
    """The plugin's model with its data plate drawing minibatches of 10 rows, in both twins;
    the NumPyro twin scores the plate's rows, or (a slip) the first 10."""
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as ndist
    import pyro
    import pyro.distributions as pdist
    import torch

    def pyro_model(data, config, temperature=None, init=None):
        x, y = data["x"], data["y"]
        zeros = torch.zeros(x.shape[-1], dtype=x.dtype)
        coef = pyro.sample("coef", pdist.Normal(zeros, config.prior_precision**-0.5).to_event(1))
        with pyro.plate("data", x.shape[0], subsample_size=10) as rows:
            mean = (x[rows] * coef).sum(-1)
            pyro.sample("y", pdist.Normal(mean, config.noise_scale), obs=y[rows])

    def numpyro_model(data, config, temperature=None, init=None):
        x, y = data["x"], data["y"]
        zeros = jnp.zeros(x.shape[-1], dtype=x.dtype)
        coef = numpyro.sample("coef", ndist.Normal(zeros, config.prior_precision**-0.5).to_event(1))
        with numpyro.plate("data", x.shape[0], subsample_size=10) as rows:
            rows = rows if numpyro_rows == "the plate's" else jnp.arange(10)
            mean = (x[rows] * coef).sum(-1)
            numpyro.sample("y", ndist.Normal(mean, config.noise_scale), obs=y[rows])

    return pyro_model, numpyro_model


@pytest.mark.parametrize("numpyro_rows", ["the plate's", "the first 10"])
def test_the_twin_checks_score_a_subsampling_plate_at_the_same_rows(
    monkeypatch, plugin, numpyro_rows
):
    """A plate that draws minibatches: the NumPyro twin is scored at the rows the Pyro twin's
    plate drew, so twins that agree pass both checks, and one that reads other rows fails."""
    from zoo.testing import check_twin_guides, check_twins_and_log_joint

    pyro_model, numpyro_model = _subsampling_models(numpyro_rows)
    backends = {
        backend: _fake_twin(
            monkeypatch,
            f"fake_subsampling_{backend}_twin",
            model=model,
            make_guide=plugin.twin(backend).make_guide,
        )
        for backend, model in [("pyro", pyro_model), ("numpyro", numpyro_model)]
    }
    spec = dataclasses.replace(plugin, name="subsampling", backends=backends)
    if numpyro_rows == "the plate's":
        check_twins_and_log_joint(spec)
        check_twin_guides(spec)
    else:
        with pytest.raises(AssertionError, match="log-joint at the same point differs"):
            check_twins_and_log_joint(spec)


def test_the_log_joint_check_names_a_site_only_one_twin_has(monkeypatch, plugin):
    """Called on its own (registration would say it first), the log-joint check names a latent
    site that only the NumPyro twin draws, rather than failing inside NumPyro."""
    import numpyro
    import numpyro.distributions as dist

    from zoo.testing import check_twins_and_log_joint

    real = plugin.twin("numpyro").model

    def model(data, config, temperature=None, init=None):
        numpyro.sample("extra", dist.Normal(0.0, 1.0))
        real(data, config, temperature, init)

    path = _fake_twin(monkeypatch, "fake_extra_site_twin", model=model)
    spec = dataclasses.replace(plugin, name="extra", backends={**plugin.backends, "numpyro": path})
    with pytest.raises(AssertionError, match=r"only in the NumPyro twin: \['extra'\]"):
        check_twins_and_log_joint(spec)


def test_a_guide_that_samples_an_observed_site_is_refused(monkeypatch, plugin):
    import pyro
    import pyro.distributions as dist

    real = plugin.twin("pyro")

    def make_guide(name, config, init):
        guide = real.make_guide(name, config, init)

        def with_y(data, config, temperature=None):
            guide(data, config, temperature)
            with pyro.plate("data", data["y"].shape[0]):
                pyro.sample("y", dist.Normal(data["y"], 1.0))

        return with_y

    path = _fake_twin(monkeypatch, "fake_observed_twin", model=real.model, make_guide=make_guide)
    spec = dataclasses.replace(plugin, name="observed", backends={**plugin.backends, "pyro": path})
    with pytest.raises(ModelSpecError, match=r"samples site\(s\) \['y'\], which the model obs"):
        zoo.register(spec)
    assert "observed" not in zoo.list_models()


@pytest.mark.parametrize("part", ["init_state", "update"])
def test_updates_that_read_an_array_value_name_themselves_on_numpyro(
    monkeypatch, plugin, regression_data, part
):
    """NumPyro compiles the closed-form updates: one that takes ``float()`` of an array fails
    there with a TypeError that names the functions and the rule, and check_model reports it;
    Pyro runs it eagerly and fits."""
    from inference.backends import numpyro_backend

    module = importlib.import_module(plugin.updates.module)
    pure = getattr(module, part)

    def impure(*args):
        cache = args[1] if part == "update" else args[0]  # update(state, cache, ...)
        if float(cache["yty"]) < 0:  # Python reads a value
            raise AssertionError("unreachable")
        return pure(*args)

    monkeypatch.setattr(module, part, impure)
    numpyro_backend.clear_compiled()  # compile the impure function, not a kept pure one
    try:
        with pytest.raises(TypeError) as caught:
            inference.fit(MODEL, regression_data, "cavi", "numpyro", progress=False)
        message = str(caught.value)
        names = "init_cache and init_state" if part == "init_state" else "update"
        assert f"JAX could not compile {names} of {plugin.updates.module}" in message
        assert "ConcretizationTypeError" in message and "must be pure" in message
        report = conformance.check_model(plugin, algorithms=["cavi"], num_steps=3)
        assert report["cavi/pyro"].passed
        assert report["cavi/numpyro"].status == "fail"
        assert "must be pure" in report["cavi/numpyro"].message
    finally:
        numpyro_backend.clear_compiled()


def test_a_broken_plugin_warns_and_spares_the_rest(monkeypatch, tmp_path, plugin):
    """One distribution, two entry points: one names a module that is not there, the other a
    spec whose twins disagree. The first is skipped with a warning naming it; the second is
    listed, and refused with its plugin named when it is first fetched."""
    info = tmp_path / "broken_zoo_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-zoo-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[zoo.models]\n"
        "missing_module = no_such_module_for_zoo_tests:SPEC\n"
        "mismatched_plugin = fake_plugin_module:SPEC\n"
    )
    bad_spec = _with_numpyro_twin(monkeypatch, plugin, "mismatched_plugin", coef_site="w")
    _fake_twin(monkeypatch, "fake_plugin_module", SPEC=bad_spec)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.warns(zoo.ZooPluginWarning, match="broken-zoo-plugin.*missing_module") as rec:
            added = zoo.load_plugins()
        assert "ModuleNotFoundError" in str(rec[0].message)
        assert added == ["mismatched_plugin"]
        assert {"gmm", "bayesian_gmm", MODEL, "mismatched_plugin"} <= set(zoo.list_models())
        assert "missing_module" not in zoo.list_models()
        with pytest.raises(ModelSpecError, match="from plugin broken-zoo-plugin 0.1") as err:
            zoo.get_model("mismatched_plugin")
        assert "only in the Pyro twin: ['coef']" in str(err.value)
        assert zoo.get_model("gmm").name == "gmm"
    finally:
        if "mismatched_plugin" in zoo.list_models():
            zoo.unregister("mismatched_plugin")


# --- An algorithm plugin: examples/extend_algorithm -----------------------------------------


@pytest.fixture(scope="module")
def restarts(tmp_path_factory):
    """The example algorithm plugin, installed and found through its entry point."""
    target = _pip_install(ALGORITHM_SOURCE, tmp_path_factory.mktemp("algorithm"))
    assert {"cavi-restarts", "em-restarts"} <= set(inference.load_plugins())
    yield target
    sys.path.remove(str(target))
    for name in ("cavi-restarts", "em-restarts"):
        inference.unregister_algorithm(name)
    for name in [m for m in sys.modules if m.split(".")[0] == "inference_restarts"]:
        del sys.modules[name]


def test_the_algorithm_plugin_is_found_through_its_entry_point(restarts):
    assert {"cavi-restarts", "em-restarts"} <= set(inference.list_algorithms())
    source = inference.registry.algorithm_source("cavi-restarts")
    assert source.startswith("plugin inference-restarts 0.1.0")
    assert Path(sys.modules["inference_restarts"].__file__).is_relative_to(restarts)
    # It fits the built-in mixtures whose updates start from responsibilities, and says why not
    # elsewhere.
    runs = {m: inference.get_algorithm("cavi-restarts").supports(zoo.get_model(m)) for m in
            ("bayesian_gmm", "gmm", "vae")}  # fmt: skip
    assert runs == {"bayesian_gmm": True, "gmm": False, "vae": False}
    with pytest.raises(ValueError, match="does not support algorithm 'em-restarts'"):
        inference.fit("vae", {"x": np.zeros((4, 784))}, "em-restarts")


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
@pytest.mark.parametrize(
    "model,algorithm,base",
    [("bayesian_gmm", "cavi-restarts", "cavi"), ("gmm", "em-restarts", "em")],
)
def test_restarts_are_never_worse_than_their_first_start(restarts, backend, model, algorithm, base):
    x = zoo.get_model(model).make_data(np.random.default_rng(1), 300)["x"]
    kwargs = dict(K=6, num_steps=60, tol=0.0, progress=False, init="random_from_data")
    plain = inference.fit(model, {"x": x}, base, backend, **kwargs)
    best = inference.fit(model, {"x": x}, algorithm, backend, starts=3, **kwargs)
    assert best.algorithm == algorithm and best.options["starts"] == 3
    assert np.all(best.history["objective"] >= plain.history["objective"] - 1e-9)
    # Its parameters are the best start's, in the model's own names: evaluation works as usual.
    assert set(best.raw_params) == set(plain.raw_params)
    assert np.all(np.isfinite(best.log_marginal_likelihood(x[:20], num_samples=10)))


def test_a_restarted_run_resumes_to_the_same_result(restarts, tmp_path):
    x = zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(2), 200)["x"]
    kwargs = dict(K=4, starts=2, tol=0.0, progress=False)
    full = inference.fit(
        "bayesian_gmm", {"x": x}, "cavi-restarts", "numpyro", num_steps=20, **kwargs
    )
    path = tmp_path / "run.zoo"
    inference.fit(
        "bayesian_gmm", {"x": x}, "cavi-restarts", "numpyro", num_steps=8, checkpoint=path,
        **kwargs,
    )  # fmt: skip
    resumed = inference.fit(
        "bayesian_gmm", {"x": x}, "cavi-restarts", "numpyro", num_steps=20, checkpoint=path,
        resume=True, **kwargs,
    )  # fmt: skip
    np.testing.assert_array_equal(resumed.history["objective"], full.history["objective"])
    for k, v in full.raw_params.items():
        np.testing.assert_array_equal(resumed.raw_params[k], v)
    with pytest.raises(inference.CheckpointError, match="its options"):
        inference.fit(
            "bayesian_gmm", {"x": x}, "cavi-restarts", "numpyro", num_steps=20,
            checkpoint=path, resume=True, **{**kwargs, "starts": 3},
        )  # fmt: skip


def test_the_algorithm_plugin_passes_the_conformance_suite_and_the_cli(restarts, capsys):
    report = conformance.check_model("gmm", algorithms=["em-restarts"], backends=["numpyro"])
    assert report.passed, str(report)
    assert [r.name for r in report.results][-1] == "em-restarts/numpyro"
    with pytest.raises(ValueError, match="starts must be an int"):
        inference.fit("gmm", {"x": np.ones((10, 2))}, "em-restarts", starts=0, K=2)
    from inference.tools.cli import main

    assert main(["algorithms", "--json"]) == 0
    listed = {a["name"]: a for a in json.loads(capsys.readouterr().out)}
    assert listed["em-restarts"]["options"] == ["starts"]
    assert listed["em-restarts"]["source"].startswith("plugin inference-restarts")


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_an_init_name_that_is_no_parameter_is_refused(plugin, regression_data, backend):
    """A misspelt name would be left unused, its parameter starting from its own value."""
    fitted = inference.fit(MODEL, regression_data, "svi", backend, num_steps=1, progress=False)
    name = sorted(fitted.raw_params)[0]
    init = {**fitted.raw_params, name + "x": fitted.raw_params[name]}
    with pytest.raises(ValueError, match=rf"init names \['{name}x'\].*Did you mean '{name}'"):
        inference.fit(MODEL, regression_data, "svi", backend, num_steps=1, init=init)
