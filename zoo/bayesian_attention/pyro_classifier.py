"""Pyro twin of ``bam_classifier``: a torch transformer registered with ``pyro.module``.

See :mod:`zoo.bayesian_attention.classifier` for the model. The network ``net`` is shared by the
model (prior draws of the attention weights, class likelihood) and the guide (posterior draws);
both hold their own copy and ``pyro.module(..., update_module_params=True)`` makes them use the
parameter store's tensors, so one set of parameters is trained.
"""

from __future__ import annotations

import contextlib

import numpy as np
import pyro
import pyro.distributions as dist
import torch
from pyro import poutine
from torch import nn

from zoo.bayesian_attention._common import (
    GuidePass,
    remember_guide_pass,
    replay_guide_pass,
    take_guide_pass,
)
from zoo.bayesian_attention.classifier import temperature_schedule  # SVI's hook
from zoo.bayesian_attention.torch_bam import (
    ContextualPrior,
    attention_logits,
    lognormal_log_weights,
    masked_log_softmax,
    weibull_log_weights,
)
from zoo.bayesian_attention.torch_distributions import (
    GammaAttention,
    LogNormalAttention,
    WeibullAttention,
    log_of_draw,
)
from zoo.plates import pyro_data_plate as data_plate
from zoo.weights import torch_module

__all__ = [
    "temperature_schedule",
    "Transformer",
    "class_logits",
    "features",
    "make_guide",
    "make_model",
    "network",
    "patchify",
    "posterior",
    "predict_proba",
    "prior",
]

#: The KL warm-up is fixed in steps, not spread over the fit: a resumed fit may be extended.
SCHEDULE_SPANS_STEPS = False


# ------------------------------------------------------------------------------ the network


class Attention(nn.Module):
    """Projections of one multi-head attention layer and, for a contextual prior, its network."""

    def __init__(self, config):
        super().__init__()
        w = config.width
        self.q, self.k, self.v, self.out = (nn.Linear(w, w) for _ in range(4))
        if config.contextual:
            self.prior = ContextualPrior(config.head_dim, config.prior_hidden)


class MLP(nn.Module):
    def __init__(self, config):
        super().__init__()
        self.fc1 = nn.Linear(config.width, config.mlp_dim)
        self.fc2 = nn.Linear(config.mlp_dim, config.width)

    def forward(self, h):
        return self.fc2(nn.functional.gelu(self.fc1(h)))


class Block(nn.Module):
    """Pre-norm transformer block: ``h + attention(norm1(h))``, then ``h + mlp(norm2(h))``."""

    def __init__(self, config):
        super().__init__()
        self.norm1 = nn.LayerNorm(config.width)
        self.attn = Attention(config)
        self.norm2 = nn.LayerNorm(config.width)
        self.mlp = MLP(config)


class Transformer(nn.Module):
    """Patch embedding, position embedding, blocks, final norm and class head."""

    def __init__(self, config):
        super().__init__()
        self.embed = nn.Linear(config.patch_dim, config.width)
        self.pos = nn.Parameter(0.02 * torch.randn(config.num_tokens, config.width))
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.num_layers))
        self.norm = nn.LayerNorm(config.width)
        self.head = nn.Linear(config.width, config.num_classes)


def patchify(x: torch.Tensor, config) -> torch.Tensor:
    """Images (..., side * side) -> patch tokens (..., tokens, patch_size^2), row-major."""
    g, p = config.grid, config.patch_size
    lead = x.shape[:-1]
    x = x.reshape(*lead, g, p, g, p).transpose(-3, -2)
    return x.reshape(*lead, g * g, p * p)


def _split_heads(h, num_heads):
    """(..., L, W) -> (..., H, L, W / H)."""
    return h.reshape(*h.shape[:-1], num_heads, -1).transpose(-3, -2)


def _merge_heads(o):
    """(..., H, L, Dh) -> (..., L, H * Dh)."""
    o = o.transpose(-3, -2)
    return o.reshape(*o.shape[:-2], -1)


