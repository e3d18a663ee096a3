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

``--ablate`` (Pyro) adds, side by side with the others, Bayesian fits in which one part of the
step is replaced, for that fit's steps only, by a stand-in that costs (almost) nothing: what the
step saves is what that part costs inside a whole step, where parts timed alone
(``bam_parts.py``) run faster than they do in a step. The stand-ins (see ``STAND_INS``) change
the fit, so the ablated fits are for timing only.

    python benchmarks/bam_speed.py            # batch 128, 10 blocks of 40 steps, both backends
    python benchmarks/bam_speed.py --backends pyro --ablate
    python benchmarks/bam_speed.py --quick    # what the tests run (seconds)
"""

from __future__ import annotations

import argparse
import contextlib
import json
import time
from unittest.mock import patch

import numpy as np

import inference
from zoo.files import write_text

VARIANTS = ("softmax", "weibull", "lognormal")


@contextlib.contextmanager
def _no_noise_draw():
    """torch's uniform and normal draws replaced by constant fills (the noise's other passes
    kept): the draws' own cost."""
    import torch

    def fill(value):
        return lambda shape, **kwargs: torch.full(shape, value, **kwargs)

    with patch.object(torch, "rand", fill(0.5)), patch.object(torch, "randn", fill(0.0)):
        yield


@contextlib.contextmanager
def _no_prior_gradient():
    """The prior of every layer built without gradient: the backward pass of the contextual
    prior's network and of the KL's terms in the prior alone (the lgamma's digamma)."""
    import torch

    from zoo.bayesian_attention import pyro_classifier

    prior = pyro_classifier.prior

    def without_gradient(*args):
        with torch.no_grad():
            return prior(*args)

    with patch.object(pyro_classifier, "prior", without_gradient):
        yield


@contextlib.contextmanager
def _no_layer_kl():
    """Every layer's KL replaced by zero: the KL's forward and backward passes and the prior's
    backward pass (the prior is still built)."""

    from inference.backends import pyro_meanfield

    def zero(q, p):
        like = _a_tensor_of(q)  # on the distribution's device and in its dtype
        return like.new_zeros(q.batch_shape)

    with patch.object(pyro_meanfield, "kl_divergence", zero):
        yield


def _a_tensor_of(distribution):
    """A parameter tensor of ``distribution`` (looking inside wrappers such as ``Independent``)."""
    import torch

    for value in vars(distribution).values():
        if isinstance(value, torch.Tensor):
            return value
        if isinstance(value, torch.distributions.Distribution):
            return _a_tensor_of(value)
    raise ValueError(f"{type(distribution).__name__} holds no tensor")


# name -> a context manager that swaps one part of a Pyro Bayesian step for a stand-in.
STAND_INS = {
    "no noise draw": _no_noise_draw,
    "no prior gradient": _no_prior_gradient,
    "no layer KL": _no_layer_kl,
}


def started_fit(backend, attention, x, y, args, seed=0, prior=None):
    """The state of a one-step fit of ``attention`` (engine built, compiled on JAX)."""
    kept = {}
    inference.fit(
        "bam_classifier",
        {"x": x, "y": y},
        "svi",
        backend,
        seed=seed,
        num_steps=1,
        tol=0,  # one step on purpose: no convergence warning
        batch_size=args.batch_size,
        lr=1e-3,
        elbo=args.elbo,
        progress=False,
        device=args.device,
        callback=lambda step, state, info: kept.update(state=state),
        attention=attention,
        jit=args.jit and backend == "pyro",
        prior=args.prior if prior is None else prior,
        prior_hidden=args.prior_hidden,
        width=args.width,
        num_heads=args.heads,
        num_layers=args.layers,
    )
    return kept["state"]


