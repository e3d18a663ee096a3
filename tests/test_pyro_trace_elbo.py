"""``inference.backends.pyro_trace_elbo``: Pyro's compiled Monte-Carlo ELBO, whose graph sums
its loss once for a reparameterised guide, gives Pyro's loss, surrogate loss and gradients bit
for bit, with and without score-function terms, in fewer operations."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import JitTrace_ELBO

from inference.backends.pyro_trace_elbo import JitTraceELBO

pytestmark = [
    pytest.mark.filterwarnings("ignore:`torch.jit.trace` is deprecated:DeprecationWarning"),
]

DATA = torch.tensor([0.3, -1.2, 2.0, 0.7], dtype=torch.float64)


def model(data, discrete=False):
    loc = pyro.sample("loc", dist.Normal(0.0, 2.0))
    rate = pyro.sample("rate", dist.Gamma(2.0, 1.0))
    with pyro.plate("data", len(data)):
        pyro.sample("x", dist.Normal(loc, 1.0 / rate.sqrt()), obs=data)


def guide(data, discrete=False):
    loc_mean = pyro.param("loc_mean", torch.tensor(0.1, dtype=torch.float64))
    log_rate = pyro.param("log_rate", torch.tensor(0.2, dtype=torch.float64))
    pyro.sample("loc", dist.Normal(loc_mean, 0.5))
    pyro.sample("rate", dist.LogNormal(log_rate, 0.3))
    pyro.sample("aux", dist.Normal(0.0, 1.0), infer={"is_auxiliary": True})
    if discrete:  # a site without a reparameterised draw: a score-function term
        pyro.sample("coin", dist.Bernoulli(torch.sigmoid(loc_mean)), infer={"is_auxiliary": True})


def _losses_and_grads(elbo, discrete):
    """The losses and gradients of the call that traces the graph, then of the graph's."""
    pyro.clear_param_store()
    out = []
    for seed in (0, 1):
        torch.manual_seed(seed)
        loss, surrogate = elbo.loss_and_surrogate_loss(model, guide, DATA, discrete=discrete)
        params = [pyro.param("loc_mean").unconstrained(), pyro.param("log_rate").unconstrained()]
        out.append((loss.detach(), surrogate.detach(), torch.autograd.grad(surrogate, params)))
    return out


class _Operations(torch.utils._python_dispatch.TorchDispatchMode):
    """Counts the operations dispatched (views left out)."""

    def __init__(self):
        super().__init__()
        self.count = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.count += not func.is_view
        return func(*args, **(kwargs or {}))


@pytest.mark.parametrize("validate", [False, True])
@pytest.mark.parametrize("num_particles", [1, 3])
@pytest.mark.parametrize("discrete", [False, True])
def test_same_losses_and_gradients_as_pyro_bit_for_bit(discrete, num_particles, validate):
    options = {"num_particles": num_particles, "ignore_jit_warnings": True}
    with pyro.validation_enabled(validate), torch.jit.optimized_execution(False):
        expected = _losses_and_grads(JitTrace_ELBO(**options), discrete)
        ours = _losses_and_grads(JitTraceELBO(**options), discrete)
    for (loss, surrogate, grads), pyros in zip(ours, expected, strict=True):
        assert torch.equal(loss, pyros[0]) and torch.equal(surrogate, pyros[1])
        assert all(map(torch.equal, grads, pyros[2]))
        # with a score-function term the surrogate is another number than the loss
        assert torch.equal(loss, surrogate) is not discrete


def test_a_reparameterised_guides_graph_computes_the_loss_once():
    """A compiled step (after the call that traces) with fewer operations than Pyro's, the
    same loss and gradients, on the graph executor the zoo's Pyro fits run (not the optimising
    one, whose passes would merge some of Pyro's repeated operations)."""
    counts, results = [], []
    with pyro.validation_enabled(False), torch.jit.optimized_execution(False):
        for cls in (JitTrace_ELBO, JitTraceELBO):
            pyro.clear_param_store()
            elbo = cls(ignore_jit_warnings=True)
            torch.manual_seed(0)
            elbo.loss_and_grads(model, guide, DATA)  # traces the graph
            params = [pyro.param(n).unconstrained() for n in ("loc_mean", "log_rate")]
            for param in params:
                param.grad = None
            torch.manual_seed(1)
            with _Operations() as operations:
                loss = elbo.loss_and_grads(model, guide, DATA)
            counts.append(operations.count)
            results.append((loss, [param.grad for param in params]))
    assert counts[1] <= counts[0] - 5, counts
    assert results[1][0] == results[0][0]
    assert all(map(torch.equal, results[1][1], results[0][1]))
