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

It runs on the natural-gradient steps of the model's closed-form updates (a
``zoo.ClosedFormUpdates`` with ``natural_gradient=True``, written once against the array
namespace, jit-compiled on JAX), so both backends run the same update. Data
come from ``inference.streaming``: arrays in memory, memory-mapped files or a stream of
minibatches. The objective recorded per step is the minibatch's unbiased estimate of the
ELBO (nats, summed over the full data); ``full_elbo`` evaluates the exact one.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np

from inference import streaming
from inference.algorithm import Algorithm, Problem, Traits
from inference.backends import get_backend
from inference.convergence import STOCHASTIC_TOL


@dataclass(frozen=True)
class NaturalOptions:
    """Natural-gradient SVI's options.

    Parameters
    ----------
    step_size : (float, float)
        ``(tau, kappa)`` of the Robbins-Monro step ``rho_t = (t + tau) ** -kappa``,
        ``t = 1, 2, ...``: ``tau >= 0`` and ``kappa`` in [0, 1] (in (0.5, 1] for convergence;
        ``kappa=0`` gives ``rho = 1``).
    batch_size : int, optional
        The minibatch (default: the whole data). Needed for memory-mapped arrays; a stream of
        minibatches gives its own, and ``batch_size`` is then an error.
    """

    step_size: Any = (1.0, 0.7)
    batch_size: int | None = None

    def __post_init__(self):
        check_step_size(self.step_size)


class NaturalInfo(NamedTuple):
    """A step's minibatch estimate of the ELBO (nats, summed over the full data), and the step
    size ``rho`` it took."""

    objective: float
    step_size: float


@dataclass(frozen=True)
class NaturalBound:
    """What a natural-gradient state is stepped with, made by ``init`` and never saved."""

    problem: Problem
    source: Any  # inference.streaming.ArraySource or StreamSource
    update: Any  # the compiled step


@dataclass(frozen=True)
class NaturalState:
    bound: NaturalBound = dataclasses.field(compare=False, repr=False)
    inner: Any = None  # the updates' natural-gradient state (backend arrays)
    context: Any = None  # what every minibatch is read with (a mixture's centre), backend arrays
    tau: float = 1.0
    kappa: float = 0.7
    step: int = 0

    #: What a checkpoint holds (``inference.persistence.state_tree``).
    saved_fields: ClassVar[tuple[str, ...]] = ("inner", "context", "step")

    @property
    def problem(self) -> Problem:
        return self.bound.problem

    @property
    def source(self):
        return self.bound.source

    @property
    def record(self) -> dict:
        return {"batch_size": self.source.batch_size, "step_size": [self.tau, self.kappa]}

    @property
    def extendable(self) -> bool:
        # Nothing depends on num_steps: the step sizes are (step + tau)^-kappa, and minibatches
        # are drawn (or read from a stream) by step.
        return True


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


