import importlib
import os
import shutil
import sys
import tempfile
from pathlib import Path

# NumPyro's compiled functions are kept in a cache of this test run's own (``ZOO_JAX_CACHE``),
# made here in the main process and inherited by the xdist workers and the scripts the tests
# start: a structure that several tests fit is compiled once per run, not once per test and
# worker (compiling is most of the suite's time). The tests neither write into the user's cache
# nor read what earlier runs left there. ``ZOO_JAX_CACHE=0`` runs them with no cache at all.
if "ZOO_JAX_CACHE" not in os.environ:
    _RUN_CACHE = tempfile.mkdtemp(prefix="ppl-zoo-tests-")
    os.environ["ZOO_JAX_CACHE"] = _RUN_CACHE
else:
    _RUN_CACHE = None  # the caller's setting, or this run's made by the main process
# One OpenBLAS thread, set before SciPy's OpenBLAS loads (xdist's workers inherit it): JAX's
# LAPACK kernels on CPU (a triangular solve, a Cholesky) call it, and its threads spin while they
# wait. With other processes on the cores (the other xdist workers), each of a NUTS or SVI step's
# tiny solves then waits for a descheduled thread: NUTS on the built-in mixture ran a 0.1 s chunk
# in over 100 s. One thread gives the same draws, bit for bit.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

import numpy as np  # noqa: E402
import pytest  # noqa: E402

import zoo  # noqa: E402
from zoo import datasets  # noqa: E402

if os.environ.get("PYTEST_XDIST_WORKER"):
    import torch

    # One xdist worker per core: a worker's torch ops on more threads than that only contend
    # with the other workers (Pyro's many small ops, NUTS above all, slow down several-fold).
    torch.set_num_threads(1)

#: The example model plugin, Bayesian linear regression, and where its source is.
REGRESSION_PLUGIN = "bayesian_linear_regression"
PLUGIN_SOURCE = Path(__file__).resolve().parents[1] / "examples" / "extend"


@pytest.fixture(scope="module")
def one_torch_thread():
    """For modules of tiny tensors: on more threads than one, torch's operations only wait for
    each other, which costs milliseconds each on a busy 2-core machine. Use it with
    ``pytestmark = pytest.mark.usefixtures("one_torch_thread")``."""
    import torch

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def gmm_data():
    """The built-in 2-D mixture, small enough for exact checks."""
    return zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(0), 300)["x"]


@pytest.fixture(scope="session")
def gmm_priors():
    """Bayesian GMM priors (of 2-D data) away from scikit-learn's defaults: beta0 = 1, nu0 = D
    and the data's mean and covariance would hide a slip in any of them."""
    return {
        "weight_concentration_prior": 0.7,
        "mean_prior": [0.5, -1.0],
        "mean_precision_prior": 2.5,
        "degrees_of_freedom_prior": 4.0,
        "covariance_prior": [[2.0, 0.3], [0.3, 0.5]],
    }


@pytest.fixture(scope="session")
def resp0(gmm_data):
    return np.random.default_rng(1).dirichlet(np.ones(5), size=len(gmm_data))


@pytest.fixture(scope="session")
def data_dir():
    """The canonical MNIST files, where the loaders look for them: ``ZOO_DATA_DIR`` (CI points
    it at a local copy), else the per-user cache, downloading any missing file there (checked
    against its pinned SHA-256) when the network is there.

    When they cannot be had, the tests that need them are skipped, and the session's summary
    says so in one line.
    """
    try:
        return datasets.download()
    except datasets.DatasetError as err:
        pytest.skip(f"{MNIST_MISSING}: {err}")


#: How a test that needs MNIST says it was skipped (read back by the summary below).
MNIST_MISSING = "MNIST is not available"


def pytest_sessionfinish(session):
    """The run's compilation cache goes with the run (the process that made it removes it)."""
    if _RUN_CACHE is not None:
        shutil.rmtree(_RUN_CACHE, ignore_errors=True)


def pytest_terminal_summary(terminalreporter):
    """One line for all the tests skipped for want of MNIST, instead of one per test."""
    reasons = [
        str(report.longrepr[2]).removeprefix("Skipped: ")
        for report in terminalreporter.stats.get("skipped", [])
        if isinstance(report.longrepr, tuple) and MNIST_MISSING in str(report.longrepr[2])
    ]
    if reasons:
        terminalreporter.write_line(
            f"{len(reasons)} tests that read MNIST were skipped. {reasons[0]}", yellow=True
        )


@pytest.fixture(scope="module")
def regression_spec():
    """The example plugin's spec: the installed one, else registered from its source for this
    module only (and forgotten after, so the plugin's own tests find it through its entry
    point)."""
    if REGRESSION_PLUGIN in zoo.list_models():
        yield zoo.get_model(REGRESSION_PLUGIN)
        return
    sys.path.insert(0, str(PLUGIN_SOURCE))
    spec = zoo.register(importlib.import_module("zoo_linear_regression").SPEC, check=False)
    yield spec
    zoo.unregister(REGRESSION_PLUGIN)
    sys.path.remove(str(PLUGIN_SOURCE))
    for name in [m for m in sys.modules if m.split(".")[0] == "zoo_linear_regression"]:
        del sys.modules[name]


@pytest.fixture
def compiled_calls(monkeypatch):
    """A list that grows by one at each call of a function ``torch.compile`` compiled while the
    test runs: a test of ``jit=True`` checks that the compiled update ran, not a fall-back."""
    import torch

    calls, compile_ = [], torch.compile

    def counting_compile(fn, **options):
        compiled = compile_(fn, **options)
        return lambda *args: calls.append(1) or compiled(*args)

    monkeypatch.setattr(torch, "compile", counting_compile)
    return calls


@pytest.fixture
def fit_options(monkeypatch):
    """The options ``zoo fit`` passes to ``inference.fit``: the command line's ``fit`` becomes a
    recorder that fills this dict and stops with ``ValueError("stop here")``, so a test reads
    what was parsed without fitting."""
    from inference.tools import cli

    given = {}

    def recording_fit(*args, **options):
        given.update(options)
        raise ValueError("stop here")

    monkeypatch.setattr(cli, "fit", recording_fit)
    return given


@pytest.fixture
def no_fit(monkeypatch):
    """For input the command line must refuse before any work: its ``fit`` and ``compare`` fail
    the test if they are called."""
    from inference.tools import cli

    def started(*args, **kwargs):
        raise AssertionError("the input should have been refused before fitting")

    monkeypatch.setattr(cli, "fit", started)
    monkeypatch.setattr(cli, "compare", started)


@pytest.fixture(scope="module")
def iwae_vae_comparison():
    """A tiny comparison of one VAE run trained with elbo="iwae": ``(data, table)``."""
    import inference

    data = zoo.get_model("vae").make_data(np.random.default_rng(0), 10)
    table = inference.compare(
        "vae", data, ["svi"], ["pyro"], elbo="iwae", num_particles=2, num_steps=3, tol=0,
        num_samples=5, latent_dim=2, hidden=(8,), progress=False,
    )  # fmt: skip
    return data, table
