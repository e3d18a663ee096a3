"""SVI at its defaults on many rows, against the exact posterior.

The example plugin's Bayesian linear regression (``examples/extend``: an intercept and two
standard-normal covariates, unit noise) has a Gaussian posterior known in closed form, and its
``full_rank`` guide holds that posterior. The more rows, the narrower it is: on 500,000 rows its
sds are about 0.0014, where the guide starts at a scale of 0.1. Each run is
``inference.fit(model, data, "svi", backend, guide="full_rank", seed=seed)`` with nothing else
given, and the report gives, per coefficient, the fitted sd over the exact one and the error of
the fitted mean in exact sds, with the steps taken and whether the stopping rule was met.

    python benchmarks/svi_large_n.py                 # 500,000 rows, seeds 0 and 1, both backends
    python benchmarks/svi_large_n.py --quick         # 5,000 rows, 200 steps: a smoke run

Writes JSON with ``--json PATH``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import warnings
from pathlib import Path

import numpy as np

from zoo.files import write_text

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "extend"
MODEL = "bayesian_linear_regression"


def plugin():
    """The example model: installed, else registered from its source."""
    import zoo

    if MODEL in zoo.list_models():
        spec = zoo.get_model(MODEL)
        return spec, sys.modules[spec.prepare.__module__]
    sys.path.insert(0, str(EXAMPLE))
    import zoo_linear_regression

    return zoo.register(zoo_linear_regression.SPEC, check=False), zoo_linear_regression


def run(backend: str, n: int, seed: int, num_steps: int | None) -> dict:
    import inference

    spec, module = plugin()
    data = module.make_data(np.random.default_rng(seed), n)
    mean, cov = module.posterior.exact_posterior(data, module.prepare(data))
    sd = np.sqrt(np.diag(cov))
    steps = {} if num_steps is None else {"num_steps": num_steps, "tol": 0}
    start = time.perf_counter()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", inference.ConvergenceWarning)
        res = inference.fit(
            spec, data, "svi", backend, guide="full_rank", seed=seed, progress=False, **steps
        )
    seconds = time.perf_counter() - start
    fitted_sd = np.sqrt(np.diag(res.params["coef_covariance"]))
    return {
        "backend": backend,
        "rows": n,
        "seed": seed,
        "steps": res.num_steps,
        "converged": bool(res.converged),
        "warned": any(issubclass(w.category, inference.ConvergenceWarning) for w in caught),
        "sd_ratio": [float(r) for r in fitted_sd / sd],
        "mean_error_sds": [float(e) for e in (res.params["coef_mean"] - mean) / sd],
        "seconds": seconds,
    }


def main(argv=None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=500_000)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--backends", nargs="+", default=["pyro", "numpyro"])
    parser.add_argument("--quick", action="store_true", help="5,000 rows, 200 steps, seed 0")
    parser.add_argument("--json", type=Path)
    args = parser.parse_args(argv)
    rows, seeds, num_steps = args.rows, args.seeds, None
    if args.quick:
        rows, seeds, num_steps = 5_000, [0], 200
    results = []
    print(
        f"{'backend':8} {'seed':>4} {'steps':>6} {'conv.':>5}  sd / exact sd       mean error, sds"
    )
    for backend in args.backends:
        for seed in seeds:
            row = run(backend, rows, seed, num_steps)
            results.append(row)
            ratio = " ".join(f"{r:5.3f}" for r in row["sd_ratio"])
            error = " ".join(f"{e:+6.3f}" for e in row["mean_error_sds"])
            print(
                f"{backend:8} {seed:4d} {row['steps']:6d} {str(row['converged']):>5}  {ratio}  "
                f"{error}  ({row['seconds']:.0f} s)",
                flush=True,
            )
    if args.json:
        write_text(args.json, json.dumps({"rows": rows, "results": results}, indent=1))
    return results


if __name__ == "__main__":
    main()
