"""Sphinx extension: the parts of the model and algorithm pages that the code already knows.

Before every build it writes ``docs/_generated/`` (not versioned) from the registries:

* ``model-<name>.md``: a model's data contract, its options with their defaults and meanings, the
  algorithms that fit it (and why the others do not), its guides and what else its spec declares;
* ``algorithm-<name>.md``: an algorithm's traits, its options and the models it fits;
* ``models-table.md`` and ``algorithms-table.md``: one row per model or algorithm.

Pages include these files, so a page cannot drift from the code. An option whose meaning the
code does not document (a ``Parameters`` entry in the model's ``prepare`` docstring, or in the
docstring of the algorithm's ``Options``) is a warning: an error of the ``-W`` build.
"""

from __future__ import annotations

import dataclasses
import inspect
from pathlib import Path

import inference
import zoo
from inference.api import model_options
from inference.registry import algorithm_source, supporting
from zoo import docstrings

OUT = Path(__file__).resolve().parents[1] / "_generated"


def parameter_docs(obj) -> dict[str, str]:
    """The meanings in the numpydoc ``Parameters`` section of ``obj``'s docstring, by name (an
    entry ``a, b : float`` documents both), each as one line of text: the reading
    ``zoo fit MODEL --help`` shows too (``zoo.docstrings``)."""
    return {name: doc.meaning for name, doc in docstrings.parameter_docs(obj).items()}


def _cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _default(value) -> str:
    if value is inspect.Parameter.empty or value is dataclasses.MISSING:
        return "required"
    return f"`{value!r}`"


def _options_table(entries, docs: dict[str, str], where: str) -> list[str]:
    missing = [name for name, _ in entries if not docs.get(name)]
    if missing:
        from sphinx.util import logging  # the docs extra's

        logging.getLogger(__name__).warning(  # an error under -W, as the docs are built
            f"{where} does not document the option(s) {missing}: add them to the Parameters "
            "section of its docstring (the documentation is built from it)."
        )
    rows = ["| option | default | meaning |", "|---|---|---|"]
    rows += [
        f"| `{name}` | {_cell(_default(d))} | {_cell(docs.get(name, ''))} |" for name, d in entries
    ]
    return rows


def model_page(name: str) -> str:
    spec = zoo.get_model(name, check=False)
    lines = [f"*{spec.description}.*", ""]
    lines += ["**Data** (`fit(..., data=...)` takes a dict with these keys):", ""]
    lines += ["| key | dimensions | dtype | meaning |", "|---|---|---|---|"]
    kinds = {"f": "float", "i": "integer", "u": "unsigned", "b": "bool"}
    for key, field in spec.data.items():
        kind = " or ".join(kinds.get(k, k) for k in field.kind)
        kind += ", 0/1 values" if field.binary else ""
        lines.append(f"| `{key}` | {field.ndim} | {kind} | {_cell(field.doc)} |")
    signature = inspect.signature(spec.prepare).parameters
    entries = [(n, signature[n].default) for n in model_options(spec)]
    lines += ["", "**Options** (keyword arguments of `fit` and `compare`):", ""]
    if entries:
        where = f"{spec.prepare.__module__}.{spec.prepare.__qualname__}"
        lines += _options_table(entries, parameter_docs(spec.prepare), where)
    else:
        lines.append("None.")
    lines += ["", "**Algorithms**:", ""]
    for alg_name in documented_algorithms():
        why = inference.get_algorithm(alg_name).unsupported(spec)
        link = f"[`{alg_name}`](/algorithms/{alg_name}.md)"
        lines.append(f"- {link}: " + ("fits it." if why is None else f"not this model: {why}"))
    declared = [
        f"SVI guides: {', '.join(f'`{g}`' for g in spec.guides)} (the first is the default)",
        f"backends: {', '.join(f'`{b}`' for b in spec.backends)}",
        f"default precision: `{spec.dtype or 'the algorithm’s'}`",
        "minibatches: " + ("yes (`batch_size=`)" if spec.minibatch else "no"),
    ]
    if spec.maximum_likelihood_twin:
        declared.append(f"maximum-likelihood twin: `{spec.maximum_likelihood_twin}`")
    if spec.exact_posterior:
        declared.append("exact posterior in closed form (`compare(..., reference='exact')`)")
    if spec.tags:
        declared.append(f"tags: {', '.join(f'`{t}`' for t in spec.tags)}")
    lines += ["", "**Its spec also declares**:", ""] + [f"- {d}" for d in declared]
    return "\n".join(lines) + "\n"


