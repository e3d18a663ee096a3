"""Pyro's own NUTS kernel, run a chunk of iterations at a time (``inference.algorithms.nuts``).

``pyro.infer.NUTS`` does the sampling and the warm-up adaptation; this engine drives its
``setup`` and ``sample`` the way ``pyro.infer.MCMC`` does for one chain, one chain after
another, so the loop around it can show progress between chunks. Each chain draws from a torch
random stream of its own (seeded from the run's seed and the chain's index, and kept between
chunks), so its draws do not depend on how the run was cut into chunks, and the caller's global
torch random state is left as it was.

A Pyro kernel keeps its adaptation state (step-size dual averaging, the mass matrix's running
estimates, its caches) in Python attributes that Pyro does not expose for saving, so a Pyro
sampling run cannot be checkpointed and resumed exactly; ``inference.algorithms.nuts`` says so up front.
"""

from __future__ import annotations

import contextlib

import numpy as np
import torch
from pyro.infer import NUTS, config_enumerate
from pyro.infer.autoguide.initialization import init_to_uniform, init_to_value

from inference.algorithms.sampler_device import count_values, warn_if_cpu_faster


class _CountingNUTS(NUTS):
    """Pyro's NUTS, recording what each iteration did for the run's sample statistics: the
    number of leapfrog steps (Pyro builds one base tree per step), the acceptance probability
    (recovered from Pyro's running mean of it) and the Hamiltonian (potential plus kinetic
    energy) of the draw, as NumPyro's ``energy``."""

    def _sample_r(self, name):
        r, r_unscaled = super()._sample_r(name)
        # Where the trajectory starts: the draw's Hamiltonian if no leaf is accepted. Pyro's
        # sample computes this value too (energy_current) but keeps it to itself.
        self.energy = self._potential_energy_last + self._kinetic_energy(r_unscaled)
        return r, r_unscaled

    def _build_basetree(self, *args, **kwargs):
        self.leapfrog_steps += 1
        leaf = super()._build_basetree(*args, **kwargs)
        # Pyro's tree hands on the chosen leaf's position but not its momentum: keep each
        # leaf's Hamiltonian with its position, found again by identity once one is chosen.
        kinetic = self._kinetic_energy(leaf.r_right_unscaled)  # at the mass matrix of the step
        self._leaves.append((leaf.z_proposal, leaf.z_proposal_pe + kinetic))
        return leaf

    def sample(self, params):
        self.leapfrog_steps, self._leaves = 0, []
        self.energy = float("nan")  # no latent sites: no trajectory
        n = self._t + 1 - (self._warmup_steps if self._t >= self._warmup_steps else 0)
        before = self._mean_accept_prob
        params = super().sample(params)
        # Pyro updates mean <- mean + (p - mean) / n, restarting n after the warm-up.
        self.accept_prob = before + (self._mean_accept_prob - before) * n
        # Pyro caches the position it moved to, the very object its chosen leaf made.
        for position, energy in self._leaves:
            if position is self._z_last:
                self.energy = energy
        self._leaves = []
        return params


class NUTSEngine:
    """Chains of ``pyro.infer.NUTS`` on ``model(data, config)``, discrete sites enumerated."""

    #: Why a run cannot be checkpointed (see the module).
    UNSAVEABLE = (
        "A Pyro NUTS run cannot be checkpointed: Pyro keeps its kernel's adaptation state in "
        "attributes it does not expose for saving, so a resumed run would not continue the "
        "uninterrupted one exactly. Sample with backend='numpyro' to checkpoint, or run "
        "without checkpoint=."
    )

    def __init__(self, model, data, config, *, init_sites, options, seed, device, dtype):
        # dtype is not needed: the torch model computes in the dtype of the tensors it is given.
        del dtype
        self.model = config_enumerate(lambda: model(data, config))
        self.init_sites = init_sites
        self.options, self.seed, self.device = options, seed, device
        self.data_size = count_values(data)
        self.latent_dim = None  # unconstrained latent values, known once the chains start

    def _kernel(self):
        init = init_to_uniform if self.init_sites is None else init_to_value(values=self.init_sites)
        return _CountingNUTS(
            self.model,
            target_accept_prob=self.options.target_accept_prob,
            max_tree_depth=self.options.max_tree_depth,
            full_mass=self.options.dense_mass,
            init_strategy=init,
        )

    @contextlib.contextmanager
    def _random_stream(self, chain):
        """Run with the chain's own torch random state; the caller's is restored after."""
        devices = [self.device] if self.device.type == "cuda" else []
        with torch.random.fork_rng(devices=devices):
            torch.set_rng_state(chain["rng"])
            if devices:
                torch.cuda.set_rng_state(chain["cuda_rng"], self.device)
            yield
            chain["rng"] = torch.get_rng_state()
            if devices:
                chain["cuda_rng"] = torch.cuda.get_rng_state(self.device)

    def init(self):
        chains = []
        for index in range(self.options.num_chains):
            # Within torch's seeds (below 2**64) whatever the seed: the same as before for seeds
            # up to 1.8e13, where a larger one overflowed.
            chain_seed = (self.seed * 1_000_003 + index) % 2**64
            generator = torch.Generator().manual_seed(chain_seed)
            chain = {"kernel": self._kernel(), "rng": generator.get_state()}
            if self.device.type == "cuda":
                cuda = torch.Generator(self.device).manual_seed(chain_seed)
                chain["cuda_rng"] = cuda.get_state()
            with self._random_stream(chain):
                chain["kernel"].setup(self.options.num_warmup)
                chain["params"] = chain["kernel"].initial_params
            chains.append(chain)
        self.latent_dim = sum(int(value.numel()) for value in chains[0]["params"].values())
        warn_if_cpu_faster(self.latent_dim, self.data_size, self.device.type, "pyro")
        return chains

    def _iteration(self, kernel, params):
        divergences = len(kernel._divergences)
        params = kernel.sample(params)
        sites = {
            name: kernel.transforms[name].inv(value).detach()
            if name in kernel.transforms
            else value.detach()
            for name, value in params.items()
        }
        stats = {
            "diverging": len(kernel._divergences) > divergences,
            "acceptance_rate": float(kernel.accept_prob),
            "step_size": float(kernel.step_size),
            "n_steps": kernel.leapfrog_steps,
            "lp": -float(kernel._potential_energy_last),
            "energy": float(kernel.energy),
        }
        return params, sites, stats

    def run(self, chains, length: int):
        """``length`` iterations of every chain: ``(chains, sites, stats)``, the records as
        numpy arrays of shape (chains, length, ...). The kernels advance in place."""
        all_sites, all_stats = [], []
        for chain in chains:
            records = []
            with self._random_stream(chain):
                for _ in range(length):
                    chain["params"], sites, stats = self._iteration(
                        chain["kernel"], chain["params"]
                    )
                    records.append((sites, stats))
            all_sites.append(
                {k: np.stack([s[k].cpu().numpy() for s, _ in records]) for k in records[0][0]}
            )
            all_stats.append({k: np.asarray([t[k] for _, t in records]) for k in records[0][1]})
        stack = lambda rows: {k: np.stack([r[k] for r in rows]) for k in rows[0]}  # noqa: E731
        return chains, stack(all_sites), stack(all_stats)
