"""The Pyro (torch) adapter: devices, arrays, seeding and the SVI engine, for ``inference``."""

from __future__ import annotations

import contextlib
import functools
import math
import warnings

import numpy as np
import pyro
import torch
from pyro import poutine
from pyro.infer import (
    JitTraceEnum_ELBO,
    Trace_ELBO,
    TraceEnum_ELBO,
    config_enumerate,
)
from pyro.params.param_store import ParamStoreDict
from torch.distributions import transform_to

from inference import learning_rate
from inference.backends.cuda_graph import GraphedUpdate
from inference.backends.pyro_importance import ImportanceWeightedELBO, importance_traces
from inference.backends.pyro_meanfield import JitMeanFieldELBO, MeanFieldELBO
from inference.backends.pyro_trace_elbo import JitTraceELBO
from inference.backends.pyro_traced import TracedGraphs
from inference.backends.sites import data_plate_log_prob
from inference.backends.svi_setup import SVISetup, start_outside_support
from inference.backends.torch_compiled import CompiledUpdate
from inference.persistence import state_tree
from zoo import devices
from zoo.array_namespace import TorchOps, convert_config
from zoo.weights import canonical_name

NAME = "pyro"
ops = TorchOps()


class WorkerLostError(RuntimeError):
    """A process of a data-parallel group died or could not be reached mid-run."""


def init_data_parallel():
    """(rank, world size) of this process's ``torch.distributed`` group, joining the group
    ``torchrun`` describes (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``...) if not yet joined:
    gloo on CPU, nccl when CUDA is available."""
    import os

    dist = torch.distributed
    if not dist.is_available():
        raise ValueError("data_parallel=True needs torch.distributed, which this torch lacks.")
    if not dist.is_initialized():
        if "WORLD_SIZE" not in os.environ:
            raise ValueError(
                "data_parallel=True on Pyro runs in a torch.distributed group: launch the script "
                "with torchrun (e.g. torchrun --nproc_per_node=2 script.py) or call "
                "torch.distributed.init_process_group first."
            )
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return dist.get_rank(), dist.get_world_size()


def available_devices() -> list[str]:
    return devices.available(NAME)


def resolve_device(device: str = "cpu") -> torch.device:
    """``"cpu"``, ``"cuda"`` or ``"cuda:N"``; a device that is not there is a clear error."""
    return devices.resolve(NAME, device)


def asarray(value, device, dtype: str):
    return devices.asarray(NAME, value, device, dtype)


def to_numpy(value) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def backend_config(config, device, dtype):
    return convert_config(config, lambda a: asarray(a, device, dtype))


def compile_step(fn, config=None, key=None, jit: bool = False):
    """Closed-form steps run eagerly on torch, or with ``jit`` compiled by ``torch.compile``
    (:mod:`inference.backends.torch_compiled`); with ``config``, ``fn(config, *args)``. A
    closed-form update (``key`` ``(module, "update")``, called as ``update(state, cache)``) on
    a GPU is replayed from a CUDA graph (:mod:`inference.backends.cuda_graph`)."""
    step = fn if config is None else functools.partial(fn, config)
    name = " of ".join(reversed(key)) if isinstance(key, tuple) else "step"
    if jit:
        step = CompiledUpdate(step, name=name)
    if isinstance(key, tuple) and key[-1] == "update":
        return GraphedUpdate(step, name=name)
    return step


ELBOS = {
    "trace": Trace_ELBO,
    "enum": TraceEnum_ELBO,
    "meanfield": MeanFieldELBO,  # TraceMeanField_ELBO minus the log-densities it does not use
    "iwae": ImportanceWeightedELBO,  # Renyi's bound at alpha = 0, taken row by row
}


JIT_ELBOS = {
    "trace": JitTraceELBO,  # JitTrace_ELBO summing the loss once for a reparameterised guide
    "enum": JitTraceEnum_ELBO,
    "meanfield": JitMeanFieldELBO,
}


