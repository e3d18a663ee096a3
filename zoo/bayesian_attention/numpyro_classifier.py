"""NumPyro twin of ``bam_classifier``: an equinox transformer registered with ``eqx_module``.

See :mod:`zoo.bayesian_attention.classifier` for the model. The same sites, plates and
parameter names (``net.embed.weight``, ..., ``net.blocks.0.attn.q.weight``, ...) as
:mod:`zoo.bayesian_attention.pyro_classifier`, in torch's ``(out, in)`` layout, so a fit's
``raw_params`` move between backends.
"""

from __future__ import annotations

import contextlib
import dataclasses

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
from numpyro.contrib.module import eqx_module

from zoo.bayesian_attention._common import (
    GuidePass,
    remember_guide_pass,
    replay_guide_pass,
    take_guide_pass,
)
from zoo.bayesian_attention.classifier import temperature_schedule  # SVI's hook
from zoo.bayesian_attention.jax_bam import (
    ContextualPrior,
    attention_logits,
    lognormal_log_weights,
    masked_log_softmax,
    weibull_log_scale,
    weibull_log_weights,
)
from zoo.bayesian_attention.numpyro_distributions import (
    GammaPrior,
    LogNormalFlatNoise,
    LogNormalPrior,
    LogScaleWeibull,
    normal_noise,
    uniform_noise,
)
from zoo.plates import numpyro_data_plate as data_plate
from zoo.weights import equinox_module

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


def _linear(h, layer):
    """``eqx.nn.Linear`` maps one vector; this maps any batch dims, torch's (out, in) layout."""
    return h @ layer.weight.T + layer.bias


class LayerNorm(eqx.Module):
    """``torch.nn.LayerNorm(width)``: biased variance, eps 1e-5, weight and bias."""

    weight: jax.Array
    bias: jax.Array

    def __init__(self, width, dtype):
        self.weight = jnp.ones(width, dtype)
        self.bias = jnp.zeros(width, dtype)

    def __call__(self, h):
        mean = h.mean(-1, keepdims=True)
        var = jnp.square(h - mean).mean(-1, keepdims=True)
        return (h - mean) / jnp.sqrt(var + 1e-5) * self.weight + self.bias


class Attention(eqx.Module):
    q: eqx.nn.Linear
    k: eqx.nn.Linear
    v: eqx.nn.Linear
    out: eqx.nn.Linear
    prior: ContextualPrior | None

    def __init__(self, config, dtype, key):
        keys = jax.random.split(key, 5)
        w = config.width
        self.q, self.k, self.v, self.out = (
            eqx.nn.Linear(w, w, dtype=dtype, key=keys[i]) for i in range(4)
        )
        self.prior = (
            ContextualPrior(config.head_dim, config.prior_hidden, key=keys[4], dtype=dtype)
            if config.contextual
            else None
        )


class MLP(eqx.Module):
    fc1: eqx.nn.Linear
    fc2: eqx.nn.Linear

    def __init__(self, config, dtype, key):
        k1, k2 = jax.random.split(key)
        self.fc1 = eqx.nn.Linear(config.width, config.mlp_dim, dtype=dtype, key=k1)
        self.fc2 = eqx.nn.Linear(config.mlp_dim, config.width, dtype=dtype, key=k2)

    def __call__(self, h):
        return _linear(jax.nn.gelu(_linear(h, self.fc1), approximate=False), self.fc2)


class Block(eqx.Module):
    norm1: LayerNorm
    attn: Attention
    norm2: LayerNorm
    mlp: MLP

    def __init__(self, config, dtype, key):
        k1, k2 = jax.random.split(key)
        self.norm1 = LayerNorm(config.width, dtype)
        self.attn = Attention(config, dtype, k1)
        self.norm2 = LayerNorm(config.width, dtype)
        self.mlp = MLP(config, dtype, k2)


class Transformer(eqx.Module):
    """Patch embedding, position embedding, blocks, final norm and class head."""

    embed: eqx.nn.Linear
    pos: jax.Array
    blocks: list
    norm: LayerNorm
    head: eqx.nn.Linear

    def __init__(self, config, dtype, key):
        keys = jax.random.split(key, config.num_layers + 3)
        self.embed = eqx.nn.Linear(config.patch_dim, config.width, dtype=dtype, key=keys[0])
        self.pos = 0.02 * jax.random.normal(keys[1], (config.num_tokens, config.width), dtype)
        self.blocks = [Block(config, dtype, keys[3 + i]) for i in range(config.num_layers)]
        self.norm = LayerNorm(config.width, dtype)
        self.head = eqx.nn.Linear(config.width, config.num_classes, dtype=dtype, key=keys[2])


