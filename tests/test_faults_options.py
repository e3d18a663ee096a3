"""Fault injection: bad options and bad data given to ``inference.fit`` and ``inference.compare``.

Every bad input is refused before the first step with a ``ValueError`` or ``TypeError`` whose
message names the argument at fault (and, for options, what it expects); a learning rate that
diverges ends in the loop's ``NonFiniteObjectiveError`` with advice. Below the tables, the
regressions: array-likes taken for streams, options a fit would ignore, float32 mixtures on
NumPyro, data of a dtype or layout a backend refuses, degenerate data blamed on a prior, and a
step that fails once its parameters are no longer finite.

Kept cheap: the table's fits stop before any step (a step would fail the test, see
``no_steps``); the few fits that run use tiny data and at most 5 steps.
"""

from __future__ import annotations

import dataclasses
import types

import numpy as np
import pytest
import scipy.sparse

import inference
import zoo
from inference import NonFiniteObjectiveError
from inference.streaming import is_out_of_core
from zoo.testing import check_registration

try:  # the fake DataFrame below carries the assertions; pandas, when installed, as well
    import pandas
except ImportError:  # pragma: no cover - depends on the environment
    pandas = None

RNG = np.random.default_rng(0)
GMM_X = zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(0), 40)["x"]
GMM_X_200 = zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(0))["x"]
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