def make_elbo(name: str, num_particles: int, jit: bool = False):
    """Pyro's estimator for ``name`` (``inference.algorithms.svi.ELBOS`` lists and explains them); with
    ``jit``, its ``torch.jit.trace``-compiled twin (Pyro's ``JitTrace*_ELBO``)."""
    if jit and name not in JIT_ELBOS:
        raise ValueError(
            f"jit=True needs one of the elbos {list(JIT_ELBOS)}: Pyro has no compiled {name!r}."
        )
    table = JIT_ELBOS if jit else ELBOS
    options = {"num_particles": num_particles}
    if jit:  # the tracer's warnings about Python values in the graph are expected here
        options["ignore_jit_warnings"] = True
    if name == "enum":
        return table[name](max_plate_nesting=1, **options)
    return table[name](**options)


def _positional(fn, keys, config):
    """``fn(data, config, temperature=...)`` called as ``fn(*tensors, rows=...)``.

    ``torch.jit.trace`` (under Pyro's ``JitTrace*_ELBO``) takes tensors as positional inputs and
    keys its compiled graphs on the other keyword arguments: the data arrays (in ``keys`` order)
    and the temperature, if any, come positionally; the config is closed over; ``rows`` (the
    minibatch size) only selects the graph, as the data plate's scale is traced as a constant.
    """

    def call(*tensors, rows=None):
        n = len(keys)
        temperature = tensors[n] if len(tensors) > n else None
        return fn(dict(zip(keys, tensors[:n], strict=True)), config, temperature=temperature)

    return call


def upload(value: torch.Tensor, device: torch.device) -> torch.Tensor:
    """A CPU tensor on ``device`` without waiting for the device: to a GPU through pinned memory
    and an asynchronous copy, as torch's data loaders do (a plain copy from pageable memory
    waits for every queued kernel, once per step)."""
    if device.type != "cuda" or value.device.type != "cpu":
        return value.to(device)
    return value.pin_memory().to(device, non_blocking=True)


def runs_ahead(device: torch.device) -> bool:
    """Whether work queued on ``device`` runs while the host goes on (a GPU), so that the host
    can queue the next step before it reads this one's result."""
    return device.type == "cuda"


def start_read(value: torch.Tensor):
    """A function that returns the scalar ``value`` as a Python float. On a GPU the copy to the
    host is queued now, into pinned memory, and the function waits for that copy alone:
    ``float(value)`` would also wait for every kernel queued after this call."""
    if value.device.type != "cuda":
        number = float(value)
        return lambda: number
    host = torch.empty(value.shape, dtype=value.dtype, pin_memory=True)
    host.copy_(value, non_blocking=True)
    copied = torch.cuda.Event()
    copied.record(torch.cuda.current_stream(value.device))  # the copy's stream, on any GPU

    def read() -> float:
        copied.synchronize()
        return float(host)

    return read


def _fusable(params) -> bool:
    """Whether torch's fused Adam takes these parameters: floating point, on a CPU or GPU."""
    return all(p.is_floating_point() and p.device.type in ("cpu", "cuda") for p in params)


def _in_own_store(method):
    """``method`` of an :class:`SVIEngine` run with the engine's parameters in Pyro's store."""

    @functools.wraps(method)
    def call(self, *args, **kwargs):
        with self._own_store():
            return method(self, *args, **kwargs)

    return call