def features(net: Transformer, x: torch.Tensor, config, attend):
    """Token states after the blocks, shape (..., tokens, width).

    ``attend(layer, attn, q, k, v) -> (..., heads, tokens, head_dim)`` computes every attention
    layer (``q``, ``k``, ``v``: (..., heads, tokens, head_dim)); it may add batch dimensions on
    the left (particles, Monte-Carlo draws), which then broadcast through the rest.
    """
    h = net.embed(patchify(x, config)) + net.pos
    for i, block in enumerate(net.blocks):
        a = block.norm1(h)
        attn = block.attn
        q, k, v = (_split_heads(f(a), config.num_heads) for f in (attn.q, attn.k, attn.v))
        h = h + attn.out(_merge_heads(attend(i, attn, q, k, v)))
        h = h + block.mlp(block.norm2(h))
    return h


def class_logits(net: Transformer, h: torch.Tensor) -> torch.Tensor:
    """Class logits (..., num_classes) from the token states: mean token, norm, linear head."""
    return net.head(net.norm(h).mean(-2))


def network(config, init, like) -> Transformer:
    """The transformer on ``like``'s device and dtype, from ``init`` (``net.*`` parameter names)
    if given; otherwise torch's default initialisation from the current random stream."""
    if not init:
        return Transformer(config).to(device=like.device, dtype=like.dtype)
    return torch_module(lambda: Transformer(config), "net", init, like, config)


# ------------------------------------------------------------------------------ distributions


def _mask(config, like):
    """The config's attention mask as a bool tensor (tokens, tokens), or None."""
    if config.attention_mask is None:
        return None
    return torch.as_tensor(config.attention_mask, device=like.device).bool()


def prior(config, attn: Attention, k, logits, mask):
    """p(S) of one layer, batch shape ``logits.shape[:-3]``, event (heads, tokens, tokens).

    Built unvalidated (``validate_args=False``): its parameters are positive by construction and
    its values come from the guide's (positive) draws; the checks cost a device sync each."""
    shape = logits.shape
    contextual = config.prior == "contextual"
    if contextual:
        log_w = attn.prior.log_weights(k, mask)  # (..., H, 1 or Lq, Lk); -inf on hidden keys
    if config.attention == "weibull":
        if contextual:
            alpha = log_w.exp().clamp_min(torch.finfo(logits.dtype).tiny)
            if mask is not None:
                alpha = torch.where(mask, alpha, 1.0)
        else:
            alpha = logits.new_tensor(config.prior_alpha)
        return GammaAttention(alpha, config.prior_beta, shape, mask, validate_args=False)
    if config.attention == "lognormal":
        if contextual:
            log_m = log_w
        elif config.prior_mean is not None:
            log_m = torch.log(logits.new_tensor(config.prior_mean))
        else:  # uniform over the visible keys
            visible = shape[-1] if mask is None else mask.sum(-1, keepdim=True)
            log_m = -torch.log(torch.as_tensor(visible, dtype=logits.dtype, device=logits.device))
        if mask is not None:  # a finite stand-in on hidden keys (masked out of log-densities)
            log_m = torch.where(mask, log_m, 0.0)
        return LogNormalAttention(log_m, config.prior_sigma, shape, mask, validate_args=False)
    raise ValueError(f"attention {config.attention!r} has no latent weights.")


def posterior(config, logits, mask):
    """q(S | logits) of one layer: mean the (masked) softmax ``p``; reparameterised."""
    if config.attention == "weibull":
        return WeibullAttention(logits, config.concentration, mask, validate_args=False)
    if config.attention != "lognormal":
        raise ValueError(f"attention {config.attention!r} has no latent weights.")
    log_p = masked_log_softmax(logits, mask)
    if mask is not None:  # a finite stand-in on hidden keys (masked out of log-densities)
        log_p = torch.where(mask, log_p, 0.0)
    return LogNormalAttention(log_p, config.sigma, logits.shape, mask, validate_args=False)


def _normalize(s, mask):
    """Attention weights ``S / sum_keys S`` over the visible keys (in log space)."""
    log_s = log_of_draw(s)
    if mask is not None:
        log_s = torch.where(mask, log_s, -torch.inf)
    return torch.softmax(log_s, -1)


def _kl_scale(config, temperature):
    """The KL weight's scale handler: ``temperature`` (SVI's step-dependent value) if given,
    else the config's ``kl_weight``."""
    weight = config.kl_weight if temperature is None else temperature
    if not isinstance(weight, torch.Tensor) and weight == 1.0:
        return contextlib.nullcontext()
    return poutine.scale(scale=weight)


def _registered(nets, config, init, like):
    if "net" not in nets:
        nets["net"] = network(config, init, like)
    return pyro.module("net", nets["net"], update_module_params=True)


