"""The No-U-Turn sampler (``algorithm="nuts"``): Pyro's and NumPyro's own NUTS kernels.

NUTS draws from the posterior itself rather than fitting an approximation to it, so it is the
reference the other algorithms are measured against (``inference.compare(...,
reference="nuts")``). It samples models whose latent variables are all global, or discrete and
enumerable: the discrete ones (a mixture's ``z``) are summed out of the potential energy, as
SVI's enumerated guides sum them out of the ELBO. A model says it is such a model by declaring
how its sampled sites read as posterior draws (``ModelSpec.draws_from_sites``) and a point of its
sites read from raw parameters (``ModelSpec.sites_from_params``), where a mixture's chains start.

A step of the loop is a chunk of ``chunk_size`` iterations of every chain: the first
``num_warmup`` iterations adapt the step size and the (diagonal or dense) mass matrix and are
discarded, the next ``num_draws`` are kept. Chains of a mixture start from the point the other
algorithms start from (one closed-form update from the k-means responsibilities), so they all
explore the same labelling of the components; others start where the backend's default puts
them (uniform in [-2, 2] in the unconstrained space, each chain its own draw).

The backends' engines (``inference.backends.numpyro_mcmc``, ``inference.backends.pyro_mcmc``)
drive the kernels. A NumPyro run checkpoints and resumes exactly (its kernel state is an array
pytree with its own random key); a Pyro run cannot be checkpointed, and says so when asked.
"""

from __future__ import annotations

import dataclasses
import importlib
import math
from dataclasses import dataclass
from typing import Any, ClassVar, NamedTuple

import numpy as np

from inference.algorithm import Algorithm, Problem, Traits, check_choice, check_int
from inference.algorithms.closed_form import start_values

CHAIN_METHODS = ("sequential", "vectorized")


@dataclass(frozen=True)
class NUTSOptions:
    """NUTS's options.

    Parameters
    ----------
    num_chains : int
        Independent chains (r-hat compares them), ``>= 1``.
    num_warmup : int
        Iterations per chain that adapt the step size and mass matrix (discarded), ``>= 0``.
    num_draws : int
        Draws kept per chain after the warm-up, ``>= 1``.
    target_accept_prob : float
        The acceptance rate the step-size adaptation aims for, in (0, 1).
    max_tree_depth : int
        At most ``2**max_tree_depth - 1`` leapfrog steps per iteration.
    dense_mass : bool
        Adapt a dense mass matrix (else diagonal).
    chain_method : {"sequential", "vectorized"}
        NumPyro: ``"sequential"`` runs chains one after another, as ``numpyro.infer.MCMC``
        does on one device; ``"vectorized"`` advances them together (``vmap``), which suits a
        GPU. Pyro runs them one after another (``"vectorized"`` is an error there).
    chunk_size : int
        Iterations per step of the loop (progress and checkpoints come between steps): a run
        is ``ceil((num_warmup + num_draws) / chunk_size)`` steps.
    """

    num_chains: int = 4
    num_warmup: int = 500
    num_draws: int = 500
    target_accept_prob: float = 0.8
    max_tree_depth: int = 10
    dense_mass: bool = False
    chain_method: str = "sequential"
    chunk_size: int = 50

    def __post_init__(self):
        check_int("num_chains", self.num_chains)
        check_int("num_warmup", self.num_warmup, low=0)
        check_int("num_draws", self.num_draws)
        check_int("max_tree_depth", self.max_tree_depth)
        check_int("chunk_size", self.chunk_size)
        check_choice("chain_method", self.chain_method, CHAIN_METHODS)
        p = self.target_accept_prob
        if isinstance(p, bool) or not isinstance(p, int | float | np.floating) or not 0 < p < 1:
            raise ValueError(f"target_accept_prob must be a float in the range (0, 1); got {p!r}.")
        if not isinstance(self.dense_mass, bool | np.bool_):
            raise TypeError(f"dense_mass must be a bool; got {self.dense_mass!r}.")

    @property
    def num_iterations(self) -> int:
        return self.num_warmup + self.num_draws

    @property
    def num_steps(self) -> int:
        """The run's length, which these options fix: a chunk of iterations per step."""
        return math.ceil(self.num_iterations / self.chunk_size)

    def check_length(self, num_steps, tol) -> None:
        if tol:
            raise ValueError(
                f"tol={tol!r} would stop sampling early; NUTS runs num_warmup + num_draws "
                "iterations per chain."
            )
        if num_steps is not None and num_steps != self.num_steps:
            raise ValueError(
                "NUTS runs num_warmup + num_draws iterations per chain; set those "
                f"(num_warmup={self.num_warmup}, num_draws={self.num_draws}) "
                f"instead of num_steps={num_steps}."
            )

    def ignores(self, spec, backend: str, name: str) -> str | None:
        if name == "chain_method" and backend == "pyro" and self.chain_method != "sequential":
            return "chain_method= is NumPyro's; Pyro's chains run one after another."
        return None