# (model, algorithm, options, what the message must say); each row runs on both backends.
BAD_OPTIONS = [
    # the model's options, wrong type or out of range
    ("bayesian_gmm", "cavi", {"reg_covar": "a"}, "reg_covar must be a float"),
    ("bayesian_gmm", "cavi", {"reg_covar": -1.0}, r"reg_covar must be a float in the range \[0"),
    ("bayesian_gmm", "cavi", {"mean_prior": "abc"}, "mean_prior must be an array of floats"),
    ("bayesian_gmm", "cavi", {"mean_prior": [1.0, 2.0, 3.0]}, r"mean_prior must have shape \(2"),
    ("bayesian_gmm", "cavi", {"covariance_prior": "abc"}, "covariance_prior must be an array"),
    ("bayesian_gmm", "cavi", {"covariance_prior": -np.eye(2)}, "covariance_prior must be symm"),
    ("bayesian_gmm", "cavi", {"K": "3"}, "K must be an int"),
    ("bayesian_gmm", "cavi", {"K": 0}, r"K must be an int in the range \[1, inf\)"),
    ("bayesian_gmm", "cavi", {"K": 2.5}, "K must be an int"),
    ("bayesian_gmm", "cavi", {"K": True}, "K must be an int"),
    ("bayesian_gmm", "cavi", {"K": 41}, "K=41 exceeds the number of data points"),
    ("bayesian_gmm", "cavi", {"weight_prior": "dp"}, "weight_prior must be one of"),
    ("bayesian_gmm", "cavi", {"weight_prior": 3}, "weight_prior must be a string"),
    ("bayesian_gmm", "cavi", {"weight_concentration_prior": "a"}, "weight_concentration_prior"),
    ("bayesian_gmm", "cavi", {"weight_concentration_prior": -1.0}, "weight_concentration_prior"),
    ("bayesian_gmm", "cavi", {"mean_precision_prior": 0.0}, "mean_precision_prior must be a"),
    ("bayesian_gmm", "cavi", {"degrees_of_freedom_prior": "a"}, "degrees_of_freedom_prior"),
    ("bayesian_gmm", "cavi", {"degrees_of_freedom_prior": 0.5}, "greater than D - 1"),
    ("gmm", "em", {"reg_covar": "a"}, "reg_covar must be a float"),
    ("bernoulli_mixture", "em", {"probs_prior_a": "2"}, "probs_prior_a must be a float"),
    ("bernoulli_mixture", "em", {"probs_prior_b": 1.0}, r"probs_prior_b must be a float in"),
    ("vae", "svi", {"hidden": "16"}, "hidden must be an int or a list of ints"),
    ("vae", "svi", {"hidden": ()}, "hidden must list at least one layer"),
    ("vae", "svi", {"hidden": (4, 0)}, "hidden layer size must be an int"),
    ("vae", "svi", {"latent_dim": "2"}, "latent_dim must be an int"),
    ("vae", "svi", {"activation": "sigmoid"}, "activation must be one of"),
    ("exchangeable_tokens", "svi", {"objective": "mlm"}, "objective must be one of"),
    ("exchangeable_tokens", "svi", {"means": "abc"}, "means .*must be an array of floats"),
    ("exchangeable_tokens", "svi", {"means": np.zeros((3, 3))}, r"means must be a finite \(K, D"),
    ("exchangeable_tokens", "svi", {"weights": [0.5, 0.6, 0.1]}, "weights must be a"),
    ("exchangeable_tokens", "svi", {"num_heads": 0}, "num_heads must be an int"),
    ("exchangeable_tokens", "svi", {"separation": 2.0, "means": np.eye(2)}, "separation="),
    ("bam_classifier", "svi", {"attention": "gumbel"}, "attention to be one of"),
    ("bam_classifier", "svi", {"width": "8"}, "width must be an int"),
    ("bam_classifier", "svi", {"patch_size": 5}, "patch_size that divides"),
    ("bam_classifier", "svi", {"kl_weight": -1.0}, "kl_weight"),
    # the algorithm's options
    ("bayesian_gmm", "svi", {"lr": "x"}, r"lr must be a float in the range \(0, inf\)"),
    ("bayesian_gmm", "svi", {"lr": -0.1}, r"lr must be a float in the range \(0, inf\)"),
    ("bayesian_gmm", "svi", {"lr": [(0, 0.1)]}, "num_steps must be an int >= 1"),
    ("bayesian_gmm", "svi", {"num_particles": 1.5}, "num_particles must be an int"),
    ("bayesian_gmm", "svi", {"num_particles": 0}, "num_particles must be an int in the range"),
    ("bayesian_gmm", "svi", {"guide": "gumbel", "temperature": 0.5}, "temperature must be a pair"),
    ("bayesian_gmm", "svi", {"guide": "gumbel", "temperature": (1.0, "a")}, "temperature must"),
    ("bayesian_gmm", "svi", {"guide": "gumbel", "temperature": (1.0, -0.1)}, "temperature must"),
    ("bayesian_gmm", "svi", {"temperature": (2.0, 0.5)}, "temperature= anneals a relaxed"),
    ("bayesian_gmm", "svi", {"elbo": "trce"}, r"elbo must be one of \['trace', 'meanfield'"),
    ("bayesian_gmm", "svi", {"elbo": "meanfield"}, "elbo='meanfield' does not apply"),
    ("bayesian_gmm", "svi", {"guide": "nope"}, "valid guides are"),
    ("bayesian_gmm", "svi", {"guide": 3}, "guide must be a string"),
    ("bayesian_gmm", "svi", {"batch_size": "10"}, "batch_size must be an int"),
    ("bayesian_gmm", "svi", {"batch_size": 0}, r"batch_size must be an int in the range \[1, 40\]"),
    (
        "bayesian_gmm",
        "svi",
        {"batch_size": 41},
        r"batch_size must be an int in the range \[1, 40\]",
    ),
    ("bayesian_gmm", "svi", {"jit": "yes"}, "jit must be a bool"),
    ("bayesian_gmm", "svi", {"data_parallel": "no"}, "data_parallel must be a bool"),
    ("bayesian_gmm", "svi", {"dynamic_binarization": True}, "dynamic_binarization=True needs"),
    ("bayesian_gmm", "svi", {"step_size": (1.0, 0.7)}, "step_size= is an option of algorithm"),
    ("bayesian_gmm", "cavi", {"batch_size": 10}, "batch_size= is an option of algorithm"),
    ("bayesian_gmm", "cavi", {"lr": 0.1}, "lr= is an option of algorithm"),
    ("bayesian_gmm", "cavi", {"colour": "red"}, r"Unknown option\(s\) \['colour'\]"),
    ("bayesian_gmm", "svi-natural", {"step_size": "a"}, r"step_size must be a pair \(tau"),
    ("bayesian_gmm", "svi-natural", {"step_size": (1.0, 2.0)}, "kappa in"),
    ("bayesian_gmm", "svi-natural", {"batch_size": "a"}, "batch_size must be an int"),
    ("bayesian_gmm", "nuts", {"num_chains": 0}, "num_chains must be an int"),
    ("bayesian_gmm", "nuts", {"target_accept_prob": 1.5}, "target_accept_prob must be a float"),
    ("bayesian_gmm", "nuts", {"dense_mass": "yes"}, "dense_mass must be a bool"),
    ("bernoulli_mixture", "svi", {"num_particles": 4}, "num_particles= averages Monte-Carlo"),
    ("gmm", "svi", {"num_particles": 2}, "num_particles= averages Monte-Carlo"),
    ("exchangeable_tokens", "svi", {"num_particles": 3}, "num_particles= averages Monte-Carlo"),
    ("vae", "svi", {"elbo": "iwae"}, "elbo='iwae' with num_particles=1 is the ordinary ELBO"),
    ("vae", "svi", {"temperature": (1.0, 0.5)}, "temperature= anneals a relaxed"),
    ("bam_classifier", "svi", {"temperature": (1.0, 0.5)}, "temperature= anneals a relaxed"),
    # the run's own options
    ("bayesian_gmm", "cavi", {"dtype": "float16"}, r"dtype must be one of \['float32'"),
    ("bayesian_gmm", "cavi", {"seed": "a"}, "seed must be an int"),
    ("bayesian_gmm", "cavi", {"tol": -1.0}, "tol must be a float"),
    ("bayesian_gmm", "cavi", {"device": "tpu"}, "(?i)device 'tpu'"),
    ("bayesian_gmm", "cavi", {"init": "bogus"}, "init"),
    ("bayesian_gmm", "cavi", {"checkpoint_every": 5}, "checkpoint_every= needs checkpoint="),
    ("bayesian_gmm", "cavi", {"num_data": 10}, "num_data= is for streams"),
    ("bayesian_gmm", "cavi", {"patience": 3}, "need validation_data"),
    ("bayesian_gmm", "cavi", {"progress": "no"}, "progress must be True or False; got str"),
    ("bayesian_gmm", "cavi", {"resume": "False", "checkpoint": "unused.zoo"}, "resume must be"),
    ("vae", "svi", {"validation_data": {"x": BINARY_X}, "patience": True}, "patience must be"),
    ("bayesian_gmm", "em", {}, "does not support algorithm 'em'"),
]


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
@pytest.mark.parametrize(
    "model,algorithm,options,message",
    BAD_OPTIONS,
    ids=[f"{m}-{a}-{'-'.join(o) or 'none'}-{i}" for i, (m, a, o, _) in enumerate(BAD_OPTIONS)],
)
def test_a_bad_option_is_refused_naming_it(no_steps, model, algorithm, options, message, backend):
    with pytest.raises(ERRORS, match=message):
        _fit(model, algorithm, backend, **options)


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
    ("bayesian_gmm", {"x": GMM_X.astype(complex)}, r"data\['x'\] must hold floating-point"),
    (
        "bayesian_gmm",
        {"x": GMM_X.astype(object)},
        r"data\['x'\] .*got dtype object \(numpy could not",
    ),
    ("bayesian_gmm", {"x": GMM_X.astype(str)}, r"data\['x'\] must hold floating-point"),
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
    ("bayesian_gmm", {"x": GMM_X * 1e200}, r"data\['x'\] holds values up to .*rescale"),
    ("bayesian_gmm", {"x": np.c_[GMM_X, np.ones(40)]}, r"column\(s\) \[2\] of data\['x'\]"),
    ("bayesian_gmm", {"x": GMM_X[:2]}, r"data\['x'\] has 2 rows and 2 columns"),
    # Collinear: their covariance's smallest eigenvalue is rounding error, here above 0.
    ("bayesian_gmm", {"x": np.c_[GMM_X, GMM_X.sum(axis=1)]}, "are linear combinations of others"),
    ("bayesian_gmm", {"x": np.repeat(GMM_X[:2], 20, axis=0)}, r"fewer than D \+ 1 distinct rows"),
    (
        "bayesian_gmm",
        {"x": scipy.sparse.csr_matrix(GMM_X)},
        r"data\['x'\] cannot be read .*csr_matrix .*e\.g\. data\['x'\]\.toarray\(\)",
    ),
    ("bernoulli_mixture", {"x": BINARY_X * 2}, r"data\['x'\] must be binary"),
    ("vae", {"x": BINARY_X * 0.5}, r"data\['x'\] must hold binary pixels"),
    ("exchangeable_tokens", {"x": TOKENS_X[0]}, r"data\['x'\] must have 3 dimensions"),
    ("bam_classifier", {**BAM_DATA, "y": BAM_DATA["y"] + 10}, "expected labels in 0..9"),
    ("bam_classifier", {**BAM_DATA, "y": BAM_DATA["y"] * 0.5}, r"data\['y'\] must hold integer"),
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


