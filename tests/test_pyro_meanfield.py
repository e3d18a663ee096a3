"""``inference.backends.pyro_meanfield``: Pyro's mean-field ELBO without the unused
log-densities gives Pyro's value and gradients, with and without closed-form KLs."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import pytest
import torch
from pyro.infer import JitTraceMeanField_ELBO, TraceMeanField_ELBO

from inference.backends.pyro_meanfield import JitMeanFieldELBO, MeanFieldELBO

DATA = torch.tensor([0.3, -1.2, 2.0, 0.7])


def model(data):
    loc = pyro.sample("loc", dist.Normal(0.0, 2.0))  # Normal guide: closed-form KL
    rate = pyro.sample("rate", dist.Gamma(2.0, 1.0))  # LogNormal guide: no closed form in torch
    with pyro.plate("data", len(data)):
        pyro.sample("x", dist.Normal(loc, 1.0 / rate.sqrt()), obs=data)


def guide(data):
    loc_mean = pyro.param("loc_mean", torch.tensor(0.1))
    log_rate = pyro.param("log_rate", torch.tensor(0.2))
    pyro.sample("loc", dist.Normal(loc_mean, 0.5))
    pyro.sample("rate", dist.LogNormal(log_rate, 0.3))
    pyro.sample("aux", dist.Normal(0.0, 1.0), infer={"is_auxiliary": True})


def _loss_and_grads(elbo):
    pyro.clear_param_store()
    torch.manual_seed(0)
    loss = elbo.differentiable_loss(model, guide, DATA)
    params = [pyro.param("loc_mean"), pyro.param("log_rate")]
    grads = torch.autograd.grad(loss, params)
    return loss.detach(), grads


@pytest.mark.filterwarnings("ignore:`torch.jit.trace` is deprecated:DeprecationWarning")
@pytest.mark.parametrize("validate", [False, True])
@pytest.mark.parametrize(
    "ours,pyros", [(MeanFieldELBO, TraceMeanField_ELBO), (JitMeanFieldELBO, JitTraceMeanField_ELBO)]
)
def test_same_value_and_gradients_as_pyro(ours, pyros, validate):
    with pyro.validation_enabled(validate):
        options = {"num_particles": 3}
        if ours is JitMeanFieldELBO:
            options["ignore_jit_warnings"] = True
        expected_loss, expected_grads = _loss_and_grads(pyros(**options))
        loss, grads = _loss_and_grads(ours(**options))
    torch.testing.assert_close(loss, expected_loss)
    for g, e in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(g, e)


def test_only_the_observed_and_open_form_sites_are_scored():
    """Without validation the closed-form site keeps no log-density; Pyro's computes them all."""
    with pyro.validation_enabled(False):
        pyro.clear_param_store()
        model_trace, guide_trace = MeanFieldELBO()._get_trace(model, guide, (DATA,), {})
        MeanFieldELBO()._differentiable_loss_particle(model_trace, guide_trace)
    assert "log_prob" not in model_trace.nodes["loc"]
    assert "log_prob" not in guide_trace.nodes["loc"]
    assert "log_prob" in model_trace.nodes["x"]
    assert "log_prob" in model_trace.nodes["rate"] and "log_prob" in guide_trace.nodes["rate"]