def patchify(x, config):
    """Images (..., side * side) -> patch tokens (..., tokens, patch_size^2), row-major."""
    g, p = config.grid, config.patch_size
    lead = x.shape[:-1]
    x = jnp.swapaxes(x.reshape(*lead, g, p, g, p), -3, -2)
    return x.reshape(*lead, g * g, p * p)


def _split_heads(h, num_heads):
    return jnp.swapaxes(h.reshape(*h.shape[:-1], num_heads, -1), -3, -2)


def _merge_heads(o):
    o = jnp.swapaxes(o, -3, -2)
    return o.reshape(*o.shape[:-2], -1)


def features(net: Transformer, x, config, attend):
    """Token states after the blocks, (..., tokens, width); ``attend`` as in the Pyro twin."""
    h = _linear(patchify(x, config), net.embed) + net.pos
    for i, block in enumerate(net.blocks):
        a = block.norm1(h)
        attn = block.attn
        q, k, v = (_split_heads(_linear(a, f), config.num_heads) for f in (attn.q, attn.k, attn.v))
        h = h + _linear(_merge_heads(attend(i, attn, q, k, v)), attn.out)
        h = h + block.mlp(block.norm2(h))
    return h


def class_logits(net: Transformer, h):
    return _linear(net.norm(h).mean(-2), net.head)


def network(config, init, like) -> Transformer:
    """The transformer in ``like``'s dtype, from ``init`` (``net.*`` names) if given; otherwise
    equinox's default initialisation from the model's random key. Built at every call: under
    ``jit`` the parameters come from the optimiser and the unused initialisation is compiled
    away."""
    if not init:
        key = numpyro.prng_key()
        if key is None:
            raise ValueError("Building the network needs a random key: run under handlers.seed.")
        if isinstance(key, jax.core.Tracer):  # a compiled initialisation: the same draws
            return _host_initialised_traced(config, like.dtype, key)
        return _host_initialised(config, like.dtype, key)
    return equinox_module(
        lambda key: Transformer(config, like.dtype, key), "net", init, like.dtype, config
    )


def _host_initialised(config, dtype, key) -> Transformer:
    """``Transformer(config, dtype, key)``'s initialisation scheme (equinox's: weights and
    biases uniform in +-1/sqrt(fan_in); layer norms one and zero; positions N(0, 0.02^2)),
    drawn with numpy from ``key``: building it eagerly then compiles no JAX kernels (the
    eager draws of equinox's initialisers cost seconds of XLA compilation per fit)."""
    rng = np.random.default_rng(np.asarray(jax.random.key_data(key)).ravel())
    skeleton = eqx.filter_eval_shape(Transformer, config, dtype, jax.random.PRNGKey(0))

    def draw(node):
        if isinstance(node, eqx.nn.Linear):
            bound = 1.0 / np.sqrt(node.in_features)
            weight, bias = (
                jnp.asarray(rng.uniform(-bound, bound, a.shape), dtype)
                for a in (node.weight, node.bias)
            )
            return eqx.tree_at(lambda lin: (lin.weight, lin.bias), node, (weight, bias))
        if isinstance(node, LayerNorm):
            return LayerNorm(node.weight.shape[0], dtype)
        return node

    net = jax.tree_util.tree_map(
        draw, skeleton, is_leaf=lambda n: isinstance(n, eqx.nn.Linear | LayerNorm)
    )
    pos = jnp.asarray(0.02 * rng.standard_normal(skeleton.pos.shape), dtype)
    return eqx.tree_at(lambda m: m.pos, net, pos)


def _host_initialised_traced(config, dtype, key) -> Transformer:
    """``_host_initialised`` for a traced key: the same numpy draws, made on the host when the
    compiled function runs (and compiled away where the weights go unused)."""
    skeleton = eqx.filter_eval_shape(Transformer, config, dtype, jax.random.PRNGKey(0))
    shapes, static = eqx.partition(skeleton, lambda a: isinstance(a, jax.ShapeDtypeStruct))
    leaves, treedef = jax.tree_util.tree_flatten(shapes)

    def draw(key_data):
        net = _host_initialised(config, dtype, jnp.asarray(key_data))
        drawn = jax.tree_util.tree_leaves(eqx.filter(net, eqx.is_array))
        return [np.asarray(a) for a in drawn]

    drawn = jax.pure_callback(draw, leaves, key, vmap_method="sequential")
    return eqx.combine(jax.tree_util.tree_unflatten(treedef, drawn), static)


# ------------------------------------------------------------------------------ distributions


def _mask(config):
    if config.attention_mask is None:
        return None
    return jnp.asarray(config.attention_mask).astype(bool)


def _full(like, value):
    return jnp.full(like.shape, value, like.dtype)


