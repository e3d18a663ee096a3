"""The NumPyro (JAX) adapter: devices, arrays, keys and the jitted SVI engine, for ``inference``.

JAX's 64-bit switch is process-wide, so it is turned on once here; each fit then casts its data
and config to the dtype it asks for (float64 for closed-form updates, float64 by default for SVI on the mixtures).

JAX's persistent compilation cache is turned on here too (``jax_cache``), so that a new process
fitting the same shapes loads its compiled functions instead of compiling them.
"""

from __future__ import annotations

import functools
import time

import jax
import numpy as np

from inference.backends import jax_cache

jax.config.update("jax_enable_x64", True)

jax_cache.enable_persistent_cache()

import jax.numpy as jnp  # noqa: E402
import numpyro  # noqa: E402
from numpyro.infer import SVI, Trace_ELBO  # noqa: E402

import zoo  # noqa: E402
from inference import learning_rate  # noqa: E402
from inference.backends import exported  # noqa: E402
from inference.backends.numpyro_adam import StagedAdam  # noqa: E402
from inference.backends.sites import data_plate_log_prob  # noqa: E402
from inference.backends.svi_setup import SVISetup, start_outside_support  # noqa: E402
from zoo import devices  # noqa: E402
from zoo.array_namespace import JaxOps, convert_config  # noqa: E402
from zoo.weights import flatten_params  # noqa: E402

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


def compile_step(fn, config=None, key=None, jit: bool = True):
    """``fn`` compiled by ``jax.jit``, whatever ``jit`` says (a closed-form fit's ``jit`` option
    asks Pyro's backend to compile). With ``config``, ``fn(config, *args)``: the config's arrays
    are arguments of the compilation, which is kept by ``key`` and the config's structure, so
    that a later fit with the same structure and other prior values (from other data) reuses it.
    ``key`` names ``fn``: ``(module, functions of it that fn runs)``, which an error says when
    JAX cannot compile them."""
    if config is None:
        return jax.jit(fn)
    kept = (key, _config_key(config))
    if kept not in _COMPILED_STEPS:
        _COMPILED_STEPS[kept] = jax.jit(
            lambda arrays, *args: fn(_with_arrays(config, arrays), *args)
        )
    compiled, arrays = _COMPILED_STEPS[kept], _config_arrays(config)

    def step(*args):
        try:
            return compiled(arrays, *args)
        except _NOT_TRACEABLE as error:
            raise TypeError(_not_traceable_message(key, error)) from error

    return step


#: The closed-form algorithms' compiled functions (``compile_step``), by key and config structure.
_COMPILED_STEPS: dict = {}

#: What JAX raises when a function it traces reads an array's value in Python.
_NOT_TRACEABLE = (
    jax.errors.ConcretizationTypeError,  # bool(), float(), ``if`` on an array
    jax.errors.TracerArrayConversionError,  # numpy on an array
    jax.errors.TracerIntegerConversionError,  # int(), an array as an index
    jax.errors.NonConcreteBooleanIndexError,  # x[mask]: a shape that depends on values
)


def _not_traceable_message(key, error) -> str:
    """What to change when a function ``compile_step`` compiles reads an array's value."""
    where = " of ".join(reversed(key)) if isinstance(key, tuple) else str(key)
    first = (str(error).strip().splitlines() or [""])[0]
    return (
        f"JAX could not compile {where} ({type(error).__name__}: {first}). The NumPyro "
        "backend compiles a model's closed-form updates with jax.jit, so they must be pure "
        "functions of their arrays: no Python if, float(), int() or numpy call on an array's "
        "value, and no boolean-mask indexing; use xp's functions instead (see "
        "section 6, closed-form updates, of docs/extending.md). The Pyro backend runs them "
        "eagerly."
    )


def runs_ahead(device) -> bool:
    """Whether work queued on ``device`` runs while the host goes on (a GPU), so that the host
    can queue the next step before it reads this one's result."""
    return device.platform != "cpu"


def start_read(value):
    """A function that returns the scalar ``value`` as a Python float; its copy to the host
    starts now, and reading waits for ``value`` alone, not for work queued after this call."""
    value.copy_to_host_async()
    return lambda: float(value)


