"""Exercise the GPU paths of both backends and compare them with the CPU.

Run on a machine with a CUDA GPU (``--device cuda`` by default); exits non-zero on a mismatch.

* Closed-form CAVI (``bayesian_gmm``) and EM (``gmm``): the same iterations on the GPU and the
  CPU, in float64, must give the same objective to 1e-9 (relative).
* The VAE: a minibatch SVI fit on the GPU (data and networks there), then the per-datum ELBO
  and importance-weighted log p(x) of the same weights evaluated on the GPU and on the CPU agree
  within Monte-Carlo error.

    python benchmarks/gpu_check.py [--device cuda] [--vae-rows 5000]
"""

from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import inference
import zoo


def check_closed_form(device: str) -> list[str]:
    failures = []
    x = zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(0), 5000)["x"]
    for model, algorithm in (("bayesian_gmm", "cavi"), ("gmm", "em")):
        for backend in ("pyro", "numpyro"):
            runs = {}
            for dev in ("cpu", device):
                t0 = time.perf_counter()
                res = inference.fit(
                    model, {"x": x}, algorithm, backend, device=dev, K=8, num_steps=50, tol=0.0,
                    progress=False,
                )  # fmt: skip
                runs[dev] = (res.objective, time.perf_counter() - t0)
            (cpu, t_cpu), (gpu, t_gpu) = runs["cpu"], runs[device]
            ok = np.isclose(cpu, gpu, rtol=1e-9)
            print(
                f"{model:13s} {algorithm:5s} {backend:8s} objective cpu {cpu:.10f} "
                f"{device} {gpu:.10f}  ({t_cpu:.2f} s / {t_gpu:.2f} s)  {'ok' if ok else 'MISMATCH'}"
            )
            if not ok:
                failures.append(f"{model}/{algorithm}/{backend}")
    return failures


def check_vae(device: str, rows: int) -> list[str]:
    from zoo.datasets import load_binarized_mnist

    failures = []
    x = load_binarized_mnist("train")[:rows].astype(np.float32)
    test = load_binarized_mnist("test")[::20].astype(np.float32)  # 500 rows from all over
    for backend in ("pyro", "numpyro"):
        t0 = time.perf_counter()
        res = inference.fit(
            "vae", {"x": x}, "svi", backend, device=device, num_steps=5 * (rows // 100),
            batch_size=100, lr=1e-3, progress=False,
        )  # fmt: skip
        train_s = time.perf_counter() - t0
        stats = {}
        for dev in ("cpu", device):
            elbo = res.elbo(test, num_samples=200, seed=1, device=dev)
            log_px = res.log_marginal_likelihood(test, num_samples=200, seed=1, device=dev)
            stats[dev] = (elbo.mean(), log_px.mean())
        (e_cpu, l_cpu), (e_gpu, l_gpu) = stats["cpu"], stats[device]
        ok = abs(e_cpu - e_gpu) < 0.5 and abs(l_cpu - l_gpu) < 0.5
        print(
            f"vae svi {backend:8s} 5 epochs of {rows} rows on {device}: {train_s:.1f} s, "
            f"{res.timing['per_step'] * 1e3:.2f} ms/step; test ELBO cpu {e_cpu:.3f} "
            f"{device} {e_gpu:.3f}; log p(x) k=200 cpu {l_cpu:.3f} {device} {l_gpu:.3f}  "
            f"{'ok' if ok else 'MISMATCH'}"
        )
        if not ok:
            failures.append(f"vae/{backend}")
    return failures


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--device", default="cuda")
    p.add_argument("--vae-rows", type=int, default=5000)
    args = p.parse_args(argv)
    failures = check_closed_form(args.device) + check_vae(args.device, args.vae_rows)
    print("FAILED: " + ", ".join(failures) if failures else "all GPU checks passed")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