# compare(): (model, keyword arguments, what the message must say)
BAD_COMPARISONS = [
    ("bayesian_gmm", {"algorithms": ["cavi"], "lr": 0.1}, r"lr=0.1 would have no effect on any"),
    ("bayesian_gmm", {"algorithms": ["svi"], "guides": ["enum"], "temperature": (2.0, 0.5)},
     "temperature= anneals a relaxed"),
    ("bernoulli_mixture", {"algorithms": ["svi"], "num_particles": 4},
     "num_particles= averages Monte-Carlo"),
    ("bayesian_gmm", {"algorithms": ["em"], "mean_prior": [0.0, 0.0]},
     r"mean_prior=\[0.0, 0.0\] would have no effect .*'em' on 'gmm'"),
    ("bayesian_gmm", {"algorithms": ["cavi"], "reg_covar": "a"}, "reg_covar must be a float"),
    ("bayesian_gmm", {"algorithms": ["svi"], "elbo": "trce"}, "elbo must be one of"),
    ("bayesian_gmm", {"algorithms": ["svi"], "num_particles": 1.5}, "num_particles must be an"),
    ("bayesian_gmm", {"algorithms": "cavi"}, "algorithms must be a non-empty list"),
    ("bayesian_gmm", {"algorithms": ["cavi"], "backends": ["jax"]}, "Unknown backend 'jax'"),
    ("bayesian_gmm", {"algorithms": ["cavi"], "seeds": []}, "seeds must be a non-empty list"),
    ("bayesian_gmm", {"algorithms": ["cavi"], "colour": 1}, r"unknown option\(s\) \['colour'\]"),
    ("bayesian_gmm", {"algorithms": ["cavi"], "reference": "bogus"}, "reference must be"),
    ("bayesian_gmm", {"algorithms": ["svi"], "guides": "enum"}, "guides must be a non-empty list"),
    ("bayesian_gmm", {"algorithms": ["cavi"], "progress": "no"}, "progress must be True or"),
    ("gmm", {"algorithms": ["cavi", "nuts"]},
     r"No algorithm in \['cavi', 'nuts'\] fits model 'gmm'; .* are \['em', 'svi'\]"),
    ("bayesian_gmm", {"algorithms": ["cavi", "nuts"], "num_steps": {"cavi": 2, "nuts": 3}},
     r"num_steps names the sampler\(s\) \['nuts'\], whose length is their warm-up and draws"),
    ("bayesian_gmm", {"algorithms": ["nuts"], "tol": 1e-3}, r"tol=0.001 would have no effect"),
    ("gmm", {"algorithms": ["em"], "guides": ["enum"]},
     r"guides=\['enum'\] would have no effect: no algorithm .*\['em'\]\) takes a guide"),
    ("bayesian_gmm", {"algorithms": ["cavi", "svi"], "guides": ["gumbell"]},
     r"Unknown guide\(s\) \['gumbell'\] for 'bayesian_gmm'.*Did you mean 'gumbel'"),
]  # fmt: skip


