r"""Stochastic variational inference with natural gradients (``algorithm="svi-natural"``).

Hoffman, Blei, Wang & Paisley (2013), for models with closed-form (conjugate) updates: each step
takes a minibatch, sets its local factors q(z) given the current global factors (the CAVI
responsibilities), and moves the natural parameters of the global factors a step ``rho_t``
towards the CAVI update the full data would give if every minibatch looked like this one
(its statistics scaled by ``num_data / batch_size``)::

    lambda <- (1 - rho_t) lambda + rho_t lambda_hat,    rho_t = (t + tau) ** -kappa,  t = 1, 2, ...

With ``tau >= 0`` and ``kappa`` in (0.5, 1] the steps satisfy the Robbins-Monro conditions and the
iteration converges to a local optimum of the full-data ELBO (a fixed point of CAVI); ``kappa=0``
gives ``rho = 1``, and with ``batch_size`` the whole data that is exactly CAVI.

It runs on the model's closed-form hooks (``init_natural_state``, ``natural_step``, written once
against the array namespace, jit-compiled on JAX), so both backends run the same update. Data
come from ``inference.streaming``: arrays in memory, memory-mapped files or a stream of
minibatches. The objective recorded per step is the minibatch's unbiased estimate of the
ELBO (nats, summed over the full data); ``full_elbo`` evaluates the exact one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from inference.algorithm import Info, Problem
from inference.closed_form import decode_inner, encode_inner
from inference.initialization import initial_responsibilities


@dataclass
class NaturalState:
    problem: Problem
    source: Any  # inference.streaming.ArraySource or StreamSource
    inner: Any  # {"q", "theta", "raw"} (backend arrays)
    shift: Any  # the centre every minibatch's features share (backend array)
    update: Any  # the compiled step
    tau: float
    kappa: float
    step: int = 0


def check_step_size(step_size) -> tuple[float, float]:
    try:
        tau, kappa = (float(v) for v in step_size)
    except (TypeError, ValueError):
        raise TypeError(
            f"step_size must be a pair (tau, kappa) of floats; got {step_size!r}."
        ) from None
    if not tau >= 0 or not 0 <= kappa <= 1 or tau + 1 <= 0:
        raise ValueError(
            "step_size=(tau, kappa) needs tau in [0, inf) and kappa in [0, 1] (in (0.5, 1] for "
            f"convergence); got ({tau}, {kappa})."
        )
    return tau, kappa


class NaturalGradientAlgorithm:
    name = "svi-natural"
    objective = "elbo"
    default_dtype = "float64"

    def supports(self, spec, backend: str) -> bool:
        if spec.closed_form is None or "cavi" not in spec.algorithms:
            return False
        return hasattr(spec.closed_form_module(), "natural_step")

    def init(self, problem: Problem, *, source, init="kmeans", step_size=(1.0, 0.7)):
        tau, kappa = check_step_size(step_size)
        module = problem.spec.closed_form_module()
        back, ops = problem.backend, problem.backend.ops
        config = problem.backend_config()
        x0 = problem.data["x"]  # the whole data in memory, else the first minibatch
        resp = initial_responsibilities(x0, problem.config.K, init, problem.seed)
        cache = module.init_cache(back.asarray(x0, problem.device, problem.dtype), config, ops)
        scale = problem.num_data / len(x0)
        inner = module.init_natural_state(
            back.asarray(resp, problem.device, problem.dtype), cache, config, ops, scale
        )
        shift = cache["shift"]

        def step(inner, x, rho, scale):
            batch_cache = module.init_cache(x, config, ops, shift)
            return module.natural_step(inner, batch_cache, config, ops, rho, scale)

        return NaturalState(
            problem, source, inner, shift, back.compile_step(step), tau=tau, kappa=kappa
        )

    def step_size(self, state: NaturalState, step: int) -> float:
        return float((step + 1 + state.tau) ** -state.kappa)

    def step(self, state: NaturalState):
        p = state.problem
        x = state.source.batch(state.step)["x"]
        rho = self.step_size(state, state.step)
        inner, objective = state.update(
            state.inner, p.backend.asarray(x, p.device, p.dtype), rho, p.num_data / len(x)
        )
        new = NaturalState(
            p, state.source, inner, state.shift, state.update, state.tau, state.kappa
        )
        new.step = state.step + 1
        return new, Info(objective=float(objective))

    def get_params(self, state: NaturalState) -> dict[str, np.ndarray]:
        module = state.problem.spec.closed_form_module()
        raw = module.raw_params(state.inner, {"shift": state.shift}, state.problem.backend.ops)
        return {k: state.problem.backend.to_numpy(v) for k, v in raw.items()}

    def state_dict(self, state: NaturalState):
        return encode_inner(state.problem, {**state.inner, "shift": state.shift}, state.step)

    def load_state_dict(self, state: NaturalState, skeleton, arrays) -> NaturalState:
        p = state.problem
        inner = decode_inner(p, skeleton, arrays)
        shift = inner.pop("shift")
        new = NaturalState(p, state.source, inner, shift, state.update, state.tau, state.kappa)
        new.step = int(skeleton["step"])
        return new


ALGORITHM = NaturalGradientAlgorithm()


def full_elbo(result, data, backend: str | None = None, chunk: int = 100_000) -> float:
    """The exact ELBO (nats, summed over ``data``) of a fitted ``cavi`` or ``svi-natural`` result,
    with q(z) optimal given the fitted global factors; ``data`` is read in chunks (a memory-mapped
    array is fine)."""
    from inference.api import get_backend
    from zoo import get_model

    spec = get_model(result.model)
    module = spec.closed_form_module()
    back = get_backend(backend or result.backend)
    ops, device = back.ops, back.resolve_device("cpu")
    x = data["x"] if isinstance(data, dict) else data
    config = back.backend_config(result.config, device, "float64")
    raw = result.raw_params
    # The globals in a centre of our choosing: the fitted means' mean (any centre gives the same).
    shift = np.asarray(raw["mean_loc"]).mean(axis=0)
    cache0 = module.init_cache(
        back.asarray(x[:1], device, "float64"), config, ops, back.asarray(shift, device, "float64")
    )
    q = _q_from_raw(raw, shift, back, device)
    theta = module.log_rho_coefficients(q, cache0, config, ops)
    state = {"q": q, "theta": theta}
    total, kl = 0.0, None
    from inference.streaming import release

    for start in range(0, len(x), chunk):
        rows = back.asarray(np.asarray(x[start : start + chunk]), device, "float64")
        cache = module.init_cache(rows, config, ops, cache0["shift"])
        part, kl = module.elbo_terms(state, cache, config, ops)
        total += float(part)
        release(x)
    return total - float(kl)


def _q_from_raw(raw, shift, back, device) -> dict:
    """The closed form's q from raw parameters (``raw_params``'s inverse)."""
    tril = np.asarray(raw["scale_tril"])
    scale = tril @ np.swapaxes(tril, -1, -2)
    q = {
        "mean_precision": raw["mean_precision"],
        "means": np.asarray(raw["mean_loc"]) - shift,
        "dof": raw["dof"],
        "scale": scale,
        "logdet_scale": 2.0 * np.log(np.diagonal(tril, axis1=-2, axis2=-1)).sum(-1),
    }
    for key in ("stick_a", "stick_b", "weight_concentration"):
        if key in raw:
            q[key] = raw[key]
    return {k: back.asarray(v, device, "float64") for k, v in q.items()}
