"""Whether two runs' tables hold the same figures: the check behind "unchanged to full precision".

Compares the JSON tables that ``inference.compare`` writes (``Comparison.to_json``; the example
``examples/gmm_compare.py --out DIR`` writes ``table.json`` and ``accuracy.json``), row by row
and column by column. Per column it says whether every figure is identical (NaN equals NaN;
JSON keeps every bit of a float) and otherwise how many rows differ and the largest relative
difference, ``|a - b| / max(|a|, |b|)``. Timing columns (names ending in ``_s``) differ from run
to run and are reported apart. The rows must name the same runs in the same order.

    python benchmarks/same_figures.py RUN_A/accuracy.json RUN_B/accuracy.json
    python benchmarks/same_figures.py RUN_A RUN_B   # every table (*.json) the two folders share

The exit status is 0 when every figure but the timings is identical and 1 when a figure
differs. It is 2, with a message on stderr, when no comparison could be made: for tables that do
not hold the same runs, and for a usage error (arguments argparse refuses, a missing or
unreadable table, a file given with a folder, folders that share no table, a ``--json`` path in
a folder that does not exist).
``benchmarks/latency.py --keep DIR`` keeps each of its example runs' folders for this check.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from pathlib import Path

from zoo.files import write_text

#: What names a run: the rows of the two tables must agree on these, in order.
IDENTITY = ("model", "algorithm", "guide", "backend")


def is_timing(column: str) -> bool:
    return column.endswith("_s")


def _number(value):
    """A figure as compared: JSON's null, which the tables write for NaN, as NaN."""
    return math.nan if value is None else value


def same(a, b) -> bool:
    a, b = _number(a), _number(b)
    if isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b):
        return True
    return type(a) is type(b) and a == b


def relative_difference(a, b) -> float | None:
    """``|a - b| / max(|a|, |b|)`` of two numbers (inf where one is NaN or infinite and the other
    is not); None for values that are not numbers."""
    a, b = _number(a), _number(b)
    numbers = (int, float)
    if isinstance(a, bool) or isinstance(b, bool):
        return None
    if not (isinstance(a, numbers) and isinstance(b, numbers)):
        return None
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.inf
    scale = max(abs(a), abs(b))
    return abs(a - b) / scale if scale else 0.0


def compare_rows(rows_a: list[dict], rows_b: list[dict]) -> dict:
    """Per column: ``rows`` compared, ``differ`` (how many rows differ), ``largest_relative``
    (None when every figure is identical, or for a column that is not numeric), ``timing``."""
    if len(rows_a) != len(rows_b):
        raise ValueError(f"The tables have {len(rows_a)} and {len(rows_b)} rows.")
    for i, (a, b) in enumerate(zip(rows_a, rows_b, strict=True)):
        name_a, name_b = ([row.get(k) for k in IDENTITY] for row in (a, b))
        if name_a != name_b:
            raise ValueError(f"Row {i} is {name_a} in one table and {name_b} in the other.")
    columns = list(dict.fromkeys(c for row in rows_a + rows_b for c in row))
    report = {}
    for column in columns:
        differ, largest = 0, None
        for a, b in zip(rows_a, rows_b, strict=True):
            if column not in a or column not in b:
                differ += 1
                largest = math.inf
                continue
            if same(a[column], b[column]):
                continue
            differ += 1
            rel = relative_difference(a[column], b[column])
            if rel is not None:
                largest = rel if largest is None else max(largest, rel)
        report[column] = {
            "rows": len(rows_a),
            "differ": differ,
            "largest_relative": largest,
            "timing": is_timing(column),
        }
    return report


def table_pairs(a: Path, b: Path) -> list[tuple[str, Path, Path]]:
    """The tables to compare: two files, or the ``*.json`` files two folders share."""
    for path in (a, b):
        if not path.exists():
            raise ValueError(f"{path} does not exist; give two tables (JSON) or two folders.")
    if a.is_dir() != b.is_dir():
        raise ValueError(f"Give two files or two folders; got {a} and {b}.")
    if not a.is_dir():
        return [(a.name, a, b)]
    names = sorted({p.name for p in a.glob("*.json")} & {p.name for p in b.glob("*.json")})
    if not names:
        raise ValueError(f"{a} and {b} share no JSON table.")
    return [(name, a / name, b / name) for name in names]


def read_table(path: Path) -> list[dict]:
    """The rows of a table that ``inference.compare`` wrote: a JSON list of objects."""
    try:
        rows = json.loads(path.read_text())
    except OSError as err:
        raise ValueError(f"Cannot read {path}: {err.strerror or err}.") from err
    except ValueError as err:
        raise ValueError(f"{path} is not JSON ({err}).") from err
    if not (isinstance(rows, list) and all(isinstance(row, dict) for row in rows)):
        raise ValueError(f"{path} is not a table: a JSON list of rows (objects) was expected.")
    return rows


def markdown(name: str, report: dict) -> str:
    def describe(entry):
        if not entry["differ"]:
            return "identical"
        rel = entry["largest_relative"]
        detail = "" if rel is None else f", largest relative difference {rel:.2g}"
        return f"{entry['differ']} of {entry['rows']} differ{detail}"

    lines = [f"{name}:", "", "| column | figures |", "|---|---|"]
    figures = {c: e for c, e in report.items() if not e["timing"]}
    timings = {c: e for c, e in report.items() if e["timing"]}
    lines += [f"| {c} | {describe(e)} |" for c, e in figures.items()]
    if timings:
        lines += ["", "timings (they differ from run to run):", ""]
        lines += [f"- {c}: {describe(e)}" for c, e in timings.items()]
    verdict = all(not e["differ"] for e in figures.values())
    lines += ["", "every figure but the timings identical" if verdict else "FIGURES DIFFER"]
    return "\n".join(lines)


def main(argv=None) -> dict:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("a", type=Path, help="a table (JSON) or a folder of them")
    parser.add_argument("b", type=Path, help="the same of the other run")
    parser.add_argument("--json", type=Path, help="write the report here")
    args = parser.parse_args(argv)
    # Nothing compared (a usage error, or tables of other runs) is not "figures differ" (exit 1):
    # it exits 2, as argparse does for arguments it refuses.
    try:
        pairs = table_pairs(args.a, args.b)
        if args.json and not args.json.parent.is_dir():
            raise ValueError(f"--json {args.json}: its folder does not exist; create it first.")
    except ValueError as err:
        parser.exit(2, f"same_figures: error: {err}\n")
    tables = {}
    for name, a, b in pairs:
        try:
            report = compare_rows(read_table(a), read_table(b))
        except ValueError as err:
            parser.exit(2, f"same_figures: error: {name}: {err}\n")
        tables[name] = report
        print(markdown(name, report) + "\n")
    identical = all(not e["differ"] for t in tables.values() for e in t.values() if not e["timing"])
    result = {"identical": identical, "tables": tables}
    if args.json:
        write_text(args.json, json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    sys.exit(0 if main()["identical"] else 1)