@pytest.mark.parametrize(
    "model,kwargs,message",
    BAD_COMPARISONS,
    ids=[f"{m}-{i}" for i, (m, *_) in enumerate(BAD_COMPARISONS)],
)
def test_a_bad_comparison_is_refused_before_any_run(no_steps, model, kwargs, message):
    kwargs = {"backends": ["pyro"], "num_steps": 2, **SMALL[model], **kwargs}
    with pytest.raises(ERRORS, match=message):
        inference.compare(model, DATA[model], **kwargs)


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


def test_a_list_or_tuple_of_arrays_is_a_stream_and_the_refusal_says_how_to_pass_arrays(no_steps):
    in_memory = r"is read as a stream of minibatches, .*pass a dict .*\{'x': np.asarray\(...\)\}"
    for data in ((GMM_X,), [GMM_X]):
        with pytest.raises(
            TypeError, match=rf"needs num_data=.* A {type(data).__name__} {in_memory}"
        ):
            _fit("bayesian_gmm", "svi", "pyro", data=data)
        with pytest.raises(ValueError, match=rf"batch_size= is for arrays.*{in_memory}"):
            _fit("bayesian_gmm", "svi", "pyro", data=data, batch_size=10)
        with pytest.raises(ValueError, match=rf"need a minibatch algorithm.*{in_memory}"):
            _fit("bayesian_gmm", "cavi", "pyro", data=data)


# --- Options a fit would ignore ------------------------------------------------------------------


def test_jit_is_accepted_and_ignored_on_numpyro():
    svi = inference.get_algorithm("svi")
    for model in ("bayesian_gmm", "vae", "bernoulli_mixture"):
        spec = zoo.get_model(model)
        assert svi.options({"jit": True}).ignores(spec, "numpyro", "jit") is None


def test_num_particles_is_taken_where_the_guide_draws_latents():
    svi = inference.get_algorithm("svi")
    for model, guide in (("bayesian_gmm", "enum"), ("bayesian_gmm", "gumbel"), ("vae", None)):
        spec = zoo.get_model(model)
        for backend in ("pyro", "numpyro"):
            options = svi.options({"guide": guide, "num_particles": 4})
            assert options.ignores(spec, backend, "num_particles") is None
    for backend in ("pyro", "numpyro"):  # an importance-weighted bound of 4 samples
        options = svi.options({"num_particles": 4, "elbo": "iwae"})
        assert options.ignores(zoo.get_model("vae"), backend, "elbo") is None