def make_elbo(name: str, num_particles: int):
    """NumPyro's estimator for ``name`` (``inference.algorithms.svi.ELBOS`` lists and explains them)."""
    from numpyro.infer import TraceMeanField_ELBO

    from inference.backends.numpyro_importance import ImportanceWeightedELBO

    if name == "enum":
        from numpyro.infer import TraceEnum_ELBO  # needs funsor

        return TraceEnum_ELBO(max_plate_nesting=1, num_particles=num_particles)
    if name == "iwae":  # Renyi's bound at alpha = 0, taken row by row
        return ImportanceWeightedELBO(num_particles)
    return {"trace": Trace_ELBO, "meanfield": TraceMeanField_ELBO}[name](
        num_particles=num_particles
    )


def data_parallel_shardings(num_rows: int):
    """(data sharding, replicated sharding) over every device of ``jax.devices()``: rows split
    along a one-axis mesh ``"data"``, everything else copied to each device.

    Several host CPU devices need a thread pool larger than the device count
    (``zoo.devices.THREADS_PER_HOST_DEVICE``); a process whose JAX started with one that small
    is an error here, before anything runs, rather than a step that never ends."""
    from jax.sharding import Mesh, NamedSharding, PartitionSpec

    mesh_devices = jax.devices()
    count = len(mesh_devices)
    if num_rows % count:
        raise ValueError(
            f"data_parallel=True splits the rows of each step over the {count} devices of "
            f"jax.devices(); {num_rows} rows do not split evenly. Use a batch_size (or data size) "
            f"that is a multiple of {count}."
        )
    if _host_devices(mesh_devices) and devices.host_thread_pool_size(count) <= count:
        raise RuntimeError(
            f"data_parallel=True over {count} host CPU devices would deadlock: JAX started with "
            f"{devices.host_thread_pool_size(count)} threads in XLA's CPU pool, one per device, "
            f"and a step holds them all waiting (collectives, and jaxlib "
            f"{jax.lib.__version__}'s batched linear algebra, which waits for work it hands to "
            f"the same pool). Set PJRT_NPROC={devices.host_threads_needed(count)} in the environment "
            f"before JAX starts (or import inference or zoo before the first use of JAX, which "
            f"sets it when unset), or use fewer devices."
        )
    mesh = Mesh(np.array(mesh_devices), ("data",))
    return NamedSharding(mesh, PartitionSpec("data")), NamedSharding(mesh, PartitionSpec())


def _host_devices(mesh_devices) -> bool:
    return len(mesh_devices) > 1 and all(d.platform == "cpu" for d in mesh_devices)


class DeviceStallError(RuntimeError):
    """A data-parallel step over host CPU devices stopped making progress: XLA's CPU threads
    are deadlocked."""


# A data-parallel step over host devices whose process has used less than 1% of a CPU for this
# many seconds while waiting for it has stalled (a running step keeps at least one thread busy).
# Shorter than the 40 s after which XLA aborts the process when a collective still waits.
STALL_SECONDS = 20.0
_wedged_clients: list = []


def wait_for_step(value, stall_seconds: float | None = None):
    """``value`` (a JAX array) once computed; a ``DeviceStallError`` instead if the process uses
    almost no CPU time for ``stall_seconds`` (default ``STALL_SECONDS``) while waiting for it.

    Polls ``value.is_ready()`` at intervals of a twentieth of the time waited so far (0.1 ms to
    0.1 s), so a step ends at most 5% later than it would. (A thread blocked on the value would
    abort the process at exit when the step never ends.)"""
    if value.is_ready():
        return value
    window = STALL_SECONDS if stall_seconds is None else stall_seconds
    start = since = last = time.monotonic()
    cpu_since = time.process_time()
    while not value.is_ready():
        time.sleep(min(max((last - start) / 20, 1e-4), 0.1))
        now = time.monotonic()
        if now - last > 10.0:  # the process was stopped, not waiting: start over
            since, cpu_since = now, time.process_time()
        last = now
        if now - since < window:
            continue
        if time.process_time() - cpu_since >= 0.01 * window:
            since, cpu_since = now, time.process_time()  # busy: the step is running
            continue
        _keep_client(value)
        count = len(value.devices())
        raise DeviceStallError(
            f"A data-parallel step over {count} host CPU devices made no progress for "
            f"{window:.0f} s (the process used almost no CPU time): XLA's CPU threads are "
            f"deadlocked, each waiting for another (XLA's pool has "
            f"{devices.host_thread_pool_size(count)} threads; jaxlib {jax.lib.__version__}). Run it "
            f"again with PJRT_NPROC={devices.host_threads_needed(count)} or more set before "
            f"JAX starts, or with fewer devices. The JAX CPU devices of this process cannot run "
            f"anything more; the last completed step is checkpointed when checkpoint= is given."
        )
    return value


