"""Pyro twin of the Bayesian linear regression: the model and its two Gaussian guides.

It names every sample site and plate as ``numpyro_model.py`` does; the zoo checks that when it
registers the model. Do not call this file ``pyro.py``: ``import pyro`` would find it.
"""

from __future__ import annotations

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro.distributions import constraints

from zoo.torch_distributions import scale_free_lower_cholesky

# The guides start narrow, as Pyro's autoguides do (init_scale=0.1): from a wide start the
# reparameterised gradients are noisy and SVI takes many more steps to settle.
INIT_SCALE = 0.1


def model(data, config, temperature=None, init=None):
    """``temperature`` and ``init`` are part of every zoo model's signature; this model has no
    relaxed sites and no ``param`` sites, so it ignores them."""
    x, y = data["x"], data["y"]
    # Every tensor is built like the data, so a fit on another device or dtype just works.
    zeros = torch.zeros(x.shape[-1], dtype=x.dtype, device=x.device)
    # One event of size D (not a plate): the coefficients are one latent vector, so a guide may
    # correlate them.
    coef = pyro.sample("coef", dist.Normal(zeros, config.prior_precision**-0.5).to_event(1))
    with pyro.plate("data", x.shape[0]):
        # (x * coef).sum(-1) rather than x @ coef, so a batch of draws of coef broadcasts too.
        pyro.sample("y", dist.Normal((x * coef).sum(-1), config.noise_scale), obs=y)


def make_guide(name, config, init):
    """``guide(data, config, temperature=None)`` for SVI. ``init`` holds starting values by
    parameter name (e.g. another fit's ``raw_params``); by default the guide starts at zero with
    scale ``INIT_SCALE``."""
    init = init or {}
    if name not in ("full_rank", "mean_field"):
        raise ValueError(f"Unknown guide {name!r}; valid guides are ['full_rank', 'mean_field'].")

    def param(param_name, default, constraint):
        """``pyro.param(param_name)``, starting from ``init[param_name]`` if given."""
        if param_name not in init:
            return pyro.param(param_name, default, constraint=constraint)
        value = init[param_name]
        # A copy (np.array), made once, when the parameter is created. torch.as_tensor alone
        # may share init's array, and the optimiser updates parameters in place: a read-only
        # array (a NumPyro fit's raw_params) makes torch warn, and a writable one (a Pyro fit's
        # raw_params) would be overwritten by this fit.
        return pyro.param(
            param_name,
            lambda: torch.as_tensor(np.array(value), dtype=default.dtype, device=default.device),
            constraint=constraint,
        )

    def guide(data, config, temperature=None):
        x = data["x"]
        like = dict(dtype=x.dtype, device=x.device)
        d = x.shape[-1]
        loc = param("coef_loc", torch.zeros(d, **like), constraints.real)
        if name == "full_rank":  # q(coef) = MultivariateNormal: the exact posterior's family
            # The factor's off-diagonal entries move relative to their row's diagonal: the
            # more rows, the narrower the posterior, and steps of a fixed size would swamp it.
            tril = param(
                "coef_scale_tril", INIT_SCALE * torch.eye(d, **like), scale_free_lower_cholesky
            )
            pyro.sample("coef", dist.MultivariateNormal(loc, scale_tril=tril))
        else:  # independent coefficients: the right means, too small variances when correlated
            scale = param("coef_scale", INIT_SCALE * torch.ones(d, **like), constraints.positive)
            pyro.sample("coef", dist.Normal(loc, scale).to_event(1))

    return guide