def test_every_deterministic_guide_is_checked_at_registration():
    """The guides the spec declares deterministic are what SVI refuses num_particles= on: a
    guide declared so that draws a latent at random (a discrete one it does not mark to be
    summed out included) is refused when the model is registered."""
    from zoo.testing import _check_deterministic_guide, _Site

    kind = zoo.GuideKind(enumerated=True, deterministic=True)
    drawn = _Site(False, frozenset(), False, False, False, support="Real()")
    summed_out = drawn._replace(enumerable=True, enumerated=True, support="IntegerInterval()")
    sites = {"means": drawn, "z": summed_out}
    spec = zoo.get_model("bayesian_gmm")
    with pytest.raises(zoo.ModelSpecError, match=r"draws the site\(s\) \['means'\] at random"):
        _check_deterministic_guide(spec, "numpyro", "enum", kind, sites)
    sites["means"] = drawn._replace(point_mass=True)
    _check_deterministic_guide(spec, "numpyro", "enum", kind, sites)
    sites["z"] = summed_out._replace(enumerated=False)  # a Categorical draw
    with pytest.raises(zoo.ModelSpecError, match=r"draws the site\(s\) \['z'\] at random"):
        _check_deterministic_guide(spec, "numpyro", "enum", kind, sites)
    # The whole registration check refuses it too: bayesian_gmm's "enum" guide samples the
    # global factors.
    kinds = {"enum": zoo.GuideKind(enumerated=True, deterministic=True)}
    wrong = dataclasses.replace(spec, name="wrongly_deterministic", guide_kinds=kinds)
    with pytest.raises(zoo.ModelSpecError, match=r"is declared deterministic \(guide_kinds\)"):
        check_registration(wrong)


def test_the_guide_support_check_reads_only_what_it_can_tell():
    """A real-line guide site for a positive latent is refused; a point mass (a MAP guide's
    Delta), a latent whose support is unknown or depends on its arguments, and a guide site on
    a narrower support are left alone."""
    from torch.distributions import constraints

    from zoo.testing import _check_guide_support, _Site, _support

    spec = zoo.get_model("bayesian_gmm")
    real = _Site(
        False, frozenset(), False, False, False, _support(_Supported(constraints.real_vector))
    )
    positive = real._replace(support=_support(_Supported(constraints.positive)))
    unknown = real._replace(support=_support(_Supported(constraints.dependent)))
    assert (real.support, positive.support, unknown.support) == (
        "Real()",
        "GreaterThan(lower_bound=0.0)",
        "",
    )
    with pytest.raises(zoo.ModelSpecError, match=r"draws site\(s\) \['rate'\] on the whole real"):
        _check_guide_support(spec, "pyro", "g", {"rate": positive}, {"rate": real})
    _check_guide_support(
        spec, "pyro", "g", {"rate": positive}, {"rate": real._replace(point_mass=True)}
    )
    _check_guide_support(spec, "pyro", "g", {"rate": unknown}, {"rate": real})
    _check_guide_support(spec, "pyro", "g", {"rate": real}, {"rate": positive})


class _Supported:
    """A stand-in distribution with only a support."""

    def __init__(self, support):
        self.support = support


def test_an_init_the_sampler_would_ignore_is_refused(no_steps, regression_spec):
    data = regression_spec.make_data(np.random.default_rng(0), 20)
    for init in ("kmeans", {"coef_loc": np.zeros(3)}):
        with pytest.raises(ValueError, match="init= sets where the chains of a mixture start"):
            inference.fit(regression_spec, data, "nuts", "pyro", init=init, progress=False)


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


def test_a_tensor_that_requires_grad_is_refused_saying_to_detach_it():
    import torch

    x = torch.tensor(GMM_X, requires_grad=True)
    detach = (
        r"data\['x'\] cannot be read as an array .*requires grad.* Pass data\['x'\]\.detach\(\)"
    )
    with pytest.raises(TypeError, match=detach):
        _fit("bayesian_gmm", "cavi", "pyro", data={"x": x})
    fitted = _fit("bayesian_gmm", "cavi", "pyro", data={"x": x.detach()})
    with pytest.raises(TypeError, match=detach):
        fitted.log_marginal_likelihood({"x": x})


# --- A whole fit result as init names what init takes --------------------------------------------


def test_a_fit_result_as_a_mixtures_init_says_what_init_takes():
    fitted = _fit("bayesian_gmm", "cavi", "pyro")
    message = (
        r"init for a mixture must be one of \['kmeans', .*responsibilities, or \(for "
        r"algorithm='svi' only\) .*; got FitResult\(.*\), whose raw_params start algorithm='svi'"
    )
    for model, algorithm in (("bayesian_gmm", "cavi"), ("bayesian_gmm", "svi"), ("gmm", "em")):
        with pytest.raises(TypeError, match=message):
            _fit(model, algorithm, "pyro", init=fitted)
    with pytest.raises(TypeError, match=message):
        inference.compare(
            "bayesian_gmm", DATA["bayesian_gmm"], algorithms=["cavi"], backends=["pyro"],
            num_steps=2, K=2, init=fitted,
        )  # fmt: skip