def _keep_client(value) -> None:
    """Never destroy the client of a deadlocked computation: its destructor would wait for the
    blocked threads, and the process could not exit."""
    import ctypes

    for client in {id(d.client): d.client for d in value.devices()}.values():
        if not any(client is c for c in _wedged_clients):
            ctypes.pythonapi.Py_IncRef(ctypes.py_object(client))
            _wedged_clients.append(client)


def _place_config(config, sharding):
    """The config's arrays copied to every device of ``sharding``."""
    import dataclasses

    changes = {
        f.name: jax.device_put(getattr(config, f.name), sharding)
        for f in dataclasses.fields(config)
        if isinstance(getattr(config, f.name), jax.Array)
    }
    return dataclasses.replace(config, **changes)


def _config_arrays(config) -> dict:
    """The config's JAX arrays by field name: arguments of the compiled functions, so a fit with
    other prior values (from other data) reuses the compilation."""
    import dataclasses

    return {
        f.name: getattr(config, f.name)
        for f in dataclasses.fields(config)
        if isinstance(getattr(config, f.name), jax.Array)
    }


def _with_arrays(config, arrays: dict):
    import dataclasses

    return dataclasses.replace(config, **arrays)


def _config_key(config) -> str:
    """The config with each array replaced by its shape and dtype: its static part (``K``,
    string options, float priors) and the form of its arrays."""
    arrays = _config_arrays(config)
    return repr(_with_arrays(config, {k: exported.signature(v)[1] for k, v in arrays.items()}))


class _ParamStarts(numpyro.primitives.Messenger):
    """Gives each ``param`` site the starting value of its name in ``values`` (in the site's own
    dtype), so that the starting values are arguments of a compiled initialisation instead of
    constants of the model and guide that were traced. A network's site (``net$params``, from
    ``numpyro.contrib.module``) takes its weights by their names (``net.layer.weight``, as
    ``flatten_params`` names them). ``baked`` names the sites that kept a value of their own
    though ``values`` had one for them (another shape): a compilation that holds them is good
    for those values only."""

    def __init__(self, values: dict):
        super().__init__()
        self.values, self.baked = values, set()

    def process_message(self, msg):
        if msg["type"] != "param" or msg["value"] is not None:  # None: not substituted
            return
        name = msg["name"]
        if name in self.values:
            self._start_array(msg)
        elif name.endswith("$params") and any(
            k.startswith(name.split("$")[0] + ".") for k in self.values
        ):
            self._start_network(msg)

    def _start_array(self, msg):
        (given,) = msg["args"] or (None,)
        value = self.values[msg["name"]]
        if given is None or callable(given) or jnp.shape(given) != jnp.shape(value):
            self.baked.add(msg["name"])
            return
        msg["args"] = (jnp.asarray(value, dtype=jnp.result_type(given)),)

    def _start_network(self, msg):
        prefix = msg["name"].split("$")[0] + "."
        given = msg["fn"](*msg["args"], **msg["kwargs"])  # the network's weights
        paths, treedef = jax.tree_util.tree_flatten_with_path(given)
        names = [prefix + jax.tree_util.keystr(p, simple=True, separator=".") for p, _ in paths]
        if all(
            n in self.values and jnp.shape(self.values[n]) == jnp.shape(leaf)
            for n, (_, leaf) in zip(names, paths, strict=True)
        ):
            leaves = [
                jnp.asarray(self.values[n], dtype=jnp.result_type(leaf))
                for n, (_, leaf) in zip(names, paths, strict=True)
            ]
            given = jax.tree_util.tree_unflatten(treedef, leaves)
        else:
            self.baked.add(msg["name"])
        msg["value"] = given


def traced_in_precision(fn, dtype: str):
    """``fn``, whose trace computes in ``dtype``: for float32, traced with JAX's 64-bit mode
    off, so that what the model and guide make without a dtype (NumPyro's draws, its identity
    matrices, its Bernoulli's cast of the data) is float32 as their parameters are. The mode is
    on for the process (the closed-form updates and float64 fits need it); a float32 fit's
    compiled functions turn it off inside their trace, and are called like any other."""
    if np.dtype(dtype) != np.float32:
        return fn

    @functools.wraps(fn)
    def traced(*args):
        with jax.enable_x64(False):
            return fn(*args)

    return traced


