"""What registration and the twin checks refuse, beyond the slips of ``test_extend.py``: twins
whose models name or constrain a ``param`` site otherwise, algorithms whose ``Options`` or
``traits`` the layer cannot read (registered at run time or from a plugin), data contracts
numpy cannot check, and a guide named twice. Each refusal names what to change; a declaration
written right still passes."""

from __future__ import annotations

import dataclasses
import sys
import types
from dataclasses import dataclass

import pytest

import inference
import zoo
from inference import registry
from inference.algorithm import Algorithm, Info, NoOptions, Traits
from zoo import ModelSpecError
from zoo.testing import check_spec, check_twins_and_log_joint

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny tensors


# --- The models' param sites ------------------------------------------------------------------


def _fake_module(monkeypatch, name: str, **attributes) -> str:
    """A module that exists only in memory, importable by ``name``."""
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    monkeypatch.setitem(sys.modules, name, module)
    return name


def _pyro_twin():
    """Probabilistic PCA with point-estimated loadings ``W`` and a positive noise ``sigma``."""
    import pyro
    import pyro.distributions as dist
    import torch
    from pyro.distributions import constraints

    def model(data, config, temperature=None, init=None):
        x, init = data["x"], init or {}
        like = {"dtype": x.dtype, "device": x.device}

        def start(name, default):  # a twin starts from init where it holds the parameter
            return torch.as_tensor(init[name], **like) if name in init else default

        w = pyro.param("W", lambda: start("W", torch.eye(x.shape[1], 2, **like)))
        sigma = pyro.param(
            "sigma", start("sigma", torch.ones((), **like)), constraint=constraints.positive
        )
        with pyro.plate("data", x.shape[0]):
            z = pyro.sample("z", dist.Normal(torch.zeros(2, **like), 1.0).to_event(1))
            pyro.sample("x", dist.Normal(z @ w.T, sigma).to_event(1), obs=x)

    def make_guide(name, config, init):
        def guide(data, config, temperature=None):
            x = data["x"]
            loc = pyro.param("z_loc", torch.zeros(x.shape[0], 2, dtype=x.dtype))
            with pyro.plate("data", x.shape[0]):
                pyro.sample("z", dist.Normal(loc, 1.0).to_event(1))

        return guide

    return {"model": model, "make_guide": make_guide}


def _numpyro_twin(loadings="W", noise_constraint="positive"):
    """The NumPyro twin of :func:`_pyro_twin`, its loadings named ``loadings`` and its noise
    under ``noise_constraint``. The starting values are the Pyro twin's, so a parameter
    named otherwise gives the same log-joint: only its name tells the twins apart."""
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro.distributions import constraints

    def model(data, config, temperature=None, init=None):
        x, init = data["x"], init or {}
        w = numpyro.param(loadings, init.get(loadings, jnp.eye(x.shape[1], 2, dtype=x.dtype)))
        sigma = numpyro.param(
            "sigma",
            init.get("sigma", jnp.ones((), dtype=x.dtype)),
            constraint=getattr(constraints, noise_constraint),
        )
        with numpyro.plate("data", x.shape[0]):
            z = numpyro.sample("z", dist.Normal(jnp.zeros(2, dtype=x.dtype), 1.0).to_event(1))
            numpyro.sample("x", dist.Normal(z @ w.T, sigma).to_event(1), obs=x)

    def make_guide(name, config, init):
        def guide(data, config, temperature=None):
            x, start = data["x"], init or {}
            loc = numpyro.param("z_loc", start.get("z_loc", jnp.zeros((x.shape[0], 2))))
            with numpyro.plate("data", x.shape[0]):
                numpyro.sample("z", dist.Normal(loc, 1.0).to_event(1))

        return guide

    return {"model": model, "make_guide": make_guide}


@dataclass(frozen=True)
class _Config:
    dim: int


