"""Stochastic natural-gradient VI on all the data against full-batch CAVI on a subsample.

A mixture of Gaussians (D=10, 5 components) of ``--n`` points is written to ``.npy`` and opened
memory-mapped. Full-batch CAVI fits its first ``--subsample`` rows (the rows are iid, so this is
a random subsample) read into memory; ``svi-natural`` fits the whole file by minibatches. Both
report their held-out log predictive per point (``log (1/S) sum_s p(x | theta_s)``, S posterior
draws, on ``--test`` fresh points of the same mixture) and their wall time (``inference.fit``
from call to return: initialisation, JAX compilation and every step). For svi-natural the
parameters are also recorded every ``--eval-every`` steps (the recording is not timed), and the
report gives the first time its held-out log predictive is within ``--target`` nats/point of
CAVI's (or better).

Every run starts from an empty compile cache: what NumPyro's compiled functions keep on disk (the
zoo's traced functions and JAX's compilation cache) goes to a new folder (``ZOO_JAX_CACHE``)
removed at the end, so nothing that earlier runs left in the user's cache is read (nor is that
cache changed), and CAVI compiles as a first fit does. svi-natural runs after it in the same
process.

    python benchmarks/svi_natural_vs_cavi.py            # N=10M, CAVI on 1M, 800 MB file
    python benchmarks/svi_natural_vs_cavi.py --quick    # N=200k, CAVI on 20k: a smoke run

Writes JSON (``--out``, default ``benchmarks/results/svi_natural_vs_cavi.json``).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from streaming_memory import write_mixture  # noqa: E402

from inference.backends.jax_cache import empty_cache  # noqa: E402
from zoo.files import write_text  # noqa: E402


def heldout(spec, raw, config, x_test, num_samples, seed=0):
    """Per-point held-out log predictive of a fitted CAVI-family posterior."""
    from scipy.special import logsumexp

    draws = spec.sample_posterior(raw, config, "cavi", np.random.default_rng(seed), num_samples)
    ll = spec.log_likelihood(draws, {"x": x_test})
    return float(np.mean(logsumexp(ll, axis=0) - np.log(num_samples)))


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--n", type=int)
    parser.add_argument("--subsample", type=int)
    parser.add_argument("--test", type=int)
    parser.add_argument("--K", type=int, default=10)
    parser.add_argument("--backend", default="numpyro", choices=["numpyro", "pyro"])
    parser.add_argument("--batch-size", type=int)
    parser.add_argument("--num-steps", type=int)
    parser.add_argument("--step-size", type=float, nargs=2, default=(10.0, 0.7))
    parser.add_argument("--eval-every", type=int)
    parser.add_argument("--num-samples", type=int, default=100)
    parser.add_argument("--target", type=float, default=0.001)
    parser.add_argument(
        "--out", help="default: results/svi_natural_vs_cavi.json (_quick.json with --quick)"
    )
    parser.add_argument("--workdir")
    args = parser.parse_args(argv)
    quick = args.quick
    if args.out is None:  # a smoke run never overwrites the full run's results
        name = "svi_natural_vs_cavi_quick.json" if quick else "svi_natural_vs_cavi.json"
        args.out = os.path.join(HERE, "results", name)
    n = args.n or (200_000 if quick else 10_000_000)
    sub = args.subsample or (20_000 if quick else 1_000_000)
    batch = args.batch_size or (500 if quick else 5_000)
    num_steps = args.num_steps or (400 if quick else 4_000)
    eval_every = args.eval_every or max(1, num_steps // 10)
    num_test = args.test or (2_000 if quick else 10_000)
    with empty_cache():
        report = run(args, n, sub, batch, num_steps, eval_every, num_test)
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_text(args.out, json.dumps(report, indent=2))
    summary = {k: v for k, v in report.items() if k != "svi_natural"}
    summary["svi_natural"] = {k: v for k, v in report["svi_natural"].items() if k != "curve"}
    print(json.dumps(summary, indent=2))
    print(f"wrote {args.out}")


def run(args, n, sub, batch, num_steps, eval_every, num_test) -> dict:
    """Both fits and the report. The inference layer is imported here, inside the empty compile
    cache: its NumPyro backend takes JAX's cache folder when first imported."""
    import inference
    import zoo

    NATURAL = inference.get_algorithm("svi-natural")

    spec = zoo.get_model("bayesian_gmm")
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        t = time.perf_counter()
        path = write_mixture(os.path.join(tmp, "x.npy"), n)
        x_test = np.array(
            np.load(write_mixture(os.path.join(tmp, "t.npy"), num_test, sample_seed=1))
        )
        write_s = time.perf_counter() - t
        x = np.load(path, mmap_mode="r")
        common = dict(K=args.K, seed=0, progress=False)

        t = time.perf_counter()
        x_sub = np.array(x[:sub])
        cavi = inference.fit("bayesian_gmm", {"x": x_sub}, "cavi", args.backend, **common)
        cavi_s = time.perf_counter() - t
        cavi_heldout = heldout(spec, cavi.raw_params, cavi.config, x_test, args.num_samples)
        del x_sub

        snapshots, untimed = [], [0.0]

        def record(step, state, info):
            t0 = time.perf_counter()
            if step % eval_every == 0 or step == num_steps:
                elapsed = t0 - start[0] - untimed[0]
                snapshots.append((step, elapsed, NATURAL.get_params(state), state.problem.config))
            untimed[0] += time.perf_counter() - t0

        start = [time.perf_counter()]
        inference.fit(
            "bayesian_gmm",
            {"x": x},
            "svi-natural",
            args.backend,
            batch_size=batch,
            num_steps=num_steps,
            step_size=tuple(args.step_size),
            tol=0,  # the number of steps asked for: the curve is read at fixed steps
            callback=record,
            **common,
        )
        nat_s = time.perf_counter() - start[0] - untimed[0]
        curve = [
            {
                "step": step,
                "time_s": round(elapsed, 3),
                "heldout_per_point": heldout(spec, raw, config, x_test, args.num_samples),
            }
            for step, elapsed, raw, config in snapshots
        ]
    reached = [c for c in curve if c["heldout_per_point"] >= cavi_heldout - args.target]
    return {
        "what": "svi-natural on all N (memory-mapped) vs full-batch CAVI on a subsample",
        "N": n,
        "D": 10,
        "K": args.K,
        "backend": args.backend,
        "data_write_s": round(write_s, 2),
        "cavi": {
            "subsample": sub,
            "wall_s": round(cavi_s, 2),
            "steps": cavi.num_steps,
            "converged": cavi.converged,
            "heldout_per_point": cavi_heldout,
        },
        "svi_natural": {
            "batch_size": batch,
            "num_steps": num_steps,
            "step_size": list(args.step_size),
            "wall_s": round(nat_s, 2),
            "epochs": round(num_steps * batch / n, 3),
            "heldout_per_point": curve[-1]["heldout_per_point"],
            "curve": curve,
        },
        "target_nats_per_point": args.target,
        "svi_natural_time_to_cavi_heldout_s": reached[0]["time_s"] if reached else None,
        "svi_natural_faster": bool(reached) and reached[0]["time_s"] < cavi_s,
    }


if __name__ == "__main__":
    main()
