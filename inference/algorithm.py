"""The contract every algorithm meets: what it declares about itself, and how it steps.

An algorithm is one module that defines a subclass of :class:`Algorithm` and registers an
instance (``inference.registry``). Everything the facade (``fit``), the loop, the result,
``compare``, the command line and the conformance suite need to know about it comes from that
instance: its name, its options (a frozen dataclass whose ``__post_init__`` validates them),
its :class:`Traits`, which models it supports (from what a model's spec declares, never from
the model's name), ``init``/``step`` and its info record, and what a result keeps.

States are values: ``step(state)`` returns a new state and leaves the one it was given as it
was (so the loop can keep the last good state when a step's objective is not finite). A state
names the fields a checkpoint holds (``saved_fields``: arrays, a step count, small plain values);
the problem, the engine and compiled functions live in a ``bound`` object ``init`` makes, never
saved (``inference.persistence.state_tree``). The one exception is owned by a backend, not by an
algorithm: Pyro keeps parameters and optimiser moments in torch tensors that its step updates in
place, so a Pyro SVI state's arrays are a handle to them.
"""

from __future__ import annotations

import dataclasses
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import Any, ClassVar, NamedTuple

import numpy as np

from inference.persistence import state_tree
from zoo.options import check_types, did_you_mean
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
    noise_bound : bool
        The stopping rule of a stochastic objective also asks that its two windows' means be
        known to within ``tol``: where the standard error of their difference is above it, the
        rule cannot tell a run that has converged from one still rising, and the run goes on
        (to warn at ``num_steps`` that the noise hid it). For an algorithm whose steps do not
        settle the iterates on their own (natural-gradient SVI on small minibatches); SVI's
        stages of learning rates and their averaged iterates do.
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
    slow_advice : str, optional
        What to try when a run used all its steps before its stopping rule was met (default:
        raise ``num_steps`` or ``tol``, and for a stochastic objective lower the learning rate).
    short_run : callable, optional
        ``num_steps -> fit arguments`` of a short run of about ``num_steps`` steps (the
        conformance suite's), where ``{"num_steps": num_steps}`` does not suit (a sampler's
        length is set by its options).
    """

    stochastic: bool
    minibatch: bool
    num_steps: int
    tol: float | None
    objective: str
    window: int = 500
    noise_bound: bool = False
    must_improve: bool = True
    estimate: str = "posterior"
    dtype: str = "float64"
    advice: str = ""
    short_run: Callable[[int], dict] | None = None
    slow_advice: str | None = None

    def __post_init__(self):
        # The layer branches on estimate by its value (a sampler's draws, a closed-form
        # posterior): a value it does not know would send a fit down the wrong path later.
        if self.estimate not in ESTIMATES:
            hint = did_you_mean(self.estimate, ESTIMATES) if isinstance(self.estimate, str) else ""
            raise ValueError(
                f"Traits.estimate must be one of {list(ESTIMATES)}; got {self.estimate!r}.{hint}"
            )


#: What a fit of an algorithm gives (:attr:`Traits.estimate`): a posterior (variational), a
#: point estimate, or a sampler's draws.
ESTIMATES = ("posterior", "point", "draws")


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
    """One inference algorithm (see the module): the contract the layer steps it through.

    An algorithm writes four methods and sets three class attributes:

    * ``name``, :attr:`Options` (a frozen dataclass of its options) and :attr:`traits`;
    * :meth:`unsupported` (which models it fits), :meth:`init` (the first state of a
      :class:`Problem`), :meth:`step` (``state -> (new state, info)``) and :meth:`get_params`
      (the fitted parameters of a state).

    A state names the fields a checkpoint holds in its class's ``saved_fields``; the loop saves
    and restores them (``inference.persistence.state_tree``). :meth:`save_state` and
    :meth:`load_state` are optional hooks for an algorithm that saves its states its own way
    (their defaults take the same path, or call the older contract's ``state_dict`` and
    ``load_state_dict``).
    :meth:`supports`, :meth:`options` and :meth:`option_names` are derived from the rest and
    are not written.

    What the layer around an algorithm reads besides is data, never a method to write:

    * on its :class:`Traits`: its defaults, what it estimates, a conformance run's arguments
      (``short_run``);
    * on its options (optional, where the options alone decide them): ``num_steps``, a length
      the options fix (a sampler's warm-up and draws); ``check_length(num_steps, tol)``;
      ``ignores(spec, backend, name)``, why a given option has no effect; and
      ``prepare_data(spec, data, seed)``, the data the fit runs on;
    * on its state (each optional, with the default in brackets; :data:`STATE_FACTS`):
      ``guide`` (None), ``record`` ({}: the options as a result and a checkpoint record them),
      ``rule_start`` (0: the step from which the stopping rule may end a run), ``noise_bound``
      (False: the stopping rule also asks that the objective's noise be below ``tol``, as
      ``Traits.noise_bound`` does for every run), ``extendable``
      (True: a resumed run may ask for more steps), ``lead`` (True) and ``processes`` (1: a
      data-parallel group), ``state_layout`` (None, the first; else the revision, from 2, of
      what its checkpoints hold, raised when that changes: a checkpoint of another layout is
      refused, not misread),
      ``unsaveable`` (None, else why it cannot be checkpointed),
      ``posterior_draws`` (None, else a sampler's ``(draws, sample statistics)``),
      ``outside_support`` (the names of finite parameters outside their constraint) and
      ``exact_objective`` (False: a stochastic algorithm's objective is, in this run, exact
      and the same function at every step, so a run that ends below its start is told so);
    * on its info record: ``progress``, what the progress bar shows after the step.

    An algorithm written against the older, wider contract (a method for each of these, such
    as ``guide(state)`` or ``describe(info)``) still runs: where a state or options do not say,
    the layer calls the algorithm's method of the older name, when it has one.
    """

    #: The name ``fit(..., algorithm=name)`` takes.
    name: ClassVar[str]
    #: A frozen dataclass of the algorithm's own options with their defaults; its
    #: ``__post_init__`` raises ``ValueError``/``TypeError`` naming the option, what was given
    #: and what is allowed.
    Options: ClassVar[type] = NoOptions
    traits: ClassVar[Traits]

    @abstractmethod
    def unsupported(self, spec: ModelSpec) -> str | None:
        """None when the algorithm can fit ``spec``; else why not, in a sentence (read from
        what the spec declares: guides, closed-form updates, networks)."""

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

    def save_state(self, state) -> tuple[dict, dict[str, np.ndarray]]:
        """``(JSON-able skeleton, arrays)`` of what a checkpoint must hold to resume ``state``.

        Not written by an algorithm whose states name their ``saved_fields``: the loop saves
        those fields itself (``inference.persistence.state_tree``), and so does this default.
        A plugin may define it (with :meth:`load_state`) to save its states its own way."""
        older = getattr(self, "state_dict", None)
        if older is not None:
            return older(state)
        if not state_tree.is_value(state):
            raise NotImplementedError(f"algorithm {self.name!r} does not save its states")
        return state_tree.save(state)

    def load_state(self, state, skeleton: dict, arrays: dict) -> Any:
        """``state`` (a fresh one from :meth:`init`) with what :meth:`save_state` saved put
        back (a new state)."""
        older = getattr(self, "load_state_dict", None)
        if older is not None:
            return older(state, skeleton, arrays)
        if not state_tree.is_value(state):
            raise NotImplementedError(f"algorithm {self.name!r} does not load its states")
        return state_tree.restore(state, state_tree.read(skeleton, arrays, state))

    # --- derived: never written by an algorithm -------------------------------------------------

    def supports(self, spec: ModelSpec) -> bool:
        return self.unsupported(spec) is None

    def options(self, given: dict) -> Any:
        """The algorithm's :attr:`Options` from the options a caller gave (validated: first the
        types the fields of :attr:`Options` are annotated with, then its ``__post_init__``)."""
        check_types(self.Options, given, f"algorithm {self.name!r}")
        return self.Options(**given)

    def option_names(self) -> tuple[str, ...]:
        return tuple(f.name for f in dataclasses.fields(self.Options))


#: What the layer reads from a state, with its value where the state does not say (see
#: :class:`Algorithm`), and the method an algorithm of the older contract answered it with.
STATE_FACTS = {
    "guide": (None, "guide"),
    "rule_start": (0, "rule_start"),
    "noise_bound": (False, "noise_bound"),
    "extendable": (True, "extendable"),
    "lead": (True, "lead"),
    "processes": (1, "processes"),
    "state_layout": (None, "state_layout"),
    "unsaveable": (None, "unsaveable"),
    "posterior_draws": (None, "draws"),
    "outside_support": ((), "parameters_outside_support"),
    "exact_objective": (False, "exact_objective"),
}


def state_fact(alg, state, name: str):
    """What ``state`` says of ``name`` (:data:`STATE_FACTS`); where it does not, the answer of
    the algorithm's method of the older contract, if it has one, else the default."""
    if hasattr(state, name):
        return getattr(state, name)
    default, older = STATE_FACTS[name]
    method = getattr(alg, older, None)
    return method(state) if callable(method) else default


def rule_start(alg, state) -> int:
    """The step from which a stochastic objective's stopping rule counts (SVI's last
    learning-rate stage, :data:`STATE_FACTS`); 0 for an exact objective."""
    return state_fact(alg, state, "rule_start") if alg.traits.stochastic else 0


def noise_bound(alg, state) -> bool:
    """Whether a stochastic objective's stopping rule also asks that its noise be below
    ``tol`` (``Traits.noise_bound``): always for an algorithm that says so, else where the
    state says so (SVI drawing minibatches, whose sampling noise can make a rising objective's
    gain look below ``tol`` by chance)."""
    if not alg.traits.stochastic:
        return False
    return alg.traits.noise_bound or bool(state_fact(alg, state, "noise_bound"))


def run_record(alg, options, state) -> dict:
    """The options as a result and a checkpoint record them (JSON-able; a checkpoint whose
    record differs belongs to another run): the state's ``record``, else the older contract's
    ``record(options, state)``, else none."""
    if hasattr(state, "record"):
        return state.record
    method = getattr(alg, "record", None)
    return method(options, state) if callable(method) else {}


def _options_hook(alg, options, name: str):
    """The options' own ``name`` (bound), else a bound method of the older contract that took
    the options as an argument, else None."""
    own = getattr(options, name, None)
    if callable(own):
        return own
    older = getattr(alg, {"num_steps": "default_num_steps"}.get(name, name), None)
    if not callable(older):
        return None
    if name == "ignores":
        return lambda spec, backend, option: older(spec, backend, options, option)
    if name == "prepare_data":
        return lambda spec, data, seed: older(spec, data, options, seed)
    return lambda *args: older(options, *args)


def default_num_steps(alg, options) -> int:
    """How many steps a fit takes when neither the caller nor the model names a number: what
    the options fix (``options.num_steps``), else the algorithm's default."""
    fixed = getattr(options, "num_steps", None)
    if fixed is None:
        older = _options_hook(alg, options, "num_steps")
        fixed = older() if older is not None else None
    return alg.traits.num_steps if fixed is None else int(fixed)


def check_length(alg, options, num_steps, tol) -> None:
    """Raise ``ValueError`` when a ``num_steps`` or ``tol`` the caller gave does not suit the
    options (``options.check_length``: a sampler's steps are fixed by its warm-up and draws)."""
    hook = _options_hook(alg, options, "check_length")
    if hook is not None:
        hook(num_steps, tol)


def ignores(alg, spec: ModelSpec, backend: str, options, name: str) -> str | None:
    """Why the option ``name`` has no effect on a fit of ``spec`` with these ``options``
    (``options.ignores``), or None when it has one (``fit`` refuses it given; ``compare`` does
    not pass it to such runs)."""
    hook = _options_hook(alg, options, "ignores")
    return None if hook is None else hook(spec, backend, name)


def prepare_data(alg, spec: ModelSpec, data, options, seed: int):
    """The data the fit runs on, from the data the caller gave (``options.prepare_data``:
    dynamic binarization), before they are checked."""
    hook = _options_hook(alg, options, "prepare_data")
    return data if hook is None else hook(spec, data, seed)


def progress_text(alg, info) -> str | None:
    """What the progress bar shows after a step with ``info``: the record's ``progress``, else
    the older contract's ``describe(info)``; None: the objective per data point."""
    if hasattr(info, "progress"):
        return info.progress
    older = getattr(alg, "describe", None)
    return older(info) if callable(older) else None


def posterior_family(spec: ModelSpec, traits: Traits, guide: str | None) -> str | None:
    """The name of a fit's posterior family for the model's ``sample_posterior``: its guide,
    else (for closed-form updates) the updates' family; None for a sampler's draws."""
    if traits.estimate == "draws":
        return None
    if guide is not None or spec.updates is None:
        return guide
    return spec.updates.posterior_family


def check_int(name: str, value, low: int = 1) -> int:
    """``value`` as an int ``>= low``, or a ``ValueError`` in the words of the others."""
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < low:
        raise ValueError(f"{name} must be an int in the range [{low}, inf); got {value!r}.")
    return int(value)


def check_choice(name: str, value, choices) -> Any:
    if value not in choices:
        hint = did_you_mean(value, choices) if isinstance(value, str) else ""
        raise ValueError(f"{name} must be one of {list(choices)}; got {value!r}.{hint}")
    return value
