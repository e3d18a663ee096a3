"""The NumPyro (JAX) adapter: devices, arrays, keys and the jitted SVI engine, for ``inference``.

JAX's 64-bit switch is process-wide, so it is turned on once here; each fit then casts its data
and config to the dtype it asks for (float64 for closed-form updates, float64 by default for SVI on the mixtures).
"""

from __future__ import annotations

import functools

import jax
import numpy as np

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402
import numpyro  # noqa: E402
from numpyro.infer import SVI, Trace_ELBO  # noqa: E402

from inference import learning_rate  # noqa: E402
from inference.backends import tree_codec  # noqa: E402
from inference.backends.sites import data_plate_log_prob  # noqa: E402
from zoo import devices  # noqa: E402
from zoo.array_namespace import JaxOps, convert_config  # noqa: E402

NAME = "numpyro"
ops = JaxOps()


def available_devices() -> list[str]:
    return devices.available(NAME)


def resolve_device(device: str = "cpu"):
    """``"cpu"``, ``"cuda"``/``"gpu"`` or ``"cuda:N"``, among the devices JAX has in this process."""
    return devices.resolve(NAME, device)


def asarray(value, device, dtype: str):
    return devices.asarray(NAME, value, device, dtype)


def to_numpy(value) -> np.ndarray:
    return np.asarray(value)


def backend_config(config, device, dtype):
    return convert_config(config, lambda a: asarray(a, device, dtype))


def compile_step(fn):
    return jax.jit(fn)


def make_elbo(name: str, num_particles: int):
    """NumPyro's estimator for ``name`` (``inference.svi.ELBOS`` lists and explains them)."""
    from numpyro.infer import RenyiELBO, TraceMeanField_ELBO

    if name == "enum":
        from numpyro.infer import TraceEnum_ELBO  # needs funsor

        return TraceEnum_ELBO(max_plate_nesting=1, num_particles=num_particles)
    if name == "iwae":  # the importance-weighted bound is Renyi's at alpha = 0
        return RenyiELBO(alpha=0, num_particles=num_particles)
    return {"trace": Trace_ELBO, "meanfield": TraceMeanField_ELBO}[name](
        num_particles=num_particles
    )


def flatten_params(params: dict) -> dict[str, np.ndarray]:
    """Named numpy arrays; a network's parameter pytree (``encoder$params``, as
    ``numpyro.contrib.module`` names it) becomes ``encoder.fc1.weight``, ... as in Pyro."""
    out = {}
    for name, value in params.items():
        if isinstance(value, jax.Array | np.ndarray):
            out[name] = np.asarray(value)
            continue
        prefix = name.split("$")[0]
        for path, leaf in jax.tree_util.tree_leaves_with_path(value):
            out[prefix + "." + jax.tree_util.keystr(path, simple=True, separator=".")] = np.asarray(
                leaf
            )
    return out


def data_parallel_shardings(num_rows: int):
    """(data sharding, replicated sharding) over every device of ``jax.devices()``: rows split
    along a one-axis mesh ``"data"``, everything else copied to each device."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    devices = jax.devices()
    if num_rows % len(devices):
        raise ValueError(
            f"data_parallel=True splits the rows of each step over the {len(devices)} devices of "
            f"jax.devices(); {num_rows} rows do not split evenly. Use a batch_size (or data size) "
            f"that is a multiple of {len(devices)}."
        )
    mesh = Mesh(np.array(devices), ("data",))
    return NamedSharding(mesh, PartitionSpec("data")), NamedSharding(mesh, PartitionSpec())


def _place_config(config, sharding):
    """The config's arrays copied to every device of ``sharding``."""
    import dataclasses

    changes = {
        f.name: jax.device_put(getattr(config, f.name), sharding)
        for f in dataclasses.fields(config)
        if isinstance(getattr(config, f.name), jax.Array)
    }
    return dataclasses.replace(config, **changes)


