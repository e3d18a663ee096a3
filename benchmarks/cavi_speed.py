"""CAVI iteration time of both backends against scikit-learn's BayesianGaussianMixture.

Same data (N x D from a K-component mixture), same initial responsibilities, same priors; the
marginal cost of one iteration, ELBO included (sklearn computes its lower bound every iteration
too). sklearn's time per iteration is the median gap between its successive E-steps, so its
set-up cost drops out; ours is the median step time of ``inference.fit``.

    python benchmarks/cavi_speed.py            # N=100000, D=10, K=20
    python benchmarks/cavi_speed.py --quick    # N=5000, a smoke run

Also reports the bytes an iteration moves over the measured memory bandwidth (a copy of a large
array): the limit of these passes over memory, not of the hardware (see
``bytes_per_iteration``). The row ``pyro jit`` is Pyro's fit with
``jit=True``, its update compiled by ``torch.compile`` (the compilation is its first iteration,
which the median leaves out).
"""

from __future__ import annotations

import argparse
import json
import time
import warnings

import numpy as np

from zoo.files import write_text


def make_problem(n, d, k, seed=0):
    rng = np.random.default_rng(seed)
    centres = rng.normal(scale=4.0, size=(k, d))
    z = rng.integers(k, size=n)
    x = centres[z] + rng.normal(size=(n, d))
    resp = rng.dirichlet(np.ones(k), size=n)
    return x, resp


def sklearn_iteration_time(x, resp, k, steps):
    from sklearn.exceptions import ConvergenceWarning
    from sklearn.mixture import BayesianGaussianMixture

    class FromResponsibilities(BayesianGaussianMixture):
        """Starts from `resp` and stamps the clock at each E-step, one per iteration."""

        def _initialize_parameters(self, X, random_state, xp=None):
            self.stamps = []
            self._initialize(X, resp)

        def _e_step(self, *args, **kwargs):
            self.stamps.append(time.perf_counter())
            return super()._e_step(*args, **kwargs)

    # An iteration's time is the median gap between successive E-steps, as ours is the median
    # step time: unlike the difference of two whole fits' times, load elsewhere on the machine
    # during one fit can neither make it negative nor move it much.
    model = FromResponsibilities(n_components=k, max_iter=steps, tol=0.0, reg_covar=0.0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        model.fit(x)
    return float(np.median(np.diff(model.stamps))), model


def zoo_iteration_time(x, resp, k, backend, steps, device="cpu", dtype="float64", **options):
    """Median seconds per iteration of the zoo's CAVI fit (the first, which compiles, aside),
    and the result; ``options`` go to ``inference.fit`` (``jit=True``)."""
    import inference

    res = inference.fit(
        "bayesian_gmm",
        {"x": x},
        algorithm="cavi",
        backend=backend,
        K=k,
        weight_prior="dirichlet_process",
        init=resp,
        num_steps=steps,
        tol=0.0,
        progress=False,
        device=device,
        dtype=dtype,
        **options,
    )
    return res.timing["per_step"], res


def bytes_per_iteration(n, d, k, itemsize=8):
    """Bytes one CAVI iteration moves as computed here, in two passes: the features are read
    twice (E-step product, M-step product) and the (N, K) responsibilities are written and read
    a few times (normalise, exp, entropy, product). A bound on these passes, not on any
    iteration: one fused pass that read each row's features once and never stored its
    responsibilities would move ``itemsize * n * features``, a third of it at D=10, K=20."""
    features = 1 + d + d * (d + 1) // 2
    return itemsize * n * (2 * features + 4 * k)


def memory_bandwidth(nbytes=400_000_000):
    a = np.ones(nbytes // 8)
    b = np.empty_like(a)
    best = np.inf
    for _ in range(5):
        t0 = time.perf_counter()
        np.copyto(b, a)
        best = min(best, time.perf_counter() - t0)
    return 2 * a.nbytes / best  # read + write


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=100_000)
    parser.add_argument("--d", type=int, default=10)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--steps", type=int, default=28, help="iterations of each fit")
    parser.add_argument("--quick", action="store_true", help="N=5000, few steps")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.steps = 5000, 11
    x, resp = make_problem(args.n, args.d, args.k)
    sk_time, sk_model = sklearn_iteration_time(x, resp, args.k, args.steps)
    rows = {"sklearn": sk_time}
    agreement = {}
    zoo_runs = {
        "numpyro": ("numpyro", {}),
        "pyro": ("pyro", {}),
        "pyro jit": ("pyro", {"jit": True}),
    }
    for name, (backend, options) in zoo_runs.items():
        rows[name], res = zoo_iteration_time(x, resp, args.k, backend, args.steps, **options)
        agreement[name] = float(
            np.max(np.abs(res.params["means"] - sk_model.means_)) / np.max(np.abs(sk_model.means_))
        )
    bytes_per_iter = bytes_per_iteration(args.n, args.d, args.k)
    bandwidth = memory_bandwidth()
    out = {
        "n": args.n,
        "d": args.d,
        "k": args.k,
        "steps": args.steps,
        "seconds_per_iteration": rows,
        "speedup_vs_sklearn": {b: rows["sklearn"] / rows[b] for b in zoo_runs},
        "max_relative_difference_of_means_vs_sklearn": agreement,
        "bytes_per_iteration": bytes_per_iter,
        "memory_bandwidth_bytes_per_s": bandwidth,
        "memory_bound_time_s": bytes_per_iter / bandwidth,
    }
    print(f"N={args.n} D={args.d} K={args.k}, {args.steps} iterations, float64")
    print(f"{'':10s} {'s/iteration':>12s} {'vs sklearn':>11s} {'x memory bound':>15s}")
    for name, t in rows.items():
        print(
            f"{name:10s} {t:12.5f} {rows['sklearn'] / t:10.1f}x {t / out['memory_bound_time_s']:14.1f}x"
        )
    print(f"means agree with sklearn to {max(agreement.values()):.1e} (relative)")
    print(
        f"bytes/iteration {bytes_per_iter / 1e6:.1f} MB, bandwidth {bandwidth / 1e9:.1f} GB/s, "
        f"memory-bound time {out['memory_bound_time_s'] * 1e3:.2f} ms"
    )
    if args.json:
        write_text(args.json, json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
