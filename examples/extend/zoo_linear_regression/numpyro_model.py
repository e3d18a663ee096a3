"""NumPyro twin of the Bayesian linear regression: the same sites, plates and parameter names as
``pyro_model.py``, so the two backends fit the same model and share parameters."""

from __future__ import annotations

import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.distributions import constraints

from zoo.distributions import scale_free_lower_cholesky

INIT_SCALE = 0.1  # where the guides' scales start (see pyro_model.py)


def model(data, config, temperature=None, init=None):
    """``temperature`` and ``init`` are part of every zoo model's signature; this model has no
    relaxed sites and no ``param`` sites, so it ignores them."""
    x, y = data["x"], data["y"]
    zeros = jnp.zeros(x.shape[-1], dtype=x.dtype)
    coef = numpyro.sample("coef", dist.Normal(zeros, config.prior_precision**-0.5).to_event(1))
    with numpyro.plate("data", x.shape[0]):
        numpyro.sample("y", dist.Normal((x * coef).sum(-1), config.noise_scale), obs=y)


def make_guide(name, config, init):
    """``guide(data, config, temperature=None)`` for SVI; see ``pyro_model.make_guide``."""
    init = init or {}
    if name not in ("full_rank", "mean_field"):
        raise ValueError(f"Unknown guide {name!r}; valid guides are ['full_rank', 'mean_field'].")

    def param(param_name, default, constraint):
        """``numpyro.param(param_name)``, starting from ``init[param_name]`` if given."""
        if param_name not in init:
            return numpyro.param(param_name, default, constraint=constraint)
        # jnp.asarray makes an immutable JAX array of its own from a NumPy array (read-only or
        # not), so no copy is needed here; it also takes traced JAX arrays, which np.array does
        # not.
        value = jnp.asarray(init[param_name], dtype=default.dtype)
        return numpyro.param(param_name, value, constraint=constraint)

    def guide(data, config, temperature=None):
        x = data["x"]
        d = x.shape[-1]
        loc = param("coef_loc", jnp.zeros(d, dtype=x.dtype), constraints.real)
        if name == "full_rank":
            eye = jnp.eye(d, dtype=x.dtype)
            tril = param("coef_scale_tril", INIT_SCALE * eye, scale_free_lower_cholesky)
            numpyro.sample("coef", dist.MultivariateNormal(loc, scale_tril=tril))
        else:
            ones = jnp.ones(d, dtype=x.dtype)
            scale = param("coef_scale", INIT_SCALE * ones, constraints.positive)
            numpyro.sample("coef", dist.Normal(loc, scale).to_event(1))

    return guide
