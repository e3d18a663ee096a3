"""Pyro twin of ``exchangeable_tokens``: the attention network is a torch module registered with
``pyro.module`` (its attention is :class:`zoo.attention.torch_attention.MultiHeadAttention`)."""

from __future__ import annotations

import pyro
import pyro.distributions as dist
import torch
from torch import nn

from zoo.attention import torch_attention
from zoo.plates import pyro_data_plate as data_plate
from zoo.weights import torch_module


class AttentionPosterior(nn.Module):
    """Tokens (..., N, D) -> logits (..., K) of q(z | X): one learned query attends over the
    tokens; the pooled output, times the number of tokens attended, plus ``prior_logits``."""

    def __init__(self, config):
        super().__init__()
        self.attention = torch_attention.MultiHeadAttention(
            config.embed_dim,
            config.num_heads,
            kdim=config.dim,
            vdim=config.dim,
            out_dim=config.K,
        )
        self.query = nn.Parameter(torch.randn(1, config.embed_dim))
        self.prior_logits = nn.Parameter(torch.zeros(config.K))

    def forward(self, x, lengths=None, leave_one_out: bool = False):
        """``lengths`` (...,): tokens per sequence, the rest padding (masked keys). With
        ``leave_one_out``, one query per token j over the other tokens: logits (..., N, K)."""
        n = x.shape[-2]
        count = x.new_tensor(n) if lengths is None else lengths
        mask = None
        if lengths is not None:  # (..., heads, queries, keys)
            mask = (torch.arange(n, device=x.device) < lengths[..., None])[..., None, None, :]
        if leave_one_out:
            others = ~torch.eye(n, dtype=torch.bool, device=x.device)
            mask = others if mask is None else mask & others
            out = self.attention(self.query.expand(n, -1), x, x, mask=mask)
            return (count - 1)[..., None, None] * out + self.prior_logits
        out = self.attention(self.query, x, x, mask=mask)[..., 0, :]
        return count[..., None] * out + self.prior_logits


def _network(config, init, like):
    """The network on the data's device and dtype, from ``init`` (zoo parameter names) if it holds
    them; otherwise torch's default initialisation from the current random stream."""
    prefix = "posterior."
    if not init or not any(k.startswith(prefix) for k in init):
        return AttentionPosterior(config).to(device=like.device, dtype=like.dtype)
    return torch_module(lambda: AttentionPosterior(config), "posterior", init, like, config)


def tokens_given_z(loc, scale, length: int, valid=None):
    """The ``length`` token slots of a sequence given its component mean ``loc`` (..., D): one
    event of shape (N, D), iid Normal(loc, scale^2) tokens; padding slots (``valid`` False) count
    nothing."""
    tokens = dist.Normal(loc.unsqueeze(-2), scale).expand(loc.shape[:-1] + (length, loc.shape[-1]))
    tokens = tokens.to_event(1)
    return (tokens if valid is None else tokens.mask(valid)).to_event(1)


def held_out_tokens(logits, means, scale, valid=None):
    """Each token j given the others: sum_k q(k | X_{-j}) Normal(mu_k, scale^2 I), event (N, D);
    padding slots (``valid`` False) count nothing."""
    components = dist.Normal(means, scale).to_event(1).expand(logits.shape)
    tokens = dist.MixtureSameFamily(dist.Categorical(logits=logits), components)
    return (tokens if valid is None else tokens.mask(valid)).to_event(1)


def _valid(lengths, x):
    """(S, N) bool: the token slots that hold tokens, or None without lengths."""
    if lengths is None:
        return None
    return torch.arange(x.shape[-2], device=x.device) < lengths[..., None]


def make_model(config, init=None):
    """The model of ``config.objective`` (see ``zoo.exchangeable``); the network, where the
    objective puts it in the model, is built once, at the first call, where the data live."""
    nets = {}

    def model(data, config, temperature=None, num_data=None):
        x, lengths = data["x"], data.get("length")
        valid, scale = _valid(lengths, x), x.new_tensor(config.scale)
        if config.objective == "elbo":
            with data_plate(x.shape[0], num_data):
                z = pyro.sample("z", dist.Categorical(probs=config.weights))
                tokens = tokens_given_z(config.means[z], scale, x.shape[-2], valid)
                pyro.sample("x", tokens, obs=x)
            return
        if "posterior" not in nets:
            nets["posterior"] = _network(config, init, x)
        net = pyro.module("posterior", nets["posterior"])
        if config.objective == "supervised":
            logits = net(x, lengths)
            with data_plate(x.shape[0], num_data):
                pyro.sample("z", dist.Categorical(logits=logits), obs=data["z"].long())
        else:  # "masked"
            logits = net(x, lengths, leave_one_out=True)
            with data_plate(x.shape[0], num_data):
                pyro.sample("x", held_out_tokens(logits, config.means, scale, valid), obs=x)

    return model


def make_guide(name, config, init=None):
    """``"attention"``: q(z_s | X_s) = Categorical(softmax(attention logits)) for the ``"elbo"``
    objective, enumerated; the other objectives hold the network in the model, so it is empty."""
    if name != "attention":
        raise ValueError(
            f"Unknown guide {name!r} for 'exchangeable_tokens'; valid guides are ['attention']."
        )
    nets = {}

    def guide(data, config, temperature=None, num_data=None):
        if config.objective != "elbo":
            return
        x = data["x"]
        if "posterior" not in nets:
            nets["posterior"] = _network(config, init, x)
        logits = pyro.module("posterior", nets["posterior"])(x, data.get("length"))
        with data_plate(x.shape[0], num_data):
            pyro.sample("z", dist.Categorical(logits=logits), infer={"enumerate": "parallel"})

    return guide
