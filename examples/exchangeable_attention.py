"""Attention as inference of exchangeable tokens
=============================================

How close is an attention posterior q(z | X) to the exact P(z | X) as sequences grow?

Model ``exchangeable_tokens`` (``zoo.exchangeable``): ``z ~ Categorical(K)`` per sequence, tokens
``x_i | z ~ Normal(mu_z, s^2 I)`` iid. The attention guide's only operation across tokens is one
learned query attending over them; its pooled readout times the number of tokens gives the
logits of ``q(z | X)``.

The attention parameters are trained through ``inference.fit`` (SVI, the same budget for each) on
simulated sequences of log-uniform lengths in ``[--min-train-length, --max-train-length]``, by

* ``elbo``: the model's ELBO with ``z`` enumerated in the guide (amortised VI, reverse KL);
* ``supervised``: ``log q(z_true | X)`` on the simulated ``(z, X)`` pairs (forward KL);
* ``masked``: self-supervised, each token predicted from the others through ``q``;

and compared with the parameters derived from the generative model (``ideal_params``: uniform
attention, per-token evidence in the values, readout times ``N``) and with the same ideal
parameters read out at a fixed length ``--max-train-length / 4`` whatever ``N`` is (a readout that
ignores ``N``: a tempered posterior, exact at one length only).

For each ``N`` in ``--lengths`` (4 to 512), ``--num-eval`` fresh sequences are drawn and the mean
total variation ``TV(P(. | X), q(. | X))`` is reported (the KL too, in the JSON). Writes
``error_vs_length.md`` (the table), ``error_vs_length.png`` (log-log plot) and ``results.json``
to ``--out``, and prints the fitted slope of log TV against log N for every row, and the slope
between consecutive lengths. With a discrete latent the posterior concentrates exponentially in
``N`` (at the Chernoff rate of the closest pair of components), so those local slopes steepen:
one fitted log-log slope summarises the range, it is not a power law. The ideal parameters (and an
ELBO fit that has converged) sit at float64 rounding, relative to the mass P puts on the wrong
components, which is why even their error falls with ``N``. The fixed readout is exact at its own
length, to rounding far below its error elsewhere: its slopes leave that point out (``n/a``, or
``null`` in the JSON, where fewer than two points are left).

Commands::

    python examples/exchangeable_attention.py            # the experiment (a few minutes)
    python examples/exchangeable_attention.py --quick    # seconds: a smoke run (tests run this)
"""

from __future__ import annotations

import argparse
import json
import os
import time
import warnings

import numpy as np

import inference
from inference.loop import labelled_bar
from inference.tools.quick_options import QuickDefaults
from zoo import exchangeable as ex
from zoo.files import save_figure, write_text

OBJECTIVES = ("elbo", "supervised", "masked")


def _fitted(lengths, errors, exact_at):
    """``log N``, ``log error`` and which points a slope may use: a positive error at a length
    not in ``exact_at``. At a length where q is exact by construction (a readout fixed there) the
    error is float64 rounding, orders of magnitude below its neighbours, and would decide the fit.
    """
    lengths, errors = np.asarray(lengths, float), np.asarray(errors, float)
    keep = (errors > 0) & ~np.isin(lengths, np.asarray(exact_at, float))
    return np.log(lengths), np.log(np.where(keep, errors, 1.0)), keep


def loglog_slope(lengths, errors, exact_at=()) -> float | None:
    """Least-squares slope of log(error) against log(N) over the points :func:`_fitted` keeps;
    ``None`` if fewer than two are left."""
    log_n, log_e, keep = _fitted(lengths, errors, exact_at)
    if keep.sum() < 2:
        return None
    return float(np.polyfit(log_n[keep], log_e[keep], 1)[0])


def local_slopes(lengths, errors, exact_at=()) -> list[float | None]:
    """The log-log slope between consecutive lengths (``None`` where :func:`_fitted` leaves a
    point out): a power law keeps it constant; an exponential decay in N steepens it."""
    log_n, log_e, keep = _fitted(lengths, errors, exact_at)
    slopes = np.diff(log_e) / np.diff(log_n)
    return [float(v) if k else None for v, k in zip(slopes, keep[1:] & keep[:-1], strict=True)]


