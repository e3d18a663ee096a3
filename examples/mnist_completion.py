"""MNIST completion: a mixture's posterior over components is attention
====================================================================

Complete the lower half of binarized MNIST digits from the upper half with a Bernoulli mixture.

Fits ``bernoulli_mixture`` by MAP-EM on the training images (Larochelle & Murray's fixed
binarization, ``zoo.datasets.load_binarized_mnist``), then on the test images reports, per image
and in nats:

* ``test_log_lik``: the full-image log-likelihood ``log p(x)``;
* ``log_p_lower_given_upper``: the exact ``log p(x_lower | x_upper)``, the posterior over
  components given the upper half being the attention weights ``softmax(q K^T + log pi)``
  (``zoo.bernoulli_mixture.complete``);
* ``hard_log_p_lower``: the same with hard attention, all weight on the most probable component;
* ``soft_pixel_error`` / ``hard_pixel_error``: the fraction of lower-half pixels that the
  thresholded completion gets wrong;

and draws test digits with their soft and hard completions (``completions.png``).

Commands::

    python examples/mnist_completion.py --quick         # seconds: a smoke run (tests run this)
    # the experiment of docs/results/mnist_completion.md (K = 100 again with --steps 1500):
    python examples/mnist_completion.py --K 10 50 100 500 --train-on train+valid \
        --backend numpyro --dtype float32 --probs-prior 1.1 --steps 300 --tol 1e-4 \
        --baseline-epochs 10

The data directory is ``--data-dir``, else ``$ZOO_DATA_DIR``, else ``~/.cache/ppl-zoo``.
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numpy as np

import inference
from inference.tools.quick_options import QuickDefaults
from zoo import bernoulli_mixture as bm
from zoo.bernoulli_mixture.cross_attention import CrossAttentionCompleter
from zoo.datasets import load_binarized_mnist
from zoo.files import save_figure

SIDE = 28
UPPER = np.arange(SIDE * SIDE) < SIDE * SIDE // 2  # rows 0..13 observed


def evaluate(params, x):
    """Per-image scores of one fit on test images ``x`` (N, 784); see the module docstring."""
    lower = ~UPPER
    t0 = time.perf_counter()
    completion = bm.complete(params, x, UPPER)
    complete_s = time.perf_counter() - t0
    k_star = np.argmax(completion.weights, axis=-1)
    hard_probs = params["probs"][k_star][:, lower]  # (N, 392): the argmax component's pixels
    x_lower = x[:, lower].astype(float)
    hard_lp = (x_lower * np.log(hard_probs) + (1 - x_lower) * np.log1p(-hard_probs)).sum(1)
    soft_guess = completion.mean[:, lower] > 0.5
    hard_guess = hard_probs > 0.5
    return {
        "test_log_lik_per_image": float(bm.log_prob_observed(params, x).mean()),
        "log_p_lower_given_upper_per_image": float(bm.log_prob_missing(params, x, UPPER).mean()),
        "hard_log_p_lower_per_image": float(hard_lp.mean()),
        "soft_pixel_error": float((soft_guess != x_lower.astype(bool)).mean()),
        "hard_pixel_error": float((hard_guess != x_lower.astype(bool)).mean()),
        "mean_top_weight": float(completion.weights.max(axis=-1).mean()),
        "complete_s": round(complete_s, 3),
    }, completion


def cross_attention_baseline(x_train, x_test, K, epochs, seed, progress):
    """Scores of a cross-attention layer of the mixture's size, trained on
    log p(x_lower | x_upper)."""
    t0 = time.perf_counter()
    layer = CrossAttentionCompleter(UPPER, K).fit(
        x_train, epochs=epochs, seed=seed, progress=progress
    )
    mean, _ = layer.complete(x_test)
    x_lower = x_test[:, ~UPPER].astype(bool)
    return {
        "xattn_fit_s": round(time.perf_counter() - t0, 2),
        "xattn_log_p_lower_given_upper_per_image": float(layer.log_prob_missing(x_test).mean()),
        "xattn_pixel_error": float(((mean > 0.5) != x_lower).mean()),
    }


def subset(x, n, rng):
    """``n`` rows of ``x`` drawn without replacement (in file order); all rows if ``n`` is None."""
    if n is None or n >= len(x):
        return x
    return x[np.sort(rng.choice(len(x), size=n, replace=False))]


def plot_completions(x, completion, params, path, num=10, top=8):
    """Test digits, their upper half, the soft and hard completions and the attention weights."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    idx = np.linspace(0, len(x) - 1, num).astype(int)  # spread over the (digit-sorted) test set
    x, mean, weights = x[idx], completion.mean[idx], completion.weights[idx]
    hard = np.where(UPPER, x, params["probs"][np.argmax(weights, axis=-1)])
    rows = [
        ("test image", x),
        ("upper half", np.where(UPPER, x, 0.5)),  # the lower half hidden (grey)
        ("soft (attention)", mean),
        ("hard (argmax)", hard),
    ]
    fig, axes = plt.subplots(
        len(rows) + 1, num, figsize=(1.3 * num, 1.4 * (len(rows) + 1)), squeeze=False
    )
    for r, (title, images) in enumerate(rows):
        for c in range(num):
            ax = axes[r, c]
            ax.imshow(images[c].reshape(SIDE, SIDE), cmap="gray_r", vmin=0, vmax=1)
            ax.set_xticks([])
            ax.set_yticks([])
            if c == 0:
                ax.set_ylabel(title, fontsize=8)
    for c in range(num):  # the attention weights p(z | upper half), largest first
        ax = axes[len(rows), c]
        ax.bar(np.arange(top), np.sort(weights[c])[::-1][:top], color="tab:blue")
        ax.set_ylim(0, 1)
        ax.set_xticks([])
        ax.tick_params(labelsize=6)
        if c == 0:
            ax.set_ylabel(f"top {top} weights", fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=100)
    plt.close(fig)


