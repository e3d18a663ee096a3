"""The Pyro (torch) adapter: devices, arrays, seeding and the SVI engine, for ``inference``."""

from __future__ import annotations

import math

import numpy as np
import pyro
import torch
from pyro import poutine
from pyro.infer import SVI, Trace_ELBO, TraceEnum_ELBO, config_enumerate
from pyro.infer.util import zero_grads

from inference.backends import tree_codec
from inference.backends.common import check_dtype, convert_config
from inference.backends.ops import TorchOps

NAME = "pyro"
ops = TorchOps()


def available_devices() -> list[str]:
    return ["cpu"] + [f"cuda:{i}" for i in range(torch.cuda.device_count())]


def resolve_device(device: str = "cpu") -> torch.device:
    """``"cpu"``, ``"cuda"`` or ``"cuda:N"``; a device that is not there is a clear error."""
    try:
        dev = torch.device(device)
    except (RuntimeError, TypeError) as err:
        raise ValueError(f"Unknown device {device!r}; available: {available_devices()}.") from err
    if dev.type == "cuda":
        index = 0 if dev.index is None else dev.index
        if index >= torch.cuda.device_count():
            raise ValueError(
                f"Device {device!r} is not available; available: {available_devices()}."
            )
        return torch.device("cuda", index)
    if dev.type != "cpu":
        raise ValueError(f"Unknown device {device!r}; available: {available_devices()}.")
    return dev


def asarray(value, device, dtype: str):
    return torch.as_tensor(
        np.asarray(value), dtype=getattr(torch, check_dtype(dtype)), device=device
    )


def to_numpy(value) -> np.ndarray:
    if isinstance(value, torch.Tensor):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def backend_config(config, device, dtype):
    return convert_config(config, lambda a: asarray(a, device, dtype))


def compile_step(fn):
    """Closed-form steps run eagerly on torch."""
    return fn


class SVIEngine:
    """Pyro's ``SVI`` with its own random stream, so fits neither read nor disturb the global one.

    Pyro keeps parameters in one global store, so one Pyro fit runs at a time in a process.
    """

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
        self.data, self.config, self.device = data, config, device
        if enumerate:
            model = config_enumerate(model)
            loss = TraceEnum_ELBO(
                max_plate_nesting=1,
                num_particles=num_particles,
            )
        else:
            loss = Trace_ELBO(
                num_particles=num_particles,
            )
        self.model, self.guide, self.loss = model, guide, loss
        pyro.clear_param_store()
        self.optim = pyro.optim.Adam({"lr": lr})
        self.svi = SVI(model, guide, self.optim, loss)
        with self._rng():
            torch.manual_seed(seed)
            if device.type == "cuda":
                torch.cuda.manual_seed(seed)
            # Create the parameters now (Pyro makes them lazily), so params() works before step().
            self.svi.loss(
                model, guide, data, config, temperature=self._temperature(init_temperature)
            )
            self.rng_state = self._get_rng()

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

    def step(self, temperature=None) -> float:
        """One gradient step; a non-finite loss leaves the parameters as they were."""
        temperature = self._temperature(temperature)
        with self._rng():
            self._set_rng(self.rng_state)
            with poutine.trace(param_only=True) as capture:
                loss = self.loss.loss_and_grads(
                    self.model, self.guide, self.data, self.config, temperature=temperature
                )
            params = {site["value"].unconstrained() for site in capture.trace.nodes.values()}
            if math.isfinite(loss):
                self.optim(params)
            zero_grads(params)
            self.rng_state = self._get_rng()
        return -loss  # the ELBO estimate

    def _temperature(self, temperature):
        if temperature is None:
            return None
        return torch.as_tensor(temperature, dtype=self.data["x"].dtype, device=self.device)

    def params(self) -> dict[str, np.ndarray]:
        store = pyro.get_param_store()
        return {name: to_numpy(store[name]) for name in store.keys()}

    def elbo(self, num_particles: int, seed: int, temperature=None) -> float:
        """A fresh Monte-Carlo ELBO estimate at the current parameters (no gradient step)."""
        loss = type(self.loss)(
            num_particles=num_particles,
            **({"max_plate_nesting": 1} if isinstance(self.loss, TraceEnum_ELBO) else {}),
        )
        with self._rng(), torch.no_grad():
            torch.manual_seed(seed)
            return -loss.loss(
                self.model,
                self.guide,
                self.data,
                self.config,
                temperature=self._temperature(temperature),
            )

    def state_dict(self) -> tuple[dict, dict]:
        arrays: dict = {}
        store = pyro.get_param_store()
        unconstrained = {name: store._params[name] for name in store.keys()}
        skeleton = {
            "params": tree_codec.encode(unconstrained, to_numpy, arrays, "params"),
            "optim": tree_codec.encode(self.optim.get_state(), to_numpy, arrays, "optim"),
            "rng": tree_codec.encode(self.rng_state, to_numpy, arrays, "rng"),
        }
        return skeleton, arrays

    def load_state_dict(self, skeleton, arrays) -> None:
        store = pyro.get_param_store()
        saved = tree_codec.decode(skeleton["params"], arrays, torch.as_tensor)
        if sorted(saved) != sorted(store.keys()):
            raise ValueError(
                f"Checkpoint params {sorted(saved)} != model params {sorted(store.keys())}."
            )
        with torch.no_grad():
            for name, value in saved.items():
                store._params[name].copy_(value)
        self.optim.set_state(
            tree_codec.decode(
                skeleton["optim"], arrays, lambda a: torch.as_tensor(a, device=self.device)
            )
        )
        self.rng_state = tree_codec.decode(skeleton["rng"], arrays, torch.as_tensor)