def _ppca_spec(monkeypatch, **slip) -> zoo.ModelSpec:
    pyro_path = _fake_module(monkeypatch, "fake_ppca_pyro_twin", **_pyro_twin())
    numpyro_path = _fake_module(monkeypatch, "fake_ppca_numpyro_twin", **_numpyro_twin(**slip))
    return zoo.ModelSpec(
        name="ppca_params",
        description="Probabilistic PCA, point-estimated loadings and noise",
        data={"x": zoo.DataField(2, "f", "(N, D) observations")},
        backends={"pyro": pyro_path, "numpyro": numpyro_path},
        guides=("local",),
        prepare=lambda data: _Config(int(data["x"].shape[1])),
        make_data=lambda rng, n: {"x": rng.standard_normal((n, 3))},
        config_type=_Config,
    )


@pytest.mark.parametrize(
    "slip,message",
    [
        ({}, None),
        (
            {"loadings": "W_renamed"},
            r"the model has other parameters in the two twins: only in Pyro \['W'\], only in "
            r"NumPyro \['W_renamed'\]. Name each param site the same in both twins",
        ),
        (
            {"noise_constraint": "real"},
            r"the model constrains parameters otherwise in the two twins: 'sigma' "
            r"\(GreaterThan\(lower_bound=0\.0\) in Pyro, Real\(\) in NumPyro\)",
        ),
    ],
)
def test_the_log_joint_check_holds_the_models_params_to_each_other(monkeypatch, slip, message):
    """A NumPyro model whose param site is named otherwise keeps its own starting value, and
    one constrained otherwise has the same value: both give the same log-joint, but a fit's
    ``raw_params`` would not carry across. The check names the parameter."""
    spec = _ppca_spec(monkeypatch, **slip)
    if message is None:
        check_twins_and_log_joint(spec)
        return
    with pytest.raises(AssertionError, match=message):
        check_twins_and_log_joint(spec)


# --- Algorithms the layer cannot read ---------------------------------------------------------


class _Base(Algorithm):
    """Fits nothing of interest: only its declarations are under test."""

    traits = Traits(stochastic=False, minibatch=False, num_steps=5, tol=None, objective="x")

    def unsupported(self, spec):
        return None if spec.updates is not None else "it needs closed-form updates"

    def init(self, problem, options):
        return 0

    def step(self, state):
        return state + 1, Info(0.0)

    def get_params(self, state):
        return {}


class _PlainOptions:
    def __init__(self, a=1):
        self.a = a


@dataclass(frozen=True)
class _RequiredOptions:
    a: int
    b: int = 2


def _algorithm(name: str, **attributes) -> type:
    return type(name.replace("-", "_"), (_Base,), {"name": name, **attributes})


BROKEN_ALGORITHMS = [
    ("plain-options", {"Options": _PlainOptions}, "Options must be a dataclass"),
    ("required-option", {"Options": _RequiredOptions}, r"needs a default .*\['a'\] have none"),
    ("no-traits", {"traits": None}, "has no traits: set the class attribute traits"),
    ("dict-traits", {"traits": {"estimate": "point"}}, "has no traits"),
]


@pytest.mark.parametrize("name,attributes,message", BROKEN_ALGORITHMS)
def test_an_algorithm_the_layer_cannot_read_is_refused(name, attributes, message):
    """Refused at registration, naming the algorithm, where it would otherwise break every
    comparison (listing every algorithm's options) or fail its first fit."""
    with pytest.raises(ValueError, match=f"algorithm {name!r}.*{message}"):
        inference.register_algorithm(_algorithm(name, **attributes))
    assert name not in inference.list_algorithms()
    assert "lr" in registry.every_option_name()  # what compare lists first


def test_an_algorithm_written_right_registers():
    """The checks refuse only what the layer cannot read: a dataclass with defaults (or no
    options at all) and Traits register."""

    @dataclass(frozen=True)
    class Options:
        a: int = 1
        b: list = dataclasses.field(default_factory=list)

    for name, options in [("fine-options", Options), ("fine-no-options", NoOptions)]:
        try:
            inference.register_algorithm(_algorithm(name, Options=options))
            assert set(options.__dataclass_fields__) <= registry.every_option_name()
        finally:
            if name in inference.list_algorithms():
                inference.unregister_algorithm(name)


