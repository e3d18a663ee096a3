"""Coordinate updates in closed form: coordinate-ascent VI (``"cavi"``) and EM (``"em"``).

Both run the model's own updates (``spec.updates``, a ``zoo.ClosedFormUpdates``), written once
against the array namespace ``xp`` of ``zoo.array_namespace``: eagerly on torch, jit-compiled
on JAX. They differ in what the updates ascend, which the model declares: the ELBO (CAVI gives
a variational posterior) or a log-likelihood or log joint (EM gives a point estimate). A
mixture's updates start from the initial responsibilities every algorithm of a comparison
shares (``init``); other models from their own starting point.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from inference.algorithm import Algorithm, Info, Problem, Traits
from inference.backends import get_backend


@dataclass(frozen=True)
class ClosedFormOptions:
    """The options of CAVI and EM.

    Parameters
    ----------
    jit : bool
        Pyro: compile the update with ``torch.compile``, which fuses its chains of elementwise
        operations into fewer kernels (NumPyro always compiles). The first iteration then takes
        seconds longer, the later ones less time, to the same objective to rounding: on a 2-core
        CPU, 0.90x the uncompiled time of a Bayesian GMM sweep at N = 100,000 and 0.63x at
        N = 1,000 (docs/algorithms/cavi.md). An update the compiler cannot handle runs
        uncompiled, with a warning.
    """

    jit: bool = False


@dataclass(frozen=True)
class ClosedFormBound:
    """What a closed-form state is stepped with, made by ``init`` and never saved."""

    problem: Problem
    cache: Any  # derived from the data once
    update: Any  # the compiled update
    runs_ahead: bool = False  # queue the next update before reading an objective (a GPU)


@dataclass(frozen=True)
class Ahead:
    """The next update, queued from ``source`` before the objective of the update that made
    ``source`` was read: its (state, objective), backend arrays still being computed."""

    source: Any
    result: tuple


@dataclass(frozen=True)
class ClosedFormState:
    bound: ClosedFormBound = dataclasses.field(compare=False, repr=False)
    inner: Any = None  # the model's state pytree (backend arrays)
    step: int = 0
    ahead: Ahead | None = dataclasses.field(default=None, compare=False, repr=False)

    #: What a checkpoint holds (``inference.persistence.state_tree``).
    saved_fields: ClassVar[tuple[str, ...]] = ("inner", "step")

    @property
    def problem(self) -> Problem:
        return self.bound.problem


class _ClosedForm(Algorithm):
    """The driver both share; a subclass says which updates it runs (``traits.estimate``)."""

    def unsupported(self, spec) -> str | None:
        updates = spec.updates
        if updates is None:
            return f"model {spec.name!r} declares no closed-form updates (ModelSpec.updates)"
        if updates.estimate != self.traits.estimate:
            return (
                f"the closed-form updates of {spec.name!r} ascend its {updates.objective}, "
                f"which gives a {updates.estimate} estimate, not a {self.traits.estimate} one"
            )
        return None

    def init(self, problem: Problem, options) -> ClosedFormState:
        updates = problem.spec.updates
        module, xp = updates.load(), problem.backend.ops
        config = problem.backend_config()
        start = updates.initial_point(
            problem.spec.name, problem.data, problem.config, problem.init, problem.seed
        )
        if start is not None:
            start = problem.backend.asarray(start, problem.device, problem.dtype)
        # The start is compiled as the update is: JAX would otherwise compile each of its
        # operations on its own (seconds for a mixture).
        compile_step, key = problem.backend.compile_step, updates.module
        init = compile_step(
            lambda cf, d, s: updates.init(d, s, cf, xp), config, (key, "init_cache and init_state")
        )
        inner, cache = init(problem.backend_data(), start)
        update = compile_step(
            lambda cf, s, c: module.update(s, c, cf, xp), config, (key, "update"), jit=options.jit
        )
        ahead = problem.backend.runs_ahead(problem.device)
        return ClosedFormState(ClosedFormBound(problem, cache, update, ahead), inner=inner)

    def step(self, state: ClosedFormState):
        """One update. Where the device runs ahead of the host (a GPU), the update after it is
        queued before its objective is read, so that the device computes it while the host
        waits for the number and goes round the loop: a small problem's iteration on a GPU
        otherwise costs the host's time to queue it plus the device's time to run it. The
        queued update is the one the next step takes, so every figure is what it would be
        without it; a run that stops here discards it."""
        bound, ahead = state.bound, state.ahead
        if ahead is not None and ahead.source is state.inner:
            inner, objective = ahead.result
        else:
            inner, objective = bound.update(state.inner, bound.cache)
        read = bound.problem.backend.start_read(objective)
        new = dataclasses.replace(
            state, inner=inner, step=state.step + 1, ahead=_queue_next(bound, inner)
        )
        return new, Info(objective=read())

    def get_params(self, state: ClosedFormState) -> dict[str, np.ndarray]:
        backend = state.problem.backend
        raw = state.problem.spec.updates.raw_params(state.inner, state.bound.cache, backend.ops)
        return {k: backend.to_numpy(v) for k, v in raw.items()}


def _queue_next(bound: ClosedFormBound, inner) -> Ahead | None:
    """The update from ``inner``, queued now where the device runs ahead of the host; else
    None. An update that fails here is left for the next step to run again, where the failure
    is that step's (the run's loop then names the step and keeps the last good parameters)."""
    if not bound.runs_ahead:
        return None
    try:
        return Ahead(inner, bound.update(inner, bound.cache))
    except Exception:
        return None


class CAVI(_ClosedForm):
    """Coordinate-ascent variational inference on updates that ascend the ELBO."""

    name = "cavi"
    Options = ClosedFormOptions
    # float64: matching reference implementations (scikit-learn) to 1e-6 needs it.
    traits = Traits(stochastic=False, minibatch=False, num_steps=500, tol=1e-6, objective="ELBO")


class EM(_ClosedForm):
    """Expectation-maximisation on updates that ascend a log-likelihood or log joint."""

    name = "em"
    Options = ClosedFormOptions
    traits = Traits(
        stochastic=False,
        minibatch=False,
        num_steps=500,
        tol=1e-6,
        objective="log-likelihood",
        estimate="point",
    )


def start_values(problem: Problem, init) -> dict[str, np.ndarray] | None:
    """SVI guides' starting values (numpy) after one closed-form update from the initial
    responsibilities ``init`` selects, for models whose updates start from them; else None.

    Computed in float64 on the problem's backend and device.
    """
    updates = problem.spec.updates
    if updates is None or updates.start != "responsibilities":
        return None
    back, device = problem.backend, problem.device
    start = updates.initial_point(
        problem.spec.name, problem.data, problem.config, init, problem.seed
    )
    return updates.guide_start(
        problem.data,
        start,
        back.backend_config(problem.config, device, "float64"),
        back.ops,
        lambda a: back.asarray(a, device, "float64"),
        back.to_numpy,
        advice=problem.spec.numerical_advice,
        compile_step=back.compile_step,
    )


def summed_out_elbo(result, data: dict, num_samples: int = 100, seed: int = 0) -> float:
    """The ELBO of a fit's global factors with the discrete latents summed out, in nats (sum
    over the rows of ``data``): ``E_q[log p(x | theta)] - KL(q(theta) || p(theta))``, the
    expectation over ``num_samples`` draws of q(theta) seeded by ``seed``, computed by the
    model's updates (``summed_out_elbo``: the Bayesian GMM's estimates only its gap above the
    mean-field ELBO, which it computes exactly).

    It is the objective SVI's enumerated guides are scored by, so a comparison puts CAVI's and
    natural-gradient VI's global factors on the same bound as SVI's. For the same q(theta) it
    is at least the mean-field ELBO that CAVI ascends and reports, whose factor q(z) is one of
    the choices the sum improves on: in expectation in general, and at every draw for the
    Bayesian GMM's estimate, which estimates only the gap above the mean-field ELBO.
    """
    updates = _summed_out_updates(result)
    spec = result.spec
    data = spec.validate_data(data)
    spec.check_against_fit(data, result.config)
    back, config = _on_cpu(result)
    rng = np.random.default_rng(seed)
    return updates.summed_out_elbo(result.raw_params, config, data, rng, num_samples, back)


def global_kl(result) -> float:
    """KL(q(theta) || p(theta)) in nats of the global factors of a variational fit by
    closed-form updates whose module defines ``global_kl``, computed in float64 on the CPU."""
    updates = _summed_out_updates(result)
    back, config = _on_cpu(result)
    return updates.global_kl(result.raw_params, config, back)


def _on_cpu(result):
    """``(backend, config)``: the backend of ``result`` and its config on the CPU in float64."""
    back = get_backend(result.backend)
    return back, back.backend_config(result.config, back.resolve_device("cpu"), "float64")


def _summed_out_updates(result):
    """The closed-form updates of ``result``'s model, which give the summed-out ELBO of its
    global factors; an error where they do not, or the fit's posterior is not their family."""
    updates = result.spec.updates
    if updates is None or not updates.has_summed_out_elbo:
        raise ValueError(
            f"Model {result.model!r} defines no summed_out_elbo and global_kl for its "
            "closed-form updates, so its ELBO with the discrete latents summed out cannot be "
            "computed here."
        )
    if result.guide_family != updates.posterior_family:
        raise ValueError(
            f"The fit's posterior is of the family {result.guide_family!r}, not that of the "
            f"closed-form updates of {result.model!r} ({updates.posterior_family!r}), so its "
            "ELBO with the discrete latents summed out cannot be computed here."
        )
    return updates
