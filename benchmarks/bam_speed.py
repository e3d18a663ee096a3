"""Seconds per training step of the MNIST patch transformer (``bam_classifier``): softmax attention
against Weibull and log-normal Bayesian attention, same network, batch and data, in one run.

Each variant runs ``--steps`` SVI steps through ``inference.fit`` on each backend; a step's time is
read from the loop's own clock (``history["time"]``). The first ``--warmup`` steps (JAX's
compilation, allocator warm-up) are dropped and the median of the rest is reported, with the ratio
to the softmax step of the same backend. The variants alternate in rounds (softmax, Weibull,
log-normal, softmax, ...) and each variant keeps its fastest round's median, so that load from
anything else on the machine falls on every variant alike.

    python benchmarks/bam_speed.py            # batch 128, 200 steps x 3 rounds, both backends
    python benchmarks/bam_speed.py --quick    # what the tests run (seconds)
"""

from __future__ import annotations

import argparse
import json

import numpy as np

import inference

VARIANTS = ("softmax", "weibull", "lognormal")


def step_seconds(backend, attention, x, y, args, seed=0):
    """Median seconds per SVI step after the warm-up steps."""
    res = inference.fit(
        "bam_classifier",
        {"x": x, "y": y},
        "svi",
        backend,
        seed=seed,
        num_steps=args.steps,
        batch_size=args.batch_size,
        lr=1e-3,
        elbo=args.elbo,
        progress=False,
        attention=attention,
        prior=args.prior,
        width=args.width,
        num_heads=args.heads,
        num_layers=args.layers,
    )
    per_step = np.diff(np.concatenate([[0.0], res.history["time"]]))
    return float(np.median(per_step[args.warmup :]))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="30 steps, one round, 512 images")
    p.add_argument("--backends", nargs="+", default=["pyro", "numpyro"])
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--rows", type=int, default=10_000, help="training images (synthetic pixels)")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--elbo", default="meanfield", choices=("trace", "meanfield"))
    p.add_argument("--prior", default="contextual", choices=("fixed", "contextual"))
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--json", default=None, help="also write the results to this file")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.warmup, args.rounds, args.rows = 30, 10, 1, 512
    # The step time does not depend on the pixel values: random images keep the benchmark
    # free of the data files.
    rng = np.random.default_rng(0)
    x = rng.random((args.rows, 784), dtype=np.float32)
    y = rng.integers(0, 10, args.rows)
    table = {}
    for backend in args.backends:
        best = dict.fromkeys(VARIANTS, np.inf)
        for _ in range(args.rounds):
            for attention in VARIANTS:
                best[attention] = min(best[attention], step_seconds(backend, attention, x, y, args))
        for attention in VARIANTS:
            table[f"{backend} {attention}"] = {
                "ms_per_step": 1e3 * best[attention],
                "x_softmax": best[attention] / best["softmax"],
            }
    print(
        f"batch={args.batch_size} width={args.width} heads={args.heads} layers={args.layers} "
        f"prior={args.prior} elbo={args.elbo} steps={args.steps} rounds={args.rounds}"
    )
    print("| backend, attention | ms/step | x softmax |\n|---|---|---|")
    for name, row in table.items():
        print(f"| {name} | {row['ms_per_step']:.2f} | {row['x_softmax']:.2f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"settings": vars(args), "results": table}, f, indent=2)
    return table


if __name__ == "__main__":
    main()