# name: (full default, --quick value); --quick shrinks only the options left out.
QUICK = QuickDefaults(
    {
        "K": ([50], [10]),
        "num_train": (None, 2000),
        "num_test": (None, 500),
        "steps": (500, 30),
        "baseline_epochs": (0, 2),
    }
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--K", type=int, nargs="+", help=QUICK.help("K", "numbers of components"))
    parser.add_argument(
        "--train-on",
        default="train",
        choices=["train", "train+valid"],
        help="the 50,000 training images, or those and the 10,000 validation images",
    )
    parser.add_argument(
        "--num-train", type=int, help=QUICK.help("num_train", "default: all of --train-on")
    )
    parser.add_argument("--num-test", type=int, help=QUICK.help("num_test", "default: all 10,000"))
    parser.add_argument("--steps", type=int, help=QUICK.help("steps", "at most this many EM steps"))
    parser.add_argument("--tol", type=float, default=1e-6, help="nats per image")
    parser.add_argument("--backend", default="pyro", choices=["pyro", "numpyro"])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default=None, choices=["float32", "float64"])
    parser.add_argument(
        "--init", default="random_from_data", choices=["kmeans", "random", "random_from_data"]
    )
    parser.add_argument(
        "--probs-prior",
        type=float,
        default=2.0,
        help="a = b of the Beta prior on every pixel probability (must exceed 1)",
    )
    parser.add_argument(
        "--weight-prior", type=float, default=2.0, help="Dirichlet concentration (must exceed 1)"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--data-dir", default=None)
    parser.add_argument("--out", default=os.path.join("outputs", "mnist_completion"))
    parser.add_argument(
        "--quick", action="store_true", help="2,000/500 images, K=10, 30 steps, 2 baseline epochs"
    )
    parser.add_argument(
        "--baseline-epochs",
        type=int,
        help=QUICK.help(
            "baseline_epochs",
            "train the cross-attention baseline for this many epochs (0: skip it)",
        ),
    )
    parser.add_argument("--json", action="store_true", help="print the results as JSON last")
    args = parser.parse_args(argv)
    QUICK.resolve(args)
    return args


def main(argv=None):
    args = parse_args(argv)
    rng = np.random.default_rng(args.seed)
    # The test file is sorted by digit: subsets are drawn at random, not taken from the top.
    splits = args.train_on.split("+")
    x_train = np.concatenate([load_binarized_mnist(s, data_dir=args.data_dir) for s in splits])
    x_train = subset(x_train, args.num_train, rng)
    x_test = subset(load_binarized_mnist("test", data_dir=args.data_dir), args.num_test, rng)
    os.makedirs(args.out, exist_ok=True)
    rows = []
    for K in args.K:
        t0 = time.perf_counter()
        res = inference.fit(
            "bernoulli_mixture",
            {"x": x_train},
            algorithm="em",
            backend=args.backend,
            device=args.device,
            K=K,
            probs_prior_a=args.probs_prior,
            probs_prior_b=args.probs_prior,
            weight_concentration_prior=args.weight_prior,
            init=args.init,
            dtype=args.dtype,
            seed=args.seed,
            num_steps=args.steps,
            tol=args.tol,
            progress=not (args.quick or args.json),
        )
        fit_s = time.perf_counter() - t0
        scores, completion = evaluate(res.params, x_test)
        rows.append(
            {
                "K": K,
                "em_steps": res.num_steps,
                "converged": bool(res.converged),
                "fit_s": round(fit_s, 2),
                "train_log_joint_per_image": res.objective_per_point,
                **scores,
            }
        )
        if args.baseline_epochs > 0:
            rows[-1].update(
                cross_attention_baseline(
                    x_train, x_test, K, args.baseline_epochs, args.seed, not args.json
                )
            )
        plot_completions(x_test, completion, res.params, os.path.join(args.out, "completions.png"))

    keys = list(rows[0])
    print(f"train {len(x_train)} images, test {len(x_test)}; backend {args.backend}; nats/image")
    print("| " + " | ".join(keys) + " |")
    print("|" + "---|" * len(keys))
    for row in rows:
        cells = [f"{v:.4f}" if isinstance(v, float) else str(v) for v in row.values()]
        print("| " + " | ".join(cells) + " |")
    print(f"figure: {os.path.join(args.out, 'completions.png')} (K={args.K[-1]})")
    if args.json:
        print(json.dumps({"num_train": len(x_train), "num_test": len(x_test), "results": rows}))


if __name__ == "__main__":
    main()