# ------------------------------------------------------------------------------ model and guide


def make_model(config, init=None):
    """The model; its network is built once, at the first call, where the data live."""
    nets = {}

    def model(data, config, temperature=None, num_data=None):
        x, y = data["x"], data["y"]
        mask = _mask(config, x)
        draws = []  # attention sites already drawn

        def sample_prior(i, attn, k, logits):
            with _kl_scale(config, temperature):
                return pyro.sample(f"attention_{i}", prior(config, attn, k, logits, mask))

        def attend(i, attn, q, k, v):
            logits = attention_logits(q, k)
            if config.attention == "softmax":
                return masked_log_softmax(logits, mask).exp() @ v
            s = draws[i] if i < len(draws) else sample_prior(i, attn, k, logits)
            return _normalize(s, mask) @ v

        with data_plate(x.shape[0], num_data):
            logits = None
            if config.attention != "softmax":
                record = take_guide_pass(x)
                logits = replay_guide_pass(record, sample_prior, draws)
            if logits is None:  # no pass to reuse: the model's own
                net = _registered(nets, config, init, x)
                logits = class_logits(net, features(net, x, config, attend))
            labels = dist.Categorical(logits=logits, validate_args=False)  # prepare() checked y
            pyro.sample("y", labels, obs=y.long())

    return model


def make_guide(name, config, init=None):
    """``"amortized"``: q(S_l | x, S_<l) from the network's own attention logits (empty for
    softmax attention). The guide runs the whole network and leaves its pass
    (:class:`~zoo.bayesian_attention._common.GuidePass`) for the model that replays its draws."""
    if name != "amortized":
        raise ValueError(
            f"Unknown guide {name!r} for 'bam_classifier'; valid guides are ['amortized']."
        )
    nets = {}

    def guide(data, config, temperature=None, num_data=None):
        if config.attention == "softmax":
            return
        x = data["x"]
        net = _registered(nets, config, init, x)
        mask = _mask(config, x)
        record = GuidePass(x, net.blocks)

        def attend(i, attn, q, k, v):
            logits = attention_logits(q, k)
            with _kl_scale(config, temperature):
                s = pyro.sample(f"attention_{i}", posterior(config, logits, mask))
            record.keys.append(k)
            record.logits.append(logits)
            record.draws.append(s)
            return _normalize(s, mask) @ v

        with data_plate(x.shape[0], num_data):
            record.class_logits = class_logits(net, features(net, x, config, attend))
        remember_guide_pass(record)

    return guide


# ------------------------------------------------------------------------------ prediction


def predict_proba(
    params, x, config, *, num_samples, method, seed, batch_size, device, dtype
) -> np.ndarray:
    """Class probabilities (N, C), numpy float64; see ``classifier.predict_proba``."""
    like = torch.empty((), dtype=getattr(torch, dtype), device=device)
    net = network(config, params, like)
    mask = _mask(config, like)
    draws = method == "mc" and config.attention != "softmax"
    generator = torch.Generator(device=device).manual_seed(seed)

    def attend(i, attn, q, k, v):
        logits = attention_logits(q, k)
        log_p = masked_log_softmax(logits, mask)
        if not draws:
            return log_p.exp() @ v
        if mask is not None:
            log_p = torch.where(mask, log_p, 0.0)
        if config.attention == "weibull":
            u = torch.rand(logits.shape, generator=generator, dtype=like.dtype, device=device)
            log_s = weibull_log_weights(log_p, config.concentration, u)
        else:
            eps = torch.randn(logits.shape, generator=generator, dtype=like.dtype, device=device)
            log_s = lognormal_log_weights(log_p, config.sigma, eps)
        if mask is not None:
            log_s = torch.where(mask, log_s, -torch.inf)
        return torch.softmax(log_s, -1) @ v

    out = []
    with torch.no_grad():
        for start in range(0, len(x), batch_size):
            xb = torch.as_tensor(x[start : start + batch_size], dtype=like.dtype, device=device)
            if draws:
                xb = xb.expand(num_samples, *xb.shape)
            probs = torch.softmax(class_logits(net, features(net, xb, config, attend)), -1)
            out.append((probs.mean(0) if draws else probs).cpu().numpy().astype(np.float64))
    return np.concatenate(out) if out else np.zeros((0, config.num_classes))
