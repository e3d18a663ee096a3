"""The GPU acceptance run: every model, backend and algorithm on the device, CPU/GPU agreement,
and the speed figures of the GPU results page, in one process, within six minutes on one GPU.

Sections, in order (each prints its elapsed time; one that fails or runs out of time prints its
error and the run goes on; the end lists every figure that could not be taken):

* ``environment``: versions, the device's name, JAX's 64-bit mode and the caches in use.
* ``smoke``: every registered model (``zoo.list_models``) x backend x algorithm that supports it
  (``inference.registry.supporting``): a short fit on the device of the model's own small data
  (``spec.make_data``), a few steps each (NUTS: one short chain), then an evaluation on the
  device. One line per fit: ok, or FAILED and the error's first line, and seconds; then the
  first line of each kind of warning the fit gave (an export cache that fell back to tracing).
* ``agreement``: the deterministic algorithms (CAVI, EM: not stochastic, not samplers), every
  model that supports them, both backends, float64: the objective after the same iterations on
  the CPU and on the device agrees to 1e-9 (relative). And a VAE fitted on the device scores
  the same (ELBO, log p(x)) on both devices, within Monte-Carlo error.
* ``bandwidth``: the device's memory bandwidth, from a large device-to-device copy (torch).
* ``vae``: seconds per epoch of the VAE (784-200-200-50, Adam, batch 100 and 1,000) against a
  plain PyTorch loop on the same device (``vae_speed.py``): Pyro ``Trace_ELBO``, Pyro
  ``jit=True``, Pyro ``elbo="meanfield"`` with ``jit=True``, NumPyro; and both compiled Pyro
  paths again on torch's optimising graph executor, which fuses elementwise operations. The
  data are 50,000 random binary rows of MNIST's shape (the speed does not depend on the pixels;
  nothing to download).
* ``cavi``: CAVI seconds per iteration on the Bayesian GMM (D=10, K=20, N=1,000,000), float64
  and float32, both backends (``cavi_speed.py``), with the bytes an iteration moves, the
  memory-bound time at the measured bandwidth, and the ratio to it; then float64 again with
  each iteration's objective read before the next update is queued (what the CPU does), to
  show what queueing ahead saves on the device; Pyro again with its update run eagerly rather
  than replayed from a CUDA graph (``ZOO_CUDA_GRAPHS=0``); float64 at N=1,000, where an
  iteration's time is nearly all the host's time to issue it; and Pyro with ``jit=True`` (its
  update compiled by ``torch.compile``, then replayed from a CUDA graph), both dtypes.
* ``bam``: the Bayesian attention classifier's step against the softmax step, both backends,
  stepped side by side (``bam_speed.py``); then Pyro again with ``jit=True``, each variant's
  step compiled.
* ``nuts``: seconds per leapfrog step of NUTS on the device and on the CPU, a small Bayesian GMM
  at a few data sizes, both backends: the figures that calibrate
  ``inference.algorithms.sampler_device.NUTS_GPU_MIN_SIZE`` (the size, per backend, below which
  a GPU fit warns that the CPU is faster). Each row prints its size (latent dimension x data
  size). A larger size is skipped on a device when the fit before it did not finish, or when the
  two fits before it, their set-up apart (NumPyro compiles for seconds whatever the size), show
  that its sampling would run past the limit of one fit.
* ``launches``: the operations per step of the Pyro paths of ``vae``, ``cavi`` and ``bam``
  counted on the device (``op_counts.py``), beside the kernel launches PyTorch's profiler sees:
  whether the step times follow the launch counts that a CPU can count; and the instructions of
  NumPyro's compiled CAVI iteration and Bayesian attention steps as XLA compiles them for the
  device.

Then the targets of the GPU work, met or not, and what could not be measured. The exit status
is 1 when a requirement of the zoo is missing or out of range, a backend cannot run on the
device, a section stops on an error (not on its time limit), a smoke fit fails or an agreement
check does not agree; else 0.

    python benchmarks/gpu_check.py                        # on cuda, about 5 minutes
    python benchmarks/gpu_check.py --json gpu.json        # also save every figure
    python benchmarks/gpu_check.py --device cpu --quick   # small sizes: the whole run on a CPU
    python benchmarks/gpu_check.py --smoke-only           # the smoke fits alone
    python benchmarks/gpu_check.py --sections vae cavi    # some sections
"""

from __future__ import annotations

import os

# JAX takes 75% of a GPU's memory when it starts unless told not to; torch shares the device.
os.environ.setdefault("XLA_PYTHON_CLIENT_PREALLOCATE", "false")

import argparse  # noqa: E402
import contextlib  # noqa: E402
import datetime  # noqa: E402
import importlib  # noqa: E402
import importlib.metadata  # noqa: E402
import importlib.util  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import signal  # noqa: E402
import sys  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
import traceback  # noqa: E402
import warnings  # noqa: E402
from pathlib import Path  # noqa: E402
from types import SimpleNamespace  # noqa: E402

import numpy as np  # noqa: E402

HERE = Path(__file__).resolve().parent
if str(HERE.parent) not in sys.path:  # this checkout's packages, run from anywhere
    sys.path.insert(1, str(HERE.parent))

SECTIONS = (
    "environment", "smoke", "agreement", "bandwidth", "vae", "cavi", "bam", "nuts", "launches",
)  # fmt: skip