class NaturalGradientSVI(Algorithm):
    name = "svi-natural"
    Options = NaturalOptions
    traits = Traits(
        stochastic=True,
        minibatch=True,
        num_steps=2000,
        # The stopping rule of SVI: the mean ELBO over the last 500 steps (the default window)
        # less than 1e-4 nats per point above the 500 before, checked from step 1,000 on. At
        # 1,000 steps it was checked once, at the end, where a converged run's noise could
        # miss it by a hair (1.0006e-4 on the built-in data with K=3, met 50 steps later).
        tol=STOCHASTIC_TOL,
        # Its steps shrink as (step + tau)^-kappa, with no averaging: on small minibatches the
        # noise of the windows' means is far above tol (0.013 nats per point with 20 rows of
        # 2,000), and the rule alone was met by chance 0.01 nats below the optimum.
        noise_bound=True,
        objective="ELBO",
        advice="Lower the step size (a larger tau or kappa).",
        slow_advice=(
            "Raise num_steps, or let the steps shrink more slowly (a smaller kappa in "
            "step_size=(tau, kappa), above 0.5 on minibatches), or raise tol."
        ),
    )

    def unsupported(self, spec) -> str | None:
        updates = spec.updates
        if updates is None or not updates.natural_gradient:
            return (
                f"model {spec.name!r} declares no natural-gradient steps "
                "(ClosedFormUpdates(natural_gradient=True))"
            )
        return None

    def init(self, problem: Problem, options: NaturalOptions) -> NaturalState:
        tau, kappa = check_step_size(options.step_size)
        source = problem.source
        if source is None:  # data in memory: minibatches of the arrays
            source = streaming.make_source(
                problem.spec,
                problem.data,
                batch_size=options.batch_size,
                num_data=None,
                seed=problem.seed,
                num_steps=problem.num_steps,
            )
        updates, back = problem.spec.updates, problem.backend
        xp, config = back.ops, problem.backend_config()
        first = problem.data  # the whole data in memory, else the first minibatch
        start = updates.initial_point(
            problem.spec.name, first, problem.config, problem.init, problem.seed
        )
        scale = problem.num_data / len(next(iter(first.values())))
        # The start is compiled as the steps are: JAX would otherwise compile each of its
        # operations on its own (seconds for a mixture).
        key = updates.module
        init = back.compile_step(
            lambda cf, d, s, scale: updates.init_natural(d, s, cf, xp, scale),
            config,
            (key, "init_cache and init_natural_state"),
        )
        inner, context = init(
            problem.backend_data(),
            None if start is None else back.asarray(start, problem.device, problem.dtype),
            scale,
        )
        compiled_step = back.compile_step(
            lambda cf, inner, context, batch, rho, scale: updates.natural_step(
                inner, context, batch, cf, xp, rho, scale
            ),
            config,
            (key, "init_cache and natural_step"),
        )

        def step(inner, batch, rho, scale):
            return compiled_step(inner, context, batch, rho, scale)

        bound = NaturalBound(problem, source, step)
        return NaturalState(bound, inner, context, tau=tau, kappa=kappa)

    def step_size(self, state: NaturalState, step: int) -> float:
        return float((step + 1 + state.tau) ** -state.kappa)

    def step(self, state: NaturalState):
        p = state.problem
        batch = state.source.batch(state.step)
        rho = self.step_size(state, state.step)
        rows = len(next(iter(batch.values())))
        inner, objective = state.bound.update(
            state.inner,
            {k: p.backend.asarray(v, p.device, p.dtype) for k, v in batch.items()},
            rho,
            p.num_data / rows,
        )
        new = dataclasses.replace(state, inner=inner, step=state.step + 1)
        return new, NaturalInfo(objective=float(objective), step_size=rho)

    def get_params(self, state: NaturalState) -> dict[str, np.ndarray]:
        backend = state.problem.backend
        raw = state.problem.spec.updates.natural_raw_params(state.inner, state.context, backend.ops)
        return {k: backend.to_numpy(v) for k, v in raw.items()}


def full_elbo(result, data, backend: str | None = None, chunk: int = 100_000) -> float:
    """The exact ELBO (nats, summed over ``data``) of a fitted result of closed-form updates that
    ascend the ELBO (coordinate-ascent or natural-gradient VI), with q(z) optimal given the
    fitted global factors; ``data`` is read in chunks (a memory-mapped array is fine)."""
    spec = result.spec
    back = get_backend(backend or result.backend)
    device = back.resolve_device("cpu")
    if not isinstance(data, dict):  # one array, for a model with one data key
        (key,) = spec.data
        data = {key: data}
    config = back.backend_config(result.config, device, "float64")
    num_rows = len(next(iter(data.values())))

    def chunks():
        for start in range(0, num_rows, chunk):
            yield {k: np.asarray(v[start : start + chunk]) for k, v in data.items()}
            for v in data.values():
                streaming.release(v)

    return spec.updates.exact_elbo(
        result.raw_params,
        config,
        chunks(),
        back.ops,
        lambda a: back.asarray(a, device, "float64"),
    )