class _CompiledSVI:
    """One model and guide's SVI with its compiled initialisation, update, parameters and ELBO.

    The SVI state is the flat tuple of the leaves of NumPyro's state, so that every compiled
    function takes and returns plain arrays (and can be kept on disk, ``exported``). The update
    takes the state, the data, the config's arrays, the rows and the temperature as arguments:
    nothing of a fit but its structure is traced into it, so every fit with the same structure
    (``SVIEngine``'s ``compile_key``) reuses it. The initialisation takes the seed's key and
    the starting values too; starting values that are not ``param`` sites of their own name (a
    network's weights) are traced as constants, and the initialisation is then compiled again
    for other values (and never kept on disk).

    With ``persist_key`` (a string naming the structure across processes) each function is a
    :class:`~inference.backends.exported.PersistentFunction`: a new process loads its trace.
    """

    def __init__(
        self,
        model,
        guide,
        loss,
        lr,
        config,
        init_temperature,
        shardings,
        device,
        persist_key,
        dtype,
    ):
        # Stages run as a function of Adam's update count, which lives in the SVI state; Adam
        # starts afresh at each stage and keeps the average of the last stage's iterates.
        staged = isinstance(lr, learning_rate.Stages)
        self.optim = StagedAdam(lr) if staged else numpyro.optim.Adam(lr)
        self.loss = loss
        self.svi = SVI(model, guide, self.optim, loss)
        self.config, self.init_temperature, self.shardings = config, init_temperature, shardings
        self.device, self.persist_key, self.dtype = device, persist_key, dtype
        self.starts_are_arguments = True  # until a trace finds a start it did not replace
        self.kept_own = set()  # the sites of the last init that kept a value of their own
        self.treedef = None  # of NumPyro's SVI state, once an initialisation is traced
        self._inits: dict = {}
        self._init_args = None  # shapes of the last initialisation's arguments
        self._elbos: dict = {}
        self.update = self._function(self._update, "update")
        self.get_params = self._function(self._returned_params, "params")

    def _function(self, fn, name, keep=lambda: True, persist=True):
        key = self.persist_key if persist else None
        return exported.PersistentFunction(
            traced_in_precision(fn, self.dtype), name, key, self.device, keep
        )

    def _unflatten(self, leaves):
        """NumPyro's SVI state from its leaves. A process that loaded the initialisation has
        not traced it: it is traced here, once, for the structure and SVI's transforms."""
        if self.treedef is None:
            init = traced_in_precision(self._init_fn(self.svi, {}), self.dtype)
            jax.eval_shape(init, *self._init_args)
        return jax.tree_util.tree_unflatten(self.treedef, leaves)

    def _returned_params(self, leaves):
        """The constrained parameters a fit returns: with a learning rate in stages, the average
        of the last stage's iterates (``StagedAdam``). SVI's transforms are set by the
        initialisation's trace, which ``_unflatten`` makes."""
        state = self._unflatten(leaves)
        if isinstance(self.optim, StagedAdam):
            return self.svi.constrain_fn(self.optim.get_average(state.optim_state))
        return self.svi.get_params(state)

    def _update(self, leaves, data, arrays, rows, temperature):
        if rows is not None:
            data = {k: v[rows] for k, v in data.items()}
            if self.shardings is not None:
                data = jax.lax.with_sharding_constraint(data, self.shardings[0])
        config = _with_arrays(self.config, arrays)
        new, loss = self.svi.update(self._unflatten(leaves), data, config, temperature=temperature)
        return tuple(jax.tree_util.tree_leaves(new)), loss

    def init(self, key, data, arrays, starts: dict, model, guide) -> tuple:
        """The initial SVI state, from a compiled ``SVI.init``. ``model`` and ``guide`` are this
        fit's own, traced where its starting values are constants of them."""
        fingerprint = None if self.starts_are_arguments else _values_fingerprint(starts)
        if fingerprint not in self._inits:
            svi = self.svi if fingerprint is None else SVI(model, guide, self.optim, self.loss)
            traced = {"starts_replaced": True, "baked": set()}
            compiled = self._function(
                self._init_fn(svi, traced),
                "init",
                keep=lambda: traced["starts_replaced"],
                persist=fingerprint is None,
            )
            self._inits[fingerprint] = compiled, traced
        compiled, traced = self._inits[fingerprint]
        self._init_args = jax.tree_util.tree_map(
            lambda a: jax.ShapeDtypeStruct(np.shape(a), jnp.result_type(a)),
            (key, data, arrays, starts),
        )
        state = compiled(key, data, arrays, starts)
        self.kept_own = traced["baked"]  # read once traced (one kept on disk replaced all)
        if fingerprint is None and not traced["starts_replaced"]:
            # The trace holds these starting values as constants: key it by them.
            self.starts_are_arguments = False
            self._inits[_values_fingerprint(starts)] = self._inits.pop(None)
        return state

    def _init_fn(self, svi, traced: dict):
        """A new function per compilation (JAX reuses the trace of a function object it saw)."""

        def init(key, data, arrays, starts):
            handler = _ParamStarts(starts)
            with handler:
                state = svi.init(
                    key,
                    data,
                    _with_arrays(self.config, arrays),
                    temperature=self.init_temperature,
                )
            traced["starts_replaced"] = not handler.baked
            traced["baked"] = set(handler.baked)
            leaves, self.treedef = jax.tree_util.tree_flatten(state)
            return tuple(leaves)

        return init

    def elbo(self, elbo_name: str, num_particles: int):
        """The compiled ELBO estimate with ``num_particles`` draws: a function of the state's
        leaves, the key, the data, the config's arrays and the temperature."""
        if num_particles not in self._elbos:
            loss = make_elbo(elbo_name, num_particles)

            def value(leaves, key, data, arrays, temperature):
                return loss.loss(
                    key,
                    self.svi.get_params(self._unflatten(leaves)),
                    self.svi.model,
                    self.svi.guide,
                    data,
                    _with_arrays(self.config, arrays),
                    temperature=temperature,
                )

            self._elbos[num_particles] = self._function(value, f"elbo{num_particles}")
        return self._elbos[num_particles]


