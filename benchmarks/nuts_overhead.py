"""Effective samples per second of ``fit(..., "nuts")`` against bare ``numpyro.infer.MCMC`` and
bare ``pyro.infer.MCMC`` with the same NUTS kernel settings, model, data, starting point and
seed, in one run.

    python benchmarks/nuts_overhead.py            # bayesian_gmm, K=4, 600 points, see --help
    python benchmarks/nuts_overhead.py --quick    # a smoke run

Each run is timed whole, as a user waits for it (tracing, compilation, warm-up and sampling);
its effective sample size is the median over the model's scalar parameters of ArviZ's bulk ESS.
The ratio is that of the medians over repeats. The chains run one after another on both sides
(``chain_method="sequential"``; bare Pyro one chain per ``MCMC`` call, since its
``num_chains > 1`` starts a process per chain).

Every run of the script starts from an empty compile cache: what NumPyro's compiled functions
keep on disk (the zoo's traced functions, and JAX's compilation cache, which bare ``MCMC`` uses
too) goes to a new folder (``ZOO_JAX_CACHE``) removed at the end: nothing that earlier runs left
in the user's cache is read (nor is that cache changed), so each side's first run compiles as a
first fit does. Later repeats reuse what the first repeat kept in the process. The zoo's run
goes first in every repeat, so that its first run compiles its whole set-up (its starting point
included) as a first fit does; bare ``MCMC`` is given that starting point, computed outside its
timing (a user of bare ``MCMC`` passes one), and compiles its own kernel.
"""

from __future__ import annotations

import argparse
import functools
import json
import time

import arviz as az
import numpy as np

import inference
import zoo
from inference.algorithms.closed_form import start_values
from inference.backends.jax_cache import empty_cache
from zoo.files import write_text

MODEL = "bayesian_gmm"


def median_bulk_ess(posterior: dict) -> float:
    return float(np.median(az.ess(az.from_dict(posterior=posterior), method="bulk").to_array()))


def problem_for(backend, data, k, seed):
    """The problem a NUTS fit samples: the same data, config, dtype and seed."""
    problem, _ = inference.make_problem(MODEL, data, "nuts", backend, seed=seed, K=k)
    return problem


def start_sites(problem):
    """Where the zoo starts every chain: one closed-form update from k-means."""
    spec, back = problem.spec, problem.backend
    sites = spec.sites_from_params(start_values(problem, None), problem.config)
    return {k: back.asarray(v, problem.device, "float64") for k, v in sites.items()}


def run_zoo(backend, data, k, args):
    t0 = time.perf_counter()
    res = inference.fit(
        MODEL,
        data,
        "nuts",
        backend=backend,
        seed=args.seed,
        progress=False,
        K=k,
        num_chains=args.chains,
        num_warmup=args.warmup,
        num_draws=args.samples,
    )
    return time.perf_counter() - t0, median_bulk_ess(res.draws)


def run_bare_numpyro(data, k, args):
    import jax
    from numpyro.contrib.funsor import config_enumerate
    from numpyro.infer import MCMC, NUTS, init_to_value

    problem = problem_for("numpyro", data, k, args.seed)
    start = start_sites(problem)  # given, not timed: bare MCMC takes the start as an input
    t0 = time.perf_counter()
    spec = problem.spec
    model = spec.build_model("numpyro", problem.backend_config())
    bound = config_enumerate(
        functools.partial(model, problem.backend_data(), problem.backend_config())
    )
    kernel = NUTS(bound, init_strategy=init_to_value(values=start))
    mcmc = MCMC(
        kernel,
        num_warmup=args.warmup,
        num_samples=args.samples,
        num_chains=args.chains,
        chain_method="sequential",
        progress_bar=False,
    )
    mcmc.run(jax.random.PRNGKey(args.seed))
    draws = {k: np.asarray(v) for k, v in mcmc.get_samples(group_by_chain=True).items()}
    return time.perf_counter() - t0, median_bulk_ess(draws)