class NUTSInfo(NamedTuple):
    """A chunk's report. ``objective``: the log joint density (unconstrained, Jacobian
    included) at the chains' last draws, averaged over chains; the rest summarise the chunk."""

    objective: float
    phase: str  # "warmup" or "sampling"
    acceptance_rate: float  # mean over chains and the chunk's iterations
    divergences: int  # divergent transitions after the warm-up so far, all chains
    step_size: float  # mean over chains

    @property
    def progress(self) -> str:
        return (
            f"{self.phase}, accept={self.acceptance_rate:.2f}, step={self.step_size:.3g}, "
            f"divergences={self.divergences}"
        )


@dataclass(frozen=True)
class NUTSBound:
    """What a NUTS state is stepped with, made by ``init`` and never saved."""

    problem: Problem
    options: NUTSOptions
    engine: Any  # the backend's NUTSEngine


@dataclass(frozen=True)
class NUTSState:
    bound: NUTSBound = dataclasses.field(compare=False, repr=False)
    # The engine's kernel states: NumPyro's, array pytrees; Pyro's, its kernels themselves,
    # which it advances in place (such a run cannot be checkpointed: ``unsaveable``).
    chains: Any = None
    iteration: int = 0  # iterations done per chain
    draws: tuple = ()  # per chunk after the warm-up: {site: (chains, n, ...)}
    stats: tuple = ()  # per chunk after the warm-up: {statistic: (chains, n)}

    #: What a checkpoint holds (``inference.persistence.state_tree``).
    saved_fields: ClassVar[tuple[str, ...]] = ("chains", "iteration", "draws", "stats")

    @property
    def problem(self) -> Problem:
        return self.bound.problem

    @property
    def options(self) -> NUTSOptions:
        return self.bound.options

    @property
    def engine(self):
        return self.bound.engine

    @property
    def posterior_draws(self) -> tuple[dict, dict]:
        """``(sites, stats)``: the kept draws and their statistics, (chains, draws, ...)."""
        return _concatenate(self.draws), _concatenate(self.stats)

    @property
    def unsaveable(self) -> str | None:
        return self.engine.UNSAVEABLE

    @property
    def record(self) -> dict:
        return dataclasses.asdict(self.options)


def _concatenate(chunks: tuple) -> dict[str, np.ndarray]:
    if not chunks:
        return {}
    return {k: np.concatenate([c[k] for c in chunks], axis=1) for k in chunks[0]}


def _why_not_sampled(spec) -> str:
    tags = set(spec.tags)
    if "maximum-likelihood" in tags:
        return "its parameters have no prior, so there is no posterior to sample"
    reasons = []  # from what the spec declares, so that each holds for this model
    if "local-latent" in tags:
        kind = "" if "discrete-latent" in tags else "continuous and "
        reasons.append(f"its latent variables are {kind}local to each data point")
    if "neural" in tags:
        reasons.append("it holds networks")
    if "amortized" in tags:
        reasons.append("it is fitted through an amortized guide")
    if reasons:
        listed = ", ".join(reasons[:-1]) + (" and " if len(reasons) > 1 else "") + reasons[-1]
        return f"{listed}: NUTS samples a model's latent variables jointly, not a guide"
    return "it does not declare how its sampled sites read as draws"