def _values_fingerprint(values: dict) -> str:
    import hashlib

    digest = hashlib.sha256()
    for name in sorted(values):
        value = np.asarray(values[name])
        digest.update(f"{name}{value.shape}{value.dtype}".encode())
        digest.update(np.ascontiguousarray(value).tobytes())
    return digest.hexdigest()


#: The compiled SVI of every structure fitted in this process (``SVIEngine``'s ``compile_key``).
_COMPILED: dict = {}


def clear_compiled() -> None:
    """Forget the compiled functions of earlier fits (the next fit of each structure compiles)."""
    _COMPILED.clear()
    _COMPILED_STEPS.clear()


def _forget_model(spec) -> None:
    """Forget what was compiled for a model registered or unregistered now: its SVI (kept by
    the model's name) and its closed-form updates (by their module's name). Its code may have
    been edited and reloaded, and the names alone would run the old code."""
    module = spec.updates.module if spec.updates is not None else None
    for key in [k for k in _COMPILED if k[0][0] == spec.name]:
        del _COMPILED[key]
    for key in [k for k in _COMPILED_STEPS if module is not None and k[0][0] == module]:
        del _COMPILED_STEPS[key]


zoo.on_registry_change(_forget_model)


class SVIEngine:
    """``numpyro.infer.SVI`` with a jit-compiled initialisation and update; the state is the
    flat tuple of the leaves of NumPyro's SVI state.

    ``step(state, temperature, rows)`` returns the next state after a step on ``data``
    restricted to ``rows`` (all rows if None); the rows are gathered inside the compiled update,
    so the data stay on the device. ``step(state, temperature, batch=...)`` trains on a
    minibatch given as backend arrays instead (data that are not held in memory,
    ``inference.streaming``). States are tuples of arrays the engine never changes.

    Compile once per structure: with a ``compile_key`` (what the caller's model and guide are:
    the model's and guide's names, say) the compiled functions are kept for the process, under
    that key with everything else that changes the computation (objective, particles, learning
    rate, the config's static fields, shapes and dtypes of the data and config arrays, device,
    data parallelism). A later engine with the same key reuses them: the seed, the starting
    values (``start``, by ``param`` site name), the data and the config's arrays are their
    arguments. This rests on the zoo's contract for twins: the model and guide read the config
    from their argument, and what they close over (``init``) only starts ``param`` sites.
    Without a key every engine compiles its own.

    With ``data_parallel=True`` the rows of every step are split over all ``jax.devices()``
    (``jax.sharding``: a one-axis mesh, data sharded on it, state and config replicated); the
    compiled update then computes each device's part of the ELBO and its gradient where its rows
    are, and XLA sums them across devices. Same loss and parameters as one device, to float
    rounding. On host CPU devices each step is awaited through ``wait_for_step``, so a deadlock
    of XLA's CPU threads is a ``DeviceStallError`` rather than a step that never returns.
    """

    def __init__(self, model, guide, data, config, setup: SVISetup):
        elbo, lr, device, batch_rows = setup.elbo, setup.lr, setup.device, setup.batch_rows
        start, init_temperature = setup.start or {}, setup.init_temperature
        if elbo == "enum":
            from numpyro.contrib.funsor import config_enumerate

            model = config_enumerate(model)
        self.shardings = None
        self._watch = False  # wait for each step through wait_for_step
        if setup.data_parallel:
            rows = batch_rows or len(next(iter(data.values())))
            data_sharding, replicated = data_parallel_shardings(rows)
            self.shardings = data_sharding, replicated
            self._watch = _host_devices(jax.devices())
            config = _place_config(config, replicated)
            if batch_rows is None:
                data = jax.device_put(data, data_sharding)
            else:
                data = jax.device_put(data, replicated)  # rows gathered, then split
        self.loss = make_elbo(elbo, int(setup.num_particles))
        self.data, self.config, self.elbo_name, self.device = data, config, elbo, device
        self._arrays = _config_arrays(config)
        placement = device if self.shardings is None else self.shardings[1]
        key = None
        if setup.compile_key is not None:
            key = (
                setup.compile_key,
                elbo,
                int(setup.num_particles),
                repr(lr),
                init_temperature,
                str(device),
                self.shardings is not None and len(jax.devices()),
                batch_rows,
                exported.signature(data),
                _config_key(config),
                exported.signature(start),  # which sites start from given values
            )
        compiled = _COMPILED.get(key) if key is not None else None
        if compiled is None:
            # Kept on disk for a model of the zoo's own, on one device (the key then names it).
            persist_key = (
                repr(key) if setup.persist and key is not None and not setup.data_parallel else None
            )
            compiled = _CompiledSVI(
                model,
                guide,
                self.loss,
                lr,
                config,
                init_temperature,
                self.shardings,
                device,
                persist_key,
                setup.dtype,
            )
            if key is not None:
                _COMPILED[key] = compiled
        self._compiled, self.svi = compiled, compiled.svi
        starts = {k: jax.device_put(np.asarray(v), placement) for k, v in start.items()}
        state = compiled.init(
            jax.random.PRNGKey(setup.seed), data, self._arrays, starts, model, guide
        )
        # Commit the initial state to the device: the update's outputs are committed, and an
        # uncommitted input would make the second call compile the update again.
        self._initial = jax.device_put(state, placement)
        _check_starts(start, self.params(self._initial), setup.dtype, compiled.kept_own)

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
            # int32, JAX's integer outside its 64-bit mode (a float32 fit's): int64 indices
            # would be truncated with a warning at every step.
            rows = np.asarray(rows)
            rows = rows.astype(np.int32) if rows.size and rows.max() < 2**31 else rows
            placement = self.device if self.shardings is None else self.shardings[1]
            rows = jax.device_put(rows, placement)
        new, loss = self._compiled.update(state, data, self._arrays, rows, temperature)
        loss = float(wait_for_step(loss) if self._watch else loss)
        return (new if np.isfinite(loss) else state), -loss

    def params(self, state) -> dict[str, np.ndarray]:
        return flatten_params(self._compiled.get_params(state))

    def params_outside_support(self, state) -> list[str]:
        """None are reported: NumPyro does not check a distribution's parameters, and one out
        of its support makes the objective NaN, which the loop reports."""
        return []

    def elbo(self, state, num_particles: int, seed: int, temperature=None) -> float:
        value = self._compiled.elbo(self.elbo_name, int(num_particles))(
            state, jax.random.PRNGKey(seed), self.data, self._arrays, temperature
        )
        return -float(wait_for_step(value) if self._watch else value)