def run_bare_pyro(data, k, args):
    import torch
    from pyro.infer import MCMC, NUTS, config_enumerate
    from pyro.infer.autoguide.initialization import init_to_value

    problem = problem_for("pyro", data, k, args.seed)
    start = start_sites(problem)  # given, not timed: bare MCMC takes the start as an input
    t0 = time.perf_counter()
    model = problem.spec.build_model("pyro", problem.backend_config())
    tensors, config = problem.backend_data(), problem.backend_config()
    bound = config_enumerate(lambda: model(tensors, config))
    chains = []
    for chain in range(args.chains):
        torch.manual_seed(args.seed * 1_000_003 + chain)
        kernel = NUTS(bound, init_strategy=init_to_value(values=start))
        mcmc = MCMC(
            kernel, num_samples=args.samples, warmup_steps=args.warmup, disable_progbar=True
        )
        mcmc.run()
        chains.append({k: v.numpy() for k, v in mcmc.get_samples().items()})
    draws = {k: np.stack([c[k] for c in chains]) for k in chains[0]}
    return time.perf_counter() - t0, median_bulk_ess(draws)


BARE = {"numpyro": run_bare_numpyro, "pyro": run_bare_pyro}


def sides_in_order(repeat: int) -> tuple[str, str]:
    """The zoo's run first in every repeat: its first run compiles its whole set-up, its start
    included, as a first fit does; bare ``MCMC`` is then given that start (computed outside
    its timing: a bare user passes one), and compiles its own kernel."""
    return ("zoo", "bare")


def run_side(side, backend, data, k, settings):
    if side == "zoo":
        return run_zoo(backend, data, k, settings)
    return BARE[backend](data, k, settings)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="a smoke run: 120 points, short chains"
    )
    parser.add_argument("--backends", default="numpyro,pyro", help="comma-separated")
    parser.add_argument("--n", type=int, default=600, help="data points")
    parser.add_argument("--K", type=int, default=4, help="mixture components")
    parser.add_argument("--chains", type=int, default=4)
    parser.add_argument("--warmup", type=int, default=500)
    parser.add_argument("--samples", type=int, default=500)
    parser.add_argument("--pyro-warmup", type=int, default=200, help="Pyro's warm-up (slower)")
    parser.add_argument("--pyro-samples", type=int, default=200, help="Pyro's draws per chain")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--json", help="write the results here")
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.chains, args.repeats = 120, 2, 1
        args.warmup = args.samples = args.pyro_warmup = args.pyro_samples = 30
    data = zoo.get_model(MODEL).make_data(np.random.default_rng(args.seed), n=args.n)
    with empty_cache():
        rows = [measure(backend, data, args) for backend in args.backends.split(",")]
    if args.json:
        settings = {k: v for k, v in vars(args).items() if k != "json"}
        write_text(args.json, json.dumps({"settings": settings, "rows": rows}, indent=1))
    return rows


def measure(backend, data, args) -> dict:
    """The two sides' runs on ``backend``, repeated, and the ratio of their medians."""
    settings = argparse.Namespace(**vars(args))
    if backend == "pyro":
        settings.warmup, settings.samples = args.pyro_warmup, args.pyro_samples
    times = {"bare": [], "zoo": []}
    for repeat in range(args.repeats):
        for side in sides_in_order(repeat):
            seconds, ess = run_side(side, backend, data, args.K, settings)
            times[side].append((seconds, ess, ess / seconds))
    bare = float(np.median([r[2] for r in times["bare"]]))
    ours = float(np.median([r[2] for r in times["zoo"]]))
    print(
        f"{backend:8s} chains={settings.chains} warmup={settings.warmup} "
        f"samples={settings.samples}: bare {bare:8.1f} ESS/s, zoo {ours:8.1f} ESS/s, "
        f"ratio {ours / bare:.2f}"
    )
    return {
        "backend": backend,
        "chains": settings.chains,
        "warmup": settings.warmup,
        "samples": settings.samples,
        "bare_ess_per_s": bare,
        "zoo_ess_per_s": ours,
        "ratio": ours / bare,
        "runs": times,
    }


if __name__ == "__main__":
    main()
