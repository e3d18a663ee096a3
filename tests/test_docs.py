"""The API reference's examples run and print what they say they print.

Every public object of the reference (``docs/api/``) has a numpydoc docstring with an
``Examples`` section; this runs those examples (with the examples of the object's methods and
properties) as doctests. The examples fit tiny data sets for a few steps, so the whole module
takes seconds, not minutes.
"""

from __future__ import annotations

import doctest
import importlib
import inspect
import re
from pathlib import Path

import pytest

API_PAGES = Path(__file__).resolve().parents[1] / "docs" / "api"

#: The objects of the API reference, as ``"module:name"``.
OBJECTS = [
    # inference
    "inference:fit",
    "inference:make_problem",
    "inference:compare",
    "inference.compare:Comparison",
    "inference:load",
    "inference:FitResult",
    "inference:list_algorithms",
    "inference:get_algorithm",
    "inference:CheckpointError",
    "inference:CheckpointInUseError",
    "inference:ConcurrentFitError",
    "inference:ForkedProcessError",
    "inference:NonFiniteObjectiveError",
    "inference:ConvergenceWarning",
    "inference:DataError",
    "inference:StreamEndedError",
    # the model registry
    "zoo:ModelSpec",
    "zoo:DataField",
    "zoo:GuideKind",
    "zoo:ModelSpecError",
    "zoo:register",
    "zoo:unregister",
    "zoo:on_registry_change",
    "zoo:get_model",
    "zoo:list_models",
    # checking a model
    "inference.tools.conformance:check_model",
    "inference.tools.conformance:ConformanceReport",
    "inference.tools.conformance:CheckResult",
    "zoo.testing:check_spec",
    "zoo.testing:check_registration",
    "zoo.testing:check_twins_and_log_joint",
    "zoo.testing:check_twin_guides",
    # data sets
    "zoo.datasets:load_mnist",
    "zoo.datasets:load_binarized_mnist",
    "zoo.datasets:dynamic_binarize",
    "zoo.datasets:load_digits_binarized",
    "zoo.datasets:download",
    "zoo.datasets:DatasetError",
    "zoo.datasets:resolve_data_dir",
    # attention
    *(
        f"zoo.attention.{module}:{name}"
        for module in ("torch_attention", "jax_attention", "numpy_attention")
        for name in (
            "scaled_dot_product_attention",
            "multi_head_attention",
            "self_attention",
            "cross_attention",
        )
    ),
    "zoo.attention.torch_attention:init_params",
    "zoo.attention.torch_attention:MultiHeadAttention",
    "zoo.attention.jax_attention:init_params",
    "zoo.attention.jax_attention:MultiHeadAttention",
    # distributions
    "zoo.distributions:GumbelSoftmax",
    "zoo.distributions:ExpRelaxedCategorical",
    "zoo.distributions:RelaxedOneHotCategorical",
    "zoo.distributions:StickBreakingCategorical",
    "zoo.distributions:stick_breaking_log_weights",
    "zoo.distributions:Wishart",
    "zoo.distributions:Normal",
    "zoo.distributions:LowerCholeskyTransform",
    "zoo.distributions:StickBreakingTransform",
    "zoo.distributions:ScaleFreeLowerCholeskyTransform",
    "zoo.distributions:scaled_real",
    "zoo.torch_distributions:GumbelSoftmax",
    "zoo.torch_distributions:ExpRelaxedCategorical",
    "zoo.torch_distributions:StickBreakingCategorical",
    "zoo.torch_distributions:stick_breaking_log_weights",
    "zoo.torch_distributions:Wishart",
    "zoo.torch_distributions:StandardNormal",
    "zoo.torch_distributions:PositiveDefiniteFromVector",
    "zoo.torch_distributions:ScaleFreeLowerCholeskyTransform",
    "zoo.torch_distributions:scaled_real",
    "zoo.bayesian_attention.torch_distributions:LogScaleWeibull",
    "zoo.bayesian_attention.torch_distributions:WeibullAttention",
    "zoo.bayesian_attention.torch_distributions:GammaAttention",
    "zoo.bayesian_attention.torch_distributions:LogNormalAttention",
    "zoo.bayesian_attention.torch_distributions:kl_weibull_gamma",
    "zoo.bayesian_attention.torch_distributions:kl_lognormal_lognormal",
    "zoo.bayesian_attention.torch_distributions:kl_weibull_gamma_attention",
    "zoo.bayesian_attention.torch_distributions:kl_lognormal_attention",
    "zoo.bayesian_attention.numpyro_distributions:LogScaleWeibull",
    "zoo.bayesian_attention.numpyro_distributions:LogNormalFlatNoise",
    "zoo.bayesian_attention.numpyro_distributions:GammaPrior",
    "zoo.bayesian_attention.numpyro_distributions:LogNormalPrior",
    "zoo.bayesian_attention.numpyro_distributions:kl_weibull_gamma",
    "zoo.bayesian_attention.numpyro_distributions:kl_lognormal_lognormal",
]

#: Objects whose examples read MNIST from ``$ZOO_DATA_DIR`` (set from the ``data_dir`` fixture).
NEEDS_MNIST = {
    "zoo.datasets:load_mnist",
    "zoo.datasets:load_binarized_mnist",
    "zoo.datasets:download",
}