def prior(config, attn: Attention, k, logits, mask, guide_draw=None):
    """p(S) of one layer, batch shape ``logits.shape[:-3]``, event (heads, tokens, tokens).

    ``guide_draw``: the guide's draw of this layer and its log, ``(S, log S)``, which the prior
    scores at the log where the draw was floored (see ``numpyro_distributions.GammaPrior``)."""
    shape, dtype = logits.shape, logits.dtype
    contextual = config.prior == "contextual"
    if contextual:
        log_w = attn.prior.log_weights(k, mask)
    if config.attention == "weibull":
        if contextual:
            alpha = jnp.maximum(jnp.exp(log_w), jnp.finfo(dtype).tiny)
            if mask is not None:
                alpha = jnp.where(mask, alpha, 1.0)
            alpha = jnp.broadcast_to(alpha, shape)
        else:
            alpha = _full(logits, config.prior_alpha)
        base = GammaPrior(alpha, _full(logits, config.prior_beta), guide_draw=guide_draw)
    elif config.attention == "lognormal":
        if contextual:
            log_m = log_w
        elif config.prior_mean is not None:
            log_m = jnp.log(jnp.asarray(config.prior_mean, dtype))
        else:
            visible = shape[-1] if mask is None else jnp.sum(mask, -1, keepdims=True)
            log_m = -jnp.log(jnp.asarray(visible, dtype))
        loc = log_m - config.prior_sigma**2 / 2
        if mask is not None:
            loc = jnp.where(mask, loc, 0.0)
        base = LogNormalPrior(
            jnp.broadcast_to(loc, shape), _full(logits, config.prior_sigma), guide_draw=guide_draw
        )
    else:
        raise ValueError(f"attention {config.attention!r} has no latent weights.")
    if mask is not None:
        base = base.mask(mask)
    return base.to_event(3)


def posterior(config, logits, mask):
    """q(S | logits) of one layer: mean the (masked) softmax ``p``; reparameterised."""
    log_p = masked_log_softmax(logits, mask)
    if mask is not None:
        log_p = jnp.where(mask, log_p, 0.0)
    if config.attention == "weibull":
        k = _full(logits, config.concentration)
        base = LogScaleWeibull(weibull_log_scale(log_p, k), k)
    elif config.attention == "lognormal":
        base = LogNormalFlatNoise(log_p - config.sigma**2 / 2, _full(logits, config.sigma))
    else:
        raise ValueError(f"attention {config.attention!r} has no latent weights.")
    if mask is not None:
        base = base.mask(mask)
    return base.to_event(3)


def _log_of_draw(s, intermediates):
    """The log of a guide's draw ``s`` as it drew it (exact where ``s`` was floored), from its
    intermediates (``[log]`` or ``[[log, None]]``); the log of ``s`` where it has none (a value
    given to the site, not drawn)."""
    if not intermediates:
        return jnp.log(s)
    log_s = intermediates[0]
    return log_s[0] if isinstance(log_s, list | tuple) else log_s


def _normalize(s, mask):
    # A prior draw may have underflowed to 0; its log must stay finite, as for the guide's.
    log_s = jnp.log(jnp.maximum(s, jnp.finfo(s.dtype).tiny))
    if mask is not None:
        log_s = jnp.where(mask, log_s, -jnp.inf)
    return jax.nn.softmax(log_s, axis=-1)


def _kl_scale(config, temperature):
    weight = config.kl_weight if temperature is None else temperature
    if isinstance(weight, float | int) and weight == 1.0:
        return contextlib.nullcontext()
    return numpyro.handlers.scale(scale=weight)


# ------------------------------------------------------------------------------ model and guide


def make_model(config, init=None):
    def model(data, config, temperature=None, num_data=None):
        x, y = data["x"], data["y"]
        mask = _mask(config)
        draws = []  # attention sites already drawn
        record = None  # the guide's pass, if it left one for these images

        def sample_prior(i, attn, k, logits):
            known = record is not None and i < len(record.draws)
            guide_draw = (record.draws[i], record.log_draws[i]) if known else None
            with _kl_scale(config, temperature):
                return numpyro.sample(
                    f"attention_{i}", prior(config, attn, k, logits, mask, guide_draw)
                )

        def attend(i, attn, q, k, v):
            logits = attention_logits(q, k)
            if config.attention == "softmax":
                return jnp.exp(masked_log_softmax(logits, mask)) @ v
            s = draws[i] if i < len(draws) else sample_prior(i, attn, k, logits)
            return _normalize(s, mask) @ v

        with data_plate(x.shape[0], num_data):
            logits = None
            if config.attention != "softmax":
                record = take_guide_pass(x)
                logits = replay_guide_pass(record, sample_prior, draws)
            if logits is None:  # no pass to reuse: the model's own
                net = eqx_module("net", network(config, init, x))
                logits = class_logits(net, features(net, x, config, attend))
            numpyro.sample("y", dist.Categorical(logits=logits), obs=y.astype(jnp.int32))

    return model


