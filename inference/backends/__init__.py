"""Backend adapters: one module per backend (devices, arrays, seeding, the SVI engine), each
imported only when a fit first asks for it, so a Pyro fit never imports JAX and the reverse."""

from __future__ import annotations

import importlib

from inference.backends import forking
from zoo import BACKENDS
from zoo.options import did_you_mean


def get_backend(name: str):
    """The adapter module of backend ``name`` (``"pyro"`` or ``"numpyro"``)."""
    if name not in BACKENDS:
        raise ValueError(
            f"Unknown backend {name!r}; valid backends are {list(BACKENDS)}."
            + did_you_mean(name, BACKENDS)
        )
    forking.check(name)
    return importlib.import_module(f"inference.backends.{name}_backend")