def variants(backend, args):
    """name -> (attention, prior or None for --prior, stand-in name or None)."""
    table = {attention: (attention, None, None) for attention in VARIANTS}
    if args.ablate and backend == "pyro":
        for attention in VARIANTS[1:]:
            if args.prior != "fixed":
                table[f"{attention}, fixed prior"] = (attention, "fixed", None)
            for stand_in in STAND_INS:
                table[f"{attention}, {stand_in}"] = (attention, None, stand_in)
    return table


def interleaved_step_seconds(backend, x, y, args):
    """variant name -> seconds of each timed step, the variants stepped in turn."""
    svi = inference.get_algorithm("svi")
    states, stores, stand_ins = {}, {}, {}
    store = None
    if backend == "pyro":
        import pyro

        store = pyro.get_param_store()
    for name, (attention, prior, stand_in) in variants(backend, args).items():
        states[name] = started_fit(backend, attention, x, y, args, prior=prior)
        stand_ins[name] = STAND_INS[stand_in] if stand_in else contextlib.nullcontext
        if store is not None:  # this fit's parameters, swapped in for its steps
            stores[name] = store.get_state()
    names = list(states)
    seconds = {name: [] for name in names}
    for step in range(args.warmup + args.rounds * args.steps):
        for name in names if step % 2 == 0 else names[::-1]:
            swap = contextlib.nullcontext() if store is None else store.scope(stores[name])
            with swap, stand_ins[name]():
                start = time.perf_counter()
                states[name], _ = svi.step(states[name])
                elapsed = time.perf_counter() - start
            if step >= args.warmup:
                seconds[name].append(elapsed)
    return seconds


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="2 blocks of 5 steps, 512 images")
    p.add_argument("--backends", nargs="+", default=["pyro", "numpyro"])
    p.add_argument("--device", default="cpu", help='"cpu", "cuda" or "cuda:N"')
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
    p.add_argument(
        "--jit",
        action="store_true",
        help="Pyro: compile the steps (jit=True); NumPyro always compiles",
    )
    p.add_argument(
        "--ablate", action="store_true", help="Pyro: add fits with one part of the step stood in"
    )
    p.add_argument("--json", default=None, help="also write the results to this file")
    args = p.parse_args(argv)
    if args.ablate and "pyro" not in args.backends:
        p.error("--ablate stands in for parts of Pyro's step: it needs --backends pyro")
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
            name: np.median(np.reshape(times, (args.rounds, args.steps)), axis=1)
            for name, times in seconds.items()
        }
        label = "pyro jit" if args.jit and backend == "pyro" else backend
        for name in seconds:
            ratios = blocks[name] / blocks["softmax"]
            row = table[f"{label} {name}"] = {
                "ms_per_step": 1e3 * float(np.median(seconds[name])),
                "x_softmax": float(np.median(ratios)),
                "x_softmax_range": [float(ratios.min()), float(ratios.max())],
            }
            whole = name.split(",")[0]
            if whole != name:  # an ablated fit: also its step against the whole Bayesian step
                row["x_whole_step"] = float(np.median(blocks[name] / blocks[whole]))
    print(
        f"batch={args.batch_size} width={args.width} heads={args.heads} layers={args.layers} "
        f"prior={args.prior} prior_hidden={args.prior_hidden} elbo={args.elbo} jit={args.jit} "
        f"steps={args.steps} rounds={args.rounds}"
    )
    print(
        "| backend, attention | ms/step | x softmax (lowest, highest) | x whole Bayesian step |\n"
        "|---|---|---|---|"
    )
    for name, row in table.items():
        low, high = row["x_softmax_range"]
        whole = f"{row['x_whole_step']:.3f}" if "x_whole_step" in row else ""
        print(
            f"| {name} | {row['ms_per_step']:.2f} | {row['x_softmax']:.2f} ({low:.2f}, {high:.2f}) "
            f"| {whole} |"
        )
    if args.json:
        write_text(args.json, json.dumps({"settings": vars(args), "results": table}, indent=2))
    return table


if __name__ == "__main__":
    main()
