"""Compare CAVI, EM and SVI (enumerated and Gumbel-softmax guides) on the Bayesian GMM, both backends.

The structured updates (CAVI, EM) reach their optimum in a few dozen sweeps; gradient-based SVI
on the same model needs thousands of noisy steps. Writes a table (markdown and JSON), the
objective against wall time, and the fitted ellipses.

    python examples/gmm_compare.py             # the full comparison on the built-in data
    python examples/gmm_compare.py --quick     # seconds: a smoke run (tests run this)
"""

from __future__ import annotations

import argparse
import os

import numpy as np

import inference
import zoo


def plot_ellipses(comparison, x, path):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.patches import Ellipse

    runs = [
        (r, res)
        for r, res in zip(comparison.rows, comparison.results, strict=True)
        if r["backend"] == "numpyro"
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
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="a few steps of each, for tests")
    parser.add_argument("--n", type=int, default=1000, help="training points (same again held out)")
    parser.add_argument("--K", type=int, default=8)
    parser.add_argument("--svi-steps", type=int, default=3000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default="outputs/gmm_compare")
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.svi_steps = 200, 30

    spec = zoo.get_model("bayesian_gmm")
    rng = np.random.default_rng(args.seed)
    train, test = spec.make_data(rng, args.n), spec.make_data(rng, args.n)
    table = inference.compare(
        "bayesian_gmm",
        train,
        algorithms=("cavi", "em", "svi"),
        backends=("pyro", "numpyro"),
        test_data=test,
        seeds=(args.seed,),
        K=args.K,
        weight_prior="dirichlet_process",
        num_steps={"cavi": 500, "em": 500, "svi": args.svi_steps},
        num_samples=100 if args.quick else 1000,
    )
    os.makedirs(args.out, exist_ok=True)
    print(table.to_markdown())
    with open(os.path.join(args.out, "table.md"), "w") as f:
        f.write(table.to_markdown() + "\n")
    with open(os.path.join(args.out, "table.json"), "w") as f:
        f.write(table.to_json())
    table.plot(os.path.join(args.out, "objective_vs_time.png"))
    plot_ellipses(table, train["x"], os.path.join(args.out, "ellipses.png"))
    print(f"wrote {args.out}/table.md, table.json, objective_vs_time.png, ellipses.png")
    return table


if __name__ == "__main__":
    main()
