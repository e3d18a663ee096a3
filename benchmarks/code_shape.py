"""The shape of the inference layer's code: function lengths and widths, and the size of the
algorithm contract.

A function's length is its code lines: the lines of its body that hold code, not counting its
docstring, blank lines or comment-only lines (a nested function counts towards the function
that holds it, and also on its own). Its width is its number of parameters, ``self`` and
``cls`` left out, ``*args``/``**kwargs`` counted once each.

    python benchmarks/code_shape.py                 # inference/, the ten longest and widest
    python benchmarks/code_shape.py zoo --most 20
    python benchmarks/code_shape.py --json shape.json
"""

from __future__ import annotations

import argparse
import ast
import io
import json
import tokenize
from dataclasses import asdict, dataclass
from pathlib import Path

from zoo.files import write_text

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Function:
    where: str  # path:line
    name: str  # Class.method or function, nested ones as outer.inner
    lines: int
    params: int


def code_lines(source: str) -> set[int]:
    """The numbers of the lines of ``source`` that hold a token of code (not a comment)."""
    lines = set()
    ignored = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT}
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in ignored and token.type != tokenize.ENDMARKER:
            lines.update(range(token.start[0], token.end[0] + 1))
    return lines


def docstring_lines(node) -> set[int]:
    body = getattr(node, "body", None)
    if (
        isinstance(body, list)
        and body
        and isinstance(body[0], ast.Expr)
        and isinstance(body[0].value, ast.Constant)
    ):
        if isinstance(body[0].value.value, str):
            return set(range(body[0].lineno, body[0].end_lineno + 1))
    return set()


def width(args: ast.arguments) -> int:
    named = [a.arg for a in (*args.posonlyargs, *args.args, *args.kwonlyargs)]
    named = [a for a in named if a not in ("self", "cls")]
    return len(named) + (args.vararg is not None) + (args.kwarg is not None)


def functions(path: Path, root: Path) -> list[Function]:
    source = path.read_text()
    tree = ast.parse(source)
    code = code_lines(source)
    docstrings = set()
    for node in ast.walk(tree):
        docstrings |= docstring_lines(node)
    found = []

    def visit(node, prefix):
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                name = f"{prefix}{child.name}"
                first = child.body[0].lineno
                body = set(range(first, child.end_lineno + 1)) & code
                where = f"{path.relative_to(root)}:{child.lineno}"
                found.append(Function(where, name, len(body - docstrings), width(child.args)))
                visit(child, f"{name}.")
            elif isinstance(child, ast.ClassDef):
                visit(child, f"{prefix}{child.name}.")
            else:
                visit(child, prefix)

    visit(tree, "")
    return found


def contract() -> dict:
    """Members of ``inference.Algorithm`` (methods, abstract ones) and fields of ``Traits``."""
    import dataclasses
    import sys

    sys.path.insert(0, str(ROOT))  # this checkout's layer, whatever is installed
    from inference.algorithm import Algorithm, Traits

    methods = [
        name
        for name, value in vars(Algorithm).items()
        if callable(value) and not name.startswith("_")
    ]
    abstract = sorted(Algorithm.__abstractmethods__)
    return {
        "methods": len(methods),
        "abstract": len(abstract),
        "abstract_names": abstract,
        "traits_fields": len(dataclasses.fields(Traits)),
    }


def shape(folder: Path, most: int) -> dict:
    found = [f for path in sorted(folder.rglob("*.py")) for f in functions(path, ROOT)]
    by_length = sorted(found, key=lambda f: (-f.lines, f.where))
    by_width = sorted(found, key=lambda f: (-f.params, f.where))
    return {
        "folder": str(folder.relative_to(ROOT)),
        "functions": len(found),
        "over_50_lines": sum(f.lines > 50 for f in found),
        "over_80_lines": sum(f.lines > 80 for f in found),
        "over_100_lines": sum(f.lines > 100 for f in found),
        "8_or_more_params": sum(f.params >= 8 for f in found),
        "longest": [asdict(f) for f in by_length[:most]],
        "widest": [asdict(f) for f in by_width[:most]],
    }


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", nargs="?", default="inference", help="a folder of the project")
    parser.add_argument("--most", type=int, default=10, help="rows in each table")
    parser.add_argument("--json", help="also write the figures to this file")
    args = parser.parse_args(argv)
    if not (ROOT / args.folder).is_dir():
        parser.error(f"{args.folder!r} is not a folder of the project ({ROOT}).")
    figures = shape(ROOT / args.folder, args.most)
    if args.folder == "inference":
        figures["contract"] = contract()
    print(
        f"{figures['folder']}/: {figures['functions']} functions; over 50 code lines: "
        f"{figures['over_50_lines']}, over 80: {figures['over_80_lines']}, over 100: "
        f"{figures['over_100_lines']}; 8 or more parameters: {figures['8_or_more_params']}"
    )
    for title, key in (("Longest", "longest"), ("Widest", "widest")):
        print(f"\n{title}:")
        for f in figures[key]:
            print(f"  {f['lines']:4d} lines {f['params']:3d} params  {f['name']}  ({f['where']})")
    if "contract" in figures:
        c = figures["contract"]
        print(
            f"\nAlgorithm contract: {c['methods']} public methods, {c['abstract']} abstract "
            f"({', '.join(c['abstract_names'])}); Traits: {c['traits_fields']} fields"
        )
    if args.json:
        write_text(Path(args.json), json.dumps(figures, indent=1) + "\n")


if __name__ == "__main__":
    main()
