"""Torch operations per step of the zoo's Pyro paths, against the code they are compared with.

On a GPU, each operation that computes something is at least one kernel launch, and the host
issues launches one after another: a step of a small model (a VAE minibatch, an attention layer,
the (K, D, D) parameters of a CAVI iteration) takes about as long as its launches, whatever the
kernels do. The number of operations is therefore the GPU step time's floor, and it is the same
on every device, so this runs anywhere (the tests run it on the CPU) and tells, before a GPU is at
hand, whether a change cuts launches.

Counted: every operation torch dispatches to a kernel (``TorchDispatchMode``), after autograd, so
the backward pass and the optimiser's update are in. Not counted: views and allocations, which
launch nothing. Reported apart:

* host arithmetic: a compiled (``jit=True``) step computes with the sizes it traced, integer
  tensors with no dimensions that stay on the host wherever the model runs (see
  ``OperationCount``); those operations launch nothing on a GPU;
* host reads: reads of a floating-point or boolean tensor's value on the host (``.item()``,
  ``if tensor:``), which on a GPU wait for the device. Reads of integers are the host's own
  sizes, and are left out.

Rows (each the mean over ``--steps`` steps after two warm-up steps, which hold any compilation):

* ``cavi``: one CAVI iteration of ``bayesian_gmm`` (K=20, D=10 and D=2: the count should not grow
  with D), and one EM iteration of ``gmm`` for comparison, run eagerly (a fit on a GPU replays
  these operations from a CUDA graph recorded at its first iteration). For NumPyro, whose
  iteration XLA compiles and fuses, the instructions of the compiled iteration on this
  machine's device (each fusion or library call is one launch on a GPU, though XLA fuses
  differently there);
* ``vae``: one SVI step of the VAE (784-200-200-50, batch 100) on each Pyro path, against one step
  of the plain PyTorch loop of ``vae_speed.py``;
* ``bam``: one SVI step of ``bam_classifier`` (as ``bam_speed.py``) with Weibull and log-normal
  attention, with the contextual prior and with a fixed one, against softmax attention; and for
  NumPyro, with the contextual prior, the instructions of the compiled step.

    python benchmarks/op_counts.py                 # every row
    python benchmarks/op_counts.py --rows cavi vae  # some
    python benchmarks/op_counts.py --device cuda   # on a GPU, with the profiler's launches
    python benchmarks/op_counts.py --quick         # fewer steps (the tests run this)
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import runpy
import warnings
import weakref
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import numpy as np
import torch
from torch.utils import _pytree as pytree
from torch.utils._python_dispatch import TorchDispatchMode

import inference
import zoo
from zoo.files import write_text

HERE = Path(__file__).resolve().parent
ROWS = ("cavi", "vae", "bam")
#: Dispatched operations that launch no kernel besides the views (``OpOverload.is_view``): views
#: that autograd does not track, allocations without a fill, and the profiler's markers.
NO_KERNEL = {
    "_reshape_alias", "_unsafe_view", "empty", "empty_like", "empty_strided", "resize_", "set_",
}  # fmt: skip
MARKERS = ("_record_function",)
HOST_READ = "_local_scalar_dense"


def _benchmark(name) -> SimpleNamespace:
    """Another script of this folder, run as a module (its functions are reused)."""
    return SimpleNamespace(**runpy.run_path(str(HERE / f"{name}.py"), run_name=f"_{name}"))


class OperationCount(TorchDispatchMode):
    """Counts, by name, the operations dispatched while it is active that launch a kernel.

    Arithmetic on the host's own numbers is counted apart (``host_arithmetic``): a compiled
    graph holds the sizes it traced as integer tensors with no dimensions, and computes with them
    (a minibatch's scale, N / batch size) on the host, wherever the model runs. An operation is
    such arithmetic when every tensor it takes is such an integer or the result of such
    arithmetic.
    """

    def __init__(self):
        super().__init__()
        self.kernels = collections.Counter()
        self.host_arithmetic = 0
        self.host_reads = 0
        self._host_numbers = set()  # ids of the results of host arithmetic, while they live

    def _is_host_number(self, tensor) -> bool:
        if tensor.dim() != 0:
            return False
        integer = not (
            tensor.is_floating_point() or tensor.is_complex() or tensor.dtype == torch.bool
        )
        return integer or id(tensor) in self._host_numbers

    def _remember(self, result) -> None:
        for tensor in pytree.tree_leaves(result):
            if isinstance(tensor, torch.Tensor):
                self._host_numbers.add(id(tensor))
                weakref.finalize(tensor, self._host_numbers.discard, id(tensor))

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        result = func(*args, **kwargs)
        name = func.__name__.split(".")[0]
        tensors = [t for t in pytree.tree_leaves((args, kwargs)) if isinstance(t, torch.Tensor)]
        if name == HOST_READ:
            self.host_reads += args[0].is_floating_point() or args[0].dtype == torch.bool
        elif func.is_view or name in NO_KERNEL or name.startswith(MARKERS):
            pass
        elif tensors and all(self._is_host_number(t) for t in tensors):
            self.host_arithmetic += 1
            self._remember(result)
        else:
            self.kernels[name] += 1
        return result


def per_step(step, steps: int, device: str = "cpu") -> dict:
    """Operations and host reads per call of ``step()``, after two warm-up calls; on a CUDA
    device also the kernel launches the profiler sees (``launches``), the count that the
    operations stand for."""
    step()
    step()
    with OperationCount() as count:
        for _ in range(steps):
            step()
    total = sum(count.kernels.values())
    top = dict(count.kernels.most_common(5))
    return {
        "operations": total / steps,
        "host_reads": count.host_reads / steps,
        "host_arithmetic": count.host_arithmetic / steps,
        "launches": profiled_launches(step, steps) if device.startswith("cuda") else None,
        "most_frequent": {name: n / steps for name, n in top.items()},
    }


def profiled_launches(step, steps: int) -> float | None:
    """CUDA kernel launches per call of ``step()``, from the profiler's record of the CUDA
    runtime and driver calls (None if it recorded none)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    launches = sum(
        event.count
        for event in prof.key_averages()
        if "LaunchKernel" in event.key or "GraphLaunch" in event.key  # a CUDA graph: one
    )
    return launches / steps if launches else None


def fit_stepper(model, data, algorithm, device="cpu", **options):
    """A function that takes one more step of a fit of ``model`` on ``device``, started by
    ``inference.fit``."""
    kept = {}
    inference.fit(
        model,
        data,
        algorithm,
        "pyro",
        num_steps=1,
        progress=False,
        device=device,
        callback=lambda step, state, info: kept.update(state=state),
        **options,
    )
    algo = inference.get_algorithm(algorithm)

    def step():
        kept["state"], _ = algo.step(kept["state"])

    return step


def cavi_rows(steps: int, device: str) -> dict:
    cavi_speed = _benchmark("cavi_speed")
    rows = {}
    # The update's own operations: a fit on a GPU replays them from a CUDA graph recorded at
    # its first iteration (inference.backends.cuda_graph), where only the copies in and out
    # would be counted; the graph launches the kernels of the operations counted here.
    with mock.patch.dict(os.environ, {"ZOO_CUDA_GRAPHS": "0"}):
        for d in (10, 2):
            x, resp = cavi_speed.make_problem(2000, d, 20)
            stepper = fit_stepper(
                "bayesian_gmm", {"x": x}, "cavi", device, K=20,
                weight_prior="dirichlet_process", init=resp,
            )  # fmt: skip
            rows[f"bayesian_gmm CAVI, K=20, D={d}"] = per_step(stepper, steps, device)
        data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 2000)
        rows["gmm EM"] = per_step(fit_stepper("gmm", data, "em", device), steps, device)
    for d in (10, 2):
        x, resp = cavi_speed.make_problem(2000, d, 20)
        rows[f"bayesian_gmm CAVI (NumPyro, compiled), K=20, D={d}"] = compiled_cavi(x, resp)
    return rows