def algorithm_page(name: str) -> str:
    alg = inference.get_algorithm(name)
    t = alg.traits
    stop = f"`tol={t.tol}` nats per data point" if t.tol is not None else "no early stop"
    lines = ["| trait | value |", "|---|---|"]
    lines += [
        f"| objective | {t.objective} |",
        f"| estimate | {t.estimate} |",
        f"| stochastic | {'yes' if t.stochastic else 'no'} |",
        f"| data larger than memory | {'yes (`batch_size=`, streams)' if t.minibatch else 'no'} |",
        f"| default steps | `num_steps={t.num_steps}`, {stop} |",
        f"| default precision | `{t.dtype}` |",
    ]
    if t.advice:
        lines.append(f"| on a non-finite objective | {_cell(t.advice)} |")
    fields = dataclasses.fields(alg.Options)
    lines += ["", "**Options** (keyword arguments of `fit`):", ""]
    if fields:
        entries = [(f.name, f.default) for f in fields]
        where = f"{alg.Options.__module__}.{alg.Options.__qualname__}"
        lines += _options_table(entries, parameter_docs(alg.Options), where)
    else:
        lines.append("None: the run options of `fit` (`num_steps`, `tol`, `seed`, ...) only.")
    lines += ["", "**Models it fits**:", ""]
    for model in documented_models():
        why = alg.unsupported(zoo.get_model(model, check=False))
        link = f"[`{model}`](/models/{model}.md)"
        lines.append(f"- {link}" + ("" if why is None else f": no. {why}"))
    return "\n".join(lines) + "\n"


def documented_models() -> list[str]:
    """The zoo's own models: the site is the same whatever plugins are installed beside it."""
    return [m for m in zoo.list_models() if zoo.get_model(m, check=False).built_in]


def documented_algorithms() -> list[str]:
    """The zoo's own algorithms, for the same reason."""
    return [a for a in inference.list_algorithms() if algorithm_source(a) == "built-in"]


def models_table() -> str:
    lines = ["| model | what | algorithms | SVI guides |", "|---|---|---|---|"]
    for name in documented_models():
        spec = zoo.get_model(name, check=False)
        algs = [a for a in supporting(spec) if a in documented_algorithms()]
        lines.append(
            f"| [`{name}`](/models/{name}.md) | {_cell(spec.description)} | "
            + ", ".join(f"`{a}`" for a in algs)
            + " | "
            + ", ".join(f"`{g}`" for g in spec.guides)
            + " |"
        )
    return "\n".join(lines) + "\n"


def algorithms_table() -> str:
    lines = ["| algorithm | objective | estimate | stochastic | options |", "|---|---|---|---|---|"]
    for name in documented_algorithms():
        alg = inference.get_algorithm(name)
        t = alg.traits
        options = ", ".join(f"`{o}`" for o in alg.option_names()) or "none"
        lines.append(
            f"| [`{name}`](/algorithms/{name}.md) | {t.objective} | {t.estimate} | "
            f"{'yes' if t.stochastic else 'no'} | {options} |"
        )
    return "\n".join(lines) + "\n"


def write_generated(app=None) -> None:
    OUT.mkdir(exist_ok=True)
    files = {"models-table.md": models_table(), "algorithms-table.md": algorithms_table()}
    files.update({f"model-{m}.md": model_page(m) for m in documented_models()})
    files.update({f"algorithm-{a}.md": algorithm_page(a) for a in documented_algorithms()})
    for name, text in files.items():
        path = OUT / name
        if not path.exists() or path.read_text() != text:  # unchanged files keep their time
            path.write_text(text)


def setup(app):
    app.connect("builder-inited", write_generated)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
