"""NumPyro's own NUTS kernel, run a chunk of iterations at a time (``inference.algorithms.nuts``).

``numpyro.infer.NUTS`` does the sampling and the warm-up adaptation; this engine only drives its
``init`` and ``sample`` the way ``numpyro.infer.MCMC`` does, but in chunks: each chunk is one
compiled ``fori_loop`` of ``kernel.sample`` that records every iteration, so the loop around it
can show progress and write checkpoints between chunks. The chunk's length is an argument of the
compiled function, so every chunk (the last one shorter) runs the same compilation.

A float32 run traces the kernel with JAX's 64-bit mode off (``traced_in_precision``, as float32
SVI fits do): NumPyro makes its momenta, step sizes and mass matrices without a dtype, float64
with the mode on, and mixing them with float32 positions fails to compile.

Kernel states are NumPyro's ``HMCState`` pytrees, one per chain (``chain_method="sequential"``,
chains run one after another, as ``MCMC`` runs them on one device) or one with a leading chain
axis (``"vectorized"``, chains advanced together under ``vmap``). A state holds its own random
key, so a run resumed from a saved state draws what the uninterrupted run draws.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
from numpyro.contrib.funsor import config_enumerate
from numpyro.infer import NUTS, init_to_uniform, init_to_value

from inference.algorithms.sampler_device import count_values, warn_if_cpu_faster
from inference.backends.numpyro_backend import traced_in_precision

#: What each iteration records besides the draws: ArviZ's names for NUTS's statistics.
STATS = ("diverging", "acceptance_rate", "step_size", "n_steps", "lp", "energy")


def check_start(states) -> None:
    """Raise NumPyro's error for chains that start where the log density or its gradient is not
    finite (``states``: one ``HMCState`` or a list of them)."""
    values = [
        jnp.all(jnp.isfinite(v))
        for state in (states if isinstance(states, list) else [states])
        for v in (state.potential_energy, *jax.tree.leaves(state.z_grad))
    ]
    # One read on the host for every chain and leaf: on a GPU each read waits for the device.
    if not bool(jnp.all(jnp.stack(values))):
        raise RuntimeError(
            "Cannot find valid initial parameters: the log density or its gradient is not "
            "finite where the chains start. Please check your model again."
        )


class NUTSEngine:
    """Chains of ``numpyro.infer.NUTS`` on ``model(data, config)``, discrete sites enumerated."""

    UNSAVEABLE = None  # its kernel states are array pytrees: checkpoints resume exactly

    def __init__(self, model, data, config, *, init_sites, options, seed, device, dtype):
        # Discrete latent sites (a mixture's z) are summed out in the potential energy.
        bound = config_enumerate(functools.partial(model, data, config))
        init = init_to_uniform if init_sites is None else init_to_value(values=init_sites)
        self.options, self.device, self.seed, self.dtype = options, device, seed, dtype
        self.vectorized = options.chain_method == "vectorized"
        self.data_size = count_values(data)
        self.latent_dim = None  # unconstrained latent values, known once the chains start
        self.kernel = NUTS(
            bound,
            target_accept_prob=options.target_accept_prob,
            max_tree_depth=options.max_tree_depth,
            dense_mass=options.dense_mass,
            init_strategy=init,
        )
        self._chunk = None

    def init(self):
        """The chains' states before the first iteration."""
        keys = jax.random.split(jax.random.PRNGKey(self.seed), self.options.num_chains)
        keys = jax.device_put(keys, self.device)
        num_warmup = self.options.num_warmup
        # NumPyro's init compiled as one function: run as it is, it evaluates the model and
        # its gradient one operation at a time, each compiled on its own (hundreds of small
        # compilations, most of a small fit's time). Traced, it skips NumPyro's own check
        # that the start is valid, which check_start makes instead.
        start = jax.jit(
            traced_in_precision(
                lambda key: self.kernel.init(key, num_warmup, model_args=(), model_kwargs={}),
                self.dtype,
            )
        )
        states = start(keys) if self.vectorized else [start(k) for k in keys]
        check_start(states)
        self._chunk = jax.jit(traced_in_precision(self._make_chunk(), self.dtype))
        one = states if self.vectorized else states[0]
        self.latent_dim = sum(int(np.size(leaf)) for leaf in jax.tree.leaves(one.z))
        if self.vectorized:
            self.latent_dim //= self.options.num_chains
        warn_if_cpu_faster(self.latent_dim, self.data_size, self.device.platform, "numpyro")
        # Committed to the device as the chunk's outputs are: an uncommitted first input would
        # make the second chunk compile again.
        return jax.device_put(states, self.device)

    def _make_chunk(self):
        kernel, size = self.kernel, self.options.chunk_size
        constrain = kernel.postprocess_fn((), {})
        if self.vectorized:
            constrain = jax.vmap(constrain)

        def record(state):
            return constrain(state.z), {
                "diverging": state.diverging,
                "acceptance_rate": state.accept_prob,
                "step_size": state.adapt_state.step_size,
                "n_steps": state.num_steps,
                "lp": -state.potential_energy,
                "energy": state.energy,
            }

        def chunk(state, length):
            """``length`` (<= chunk_size) iterations from ``state``: (state, records)."""
            shapes = jax.eval_shape(record, state)
            buffers = jax.tree.map(lambda s: jnp.zeros((size, *s.shape), s.dtype), shapes)

            def body(i, carry):
                state, buffers = carry
                state = kernel.sample(state, (), {})
                buffers = jax.tree.map(lambda b, r: b.at[i].set(r), buffers, record(state))
                return state, buffers

            # JAX's default integer inside the trace: a float32 run traces with 32-bit integers
            # (64-bit mode off) but is handed its length as a 64-bit one.
            length = jnp.asarray(length, dtype=int)
            return jax.lax.fori_loop(0, length, body, (state, buffers))

        return chunk

    def run(self, states, length: int):
        """``length`` iterations of every chain: ``(states, sites, stats)``, the records as
        numpy arrays of shape (chains, length, ...)."""
        if self.vectorized:
            states, (sites, stats) = self._chunk(states, length)
            # Contiguous, as the records read back from a checkpoint are: a sum over a view
            # of swapped axes adds in another order, and a resumed run's means would differ
            # from the uninterrupted run's in the last bit.
            records = jax.tree.map(
                lambda a: np.ascontiguousarray(np.swapaxes(np.asarray(a)[:length], 0, 1)),
                (sites, stats),
            )
        else:
            out = [self._chunk(state, length) for state in states]
            states = [state for state, _ in out]
            records = jax.tree.map(
                lambda *a: np.stack([np.asarray(x)[:length] for x in a]), *[r for _, r in out]
            )
        sites, stats = records
        return states, sites, stats
