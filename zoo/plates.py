"""The ``data`` plate of a minibatch, for the twins of models fitted with ``batch_size=``.

The inference layer draws the rows (``inference.minibatch``) and passes the full data size as
``num_data``; the plate spans the rows it got and scales their log-densities by
``num_data / batch_size``, so the ELBO of a minibatch estimates the full-data ELBO. Each backend
is imported only when its plate is used.
"""

from __future__ import annotations

import contextlib


def is_subsample_site(site) -> bool:
    """Whether a trace's sample site is a plate's minibatch bookkeeping rather than a draw (Pyro
    and NumPyro sites alike)."""
    infer = site.get("infer") or {}
    return bool(infer.get("_do_not_trace")) or type(site["fn"]).__name__ == "_Subsample"


@contextlib.contextmanager
def pyro_data_plate(batch_size: int, num_data: int | None):
    import pyro
    from pyro import poutine

    scale = 1.0 if num_data is None else num_data / batch_size
    with pyro.plate("data", batch_size), poutine.scale(scale=scale):
        yield


@contextlib.contextmanager
def numpyro_data_plate(batch_size: int, num_data: int | None):
    import numpyro

    scale = 1.0 if num_data is None else num_data / batch_size
    with numpyro.plate("data", batch_size), numpyro.handlers.scale(scale=scale):
        yield