class SVIEngine:
    """SVI on Pyro's ELBO estimators with its own random stream, so fits neither read nor disturb
    the global one.

    One ``torch.optim.Adam`` updates every parameter of the store, which costs less per step than
    Pyro's ``SVI`` with ``pyro.optim.Adam`` (an optimiser per parameter; measured in
    ``benchmarks/vae_speed.py``) and computes the same update. It is torch's fused Adam (one
    kernel for all the parameters): torch picks it by default on a GPU only, and on a CPU its
    per-parameter loop costs a Python round of about ten operations per parameter per step.
    Every parameter must exist after the first evaluation of the loss (true of the zoo's
    models). With a learning rate in stages, Adam's state is cleared at each stage's first
    update, so that its moments start afresh there, and the engine keeps the average of the
    last stage's iterates, which ``params`` returns (``inference.learning_rate``). Pyro's
    ``param`` sites read one global store: the engine keeps its parameters in a store of its
    own, put in place of the global one's content for each of its calls and the user's put back
    after (also when the call raises), so a fit leaves the user's parameters as it found them.
    One engine call runs at a time in a process.
    ``step(state, temperature, rows)`` trains on ``data`` restricted to ``rows`` (all rows if
    None); ``step(state, temperature, batch=...)`` on a minibatch given as tensors
    (``inference.streaming``). The engines of both backends take and return a state; Pyro's
    parameters and optimiser live in torch tensors that a step updates in place, so its state
    is a handle to them: ``{"params", "optim", "rng", "updates"}``, the store's unconstrained
    parameters, Adam's state, the fit's random stream and the updates applied, and with stages
    ``"average"``, the average of the unconstrained iterates. A state holding
    other tensors (one restored from a checkpoint) is loaded into the store, Adam and the
    stream when a method is first given it; a state of None reads them as they are.

    Pyro's validation (on unless switched off) checks the model and guide at their first
    evaluation, here in the constructor; the steps run without it: the zoo's models have a
    static structure, so the checks would find nothing new and cost time at every step (the
    mean-field ELBO also needs them off to skip the log-densities it does not use).

    With ``data_parallel=True`` this process is one of a ``torch.distributed`` group (each
    process holds its share of the rows, the model scales them by ``num_data / rows``): after
    every backward pass the gradients and the loss are averaged over the group (one
    ``all_reduce``), so every process takes the same step as one process on all the rows.
    """

    #: Whether a compiled (``jit=True``) step runs on torch's optimising graph executor, which on
    #: a GPU fuses elementwise operations into fewer kernels but differentiates some operations
    #: by its own formulas (the step then no longer computes what the uncompiled step computes,
    #: bit for bit). Off; ``benchmarks/gpu_check.py`` times a row with it on.
    jit_optimized: bool = False

    def __init__(self, model, guide, data, config, setup: SVISetup):
        elbo, lr, device, jit = setup.elbo, setup.lr, setup.device, setup.jit
        self.data, self.config, self.device = data, config, device
        self.group_size = torch.distributed.get_world_size() if setup.data_parallel else 1
        if elbo == "enum":
            model = config_enumerate(model)
        self.loss = make_elbo(elbo, int(setup.num_particles), jit=jit)
        if jit:
            # Pyro's compiled ELBOs rest on torch.jit.trace, which torch now marks deprecated.
            # One process-wide filter for that message: a catch_warnings() around every step
            # would reset Python's once-per-location registry and repeat the model's warnings.
            warnings.filterwarnings("ignore", "`torch.jit.trace` is deprecated", DeprecationWarning)
        self.model, self.guide, self.elbo_name = model, guide, elbo
        self.jit = jit
        # The graphs compiled, by (rows, number of inputs), and called without Pyro's wrapper.
        self.graphs = TracedGraphs(self.loss) if jit else None
        floats = [v.dtype for v in data.values() if v.is_floating_point()]
        self.dtype = floats[0] if floats else torch.get_default_dtype()
        self.keys = tuple(sorted(data))
        self.model_fn = _positional(model, self.keys, config)
        self.guide_fn = _positional(guide, self.keys, config)
        self._store = vars(ParamStoreDict())  # the engine's parameters, empty to start
        with self._own_store(), self._rng():
            torch.manual_seed(setup.seed)
            if device.type == "cuda":
                torch.cuda.manual_seed(setup.seed)
            # Create the parameters now (Pyro makes them lazily), so params() works before step().
            with torch.no_grad(), _CheckedStarts(setup.start or {}):
                self.loss.loss(
                    model,
                    guide,
                    data,
                    config,
                    temperature=self._temperature(setup.init_temperature),
                )
            self.rng_state = self._get_rng()
        store = self._store
        self.names = sorted(store["_params"])
        self.lr = lr
        self.updates = 0  # Adam updates applied: where a schedule of stages stands
        first_lr = lr.at(0) if isinstance(lr, learning_rate.Stages) else lr
        params = [store["_params"][k] for k in self.names]
        self.optim = torch.optim.Adam(params, lr=first_lr, fused=_fusable(params))
        # With stages, the average of the last stage's unconstrained iterates, which params()
        # returns (inference.learning_rate); the iterate itself until that stage starts.
        self.average = None
        if isinstance(lr, learning_rate.Stages):
            self.average = {k: p.detach().clone() for k, p in zip(self.names, params, strict=True)}
        self._loaded = None  # the last state loaded into the store, a handle to it since

    @contextlib.contextmanager
    def _own_store(self):
        """Pyro's global parameter store holding the engine's parameters for the call, and
        what it held before (the user's parameters) again after it, also on an error. The
        store's dicts are swapped, not copied: the same tensors, which Adam and the compiled
        graphs hold, at no cost per step."""
        store = pyro.get_param_store()
        theirs = vars(store).copy()
        vars(store).update(self._store)
        try:
            yield
        finally:
            self._store = vars(store).copy()  # dicts the call replaced (a clear()) included
            vars(store).update(theirs)

    def _rng(self):
        return torch.random.fork_rng(devices=[self.device] if self.device.type == "cuda" else [])

    def _get_rng(self):
        state = {"cpu": torch.get_rng_state()}
        if self.device.type == "cuda":
            state["cuda"] = torch.cuda.get_rng_state(self.device)
        return state

    def _set_rng(self, state):
        torch.set_rng_state(state["cpu"])
        if "cuda" in state:
            torch.cuda.set_rng_state(state["cuda"], self.device)

    @_in_own_store
    def initial_state(self):
        return self._handle()

    def _handle(self) -> dict:
        """The state: the tensors the store, Adam and the stream hold now."""
        store = pyro.get_param_store()
        state = {
            "params": {name: store._params[name] for name in store.keys()},
            "optim": self.optim.state_dict(),
            # Marked as streams by device: a checkpoint may move between the CPU and a GPU.
            "rng": state_tree.DeviceStreams(self.rng_state),
            "updates": self.updates,
        }
        if self.average is not None:
            state["average"] = self.average
        return state

    def _adopt(self, state) -> None:
        """Load ``state`` into the store, Adam and the stream, unless it is a handle to them."""
        if state is None or state is self._loaded:
            return
        store = pyro.get_param_store()
        saved = state["params"]
        if all(value is store._params.get(name) for name, value in saved.items()):
            return
        if sorted(saved) != sorted(store.keys()):
            raise ValueError(
                f"Checkpoint params {sorted(saved)} != model params {sorted(store.keys())}."
            )
        shapes = {k: tuple(v.shape) for k, v in saved.items()}
        expected = {k: tuple(store._params[k].shape) for k in saved}
        if shapes != expected:
            raise ValueError(f"Checkpoint param shapes {shapes} != model's {expected}.")
        with torch.no_grad():
            for name, value in saved.items():
                store._params[name].copy_(torch.as_tensor(value))
            for name, value in (state.get("average") or {}).items():
                self.average[name].copy_(torch.as_tensor(value))
        # Adam's moments move to their parameters' device as it loads; its step counts stay on
        # the CPU, as torch keeps them.
        self.optim.load_state_dict(_tensors(state["optim"]))
        self.rng_state = _tensors(state["rng"])
        self.updates = int(state["updates"])
        self._loaded = state

    def batch(self, rows, data=None):
        data = self.data if data is None else data
        if rows is None:
            return data
        index = upload(torch.as_tensor(rows), self.device)
        return {k: v.index_select(0, index) for k, v in data.items()}

    @_in_own_store
    def step(self, state=None, temperature=None, rows=None, batch=None, data=None):
        """One gradient step: ``(state, ELBO estimate)``; a non-finite loss leaves the parameters
        as they were. ``data`` replaces the engine's data for this step (a fresh binarization)."""
        self._adopt(state)
        temperature = self._temperature(temperature)
        data = self.batch(rows, data) if batch is None else batch
        inputs, rows = self._inputs(data, temperature), len(data[self.keys[0]])
        if self.jit and (rows, len(inputs)) not in self.graphs.traced:
            self._trace(inputs, rows)
        with self._rng(), pyro.validation_enabled(False), self._as_eager():
            loss = self._loss_and_grads(inputs, rows)
            if self.group_size > 1:
                loss = self._average_over_group(loss)
            if math.isfinite(loss):
                if isinstance(self.lr, learning_rate.Stages):
                    if self.lr.restarts_at(self.updates):
                        self.optim.state.clear()  # Adam starts afresh at each stage
                    self.optim.param_groups[0]["lr"] = self.lr.at(self.updates)
                self.optim.step()
                self.updates += 1
                if self.average is not None:
                    self._average_iterates()
            self.optim.zero_grad(set_to_none=True)
            self.rng_state = self._get_rng()
        return self._handle(), -loss

    def _average_iterates(self) -> None:
        """Move the average of the last stage's iterates towards the new iterate (a weight of 1
        before that stage, where the average is the iterate)."""
        weight = self.lr.average_weight(self.updates)
        store = pyro.get_param_store()
        with torch.no_grad():
            for name, average in self.average.items():
                average.lerp_(store._params[name], weight)

    def _trace(self, inputs, rows) -> None:
        """Compile the graph of this minibatch size on a throwaway evaluation.

        Pyro's compiled ELBO runs the model and guide three times the first time it sees a graph
        (to find the parameters, to trace, to run the trace), drawing from the random stream each
        time. Tracing apart, from a copy of the stream and with the gradients thrown away, leaves
        the fit's stream to its steps, so that ``jit=True`` draws what the uncompiled fit draws.
        """
        with self._rng(), pyro.validation_enabled(False), self._as_eager():
            self.graphs.trace((rows, len(inputs)), lambda: self._loss_and_grads(inputs, rows))
        self.optim.zero_grad(set_to_none=True)

    def _loss_and_grads(self, inputs, rows) -> float:
        """The loss at the fit's random state, its gradients accumulated into the parameters;
        compiled, from the graph of this minibatch size once it is traced."""
        self._set_rng(self.rng_state)
        if self.graphs is not None:
            loss = self.graphs.loss_and_grads((rows, len(inputs)), inputs)
            if loss is not None:
                return loss
        return self.loss.loss_and_grads(self.model_fn, self.guide_fn, *inputs, rows=rows)

    @contextlib.contextmanager
    def _as_eager(self):
        """What makes a compiled step compute what the uncompiled step computes, bit for bit.

        - The traced graph holds a distribution's event size as a tensor, so arithmetic such as
          ``d * log(2 pi)`` that is a Python float when run eagerly becomes a tensor of torch's
          default dtype: the default is set to the data's dtype while tracing and running.
        - torch's optimising graph executor differentiates some operations by its own
          formulas; with optimisation off it runs the recorded operations and torch's autograd
          differentiates them as it does when run eagerly. The gain of compiling (no Python
          work per step) stays. ``jit_optimized`` turns optimisation back on.
        """
        if not self.jit:
            yield
            return
        default = torch.get_default_dtype()
        torch.set_default_dtype(self.dtype)
        try:
            with torch.jit.optimized_execution(self.jit_optimized):
                yield
        finally:
            torch.set_default_dtype(default)

    def _average_over_group(self, loss: float) -> float:
        """Average the gradients and the loss over the ``torch.distributed`` group, in place."""
        params = self.optim.param_groups[0]["params"]
        grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
        flat = torch.cat([g.reshape(-1) for g in grads] + [grads[0].new_tensor([loss])])
        try:
            torch.distributed.all_reduce(flat)
        except (RuntimeError, OSError) as err:  # gloo and nccl report a lost peer so
            raise WorkerLostError(
                f"Data-parallel SVI lost a process of its torch.distributed group (this is rank "
                f"{torch.distributed.get_rank()} of {self.group_size}) while averaging "
                "gradients; the last checkpoint (checkpoint=) resumes the run with resume=True. "
                f"Cause: {err}"
            ) from err
        flat /= self.group_size
        offset = 0
        for p, g in zip(params, grads, strict=True):
            p.grad = flat[offset : offset + g.numel()].view_as(g)
            offset += g.numel()
        return float(flat[-1])

    def _inputs(self, data, temperature) -> list:
        """The positional inputs of ``model_fn`` and ``guide_fn``."""
        tensors = [data[k] for k in self.keys]
        return tensors if temperature is None else [*tensors, temperature]

    def _temperature(self, temperature):
        if temperature is None:
            return None
        return upload(torch.as_tensor(temperature, dtype=self.dtype), self.device)

    @_in_own_store
    def params(self, state=None) -> dict[str, np.ndarray]:
        self._adopt(state)
        store = pyro.get_param_store()
        # With stages, the average of the last stage's iterates; constrained as the store
        # constrains its own. Copies: a CPU tensor's numpy view would follow in-place updates.
        unconstrained = store._params if self.average is None else self.average
        with torch.no_grad():
            return {
                canonical_name(name): to_numpy(
                    transform_to(store._constraints[name])(unconstrained[name])
                ).copy()
                for name in store.keys()
            }

    @_in_own_store
    def params_outside_support(self, state=None) -> list[str]:
        """The parameters whose constrained values fail their constraint's check (a value
        ``> 1`` rounded to exactly 1, which Pyro's distributions then refuse)."""
        self._adopt(state)
        store = pyro.get_param_store()
        with torch.no_grad():
            return sorted(
                canonical_name(name)
                for name in store.keys()
                if not bool(store._constraints[name].check(store[name]).all())
            )

    @_in_own_store
    def elbo(self, state, num_particles: int, seed: int, temperature=None) -> float:
        """A fresh Monte-Carlo ELBO estimate at the current parameters (no gradient step)."""
        self._adopt(state)
        loss = make_elbo(self.elbo_name, num_particles)
        with self._rng(), torch.no_grad():
            torch.manual_seed(seed)
            return -loss.loss(
                self.model,
                self.guide,
                self.data,
                self.config,
                temperature=self._temperature(temperature),
            )


