"""A VAE on binarized MNIST
========================

Train the zoo's VAE on binarized MNIST and evaluate it as Burda et al. (2016) do.

Two protocols:

* ``static`` (default): the fixed binarization of Larochelle & Murray; train on its 50,000
  training rows, stop early on its 10,000 validation rows, test on its 10,000 test rows.
* ``dynamic``: train on a fresh binarization of the grey MNIST training images (the first 50,000)
  every epoch; validate and test on one fixed binarization (``--seed``) of the other 10,000
  training images and of the 10,000 test images. The model is also scored on the fixed
  binarized test set of the static protocol (``static_test_*``), drawn from the same grey test
  images.

Reported on the whole test set (or ``--eval-n`` rows drawn at random, with the standard error):
the ELBO (one draw per image) and the importance-weighted log p(x) with ``--eval-k`` samples, in
nats per image. Writes ``metrics.json``, reconstructions, samples from the prior and, for a 2-D
latent under the dynamic protocol, the latent space coloured by digit label, to ``--out``.

Commands::

    python examples/vae.py --quick            # seconds, small subset: what the tests run
    python examples/vae.py --backend numpyro --epochs 1000 --patience 50
    python examples/vae.py --protocol dynamic --lr-schedule burda --schedule-scale 0.33
    python examples/vae.py --checkpoint run.zoo --evaluate-checkpoint   # score a stopped run

A run with ``--checkpoint`` that ended can be extended: the same command with a larger
``--epochs`` resumes it (past a schedule's end its last rate holds), as if it had asked for those
epochs from the start.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

import inference
import zoo
from inference.tools.quick_options import QuickDefaults
from zoo.datasets import dynamic_binarize, load_binarized_mnist, load_mnist
from zoo.files import save_figure, write_text
from zoo.vae import decode, encode

# name: (full default, --quick value); --quick shrinks only the options left out.
QUICK = QuickDefaults(
    {
        "epochs": (None, 2),  # None: 500, or the schedule's length (see parse_args)
        "patience": (30, 2),
        "eval_k": (5000, 20),
        "latent_dim": (50, 8),
        "hidden": ([200, 200], [64]),
    }
)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--quick", action="store_true", help="a small subset and budget (seconds)")
    p.add_argument("--protocol", choices=("static", "dynamic"), default="static")
    p.add_argument("--backend", choices=("pyro", "numpyro"), default="numpyro")
    p.add_argument("--device", default="cpu")
    p.add_argument(
        "--epochs",
        type=int,
        help=QUICK.help(
            "epochs", "at most this many passes (default 500, or the schedule's length)"
        ),
    )
    p.add_argument(
        "--patience", type=int, help=QUICK.help("patience", "epochs without a better validation")
    )
    p.add_argument("--batch-size", type=int, default=100)
    p.add_argument("--lr", type=float, default=1e-3)
    p.add_argument(
        "--lr-schedule",
        choices=("constant", "burda"),
        default="constant",
        help="burda: Burda et al.'s stages i = 0..7 of 3**i epochs at lr * 10**(-i/7)",
    )
    p.add_argument(
        "--schedule-scale",
        type=float,
        default=1.0,
        help="burda: each stage runs max(1, round(scale * 3**i)) epochs (1: their 3,280 passes)",
    )
    p.add_argument("--latent-dim", type=int, help=QUICK.help("latent_dim"))
    p.add_argument("--hidden", type=int, nargs="+", help=QUICK.help("hidden", "layer widths"))
    p.add_argument("--activation", default="tanh", choices=("tanh", "relu", "softplus"))
    p.add_argument("--elbo", default="trace", choices=("trace", "meanfield", "iwae"))
    p.add_argument("--particles", type=int, default=1, help="samples per step (k for iwae)")
    p.add_argument(
        "--jit", action="store_true", help="Pyro: compile the ELBO (JitTrace_ELBO; not iwae)"
    )
    p.add_argument(
        "--eval-k", type=int, help=QUICK.help("eval_k", "importance samples for log p(x)")
    )
    p.add_argument("--eval-n", type=int, default=None, help="test rows (default: all)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--checkpoint", default=None, help="resume from / write to this file")
    p.add_argument(
        "--evaluate-checkpoint",
        action="store_true",
        help="no training: score the best parameters of --checkpoint (a run stopped early)",
    )
    p.add_argument("--out", default="outputs/vae")
    args = p.parse_args(argv)
    if args.schedule_scale <= 0:
        p.error(f"--schedule-scale must be > 0; got {args.schedule_scale}.")
    if args.evaluate_checkpoint and not args.checkpoint:
        p.error("--evaluate-checkpoint scores the run of --checkpoint PATH; give the path.")
    QUICK.resolve(args)
    if args.epochs is None:
        args.epochs = sum(n for n, _ in epoch_stages(args)) if args.lr_schedule == "burda" else 500
    return args


def epoch_stages(args) -> list[tuple[int, float]]:
    """Burda et al.'s learning-rate stages as (epochs, lr) pairs, each stage ``--schedule-scale``
    times as long as theirs."""
    return [(max(1, round(args.schedule_scale * 3**i)), args.lr * 10 ** (-i / 7)) for i in range(8)]


def load(protocol: str, seed: int, quick: bool, with_train: bool = True):
    """(train, valid, test, test_labels); train holds grey levels under the dynamic protocol.

    Without ``with_train`` (scoring a saved run) train and valid are None and the training
    images are not read. Each fixed binarization has its own stream from ``seed``.
    """
    train = valid = labels = None
    if protocol == "static":
        test = load_binarized_mnist("test").astype(np.float32)
        if with_train:
            train, valid = (load_binarized_mnist(s).astype(np.float32) for s in ("train", "valid"))
    else:
        test_images, labels = load_mnist("test")
        flat_test = test_images.reshape(len(test_images), -1)
        test = dynamic_binarize(flat_test, np.random.default_rng([seed, 2])).astype(np.float32)
        if with_train:
            images, _ = load_mnist("train")
            flat = images.reshape(len(images), -1)
            train = flat[:50_000].astype(np.float32) / 255
            valid = dynamic_binarize(flat[50_000:], np.random.default_rng([seed, 1]))
            valid = valid.astype(np.float32)
    if quick:
        # The binarized test file is not shuffled: take rows from all over it, drawn apart from
        # the training rows so that scoring a checkpoint alone scores the same test rows.
        pick = np.random.default_rng(seed + 1)
        if with_train:
            train = train[pick.choice(len(train), 2000, replace=False)]
            valid = valid[pick.choice(len(valid), 500, replace=False)]
        rows = np.random.default_rng([seed, 3]).choice(len(test), 500, replace=False)
        test, labels = test[rows], (None if labels is None else labels[rows])
    return train, valid, test, labels


def evaluate(res, test, args, prefix="test"):
    rows = np.arange(len(test))
    if args.eval_n is not None and args.eval_n < len(test):
        rows = np.sort(np.random.default_rng(args.seed + 2).choice(len(test), args.eval_n, False))
    x = test[rows]
    t0 = time.perf_counter()
    elbo = res.elbo(x, num_samples=1, seed=args.seed, device=args.device)
    log_px = res.log_marginal_likelihood(
        x, num_samples=args.eval_k, seed=args.seed, device=args.device
    )
    # The standard error of a mean over a sample of the test set (--eval-n, or --quick's 500
    # rows); 0 for the whole test set, whose mean is the figure itself (up to Monte Carlo).
    sampled = len(x) < len(test) or args.quick
    sem = lambda v: float(v.std(ddof=1) / np.sqrt(len(v))) if sampled else 0.0  # noqa: E731
    return {
        f"{prefix}_rows": int(len(x)),
        f"{prefix}_elbo": float(elbo.mean()),
        f"{prefix}_elbo_sem": sem(elbo),
        f"{prefix}_log_px_k{args.eval_k}": float(log_px.mean()),
        f"{prefix}_log_px_sem": sem(log_px),
        f"{prefix}_eval_seconds": time.perf_counter() - t0,
    }


def pictures(res, test, labels, out):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    params, config = res.raw_params, res.config
    side = int(round(np.sqrt(config.num_pixels)))
    rows = np.random.default_rng(0).choice(len(test), 12, replace=False)
    loc, _ = encode(params, config, test[rows])
    recon = decode(params, config, loc)
    samples = decode(params, config, np.random.default_rng(1).standard_normal((12, loc.shape[1])))
    fig, axes = plt.subplots(3, 12, figsize=(12, 3.3))
    for j in range(12):
        for i, (img, title) in enumerate(
            ((test[rows[j]], "data"), (recon[j], "reconstruction"), (samples[j], "prior sample"))
        ):
            axes[i, j].imshow(img.reshape(side, side), cmap="gray", vmin=0, vmax=1)
            axes[i, j].axis("off")
            if j == 0:
                axes[i, j].set_title(title, fontsize=8, loc="left")
    fig.tight_layout()
    save_figure(fig, os.path.join(out, "vae_reconstructions_samples.png"), dpi=110)
    plt.close(fig)
    if config.latent_dim == 2 and labels is not None:
        loc, _ = encode(params, config, test)
        fig, ax = plt.subplots(figsize=(5.5, 5))
        points = ax.scatter(loc[:, 0], loc[:, 1], c=labels, cmap="tab10", s=2)
        fig.colorbar(points, ax=ax, label="digit")
        ax.set(xlabel="z1", ylabel="z2", title="test digits: encoder means")
        fig.tight_layout()
        save_figure(fig, os.path.join(out, "vae_latent_space.png"), dpi=110)
        plt.close(fig)


def from_checkpoint(path, test, args):
    """The best-validated parameters of a checkpoint, as a FitResult (config from ``args``,
    refused unless it is the one the checkpoint was trained with); a saved fit
    (``FitResult.save``) is read as it is."""
    from inference.persistence.checkpoint import load as load_checkpoint
    from inference.persistence.checkpoint_header import config_arrays, config_summary, fingerprint

    header, arrays = load_checkpoint(path)
    if header.get("kind") == "fit_result":
        return inference.load(path)
    if header.get("model") != "vae" or "validation" not in header:
        sys.exit(f"vae.py: error: {path} is not a checkpoint of this script's VAE fit (model "
                 f"{header.get('model')!r}, validated: {'validation' in header}).")  # fmt: skip
    best = {k[len("best/") :]: v for k, v in arrays.items() if k.startswith("best/")}
    history = {k[len("history/") :]: v for k, v in arrays.items() if k.startswith("history/")}
    spec = zoo.get_model("vae")
    config = spec.prepare(
        {"x": test[:2]},
        latent_dim=args.latent_dim,
        hidden=tuple(args.hidden),
        activation=args.activation,
    )
    if fingerprint(config_arrays(config)) != header.get("config_fingerprint"):
        there, here = header.get("config", {}), config_summary(config)
        differ = ", ".join(
            f"{k}: {there.get(k)!r} there, {here[k]!r} here"
            for k in sorted(here)
            if there.get(k) != here[k]
        )
        sys.exit(f"vae.py: error: {path} was trained with another network ({differ}); pass the "
                 "--latent-dim, --hidden and --activation it was trained with.")  # fmt: skip
    return inference.FitResult(
        model="vae",
        algorithm="svi",
        backend=header["backend"],
        guide=header["guide"],
        params=best,
        raw_params=best,
        config=config,
        history=history,
        converged=False,
        timing={"per_step": float(np.median(np.diff(history["time"])))},
        num_data=50_000 if not args.quick else 2000,  # the training rows of either protocol
        seed=header["seed"],
        options=header["options"],
        best_step=header["validation"]["best_step"],
    )


def main(argv=None):
    args = parse_args(argv)
    os.makedirs(args.out, exist_ok=True)
    train, valid, test, labels = load(
        args.protocol, args.seed, args.quick, with_train=not args.evaluate_checkpoint
    )
    if args.evaluate_checkpoint:
        res = from_checkpoint(args.checkpoint, test, args)
        steps_per_epoch = res.num_data // args.batch_size
    else:
        steps_per_epoch = len(train) // args.batch_size
        if steps_per_epoch == 0:
            sys.exit(f"vae.py: error: --batch-size {args.batch_size} exceeds the {len(train)} "
                     "training rows.")  # fmt: skip
        res = fit(args, train, valid, steps_per_epoch)
    metrics = report(args, res, test, labels, steps_per_epoch)
    print(json.dumps(metrics, indent=2))
    return metrics


def fit(args, train, valid, steps_per_epoch):
    return inference.fit(
        "vae",
        {"x": train},
        "svi",
        args.backend,
        device=args.device,
        seed=args.seed,
        num_steps=args.epochs * steps_per_epoch,
        batch_size=args.batch_size,
        lr=args.lr
        if args.lr_schedule == "constant"
        else [(n * steps_per_epoch, lr) for n, lr in epoch_stages(args)],
        elbo=args.elbo,
        num_particles=args.particles,
        jit=args.jit,
        dynamic_binarization=args.protocol == "dynamic",
        validation_data={"x": valid},
        validate_every=steps_per_epoch,
        patience=args.patience,
        checkpoint=args.checkpoint,
        checkpoint_every=steps_per_epoch if args.checkpoint else None,
        resume=args.checkpoint is not None,
        progress=not args.quick,
        latent_dim=args.latent_dim,
        hidden=tuple(args.hidden),
        activation=args.activation,
    )


def report(args, res, test, labels, steps_per_epoch):
    metrics = {
        "settings": {k: v for k, v in vars(args).items() if k not in ("out", "checkpoint")},
        "epochs_run": len(res.history["time"]) / steps_per_epoch,
        "best_epoch": (res.best_step or res.num_steps) / steps_per_epoch,
        "best_valid_elbo": float(np.max(res.history["validation"])),
        "train_seconds": float(res.history["time"][-1]),  # the loop's clock, across resumes
        # The training steps alone (the median step times the steps of an epoch); an epoch on
        # the loop's clock adds its binarization, validation and checkpoint: train_seconds /
        # epochs_run.
        "seconds_per_epoch": res.timing["per_step"] * steps_per_epoch,
        **evaluate(res, test, args),
    }
    if args.protocol == "dynamic":
        static_test = load("static", args.seed, args.quick, with_train=False)[2]
        metrics.update(evaluate(res, static_test, args, prefix="static_test"))
    res.save(os.path.join(args.out, "vae_fit.zoo"))
    pictures(res, test, labels, args.out)
    write_text(os.path.join(args.out, "metrics.json"), json.dumps(metrics, indent=2))
    return metrics


if __name__ == "__main__":
    main()
