"""CAVI, EM, SVI and NUTS on the Bayesian GMM
==========================================

Compare CAVI, EM, SVI (enumerated and Gumbel-softmax guides) and NUTS on the Bayesian GMM.

The structured updates (CAVI, EM) reach their optimum in a few dozen sweeps; gradient-based SVI
on the same model needs thousands of noisy steps. A second comparison, with as many components
as the data have clusters, measures every run against NUTS (the assignments summed out): how far
its posterior means are from NUTS's, in NUTS's posterior sds, and how its sds compare
(mean-field VI understates them). Writes both tables (markdown and JSON), the objective against
wall time, the fitted ellipses and the posterior marginals of a few parameters.

Commands::

    python examples/gmm_compare.py             # the full comparison on the built-in data
    python examples/gmm_compare.py --nuts-backends numpyro,pyro   # NUTS rows on both backends
    python examples/gmm_compare.py --nuts-seed 1   # NUTS's chains from another seed, same data
    python examples/gmm_compare.py --quick     # seconds: a smoke run (tests run this)

NUTS runs on NumPyro by default: Pyro's NUTS takes minutes per hundred iterations on this
model (each gradient re-runs the enumerated model in Python), so its row is opt-in. The first
backend of ``--nuts-backends`` gives the reference.

The accuracy figures depend on NUTS's chains, which are chaotic: another CPU (another vector
width, another BLAS) changes them as much as another ``--nuts-seed`` does.
``benchmarks/nuts_seed_spread.py`` measures by how much.
"""

from __future__ import annotations

import argparse
import os

import arviz as az
import numpy as np
import torch

import inference
import zoo
from inference import accuracy
from inference.compare import Comparison
from inference.tools.quick_options import QuickDefaults
from zoo.files import save_figure, write_text


