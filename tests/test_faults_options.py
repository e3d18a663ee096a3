"""Fault injection: bad options and bad data given to ``inference.fit``.

Bad data are refused before the first step with a ``ValueError`` or ``TypeError`` naming the data
key; array-likes (a DataFrame, a Series, a tensor) are arrays, never streams of minibatches, and
views numpy reads (negative strides, the other byte order) fit on Pyro as on NumPyro. float32
mixtures on NumPyro run in float32; a learning rate that diverges ends in the loop's
``NonFiniteObjectiveError``.
"""

from __future__ import annotations

import numpy as np
import pytest

import inference
import zoo
from inference import NonFiniteObjectiveError
from inference.streaming import is_out_of_core

try:  # the fake DataFrame below carries the assertions; pandas, when installed, as well
    import pandas
except ImportError:  # pragma: no cover - depends on the environment
    pandas = None

RNG = np.random.default_rng(0)
GMM_X = zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(0), 40)["x"]
BINARY_X = (RNG.random((30, 16)) < 0.5).astype(np.float64)
TOKENS_X = zoo.get_model("exchangeable_tokens").make_data(np.random.default_rng(0), 6)["x"]
BAM_DATA = zoo.get_model("bam_classifier").make_data(np.random.default_rng(0), 6)

DATA = {
    "bayesian_gmm": {"x": GMM_X},
    "gmm": {"x": GMM_X},
    "bernoulli_mixture": {"x": BINARY_X},
    "vae": {"x": BINARY_X},
    "exchangeable_tokens": {"x": TOKENS_X},
    "bam_classifier": BAM_DATA,
}
SMALL = {
    "bayesian_gmm": {"K": 2},
    "gmm": {"K": 2},
    "bernoulli_mixture": {"K": 2},
    "vae": {"latent_dim": 2, "hidden": (4,)},
    "exchangeable_tokens": {},
    "bam_classifier": dict(zoo.get_model("bam_classifier").example_options),
}


class FakeDataFrame:
    """What a pandas DataFrame is to ``fit``: numpy reads it as an array (``__array__``), but
    iterating it gives its column names, not its rows."""

    def __init__(self, values):
        self.values = np.asarray(values)
        self.columns = [f"c{j}" for j in range(self.values.shape[1])]

    def __array__(self, dtype=None, copy=None):
        return self.values if dtype is None else self.values.astype(dtype)

    def __iter__(self):
        return iter(self.columns)

    def __len__(self):
        return len(self.values)


@pytest.fixture
def no_steps(monkeypatch):
    """Any algorithm's step fails the test: the refusals must come before the first step."""

    def step(self, state):
        raise AssertionError("a step ran: the bad input was not refused up front")

    for name in inference.list_algorithms():
        algorithm = inference.get_algorithm(name)
        monkeypatch.setattr(algorithm, "step", step.__get__(algorithm))


def _fit(model, algorithm="svi", backend="pyro", data=None, **options):
    data = DATA[model] if data is None else data
    options = {"num_steps": 2, "progress": False, **SMALL[model], **options}
    return inference.fit(model, data, algorithm, backend, **options)


ERRORS = (ValueError, TypeError)


def _with_nan(x):
    x = x.copy()
    x[3, 1] = np.nan
    return x


def _with_inf(x):
    x = x.copy()
    x[5, 0] = -np.inf
    return x