def make_guide(name, config, init=None):
    """``"amortized"``: q(S_l | x, S_<l) from the network's own attention logits (empty for
    softmax attention); it leaves its pass for the model, as in the Pyro twin."""
    if name != "amortized":
        raise ValueError(
            f"Unknown guide {name!r} for 'bam_classifier'; valid guides are ['amortized']."
        )

    def guide(data, config, temperature=None, num_data=None):
        if config.attention == "softmax":
            return
        x = data["x"]
        net = eqx_module("net", network(config, init, x))
        mask = _mask(config)
        record = GuidePass(x, net.blocks)

        def attend(i, attn, q, k, v):
            logits = attention_logits(q, k)
            name = f"attention_{i}"
            with _kl_scale(config, temperature), numpyro.handlers.trace() as site:
                s = numpyro.sample(name, posterior(config, logits, mask))
            record.keys.append(k)
            record.logits.append(logits)
            record.draws.append(s)
            record.log_draws.append(_log_of_draw(s, site[name]["intermediates"]))
            return _normalize(s, mask) @ v

        with data_plate(x.shape[0], num_data):
            record.class_logits = class_logits(net, features(net, x, config, attend))
        remember_guide_pass(record)

    return guide


# ------------------------------------------------------------------------------ prediction

_PREDICT_FUNCTIONS: dict = {}


def _predict_key(config, method, num_samples):
    """The cache key of ``_predict_function``: the config without its mask, and the mask's exact
    shape, dtype and bytes (an array's repr elides all but its corners once it is large)."""
    mask = config.attention_mask
    if mask is not None:
        mask = np.asarray(mask)
        mask = (mask.shape, mask.dtype.str, mask.tobytes())
    return repr(dataclasses.replace(config, attention_mask=None)), mask, method, num_samples


def _predict_function(config, method, num_samples):
    """A jitted ``(net, x, key) -> probs`` for one config (cached: compiled once)."""
    cache_key = _predict_key(config, method, num_samples)
    if cache_key in _PREDICT_FUNCTIONS:
        return _PREDICT_FUNCTIONS[cache_key]
    draws = method == "mc" and config.attention != "softmax"
    mask = _mask(config)

    def probs(net, x, key):
        def attend(i, attn, q, k, v):
            logits = attention_logits(q, k)
            log_p = masked_log_softmax(logits, mask)
            if not draws:
                return jnp.exp(log_p) @ v
            if mask is not None:
                log_p = jnp.where(mask, log_p, 0.0)
            layer_key = jax.random.fold_in(key, i)
            if config.attention == "weibull":
                u = uniform_noise(layer_key, logits.shape, logits.dtype)
                log_s = weibull_log_weights(log_p, config.concentration, u)
            else:
                eps = normal_noise(layer_key, logits.shape, logits.dtype)
                log_s = lognormal_log_weights(log_p, config.sigma, eps)
            if mask is not None:
                log_s = jnp.where(mask, log_s, -jnp.inf)
            return jax.nn.softmax(log_s, axis=-1) @ v

        if draws:
            x = jnp.broadcast_to(x, (num_samples, *x.shape))
        p = jax.nn.softmax(class_logits(net, features(net, x, config, attend)), axis=-1)
        return p.mean(0) if draws else p

    if len(_PREDICT_FUNCTIONS) > 16:
        _PREDICT_FUNCTIONS.clear()
    _PREDICT_FUNCTIONS[cache_key] = jax.jit(probs)
    return _PREDICT_FUNCTIONS[cache_key]


def predict_proba(
    params, x, config, *, num_samples, method, seed, batch_size, device, dtype
) -> np.ndarray:
    """Class probabilities (N, C), numpy float64; see ``classifier.predict_proba``."""
    like = jnp.zeros((), dtype)
    net = jax.device_put(network(config, params, like), device)
    fn = _predict_function(config, method, num_samples)
    n = len(x)
    batch_size = max(1, min(batch_size, n))
    key = jax.random.PRNGKey(seed)
    out = []
    for i, start in enumerate(range(0, n, batch_size)):
        rows = np.minimum(np.arange(start, start + batch_size), n - 1)  # pad: one compilation
        xb = jax.device_put(jnp.asarray(x[rows], dtype), device)
        p = np.asarray(fn(net, xb, jax.random.fold_in(key, i)), dtype=np.float64)
        out.append(p[: min(batch_size, n - start)])
    return np.concatenate(out) if out else np.zeros((0, config.num_classes))
