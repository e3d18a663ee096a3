"""Per-step time of ``inference``'s SVI loop against bare ``numpyro.infer.SVI.update`` (jitted)
and bare Pyro ``SVI.step``, on the same model, guide and data, as ratios in one run.

    python benchmarks/svi_overhead.py            # N=2000, K=8, 500 steps each, 3 repeats
    python benchmarks/svi_overhead.py --quick    # a smoke run

The bare loops do what a user's own loop does: call the update and read the loss as a float
each step (the loop needs it for the NaN guard and the history).
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import inference
import zoo
from inference.loop import Length, run
from zoo.files import write_text

ALGORITHM = inference.get_algorithm("svi")
LR = 0.05


def make_state(backend, x, k, guide, seed=0):
    # A constant rate, the one the bare loops use (SVI's default is a schedule of stages).
    problem, options = inference.make_problem(
        "bayesian_gmm", {"x": x}, ALGORITHM.name, backend, seed=seed, K=k, guide=guide, lr=LR
    )
    return ALGORITHM.init(problem, options)


def time_zoo_loop(state, steps, n):
    t0 = time.perf_counter()
    # SVI's own stopping rule is checked as in a fit at its defaults (it cannot stop a run
    # shorter than two of its windows).
    run(ALGORITHM, state, Length(steps, ALGORITHM.traits.tol, n), progress=False)
    return (time.perf_counter() - t0) / steps


def time_bare(state, steps):
    engine = state.engine
    if state.problem.backend.NAME == "numpyro":
        import jax

        config = engine.config  # model options are static: closed over, as a user would
        update = jax.jit(lambda st, data: engine.svi.update(st, data, config))
        # The user's own start: NumPyro's SVI.init (the engine keeps its state as flat leaves),
        # compiled (run eagerly, it compiles each operation on its own: seconds), and placed
        # where the data are, as the update's output is, so that the update compiles once.
        init = jax.jit(lambda key, data: engine.svi.init(key, data, config))
        where = jax.tree.leaves(engine.data)[0].sharding
        svi_state = jax.device_put(init(jax.random.PRNGKey(0), engine.data), where)
        svi_state, loss = update(svi_state, engine.data)
        t0 = time.perf_counter()
        for _ in range(steps):
            svi_state, loss = update(svi_state, engine.data)
            float(loss)
        return (time.perf_counter() - t0) / steps
    import pyro

    # Pyro's own loop on the engine's model, guide, ELBO and parameters: SVI.step with
    # pyro.optim.Adam at the same learning rate (it returns the loss as a float).
    # The engine keeps its parameters in a store of its own, put in Pyro's for its calls.
    svi = pyro.infer.SVI(
        engine.model, engine.guide, pyro.optim.Adam({"lr": engine.lr}), engine.loss
    )
    with engine._own_store():
        t0 = time.perf_counter()
        for _ in range(steps):
            svi.step(engine.data, engine.config)
        return (time.perf_counter() - t0) / steps


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--k", type=int, default=8)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--guide", default="enum")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args(argv)
    if args.quick:
        args.n, args.steps, args.repeats = 300, 20, 1
    x = zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(0), args.n)["x"]
    out = {}
    for backend in ("numpyro", "pyro"):
        state = make_state(backend, x, args.k, args.guide)
        time_zoo_loop(state, 3, args.n)  # warm up (compiles the jitted update)
        zoo_t, bare_t = [], []
        for _ in range(args.repeats):  # interleaved, so drift hits both alike
            bare_t.append(time_bare(state, args.steps))
            zoo_t.append(time_zoo_loop(state, args.steps, args.n))
        out[backend] = {
            "zoo_s_per_step": min(zoo_t),
            "bare_s_per_step": min(bare_t),
            "ratio": min(zoo_t) / min(bare_t),
        }
        print(
            f"{backend:8s} zoo loop {min(zoo_t) * 1e3:8.3f} ms/step, bare {min(bare_t) * 1e3:8.3f} "
            f"ms/step, ratio {min(zoo_t) / min(bare_t):.3f}"
        )
    if args.json:
        write_text(args.json, json.dumps(out, indent=2))
    return out


if __name__ == "__main__":
    main()