class SVIEngine:
    """``numpyro.infer.SVI`` with a jit-compiled update; the state is a pure pytree.

    ``step(state, temperature, rows)`` returns the next state after a step on ``data``
    restricted to ``rows`` (all rows if None); the rows are gathered inside the compiled update,
    so the data stay on the device. ``step(state, temperature, batch=...)`` trains on a
    minibatch given as backend arrays instead (data that are not held in memory,
    ``inference.streaming``). States are NumPyro's SVI states, pytrees the engine never changes.

    With ``data_parallel=True`` the rows of every step are split over all ``jax.devices()``
    (``jax.sharding``: a one-axis mesh, data sharded on it, state and config replicated); the
    compiled update then computes each device's part of the ELBO and its gradient where its rows
    are, and XLA sums them across devices. Same loss and parameters as one device, to float
    rounding.
    """

    def __init__(
        self,
        model,
        guide,
        data,
        config,
        *,
        elbo,
        lr,
        num_particles,
        seed,
        device,
        init_temperature=None,
        data_parallel=False,
        batch_rows=None,
        jit=True,  # always compiled (jax.jit); the option is Pyro's
    ):
        if elbo == "enum":
            from numpyro.contrib.funsor import config_enumerate

            model = config_enumerate(model)
        self.shardings = None
        if data_parallel:
            rows = batch_rows or len(next(iter(data.values())))
            data_sharding, replicated = data_parallel_shardings(rows)
            self.shardings = data_sharding, replicated
            config = _place_config(config, replicated)
            if batch_rows is None:
                data = jax.device_put(data, data_sharding)
            else:
                data = jax.device_put(data, replicated)  # rows gathered, then split
        self.loss = make_elbo(elbo, num_particles)
        self.model, self.guide, self.data, self.config = model, guide, data, config
        self.elbo_name, self.device = elbo, device
        # Stages run as a function of Adam's update count, which lives in the SVI state.
        step_size = lr.jax_schedule() if isinstance(lr, learning_rate.Stages) else lr
        self.svi = SVI(model, guide, numpyro.optim.Adam(step_size), self.loss)
        state = self.svi.init(jax.random.PRNGKey(seed), data, config, temperature=init_temperature)
        # Commit the initial state to the device: the update's outputs are committed, and an
        # uncommitted input would make the second call compile the update again.
        self._initial = jax.device_put(
            state, device if self.shardings is None else self.shardings[1]
        )

        def update(state, data, rows, temperature):
            if rows is not None:
                data = {k: v[rows] for k, v in data.items()}
                if self.shardings is not None:
                    data = jax.lax.with_sharding_constraint(data, self.shardings[0])
            return self.svi.update(state, data, config, temperature=temperature)

        self._update = jax.jit(update)

    def initial_state(self):
        return self._initial

    def step(self, state, temperature=None, rows=None, batch=None, data=None):
        """One gradient step: ``(next state, ELBO estimate)``; after a non-finite loss the next
        state is ``state``. ``data`` replaces the engine's data for this step (a fresh
        binarization)."""
        data = self.data if data is None else data
        if batch is not None:
            data = batch
            if self.shardings is not None:
                data = jax.device_put(batch, self.shardings[0])
        if rows is not None:
            placement = self.device if self.shardings is None else self.shardings[1]
            rows = jax.device_put(rows, placement)
        new, loss = self._update(state, data, rows, temperature)
        loss = float(loss)
        return (new if np.isfinite(loss) else state), -loss

    def params(self, state) -> dict[str, np.ndarray]:
        return flatten_params(self.svi.get_params(state))

    def elbo(self, state, num_particles: int, seed: int, temperature=None) -> float:
        loss = make_elbo(self.elbo_name, num_particles)
        params = self.svi.get_params(state)
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

    def state_dict(self, state) -> tuple[dict, dict]:
        leaves = jax.tree_util.tree_leaves(state)
        arrays: dict = {}
        return {"leaves": tree_codec.encode(list(leaves), np.asarray, arrays, "state")}, arrays

    def load_state_dict(self, state, skeleton, arrays):
        leaves, treedef = jax.tree_util.tree_flatten(state)
        saved = tree_codec.decode(skeleton["leaves"], arrays, jnp.asarray)
        if len(saved) != len(leaves) or any(
            a.shape != b.shape for a, b in zip(saved, leaves, strict=True)
        ):
            raise ValueError("Checkpoint SVI state does not match this model and guide.")
        placement = self.device if self.shardings is None else self.shardings[1]
        return jax.device_put(jax.tree_util.tree_unflatten(treedef, saved), placement)


def as_params(params: dict, device, dtype: str) -> dict:
    """Named numpy parameter arrays on the device (floats in ``dtype``)."""
    return {
        k: asarray(v, device, dtype) if np.asarray(v).dtype.kind == "f" else jnp.asarray(v)
        for k, v in params.items()
    }


def log_importance_weights_fn(model_and_guide, config, device):
    """A compiled ``(data, params, seed, num_particles) -> (num_particles, N)`` function of
    ``log p(x_n, z_n) - log q(z_n | x_n)`` with ``z_n ~ q`` (particles by ``vmap``).

    ``model_and_guide(params)`` builds the pair from named parameter arrays (``as_params``); the
    arrays are arguments of the compiled function, so new parameters do not recompile it.
    """
    from numpyro import handlers

    def one(key, data, params):
        model, guide = model_and_guide(params)
        guide_key, model_key = jax.random.split(key)
        guide_trace = handlers.trace(handlers.seed(guide, guide_key)).get_trace(data, config)
        model_trace = handlers.trace(
            handlers.replay(handlers.seed(model, model_key), guide_trace)
        ).get_trace(data, config)
        return data_plate_log_prob(model_trace.values()) - data_plate_log_prob(guide_trace.values())

    @functools.partial(jax.jit, static_argnums=3)
    def weights(data, params, key, num_particles):
        keys = jax.random.split(key, num_particles)
        return jax.vmap(one, in_axes=(0, None, None))(keys, data, params)

    def run(data, params, seed: int, num_particles: int) -> np.ndarray:
        return np.asarray(weights(data, params, jax.random.PRNGKey(seed), num_particles))

    return run