FLAGS = doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny tensors


def resolve(path: str):
    """The object at ``"module:name"``."""
    module, _, name = path.partition(":")
    obj = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def sections(doc: str) -> set[str]:
    """The numpydoc section titles of a docstring."""
    lines = inspect.cleandoc(doc or "").splitlines()
    return {
        lines[i].strip()
        for i in range(len(lines) - 1)
        if re.fullmatch(r"-{3,}", lines[i + 1].strip()) and lines[i].strip()
    }


def doctests(path: str) -> list[doctest.DocTest]:
    """The doctests of an object and of its methods and properties."""
    obj = resolve(path)
    module = inspect.getmodule(obj)
    found = doctest.DocTestFinder(recurse=True).find(obj, path, module=module)
    return [test for test in found if test.examples]


def test_the_reference_documents_these_objects():
    """The pages of ``docs/api/`` document (autodoc) the objects whose examples run here."""
    directive = re.compile(r"^\.\. auto(?:function|class|exception):: (\S+)", re.M)
    documented = {
        name for page in API_PAGES.glob("*.md") for name in directive.findall(page.read_text())
    }
    assert documented == {path.replace(":", ".") for path in OBJECTS}


@pytest.mark.parametrize("path", OBJECTS)
def test_docstring_sections(path):
    """Every object documents its parameters, what it returns (or holds) and an example."""
    obj = resolve(path)
    found = sections(obj.__doc__)
    required = [{"Examples"}]
    if inspect.isroutine(obj):
        if any(p not in ("self", "cls") for p in inspect.signature(obj).parameters):
            required.append({"Parameters"})
        required.append({"Returns", "Yields"})
    else:
        required.append({"Parameters", "Attributes"})
    missing = [" or ".join(sorted(names)) for names in required if not names & found]
    assert not missing, f"{path}: the docstring has no {missing} section"


@pytest.mark.parametrize("path", OBJECTS)
def test_examples(path, request, monkeypatch):
    """The examples of the object, its methods and its properties print what they show."""
    if path in NEEDS_MNIST:
        monkeypatch.setenv("ZOO_DATA_DIR", str(request.getfixturevalue("data_dir")))
    tests = doctests(path)
    assert tests, f"{path} has no examples"
    runner = doctest.DocTestRunner(optionflags=FLAGS)
    report, failed = [], 0
    for test in tests:
        failed += runner.run(test, out=report.append, clear_globs=True).failed
    assert not failed, "".join(report)


def test_the_generated_pages_are_the_same_whatever_plugins_are_installed(monkeypatch):
    """A model or algorithm from outside the zoo has no page in the site: the tables and lists
    that the site generates name the zoo's own only, so the build links to no missing page."""
    import dataclasses
    import sys

    import inference
    import zoo

    monkeypatch.syspath_prepend(str(Path(__file__).resolve().parents[1] / "docs" / "_ext"))
    import zoo_reference

    before = {
        "models": zoo_reference.models_table(),
        "algorithms": zoo_reference.algorithms_table(),
        "documented": (zoo_reference.documented_models(), zoo_reference.documented_algorithms()),
    }
    spec = zoo.get_model("gmm")
    plugin = dataclasses.replace(
        spec, name="plugin_mixture", backends={b: "plugin_pkg.model" for b in spec.backends}
    )
    zoo.register(plugin, check=False)
    em = type(inference.get_algorithm("em"))
    inference.register_algorithm(type("PluginEM", (em,), {"name": "plugin-em"}))
    try:
        assert zoo_reference.models_table() == before["models"]
        assert zoo_reference.algorithms_table() == before["algorithms"]
        # What the model and algorithm pages list (their option tables need the docs extra).
        documented = (zoo_reference.documented_models(), zoo_reference.documented_algorithms())
        assert documented == before["documented"]
        assert "plugin_mixture" in zoo.list_models() and "plugin-em" in inference.list_algorithms()
    finally:
        zoo.unregister("plugin_mixture")
        inference.unregister_algorithm("plugin-em")
        sys.modules.pop("zoo_reference", None)


def test_option_docs_name_each_option_with_its_type_and_meaning():
    """``zoo fit MODEL --help`` and the site's option tables read the numpydoc ``Parameters``
    section: an entry naming two options documents both, "optional" stays in the type, and a
    description over several lines reads as one."""
    import zoo
    from zoo.docstrings import parameter_docs

    def options(K, reg_covar=1e-6, a=0.0, b=0.0):
        """Options.

        Parameters
        ----------
        K : int
            Number of components,
            at least one.
        reg_covar : float, optional
            Added to the diagonal.
        a, b : float
            Two bounds.
        """

    assert parameter_docs(options) == {
        "K": ("int", "Number of components, at least one."),
        "reg_covar": ("float, optional", "Added to the diagonal."),
        "a": ("float", "Two bounds."),
        "b": ("float", "Two bounds."),
    }
    for name in zoo.list_models():  # every option of every model is documented
        prepare = zoo.get_model(name, check=False).prepare
        documented = parameter_docs(prepare)
        taken = [p for p in inspect.signature(prepare).parameters if p not in ("data", "x")]
        assert all(documented.get(p) and documented[p].meaning for p in taken), (name, taken)
