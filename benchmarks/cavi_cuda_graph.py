"""Whether a Pyro (torch) CAVI iteration can be replayed from a CUDA graph, and how fast it is.

On a GPU a Pyro CAVI iteration of the Bayesian GMM is about 145 kernel launches, most of them on
the (K, D, D) parameters, and its time is the host's time to issue them, at N = 1,000 as at
N = 1,000,000. A CUDA graph records the launches once and replays them in one call. This script
records one iteration (the update, then the copy of its result into the state it reads) and
times its replay against the same iterations run eagerly, from the same start, and checks that
both end at the same ELBO. Neither loop reads a value on the host between iterations.

Each row uses one of torch's linear-algebra libraries for the Cholesky factor and its inverse
(``torch.backends.cuda.preferred_linalg_library``): a library call that cannot be recorded
fails the recording, and that row gives the error instead of a time. The library's later rows
are not recorded: their error begins "not tried" and names the row whose recording failed.

And each row uses one layout of the (N, F) features and (N, K) responsibilities: torch's
(``"transposed"``, stored as (F, N) and (K, N), the zoo's choice for torch, the faster in a
CPU's BLAS) or JAX's (``"as_given"``, (N, F) and (N, K)). A GPU may prefer the other: the
rows say, and the ELBOs of the two should agree to rounding.

With ``--compile``, each row is also run with the update compiled by ``torch.compile``
(inductor), which fuses chains of elementwise operations into single kernels: on a GPU, fewer
and larger kernels in the graph. The compiled rows give the compilation's seconds and their ELBO,
which should agree with the uncompiled one to rounding. Their "eager" column is the compiled
update called once per iteration, without a graph.

    python benchmarks/cavi_cuda_graph.py                   # on cuda: N=1,000,000 and 1,000
    python benchmarks/cavi_cuda_graph.py --json graph.json
    python benchmarks/cavi_cuda_graph.py --device cpu --quick   # the eager loop alone
    python benchmarks/cavi_cuda_graph.py --linalg cusolver --sizes 1000000 --dtypes float32
    python benchmarks/cavi_cuda_graph.py --linalg cusolver --compile   # also compiled updates
"""

from __future__ import annotations

import argparse
import importlib.util
import itertools
import json
import sys
import time
from pathlib import Path

import torch

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:  # this checkout's packages, run from anywhere
    sys.path.insert(1, str(HERE.parent))

import zoo  # noqa: E402
from inference.backends.torch_compiled import CompiledUpdate  # noqa: E402
from zoo.array_namespace import AsGivenLayout, TorchOps  # noqa: E402
from zoo.bayesian_gmm import closed_form  # noqa: E402
from zoo.files import write_text  # noqa: E402


def make_problem(n, d, k):
    """The problem ``cavi_speed.py`` times: data from a K-component mixture and random
    responsibilities."""
    spec = importlib.util.spec_from_file_location("_cavi_speed", HERE / "cavi_speed.py")
    cavi_speed = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(cavi_speed)
    return cavi_speed.make_problem(n, d, k)


class AsGivenTorchOps(AsGivenLayout, TorchOps):
    """torch's operations with JAX's layout of the features and responsibilities."""


LAYOUTS = {"transposed": TorchOps, "as_given": AsGivenTorchOps}


def setup(n, d, k, device, dtype, layout="transposed"):
    """The update's cache and its first state, on ``device`` in ``dtype``, with the features
    and responsibilities in ``layout`` (``LAYOUTS``)."""
    x, resp = make_problem(n, d, k)
    config = zoo.get_model("bayesian_gmm").prepare({"x": x}, K=k, weight_prior="dirichlet_process")
    xp = LAYOUTS[layout]()
    as_tensor = lambda a: torch.as_tensor(a, dtype=getattr(torch, dtype), device=device)  # noqa: E731
    cache = closed_form.init_cache(as_tensor(x), config, xp)
    state = closed_form.init_state(as_tensor(resp), cache, config, xp)
    return (lambda state: closed_form.update(state, cache, config, xp)), state


def compile_update(update, state, device):
    """``update`` compiled as a fit with ``jit=True`` compiles it (``CompiledUpdate``), and the
    seconds its compilation took (its first call). Where the compiler fails, the fit would run
    the update uncompiled; here that is the row's error."""
    torch._dynamo.reset()  # each row compiles afresh: torch compiles one code 8 times at most
    fn = CompiledUpdate(update)
    seconds, _ = eager(fn, state, 1, device)
    if fn.call is not fn.compiled:
        raise RuntimeError("torch.compile failed (the warning above says why)")
    return fn, seconds


def clone(tree):
    if isinstance(tree, dict):
        return {key: clone(value) for key, value in tree.items()}
    return tree.clone()


def copy_into(target, source) -> None:
    """Copy ``source``'s tensors into ``target``'s, in place (the same nesting of dicts)."""
    for key, value in source.items():
        if isinstance(value, dict):
            copy_into(target[key], value)
        else:
            target[key].copy_(value)


def synchronize(device) -> None:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)


def eager(update, state, steps, device):
    """Seconds per iteration of ``steps`` eager iterations from ``state``, and the last ELBO."""
    state = clone(state)
    synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        state, elbo = update(state)
    synchronize(device)
    return (time.perf_counter() - start) / steps, float(elbo)


