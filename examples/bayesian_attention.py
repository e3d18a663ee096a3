"""Bayesian attention on MNIST
===========================

Softmax, Weibull and log-normal attention in the same transformer.

Fits ``bam_classifier`` (a small patch transformer, 7x7 patches -> 16 tokens) with each attention
variant under the same budget (architecture, optimiser, steps, batch size) for every training-set
size and seed, then reports on the MNIST test images (``--num-test`` drawn once, seed 0):

* clean digits: accuracy, NLL (nats per image), ECE (15 equal-width confidence bins) and mean
  predictive entropy;
* the same digits rotated by each ``--angles`` (``scipy.ndimage.rotate``, bilinear): accuracy,
  NLL, mean predictive entropy and the AUROC of the entropy for telling rotated from clean digits.

Predictions average ``--num-samples`` forward passes with fresh attention draws (``--predict
mc``) or use the posterior-mean attention (``--predict mean``); softmax attention is
deterministic. Each training subset is drawn with its seed (the same subset for every variant).

Writes to ``--out``: ``results.json`` (every run), ``results.md`` (mean +- std over seeds) and
``reliability.png`` (reliability diagrams on clean test digits at ``--reliability-size``, by
default the smallest training size, pooled over seeds).

Commands::

    python examples/bayesian_attention.py --quick      # seconds: a smoke run (tests run this)
    # the experiment of docs/results/bayesian_attention.md (about 40 minutes on 2 cores):
    python examples/bayesian_attention.py --backend numpyro --prior contextual --seeds 0 1 2 \
        --train-sizes 1000 10000 60000 --epochs 100 20 5 --concentration 3 --sigma 0.4 \
        --kl-weight 0.01
    python examples/bayesian_attention.py --summarize outputs/bayesian_attention/results.json

The data directory is ``--data-dir``, else ``$ZOO_DATA_DIR``, else ``~/.cache/ppl-zoo``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import time

import numpy as np
from scipy import ndimage

import inference
from inference.tools.quick_options import QuickDefaults
from zoo.bayesian_attention import metrics
from zoo.bayesian_attention.classifier import predict_proba
from zoo.datasets import load_mnist
from zoo.files import save_figure, write_text

ATTENTIONS = ("softmax", "weibull", "lognormal")
CLEAN_METRICS = ("accuracy", "nll", "ece", "entropy")
ROTATED_METRICS = ("accuracy", "nll", "entropy", "auroc")


# name: (full default, --quick value); --quick shrinks only the options left out.
QUICK = QuickDefaults(
    {
        "train_sizes": ([10000], [500]),
        "num_test": (10000, 300),
        "epochs": ([10.0], [6.0]),
        "batch_size": (128, 100),
        "lr": (1e-3, 3e-3),
        "width": (32, 16),
        "layers": (2, 1),
        "num_samples": (10, 4),
        # Pyro for --quick: no compilation, faster for a handful of steps.
        "backend": ("numpyro", "pyro"),
    }
)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a small subset and budget (seconds)")
    p.add_argument("--attentions", nargs="+", default=list(ATTENTIONS), choices=ATTENTIONS)
    p.add_argument("--prior", default="fixed", choices=("fixed", "contextual"))
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--train-sizes", type=int, nargs="+", help=QUICK.help("train_sizes"))
    p.add_argument("--num-test", type=int, help=QUICK.help("num_test", "test digits (drawn once)"))
    p.add_argument(
        "--epochs", type=float, nargs="+",
        help=QUICK.help(
            "epochs", "passes over each training set: one value, or one per --train-sizes"
        ),
    )  # fmt: skip
    p.add_argument("--batch-size", type=int, help=QUICK.help("batch_size"))
    p.add_argument("--lr", type=float, help=QUICK.help("lr"))
    p.add_argument("--elbo", default="meanfield", choices=("trace", "meanfield"))
    p.add_argument("--width", type=int, help=QUICK.help("width"))
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--layers", type=int, help=QUICK.help("layers"))
    p.add_argument("--patch-size", type=int, default=7)
    p.add_argument("--concentration", type=float, default=10.0, help="Weibull shape k")
    p.add_argument("--sigma", type=float, default=0.1, help="log-normal posterior scale")
    p.add_argument("--kl-weight", type=float, default=0.01, help="weight of the KL term")
    p.add_argument(
        "--kl-anneal-steps", type=int, default=0,
        help="steps of a linear KL warm-up from 1%% of --kl-weight (0: none)",
    )  # fmt: skip
    p.add_argument("--predict", default="mc", choices=("mc", "mean"))
    p.add_argument(
        "--num-samples", type=int, help=QUICK.help("num_samples", "draws for --predict mc")
    )
    p.add_argument(
        "--reliability-size", type=int, default=None,
        help="training size of the reliability diagrams (default: the smallest)",
    )  # fmt: skip
    p.add_argument("--angles", type=float, nargs="+", default=[30.0, 60.0, 90.0])
    p.add_argument("--backend", choices=("pyro", "numpyro"), help=QUICK.help("backend"))
    p.add_argument("--device", default="cpu")
    p.add_argument("--data-dir", default=None)
    p.add_argument("--out", default=os.path.join("outputs", "bayesian_attention"))
    p.add_argument("--json", action="store_true", help="print the summary as JSON last")
    p.add_argument(
        "--summarize", metavar="RESULTS_JSON", default=None,
        help="only rebuild the tables from a results.json (into results.md beside it); no fitting",
    )  # fmt: skip
    args = p.parse_args(argv)
    QUICK.resolve(args)
    if len(args.epochs) not in (1, len(args.train_sizes)):
        p.error(
            f"--epochs takes one value or one per training size ({len(args.train_sizes)}); got "
            f"{len(args.epochs)}."
        )
    epochs = args.epochs * len(args.train_sizes) if len(args.epochs) == 1 else args.epochs
    args.epochs_by_size = dict(zip(args.train_sizes, epochs, strict=True))
    if args.reliability_size is not None and args.reliability_size not in args.train_sizes:
        p.error(f"--reliability-size must be one of --train-sizes; got {args.reliability_size}.")
    return args


def load_images(split: str, data_dir):
    images, labels = load_mnist(split, data_dir=data_dir)
    return images.reshape(len(images), -1).astype(np.float32) / 255.0, labels.astype(np.int64)


def rotate(x, angle: float):
    """Rotate flattened 28x28 digits by ``angle`` degrees about their centre (bilinear)."""
    side = math.isqrt(x.shape[1])
    images = x.reshape(-1, side, side)
    out = ndimage.rotate(images, angle, axes=(1, 2), reshape=False, order=1, mode="constant")
    return np.clip(out, 0.0, 1.0).reshape(len(x), -1).astype(x.dtype)


def evaluate(res, x_test, y_test, rotated, args):
    """Metrics of one fit on clean and rotated test digits; also the clean probabilities."""
    options = dict(num_samples=args.num_samples, method=args.predict, device=args.device)
    clean = predict_proba(res, x_test, seed=0, **options)
    clean_entropy = metrics.predictive_entropy(clean)
    row = {
        "clean": {
            "accuracy": metrics.accuracy(clean, y_test),
            "nll": metrics.negative_log_likelihood(clean, y_test),
            "ece": metrics.expected_calibration_error(clean, y_test, num_bins=15),
            "entropy": float(clean_entropy.mean()),
        },
        "rotated": {},
    }
    for angle, x_rot in rotated.items():
        probs = predict_proba(res, x_rot, seed=1, **options)
        entropy = metrics.predictive_entropy(probs)
        is_rotated = np.r_[np.zeros(len(clean_entropy), bool), np.ones(len(entropy), bool)]
        row["rotated"][angle] = {
            "accuracy": metrics.accuracy(probs, y_test),
            "nll": metrics.negative_log_likelihood(probs, y_test),
            "entropy": float(entropy.mean()),
            "auroc": metrics.auroc(np.r_[clean_entropy, entropy], is_rotated),
        }
    return row, clean


def fit_one(attention, x, y, seed, args):
    steps = max(1, math.ceil(args.epochs_by_size[len(x)] * len(x) / args.batch_size))
    return inference.fit(
        "bam_classifier",
        {"x": x, "y": y},
        "svi",
        args.backend,
        device=args.device,
        seed=seed,
        num_steps=steps,
        batch_size=min(args.batch_size, len(x)),
        lr=args.lr,
        elbo=args.elbo,
        progress=not (args.quick or args.json),
        attention=attention,
        prior=args.prior,
        width=args.width,
        num_heads=args.heads,
        num_layers=args.layers,
        patch_size=args.patch_size,
        concentration=args.concentration,
        sigma=args.sigma,
        kl_weight=args.kl_weight,
        kl_anneal_steps=args.kl_anneal_steps,
    )


def _cell(values):
    values = np.asarray(values, dtype=float)
    if len(values) == 1:
        return f"{values[0]:.4f}"
    return f"{values.mean():.4f} ± {values.std(ddof=1):.4f}"


def markdown_tables(runs, settings) -> str:
    """Mean +- std (over seeds) of every metric, by training size and attention, and each
    Bayesian variant's paired difference from softmax attention. ``settings``: the run's
    options (``results.json``'s ``settings``)."""
    seeds = sorted({r["seed"] for r in runs})
    s = settings
    head = (
        f"{len(seeds)} seed(s) {seeds}; backend {s['backend']}; elbo {s['elbo']}; prior "
        f"{s['prior']}; k {s['concentration']:g}; sigma {s['sigma']:g}; kl_weight "
        f"{s['kl_weight']:g}, warm-up {s['kl_anneal_steps']} steps; epochs by size "
        f"{s['epochs_by_size']}; batch {s['batch_size']}; lr {s['lr']:g}; predict {s['predict']}"
        + (f" ({s['num_samples']} draws)" if s["predict"] == "mc" else "")
        + f"; {s['num_test']} test digits. Mean ± std over seeds (std with ddof=1).\n"
    )
    groups = {}
    for r in runs:
        groups.setdefault((r["train_size"], r["attention"]), []).append(r)
    lines = [head, "**Clean test digits**\n"]
    lines.append("| train size | attention | " + " | ".join(CLEAN_METRICS) + " | fit s |")
    lines.append("|---|---|" + "---|" * (len(CLEAN_METRICS) + 1))
    for (n, att), rs in groups.items():
        cells = [_cell([r["clean"][m] for r in rs]) for m in CLEAN_METRICS]
        cells.append(_cell([r["fit_seconds"] for r in rs]))
        lines.append(f"| {n} | {att} | " + " | ".join(cells) + " |")
    lines.append("\n**Rotated test digits** (AUROC: entropy, rotated vs clean)\n")
    lines.append("| train size | attention | angle | " + " | ".join(ROTATED_METRICS) + " |")
    lines.append("|---|---|---|" + "---|" * len(ROTATED_METRICS))
    for (n, att), rs in groups.items():
        for angle in rs[0]["rotated"]:
            cells = [_cell([r["rotated"][angle][m] for r in rs]) for m in ROTATED_METRICS]
            lines.append(f"| {n} | {att} | {float(angle):g} | " + " | ".join(cells) + " |")
    lines.extend(_paired_table(groups))
    return "\n".join(lines) + "\n"


def _metric(run, where, metric):
    """A run's ``metric`` on the clean digits (``where="clean"``) or at one rotation angle."""
    return run["clean"][metric] if where == "clean" else run["rotated"][where][metric]


def _paired_table(groups) -> list[str]:
    """Per training size and Bayesian variant: mean +- std over seeds of (variant - softmax) on
    the same seed (the same training subset), with the paired t-test's two-sided p-value."""
    from scipy import stats

    metrics_ = [("clean", "accuracy"), ("clean", "nll"), ("clean", "ece")]
    angles = next(iter(groups.values()))[0]["rotated"]
    metrics_ += [(angle, "auroc") for angle in angles]
    rows = []
    for (n, att), rs in groups.items():
        base = {r["seed"]: r for r in groups.get((n, "softmax"), [])}
        pairs = [(r, base[r["seed"]]) for r in rs if r["seed"] in base]
        if att == "softmax" or len(pairs) < 2:
            continue
        cells = []
        for where, metric in metrics_:
            diff = np.array(
                [_metric(a, where, metric) - _metric(b, where, metric) for a, b in pairs]
            )
            if np.ptp(diff) == 0:  # no spread: the t statistic is undefined
                cells.append(f"{diff.mean():+.4f} ± 0 (p undefined)")
                continue
            p = stats.ttest_1samp(diff, 0.0).pvalue  # the paired t-test on the differences
            cells.append(f"{diff.mean():+.4f} ± {diff.std(ddof=1):.4f} (p={p:.2g})")
        rows.append(f"| {n} | {att} | " + " | ".join(cells) + " |")
    if not rows:
        return []
    names = [m if w == "clean" else f"AUROC {float(w):g}°" for w, m in metrics_]
    return [
        "\n**Bayesian minus softmax, paired by seed** (mean ± std over seeds; p: paired t-test)\n",
        "| train size | attention | " + " | ".join(names) + " |",
        "|---|---|" + "---|" * len(names),
        *rows,
    ]


def plot_reliability(curves, path, title, num_bins=15):
    """One reliability diagram per attention variant: accuracy per confidence bin."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(curves), figsize=(3.2 * len(curves), 3.3), squeeze=False)
    edges = np.linspace(0, 1, num_bins + 1)
    for ax, (attention, (probs, labels)) in zip(axes[0], curves.items(), strict=True):
        conf, acc, count = metrics.reliability(probs, labels, num_bins)
        ece = metrics.expected_calibration_error(probs, labels, num_bins)
        used = count > 0
        ax.bar(edges[:-1][used], acc[used], width=1 / num_bins, align="edge", edgecolor="k",
               alpha=0.7, label="accuracy")  # fmt: skip
        ax.plot([0, 1], [0, 1], "k--", lw=1, label="calibrated")
        ax.plot(conf[used], acc[used], "r.", ms=4, label="(confidence, accuracy)")
        ax.set_xlim(0, 1)
        ax.set_ylim(0, 1)
        ax.set_xlabel("confidence")
        ax.set_title(f"{attention}: ECE {ece:.3f}", fontsize=9)
    axes[0][0].set_ylabel("accuracy")
    axes[0][0].legend(fontsize=7, loc="upper left")
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)


def summarize(path: str) -> str:
    """Rebuild the tables of a ``results.json`` into the ``.md`` file of the same name beside it
    (``results.md``) and return their text."""
    with open(path) as f:
        results = json.load(f)
    table = markdown_tables(results["runs"], results["settings"])
    write_text(os.path.splitext(path)[0] + ".md", table)
    return table


def main(argv=None):
    args = parse_args(argv)
    if args.summarize:
        table = summarize(args.summarize)
        print(table)
        return table
    os.makedirs(args.out, exist_ok=True)
    x_train_all, y_train_all = load_images("train", args.data_dir)
    x_test, y_test = load_images("test", args.data_dir)
    if args.num_test < len(x_test):  # a random subset, not the file's first rows
        rows = np.sort(np.random.default_rng(0).choice(len(x_test), args.num_test, replace=False))
        x_test, y_test = x_test[rows], y_test[rows]
    rotated = {angle: rotate(x_test, angle) for angle in args.angles}

    runs, curves = [], {}
    shown = min(args.train_sizes) if args.reliability_size is None else args.reliability_size
    for n in args.train_sizes:
        for seed in args.seeds:
            rows = np.random.default_rng(seed).choice(len(x_train_all), n, replace=False)
            x, y = x_train_all[np.sort(rows)], y_train_all[np.sort(rows)]
            for attention in args.attentions:
                t0 = time.perf_counter()
                res = fit_one(attention, x, y, seed, args)
                fit_seconds = time.perf_counter() - t0
                row, clean = evaluate(res, x_test, y_test, rotated, args)
                runs.append(
                    {
                        "train_size": n,
                        "seed": seed,
                        "attention": attention,
                        "steps": res.num_steps,
                        "final_objective_per_image": res.objective_per_point,
                        "fit_seconds": fit_seconds,
                        **row,
                    }
                )
                if n == shown:
                    probs, labels = curves.get(attention, (np.zeros((0, 10)), np.zeros(0, int)))
                    curves[attention] = (np.r_[probs, clean], np.r_[labels, y_test])

    settings = {k: v for k, v in vars(args).items() if k not in ("out", "data_dir", "json")}
    table = markdown_tables(runs, settings)
    write_text(os.path.join(args.out, "results.md"), table)
    write_text(
        os.path.join(args.out, "results.json"),
        json.dumps({"settings": settings, "runs": runs}, indent=2),
    )
    title = f"clean test digits, {shown} training images, {len(args.seeds)} seed(s) pooled"
    plot_reliability(curves, os.path.join(args.out, "reliability.png"), title)
    print(table)
    print(f"written: {args.out}/results.md, results.json, reliability.png")
    summary = {"settings": settings, "runs": runs}
    if args.json:
        print(json.dumps(summary))
    return summary


if __name__ == "__main__":
    main()