def _check_starts(start: dict, params: dict, dtype: str, kept_own=()) -> None:
    """Refuses a starting value that its ``param`` site's constraint refuses. NumPyro keeps a
    parameter unconstrained and does not check the value it started from; one outside the
    support does not come back from the round trip (a logarithm of a negative scale is NaN,
    weights are normalised), and the first step's objective would be NaN, blamed on the
    learning rate. ``kept_own``: the sites that kept a value of their own (``_ParamStarts``)."""
    rtol = 1e-3 if dtype == "float32" else 1e-6
    networks = tuple(site.split("$")[0] + "." for site in kept_own if site.endswith("$params"))
    for name, value in start.items():
        own = name in kept_own or (networks and name.startswith(networks))
        if own or name not in params:
            continue
        if not np.allclose(params[name], value, rtol=rtol, atol=rtol * 1e-3):
            raise ValueError(start_outside_support(name))


def as_params(params: dict, device, dtype: str) -> dict:
    """Named numpy parameter arrays on the device (floats in ``dtype``)."""
    return {
        k: asarray(v, device, dtype) if np.asarray(v).dtype.kind == "f" else jnp.asarray(v)
        for k, v in params.items()
    }


def guide_drawn(guide):
    """``guide`` with each of its sample sites marked as not enumerated (``enumerate: None``).

    ``handlers.replay`` copies a guide site's ``infer`` into the model's site of that name. A
    guide may mark its discrete latent ``enumerate="parallel"``, so that ``TraceEnum_ELBO``
    takes the exact expectation over it in training; scoring draws it instead, and the copied
    mark would have the model sum that latent out again under ``enum`` in place of scoring the
    draw: each weight would be ``log p(x) - log q(z)`` rather than ``log p(x, z) - log q(z)``.
    ``config_enumerate`` keeps an ``enumerate`` that a site holds, None included, so the
    replayed sites stay drawn. The guide's own trace, which no ``enum`` handles, is the same
    either way."""
    from numpyro import handlers

    return handlers.infer_config(guide, lambda site: {"enumerate": None})