def graphed(update, state, steps, device):
    """The same from a CUDA graph of one iteration: seconds per replay and the last ELBO."""
    scratch = clone(state)
    with torch.cuda.device(device):  # recorded on the data's GPU, as the zoo's graphs are
        side = torch.cuda.Stream(device)
        side.wait_stream(torch.cuda.current_stream(device))
        with torch.cuda.stream(side):  # warm-up off the default stream, as torch's graphs ask
            for _ in range(3):
                new, _ = update(scratch)
                copy_into(scratch, new)
        torch.cuda.current_stream(device).wait_stream(side)
        static = clone(state)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=side):
            new, elbo = update(static)
            copy_into(static, new)
    synchronize(device)
    start = time.perf_counter()
    for _ in range(steps):
        graph.replay()
    synchronize(device)
    return (time.perf_counter() - start) / steps, float(elbo)


def first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:300]


def not_tried(failed: dict) -> str:
    """The graph error of a row not recorded because the recording of the earlier row
    ``failed``, with the same linear-algebra library, failed: the library's call would fail the
    same way, so the row says it was not tried rather than claim a failure of its own."""
    where = ", ".join(f"{key}={failed[key]}" for key in ("n", "dtype", "layout", "compiled"))
    return f"not tried: recording failed at {where}: {failed['graph_error']}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--device", default="cuda", help="cuda (default), cuda:N, or cpu for the eager loop alone"
    )
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000_000, 1_000])
    parser.add_argument("--d", type=int, default=10)
    parser.add_argument("--k", type=int, default=20)
    parser.add_argument("--steps", type=int, default=30, help="timed iterations of each loop")
    parser.add_argument("--dtypes", nargs="+", default=["float64", "float32"])
    parser.add_argument("--linalg", nargs="+", default=["cusolver", "magma"],
                        help="torch's linear-algebra libraries to record with, in turn")  # fmt: skip
    parser.add_argument("--layouts", nargs="+", default=list(LAYOUTS), choices=list(LAYOUTS),
                        help="layouts of the features and responsibilities, in turn")  # fmt: skip
    parser.add_argument("--compile", action="store_true",
                        help="also each row with the update compiled by torch.compile")  # fmt: skip
    parser.add_argument("--quick", action="store_true", help="N=2,000, float64, 3 iterations")
    parser.add_argument("--json", help="also write the rows here")
    args = parser.parse_args(argv)
    if args.quick:
        args.sizes, args.dtypes, args.steps = [2_000], ["float64"], 3
    cuda = torch.device(args.device).type == "cuda"
    if cuda and not torch.cuda.is_available():
        parser.error(f"--device {args.device}: this machine has no CUDA device; --device cpu "
                     "times the eager loop alone.")  # fmt: skip
    rows = []
    print(f"bayesian_gmm CAVI, D={args.d} K={args.k}, {args.steps} iterations per loop, "
          f"on {args.device}")  # fmt: skip
    print(
        "| N | dtype | linalg | layout | compiled | eager ms/iteration | graph ms/iteration "
        "| x eager | ELBO |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    compiles = [False, True] if args.compile else [False]
    for library in args.linalg if cuda else ["default"]:  # a failed recording: the next one
        failed = None
        grid = itertools.product(args.sizes, args.dtypes, args.layouts, compiles)
        for n, dtype, layout, compile_it in grid:
            if cuda:
                torch.backends.cuda.preferred_linalg_library(library)
            update, state = setup(n, args.d, args.k, args.device, dtype, layout)
            row = {"n": n, "dtype": dtype, "linalg": library, "layout": layout}
            row["compiled"] = compile_it
            if compile_it:
                try:
                    update, row["compile_s"] = compile_update(update, state, args.device)
                except Exception as err:  # no compiler for this device, for one
                    row["compile_error"] = first_line(err)
                    print(f"    compilation failed: {row['compile_error']}", flush=True)
                    rows.append(row)
                    continue
            eager(update, state, 2, args.device)  # warm-up: the libraries' first calls
            row["eager_s"], row["eager_elbo"] = eager(update, state, args.steps, args.device)
            if cuda and failed:
                row["graph_error"] = not_tried(failed)
            elif cuda:
                try:
                    row["graph_s"], row["graph_elbo"] = graphed(
                        update, state, args.steps, args.device
                    )
                except Exception as err:  # a call that cannot be recorded
                    row["graph_error"] = first_line(err)
                    failed = row
                    print(f"    recording failed: {row['graph_error']}", flush=True)
            rows.append(row)
            graph = row.get("graph_s")
            cells = [
                f"{n:,}", dtype, library, layout,
                f"in {row['compile_s']:.1f} s" if compile_it else "no",
                f"{row['eager_s'] * 1e3:.3f}",
                "-" if graph is None else f"{graph * 1e3:.3f}",
                "-" if graph is None else f"{graph / row['eager_s']:.2f}",
                f"{row['eager_elbo']:.6f}"
                + ("" if graph is None else f" / {row['graph_elbo']:.6f}"),
            ]  # fmt: skip
            print("| " + " | ".join(cells) + " |", flush=True)
    if not cuda:
        print("(CUDA graphs need a CUDA device: the eager loop alone was timed)")
    if args.json:
        write_text(args.json, json.dumps(rows, indent=2))
    return rows


if __name__ == "__main__":
    main()
