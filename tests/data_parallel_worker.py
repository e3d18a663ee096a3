"""One process of a data-parallel Pyro fit, launched by tests/test_data_parallel.py through
``torchrun --standalone --nproc_per_node=2`` (not a test module itself).

Fits the Bayesian GMM by full-batch SVI with ``data_parallel=True``; the first process writes the
history and parameters to ``--out``. ``--die-at STEP`` makes the last process exit abruptly after
that step, as a crashed worker would.
"""

from __future__ import annotations

import argparse
import faulthandler
import os

import numpy as np
import torch

import inference
import zoo


def main():
    faulthandler.enable()  # a process that aborts says where
    parser = argparse.ArgumentParser()
    parser.add_argument("--out", required=True)
    parser.add_argument("--num-steps", type=int, default=20)
    parser.add_argument("--checkpoint")
    parser.add_argument("--resume", action="store_true")
    parser.add_argument("--die-at", type=int)
    args = parser.parse_args()
    x = zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(0), 200)["x"]
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])

    def die(step, state, info):
        if step == args.die_at and rank == world - 1:
            os._exit(3)

    res = inference.fit(
        "bayesian_gmm",
        {"x": x},
        "svi",
        "pyro",
        guide="enum",
        K=3,
        num_steps=args.num_steps,
        seed=0,
        progress=False,
        data_parallel=True,
        checkpoint=args.checkpoint,
        checkpoint_every=5 if args.checkpoint else None,
        resume=args.resume,
        callback=die if args.die_at else None,
    )
    if rank == 0:
        arrays = {f"raw/{k}": v for k, v in res.raw_params.items()}
        np.savez(args.out, objective=res.history["objective"], **arrays)
    # Every process ends the group together, once rank 0 has written: a group left to the
    # interpreter's exit, or torn down while a peer still works, has aborted a process here.
    torch.distributed.barrier()
    torch.distributed.destroy_process_group()


if __name__ == "__main__":
    main()