def plot_ellipses(comparison, x, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Ellipse

    backend = comparison.rows[-1]["backend"]  # one backend's fits (the last one's)
    runs = [
        (r, res)
        for r, res in zip(comparison.rows, comparison.results, strict=True)
        if r["backend"] == backend
    ]
    fig, axes = plt.subplots(1, len(runs), figsize=(4 * len(runs), 4), squeeze=False)
    for ax, (row, res) in zip(axes[0], runs, strict=True):
        ax.scatter(x[:, 0], x[:, 1], s=3, c="0.6")
        for w, m, c in zip(
            res.params["weights"], res.params["means"], res.params["covariances"], strict=True
        ):
            if w < 0.01:
                continue  # a component switched off by the data
            vals, vecs = np.linalg.eigh(c)
            angle = np.degrees(np.arctan2(vecs[1, 1], vecs[0, 1]))
            for nsig in (1, 2):
                ax.add_patch(
                    Ellipse(
                        m,
                        *(2 * nsig * np.sqrt(vals[::-1])),
                        angle=angle,
                        fill=False,
                        lw=1.2,
                        alpha=min(1.0, 0.3 + 2 * w),
                    )
                )
        name = row["algorithm"] + (f"-{row['guide']}" if row["guide"] else "")
        ax.set_title(f"{name}: {int((res.params['weights'] >= 0.01).sum())} components")
        ax.set_aspect("equal")
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def plot_marginals(comparison, reference, path, num_components=3):
    """Posterior marginals of the x-coordinate of the heaviest components' means and of the
    heaviest weight, one line per algorithm and guide (on the reference's backend where it
    ran there); every run's components matched to the reference's first. EM's point estimate
    is a vertical line."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = zoo.get_model("bayesian_gmm").exchangeable_components
    ref = reference.sample_posterior(num_samples=4000)
    order = np.argsort(-ref["weights"].mean(axis=0))[:num_components]
    panels = [("means", (j, 0), f"means[{j}, 0]") for j in order]
    panels.append(("weights", (order[0],), f"weights[{order[0]}]"))
    fig, axes = plt.subplots(1, len(panels), figsize=(3.6 * len(panels), 3.4), squeeze=False)
    runs = sorted(  # one run per algorithm and guide, the reference's backend's first
        zip(comparison.rows, comparison.results, strict=True),
        key=lambda run: run[0]["backend"] != reference.backend,
    )
    plotted = set()
    for row, res in runs:
        if (row["algorithm"], row["guide"]) in plotted:
            continue
        plotted.add((row["algorithm"], row["guide"]))
        point = row["algorithm"] == "em"
        draws = res.sample_posterior(num_samples=1 if point else 4000)
        draws = accuracy.relabel(draws, accuracy.match_components(draws, ref, keys), keys)
        label = row["algorithm"] + (f"-{row['guide']}" if row["guide"] else "")
        for ax, (key, index, _) in zip(axes[0], panels, strict=True):
            values = draws[key][(slice(None), *index)]
            if point:
                ax.axvline(values[0], color="k", ls=":", lw=1.2, label=label)
            else:
                ax.hist(values, bins=60, density=True, histtype="step", lw=1.4, label=label)
    for ax, (_, _, title) in zip(axes[0], panels, strict=True):
        ax.set_title(title)
        ax.set_yticks([])
    axes[0][0].legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)


def write_table(table, out, name):
    # flush: a table shows as soon as it is ready, also through a pipe (`| tee log`)
    print(table.to_markdown(), flush=True)
    write_text(os.path.join(out, f"{name}.md"), table.to_markdown() + "\n")
    write_text(os.path.join(out, f"{name}.json"), table.to_json())


# name: (full default, --quick value); --quick shrinks only the options left out.
QUICK = QuickDefaults(
    {
        "n": (1000, 200),
        "svi_steps": (None, 30),
        "nuts_chains": (4, 2),
        "nuts_warmup": (500, 30),
        "nuts_draws": (500, 30),
        "nuts_max_tree_depth": (10, 4),
    }
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n", 1)[0])
    parser.add_argument("--quick", action="store_true", help="a few steps of each, for tests")
    parser.add_argument(
        "--n", type=int, help=QUICK.help("n", "training points (same again held out)")
    )
    parser.add_argument("--K", type=int, default=8, help="components of the speed comparison")
    parser.add_argument(
        "--svi-steps",
        type=int,
        help=QUICK.help(
            "svi_steps",
            "SVI's step cap (default: SVI's own, with its stopping rule and decaying lr)",
        ),
    )
    parser.add_argument("--seed", type=int, default=0, help="of the data and of every run")
    parser.add_argument("--backends", default="pyro,numpyro", help="of CAVI, EM and SVI")
    parser.add_argument(
        "--accuracy-K", type=int, default=4, help="components of the accuracy comparison"
    )
    parser.add_argument(
        "--nuts-backends",
        default="numpyro",
        help="comma-separated backends of the NUTS rows; the first gives the reference",
    )
    parser.add_argument("--nuts-chains", type=int, help=QUICK.help("nuts_chains"))
    parser.add_argument("--nuts-warmup", type=int, help=QUICK.help("nuts_warmup"))
    parser.add_argument("--nuts-draws", type=int, help=QUICK.help("nuts_draws", "draws per chain"))
    parser.add_argument("--nuts-max-tree-depth", type=int, help=QUICK.help("nuts_max_tree_depth"))
    parser.add_argument(
        "--nuts-seed",
        type=int,
        default=None,
        help="seed of the NUTS chains alone (default: --seed); the data and the other runs "
        "keep --seed's",
    )
    parser.add_argument("--out", default="outputs/gmm_compare")
    args = parser.parse_args(argv)
    for flag, names in (("--backends", args.backends), ("--nuts-backends", args.nuts_backends)):
        unknown = [name for name in names.split(",") if name not in zoo.BACKENDS]
        if unknown:  # said now, not minutes in, when the runs reach them
            parser.error(f"{flag}: unknown backend(s) {unknown}; the backends are {zoo.BACKENDS}.")
    QUICK.resolve(args)
    if args.nuts_seed is None:
        args.nuts_seed = args.seed
    return args


def make_data(args):
    """The training and held-out points, both drawn from ``--seed``."""
    spec = zoo.get_model("bayesian_gmm")
    rng = np.random.default_rng(args.seed)
    return spec.make_data(rng, args.n), spec.make_data(rng, args.n)


def settings(args, test):
    """``(fits, accuracy_model)``: the options of the CAVI, EM and SVI runs of both comparisons,
    and the accuracy comparison's model and scoring options (with the fits' or NUTS's)."""
    common = dict(test_data=test, seeds=(args.seed,), num_samples=100 if args.quick else 1000)
    # CAVI, EM and SVI, as both comparisons run them. jit=True: Pyro's SVI runs its compiled
    # ELBO, about twice as fast per step and the same numbers (NumPyro always compiles).
    fits = dict(
        algorithms=("cavi", "em", "svi"),
        backends=tuple(args.backends.split(",")),
        num_steps={"cavi": 500, "em": 500, **({"svi": args.svi_steps} if args.svi_steps else {})},
        jit=True,
    )
    # Accuracy against NUTS, where NUTS converges: as many components as clusters and a
    # symmetric Dirichlet prior. (With surplus stick-breaking components the chains disagree
    # on which components the data fill, and r-hat says so.)
    accuracy_model = dict(K=args.accuracy_K, weight_prior="dirichlet_distribution", **common)
    return fits, accuracy_model


def sample_reference(train, args, accuracy_model):
    """The NUTS rows of the accuracy comparison; the first (on the first of --nuts-backends) is
    the reference. Their chains are seeded by --nuts-seed, and nothing else is."""
    return inference.compare(
        "bayesian_gmm",
        train,
        algorithms=("nuts",),
        backends=tuple(args.nuts_backends.split(",")),
        reference="nuts",
        num_chains=args.nuts_chains,
        num_warmup=args.nuts_warmup,
        num_draws=args.nuts_draws,
        max_tree_depth=args.nuts_max_tree_depth,
        **{**accuracy_model, "seeds": (args.nuts_seed,)},
    )


def diagnostics(reference) -> dict:
    """The reference's largest r-hat, smallest bulk ESS (over every scalar parameter) and
    divergent transitions."""
    # Unrounded: ArviZ's summary rounds to two decimals, which cannot tell 1.005 from 1.01.
    summary = az.summary(reference.to_arviz(), kind="diagnostics", round_to="none")
    return {
        "largest_r_hat": float(summary["r_hat"].max()),
        "smallest_bulk_ess": float(summary["ess_bulk"].min()),
        "divergences": int(reference.sample_stats["diverging"].sum()),
    }


def main(argv=None):
    # Pyro's steps here work on tensors of a few thousand numbers, too small for a second torch
    # thread to help: on an idle 2-core machine one thread ran this script in the time two took
    # (4 min 50 s) with the same figures, and while other jobs share the cores one thread runs
    # each step 15 times faster or more (a second thread waits for a core at every operation).
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        return compare_all(parse_args(argv))
    finally:
        torch.set_num_threads(threads)


def compare_all(args):
    """Both comparisons, their tables and their figures."""
    train, test = make_data(args)
    fits, accuracy_model = settings(args, test)
    common = {k: accuracy_model[k] for k in ("test_data", "seeds", "num_samples")}
    os.makedirs(args.out, exist_ok=True)

    # Speed and objectives: more components than clusters, a stick-breaking prior.
    table = inference.compare(
        "bayesian_gmm",
        train,
        K=args.K,
        weight_prior="dirichlet_process",
        **fits,
        **common,
    )
    write_table(table, args.out, "table")
    table.plot(os.path.join(args.out, "objective_vs_time.png"))
    plot_ellipses(table, train["x"], os.path.join(args.out, "ellipses.png"))

    # Accuracy against NUTS. NUTS runs first: its run on the first of --nuts-backends is the
    # reference of every row.
    sampled = sample_reference(train, args, accuracy_model)
    reference = sampled.results[0]
    found = diagnostics(reference)
    print(sampled.to_markdown())
    print(
        f"reference: NUTS on {reference.backend}, largest r-hat {found['largest_r_hat']:.3f}, "
        f"smallest bulk ESS {found['smallest_bulk_ess']:.0f}, {found['divergences']} "
        "divergences",
        flush=True,  # the NUTS rows are ready minutes before the rest of the accuracy table
    )
    fitted = inference.compare("bayesian_gmm", train, reference=reference, **fits, **accuracy_model)
    accuracy_table = Comparison(
        rows=fitted.rows + sampled.rows, results=fitted.results + sampled.results
    )
    write_table(accuracy_table, args.out, "accuracy")
    plot_marginals(accuracy_table, reference, os.path.join(args.out, "marginals.png"))
    print(
        f"wrote {args.out}/table.md, table.json, objective_vs_time.png, ellipses.png, "
        "accuracy.md, accuracy.json, marginals.png"
    )
    return table, accuracy_table


if __name__ == "__main__":
    main()
