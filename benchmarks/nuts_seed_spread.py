"""How far the GMM comparison's accuracy table moves when only NUTS's chains change.

``examples/gmm_compare.py`` measures every posterior against a NUTS reference. NUTS's chains
are chaotic: a last-bit difference anywhere (another CPU's vector width, another BLAS, another
order of a sum) grows until the chains are as different as chains from another seed. So the
accuracy table's figures are reproducible on one CPU, but on another they move by about as much
as they move between NUTS seeds. This script measures that spread.

On the example's data and settings (``--seed 0``), CAVI, EM and SVI are fitted once; NUTS runs
with each of ``--seeds`` seeds (0, 1, ...) as the example's ``--nuts-seed`` would run it, and
every row of the accuracy table is measured against each seed's reference, as the example
measures it. Per row and column it prints the figure at seed 0 (the example's), the smallest
and largest over the seeds, and their spread; also the reference's largest r-hat, smallest bulk
ESS and divergences per seed, and how far the other seeds' NUTS posteriors are from seed 0's.
Unless ``--no-perturbed``, NUTS also runs once more with seed 0 on the data moved to the next
float up (every coordinate, one unit in the last place): the chaos directly, the same seed
and a last-bit change.

    python benchmarks/nuts_seed_spread.py --json benchmarks/results/nuts_seed_spread.json
    python benchmarks/nuts_seed_spread.py --tables DIR   # also each seed's accuracy table
    python benchmarks/nuts_seed_spread.py --quick        # a smoke run (tests run this)

The first table of the example (CAVI, EM and SVI with K=8) involves no NUTS and is not run.
"""

from __future__ import annotations

import argparse
import json
import runpy
from pathlib import Path

import numpy as np

import inference
import zoo
from inference import accuracy
from inference.compare import REFERENCE_DRAWS, Comparison, _accuracy
from zoo.files import write_text

ROOT = Path(__file__).resolve().parents[1]

#: The accuracy table's columns that depend on the reference, each with its printed format.
COLUMNS = dict(Comparison.ACCURACY_COLUMNS)
#: The reference's diagnostics, as the example prints them.
DIAGNOSTICS = {"largest_r_hat": "{:.3f}", "smallest_bulk_ess": "{:.0f}", "divergences": "{:.0f}"}


def example():
    """The example's functions (its settings, data and NUTS run), loaded from its file."""
    return runpy.run_path(str(ROOT / "examples" / "gmm_compare.py"), run_name="gmm_compare")


def row_name(row) -> str:
    return f"{row['algorithm']}{'-' + row['guide'] if row['guide'] else ''} {row['backend']}"


def measure(fitted, sampled, num_samples) -> list[dict]:
    """The accuracy table's rows, the fits' measured against ``sampled``'s reference (its first
    run) as ``compare(..., reference=...)`` measures them, followed by the NUTS rows."""
    spec = zoo.get_model("bayesian_gmm")
    reference = sampled.results[0].sample_posterior(num_samples=REFERENCE_DRAWS)
    rows = []
    for row, res in zip(fitted.rows, fitted.results, strict=True):
        rows.append({**row, **_accuracy(res, reference, spec, num_samples, row["seed"])})
    return rows + sampled.rows


def nuts_distance(draws, sampled) -> dict:
    """How far NUTS draws (another run's) are from ``sampled``'s reference, in its columns."""
    spec = zoo.get_model("bayesian_gmm")
    reference = sampled.results[0].sample_posterior(num_samples=REFERENCE_DRAWS)
    found = accuracy.posterior_accuracy(
        draws, reference, components=spec.exchangeable_components, seed=0
    )
    return {c: float(found[c]) for c in COLUMNS}


def spread(values: list) -> dict:
    finite = [v for v in values if v is not None and np.isfinite(v)]
    if not finite:
        return {"seed_0": values[0], "min": None, "max": None, "spread": None}
    return {
        "seed_0": values[0],
        "min": min(finite),
        "max": max(finite),
        "spread": max(finite) - min(finite),
    }


def summarize(tables: list[list[dict]], references: list[dict]) -> dict:
    """Per row and column of the accuracy table (and the NUTS row's held-out score), and per
    diagnostic: the figure of the first seed, the smallest, the largest and the spread."""
    rows = {}
    for i, row in enumerate(tables[0]):
        columns = dict(COLUMNS)
        if row["algorithm"] == "nuts":  # measured against itself: its accuracy is 0
            columns = {"heldout_log_pred_per_point": "{:.4f}"}
        values = {c: [float(table[i][c]) for table in tables] for c in columns}
        # EM's point estimate has no sds: its sd columns are NaN at every seed.
        rows[row_name(row)] = {c: spread(v) for c, v in values.items() if np.isfinite(v).any()}
    diagnostics = {d: spread([float(r[d]) for r in references]) for d in DIAGNOSTICS}
    return {"rows": rows, "diagnostics": diagnostics}


