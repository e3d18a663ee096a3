"""How long a user waits for a small fit, on both backends, in one run.

1. One small fit (``bayesian_gmm``, 1,000 points, K=8, ``svi``, 200 steps) in a new process,
   from process start to exit: with an empty cache (cold) and again with the cache the first
   run left (warm, the median of ``--repeats`` runs).
2. The second of three fits in one process, the same but for their seeds (0, 1, 2): its set-up
   plus first step.
3. ``examples/gmm_compare.py`` end to end, against the sum of its tables' set-up, fit and
   scoring columns (how much of the wait the tables account for) and against the time its fits
   spent in steps after the first (what no start-up work can shorten), cold and warm; with
   ``--baseline CHECKOUT``, the same command of another checkout of the project beside it
   (an older commit, say), run first.

    python benchmarks/latency.py                          # everything, both backends
    python benchmarks/latency.py --baseline ../old        # the example against another checkout
    python benchmarks/latency.py --quick                  # a smoke run (tests run this)

Every process gets its own cache folder (``ZOO_JAX_CACHE``), so the user's cache is neither
used nor changed. Timings are wall-clock seconds on this machine.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from zoo.files import write_text

ROOT = Path(__file__).resolve().parents[1]

FIT = """
import json, sys
import numpy as np
import inference, zoo
n, k, steps, fits = (int(a) for a in sys.argv[1:5])
backend = sys.argv[5]
data = zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(0), n)
timings = []
for seed in range(fits):
    res = inference.fit("bayesian_gmm", data, "svi", backend, K=k, num_steps=steps, seed=seed,
                        progress=False)
    timings.append(res.timing)
print(json.dumps(timings))
"""


def run_process(argv, cache, cwd=ROOT, pythonpath=ROOT) -> tuple[float, str]:
    """Wall seconds of a new Python process running ``argv``, and what it printed."""
    env = {**os.environ, "ZOO_JAX_CACHE": str(cache), "PYTHONPATH": str(pythonpath)}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    started = time.perf_counter()
    done = subprocess.run(
        [sys.executable, *argv], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    wall = time.perf_counter() - started
    if done.returncode:
        raise RuntimeError(f"{' '.join(argv[:2])} failed:\n{done.stderr[-3000:]}")
    return wall, done.stdout


def say(message: str) -> None:
    """A line on stderr as each measurement starts: a new process takes seconds, the example
    minutes, and the table comes at the end."""
    print(f"latency: {message}", file=sys.stderr, flush=True)


def fit_in_process(cache, size, backend, fits=1):
    wall, out = run_process(["-c", FIT, *map(str, size), str(fits), backend], cache)
    return wall, json.loads(out.splitlines()[-1])


def small_fits(backends, size, repeats, scratch) -> list[dict]:
    rows = []
    for backend in backends:
        cache = Path(tempfile.mkdtemp(dir=scratch))
        say(f"{backend}: a small fit in a new process, cold cache")
        cold, _ = fit_in_process(cache, size, backend)
        say(f"{backend}: the same, warm cache, {repeats} time(s)")
        warm = [fit_in_process(cache, size, backend)[0] for _ in range(repeats)]
        say(f"{backend}: three fits in one process")
        _, timings = fit_in_process(cache, size, backend, fits=3)
        second = timings[1]
        rows.append(
            {
                "backend": backend,
                "cold_process_s": cold,
                "warm_process_s": statistics.median(warm),
                "second_fit_setup_s": second["setup"],
                "second_fit_first_step_s": second["first_step"],
                "second_fit_setup_and_first_step_s": second["setup"] + second["first_step"],
                "second_fit_wall_s": second["wall"],
            }
        )
    return rows


def table_seconds(out: Path) -> tuple[float, float]:
    """Seconds the example's tables account for (set-up, fit and scoring of every row), and
    of those the fits' steps after the first (what is left when start-up costs nothing)."""
    total = steps = 0.0
    for name in ("table", "accuracy"):
        for row in json.loads((out / f"{name}.json").read_text()):
            total += (
                row["wall_time_s"] + (row.get("setup_s") or 0.0) + (row.get("evaluation_s") or 0.0)
            )
            steps += row["wall_time_s"] - row["first_step_s"]
    return total, steps