def test_traits_refuse_an_unknown_estimate():
    """The layer branches on ``estimate`` by its value; an unknown one is refused where the
    traits are written, with the valid values."""
    traits = {"stochastic": False, "minibatch": False, "num_steps": 5, "tol": None}
    with pytest.raises(ValueError, match=r"estimate must be one of \['posterior', 'point', 'dr"):
        Traits(**traits, objective="x", estimate="bogus")
    with pytest.raises(ValueError, match="Did you mean 'point'"):
        Traits(**traits, objective="x", estimate="pont")
    for estimate in ("posterior", "point", "draws"):
        assert Traits(**traits, objective="x", estimate=estimate).estimate == estimate


def test_a_plugin_algorithm_the_layer_cannot_read_is_skipped(monkeypatch, tmp_path, gmm_data):
    """An installed plugin whose Options is no dataclass is skipped with a warning naming it;
    the other algorithms keep working, compare included."""
    info = tmp_path / "broken_algorithm_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: broken-algorithm-plugin\nVersion: 0.1\n"
    )
    (info / "entry_points.txt").write_text(
        "[inference.algorithms]\nplain-options = fake_algorithm_plugin:PlainOptions\n"
    )
    broken = _algorithm("plain-options", Options=_PlainOptions)
    _fake_module(monkeypatch, "fake_algorithm_plugin", PlainOptions=broken)
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.warns(inference.registry.InferencePluginWarning, match="broken-algorithm-plugin"):
        added = inference.load_plugins()
    assert "plain-options" not in added
    assert "plain-options" not in inference.list_algorithms()
    table = inference.compare(
        "gmm", {"x": gmm_data}, algorithms=["em"], backends=["pyro"], K=2, num_steps=3, tol=0
    )
    assert [row["algorithm"] for row in table.rows] == ["em"]


# --- The spec alone ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "field,message",
    [
        (
            zoo.DataField(2, "float"),
            r"data\['x'\].kind must be numpy dtype kind codes.*got 'float'",
        ),
        (zoo.DataField(2, "int"), r"'iu' for integers of either sign; got 'int'"),
        (zoo.DataField(2, ""), r"data\['x'\].kind must be"),
        (zoo.DataField(2, 1), r"data\['x'\].kind must be"),
        (zoo.DataField(-1, "f"), r"data\['x'\].ndim must be an int >= 0.*got -1"),
        (zoo.DataField(2.0, "f"), r"data\['x'\].ndim must be an int >= 0.*got 2.0"),
        (zoo.DataField(True, "f"), r"data\['x'\].ndim must be an int >= 0.*got True"),
    ],
)
def test_a_data_contract_numpy_cannot_check_is_refused(field, message):
    """A kind is numpy's dtype kind codes, read one character at a time: a word such as
    "float" would otherwise register and fail on the first integer data with a bare KeyError."""
    spec = dataclasses.replace(zoo.get_model("gmm"), name="gmm_kind", data={"x": field})
    with pytest.raises(ModelSpecError, match=message):
        check_spec(spec)
    with pytest.raises(ModelSpecError, match=message):
        zoo.register(spec, check=False)
    assert "gmm_kind" not in zoo.list_models()


@pytest.mark.parametrize("kind", ["f", "iu", "fiub", "b"])
def test_every_data_kind_numpy_checks_passes(kind):
    spec = dataclasses.replace(zoo.get_model("gmm"), data={"x": zoo.DataField(2, kind)})
    check_spec(spec)
    check_spec(dataclasses.replace(spec, data={"x": zoo.DataField(0, kind)}))


def test_a_guide_named_twice_is_refused():
    spec = dataclasses.replace(
        zoo.get_model("gmm"), name="gmm_twice", guides=("enum", "enum"), guide_kinds={}
    )
    with pytest.raises(ModelSpecError, match=r"guides lists \['enum'\] more than once"):
        check_spec(spec)


def test_registration_still_accepts_every_model_of_the_zoo():
    for name in zoo.list_models():
        check_spec(zoo.get_model(name, check=False))