def compiled_cavi(x, resp) -> dict:
    """Top-level instructions of the XLA-compiled CAVI iteration (``update``) of NumPyro."""
    import jax

    from zoo.array_namespace import JaxOps
    from zoo.bayesian_gmm import closed_form

    xp = JaxOps()
    config = zoo.get_model("bayesian_gmm").prepare(
        {"x": x}, K=resp.shape[1], weight_prior="dirichlet_process"
    )
    with jax.enable_x64():
        cache = closed_form.init_cache(jax.numpy.asarray(x), config, xp)
        state = closed_form.init_state(jax.numpy.asarray(resp), cache, config, xp)
        update = jax.jit(lambda state, cache: closed_form.update(state, cache, config, xp))
        return compiled_row(update, state, cache)


def compiled_row(jitted, *args) -> dict:
    """A row of the top-level instructions of ``jitted``, compiled by XLA for ``args`` on JAX's
    default device (each fusion or library call is one kernel launch on a GPU, though XLA fuses
    differently for a GPU than for a CPU)."""
    text = jitted.lower(*args).compile().as_text()
    entry = text[text.index("\nENTRY") :].split("\n}")[0]
    operations = sum(" = " in line for line in entry.splitlines())
    return {"operations": float(operations), "host_reads": None, "host_arithmetic": None,
            "launches": None}  # fmt: skip