# --- Degenerate data are blamed, not a prior the caller never passed -----------------------------


def test_degenerate_data_name_the_data_not_the_prior():
    for data, message in (
        ({"x": GMM_X[:1]}, r"data\['x'\] has 1 row; .* needs at least 2 rows"),
        ({"x": GMM_X * 1e200}, r"values up to .*e\+200, whose squares overflow float64"),
        # Not "linear combinations of others": the covariance underflows to zero.
        (
            {"x": GMM_X * 1e-200},
            r"column\(s\) \[0, 1\] .* vary by at most .*e-19\d, whose squares "
            r"underflow float64",
        ),
    ):
        with pytest.raises(ValueError, match=message) as info:
            _fit("bayesian_gmm", "cavi", "pyro", data=data, K=1)
        assert "covariance_prior must" not in str(info.value)
    with pytest.raises(ValueError, match=r"data\['x'\] holds values up to"):  # priors given
        _fit("bayesian_gmm", "cavi", "pyro", data={"x": GMM_X * 1e200}, K=1,
             mean_prior=[0.0, 0.0], covariance_prior=np.eye(2))  # fmt: skip
    for backend in ("pyro", "numpyro"):  # the k-means start on them crashed the process
        with pytest.raises(ValueError, match=r"whose squares overflow float64 \(in the k-means"):
            _fit("gmm", "em", backend, data={"x": GMM_X * 1e160}, K=3)
    # One row with a prior given is a model the data can be fitted to.
    one = _fit(
        "bayesian_gmm", "cavi", "pyro", data={"x": GMM_X[:1]}, K=1, covariance_prior=np.eye(2)
    )
    assert np.isfinite(one.objective)


# --- A typo in elbo= lists the values ------------------------------------------------------------


@pytest.mark.parametrize("guide", ["enum", "gumbel"])
def test_an_elbo_typo_lists_the_valid_values(no_steps, guide):
    with pytest.raises(ValueError, match=r"elbo must be one of \['trace', 'meanfield', 'iwae'\]"):
        _fit("bayesian_gmm", "svi", "numpyro", guide=guide, elbo="Trace")
    with pytest.raises(ValueError, match=r"values \['trace', 'meanfield', 'iwae'\], only"):
        _fit("bayesian_gmm", "svi", "numpyro", guide="enum", elbo="iwae")


# --- A diverging learning rate ends in the NaN guard ---------------------------------------------


@pytest.mark.parametrize("model,backend", [("bayesian_gmm", "pyro"), ("gmm", "numpyro")])
def test_a_diverging_learning_rate_ends_in_the_nan_guard(model, backend):
    """Pyro's step raised the Wishart's check of its degrees of freedom; NumPyro's guard then
    failed summarising parameters that were no longer finite ("Singular matrix")."""
    with pytest.raises(NonFiniteObjectiveError, match="Lower the learning rate") as info:
        _fit(model, "svi", backend, lr=1e6, num_steps=5)
    message = str(info.value)
    assert "are not finite or out of range (" in message and "Singular" not in message
    result = info.value.result
    if result is not None:  # the newest parameters that are all finite
        assert all(np.isfinite(v).all() for v in result.raw_params.values())
    if backend == "numpyro":  # functional states: the step before the last is kept
        assert result is not None and "are kept (error.result)" in message


@pytest.mark.slow
@pytest.mark.parametrize(
    "backend,guide,weight_prior,num_steps",
    [
        ("numpyro", "enum", "dirichlet_process", 3),
        ("numpyro", "gumbel", "dirichlet_process", 3),
        ("numpyro", "gumbel-st", "dirichlet_distribution", 3),
        ("numpyro", "enum", "dirichlet_distribution", 3),
        ("pyro", "enum", "dirichlet_process", 1),
        ("pyro", "gumbel-st", "dirichlet_process", 2),
    ],
)
def test_a_learning_rate_of_100_ends_in_the_nan_guard(backend, guide, weight_prior, num_steps):
    """At lr=100 the first step sends the guide's concentrations to about 1e45. NumPyro's next
    step never ended (the Gamma sampler's gradient sums a series of about sqrt(1e45) terms);
    Pyro's raised its Wishart's check of a degrees of freedom rounded to its bound; a fit of one
    step failed summarising its singular matrices."""
    with pytest.raises(NonFiniteObjectiveError, match="Lower the learning rate"):
        _fit(
            "bayesian_gmm",
            "svi",
            backend,
            lr=100.0,
            num_steps=num_steps,
            guide=guide,
            weight_prior=weight_prior,
        )


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_a_last_update_that_is_not_finite_is_not_returned(backend):
    """At lr=100 the objective of step 8 is finite, but its update is not: the fit ended there
    and returned NaN means and infinite covariances with a finite objective."""
    with pytest.raises(NonFiniteObjectiveError, match="finite to the last step, 8") as info:
        inference.fit("gmm", {"x": GMM_X_200}, "svi", backend, lr=100.0, num_steps=8,
                      tol=0, progress=False)  # fmt: skip
    assert "parameters of step 7 are kept" in str(info.value) or info.value.result is not None