def slope_text(slope, digits: int = 2) -> str:
    return "n/a" if slope is None else f"{slope:.{digits}f}"


def train(objective, train_data, args):
    """One ``inference.fit`` of the attention parameters with ``objective``."""
    data = {k: v for k, v in train_data.items() if k != "z" or objective == "supervised"}
    with warnings.catch_warnings(), labelled_bar(f"svi {objective} {args.backend}"):
        # Pyro's TraceEnum_ELBO warns when an objective leaves nothing to enumerate.
        warnings.filterwarnings("ignore", message="TraceEnum_ELBO found no sample sites")
        return inference.fit(
            "exchangeable_tokens",
            data,
            "svi",
            args.backend,
            num_steps=args.steps,
            batch_size=min(args.batch_size, len(data["x"])),
            lr=args.lr,
            seed=args.seed,
            progress=not args.quick,  # minutes per objective: show how far each has gone
            K=args.K,
            separation=args.separation,
            scale=args.scale,
            objective=objective,
            num_heads=args.num_heads,
        )


def uniformity(params, config, data) -> float:
    """max_i |N a_i - 1| over the learned query's attention weights on (at most 500) training
    sequences: 0 when every token weighs 1/N, as Bayes' rule does."""
    x, lengths = data["x"][:500], data["length"][:500]
    w = ex.attention_weights(params, x, config, lengths)
    return float(np.abs(w * lengths[:, None, None] - 1)[w > 0].max())


def markdown_table(lengths, rows) -> str:
    names = list(rows)
    lines = [
        "| N | " + " | ".join(names) + " |",
        "|---:|" + "---:|" * len(names),
    ]
    for i, n in enumerate(lengths):
        cells = [f"{rows[name]['tv'][i]:.3g}" for name in names]
        lines.append(f"| {n} | " + " | ".join(cells) + " |")
    slopes = [slope_text(rows[name]["slope"]) for name in names]
    lines.append("| log-log slope | " + " | ".join(slopes) + " |")
    return "\n".join(lines) + "\n"


