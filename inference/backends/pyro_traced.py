"""The graphs a compiled Pyro ELBO has traced, called without Pyro's per-call wrapper.

Pyro's ``JitTrace*_ELBO`` keeps its graphs in a ``pyro.ops.jit.CompiledFunction``: one per
argument count and keyword values, traced by ``torch.jit.trace`` with the unconstrained
parameters as their first inputs. At every call the wrapper hashes the keyword arguments,
looks each parameter up in the store (through ``pyro.param``, which runs Pyro's handler
stack) and runs the graph under two Pyro handlers that a graph, which holds no Python, never
reaches. On a small model that is about a tenth of a compiled step's time, all of it on the
host (``benchmarks/vae_speed.py`` with a small network; ``docs/results/vae_speed.md``).

:class:`TracedGraphs` lets the wrapper trace each graph, then keeps the graph with the
parameter tensors it takes and calls it directly: the same graph on the same tensors, so the
same numbers, bit for bit. The tensors are the store's own, which the optimiser updates in
place; the engine that steps them keeps them in the store for the whole fit, as it keeps them
in its optimiser.
"""

from __future__ import annotations

import pyro
from pyro.ops.jit import CompiledFunction


class TracedGraphs:
    """The graphs of ``elbo`` (a ``JitTrace*_ELBO``), one per key the caller gives."""

    def __init__(self, elbo):
        self.elbo = elbo
        self.traced = set()  # the keys traced, whether or not their graph is kept
        self.graphs = {}  # key -> (graph, its parameter tensors)

    def trace(self, key, loss_and_grads):
        """``loss_and_grads()``, through Pyro, which traces the graph of ``key`` if it is new;
        that graph is kept for :meth:`loss_and_grads`. Returns what ``loss_and_grads`` does."""
        compiled = self._compiled_function()
        before = set() if compiled is None else set(compiled.compiled)
        value = loss_and_grads()
        compiled = self._compiled_function()
        new = [] if compiled is None else [k for k in compiled.compiled if k not in before]
        if len(new) == 1:  # otherwise no graph is kept, and Pyro's wrapper is called as before
            store = pyro.get_param_store()
            params = tuple(store._params[name] for name in compiled._param_names)
            self.graphs[key] = (compiled.compiled[new[0]], params)
        self.traced.add(key)
        return value

    def loss_and_grads(self, key, inputs) -> float | None:
        """The loss of the graph of ``key`` at ``inputs``, its gradients accumulated into the
        parameters, as Pyro's ``loss_and_grads`` gives them; None if no graph is kept."""
        if key not in self.graphs:
            return None
        graph, params = self.graphs[key]
        out = graph(*params, *inputs)
        # JitTrace_ELBO's graph gives (loss, surrogate loss), whose gradient is the ELBO's;
        # the mean-field and enumerated ELBOs' give one differentiable loss.
        loss, surrogate = out if isinstance(out, tuple) else (out, out)
        surrogate.backward()
        return loss.item()

    def _compiled_function(self) -> CompiledFunction | None:
        """The ELBO's one compiled function (Pyro makes it at the first call), or None."""
        found = [v for v in vars(self.elbo).values() if isinstance(v, CompiledFunction)]
        return found[0] if len(found) == 1 else None