class _CheckedStarts(poutine.messenger.Messenger):
    """Refuses a starting value of ``names`` that its ``param`` site's constraint refuses, as
    the parameter is made and under its own name: a distribution of the guide would refuse it
    later, naming the distribution's argument instead."""

    def __init__(self, names):
        super().__init__()
        self.names = set(names)

    def _pyro_param(self, msg):
        name, *given = msg["args"]
        if name not in self.names or not given or name in pyro.get_param_store():
            return
        value = given[0]() if callable(given[0]) else given[0]
        msg["args"] = (name, value)  # made once
        constraint = msg["kwargs"].get("constraint") or torch.distributions.constraints.real
        if not bool(constraint.check(value).all()):
            raise ValueError(start_outside_support(name))


def _tensors(tree):
    """``tree`` with its numpy arrays as torch tensors (on the CPU)."""
    if isinstance(tree, dict):
        return {k: _tensors(v) for k, v in tree.items()}
    if isinstance(tree, list | tuple):
        return type(tree)(_tensors(v) for v in tree)
    return torch.as_tensor(tree) if isinstance(tree, np.ndarray) else tree


def as_params(params: dict, device, dtype: str) -> dict:
    """Named parameter arrays as the twins' ``init`` takes them (numpy; placed when built).

    A new dict each call: the weight function builds its networks once per dict it is given,
    so the values scored are the parameters' values now, even after an edit in place."""
    return dict(params)


