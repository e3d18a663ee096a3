"""Fits in a process forked from one that has already computed (``multiprocessing`` and
``concurrent.futures.ProcessPoolExecutor`` fork on Linux by default).

A fork copies the process but not its threads. PyTorch's OpenMP workers are gone in the child,
whose first parallel operation then waits for them forever; with one thread it needs none, so a
forked child's PyTorch runs single-threaded (a pool of processes is the parallelism). JAX's
runtime cannot be rebuilt in a child at all: a NumPyro fit there is refused with the way out, a
pool of processes started by ``spawn``.
"""

from __future__ import annotations

import os
import sys

_jax_was_running = False  # in the process this one was forked from


class ForkedProcessError(RuntimeError):
    """A NumPyro computation in a process forked from one where JAX had already run.

    JAX's runtime holds threads that a fork does not copy, so such a child would wait forever.
    Start worker processes with ``spawn`` instead. Pyro fits run in forked children. A
    ``RuntimeError``.

    Parameters
    ----------
    message : str
        What happened and the start method to use instead.

    Examples
    --------
    NumPyro fits in a pool of processes started by ``spawn``:

    >>> import multiprocessing
    >>> from concurrent.futures import ProcessPoolExecutor
    >>> pool = ProcessPoolExecutor(2, mp_context=multiprocessing.get_context("spawn"))
    >>> pool.shutdown()
    """


def _jax_running() -> bool:
    if "jax" not in sys.modules:
        return False
    try:
        from jax._src import xla_bridge
    except ImportError:  # another layout of JAX's internals: assume the worst
        return True
    return xla_bridge.backends_are_initialized()


def _after_fork_in_child() -> None:
    global _jax_was_running
    _jax_was_running = _jax_running()
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(1)


os.register_at_fork(after_in_child=_after_fork_in_child)


def check(backend: str) -> None:
    """Raise :class:`ForkedProcessError` for ``backend="numpyro"`` in a process forked after JAX
    started; Pyro runs there (single-threaded)."""
    if backend == "numpyro" and _jax_was_running:
        raise ForkedProcessError(
            "This process was forked from one in which JAX had already run, and JAX cannot run "
            "in such a child (its threads are not copied by a fork; it would wait forever). "
            "Start the worker processes with 'spawn': "
            "ProcessPoolExecutor(mp_context=multiprocessing.get_context('spawn')), or "
            "multiprocessing.get_context('spawn').Pool(). Pyro fits run in forked children."
        )