# Sizes of the full run (on a GPU) and of --quick (a CPU in about two minutes).
FULL = SimpleNamespace(
    smoke_rows=200, smoke_steps=5, smoke_limit=60.0,
    agree_rows=2000, agree_steps=30, vae_agree_rows=2000, vae_agree_steps=100,
    bandwidth_bytes=2_000_000_000,
    vae_rows=50_000, vae_batches=(100, 1000), vae_epochs=2,
    cavi_n=1_000_000, cavi_steps=12, cavi_small_n=1_000, cavi_small_steps=50,
    bam=dict(steps=10, warmup=5, rounds=3, rows=4096), launch_steps=5,
    nuts_sizes=(300, 10_000, 300_000), nuts_iterations=4, nuts_depth=4, nuts_limit=40.0,
)  # fmt: skip
QUICK = SimpleNamespace(
    smoke_rows=60, smoke_steps=3, smoke_limit=60.0,
    agree_rows=300, agree_steps=10, vae_agree_rows=300, vae_agree_steps=10,
    bandwidth_bytes=100_000_000,
    vae_rows=500, vae_batches=(100,), vae_epochs=2,
    cavi_n=20_000, cavi_steps=4, cavi_small_n=1_000, cavi_small_steps=4,
    bam=dict(steps=2, warmup=1, rounds=2, rows=256), launch_steps=1,
    nuts_sizes=(300,), nuts_iterations=3, nuts_depth=3, nuts_limit=30.0,
)  # fmt: skip
# Section time limits (seconds) of the full run; the whole run also stops starting sections
# once --budget is spent.
SECTION_LIMITS = {
    "environment": 60, "smoke": 150, "agreement": 40, "bandwidth": 20,
    "vae": 70, "cavi": 100, "bam": 55, "nuts": 120, "launches": 120,
}  # fmt: skip
# The smoke's NUTS runs: one chain, a few shallow iterations (where the algorithm's short run
# sets these options).
SMOKE_SAMPLER = {"num_chains": 1, "num_warmup": 3, "num_draws": 3, "max_tree_depth": 3}
AGREEMENT_RTOL = 1e-9


def _benchmark(name):
    """Another script of this folder, imported as a module (its functions are reused)."""
    spec = importlib.util.spec_from_file_location(f"_benchmark_{name}", HERE / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class TimeUp(BaseException):
    """A check ran past its time limit (a BaseException, so that no ``except Exception`` inside
    the library swallows it)."""


_DEADLINES: list[float] = []  # of the limits in force, innermost last


def _arm(deadline: float) -> None:
    signal.setitimer(signal.ITIMER_REAL, max(deadline - time.monotonic(), 1e-3))


def _expire(signum, frame):
    raise TimeUp("ran past its time limit")


@contextlib.contextmanager
def time_limit(seconds):
    """Raise :class:`TimeUp` in this thread after ``seconds``, or at an enclosing limit if that
    comes first (the main thread only; elsewhere, no limit). A call into compiled code returns
    before the limit takes effect."""
    usable = seconds is not None and seconds > 0 and hasattr(signal, "setitimer")
    if not usable or threading.current_thread() is not threading.main_thread():
        yield
        return
    deadline = time.monotonic() + seconds
    if _DEADLINES:
        deadline = min(deadline, _DEADLINES[-1])
    else:
        previous = signal.signal(signal.SIGALRM, _expire)
    _DEADLINES.append(deadline)
    _arm(deadline)
    try:
        yield
    finally:
        _DEADLINES.pop()
        if outer_limit_passed():  # the enclosing check's time is up too: end it
            raise TimeUp("ran past an enclosing time limit")
        if _DEADLINES:
            _arm(_DEADLINES[-1])
        else:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, previous)


def outer_limit_passed() -> bool:
    """Whether the time of the innermost limit still in force is up."""
    return bool(_DEADLINES) and time.monotonic() >= _DEADLINES[-1]


def first_line(err: BaseException) -> str:
    text = str(err).strip().splitlines()
    return f"{type(err).__name__}: {text[0] if text else ''}"[:300]


def where(err: BaseException, frames: int = 3) -> str:
    """The innermost frames of the error's traceback, one short line."""
    tb = traceback.extract_tb(err.__traceback__)[-frames:]
    return " <- ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in reversed(tb))


class Run:
    """What the run measured, what it could not, and its clock."""

    def __init__(self, args, sizes, argv=()):
        self.args, self.sizes, self.argv = args, sizes, list(argv)
        self.start = time.perf_counter()
        self.figures: dict = {}
        self.not_measured: list[str] = []
        self.failures: list[str] = []
        self.section_seconds: dict[str, float] = {}

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def remaining(self) -> float:
        return self.args.budget - self.elapsed()

    def limit(self, seconds) -> float:
        """A time limit of at most ``seconds`` that ends within the run's budget."""
        return max(0.1, min(seconds, self.remaining()))

    def missing(self, what: str, why: str) -> None:
        self.not_measured.append(f"{what}: {why}")
        print(f"  not measured: {what} ({why})", flush=True)

    def attempt(self, what: str, function, *args, limit=None, failure=False, **kwargs):
        """``function(*args, **kwargs)``, or None when it fails or runs out of time (printed
        with its traceback's innermost frames, and listed as not measured; with ``failure``,
        an error other than running out of time is also one of the run's failures)."""
        try:
            with time_limit(self.limit(limit or self.remaining())):
                return function(*args, **kwargs)
        except (Exception, TimeUp) as err:
            print(f"  {what}: {first_line(err)}\n    at {where(err)}", flush=True)
            self.missing(what, first_line(err))
            if failure and not isinstance(err, TimeUp):
                self.failures.append(f"{what}: {first_line(err)}")
            if isinstance(err, TimeUp) and outer_limit_passed():
                raise  # the enclosing section's time is up: it ends here
            return None


def say(*parts):
    print(*parts, flush=True)


def synchronize(device: str) -> None:
    if device.startswith("cuda"):
        import torch

        torch.cuda.synchronize(device)


# --- environment --------------------------------------------------------------------------------