def log_importance_weights_fn(model_and_guide, config, device, dtype: str, enumerated=False):
    """A ``(data, params, seed, num_particles) -> (num_particles, N)`` function of
    ``log p(x_n, z_n) - log q(z_n | x_n)`` with ``z_n ~ q``, numpy; ``model_and_guide(params)``
    builds the pair from named parameter arrays. torch computes in the dtype of the parameters
    and data it is given, which is ``dtype``. ``enumerated``: the model's discrete latents that
    the guide does not draw are summed out of ``log p`` (as ``TraceEnum_ELBO`` sums them),
    rather than drawn from the model.

    Particles are vectorised by a plate left of the model's ``data`` plate; parameters live in a
    scratch parameter store, so the user's store is left as it was.
    """
    built = {}

    def run(data, params, seed: int, num_particles: int) -> np.ndarray:
        if built.get("params") is not params:  # networks are built once per parameter set
            model, guide = model_and_guide(params)
            if enumerated:  # left of the particles' plate (-2) and the data plate (-1)
                model = poutine.enum(config_enumerate(model), first_available_dim=-3)
            built["params"], built["pair"] = params, (model, guide)
        model, guide = built["pair"]
        with (
            torch.random.fork_rng(devices=[device] if device.type == "cuda" else []),
            torch.no_grad(),
            pyro.get_param_store().scope(),
        ):
            torch.manual_seed(seed)
            model_trace, guide_trace = importance_traces(model, guide, num_particles, data, config)
            log_joint = data_plate_log_prob(model_trace.nodes.values())
            if enumerated:  # log-sum-exp over the enumerated values' dimensions
                log_joint = log_joint.reshape(-1, *log_joint.shape[-2:]).logsumexp(0)
            total = log_joint - data_plate_log_prob(guide_trace.nodes.values())
        return to_numpy(total.expand(num_particles, -1))

    return run
