"""Pyro's closed-form updates replayed from a CUDA graph on a GPU.

A Pyro CAVI iteration of the Bayesian GMM is about 145 kernel launches, most of them on the
(K, D, D) parameters, and on a GPU its time is the host's time to issue them: on an NVIDIA H100,
3.3 ms at N = 1,000 as at N = 1,000,000, where the kernels themselves take about 1.2 ms. A CUDA
graph records the launches of one update once and replays them with one call: 0.57 ms at
N = 1,000 and 1.44 ms at N = 1,000,000 in float64, to the same ELBO in every digit
(``benchmarks/cavi_cuda_graph.py``; docs/results/gpu.md).

:class:`GraphedUpdate` wraps ``update(state, *constants)``. At its first call on CUDA tensors it
runs the update twice eagerly (its first result, and a warm-up) and records a third run on a
copy of ``state``. Each later call copies its ``state`` into that copy, replays the graph and
returns a copy of the outputs, so that a result stays valid after the next replay. The
``constants`` (the features and their statistics) must be the objects the graph was recorded
with: they are read in place, never copied. A state of another structure, or other
constants, runs eagerly.

The graph is recorded with torch's cuSOLVER linear algebra, whose batched Cholesky solve a graph
can hold (MAGMA's cannot: with ``torch.backends.cuda.preferred_linalg_library("magma")`` the
update runs eagerly). An update that cannot be recorded (one that reads a value on the host, for
example) runs eagerly from then on, with a one-line warning; a recording that fails part-way can
leave torch's CUDA random numbers unusable in the process, so such an update is better run with
``ZOO_CUDA_GRAPHS=0``, which turns the graphs off.
"""

from __future__ import annotations

import os
import warnings

import torch
from torch.utils import _pytree as pytree


def enabled() -> bool:
    """Whether closed-form updates on a GPU are replayed from CUDA graphs (``ZOO_CUDA_GRAPHS``,
    on unless ``0``)."""
    return os.environ.get("ZOO_CUDA_GRAPHS", "1") != "0"


def record_on_cuda(call, device):
    """``call()`` run twice eagerly on a side stream (torch's advice before recording; the
    first result is kept), then recorded as a CUDA graph: (first result, the graph's replay,
    the recorded outputs). Recorded with cuSOLVER unless the user chose a library."""
    linalg = torch.backends.cuda
    chosen = linalg.preferred_linalg_library()
    if chosen == torch._C._LinalgBackend.Magma:  # checked first: a failed recording can leave
        # torch's CUDA random numbers unusable in this process
        raise RuntimeError("MAGMA's batched Cholesky solve cannot be recorded in a CUDA graph")
    if chosen == torch._C._LinalgBackend.Default:
        linalg.preferred_linalg_library("cusolver")
    try:
        # On ``device``, not the current GPU: a graph records only its capture stream's
        # launches, and torch's default capture stream lies on the GPU current when torch first
        # made it (on cuda:1 an update's kernels would go to cuda:1's stream and the graph
        # would replay nothing).
        with torch.cuda.device(device):
            side = torch.cuda.Stream(device)
            side.wait_stream(torch.cuda.current_stream(device))
            with torch.cuda.stream(side):
                first = call()
                call()
            torch.cuda.current_stream(device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, stream=side):
                outputs = call()
    finally:
        linalg.preferred_linalg_library(chosen)
    return first, graph.replay, outputs


class GraphedUpdate:
    """``update(state, *constants)``, replayed from a CUDA graph where its tensors are on a GPU
    (see the module's docstring); elsewhere ``update`` itself."""

    def __init__(self, update, name: str = "update", record=None):
        self.update, self.name = update, name
        self.record = record_on_cuda if record is None else record
        self.eager = not enabled()
        self.replay = None

    def __call__(self, state, *constants):
        if self.eager:
            return self.update(state, *constants)
        if self.replay is None:
            return self._first_call(state, constants)
        leaves, spec = pytree.tree_flatten(state)
        if not self._fits(leaves, spec, constants):
            return self.update(state, *constants)
        for target, value in zip(self.static_leaves, leaves, strict=True):
            target.copy_(value)
        self.replay()
        return pytree.tree_map(lambda x: x.clone() if _is_tensor(x) else x, self.outputs)

    def _first_call(self, state, constants):
        leaves, spec = pytree.tree_flatten(state)
        device = _cuda_device(leaves)
        if device is None:  # not on a GPU: nothing to replay
            self.eager = True
            return self.update(state, *constants)
        static_leaves = [x.clone() if _is_tensor(x) else x for x in leaves]
        static = pytree.tree_unflatten(static_leaves, spec)
        try:
            first, replay, outputs = self.record(lambda: self.update(static, *constants), device)
        except Exception as err:  # a call a graph cannot hold: the update runs eagerly
            self.eager = True
            warnings.warn(
                f"{self.name} could not be recorded as a CUDA graph and runs eagerly, one "
                f"kernel launch at a time ({type(err).__name__}: {str(err).strip()[:200]}). "
                "Set ZOO_CUDA_GRAPHS=0 to skip the attempt.",
                RuntimeWarning,
                stacklevel=3,
            )
            return self.update(state, *constants)
        self.replay, self.outputs, self.constants = replay, outputs, constants
        self.spec, self.static_leaves = spec, static_leaves
        return first

    def _fits(self, leaves, spec, constants) -> bool:
        """Whether the graph computes ``update(state, *constants)``: the same constants, a state
        of the same structure, shapes and dtypes, and the same values where not tensors."""
        if len(constants) != len(self.constants) or spec != self.spec:
            return False
        if any(a is not b for a, b in zip(constants, self.constants, strict=True)):
            return False
        for recorded, value in zip(self.static_leaves, leaves, strict=True):
            if _is_tensor(recorded):
                same = _is_tensor(value) and (recorded.shape, recorded.dtype) == (
                    value.shape,
                    value.dtype,
                )
            else:
                same = recorded == value
            if not same:
                return False
        return True


def _is_tensor(x) -> bool:
    return isinstance(x, torch.Tensor)


def _cuda_device(leaves):
    """The CUDA device of the state's tensors, or None if any is elsewhere (or none is a
    tensor)."""
    devices = {x.device for x in leaves if _is_tensor(x)}
    if len(devices) != 1:
        return None
    (device,) = devices
    return device if device.type == "cuda" else None
