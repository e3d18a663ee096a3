"""Pyro twin of the VAE: torch networks registered with ``pyro.module``."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
from torch import nn

from zoo.plates import pyro_data_plate as data_plate
from zoo.torch_distributions import Normal, StandardNormal
from zoo.weights import torch_module

_ACTIVATIONS = {"tanh": torch.tanh, "relu": torch.relu, "softplus": nn.functional.softplus}


class MLP(nn.Module):
    """``hidden`` Linear layers, each followed by the activation; inputs may have any batch dims."""

    def __init__(self, sizes, activation):
        super().__init__()
        self.hidden = nn.ModuleList(
            nn.Linear(a, b) for a, b in zip(sizes[:-1], sizes[1:], strict=True)
        )
        self.activation = _ACTIVATIONS[activation]

    def forward(self, h):
        for layer in self.hidden:
            h = self.activation(layer(h))
        return h


class Encoder(nn.Module):
    """x (..., D) -> loc, scale (..., L) of q(z | x)."""

    def __init__(self, config):
        super().__init__()
        self.body = MLP((config.num_pixels, *config.hidden), config.activation)
        self.loc = nn.Linear(config.hidden[-1], config.latent_dim)
        self.log_scale = nn.Linear(config.hidden[-1], config.latent_dim)

    def forward(self, x):
        h = self.body(x)
        return self.loc(h), torch.exp(self.log_scale(h))


class Decoder(nn.Module):
    """z (..., L) -> Bernoulli logits (..., D)."""

    def __init__(self, config):
        super().__init__()
        self.body = MLP((config.latent_dim, *reversed(config.hidden)), config.activation)
        self.logits = nn.Linear(config.hidden[0], config.num_pixels)

    def forward(self, z):
        return self.logits(self.body(z))


def _network(cls, name, config, init, like):
    """Build ``cls`` on the data's device and dtype, from ``init`` (zoo parameter names) if given;
    otherwise torch's default initialisation from the current random stream."""
    if not init:
        return cls(config).to(device=like.device, dtype=like.dtype)
    return torch_module(lambda: cls(config), name, init, like, config)


def make_model(config, init=None):
    """The model with its decoder built once, at the first call, where the data live."""
    nets = {}

    def model(data, config, temperature=None, num_data=None):
        x = data["x"]
        if "decoder" not in nets:
            nets["decoder"] = _network(Decoder, "decoder", config, init, x)
            # The prior's parameters, made once with the decoder (see StandardNormal).
            nets["prior"] = x.new_zeros(()), x.new_ones(())
        decoder = pyro.module("decoder", nets["decoder"])
        zero, one = nets["prior"]
        with data_plate(x.shape[0], num_data):
            prior = StandardNormal(zero, one).expand([config.latent_dim]).to_event(1)
            z = pyro.sample("z", prior)
            pixels = dist.Bernoulli(logits=decoder(z), validate_args=False)  # prepare() checked x
            pyro.sample("x", pixels.to_event(1), obs=x)

    return model


def make_guide(name, config, init=None):
    """``"amortized"``: q(z_n | x_n) = Normal(loc(x_n), scale(x_n)) from the encoder."""
    if name != "amortized":
        raise ValueError(f"Unknown guide {name!r} for 'vae'; valid guides are ['amortized'].")
    nets = {}

    def guide(data, config, temperature=None, num_data=None):
        x = data["x"]
        if "encoder" not in nets:
            nets["encoder"] = _network(Encoder, "encoder", config, init, x)
        loc, scale = pyro.module("encoder", nets["encoder"])(x)
        with data_plate(x.shape[0], num_data):
            # (the zoo's Normal: Pyro's, with a compiled draw of one operation)
            pyro.sample("z", Normal(loc, scale).to_event(1))

    return guide