def vae_rows(steps: int, device: str) -> dict:
    vae_speed = _benchmark("vae_speed")
    rows_of_data, batch = 2000, 100
    x = (np.random.default_rng(0).random((rows_of_data, 784)) < 0.3).astype(np.float32)
    options = dict(latent_dim=50, hidden=(200, 200))
    config = zoo.get_model("vae").prepare({"x": x[:1]}, **options)
    encoder, decoder, optim = vae_speed.plain_model(config, lr=1e-3, seed=0, device=device)
    xt = torch.as_tensor(x, device=device)
    order = torch.randperm(rows_of_data, device=device)
    batches = iter(range(10**9))

    def plain():
        i = next(batches) % (rows_of_data // batch)
        rows = xt[order[i * batch : (i + 1) * batch]]
        vae_speed.plain_step(encoder, decoder, optim, rows, rows_of_data / batch)

    table = {"plain PyTorch loop": per_step(plain, steps, device)}
    paths = {
        "zoo Pyro, Trace_ELBO": dict(elbo="trace"),
        "zoo Pyro, Trace_ELBO (jit=True)": dict(elbo="trace", jit=True),
        'zoo Pyro, elbo="meanfield"': dict(elbo="meanfield"),
        'zoo Pyro, elbo="meanfield" (jit=True)': dict(elbo="meanfield", jit=True),
    }
    for name, path in paths.items():
        stepper = fit_stepper(
            "vae", {"x": x}, "svi", device, batch_size=batch, lr=1e-3, **options, **path
        )
        table[name] = per_step(stepper, steps, device)
    return _against(table, "plain PyTorch loop")


def bam_rows(steps: int, device: str) -> dict:
    rng = np.random.default_rng(0)
    data = {"x": rng.random((512, 784)).astype(np.float32), "y": rng.integers(10, size=512)}
    table = {}
    variants = [("softmax", "contextual"), ("weibull", "contextual"), ("lognormal", "contextual"),
                ("weibull", "fixed"), ("lognormal", "fixed")]  # fmt: skip
    for attention, prior in variants:
        stepper = fit_stepper(
            "bam_classifier", data, "svi", device, batch_size=128, lr=1e-3, elbo="meanfield",
            attention=attention, prior=prior, width=32, num_heads=2, num_layers=2,
        )  # fmt: skip
        name = f"bam_classifier, {attention}" + (", fixed prior" if prior == "fixed" else "")
        table[name] = per_step(stepper, steps, device)
    batch = {k: v[:128] for k, v in data.items()}
    compiled = {
        f"bam_classifier, {attention} (NumPyro, compiled)": compiled_bam_step(batch, attention)
        for attention in ("softmax", "weibull", "lognormal")
    }
    return {
        **_against(table, "bam_classifier, softmax"),
        **_against(compiled, "bam_classifier, softmax (NumPyro, compiled)"),
    }


def compiled_bam_step(batch, attention) -> dict:
    """Top-level instructions of NumPyro's compiled SVI step (mean-field ELBO, Adam) of
    ``bam_classifier`` with the contextual prior, on ``batch`` as the whole data."""
    import jax
    import numpyro
    from numpyro.infer import SVI

    from inference.backends.numpyro_backend import make_elbo

    problem, _ = inference.make_problem(
        "bam_classifier", batch, "svi", "numpyro", attention=attention, prior="contextual",
        width=32, num_heads=2, num_layers=2,
    )  # fmt: skip
    config, data = problem.backend_config(), problem.backend_data()
    model = problem.spec.build_model("numpyro", config, None)
    guide = problem.spec.twin("numpyro").make_guide("amortized", config, None)
    svi = SVI(model, guide, numpyro.optim.Adam(1e-3), make_elbo("meanfield", 1))
    state = svi.init(jax.random.PRNGKey(0), data, config)
    return compiled_row(jax.jit(lambda state, data: svi.update(state, data, config)), state, data)


def _against(table: dict, baseline: str) -> dict:
    base = table[baseline]["operations"]
    for row in table.values():
        row["x_baseline"] = row["operations"] / base
    return table


SECTIONS = {"cavi": cavi_rows, "vae": vae_rows, "bam": bam_rows}


def _cell(value, spec: str) -> str:
    return "" if value is None else format(value, spec)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", nargs="+", choices=ROWS, default=list(ROWS))
    parser.add_argument("--device", default="cpu", help='"cpu", "cuda" or "cuda:N"')
    parser.add_argument("--steps", type=int, default=10, help="counted steps per row")
    parser.add_argument("--quick", action="store_true", help="2 counted steps per row")
    parser.add_argument("--json", help="also write the results here")
    args = parser.parse_args(argv)
    steps = 2 if args.quick else args.steps
    results = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # one- and few-step fits warn that they did not converge
        for section in args.rows:
            results[section] = SECTIONS[section](steps, args.device)
    print(
        f"torch operations per step that launch a kernel on {args.device} (mean of {steps} steps)"
    )
    profiled = any(row.get("launches") for table in results.values() for row in table.values())
    header = "| path | operations | x baseline | host arithmetic | host reads |"
    print(header + (" CUDA launches (profiler) |" if profiled else ""))
    print("|---" * (header.count("|") - 1 + profiled) + "|")
    for table in results.values():
        for name, row in table.items():
            cells = [
                f"{row['operations']:.0f}",
                _cell(row.get("x_baseline"), ".2f"),
                _cell(row["host_arithmetic"], ".0f"),
                _cell(row["host_reads"], ".0f"),
            ]
            if profiled:
                cells.append(_cell(row.get("launches"), ".0f"))
            print(f"| {name} | " + " | ".join(cells) + " |")
    if args.json:
        write_text(args.json, json.dumps({"steps": steps, "results": results}, indent=2))
    return results


if __name__ == "__main__":
    main()
