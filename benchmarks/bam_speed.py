"""Seconds per training step of the MNIST patch transformer (``bam_classifier``): softmax attention
against Weibull and log-normal Bayesian attention, same network, batch and data, in one run.

On each backend, ``inference.fit`` builds one SVI fit per variant (and takes its first step); the
benchmark then steps the three fits in turn, one step each, in alternating order (softmax,
Weibull, log-normal, then the reverse), through ``inference.get_algorithm("svi").step``. The
speed of a shared machine moves within seconds by more than the difference between the
variants, so only steps timed side by side compare. Pyro keeps parameters in one global store:
each Pyro fit's parameters are swapped in for its steps (``ParamStoreDict.scope``), outside the
timed step. After ``--warmup`` steps each, ``--rounds`` blocks of ``--steps`` steps give each
variant's median step time; the report is the median over the blocks of the ratio to the
softmax step, with the lowest and highest block.

    python benchmarks/bam_speed.py            # batch 128, 10 blocks of 40 steps, both backends
    python benchmarks/bam_speed.py --quick    # what the tests run (seconds)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time

import numpy as np

import inference

VARIANTS = ("softmax", "weibull", "lognormal")


def started_fit(backend, attention, x, y, args, seed=0):
    """The state of a one-step fit of ``attention`` (engine built, compiled on JAX)."""
    kept = {}
    inference.fit(
        "bam_classifier",
        {"x": x, "y": y},
        "svi",
        backend,
        seed=seed,
        num_steps=1,
        batch_size=args.batch_size,
        lr=1e-3,
        elbo=args.elbo,
        progress=False,
        callback=lambda step, state, info: kept.update(state=state),
        attention=attention,
        prior=args.prior,
        prior_hidden=args.prior_hidden,
        width=args.width,
        num_heads=args.heads,
        num_layers=args.layers,
    )
    return kept["state"]


def interleaved_step_seconds(backend, x, y, args):
    """attention -> seconds of each timed step, the variants stepped in turn."""
    svi = inference.get_algorithm("svi")
    states, stores = {}, {}
    store = None
    if backend == "pyro":
        import pyro

        store = pyro.get_param_store()
    for attention in VARIANTS:
        states[attention] = started_fit(backend, attention, x, y, args)
        if store is not None:  # this fit's parameters, swapped in for its steps
            stores[attention] = store.get_state()
    seconds = {attention: [] for attention in VARIANTS}
    for step in range(args.warmup + args.rounds * args.steps):
        for attention in VARIANTS if step % 2 == 0 else VARIANTS[::-1]:
            swap = contextlib.nullcontext() if store is None else store.scope(stores[attention])
            with swap:
                start = time.perf_counter()
                states[attention], _ = svi.step(states[attention])
                elapsed = time.perf_counter() - start
            if step >= args.warmup:
                seconds[attention].append(elapsed)
    return seconds


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="2 blocks of 5 steps, 512 images")
    p.add_argument("--backends", nargs="+", default=["pyro", "numpyro"])
    p.add_argument("--steps", type=int, default=40, help="timed steps per block")
    p.add_argument("--warmup", type=int, default=20, help="untimed steps first")
    p.add_argument("--rounds", type=int, default=10, help="blocks")
    p.add_argument("--rows", type=int, default=10_000, help="training images (synthetic pixels)")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--elbo", default="meanfield", choices=("trace", "meanfield"))
    p.add_argument("--prior", default="contextual", choices=("fixed", "contextual"))
    p.add_argument("--prior-hidden", type=int, default=None, help="contextual prior's hidden units")
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--json", default=None, help="also write the results to this file")
    args = p.parse_args(argv)
    if args.quick:
        args.steps, args.warmup, args.rounds, args.rows = 5, 5, 2, 512
    # The step time does not depend on the pixel values: random images keep the benchmark
    # free of the data files.
    rng = np.random.default_rng(0)
    x = rng.random((args.rows, 784), dtype=np.float32)
    y = rng.integers(0, 10, args.rows)
    table = {}
    for backend in args.backends:
        seconds = interleaved_step_seconds(backend, x, y, args)
        blocks = {  # (rounds,): each block's median step
            attention: np.median(np.reshape(times, (args.rounds, args.steps)), axis=1)
            for attention, times in seconds.items()
        }
        for attention in VARIANTS:
            ratios = blocks[attention] / blocks["softmax"]
            table[f"{backend} {attention}"] = {
                "ms_per_step": 1e3 * float(np.median(seconds[attention])),
                "x_softmax": float(np.median(ratios)),
                "x_softmax_range": [float(ratios.min()), float(ratios.max())],
            }
    print(
        f"batch={args.batch_size} width={args.width} heads={args.heads} layers={args.layers} "
        f"prior={args.prior} prior_hidden={args.prior_hidden} elbo={args.elbo} "
        f"steps={args.steps} rounds={args.rounds}"
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