def test_a_summary_that_is_not_finite_is_an_error():
    """A Cholesky factor of 1e200 is finite; the covariance it summarises to is not."""
    from inference.loop import final_result

    class Summary:  # stands in for a fit's ResultMaker
        advice = "Lower it."

        def __call__(self, state, history, converged):
            return types.SimpleNamespace(params={"covariances": np.array([state * state])})

    history = {"step": [1, 2], "objective": [-1.0, -1.0], "time": [0.0, 0.0]}
    with pytest.raises(NonFiniteObjectiveError, match=r"step 2 is not finite \(covariances\)"):
        final_result(Summary(), 1e200, history, False)
    assert final_result(Summary(), 2.0, history, False).params["covariances"] == [4.0]

    class Singular(Summary):
        def __call__(self, state, history, converged):
            raise np.linalg.LinAlgError("Singular matrix")

    with pytest.raises(NonFiniteObjectiveError, match="cannot be summarised .*Singular"):
        final_result(Singular(), 0.0, history, False)


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

    def parameters_outside_support(self, state):
        return []

    def describe(self, info):
        return None


class _Summary:
    """A stand-in for a fit's ResultMaker: the parameter and how many steps led to it."""

    advice = "Lower it."

    def __call__(self, state, history, converged):
        if not np.isfinite(state):
            raise np.linalg.LinAlgError("Singular matrix")
        return {"scale": state, "steps": len(history["step"])}


@pytest.mark.parametrize("raises", [True, False])
def test_the_nan_guard_keeps_the_last_finite_parameters(raises):
    from inference.loop import Length, run

    with pytest.raises(NonFiniteObjectiveError, match="Lower it") as info:
        run(Divergent(raises), 1.0, Length(num_steps=10, tol=None, num_data=1), progress=False,
            results=_Summary())  # fmt: skip
    message = str(info.value)
    assert (
        "step 4" in message.lower()
        and "parameters of step 3 are not finite or out of range (scale)" in message
    )
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


@pytest.mark.parametrize(
    "given, named",
    [
        ({"algorithms": ["em", "em"]}, "algorithms"),
        ({"backends": ["pyro", "pyro"]}, "backends"),
        ({"seeds": [0, 1, 0]}, "seeds"),
        ({"seeds": np.array([3, 3])}, "seeds"),
    ],
)
def test_compare_refuses_a_repeated_run(given, named):
    data = {"x": np.random.default_rng(0).normal(size=(30, 2))}
    kwargs = {"algorithms": ["em"], "backends": ["pyro"], "K": 2, "progress": False, **given}
    with pytest.raises(ValueError, match=f"{named} lists .* more than once"):
        inference.compare("gmm", data, **kwargs)


def test_a_comparison_of_numpy_seeds_writes_standard_json():
    """Seeds given as a numpy array are written as ints, and a figure that is not finite (a
    sampler's objective) as null: JSON has no NaN."""
    import json

    data = {"x": np.random.default_rng(0).normal(size=(30, 2))}
    with pytest.warns(inference.ConvergenceWarning):  # 10 draws: too few for its ESS
        table = inference.compare(
            "bayesian_gmm", data, ["nuts"], ["numpyro"], seeds=np.arange(1), K=1, num_warmup=10,
            num_draws=10, num_chains=1, progress=False, num_samples=5,
        )  # fmt: skip
    rows = json.loads(table.to_json(), parse_constant=lambda name: pytest.fail(name))
    assert rows[0]["seed"] == 0 and rows[0]["objective_per_point"] is None


def test_result_methods_check_their_seed():
    res = inference.fit("gmm", {"x": GMM_X}, "em", "pyro", K=2, progress=False)
    with pytest.raises(ValueError, match=r"seed must be an int in the range \[0, 2\*\*63\)"):
        res.log_marginal_likelihood(GMM_X, seed=-1)
    with pytest.raises(TypeError, match="seed must be an int; got float"):
        res.sample_posterior(10, seed=1.5)
    with pytest.raises(TypeError, match="seed must be an int; got NoneType"):
        res.pointwise_log_likelihood({"x": GMM_X}, seed=None)


