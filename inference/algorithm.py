"""The contract every algorithm meets: what it declares about itself, and how it steps.

An algorithm is one module that defines a subclass of :class:`Algorithm` and registers an
instance (``inference.registry``). Everything the facade (``fit``), the loop, the result,
``compare``, the command line and the conformance suite need to know about it comes from that
instance: its name, its options (a frozen dataclass whose ``__post_init__`` validates them),
its :class:`Traits`, which models it supports (from what a model's spec declares, never from
the model's name), ``init``/``step`` and its info record, and what a result keeps.

States are values: ``step(state)`` returns a new state and leaves the one it was given as it
was (so the loop can keep the last good state when a step's objective is not finite). The one
exception is owned by a backend, not by an algorithm: Pyro keeps parameters and optimiser
moments in torch tensors that its step updates in place, so a Pyro SVI state is a handle to
them.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from dataclasses import dataclass
from types import ModuleType
from typing import Any, ClassVar, NamedTuple

import numpy as np

from zoo.options import check_types
from zoo.spec import ModelSpec


class Info(NamedTuple):
    """What every step reports, at least. ``objective``: what the algorithm ascends (its
    :attr:`Traits.objective`), in nats, summed over data points. An algorithm may report more
    in a record of its own with an ``objective`` field (SVI: the temperature; natural-gradient
    SVI: the step size); the loop reads ``objective``, a ``callback`` sees the whole record."""

    objective: float


@dataclass(frozen=True)
class Traits:
    """What an algorithm is, as the layer around it reads it.

    stochastic : bool
        Its objective is a noisy estimate step to step (progress shows a running mean, plots
        smooth it), and its advice on a non-finite objective names the step size.
    minibatch : bool
        It takes data not held in memory (memory-mapped arrays, streams of minibatches); its
        options then have ``batch_size``.
    num_steps, tol :
        Its defaults: at most ``num_steps`` steps; stop when the stopping rule is met with
        ``tol`` (None: never), ``inference.convergence``: an exact objective per data point that
        changes by less than ``tol`` nats in a step; a stochastic one whose mean over the last
        ``window`` steps is less than ``tol`` nats above its mean over the ``window`` before.
    window : int
        A stochastic objective's smoothing window, in steps (see ``tol``).
    objective : str
        What its objective is, in words (``"ELBO"``, ``"log-likelihood"``).
    must_improve : bool
        A short fit's objective rises (the conformance suite checks it).
    estimate : {"posterior", "point", "draws"}
        What a fit gives: a posterior (variational), a point estimate, or draws.
    dtype : str
        The precision a fit uses when neither the caller nor the model names one.
    advice : str
        What to try when its objective turns non-finite (the model adds its own).
    """

    stochastic: bool
    minibatch: bool
    num_steps: int
    tol: float | None
    objective: str
    window: int = 500
    must_improve: bool = True
    estimate: str = "posterior"
    dtype: str = "float64"
    advice: str = ""


@dataclass
class Problem:
    """One model, data set and backend placement, as every algorithm's ``init`` receives it."""

    spec: ModelSpec
    data: dict[str, np.ndarray]  # validated numpy
    config: Any  # the model config, numpy arrays
    backend: ModuleType  # inference.backends.pyro_backend or numpyro_backend
    device: Any
    dtype: str
    seed: int
    # Data not held in memory (``inference.streaming``): ``data`` is then its first minibatch.
    source: Any = None
    num_steps: int = 0  # the fit's step budget (a schedule may be spread over it)
    init: Any = None  # the caller's starting point (responsibilities, parameters, a method)
    given: Any = None  # the data as the caller gave them, before ``Algorithm.prepare_data``

    @property
    def num_data(self) -> int:
        if self.source is not None:
            return self.source.num_data
        return len(next(iter(self.data.values())))

    def backend_data(self) -> dict:
        return {k: self.backend.asarray(v, self.device, self.dtype) for k, v in self.data.items()}

    def backend_config(self):
        return self.backend.backend_config(self.config, self.device, self.dtype)


@dataclass(frozen=True)
class NoOptions:
    """The options of an algorithm that takes none."""