def log_importance_weights_fn(model_and_guide, config, device, dtype: str, enumerated=False):
    """A compiled ``(data, params, seed, num_particles) -> (num_particles, N)`` function of
    ``log p(x_n, z_n) - log q(z_n | x_n)`` with ``z_n ~ q`` (particles by ``vmap``), computed
    in ``dtype`` (:func:`traced_in_precision`). ``enumerated``: the model's discrete latents
    that the guide does not draw are summed out of ``log p`` (as ``TraceEnum_ELBO`` sums them),
    rather than drawn from the model.

    ``model_and_guide(params)`` builds the pair from named parameter arrays (``as_params``); the
    arrays are arguments of the compiled function, so new parameters do not recompile it.
    """
    from numpyro import handlers

    def log_joint(model, key, guide_trace, data):
        model = handlers.replay(handlers.seed(model, key), guide_trace)
        if not enumerated:
            return data_plate_log_prob(handlers.trace(model).get_trace(data, config).values())
        from numpyro.contrib.funsor import config_enumerate, enum, plate_to_enum_plate

        # Only the model's latents that the guide does not draw are summed out: a site the
        # guide drew is scored at the guide's value (``guide_drawn``).
        with plate_to_enum_plate(), enum(first_available_dim=-2):  # left of the data plate
            sites = handlers.trace(config_enumerate(model)).get_trace(data, config).values()
            joint = data_plate_log_prob(sites)
        # log-sum-exp over the enumerated values' dimensions
        return jax.nn.logsumexp(joint.reshape(-1, joint.shape[-1]), axis=0)

    def one(key, data, params):
        model, guide = model_and_guide(params)
        if enumerated:
            guide = guide_drawn(guide)
        guide_key, model_key = jax.random.split(key)
        guide_trace = handlers.trace(handlers.seed(guide, guide_key)).get_trace(data, config)
        joint = log_joint(model, model_key, guide_trace, data)
        return joint - data_plate_log_prob(guide_trace.values())

    def weights(data, params, key, num_particles):
        keys = jax.random.split(key, num_particles)
        return jax.vmap(one, in_axes=(0, None, None))(keys, data, params)

    weights = jax.jit(traced_in_precision(weights, dtype), static_argnums=3)

    def run(data, params, seed: int, num_particles: int) -> np.ndarray:
        return np.asarray(weights(data, params, jax.random.PRNGKey(seed), num_particles))

    run.compiled = weights  # the program a test reads
    return run