def plot(lengths, rows, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 4.4))
    for name, row in rows.items():
        tv = np.asarray(row["tv"], float)
        keep = tv > 0
        ax.loglog(
            np.asarray(lengths)[keep],
            tv[keep],
            "o-",
            label=f"{name} ({slope_text(row['slope'], 1)})",
        )
    ax.set_xlabel("tokens per sequence N")
    ax.set_ylabel("mean TV(P(z | X), q(z | X))")
    ax.set_title("attention posterior vs exact posterior (legend: log-log slope)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


# name: (full default, --quick value); --quick shrinks only the options left out.
QUICK = QuickDefaults(
    {
        "K": (4, 3),
        "num_train": (8192, 128),
        "max_train_length": (64, 16),
        "steps": (3000, 20),
        "lengths": ([4, 8, 16, 32, 64, 128, 256, 512], [4, 16, 64]),
        "num_eval": (2000, 100),
        # Pyro for --quick: no compiling, faster for a handful of steps.
        "backend": ("numpyro", "pyro"),
    }
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--K", type=int, help=QUICK.help("K", "components"))
    parser.add_argument("--dim", type=int, default=2, help="token dimension D")
    parser.add_argument("--separation", type=float, default=0.5, help="radius of the means")
    parser.add_argument("--scale", type=float, default=1.0, help="token noise s")
    parser.add_argument("--num-heads", type=int, default=1)
    parser.add_argument("--num-train", type=int, help=QUICK.help("num_train", "training sequences"))
    parser.add_argument("--min-train-length", type=int, default=4)
    parser.add_argument("--max-train-length", type=int, help=QUICK.help("max_train_length"))
    parser.add_argument("--steps", type=int, help=QUICK.help("steps", "SVI steps per objective"))
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--lr", type=float, default=0.03)
    parser.add_argument("--backend", choices=["pyro", "numpyro"], help=QUICK.help("backend"))
    parser.add_argument("--objectives", nargs="+", default=list(OBJECTIVES), choices=OBJECTIVES)
    parser.add_argument("--lengths", type=int, nargs="+", help=QUICK.help("lengths"))
    parser.add_argument(
        "--num-eval", type=int, help=QUICK.help("num_eval", "fresh sequences per N")
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=os.path.join("outputs", "exchangeable_attention"))
    parser.add_argument(
        "--quick", action="store_true", help="tiny sizes, 20 steps, 3 lengths, Pyro (no compiling)"
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON last")
    args = parser.parse_args(argv)
    QUICK.resolve(args)
    return args


def main(argv=None):
    args = parse_args(argv)

    rng = np.random.default_rng(args.seed)
    x0 = np.zeros((1, 2, args.dim))
    config = ex.prepare(
        {"x": x0}, K=args.K, separation=args.separation, scale=args.scale, num_heads=args.num_heads
    )
    train_data = ex.simulate(
        config, rng, args.num_train, args.max_train_length, min_length=args.min_train_length
    )
    os.makedirs(args.out, exist_ok=True)

    fixed_length = max(1, args.max_train_length // 4)
    fixed_name = f"ideal, readout at N={fixed_length}"
    evaluate = dict(num_sequences=args.num_eval, seed=args.seed + 1)
    ideal = ex.ideal_params(config)
    rows = {
        "ideal": ex.posterior_error(ideal, config, args.lengths, **evaluate),
        fixed_name: ex.posterior_error(
            ideal, config, args.lengths, readout_length=fixed_length, **evaluate
        ),
    }
    training = {}
    for objective in args.objectives:
        start = time.perf_counter()
        res = train(objective, train_data, args)
        seconds = time.perf_counter() - start
        rows[f"trained: {objective}"] = ex.posterior_error(
            res.raw_params, config, args.lengths, **evaluate
        )
        training[objective] = {
            "seconds": seconds,
            "objective_per_sequence_last_100": float(
                np.mean(res.history["objective"][-100:]) / len(train_data["x"])
            ),
            "attention_uniformity": uniformity(res.raw_params, config, train_data),
        }
        print(
            f"trained {objective:<10} {seconds:6.1f} s  objective/sequence "
            f"{training[objective]['objective_per_sequence_last_100']:.4f}  "
            f"max |N a_i - 1| = {training[objective]['attention_uniformity']:.2g}",
            flush=True,  # each objective's line as soon as it is trained, also through a pipe
        )
    for name, row in rows.items():
        exact_at = [fixed_length] if name == fixed_name else []
        row["slope"] = loglog_slope(args.lengths, row["tv"], exact_at)
        row["local_slopes"] = local_slopes(args.lengths, row["tv"], exact_at)

    table = markdown_table(args.lengths, rows)
    write_text(os.path.join(args.out, "error_vs_length.md"), table)
    plot(args.lengths, rows, os.path.join(args.out, "error_vs_length.png"))
    results = {
        "settings": {k: v for k, v in vars(args).items() if k not in ("json", "out")},
        "training": training,
        "rows": {
            name: {
                k: v if k in ("slope", "local_slopes") else np.asarray(v).tolist()
                for k, v in row.items()
            }
            for name, row in rows.items()
        },
    }
    write_text(os.path.join(args.out, "results.json"), json.dumps(results, indent=2))

    print(f"\nmean TV(P(z | X), q(z | X)) over {args.num_eval} fresh sequences per N:\n")
    print(table)
    for name, row in rows.items():
        local = ", ".join(slope_text(v) for v in row["local_slopes"])
        print(
            f"slope of log TV vs log N, {name}: {slope_text(row['slope'])}  "
            f"(between successive lengths: {local})"
        )
    print(f"\nwrote {args.out}/error_vs_length.md, error_vs_length.png, results.json")
    if args.json:
        print(json.dumps(results))
    return results


if __name__ == "__main__":
    main()