def unmet_requirements() -> list[str]:
    """The project's requirements (``pyproject.toml``) that this environment lacks or holds in
    a version out of range, one line each (a machine lent for the run may come with other
    versions, or without some packages)."""
    import tomllib

    try:
        from packaging.requirements import Requirement
    except ImportError:  # not installed on its own: pip's copy
        from pip._vendor.packaging.requirements import Requirement

    with open(HERE.parent / "pyproject.toml", "rb") as f:
        wanted = tomllib.load(f)["project"]["dependencies"]
    unmet = []
    for line in wanted:
        requirement = Requirement(line)
        try:
            have = importlib.metadata.version(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            unmet.append(f"{requirement.name} is missing (the zoo needs {requirement})")
            continue
        if not requirement.specifier.contains(have, prereleases=True):
            unmet.append(f"{requirement.name} {have} is installed; the zoo needs {requirement}")
    return unmet


def environment(run: Run) -> dict:
    import jax
    import torch

    dev = run.args.device
    out = {
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
        "command": " ".join(["python", "benchmarks/gpu_check.py", *run.argv]),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "torch_cuda": torch.version.cuda,
        "jax": jax.__version__,
        "jax_devices": [str(d) for d in jax.devices()],
        "host_cpus": os.cpu_count(),
    }
    # Every requirement, so that one missing package (pyro-ppl, funsor, ArviZ ...) is named
    # here rather than failing the fits that import it, one by one.
    out["unmet_requirements"] = unmet_requirements()
    for line in out["unmet_requirements"]:
        run.failures.append(f"environment: {line}")
    for dist in ("pyro-ppl", "numpyro", "funsor", "equinox", "flatbuffers", "arviz"):
        with contextlib.suppress(importlib.metadata.PackageNotFoundError):
            out[dist] = importlib.metadata.version(dist)
    try:
        from inference.backends import jax_cache, numpyro_backend  # noqa: F401 (JAX's mode)
        from zoo import devices
    except ImportError as err:  # nothing else can run: the run stops after this section
        run.failures.append(f"environment: the zoo cannot be imported ({first_line(err)})")
        say(f"  the zoo cannot be imported: {first_line(err)}")
        return out
    out["jax_enable_x64"] = bool(jax.config.jax_enable_x64)
    out["ZOO_JAX_CACHE"] = os.environ.get("ZOO_JAX_CACHE")
    out["jax_cache_dir"] = str(jax_cache.root())
    out["XLA_PYTHON_CLIENT_PREALLOCATE"] = os.environ.get("XLA_PYTHON_CLIENT_PREALLOCATE")
    for backend in run.args.backends:
        try:
            importlib.import_module(backend)
            out[f"{backend}_device"] = str(devices.resolve(backend, dev))
        except (ImportError, ValueError) as err:
            out[f"{backend}_device"] = None
            run.failures.append(f"environment: {backend} cannot run on {dev!r}: {first_line(err)}")
            say(f"  {backend}: {first_line(err)}")
    if dev.startswith("cuda") and torch.cuda.is_available():
        index = torch.device(dev).index or 0
        out["gpu"] = torch.cuda.get_device_name(index)
        out["gpu_memory_gib"] = torch.cuda.get_device_properties(index).total_memory / 2**30
    for key, value in out.items():
        say(f"  {key}: {value}")
    return out


# --- smoke: every model x backend x algorithm ---------------------------------------------------


def smoke_fit(spec, algorithm: str, backend: str, data: dict, run: Run):
    import inference
    from inference.tools import conformance

    alg = inference.get_algorithm(algorithm)
    short = conformance.short_run(alg, run.sizes.smoke_steps)
    short.update({k: v for k, v in SMOKE_SAMPLER.items() if k in short})
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = inference.fit(
            spec, data, algorithm, backend, device=run.args.device, tol=0.0, progress=False,
            **short, **spec.example_options,
        )  # fmt: skip
        objective = np.asarray(res.history["objective"])
        if not np.all(np.isfinite(objective)):
            raise FloatingPointError(f"non-finite objective {objective}")
        # Scored on the device too: per datum where the latents are local, else draws.
        if spec.sample_posterior is None:
            scores = res.elbo(data, num_samples=2, device=run.args.device)
            if not np.all(np.isfinite(scores)):
                raise FloatingPointError("non-finite per-datum ELBO")
        else:
            res.sample_posterior(num_samples=10)
    # Each kind of warning once, by its first line: a cache that fell back to tracing, a
    # sampler on the wrong device.
    seen = {f"{w.category.__name__}: {str(w.message).strip().splitlines()[0][:160]}": None
            for w in caught if str(w.message).strip()}  # fmt: skip
    return res, list(seen)


def smoke(run: Run) -> list[dict]:
    import inference
    import zoo
    from inference.registry import supporting

    rows = run.figures["smoke"] = []  # kept as they come: a section cut short keeps its rows
    models = run.args.models or zoo.list_models()
    for name in models:
        spec = zoo.get_model(name)
        try:
            data = spec.validate_data(
                spec.make_data(np.random.default_rng(0), run.sizes.smoke_rows)
            )
        except Exception as err:
            run.missing(f"smoke {name}: its data (spec.make_data)", first_line(err))
            continue
        for algorithm in supporting(spec):
            for backend in run.args.backends:
                what = f"{name} {algorithm} {backend}"
                if run.remaining() < 5:
                    run.missing(f"smoke {what}", "the run's time budget was spent")
                    continue
                t0 = time.perf_counter()
                error = None
                try:
                    with time_limit(run.limit(run.sizes.smoke_limit)):
                        res, caught = smoke_fit(spec, algorithm, backend, data, run)
                except (Exception, TimeUp) as err:
                    if isinstance(err, TimeUp) and outer_limit_passed():
                        run.missing(f"smoke {what} and the fits after it", first_line(err))
                        raise
                    error = err
                seconds = time.perf_counter() - t0
                row = {"model": name, "algorithm": algorithm, "backend": backend,
                       "seconds": seconds, "ok": error is None}  # fmt: skip
                if error is None:
                    row["per_step_s"] = res.timing["per_step"]
                    row["warnings"] = caught
                    say(f"  {name:19s} {algorithm:12s} {backend:8s} ok      {seconds:6.1f} s")
                    for line in caught[:3]:
                        say(f"    warning: {line}")
                else:
                    row["error"] = first_line(error)
                    row["where"] = where(error)
                    run.failures.append(f"smoke {what}: {row['error']}")
                    say(f"  {name:19s} {algorithm:12s} {backend:8s} FAILED  {seconds:6.1f} s  "
                        f"{row['error']}\n    at {row['where']}")  # fmt: skip
                rows.append(row)
    ok = sum(r["ok"] for r in rows)
    say(f"  {ok} of {len(rows)} fits ran on {run.args.device}; {len(inference.list_algorithms())} "
        f"algorithms, {len(models)} models")  # fmt: skip
    return rows


# --- agreement ----------------------------------------------------------------------------------


def deterministic_algorithms() -> list[str]:
    """Algorithms whose fit is the same computation on every device: not stochastic, and not
    samplers (whose random streams differ between devices)."""
    import inference

    return [
        name
        for name in inference.list_algorithms()
        if not inference.get_algorithm(name).traits.stochastic
        and inference.get_algorithm(name).traits.estimate != "draws"
    ]


def agreement(run: Run) -> list[dict]:
    import inference
    import zoo

    rows = run.figures["agreement"] = []
    dev = run.args.device
    for algorithm in deterministic_algorithms():
        alg = inference.get_algorithm(algorithm)
        for name in run.args.models or zoo.list_models():
            spec = zoo.get_model(name)
            if not alg.supports(spec):
                continue
            data = spec.make_data(np.random.default_rng(0), run.sizes.agree_rows)
            for backend in run.args.backends:
                what = f"agreement {name} {algorithm} {backend}"
                fits = {}
                for where_ in dict.fromkeys(("cpu", dev)):  # once when the device is the CPU
                    fits[where_] = run.attempt(
                        f"{what} on {where_}", _timed_fit, spec, data, algorithm, backend,
                        where_, run.sizes.agree_steps,
                    )  # fmt: skip
                if fits["cpu"] is None or fits[dev] is None:
                    continue
                (cpu, t_cpu), (other, t_dev) = fits["cpu"], fits[dev]
                ok = bool(np.isclose(cpu, other, rtol=AGREEMENT_RTOL, atol=0.0))
                rows.append({"model": name, "algorithm": algorithm, "backend": backend,
                             "objective_cpu": cpu, "objective_device": other,
                             "relative_difference": abs(cpu - other) / max(abs(cpu), 1e-300),
                             "seconds_cpu": t_cpu, "seconds_device": t_dev, "ok": ok})  # fmt: skip
                say(f"  {name:19s} {algorithm:5s} {backend:8s} objective cpu {cpu:.10f} {dev} "
                    f"{other:.10f} ({t_cpu:.2f} s / {t_dev:.2f} s)  {'ok' if ok else 'MISMATCH'}")  # fmt: skip
                if not ok:
                    run.failures.append(f"{what}: {cpu!r} on cpu, {other!r} on {dev}")
    if "vae" in (run.args.models or zoo.list_models()):
        row = run.attempt("agreement vae evaluation", vae_evaluation_agreement, run)
        if row is not None:
            rows.extend(row)
    return rows


def _timed_fit(spec, data, algorithm, backend, device, steps):
    import inference

    t0 = time.perf_counter()
    res = inference.fit(
        spec, data, algorithm, backend, device=device, dtype="float64", num_steps=steps,
        tol=0.0, progress=False, **spec.example_options,
    )  # fmt: skip
    return float(res.objective), time.perf_counter() - t0


def binary_images(rows: int, seed: int = 0) -> np.ndarray:
    """Random binary rows of MNIST's shape (784 pixels, about 13% on, as MNIST's)."""
    rng = np.random.default_rng(seed)
    return (rng.random((rows, 784), dtype=np.float32) < 0.13).astype(np.float32)


def vae_evaluation_agreement(run: Run) -> list[dict]:
    """A VAE fitted on the device scores held-out rows the same on both devices (within
    Monte-Carlo error: the devices draw different noise)."""
    import inference

    dev, rows = run.args.device, []
    x = binary_images(run.sizes.vae_agree_rows)
    test = binary_images(200, seed=1)
    for backend in run.args.backends:
        res = inference.fit(
            "vae", {"x": x}, "svi", backend, device=dev, num_steps=run.sizes.vae_agree_steps,
            batch_size=100, lr=1e-3, progress=False, latent_dim=10, hidden=(100,),
        )  # fmt: skip
        stats = {}
        for where_ in ("cpu", dev):
            elbo = res.elbo(test, num_samples=100, seed=1, device=where_)
            log_px = res.log_marginal_likelihood(test, num_samples=100, seed=1, device=where_)
            stats[where_] = (float(elbo.mean()), float(log_px.mean()))
        (e_cpu, l_cpu), (e_dev, l_dev) = stats["cpu"], stats[dev]
        ok = abs(e_cpu - e_dev) < 0.5 and abs(l_cpu - l_dev) < 0.5
        rows.append({"model": "vae", "algorithm": "svi", "backend": backend,
                     "elbo_cpu": e_cpu, "elbo_device": e_dev, "log_px_cpu": l_cpu,
                     "log_px_device": l_dev, "ok": ok})  # fmt: skip
        say(f"  vae evaluation {backend:8s} ELBO cpu {e_cpu:.3f} {dev} {e_dev:.3f}; log p(x) "
            f"cpu {l_cpu:.3f} {dev} {l_dev:.3f}  {'ok' if ok else 'MISMATCH'}")  # fmt: skip
        if not ok:
            run.failures.append(f"agreement vae evaluation {backend}")
    return rows


# --- bandwidth ----------------------------------------------------------------------------------


def bandwidth(run: Run) -> dict:
    """Bytes per second of a device-to-device copy (read + write), the best of several."""
    import torch

    dev = run.args.device
    n = run.sizes.bandwidth_bytes // 2  # two buffers
    a = torch.ones(n // 4, dtype=torch.float32, device=dev)
    b = torch.empty_like(a)
    b.copy_(a)
    synchronize(dev)
    best = float("inf")
    for _ in range(10):
        t0 = time.perf_counter()
        b.copy_(a)
        synchronize(dev)
        best = min(best, time.perf_counter() - t0)
    copied = a.nbytes
    del a, b
    out = {"bytes_copied": copied, "seconds": best, "bytes_per_s": 2 * copied / best}
    say(f"  {out['bytes_per_s'] / 1e9:.1f} GB/s, read + write (a copy of {copied / 1e9:.2f} GB)")
    return out


# --- VAE epoch against a plain PyTorch loop -----------------------------------------------------

VAE_PATHS = {  # name -> (backend, elbo, jit); the plain loop is the baseline
    "zoo Pyro, Trace_ELBO": ("pyro", "trace", False),
    "zoo Pyro, Trace_ELBO (jit=True)": ("pyro", "trace", True),
    'zoo Pyro, elbo="meanfield" (jit=True)': ("pyro", "meanfield", True),
    "zoo NumPyro, Trace_ELBO": ("numpyro", "trace", False),
}
#: Compiled Pyro paths timed once more on torch's optimising graph executor, which fuses
#: elementwise operations on a GPU (``SVIEngine.jit_optimized``; off by default): does fusing
#: cut the launches that keep ``jit=True`` from the plain loop?
OPTIMIZED = " on the optimising executor"
VAE_OPTIMIZED = ["zoo Pyro, Trace_ELBO (jit=True)", 'zoo Pyro, elbo="meanfield" (jit=True)']
PLAIN = "plain PyTorch loop"


@contextlib.contextmanager
def optimizing_executor(on: bool):
    """Pyro's compiled SVI steps on torch's optimising graph executor while this is active."""
    if not on:
        yield
        return
    from inference.backends.pyro_backend import SVIEngine

    before, SVIEngine.jit_optimized = SVIEngine.jit_optimized, True
    try:
        yield
    finally:
        SVIEngine.jit_optimized = before


def vae(run: Run) -> dict:
    import zoo

    vae_speed = _benchmark("vae_speed")
    dev, sizes = run.args.device, run.sizes
    x = binary_images(sizes.vae_rows)
    options = dict(latent_dim=50, hidden=(200, 200))
    config = zoo.get_model("vae").prepare({"x": x[:1]}, **options)
    lr, seed, epochs = 1e-3, 0, sizes.vae_epochs
    say(f"  data: {sizes.vae_rows:,} random binary rows of 784 pixels (synthetic, not MNIST); "
        f"784-200-200-50; best epoch after {epochs - 1} warm-up epoch(s)")  # fmt: skip
    out = run.figures["vae"] = {"data": f"synthetic binary {sizes.vae_rows}x784", "by_batch": {}}
    for batch in sizes.vae_batches:
        times = {}
        times[PLAIN] = run.attempt(
            f"vae batch {batch} {PLAIN}", vae_speed.plain_pytorch_epochs, x, config, batch, lr,
            epochs, seed, device=dev,
        )  # fmt: skip
        paths = [(name, *path, False) for name, path in VAE_PATHS.items()]
        paths += [(name + OPTIMIZED, *VAE_PATHS[name], True) for name in VAE_OPTIMIZED]
        for name, backend, elbo, jit, optimized in paths:
            if backend not in run.args.backends:
                continue
            with optimizing_executor(optimized):
                times[name] = run.attempt(
                    f"vae batch {batch} {name}", vae_speed.zoo_epochs, x, backend, batch, lr,
                    epochs, seed, elbo, options, jit=jit, device=dev,
                )  # fmt: skip
        best = {name: min(t[1:] or t) for name, t in times.items() if t}
        base = best.get(PLAIN)
        table = {name: {"seconds_per_epoch": t,
                        "x_plain_pytorch": t / base if base else None} for name, t in best.items()}  # fmt: skip
        out["by_batch"][str(batch)] = table
        say(f"  batch {batch}: | path | s/epoch | x plain PyTorch |")
        for name, row in table.items():
            ratio = row["x_plain_pytorch"]
            say(f"    | {name} | {row['seconds_per_epoch']:.3f} | "
                f"{'n/a' if ratio is None else f'{ratio:.2f}'} |")  # fmt: skip
    return out


# --- CAVI per iteration against the memory-bandwidth limit -------------------------------------


def cavi(run: Run) -> dict:
    cavi_speed = _benchmark("cavi_speed")
    dev, n, d, k, steps = run.args.device, run.sizes.cavi_n, 10, 20, run.sizes.cavi_steps
    x, resp = cavi_speed.make_problem(n, d, k)
    measured = run.figures.get("bandwidth") or {}
    bw = measured.get("bytes_per_s")
    if bw is None:
        run.missing("cavi memory-bound time", "no bandwidth measurement")
    rows = {}
    run.figures["cavi"] = {"n": n, "d": d, "k": k, "steps": steps, "bandwidth_bytes_per_s": bw,
                           "rows": rows}  # fmt: skip
    say(f"  N={n:,} D={d} K={k}, median of {steps} iterations (the first compiles)")
    say(f"  {'backend':8s} {'dtype':8s} {'ms/iteration':>12s} {'MB/iteration':>12s} "
        f"{'bound ms':>9s} {'x bound':>8s}")  # fmt: skip
    for dtype, itemsize in (("float64", 8), ("float32", 4)):
        nbytes = cavi_speed.bytes_per_iteration(n, d, k, itemsize)
        for backend in run.args.backends:
            got = run.attempt(
                f"cavi {backend} {dtype}", cavi_speed.zoo_iteration_time, x, resp, k, backend,
                steps, device=dev, dtype=dtype,
            )  # fmt: skip
            if got is None:
                continue
            seconds = got[0]
            bound = nbytes / bw if bw else None
            rows[f"{backend} {dtype}"] = {
                "seconds_per_iteration": seconds,
                "bytes_per_iteration": nbytes,
                "memory_bound_s": bound,
                "x_memory_bound": seconds / bound if bound else None,
            }
            say(f"  {backend:8s} {dtype:8s} {seconds * 1e3:12.3f} {nbytes / 1e6:12.1f} "
                f"{'n/a' if bound is None else f'{bound * 1e3:9.3f}'} "
                f"{'n/a' if bound is None else f'{seconds / bound:7.1f}x'}")  # fmt: skip
    read_first = run.figures["cavi"]["objective_read_first"] = {}
    for backend in run.args.backends:
        with _objective_read_first(backend):
            got = run.attempt(
                f"cavi {backend} float64, objective read first", cavi_speed.zoo_iteration_time,
                x, resp, k, backend, steps, device=dev, dtype="float64",
            )  # fmt: skip
        queued = rows.get(f"{backend} float64")
        if got is None or queued is None:
            continue
        seconds = got[0]
        ratio = seconds / queued["seconds_per_iteration"]
        read_first[f"{backend} float64"] = {"seconds_per_iteration": seconds, "x_queued": ratio}
        say(f"  {backend:8s} float64, each objective read before the next update: "
            f"{seconds * 1e3:.3f} ms/iteration, {ratio:.2f}x the time with it queued ahead")  # fmt: skip
    eager = run.figures["cavi"]["pyro_eager"] = {}
    for dtype in ("float64", "float32") if "pyro" in run.args.backends else ():
        with _without_cuda_graphs():
            got = run.attempt(
                f"cavi pyro {dtype}, eager", cavi_speed.zoo_iteration_time, x, resp, k, "pyro",
                steps, device=dev, dtype=dtype,
            )  # fmt: skip
        replayed = rows.get(f"pyro {dtype}")
        if got is None or replayed is None:
            continue
        ratio = replayed["seconds_per_iteration"] / got[0]
        eager[dtype] = {"seconds_per_iteration": got[0], "graph_x_eager": ratio}
        # Only a GPU replays the updates from CUDA graphs: elsewhere both rows run eagerly.
        usual = "replayed from a CUDA graph" if dev.startswith("cuda") else "by default"
        say(f"  pyro     {dtype}, eagerly (ZOO_CUDA_GRAPHS=0): {got[0] * 1e3:.3f} ms/iteration; "
            f"{usual}, {ratio:.2f}x that")  # fmt: skip
    small_n, small_steps = run.sizes.cavi_small_n, run.sizes.cavi_small_steps
    x_small, resp_small = cavi_speed.make_problem(small_n, d, k)
    small = run.figures["cavi"]["host_bound"] = {"n": small_n, "steps": small_steps, "rows": {}}
    runs = [(backend, "", contextlib.nullcontext) for backend in run.args.backends]
    if "pyro" in run.args.backends:
        runs.append(("pyro", ", eager", _without_cuda_graphs))
    for backend, how, context in runs:
        with context():
            got = run.attempt(
                f"cavi {backend} float64{how}, N={small_n:,}", cavi_speed.zoo_iteration_time,
                x_small, resp_small, k, backend, small_steps, device=dev, dtype="float64",
            )  # fmt: skip
        if got is not None:
            small["rows"][f"{backend} float64{how}"] = {"seconds_per_iteration": got[0]}
            say(f"  {backend:8s} float64{how}, N={small_n:,} (the host's time to issue an "
                f"iteration): {got[0] * 1e3:.3f} ms/iteration")  # fmt: skip
    # Last: compiling takes the longest, and the figures above come first.
    compiled = run.figures["cavi"]["pyro_jit"] = {}
    for dtype in ("float64", "float32") if "pyro" in run.args.backends else ():
        got = run.attempt(
            f"cavi pyro {dtype}, jit=True", cavi_speed.zoo_iteration_time, x, resp, k, "pyro",
            steps, device=dev, dtype=dtype, jit=True,
        )  # fmt: skip
        replayed = rows.get(f"pyro {dtype}")
        if got is None or replayed is None:
            continue
        seconds, bound = got[0], replayed["memory_bound_s"]
        compiled[dtype] = {
            "seconds_per_iteration": seconds,
            "x_uncompiled": seconds / replayed["seconds_per_iteration"],
            "x_memory_bound": seconds / bound if bound else None,
        }
        then = ", then the CUDA graph" if dev.startswith("cuda") else ""
        say(f"  pyro     {dtype}, jit=True (torch.compile{then}): "
            f"{seconds * 1e3:.3f} ms/iteration, {compiled[dtype]['x_uncompiled']:.2f}x the "
            f"uncompiled time"
            + ("" if bound is None else f", {seconds / bound:.1f}x the memory-bound time"))  # fmt: skip
    return run.figures["cavi"]


def _without_cuda_graphs():
    """Pyro's closed-form updates run eagerly, one kernel launch at a time, on any device
    (``inference.backends.cuda_graph``)."""
    from unittest.mock import patch

    return patch.dict(os.environ, {"ZOO_CUDA_GRAPHS": "0"})


def _objective_read_first(backend: str):
    """Closed-form fits on ``backend`` that read each iteration's objective before they queue
    the next update, as they do on a CPU (``inference.algorithms.closed_form``)."""
    from unittest.mock import patch

    module = importlib.import_module(f"inference.backends.{backend}_backend")
    return patch.object(module, "runs_ahead", lambda device: False)


# --- Bayesian attention against softmax ---------------------------------------------------------


def bam(run: Run) -> dict:
    bam_speed = _benchmark("bam_speed")
    argv = ["--device", run.args.device]
    for key, value in run.sizes.bam.items():
        argv += [f"--{key}", str(value)]
    table = run.figures["bam"] = {}
    # One backend at a time: a failure loses only its rows. Pyro's compiled steps come last, so
    # that a shortage of time drops them alone.
    runs = {f"bam {backend}": ["--backends", backend] for backend in run.args.backends}
    if "pyro" in run.args.backends:
        runs["bam pyro jit"] = ["--backends", "pyro", "--jit"]
    for what, chosen in runs.items():
        got = run.attempt(what, bam_speed.main, [*argv, *chosen])
        if got:
            table.update(got)
    return table


# --- operations and kernel launches per step ---------------------------------------------------


def launches(run: Run) -> dict | None:
    if "pyro" not in run.args.backends:
        run.missing("launches", "counted for Pyro's paths, and Pyro is not among --backends")
        return None
    op_counts = _benchmark("op_counts")
    argv = ["--device", run.args.device, "--steps", str(run.sizes.launch_steps)]
    table = {}
    for rows in op_counts.ROWS:  # one table at a time: a time limit loses only the rest
        got = run.attempt(f"launches {rows}", op_counts.main, [*argv, "--rows", rows])
        if got:
            table.update(got)
    return table


# --- NUTS on the device against the CPU ---------------------------------------------------------


def nuts_leapfrog_seconds(data, backend, device, iterations, depth):
    """Seconds per leapfrog step of one NUTS chain (the draws' chunk, after a warm-up chunk
    that holds any compilation), the latent dimension, the data size, the fit's wall time and
    the seconds of its draws' chunk."""
    import inference

    kept = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        res = inference.fit(
            "bayesian_gmm", data, "nuts", backend, device=device, K=3, num_chains=1,
            num_warmup=iterations, num_draws=iterations, chunk_size=iterations,
            max_tree_depth=depth, progress=False,
            callback=lambda step, state, info: kept.update(engine=state.engine),
        )  # fmt: skip
    t = res.history["time"]
    steps = int(np.sum(res.sample_stats["n_steps"]))
    engine = kept["engine"]
    sampling = t[-1] - t[-2]
    return sampling / steps, engine.latent_dim, engine.data_size, res.timing["wall"], sampling


def predicted_fit_seconds(fits: list[tuple], next_n: int, most_leapfrogs: int) -> float | None:
    """The longest wall time the same NUTS fit may take at ``next_n`` data points, from the fits
    ``(n, wall, sampling, seconds_per_leapfrog)`` taken at smaller sizes, or None from fewer
    than two. The part that does not grow with the data (compilation, set-up: ``wall - 2 *
    sampling``) as it was last, and two chunks (warm-up and draws) of ``most_leapfrogs`` steps,
    each step's time extrapolated along the line through the last two sizes. At small sizes a
    step's time is mostly the sampler's overhead, so one fit scaled by the data would predict
    far too long a fit.

    >>> predicted_fit_seconds([(300, 14.0, 0.1, 0.010), (3_000, 14.5, 0.2, 0.012)], 30_000, 60)
    17.94
    """
    if len(fits) < 2:
        return None
    (n0, _, _, step0), (n1, wall, sampling, step1) = fits[-2:]
    step = step1 + max(step1 - step0, 0.0) / (n1 - n0) * (next_n - n1)
    return round(max(wall - 2 * sampling, 0.0) + 2 * most_leapfrogs * step, 6)


def nuts(run: Run) -> list[dict]:
    import zoo
    from inference.algorithms.sampler_device import (
        NUTS_GPU_MIN_SIZE,
        cpu_likely_faster,
        sampling_size,
    )

    dev, sizes = run.args.device, run.sizes
    spec = zoo.get_model("bayesian_gmm")
    rows, too_slow = run.figures.setdefault("nuts", []), {}  # (backend, device): why skipped
    fitted = {}  # (backend, device): (n, wall, sampling, seconds per leapfrog) of each size
    most_leapfrogs = sizes.nuts_iterations * (2**sizes.nuts_depth - 1)  # in one chunk
    say(f"  bayesian_gmm K=3, one chain of {sizes.nuts_iterations} + {sizes.nuts_iterations} "
        f"iterations, max_tree_depth={sizes.nuts_depth}; thresholds "
        + ", ".join(f"{b} {NUTS_GPU_MIN_SIZE[b]:,}" for b in run.args.backends))  # fmt: skip
    say(f"  {'backend':8s} {'N':>8s} {'size':>12s} {'ms/leapfrog cpu':>16s} "
        f"{'ms/leapfrog ' + dev:>18s} {'device/cpu':>10s}  warns")  # fmt: skip
    for i, n in enumerate(sizes.nuts_sizes):
        data = spec.make_data(np.random.default_rng(0), n)
        next_n = sizes.nuts_sizes[i + 1] if i + 1 < len(sizes.nuts_sizes) else None
        for backend in run.args.backends:
            got = {}
            for where_ in dict.fromkeys(("cpu", dev)):  # once when the device is the CPU
                if (backend, where_) in too_slow:
                    run.missing(f"nuts {backend} N={n} on {where_}", too_slow[backend, where_])
                    continue
                got[where_] = run.attempt(
                    f"nuts {backend} N={n} on {where_}", nuts_leapfrog_seconds, data, backend,
                    where_, sizes.nuts_iterations, sizes.nuts_depth, limit=sizes.nuts_limit,
                )  # fmt: skip
                if got[where_] is None:
                    too_slow[backend, where_] = f"the fit at N={n} did not finish"
                    continue
                per_leapfrog, _, _, wall, sampling = got[where_]
                fits = fitted.setdefault((backend, where_), [])
                fits.append((n, wall, sampling, per_leapfrog))
                if next_n is not None:
                    # Judged by the sampling alone: a compiled sampler's set-up (NumPyro's takes
                    # seconds) does not grow with the data.
                    expected = predicted_fit_seconds(fits, next_n, most_leapfrogs)
                    if expected is not None and expected > sizes.nuts_limit:
                        too_slow[backend, where_] = (
                            f"about {expected:.0f} s expected from N={n}, over the "
                            f"{sizes.nuts_limit:.0f} s limit"
                        )
            if not got.get("cpu") or not got.get(dev):
                continue
            (cpu_s, latent, size, cpu_wall, _), (dev_s, _, _, dev_wall, _) = got["cpu"], got[dev]
            platform_ = "cuda" if dev.startswith("cuda") else dev
            row = {"backend": backend, "n": n, "latent_dim": latent, "data_size": size,
                   "size": sampling_size(latent, size), "seconds_per_leapfrog_cpu": cpu_s,
                   "seconds_per_leapfrog_device": dev_s, "device_over_cpu": dev_s / cpu_s,
                   "fit_seconds_cpu": cpu_wall, "fit_seconds_device": dev_wall,
                   "warns": cpu_likely_faster(latent, size, platform_, backend)}  # fmt: skip
            rows.append(row)
            say(f"  {backend:8s} {n:8d} {row['size']:12,d} {cpu_s * 1e3:16.3f} "
                f"{dev_s * 1e3:18.3f} {dev_s / cpu_s:10.2f}  {row['warns']}")  # fmt: skip
    for backend in run.args.backends:
        measured = [(r["size"], r["device_over_cpu"]) for r in rows if r["backend"] == backend]
        if measured and dev != "cpu":
            found = run.figures.setdefault("nuts_crossover", {})[backend] = crossover(measured)
            say(f"  {backend}: {found} (threshold {NUTS_GPU_MIN_SIZE[backend]:,})")
    return rows


def crossover(measured: list[tuple[int, float]]) -> str:
    """Where the device becomes faster than the CPU, from (size, device time / CPU time) rows:
    the size at which the ratio crosses 1, interpolated on log scales between the rows around
    it."""
    measured = sorted(measured)
    for (s0, r0), (s1, r1) in zip(measured, measured[1:], strict=False):
        if r0 >= 1 > r1:
            t = np.log(r0) / (np.log(r0) - np.log(r1))
            size = np.exp(np.log(s0) + t * (np.log(s1) - np.log(s0)))
            return f"the device is faster from a size of about {size:,.0f}"
    if all(r < 1 for _, r in measured):
        return f"the device is faster at every size measured (from {int(measured[0][0]):,})"
    if all(r >= 1 for _, r in measured):
        return f"the CPU is faster at every size measured (up to {int(measured[-1][0]):,})"
    return "no single crossing: the device is faster at some smaller sizes than the CPU"


# --- targets ------------------------------------------------------------------------------------


def targets(run: Run) -> list[dict]:
    """The speed targets of the GPU work, each with its figure (None: not measured)."""
    out = []

    def target(name, value, limit):
        met = None if value is None else bool(value <= limit)
        out.append({"target": name, "value": value, "limit": limit, "met": met})

    vae_ = (run.figures.get("vae") or {}).get("by_batch", {})
    pyro, numpyro = ("pyro" in run.args.backends), ("numpyro" in run.args.backends)
    for batch, table in vae_.items():

        def seconds(path, table=table):
            return (table.get(path) or {}).get("seconds_per_epoch")

        def ratio(path, table=table):
            return (table.get(path) or {}).get("x_plain_pytorch")

        trace_jit = seconds("zoo Pyro, Trace_ELBO (jit=True)")
        meanfield = seconds('zoo Pyro, elbo="meanfield" (jit=True)')
        if pyro:
            target(
                f"vae batch {batch}: Pyro meanfield (jit) / Trace_ELBO (jit)",
                meanfield / trace_jit if meanfield and trace_jit else None,
                1.0,
            )
            target(
                f"vae batch {batch}: Pyro jit=True x plain PyTorch",
                ratio("zoo Pyro, Trace_ELBO (jit=True)"),
                1.2,
            )
        if numpyro:
            target(
                f"vae batch {batch}: NumPyro x plain PyTorch", ratio("zoo NumPyro, Trace_ELBO"), 0.6
            )
    cavi_ = (run.figures.get("cavi") or {}).get("rows", {})
    for name, row in cavi_.items():
        target(f"cavi N={run.sizes.cavi_n:,} {name}: x memory bound", row["x_memory_bound"], 3.0)
    compiled = (run.figures.get("cavi") or {}).get("pyro_jit", {})
    for dtype, row in compiled.items():
        target(
            f"cavi N={run.sizes.cavi_n:,} pyro {dtype} jit=True: x memory bound",
            row["x_memory_bound"],
            3.0,
        )
    bam_ = run.figures.get("bam") or {}
    for name, row in bam_.items():
        if not name.endswith(" softmax") and "," not in name:
            target(f"bam {name}: x softmax", row["x_softmax"], 1.2)
    return out


# --- the run ------------------------------------------------------------------------------------

RUNNERS = {
    "environment": environment,
    "smoke": smoke,
    "agreement": agreement,
    "bandwidth": bandwidth,
    "vae": vae,
    "cavi": cavi,
    "bam": bam,
    "launches": launches,
    "nuts": nuts,
}


def _json_default(value):
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, np.ndarray):
        return value.tolist()
    return str(value)


def main(argv=None):
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--device", default="cuda", help='"cuda" (default), "cuda:N" or "cpu"')
    p.add_argument("--quick", action="store_true", help="small sizes: the whole run on a CPU")
    p.add_argument("--smoke-only", action="store_true", help="the environment and smoke fits")
    p.add_argument("--sections", nargs="+", choices=SECTIONS, help="these sections only")
    p.add_argument("--models", nargs="+", help="these models only (default: every registered)")
    p.add_argument("--backends", nargs="+", default=["pyro", "numpyro"])
    p.add_argument("--budget", type=float, default=300.0,
                   help="seconds: no section starts after, and every check ends by, this")  # fmt: skip
    p.add_argument("--json", help="also write every figure to this file")
    argv = sys.argv[1:] if argv is None else list(argv)
    args = p.parse_args(argv)
    sections = list(args.sections or SECTIONS)
    if args.smoke_only:
        sections = ["environment", "smoke"]
    if "environment" not in sections:
        sections.insert(0, "environment")
    run = Run(args, QUICK if args.quick else FULL, argv)
    say(f"gpu_check on {args.device}: sections {' '.join(sections)}; "
        f"budget {args.budget:.0f} s{' (quick sizes)' if args.quick else ''}")  # fmt: skip
    for name in sections:
        if run.remaining() < 5:
            run.missing(f"section {name}", "the run's time budget was spent")
            continue
        say(f"\n== {name} ({run.elapsed():.0f} s into the run)")
        t0 = time.perf_counter()
        limit = SECTION_LIMITS[name] if not args.quick else run.remaining()
        result = run.attempt(f"section {name}", RUNNERS[name], run, limit=limit, failure=True)
        run.section_seconds[name] = time.perf_counter() - t0
        if result is not None:
            run.figures[name] = result
        say(f"== {name}: {run.section_seconds[name]:.1f} s")
        write_report(run, targets(run))  # after each section: a crash keeps what was measured
        found = (run.figures.get("environment") or {}).get
        if name == "environment" and not any(found(f"{b}_device") for b in args.backends):
            say("no backend has the device: stopping here")
            for rest in sections[sections.index(name) + 1 :]:
                run.missing(f"section {rest}", f"no backend has device {args.device!r}")
            break
    goals = targets(run)
    if goals:
        note = "" if args.device.startswith("cuda") else f" (on {args.device}: for information)"
        say(f"\n== targets{note}")
        for goal in goals:
            value = "not measured" if goal["value"] is None else f"{goal['value']:.2f}"
            state = {None: "-", True: "met", False: "NOT met"}[goal["met"]]
            say(f"  {goal['target']}: {value} (<= {goal['limit']}) {state}")
    say(f"\n== not measured ({len(run.not_measured)})")
    for line in run.not_measured or ["nothing: every figure was taken"]:
        say(f"  {line}")
    if run.failures:
        say(f"\n== FAILED ({len(run.failures)})")
        for line in run.failures:
            say(f"  {line}")
    else:
        say("\n== all checks passed")
    say(f"total {run.elapsed():.0f} s")
    return write_report(run, goals)


def write_report(run: Run, goals: list[dict]) -> dict:
    """The run's report, also written to ``--json`` when given."""
    report = {
        "settings": vars(run.args),
        "figures": run.figures,
        "targets": goals,
        "not_measured": run.not_measured,
        "failures": run.failures,
        "section_seconds": run.section_seconds,
        "total_seconds": run.elapsed(),
    }
    if run.args.json:
        from zoo.files import write_text  # as every import of the zoo here: in the run

        write_text(run.args.json, json.dumps(report, indent=2, default=_json_default))
    return report


if __name__ == "__main__":
    sys.exit(1 if main()["failures"] else 0)