def example_runs(checkouts, quick, scratch, keep=None) -> list[dict]:
    """``keep``: a folder to write each run's tables and figures in (``baseline-cold``, ...)."""
    rows = []
    for label, checkout in checkouts:
        cache = Path(tempfile.mkdtemp(dir=scratch))
        for run in ("cold", "warm") if label == "this checkout" else ("cold",):
            out = Path(tempfile.mkdtemp(dir=scratch))
            if keep is not None:
                out = keep / f"{label.replace(' ', '-')}-{run}"
                out.mkdir(parents=True, exist_ok=True)
            argv = [str(checkout / "examples/gmm_compare.py"), "--out", str(out)]
            say(f"gmm_compare.py{' --quick' if quick else ''} of {label}, {run} cache (minutes)")
            wall, _ = run_process(
                argv + (["--quick"] if quick else []), cache, cwd=checkout, pythonpath=checkout
            )
            tables, steps = table_seconds(out)
            rows.append(
                {
                    "checkout": label,
                    "cache": run,
                    "wall_s": wall,
                    "tables_s": tables,
                    "tables_share": tables / wall,
                    "steps_s": steps,
                    "not_stepping_s": wall - steps,
                }
            )
    return rows


def markdown(fits, examples) -> str:
    lines = [
        "| backend | new process, cold (s) | new process, warm (s) | 2nd fit set-up + first "
        "step (s) | 2nd fit wall (s) |",
        "|---|---|---|---|---|",
    ]
    for r in fits:
        lines.append(
            f"| {r['backend']} | {r['cold_process_s']:.2f} | {r['warm_process_s']:.2f} | "
            f"{r['second_fit_setup_and_first_step_s']:.3f} | {r['second_fit_wall_s']:.2f} |"
        )
    if examples:
        lines += [
            "",
            "| gmm_compare.py | cache | wall (s) | tables (s) | share | steps after the first "
            "(s) | the rest (s) |",
            "|---|---|---|---|---|---|---|",
        ]
        for r in examples:
            lines.append(
                f"| {r['checkout']} | {r['cache']} | {r['wall_s']:.1f} | {r['tables_s']:.1f} | "
                f"{r['tables_share']:.0%} | {r['steps_s']:.1f} | {r['not_stepping_s']:.1f} |"
            )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a small fit and --quick example")
    parser.add_argument("--backends", default="pyro,numpyro", help="comma-separated")
    parser.add_argument("--repeats", type=int, default=3, help="warm new processes per backend")
    parser.add_argument("--no-example", action="store_true", help="leave out gmm_compare.py")
    parser.add_argument(
        "--baseline", type=Path, help="another checkout whose gmm_compare.py runs first"
    )
    parser.add_argument("--keep", type=Path, help="keep the example's outputs in this folder")
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    size = (200, 3, 20) if args.quick else (1000, 8, 200)  # points, components, steps
    repeats = 1 if args.quick else args.repeats
    with tempfile.TemporaryDirectory() as scratch:
        fits = small_fits(args.backends.split(","), size, repeats, scratch)
        examples = []
        if not args.no_example:
            checkouts = [("baseline", args.baseline.resolve())] if args.baseline else []
            checkouts.append(("this checkout", ROOT))
            examples = example_runs(checkouts, args.quick, scratch, args.keep)
    result = {"size": dict(zip(("n", "K", "steps"), size, strict=True)), "fits": fits}
    result["examples"] = examples
    print(markdown(fits, examples))
    if args.json:
        write_text(Path(args.json), json.dumps(result, indent=1) + "\n")
    return result


if __name__ == "__main__":
    main()
