"""NumPyro twin of the VAE: equinox networks registered with ``numpyro.contrib.module``."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.contrib.module import eqx_module

from zoo.distributions import Normal  # draws in the network's dtype under JAX's x64 mode
from zoo.plates import numpyro_data_plate as data_plate
from zoo.weights import equinox_module

_ACTIVATIONS = {"tanh": jnp.tanh, "relu": jax.nn.relu, "softplus": jax.nn.softplus}


def _linear(h, layer):
    """``eqx.nn.Linear`` maps one vector; this maps any batch dims, torch's (out, in) layout."""
    return h @ layer.weight.T + layer.bias


class MLP(eqx.Module):
    hidden: list
    activation: str = eqx.field(static=True)

    def __init__(self, sizes, activation, dtype, key):
        keys = jax.random.split(key, len(sizes) - 1)
        self.hidden = [
            eqx.nn.Linear(a, b, dtype=dtype, key=k)
            for a, b, k in zip(sizes[:-1], sizes[1:], keys, strict=True)
        ]
        self.activation = activation

    def __call__(self, h):
        for layer in self.hidden:
            h = _ACTIVATIONS[self.activation](_linear(h, layer))
        return h


class Encoder(eqx.Module):
    """x (..., D) -> loc, scale (..., L) of q(z | x)."""

    body: MLP
    loc: eqx.nn.Linear
    log_scale: eqx.nn.Linear

    def __init__(self, config, dtype, key):
        k1, k2, k3 = jax.random.split(key, 3)
        self.body = MLP((config.num_pixels, *config.hidden), config.activation, dtype, k1)
        self.loc = eqx.nn.Linear(config.hidden[-1], config.latent_dim, dtype=dtype, key=k2)
        self.log_scale = eqx.nn.Linear(config.hidden[-1], config.latent_dim, dtype=dtype, key=k3)

    def __call__(self, x):
        h = self.body(x)
        return _linear(h, self.loc), jnp.exp(_linear(h, self.log_scale))


class Decoder(eqx.Module):
    """z (..., L) -> Bernoulli logits (..., D)."""

    body: MLP
    logits: eqx.nn.Linear

    def __init__(self, config, dtype, key):
        k1, k2 = jax.random.split(key)
        self.body = MLP((config.latent_dim, *reversed(config.hidden)), config.activation, dtype, k1)
        self.logits = eqx.nn.Linear(config.hidden[0], config.num_pixels, dtype=dtype, key=k2)

    def __call__(self, z):
        return _linear(self.body(z), self.logits)


def _network(cls, name, config, init, like):
    """Build ``cls`` in the data's dtype, from ``init`` (zoo parameter names) if given; otherwise
    equinox's default initialisation from the model's random key. Built at every call: under
    ``jit`` the parameters come from the optimiser and the unused initialisation is compiled away.
    """
    if not init:
        key = numpyro.prng_key()
        if key is None:
            raise ValueError(f"Building the {name} needs a random key: run under handlers.seed.")
        return cls(config, like.dtype, key)
    return equinox_module(lambda key: cls(config, like.dtype, key), name, init, like.dtype, config)


def make_model(config, init=None):
    def model(data, config, temperature=None, num_data=None):
        x = data["x"]
        decoder = eqx_module("decoder", _network(Decoder, "decoder", config, init, x))
        zero, one = jnp.zeros((), x.dtype), jnp.ones((), x.dtype)
        with data_plate(x.shape[0], num_data):
            z = numpyro.sample("z", dist.Normal(zero, one).expand([config.latent_dim]).to_event(1))
            numpyro.sample("x", dist.Bernoulli(logits=decoder(z)).to_event(1), obs=x)

    return model


def make_guide(name, config, init=None):
    """``"amortized"``: q(z_n | x_n) = Normal(loc(x_n), scale(x_n)) from the encoder."""
    if name != "amortized":
        raise ValueError(f"Unknown guide {name!r} for 'vae'; valid guides are ['amortized'].")

    def guide(data, config, temperature=None, num_data=None):
        x = data["x"]
        loc, scale = eqx_module("encoder", _network(Encoder, "encoder", config, init, x))(x)
        with data_plate(x.shape[0], num_data):
            numpyro.sample("z", Normal(loc, scale).to_event(1))

    return guide
