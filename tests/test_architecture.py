"""The house's rules, read from the code itself.

* Imports run one way: ``zoo`` (the models) imports nothing of ``inference`` (the layer that
  fits them), and no two modules of either import each other in a circle, counting the imports
  made inside functions too (an import moved into a function to dodge a circle still counts).
* The inference layer knows models only through what their specs declare: no registered model's
  name, and none of their sample or parameter site names, stands in its code as a string.
* An algorithm's name stands as a string only in the module that defines the algorithm; the
  facade, the loop, the result, ``compare``, the command line and the conformance suite read
  everything else from its registry entry.

Docstrings are documentation and are not read; comments are not in the syntax tree.
"""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
import pytest

import inference
import zoo

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("zoo", "inference")


def _modules() -> dict[str, Path]:
    out = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts = parts[:-1]
            out[".".join(parts)] = path
    return out


MODULES = _modules()


def _target(name: str) -> str | None:
    """The project module an import of ``name`` loads (its longest known prefix)."""
    parts = name.split(".")
    while parts:
        candidate = ".".join(parts)
        if candidate in MODULES:
            return candidate
        parts.pop()
    return None


def _imports(module: str) -> set[str]:
    """Every project module ``module`` imports, at the top or inside a function."""
    tree = ast.parse(MODULES[module].read_text())
    package = module if MODULES[module].name == "__init__.py" else module.rpartition(".")[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the package, up level - 1
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            # ``from a import b`` loads a.b when b is a module, else a.
            names = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in MODULES else base
                     for alias in node.names]  # fmt: skip
        else:
            continue
        found |= {t for t in map(_target, names) if t is not None and t != module}
    return found


GRAPH = {module: _imports(module) for module in MODULES}


def test_models_import_nothing_of_the_inference_layer():
    upward = sorted(
        f"{module} -> {target}"
        for module, targets in GRAPH.items()
        if module.split(".")[0] == "zoo"
        for target in targets
        if target.split(".")[0] == "inference"
    )
    assert upward == []


def test_no_import_circles():
    # Tarjan's strongly connected components: any of more than one module is a circle.
    index, low, stack, on_stack, circles, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in GRAPH[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for v in GRAPH:
        if v not in index:
            visit(v)
    assert circles == []


def test_the_graph_reader_sees_what_it_should():
    """The checks above can fail: the reader finds imports at the top and inside functions."""
    assert "zoo.spec" in GRAPH["zoo"]
    assert "inference.registry" in GRAPH["inference.api"]
    assert "inference.backends" in GRAPH["inference.result"]
    assert "zoo.initialization" in GRAPH["zoo.updates"]


def _string_constants(path: Path) -> list[tuple[int, str]]:
    """(line, value) of every string in the code of ``path``, docstrings left out."""
    tree = ast.parse(path.read_text())
    docstrings = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                docstrings.add(id(body[0].value))
    return [
        (node.lineno, node.value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant)
        and isinstance(node.value, str)
        and id(node) not in docstrings
    ]


def _layer_strings() -> list[tuple[str, int, str]]:
    return [
        (module, line, value)
        for module, path in MODULES.items()
        if module.split(".")[0] == "inference"
        for line, value in _string_constants(path)
    ]


def _site_names(spec) -> set[str]:
    """The sample and parameter sites of a model's Pyro twin and of every guide, traced on the
    spec's example data."""
    import pyro
    import torch
    from pyro.poutine.util import site_is_subsample

    from zoo import testing

    data, config, start = testing.example_problem(spec)
    _, tdata, tconfig = testing._backend_problem("pyro", data, config)
    twin = spec.twin("pyro")
    runs = [(None, spec.build_model("pyro", tconfig, start))]
    runs += [(g, twin.make_guide(g, tconfig, start)) for g in spec.guides]
    names = set()
    for guide, fn in runs:
        temperature = testing._svi_temperature(twin, spec.guide_kind(guide, "pyro"), config)
        if temperature is not None:
            temperature = torch.tensor(temperature, dtype=torch.float64)
        with pyro.get_param_store().scope(), torch.random.fork_rng():
            trace = pyro.poutine.trace(fn).get_trace(tdata, tconfig, temperature=temperature)
        # A plate's subsample site bears the plate's name ("data" in every model): not a site.
        names |= {
            name
            for name, site in trace.nodes.items()
            if site["type"] == "param" or (site["type"] == "sample" and not site_is_subsample(site))
        }
    return names


@pytest.fixture(scope="module")
def model_words():
    words = {}
    for name in zoo.list_models():
        spec = zoo.get_model(name)
        words[name] = f"the name of model {name!r}"
        for site in _site_names(spec):
            words.setdefault(site, f"a site of model {name!r}")
    return words


def test_the_layer_names_no_model_and_no_site(model_words):
    found = [
        f"{module}:{line}: {value!r} ({model_words[value]})"
        for module, line, value in _layer_strings()
        if value in model_words
    ]
    assert found == []


def test_model_words_are_found_where_they_stand(model_words):
    """The check above can fail: a model's words are found in that model's own code."""
    assert {"bayesian_gmm", "x", "z", "mean_loc"} <= set(model_words)
    strings = {value for _, value in _string_constants(MODULES["zoo.bayesian_gmm.closed_form"])}
    assert "mean_loc" in strings


def test_an_algorithm_is_named_only_in_its_own_module():
    home = {
        name: type(inference.get_algorithm(name)).__module__ for name in inference.list_algorithms()
    }
    assert set(home) >= {"cavi", "em", "svi", "svi-natural"}
    found = [
        f"{module}:{line}: {value!r} (defined in {home[value]})"
        for module, line, value in _layer_strings()
        if value in home and module != home[value]
    ]
    assert found == []


def test_an_algorithm_reads_its_traits_not_its_name():
    """Every algorithm declares what the layer reads; the registry lists them all."""
    for name in inference.list_algorithms():
        alg = inference.get_algorithm(name)
        assert alg.name == name
        assert isinstance(alg.traits, inference.Traits)
        assert alg.traits.estimate in ("posterior", "point", "draws")
        assert isinstance(alg.traits.num_steps, int | np.integer) and alg.traits.num_steps > 0


@pytest.mark.parametrize(
    "old, new",
    [
        ("inference.svi", "inference.algorithms.svi"),
        ("inference.closed_form", "inference.algorithms.closed_form"),
        ("inference.checkpoint", "inference.persistence.checkpoint"),
        ("inference.conformance", "inference.tools.conformance"),
    ],
)
def test_the_module_paths_from_before_the_folders_still_import(old, new):
    import importlib
    import sys

    assert importlib.import_module(old) is importlib.import_module(new)
    assert sys.modules[old] is sys.modules[new]
    with pytest.raises(ModuleNotFoundError):
        importlib.import_module("inference.no_such_module")


def test_the_folders_hold_what_their_names_say():
    from inference.registry import algorithm_source

    for name in inference.list_algorithms():
        if algorithm_source(name) == "built-in":
            assert inference.get_algorithm(name).__module__.startswith("inference.algorithms.")
    for folder, names in {"persistence": {"checkpoint", "saved_fit"}, "tools": {"cli"}}.items():
        assert names <= {p.stem for p in (ROOT / "inference" / folder).glob("*.py")}
