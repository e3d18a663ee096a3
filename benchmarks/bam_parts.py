"""Microseconds per call of the parts a Bayesian attention layer adds to a Pyro (torch) training
step, forward and backward, each timed alone on one layer of ``bam_speed.py``'s network.

The parts, for attention logits of shape (batch, heads, tokens, tokens):

- ``softmax weights``: the deterministic layer's own work, ``exp(log_softmax(logits))``, the
  baseline the others add to;
- ``uniform draw`` and ``normal draw``: the noise alone (torch draws it on one thread on a CPU);
- ``Weibull weights`` and ``log-normal weights``: the posterior, its draw and the normalised
  weights (noise included);
- ``contextual prior network``: the two-layer network scoring the keys;
- ``Gamma prior KL`` and ``log-normal prior KL``: the contextual prior's softmax over keys and
  the layer KL (network excluded).

The parts overlap: each builds the posterior it needs from the logits (one log-softmax), so
their sum counts that more than once.

Each part's figure is the best of ``--repeats`` timings of ``--calls`` calls.

    python benchmarks/bam_parts.py           # batch 128, 2 heads, 16 tokens of width 16
    python benchmarks/bam_parts.py --quick   # what the tests run (a second or so)
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from zoo.bayesian_attention.torch_bam import ContextualPrior
from zoo.bayesian_attention.torch_distributions import (
    GammaAttention,
    LogNormalAttention,
    WeibullAttention,
    log_of_draw,
    masked_log_softmax,
)
from zoo.files import write_text


def parts(batch, heads, tokens, head_dim, concentration=10.0, sigma=0.1):
    """name -> a function running that part forward and backward once."""
    shape = (batch, heads, tokens, tokens)
    logits = torch.randn(shape, requires_grad=True)
    # Keys as the transformer splits them into heads: a transposed view of (batch, tokens, width).
    keys = torch.randn(batch, tokens, heads * head_dim, requires_grad=True)
    prior_net = ContextualPrior(head_dim)

    def split_keys():
        return keys.reshape(batch, tokens, heads, head_dim).transpose(1, 2)

    def softmax_weights():
        masked_log_softmax(logits).exp().sum().backward()

    def weibull_weights():
        s = WeibullAttention(logits, concentration).rsample()
        torch.softmax(log_of_draw(s), -1).sum().backward()

    def lognormal_weights():
        q = LogNormalAttention(masked_log_softmax(logits), sigma, shape)
        torch.softmax(log_of_draw(q.rsample()), -1).sum().backward()

    def prior_network():
        prior_net.scores(split_keys()).sum().backward()

    scores = torch.randn(batch, heads, 1, tokens, requires_grad=True)

    def gamma_kl():
        alpha = torch.log_softmax(scores, -1).exp()
        q, p = WeibullAttention(logits, concentration), GammaAttention(alpha, 1.0, shape)
        torch.distributions.kl_divergence(q, p).sum().backward()

    def lognormal_kl():
        q = LogNormalAttention(masked_log_softmax(logits), sigma, shape)
        p = LogNormalAttention(torch.log_softmax(scores, -1), 1.0, shape)
        torch.distributions.kl_divergence(q, p).sum().backward()

    return {
        "softmax weights": softmax_weights,
        "uniform draw": lambda: torch.rand(shape),
        "normal draw": lambda: torch.randn(shape),
        "Weibull weights": weibull_weights,
        "log-normal weights": lognormal_weights,
        "contextual prior network": prior_network,
        "Gamma prior KL": gamma_kl,
        "log-normal prior KL": lognormal_kl,
    }


def time_part(fn, calls, repeats):
    """Best over ``repeats`` of the mean microseconds per call of ``calls`` calls."""
    for _ in range(max(1, calls // 10)):  # warm-up: allocator, first-call dispatch
        fn()
    best = float("inf")
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        best = min(best, (time.perf_counter() - start) / calls)
    return 1e6 * best


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--quick", action="store_true", help="20 calls, 2 repeats")
    p.add_argument("--batch-size", type=int, default=128)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--tokens", type=int, default=16)
    p.add_argument("--head-dim", type=int, default=16)
    p.add_argument("--calls", type=int, default=300)
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="also write the results to this file")
    args = p.parse_args(argv)
    if args.quick:
        args.calls, args.repeats = 20, 2
    torch.manual_seed(args.seed)
    table = {
        name: time_part(fn, args.calls, args.repeats)
        for name, fn in parts(args.batch_size, args.heads, args.tokens, args.head_dim).items()
    }
    print(
        f"batch={args.batch_size} heads={args.heads} tokens={args.tokens} "
        f"head_dim={args.head_dim} threads={torch.get_num_threads()} calls={args.calls} "
        f"repeats={args.repeats}"
    )
    print("| part (forward and backward) | us per call |\n|---|---|")
    for name, us in table.items():
        print(f"| {name} | {us:.0f} |")
    if args.json:
        write_text(args.json, json.dumps({"settings": vars(args), "us_per_call": table}, indent=2))
    return table


if __name__ == "__main__":
    main()
