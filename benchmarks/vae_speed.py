"""Seconds per training epoch of the VAE: a hand-written PyTorch loop against the zoo's Pyro and
NumPyro paths (``inference.fit``), same network, batch size and data, measured in one run.

The plain loop is what one writes without a PPL: the encoder and decoder of ``zoo.vae`` (torch
twin), Adam (torch's fused Adam, as the zoo's Pyro engine uses), an epoch-wise shuffled
minibatch, the reparameterised single-sample ELBO with the Gaussian KL in closed form. The zoo
runs are timed from the loop's own per-step clock (``history["time"]``). Each path runs
``--epochs`` epochs; the first (which holds JAX's compilation) is a warm-up, and the fastest of
the others is reported, the least disturbed by whatever else the machine does.

    python benchmarks/vae_speed.py            # binarized MNIST, 50,000 rows, 784-200-200-50
    python benchmarks/vae_speed.py --quick    # 2,000 rows: what the tests run
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

import inference
import zoo
from zoo.datasets import load_binarized_mnist
from zoo.files import write_text
from zoo.vae.pyro_model import Decoder, Encoder


def plain_model(config, lr, seed, device="cpu"):
    """The encoder, decoder and fused Adam of the plain loop, seeded."""
    torch.manual_seed(seed)
    encoder, decoder = Encoder(config).to(device), Decoder(config).to(device)
    optim = torch.optim.Adam([*encoder.parameters(), *decoder.parameters()], lr=lr, fused=True)
    return encoder, decoder, optim


def plain_step(encoder, decoder, optim, batch, data_scale):
    """One step of the plain loop on ``batch``: the full-data ELBO (the minibatch's terms times
    ``data_scale = N / batch size``, as the zoo's), its gradient and Adam's update."""
    loc, scale = encoder(batch)
    z = loc + scale * torch.randn_like(loc)
    logits = decoder(z)
    log_lik = -torch.nn.functional.binary_cross_entropy_with_logits(logits, batch, reduction="sum")
    kl = 0.5 * (loc**2 + scale**2 - 1 - 2 * torch.log(scale)).sum()
    loss = -(log_lik - kl) * data_scale
    optim.zero_grad()
    loss.backward()
    optim.step()
    return loss.item()  # read the loss each step, as a training loop that logs it does


def plain_pytorch_epochs(x, config, batch_size, lr, epochs, seed, device="cpu"):
    """Seconds of each epoch of a plain PyTorch VAE training loop, data and networks on
    ``device``."""
    encoder, decoder, optim = plain_model(config, lr, seed, device)
    x = torch.as_tensor(x, device=device)
    n = len(x)
    times = []
    for _ in range(epochs):
        t0 = time.perf_counter()
        order = torch.randperm(n, device=device)
        for i in range(n // batch_size):
            batch = x[order[i * batch_size : (i + 1) * batch_size]]
            plain_step(encoder, decoder, optim, batch, n / batch_size)
        times.append(time.perf_counter() - t0)
    return times


def zoo_epochs(x, backend, batch_size, lr, epochs, seed, elbo, options, jit=False, device="cpu"):
    """Seconds of each epoch of the zoo's SVI fit of the VAE on ``device``."""
    res = inference.fit(
        "vae",
        {"x": x},
        "svi",
        backend,
        num_steps=epochs * (len(x) // batch_size),
        tol=0,  # every epoch is timed: the stopping rule must not end the run
        batch_size=batch_size,
        lr=lr,
        seed=seed,
        elbo=elbo,
        progress=False,
        jit=jit,
        device=device,
        **options,
    )
    steps = len(x) // batch_size
    ends = res.history["time"][steps - 1 :: steps]
    return list(np.diff(np.concatenate([[0.0], ends])))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__)
    p.add_argument("--quick", action="store_true")
    p.add_argument("--rows", type=int, default=50_000)
    p.add_argument("--batch-size", type=int, default=100)
    p.add_argument("--hidden", type=int, nargs="+", default=[200, 200])
    p.add_argument("--latent-dim", type=int, default=50)
    p.add_argument("--epochs", type=int, default=3, help="the first is a warm-up")
    p.add_argument("--json", default=None)
    args = p.parse_args(argv)
    if args.quick:
        args.rows = 2000
    x = load_binarized_mnist("train")[: args.rows].astype(np.float32)
    options = dict(latent_dim=args.latent_dim, hidden=tuple(args.hidden))
    config = zoo.get_model("vae").prepare({"x": x[:1]}, **options)
    lr, seed = 1e-3, 0
    runs = {
        "plain PyTorch loop": plain_pytorch_epochs(
            x, config, args.batch_size, lr, args.epochs, seed
        ),
        "zoo Pyro, Trace_ELBO": zoo_epochs(
            x, "pyro", args.batch_size, lr, args.epochs, seed, "trace", options
        ),
        'zoo Pyro, elbo="meanfield"': zoo_epochs(
            x, "pyro", args.batch_size, lr, args.epochs, seed, "meanfield", options
        ),
        "zoo Pyro, JitTrace_ELBO (jit=True)": zoo_epochs(
            x, "pyro", args.batch_size, lr, args.epochs, seed, "trace", options, jit=True
        ),
        'zoo Pyro, elbo="meanfield" (jit=True)': zoo_epochs(
            x, "pyro", args.batch_size, lr, args.epochs, seed, "meanfield", options, jit=True
        ),
        "zoo NumPyro, Trace_ELBO": zoo_epochs(
            x, "numpyro", args.batch_size, lr, args.epochs, seed, "trace", options
        ),
    }
    best = {name: min(t[1:]) for name, t in runs.items()}
    base = best["plain PyTorch loop"]
    table = {
        name: {"seconds_per_epoch": t, "x_plain_pytorch": t / base} for name, t in best.items()
    }
    print(f"rows={args.rows} batch={args.batch_size} hidden={args.hidden} L={args.latent_dim}")
    print("| path | s/epoch | x plain PyTorch |\n|---|---|---|")
    for name, row in table.items():
        print(f"| {name} | {row['seconds_per_epoch']:.2f} | {row['x_plain_pytorch']:.2f} |")
    if args.json:
        write_text(args.json, json.dumps({"settings": vars(args), "results": table}, indent=2))
    return table


if __name__ == "__main__":
    main()