def _short_run(num_steps: int) -> dict:
    """The options of a conformance run of about ``num_steps`` steps. Shallow trees: early
    warm-up picks poor step sizes, and a check of the contract does not need the 1,023 leapfrog
    steps a depth-10 tree may take per iteration."""
    length = max(num_steps // 4, 5)  # an iteration is a whole trajectory, not one step
    return {"num_chains": 2, "num_warmup": length, "num_draws": length, "max_tree_depth": 4}


class NUTSAlgorithm(Algorithm):
    name = "nuts"
    Options = NUTSOptions
    traits = Traits(
        stochastic=False,
        minibatch=False,
        num_steps=20,  # with the default options; (num_warmup + num_draws) / chunk_size
        tol=None,
        objective="log joint density",
        must_improve=False,
        estimate="draws",
        advice="Raise target_accept_prob, or use float64.",
        short_run=_short_run,
    )

    def unsupported(self, spec) -> str | None:
        if spec.draws_from_sites is None or spec.sites_from_params is None:
            return (
                f"NUTS samples models whose latent variables are all global, or discrete and "
                f"enumerable; model {spec.name!r} is not one: {_why_not_sampled(spec)} "
                "(ModelSpec.draws_from_sites)"
            )
        return None

    def init(self, problem: Problem, options: NUTSOptions) -> NUTSState:
        spec, back = problem.spec, problem.backend
        engines = importlib.import_module(f"inference.backends.{back.NAME}_mcmc")
        config = problem.backend_config()
        start = start_values(problem, problem.init)
        if start is None and problem.init is not None:
            raise ValueError(
                "init= sets where the chains of a mixture start (its initial responsibilities); "
                f"the chains of model {spec.name!r} start where the backend puts them (uniform "
                f"in [-2, 2], unconstrained), so init has no effect. Leave init=None; got "
                f"{problem.init if isinstance(problem.init, str) else type(problem.init).__name__!r}."
            )
        init_sites = None
        if start is not None:
            sites = spec.sites_from_params(start, problem.config)
            init_sites = {
                k: back.asarray(v, problem.device, problem.dtype) for k, v in sites.items()
            }
        engine = engines.NUTSEngine(
            spec.build_model(back.NAME, config),
            problem.backend_data(),
            config,
            init_sites=init_sites,
            options=options,
            seed=problem.seed,
            device=problem.device,
            dtype=problem.dtype,
        )
        return NUTSState(NUTSBound(problem, options, engine), engine.init())

    def step(self, state: NUTSState) -> tuple[NUTSState, NUTSInfo]:
        opts = state.options
        length = min(opts.chunk_size, opts.num_iterations - state.iteration)
        chains, sites, stats = state.engine.run(state.chains, length)
        # A tree of depth d takes up to 2**d - 1 leapfrog steps (ArviZ's tree_depth).
        stats["tree_depth"] = np.ceil(np.log2(stats["n_steps"] + 1.0)).astype(np.int64)
        # Iterations state.iteration .. + length - 1; those from num_warmup on are kept.
        keep = max(0, opts.num_warmup - state.iteration)
        draws, kept_stats = state.draws, state.stats
        if keep < length:
            draws += ({k: v[:, keep:] for k, v in sites.items()},)
            kept_stats += ({k: v[:, keep:] for k, v in stats.items()},)
        iteration = state.iteration + length
        divergences = sum(int(s["diverging"].sum()) for s in kept_stats)
        info = NUTSInfo(
            objective=float(np.mean(stats["lp"][:, -1])),
            phase="warmup" if iteration <= opts.num_warmup else "sampling",
            acceptance_rate=float(np.mean(stats["acceptance_rate"])),
            divergences=divergences,
            step_size=float(np.mean(stats["step_size"][:, -1])),
        )
        new = dataclasses.replace(
            state, chains=chains, iteration=iteration, draws=draws, stats=kept_stats
        )
        return new, info

    def get_params(self, state: NUTSState) -> dict[str, np.ndarray]:
        """The posterior means of the sampled sites (over chains and draws)."""
        return {k: v.mean(axis=(0, 1)) for k, v in state.posterior_draws[0].items()}