def markdown(summary, references, distances, perturbed) -> str:
    def cell(value, fmt):
        return "-" if value is None or not np.isfinite(value) else fmt.format(value)

    lines = [
        "| row | column | seed 0 | min | max | spread |" + (" one ulp |" if perturbed else ""),
        "|---|---|---|---|---|---|" + ("---|" if perturbed else ""),
    ]
    formats = {**COLUMNS, "heldout_log_pred_per_point": "{:.4f}"}
    for name, columns in summary["rows"].items():
        for column, s in columns.items():
            fmt = formats[column]
            cells = [cell(s[k], fmt) for k in ("seed_0", "min", "max", "spread")]
            if perturbed:
                cells.append(cell(perturbed["rows"][name][column], fmt))
            lines.append(f"| {name} | {column} | " + " | ".join(cells) + " |")
    for d, s in summary["diagnostics"].items():
        fmt = DIAGNOSTICS[d]
        cells = [cell(s[k], fmt) for k in ("seed_0", "min", "max", "spread")]
        if perturbed:
            cells.append(cell(perturbed["reference"][d], fmt))
        lines.append(f"| reference | {d} | " + " | ".join(cells) + " |")
    lines += ["", "| column | largest spread over the rows | row |", "|---|---|---|"]
    for column, fmt in COLUMNS.items():
        spreads = [
            (s[column]["spread"], name)
            for name, s in summary["rows"].items()
            if column in s and s[column]["spread"] is not None
        ]
        if spreads:
            value, name = max(spreads)
            lines.append(f"| {column} | {fmt.format(value)} | {name} |")
    lines += ["", "| NUTS run | " + " | ".join(COLUMNS) + " |", "|---|" + "---|" * len(COLUMNS)]
    for label, found in distances.items():
        cells = [f"{found[c]:.3g}" for c in COLUMNS]  # a last-bit change starts tiny
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the example's --quick sizes")
    parser.add_argument("--seeds", type=int, default=5, help="NUTS seeds 0, 1, ..., this - 1")
    parser.add_argument("--backends", default="pyro,numpyro", help="of CAVI, EM and SVI")
    parser.add_argument(
        "--algorithms", default="cavi,em,svi", help="of the fits measured (the example's)"
    )
    parser.add_argument(
        "--no-perturbed", action="store_true", help="leave out the run on the data moved by 1 ulp"
    )
    parser.add_argument("--tables", type=Path, help="write each seed's accuracy table here")
    parser.add_argument("--json", type=Path, help="write the results here")
    args = parser.parse_args(argv)
    if args.seeds < 2:
        parser.error("--seeds must be at least 2: a spread needs two references")
    gmm = example()
    settings = gmm["parse_args"](
        ["--backends", args.backends] + (["--quick"] if args.quick else [])
    )
    train, test = gmm["make_data"](settings)
    fits, accuracy_model = gmm["settings"](settings, test)
    num_samples = accuracy_model["num_samples"]
    fits["algorithms"] = tuple(args.algorithms.split(","))
    fits["num_steps"] = {a: n for a, n in fits["num_steps"].items() if a in fits["algorithms"]}
    if "svi" not in fits["algorithms"]:
        del fits["jit"]  # SVI's option: compare refuses an option that no run takes

    # The fits do not depend on NUTS: once, without a reference; each seed's measures them.
    fitted = inference.compare("bayesian_gmm", train, **fits, **accuracy_model)
    tables, references, distances, first_draws = [], [], {}, None
    for seed in range(args.seeds):
        settings.nuts_seed = seed
        sampled = gmm["sample_reference"](train, settings, accuracy_model)
        tables.append(measure(fitted, sampled, num_samples))
        references.append(gmm["diagnostics"](sampled.results[0]))
        if first_draws is None:
            first_draws = sampled.results[0].sample_posterior(num_samples=REFERENCE_DRAWS)
        else:
            distances[f"seed 0's against seed {seed}'s"] = nuts_distance(first_draws, sampled)
        print(f"NUTS seed {seed}: {references[-1]}", flush=True)
        if args.tables:
            args.tables.mkdir(parents=True, exist_ok=True)
            write_text(args.tables / f"accuracy_seed{seed}.json", json.dumps(tables[-1], indent=2))
    summary = summarize(tables, references)

    perturbed = None
    if not args.no_perturbed:
        # Seed 0 again, on the data moved to the next float up: the posterior is the same to
        # about 1e-16, the chains are not.
        settings.nuts_seed = 0
        moved = {"x": np.nextafter(train["x"], np.inf)}
        sampled = gmm["sample_reference"](moved, settings, accuracy_model)
        table = measure(fitted, sampled, num_samples)
        columns = summary["rows"]
        perturbed = {
            "rows": {
                row_name(row): {c: float(row[c]) for c in columns[row_name(row)]} for row in table
            },
            "reference": gmm["diagnostics"](sampled.results[0]),
        }
        distances["seed 0's against seed 0's on the moved data"] = nuts_distance(
            first_draws, sampled
        )

    print(markdown(summary, references, distances, perturbed))
    result = {
        "settings": {
            "n": settings.n,
            "K": settings.accuracy_K,
            "data_seed": settings.seed,
            "nuts_seeds": list(range(args.seeds)),
            "nuts_chains": settings.nuts_chains,
            "nuts_warmup": settings.nuts_warmup,
            "nuts_draws": settings.nuts_draws,
            "backends": args.backends.split(","),
            "quick": args.quick,
        },
        "summary": summary,
        "references": references,
        "nuts_distances": distances,
        "perturbed": perturbed,
    }
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        write_text(args.json, json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
