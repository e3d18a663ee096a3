"""What an SVI engine is built with, the same record for both backends."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class SVISetup:
    """An SVI engine's settings (``pyro_backend.SVIEngine``, ``numpyro_backend.SVIEngine``).

    The SVI algorithm makes one from its options (``SVIOptions``) and the problem: a field named
    like an option (``num_particles``, ``data_parallel``, ``jit``) takes the option's value
    (``from_options``), the others are worked out by ``SVI.init``. An option the engine reads is
    therefore declared once, in ``SVIOptions``, and received here under the same name.

    Parameters
    ----------
    elbo : {"enum", "trace", "meanfield", "iwae"}
        The objective: ``"enum"`` sums the guide's discrete latents out (``TraceEnum_ELBO``).
    lr : float or learning_rate.Stages
        Adam's learning rate, parsed.
    seed : int
        Of the engine's own random stream.
    device :
        The backend's device.
    num_particles : int
        Monte-Carlo samples per step.
    init_temperature : float, optional
        A relaxed guide's (or a model's schedule's) temperature at the first step.
    data_parallel : bool
        Split each step's rows over devices (NumPyro) or over a ``torch.distributed`` group
        (Pyro).
    batch_rows : int, optional
        The rows of a minibatch drawn from data in memory (None: all rows, or a stream's).
    jit : bool
        Pyro: compile the ELBO with ``torch.jit.trace``. NumPyro always compiles.
    compile_key : optional
        NumPyro: what the model and guide are, under which compiled functions are kept for the
        process (None: compile for this engine only).
    start : dict, optional
        Starting values of ``param`` sites, by name (NumPyro passes them to its compiled
        functions as arguments; Pyro's are already in the model and guide).
    persist : bool
        NumPyro: also keep the compiled functions on disk (a model of the zoo's own).
    dtype : {"float64", "float32"}
        Of the data and parameters. NumPyro traces a float32 fit's functions with JAX's 64-bit
        mode off, so that nothing in them computes in float64.
    """

    elbo: str
    lr: Any
    seed: int
    device: Any
    num_particles: int = 1
    init_temperature: float | None = None
    data_parallel: bool = False
    batch_rows: int | None = None
    jit: bool = False
    compile_key: Any = None
    start: dict | None = None
    persist: bool = False
    dtype: str = "float64"

    @classmethod
    def from_options(cls, options, **derived) -> SVISetup:
        """The setup with every field that ``options`` has by name taken from it, the rest from
        ``derived``."""
        names = {f.name for f in dataclasses.fields(cls)}
        given = {f.name: getattr(options, f.name) for f in dataclasses.fields(options)}
        return cls(**{**{k: v for k, v in given.items() if k in names}, **derived})


def start_outside_support(name: str) -> str:
    """What an engine says of a starting value that its parameter's constraint refuses."""
    return (
        f"The starting value of parameter {name!r} (init[{name!r}] where given) lies outside "
        "the parameter's support: a scale or concentration not positive, a Cholesky factor "
        "whose diagonal is not positive, weights that do not sum to one. init takes values "
        "as a fit's raw_params hold them (constrained), of the same model."
    )