# (model, data, what the message must say)
BAD_DATA = [
    ("bayesian_gmm", {"x": GMM_X.astype(np.longdouble)}, r"data\['x'\] has dtype float128"),
    ("bayesian_gmm", {"x": GMM_X.astype(complex)}, r"data\['x'\] must have a dtype of kind 'f'"),
    ("bayesian_gmm", {"x": GMM_X.astype(object)}, r"data\['x'\] .*got object \(numpy could not"),
    ("bayesian_gmm", {"x": GMM_X.astype(str)}, r"data\['x'\] must have a dtype of kind 'f'"),
    ("bayesian_gmm", {"x": GMM_X.astype(int)}, r"data\['x'\] must have a dtype of kind 'f'"),
    ("bayesian_gmm", {"x": _with_nan(GMM_X)}, r"data\['x'\] contains NaN or inf in 1 row"),
    ("bayesian_gmm", {"x": _with_inf(GMM_X)}, r"data\['x'\] contains NaN or inf in 1 row"),
    ("bayesian_gmm", {"x": GMM_X[:, 0]}, r"data\['x'\] must have 2 dimensions"),
    ("bayesian_gmm", {"x": GMM_X[None]}, r"data\['x'\] must have 2 dimensions"),
    ("bayesian_gmm", {"x": GMM_X[:0]}, r"data\['x'\] is empty"),
    ("bayesian_gmm", {"x": [[1.0, 2.0], [3.0]]}, r"data\['x'\] cannot be read as an array"),
    ("bayesian_gmm", {"y": GMM_X}, r"takes data keys \['x'\]; missing \['x'\]"),
    ("bayesian_gmm", {"x": GMM_X, "y": GMM_X}, r"unexpected \['y'\]"),
    ("bayesian_gmm", GMM_X, r"data must be a dict mapping \['x'\] to arrays"),
    ("bayesian_gmm", FakeDataFrame(GMM_X), r"data must be a dict mapping \['x'\] to arrays"),
    ("bayesian_gmm", GMM_X.tolist(), r"data must be a dict mapping \['x'\] to arrays"),
    ("bernoulli_mixture", {"x": BINARY_X * 2}, r"data\['x'\] must be binary"),
    ("vae", {"x": BINARY_X * 0.5}, r"data\['x'\] must hold binary pixels"),
    ("exchangeable_tokens", {"x": TOKENS_X[0]}, r"data\['x'\] must have 3 dimensions"),
    ("bam_classifier", {**BAM_DATA, "y": BAM_DATA["y"] + 10}, "expected labels in 0..9"),
    ("bam_classifier", {**BAM_DATA, "y": BAM_DATA["y"] * 0.5}, r"data\['y'\] must have a dtype"),
]


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
@pytest.mark.parametrize(
    "model,data,message", BAD_DATA, ids=[f"{m}-{i}" for i, (m, *_) in enumerate(BAD_DATA)]
)
def test_bad_data_are_refused_naming_the_key(no_steps, model, data, message, backend):
    algorithm = "cavi" if model == "bayesian_gmm" else "svi"
    if model == "bernoulli_mixture":
        algorithm = "em"
    with pytest.raises(ERRORS, match=message):
        _fit(model, algorithm, backend, data=data)


# --- Array-likes are arrays, never streams -------------------------------------------------------


def _array_likes():
    likes = [FakeDataFrame(GMM_X)]
    if pandas is not None:
        likes += [pandas.DataFrame(GMM_X, columns=["a", "b"]), pandas.Series(GMM_X[:, 0])]
    return likes


def test_an_array_like_is_not_a_stream_of_minibatches():
    for like in _array_likes():
        assert not is_out_of_core(like), type(like).__name__
    assert not is_out_of_core(FakeDataFrame(GMM_X))  # iterating it gives column names
    assert is_out_of_core(iter([{"x": GMM_X}]))  # a generator of minibatches still is one


def test_a_bare_array_like_is_refused_saying_what_to_pass(no_steps):
    for like in _array_likes():
        for algorithm in ("svi", "svi-natural", "cavi"):
            with pytest.raises(TypeError, match=r"data=\{'x': np.asarray\(...\)\}"):
                _fit("bayesian_gmm", algorithm, "pyro", data=like)
        with pytest.raises(ValueError, match="num_data= is for streams of minibatches"):
            _fit("bayesian_gmm", "svi-natural", "pyro", data=like, num_data=40)


def test_an_array_like_under_its_key_fits_as_its_array():
    as_array = _fit("bayesian_gmm", "cavi", "pyro", data={"x": GMM_X})
    for like in _array_likes()[:2]:  # 2-D: the fake, and pandas' DataFrame if installed
        fitted = _fit("bayesian_gmm", "cavi", "pyro", data={"x": like})
        for key, value in as_array.raw_params.items():
            np.testing.assert_allclose(fitted.raw_params[key], value, rtol=1e-12)


# --- float32 mixtures on NumPyro -----------------------------------------------------------------


def test_numpyro_constraint_transforms_keep_float32():
    inference.get_backend("numpyro")  # JAX's 64-bit mode on, as every NumPyro fit runs
    import jax.numpy as jnp
    from numpyro.distributions import constraints
    from numpyro.distributions.transforms import biject_to

    from zoo.distributions import lower_cholesky, simplex

    for ours, theirs, size in (
        (lower_cholesky, constraints.lower_cholesky, 6),
        (simplex, constraints.simplex, 3),
    ):
        x = jnp.asarray(np.random.default_rng(1).normal(size=(2, size)))
        y = biject_to(ours)(x)
        np.testing.assert_allclose(y, biject_to(theirs)(x), rtol=1e-12)  # same map, float64
        np.testing.assert_allclose(biject_to(ours).inv(y), biject_to(theirs).inv(y), rtol=1e-12)
        y32 = biject_to(ours)(x.astype(jnp.float32))
        assert y32.dtype == jnp.float32 and biject_to(ours).inv(y32).dtype == jnp.float32
    with pytest.raises(TypeError, match="lax.scatter"):  # why: NumPyro's own, under JAX x64
        biject_to(constraints.lower_cholesky)(jnp.zeros(3, jnp.float32))


