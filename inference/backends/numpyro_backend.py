"""The NumPyro (JAX) adapter: devices, arrays, keys and the jitted SVI engine, for ``inference``.

JAX's 64-bit switch is process-wide, so it is turned on once here; each fit then casts its data
and config to the dtype it asks for (float64 for closed-form updates, float64 by default for SVI on the mixtures).
"""

from __future__ import annotations

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpyro  # noqa: E402
from numpyro.infer import SVI, Trace_ELBO  # noqa: E402

from inference.backends import tree_codec  # noqa: E402
from inference.backends.common import check_dtype, convert_config  # noqa: E402
from inference.backends.ops import JaxOps  # noqa: E402

NAME = "numpyro"
ops = JaxOps()


def available_devices() -> list[str]:
    return [f"{d.platform}:{d.id}" for d in jax.devices()] + ["cpu"]


def resolve_device(device: str = "cpu"):
    """``"cpu"``, ``"cuda"``/``"gpu"`` or ``"cuda:N"``, among the devices JAX has in this process."""
    name, _, index = str(device).partition(":")
    platform = {"cuda": "gpu", "gpu": "gpu", "cpu": "cpu"}.get(name)
    try:
        devices = jax.devices(platform) if platform else []
    except RuntimeError:
        devices = []
    i = int(index) if index.isdigit() else 0
    if not devices or i >= len(devices):
        raise ValueError(f"Device {device!r} is not available; available: {available_devices()}.")
    return devices[i]


def asarray(value, device, dtype: str):
    return jax.device_put(jnp.asarray(np.asarray(value), dtype=check_dtype(dtype)), device)


def to_numpy(value) -> np.ndarray:
    return np.asarray(value)


def backend_config(config, device, dtype):
    return convert_config(config, lambda a: asarray(a, device, dtype))


def compile_step(fn):
    return jax.jit(fn)


def _elbo_class(enumerate):
    if enumerate:
        from numpyro.infer import TraceEnum_ELBO  # needs funsor

        return TraceEnum_ELBO
    return Trace_ELBO


class SVIEngine:
    """``numpyro.infer.SVI`` with a jit-compiled update; the state is a pure pytree."""

    def __init__(
        self,
        model,
        guide,
        data,
        config,
        *,
        enumerate,
        lr,
        num_particles,
        seed,
        device,
        init_temperature=None,
    ):
        if enumerate:
            from numpyro.contrib.funsor import config_enumerate

            model = config_enumerate(model)
        elbo_class = _elbo_class(enumerate)
        self.loss = elbo_class(
            num_particles=num_particles, **({"max_plate_nesting": 1} if enumerate else {})
        )
        self.model, self.guide, self.data, self.config = model, guide, data, config
        self.elbo_class, self.enumerate, self.device = elbo_class, enumerate, device
        self.svi = SVI(model, guide, numpyro.optim.Adam(lr), self.loss)
        self.state = self.svi.init(
            jax.random.PRNGKey(seed), data, config, temperature=init_temperature
        )
        # Commit the initial state to the device: the update's outputs are committed, and an
        # uncommitted input would make the second call compile the update again.
        self.state = jax.device_put(self.state, device)
        self._update = jax.jit(lambda st, d, t: self.svi.update(st, d, config, temperature=t))

    def step(self, temperature=None) -> float:
        """One gradient step; a non-finite loss leaves the state as it was."""
        state, loss = self._update(self.state, self.data, temperature)
        loss = float(loss)
        if np.isfinite(loss):
            self.state = state
        return -loss

    def params(self) -> dict[str, np.ndarray]:
        return {k: np.asarray(v) for k, v in self.svi.get_params(self.state).items()}

    def elbo(self, num_particles: int, seed: int, temperature=None) -> float:
        loss = self.elbo_class(
            num_particles=num_particles, **({"max_plate_nesting": 1} if self.enumerate else {})
        )
        params = self.svi.get_params(self.state)
        value = loss.loss(
            jax.random.PRNGKey(seed),
            params,
            self.model,
            self.guide,
            self.data,
            self.config,
            temperature=temperature,
        )
        return -float(value)

    def state_dict(self) -> tuple[dict, dict]:
        leaves = jax.tree_util.tree_leaves(self.state)
        arrays: dict = {}
        return {"leaves": tree_codec.encode(list(leaves), np.asarray, arrays, "svi")}, arrays

    def load_state_dict(self, skeleton, arrays) -> None:
        leaves, treedef = jax.tree_util.tree_flatten(self.state)
        saved = tree_codec.decode(skeleton["leaves"], arrays, jnp.asarray)
        if len(saved) != len(leaves) or any(
            a.shape != b.shape for a, b in zip(saved, leaves, strict=True)
        ):
            raise ValueError("Checkpoint SVI state does not match this model and guide.")
        self.state = jax.device_put(jax.tree_util.tree_unflatten(treedef, saved), self.device)