def test_a_float32_minibatch_fit_on_numpyro_says_nothing_of_its_indices():
    """A float32 NumPyro fit runs outside JAX's 64-bit mode: its minibatch rows are int32."""
    import warnings

    with warnings.catch_warnings():
        warnings.filterwarnings("error", message="Explicitly requested dtype")
        res = _fit("vae", backend="numpyro", batch_size=10, num_steps=3, tol=0, dtype="float32")
    assert res.num_steps == 3


@pytest.mark.parametrize(
    "bad, message",
    [
        ({"x": np.ones(5)}, r"\[.x.\] must have 2 dimensions"),
        ({"x": np.full((4, 2), np.nan)}, r"\[.x.\] contains NaN or inf"),
        ({"y": np.ones((4, 2))}, r"takes \w+ keys \['x'\]"),
        (np.ones((4, 2)), "must be a dict mapping"),
    ],
)
@pytest.mark.parametrize("where", ["validation_data", "test_data"])
def test_bad_held_out_data_is_named_as_the_caller_named_it(bad, message, where):
    data = {"x": np.random.default_rng(0).normal(size=(30, 2))}
    if where == "validation_data":
        run = lambda: inference.fit(  # noqa: E731
            "gmm", data, "svi", "pyro", K=2, num_steps=2, progress=False, validation_data=bad
        )
    else:
        run = lambda: inference.compare(  # noqa: E731
            "gmm", data, ["em"], ["pyro"], K=2, progress=False, test_data=bad
        )
    with pytest.raises((ValueError, TypeError), match=message) as err:
        run()
    assert str(err.value).startswith(where) or f"takes {where} keys" in str(err.value)


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
@pytest.mark.parametrize("model, algorithm", [("gmm", "em"), ("bayesian_gmm", "cavi")])
def test_features_that_cannot_fit_in_memory_are_refused_with_the_figure(
    monkeypatch, backend, model, algorithm
):
    from zoo import quadratic_features

    monkeypatch.setattr(quadratic_features, "physical_memory", lambda: 2**19)  # 512 KiB
    x = np.random.default_rng(0).normal(size=(200, 30))  # 200 x 496 features: 0.8 MB
    with pytest.raises(ValueError, match=r"200 points in 30 dimensions holds 0\.0 GiB.*0\.0 GiB"):
        inference.fit(model, {"x": x}, algorithm, backend, K=2, num_steps=2, progress=False)


def test_high_dimensional_mixtures_need_no_fourth_power_of_memory():
    """The symmetric matrices are gathered from the triangle's features, not multiplied by a
    (D (D + 1) / 2, D^2) map: D = 120 needed 836 MB for it, D = 1,000 3.6 TiB."""
    import torch

    from zoo import quadratic_features
    from zoo.array_namespace import TorchOps

    x = torch.as_tensor(np.random.default_rng(0).normal(size=(5, 120)))
    cache = quadratic_features.quadratic_cache(x, TorchOps())
    assert sum(np.asarray(v).nbytes for v in cache.values() if hasattr(v, "nbytes")) < 20e6


def test_numpyro_parameters_are_named_as_pyro_names_them():
    """A network's pytree is named by its leaves' paths; an array, or a number that a guide
    keeps as a Python or NumPy scalar, by its site's name."""
    import jax.numpy as jnp

    from zoo.weights import flatten_params

    params = {"a": 1.0, "b": np.float64(2.0), "c": jnp.ones(2), "net$params": {"fc": [jnp.ones(1)]}}
    assert list(flatten_params(params)) == ["a", "b", "c", "net.fc.0"]


def test_a_misspelt_guide_is_named_before_an_option_it_would_not_use(no_steps):
    """Not "temperature= anneals a relaxed guide; guide 'gumbell' does not use it"."""
    with pytest.raises(ValueError, match=r"Unknown guide 'gumbell'.*Did you mean 'gumbel'"):
        _fit("bayesian_gmm", guide="gumbell", temperature=(1.0, 0.2))


def test_pyro_nuts_takes_any_seed_fit_takes():
    """Each chain's torch seed stays below 2**64, where a seed of 2**62 overflowed."""
    res = inference.fit(
        "bayesian_gmm", {"x": GMM_X[:20]}, "nuts", "pyro", K=1, seed=2**62, num_chains=1,
        num_warmup=2, num_draws=2, max_tree_depth=2, progress=False,
    )  # fmt: skip
    assert res.options["num_chains"] == 1 and np.isfinite(res.objective)