@pytest.mark.parametrize("model,algorithm", [("gmm", "svi"), ("bayesian_gmm", "cavi")])
def test_a_float32_mixture_fit_on_numpyro_runs_in_float32(model, algorithm):
    """NumPyro's lower-Cholesky transform failed on float32 parameters under JAX's 64-bit mode,
    its stick-breaking transform and a float64 constant of the closed-form updates turned them
    float64; the fit now runs in float32 throughout, as Pyro's does, to the same values."""
    fitted = _fit(model, algorithm, "numpyro", dtype="float32")
    assert fitted.options["dtype"] == "float32"
    for name, value in fitted.raw_params.items():
        assert value.dtype == np.float32 and np.isfinite(value).all(), name
    # Neither draws at random: the first step's objective (at the shared start) is Pyro's. (SVI
    # then parts: each backend's optimiser sees the simplex through its own parameterisation.)
    pyro_fit = _fit(model, algorithm, "pyro", dtype="float32")
    first = fitted.history["objective"][0]
    np.testing.assert_allclose(first, pyro_fit.history["objective"][0], rtol=1e-5)
    if algorithm == "cavi":
        for name, value in pyro_fit.raw_params.items():
            np.testing.assert_allclose(fitted.raw_params[name], value, rtol=1e-4, atol=1e-5)


# --- Data numpy reads that a backend does not ----------------------------------------------------


def test_reversed_and_byte_swapped_data_fit_on_pyro_as_their_copies():
    """numpy and JAX read views with negative strides and big-endian arrays; torch refused them
    ("tensors with negative strides are not currently supported")."""
    for x in (GMM_X[::-1], GMM_X[:, ::-1], GMM_X.astype(">f8")):
        assert min(x.strides) < 0 or not x.dtype.isnative
        fitted = _fit("bayesian_gmm", "cavi", "pyro", data={"x": x})
        copied = _fit("bayesian_gmm", "cavi", "pyro", data={"x": np.array(x, dtype=np.float64)})
        for key, value in copied.raw_params.items():
            np.testing.assert_allclose(fitted.raw_params[key], value, rtol=1e-12)


# --- A diverging learning rate ends in the NaN guard ---------------------------------------------


@pytest.mark.parametrize("model,backend", [("bayesian_gmm", "pyro"), ("gmm", "numpyro")])
def test_a_diverging_learning_rate_ends_in_the_nan_guard(model, backend):
    """Pyro's step raised the Wishart's check of its degrees of freedom; NumPyro's guard then
    failed summarising parameters that were no longer finite ("Singular matrix")."""
    with pytest.raises(NonFiniteObjectiveError, match="Lower the learning rate") as info:
        _fit(model, "svi", backend, lr=1e6, num_steps=5)
    message = str(info.value)
    assert "are not finite (" in message and "Singular" not in message
    result = info.value.result
    if result is not None:  # the newest parameters that are all finite
        assert all(np.isfinite(v).all() for v in result.raw_params.values())
    if backend == "numpyro":  # functional states: the step before the last is kept
        assert result is not None and "are kept (error.result)" in message


class Divergent:
    """A stand-in algorithm: its parameter doubles at each step and turns inf at step 3, where
    summarising it fails as inverting a matrix of infinities does; step 4 then raises (as a
    distribution's check of its parameters does) or reports a NaN objective."""

    name = "divergent"

    def __init__(self, raises: bool):
        self.raises = raises
        self.traits = inference.get_algorithm("cavi").traits

    def step(self, state):
        if not np.isfinite(state):
            if self.raises:
                raise ValueError("Expected parameter df to be greater than ndim - 1")
            return state, inference.algorithm.Info(float("nan"))
        return (np.inf if state >= 4 else 2.0 * state), inference.algorithm.Info(-1.0)

    def get_params(self, state):
        return {"scale": np.asarray(state)}

    def describe(self, info):
        return None


def _summary(state, history, converged):
    if not np.isfinite(state):
        raise np.linalg.LinAlgError("Singular matrix")
    return {"scale": state, "steps": len(history["step"])}


@pytest.mark.parametrize("raises", [True, False])
def test_the_nan_guard_keeps_the_last_finite_parameters(raises):
    from inference.loop import run

    with pytest.raises(NonFiniteObjectiveError, match="Lower it") as info:
        run(Divergent(raises), 1.0, num_steps=10, tol=None, num_data=1, progress=False,
            make_result=_summary, advice="Lower it.")  # fmt: skip
    message = str(info.value)
    assert "step 4" in message.lower() and "parameters of step 3 are not finite (scale)" in message
    assert info.value.result == {"scale": 4.0, "steps": 2}  # step 2's, the last finite ones
    assert isinstance(info.value.__cause__, ValueError) == raises


def test_a_step_that_fails_on_finite_parameters_is_not_taken_for_divergence(monkeypatch):
    """An error inside a step while the parameters are finite is the error itself."""
    cavi = inference.get_algorithm("cavi")

    def broken(state):
        raise ValueError("a bug, not a divergence")

    monkeypatch.setattr(cavi, "step", broken)
    with pytest.raises(ValueError, match="a bug, not a divergence"):
        _fit("bayesian_gmm", "cavi", "pyro")
