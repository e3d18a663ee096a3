"""Peak memory of a minibatch fit of the Bayesian GMM on a memory-mapped file, as N grows.

For each N a mixture of Gaussians (D=10) is written to ``.npy`` in chunks, then a fresh process
opens it with ``np.load(mmap_mode="r")`` and fits it by minibatch SVI (``svi-natural`` by
default, or ``svi`` with the enumerated guide), reporting its peak resident memory before and
after the fit. The number of steps and the minibatch are the same for every N, so a flat curve
means memory does not depend on N.

The peak is the process's own high-water mark, ``VmHWM`` in ``/proc/self/status``, not
``ru_maxrss``: on Linux a child's ``ru_maxrss`` starts at its parent's peak, so it would report
this launching script's peak where the child's own is lower. Where there is no ``/proc``
(macOS) the peak is ``ru_maxrss``, with that caveat; each run's ``peak_rss_from`` says which.

Sizes are in MiB (2**20 bytes), although the JSON keys, kept so that older results read the
same, end in ``_mb``: ``file_mb``, ``baseline_peak_rss_mb``, ``fit_peak_rss_mb``.

    python benchmarks/streaming_memory.py            # N = 1M, 3M, 10M (763 MiB file at 10M)
    python benchmarks/streaming_memory.py --quick    # N = 300k, 1M, 3M, 50 steps: a smoke run
    python benchmarks/streaming_memory.py --algorithm svi --backend pyro

Writes JSON (``--out``, default ``benchmarks/results/streaming_memory.json``); the data files go
to ``--workdir`` (default: a temporary folder, removed afterwards).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

import numpy as np

from zoo.files import write_text

HERE = os.path.dirname(os.path.abspath(__file__))
FULL_SIZES = (1_000_000, 3_000_000, 10_000_000)
QUICK_SIZES = (300_000, 1_000_000, 3_000_000)


def write_mixture(path, n, d=10, k=5, seed=0, chunk=250_000, sample_seed=0):
    """An (n, d) float64 ``.npy`` of a k-component Gaussian mixture, written in chunks (the
    writer never holds more than ``chunk`` rows). ``seed`` fixes the mixture, ``sample_seed``
    the draws from it (a held-out set: the same mixture, another ``sample_seed``)."""
    from inference.streaming import release

    mixture = np.random.default_rng(seed)
    centres = mixture.normal(scale=4.0, size=(k, d))
    scales = mixture.uniform(0.5, 1.5, size=(k, 1))
    rng = np.random.default_rng([seed, sample_seed])
    out = np.lib.format.open_memmap(path, mode="w+", dtype=np.float64, shape=(n, d))
    for start in range(0, n, chunk):
        rows = min(chunk, n - start)
        z = rng.integers(k, size=rows)
        out[start : start + rows] = centres[z] + scales[z] * rng.normal(size=(rows, d))
        out.flush()
        release(out)
    del out
    return path


def peak_rss_mib() -> tuple[float, str]:
    """This process's peak resident memory in MiB, and where it was read: ``"VmHWM"``, or
    ``"ru_maxrss"`` where there is no ``/proc`` (that one includes the parent's peak on Linux;
    macOS has no ``/proc``, and we do not know that it behaves otherwise)."""
    try:
        with open("/proc/self/status") as status:
            for line in status:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024, "VmHWM"  # kB
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / (2**20 if sys.platform == "darwin" else 1024), "ru_maxrss"  # bytes or kB


def child(args):
    """One fit in this (fresh) process; prints one JSON line."""
    import inference

    x = np.load(args.file, mmap_mode="r")
    before, source = peak_rss_mib()
    t0 = time.perf_counter()
    # SVI as its defaults run it; natural-gradient SVI for the steps asked for (tol=0), as the
    # figures on the scaling page were measured.
    options = dict(guide="enum") if args.algorithm == "svi" else dict(tol=0)
    res = inference.fit(
        "bayesian_gmm",
        {"x": x},
        args.algorithm,
        args.backend,
        batch_size=args.batch_size,
        num_steps=args.num_steps,
        K=args.K,
        seed=0,
        progress=False,
        **options,
    )
    print(
        json.dumps(
            {
                "num_data": int(len(x)),
                "file_mb": round(os.path.getsize(args.file) / 2**20, 1),
                "baseline_peak_rss_mb": round(before, 1),
                "fit_peak_rss_mb": round(peak_rss_mib()[0], 1),
                "peak_rss_from": source,
                "wall_s": round(time.perf_counter() - t0, 2),
                "per_step_ms": round(1e3 * res.timing["per_step"], 3),
                "objective_per_point_last100": float(
                    np.mean(res.history["objective"][-100:]) / len(x)
                ),
            }
        )
    )


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sizes", type=int, nargs="+")
    parser.add_argument("--algorithm", default="svi-natural", choices=["svi-natural", "svi"])
    parser.add_argument("--backend", default="numpyro", choices=["numpyro", "pyro"])
    parser.add_argument("--batch-size", type=int, default=1000)
    parser.add_argument("--num-steps", type=int)
    parser.add_argument("--K", type=int, default=10)
    parser.add_argument(
        "--out", help="default: results/streaming_memory.json (_quick.json with --quick)"
    )
    parser.add_argument("--workdir")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.out is None:  # a smoke run never overwrites the full run's results
        name = "streaming_memory_quick.json" if args.quick else "streaming_memory.json"
        args.out = os.path.join(HERE, "results", name)
    if args.num_steps is None:
        args.num_steps = 50 if args.quick else 2000
    if args.child:
        return child(args)
    sizes = args.sizes or (QUICK_SIZES if args.quick else FULL_SIZES)
    print(
        "file_mb and *_peak_rss_mb in MiB (2**20 bytes); each peak is the child's own", flush=True
    )
    with tempfile.TemporaryDirectory(dir=args.workdir) as tmp:
        runs = []
        for n in sizes:
            path = write_mixture(os.path.join(tmp, f"x_{n}.npy"), n)
            cmd = [sys.executable, os.path.abspath(__file__), "--child", "--file", path]
            cmd += ["--algorithm", args.algorithm, "--backend", args.backend]
            cmd += ["--batch-size", str(args.batch_size), "--num-steps", str(args.num_steps)]
            cmd += ["--K", str(args.K)]
            # Without the cache of compiled functions: every N compiles, as a first fit does
            # (a function another run kept on disk would take less memory to load than to
            # compile, and the peaks would depend on what ran before).
            env = {**os.environ, "ZOO_JAX_CACHE": "0"}
            line = subprocess.run(cmd, check=True, capture_output=True, text=True, env=env).stdout
            runs.append(json.loads(line.strip().splitlines()[-1]))
            os.remove(path)
            print(json.dumps(runs[-1]), flush=True)
    report = {
        "what": "peak RSS of a minibatch fit of bayesian_gmm on a memory-mapped .npy, per N",
        "units": "file_mb and *_peak_rss_mb are MiB (2**20 bytes)",
        "algorithm": args.algorithm,
        "backend": args.backend,
        "batch_size": args.batch_size,
        "num_steps": args.num_steps,
        "K": args.K,
        "D": 10,
        "runs": runs,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.out)), exist_ok=True)
    write_text(args.out, json.dumps(report, indent=2))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