class Algorithm(ABC):
    """One inference algorithm (see the module). Subclasses set the class attributes and
    implement the abstract methods; the others have defaults that suit most algorithms."""

    #: The name ``fit(..., algorithm=name)`` takes.
    name: ClassVar[str]
    #: A frozen dataclass of the algorithm's own options with their defaults; its
    #: ``__post_init__`` raises ``ValueError``/``TypeError`` naming the option, what was given
    #: and what is allowed.
    Options: ClassVar[type] = NoOptions
    traits: ClassVar[Traits]

    # --- what it fits ---------------------------------------------------------------------------

    @abstractmethod
    def unsupported(self, spec: ModelSpec) -> str | None:
        """None when the algorithm can fit ``spec``; else why not, in a sentence (read from
        what the spec declares: guides, closed-form updates, networks)."""

    def supports(self, spec: ModelSpec) -> bool:
        return self.unsupported(spec) is None

    def options(self, given: dict) -> Any:
        """The algorithm's :attr:`Options` from the options a caller gave (validated: first the
        types the fields of :attr:`Options` are annotated with, then its ``__post_init__``)."""
        check_types(self.Options, given, f"algorithm {self.name!r}")
        return self.Options(**given)

    def option_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(self.Options))

    def ignores(self, spec: ModelSpec, backend: str, options: Any, name: str) -> str | None:
        """Why the option ``name`` has no effect on a fit of ``spec`` with these ``options``, or
        None when it has one (``fit`` refuses it given; ``compare`` does not pass it to such
        runs)."""
        return None

    def default_num_steps(self, options: Any) -> int:
        """How many steps a fit takes when the caller names no ``num_steps``."""
        return self.traits.num_steps

    def check_length(self, options: Any, num_steps: int | None, tol: float | None) -> None:
        """Raise ``ValueError`` when a ``num_steps`` or ``tol`` the caller gave does not suit
        these options (a sampler's steps are fixed by its warm-up and sample counts)."""
        return None

    def rule_start(self, state) -> int:
        """The step from which the stopping rule may end a run from ``state`` (SVI: the start
        of the learning rate's last stage; before it, a plateau is the noise floor of a larger
        rate, not the optimum)."""
        return 0

    def short_run(self, num_steps: int) -> dict:
        """The ``fit`` arguments of a short run of about ``num_steps`` steps (the conformance
        suite's)."""
        return {"num_steps": num_steps}

    def prepare_data(self, spec: ModelSpec, data, options: Any, seed: int):
        """The data the fit runs on, from the data the caller gave (before they are checked)."""
        return data

    # --- the steps ------------------------------------------------------------------------------

    @abstractmethod
    def init(self, problem: Problem, options: Any) -> Any:
        """The state before the first step."""

    @abstractmethod
    def step(self, state) -> tuple[Any, Info]:
        """One step: ``(new state, info)``, ``info`` a record with an ``objective`` field;
        ``state`` is left as it was."""

    @abstractmethod
    def get_params(self, state) -> dict[str, np.ndarray]:
        """The fitted parameters (numpy), named as the model's guide or updates name them."""

    def parameters_outside_support(self, state) -> list[str]:
        """The names of the parameters of ``state`` that are finite but outside their
        constraint (a positive value rounded to zero by a step that overshot); none by
        default."""
        return []

    def describe(self, info) -> str | None:
        """What the progress bar shows after a step with this ``info`` (None: the objective
        per data point)."""
        return None

    # --- checkpoints and results ----------------------------------------------------------------

    def unsaveable(self, state) -> str | None:
        """Why a run from ``state`` cannot be checkpointed and resumed exactly (``fit`` refuses
        ``checkpoint=`` with this reason before the first step), or None."""
        return None

    @abstractmethod
    def state_dict(self, state) -> tuple[dict, dict[str, np.ndarray]]:
        """``(JSON-able skeleton, arrays)`` of what a checkpoint must hold to resume ``state``."""

    @abstractmethod
    def load_state_dict(self, state, skeleton: dict, arrays: dict) -> Any:
        """``state`` with what :meth:`state_dict` saved put back (a new state)."""

    def draws(self, state) -> tuple[dict, dict] | None:
        """A sampler's ``(draws, sample statistics)`` so far, numpy arrays of shape
        (chains, draws, ...) by site and statistic; None for an algorithm that fits an
        approximation or a point."""
        return None

    def summarize(self, spec: ModelSpec, raw_params: dict, config, state) -> dict:
        """The user-facing parameters of a result (``FitResult.params``)."""
        return spec.summarize(raw_params, config) if spec.summarize else dict(raw_params)

    def record(self, options: Any, state) -> dict:
        """The options as a result and a checkpoint record them (JSON-able); a checkpoint
        whose record differs belongs to another run."""
        return {}

    def guide(self, state) -> str | None:
        """The guide a fit from ``state`` uses, if any (``FitResult.guide``)."""
        return None

    def extendable(self, state) -> bool:
        """Whether a resumed run may ask for more steps than the run it resumes (nothing in
        the run depends on ``num_steps``)."""
        return True

    def lead(self, state) -> bool:
        """Whether this process writes checkpoints and shows progress (the first process of a
        data-parallel group)."""
        return True

    def processes(self, state) -> int:
        """How many processes share each step (a data-parallel group): a checkpoint of a
        group of another size is another run, as each process draws for its own rows."""
        return 1

    def diagnose(self, result) -> list[str]:
        """What fails in a sampler's convergence diagnostics of ``result``, each in a phrase
        (``fit`` warns with them); empty when all pass, and for algorithms that draw nothing."""
        return []

    def posterior_family(self, result) -> str | None:
        """The name of the fitted posterior's family for the model's ``sample_posterior``."""
        return result.guide

    def comparable_objective(self, result, data: dict) -> float:
        """The final objective that ``compare`` puts beside other runs' (nats, summed)."""
        return result.objective


def check_int(name: str, value, low: int = 1) -> int:
    """``value`` as an int ``>= low``, or a ``ValueError`` in the words of the others."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
        raise ValueError(f"{name} must be an int in the range [{low}, inf); got {value!r}.")
    return int(value)


def check_choice(name: str, value, choices) -> Any:
    if value not in choices:
        raise ValueError(f"{name} must be one of {list(choices)}; got {value!r}.")
    return value
