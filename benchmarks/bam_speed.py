"""Seconds per training step of the MNIST patch transformer (``bam_classifier``): softmax attention
against Weibull and log-normal Bayesian attention, same network, batch and data, in one run.

Each variant runs ``--steps`` SVI steps through ``inference.fit`` on each backend; a step's time is
read from the loop's own clock (``history["time"]``), and the first ``--warmup`` steps (JAX's
compilation, allocator warm-up) are dropped. The variants run in ``--rounds`` rounds, one fit
each per round, in alternating order (softmax, Weibull, log-normal, then the reverse), so that a
drift in the machine's speed falls on every variant alike. Each round gives every variant's
median step time and its ratio to the softmax step of that round; the report is the median over
the rounds of each, with the lowest and highest ratio. The speed of a shared machine moves by
more than the difference between the variants within seconds, so ratios of steps timed close
together are what can be compared.

    python benchmarks/bam_speed.py            # batch 128, 60 steps x 12 rounds, both backends
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
    p.add_argument("--quick", action="store_true", help="30 steps, two rounds, 512 images")
    p.add_argument("--backends", nargs="+", default=["pyro", "numpyro"])
    p.add_argument("--steps", type=int, default=60)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--rounds", type=int, default=12)
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
        args.steps, args.warmup, args.rounds, args.rows = 30, 10, 2, 512
    # The step time does not depend on the pixel values: random images keep the benchmark
    # free of the data files.
    rng = np.random.default_rng(0)
    x = rng.random((args.rows, 784), dtype=np.float32)
    y = rng.integers(0, 10, args.rows)
    table = {}
    for backend in args.backends:
        seconds = {attention: [] for attention in VARIANTS}
        for r in range(args.rounds):
            for attention in VARIANTS if r % 2 == 0 else VARIANTS[::-1]:
                seconds[attention].append(step_seconds(backend, attention, x, y, args))
        softmax = np.array(seconds["softmax"])
        for attention in VARIANTS:
            ratios = np.array(seconds[attention]) / softmax
            table[f"{backend} {attention}"] = {
                "ms_per_step": 1e3 * float(np.median(seconds[attention])),
                "x_softmax": float(np.median(ratios)),
                "x_softmax_range": [float(ratios.min()), float(ratios.max())],
            }
    print(
        f"batch={args.batch_size} width={args.width} heads={args.heads} layers={args.layers} "
        f"prior={args.prior} elbo={args.elbo} steps={args.steps} rounds={args.rounds}"
    )
    print("| backend, attention | ms/step | x softmax (lowest, highest) |\n|---|---|---|")
    for name, row in table.items():
        low, high = row["x_softmax_range"]
        print(
            f"| {name} | {row['ms_per_step']:.2f} | {row['x_softmax']:.2f} ({low:.2f}, {high:.2f}) |"
        )
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"settings": vars(args), "results": table}, f, indent=2)
    return table


if __name__ == "__main__":
    main()
