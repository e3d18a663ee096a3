"""NumPyro twin of ``exchangeable_tokens``: the attention network is an equinox module (its
attention is :class:`zoo.attention.jax_attention.MultiHeadAttention`) registered with
``numpyro.contrib.module.eqx_module``, under the Pyro twin's parameter names."""

from __future__ import annotations

import equinox as eqx
import jax
import jax.numpy as jnp
import numpyro
import numpyro.distributions as dist
from numpyro.contrib.module import eqx_module

from zoo.attention import jax_attention
from zoo.plates import numpyro_data_plate as data_plate
from zoo.weights import equinox_module


class AttentionPosterior(eqx.Module):
    """Tokens (..., N, D) -> logits (..., K) of q(z | X): one learned query attends over the
    tokens; the pooled output, times the number of tokens attended, plus ``prior_logits``."""

    attention: jax_attention.MultiHeadAttention
    query: jax.Array
    prior_logits: jax.Array

    def __init__(self, config, dtype, key):
        k1, k2 = jax.random.split(key)
        self.attention = jax_attention.MultiHeadAttention(
            config.embed_dim,
            config.num_heads,
            kdim=config.dim,
            vdim=config.dim,
            out_dim=config.K,
            key=k1,
            dtype=dtype,
        )
        self.query = jax.random.normal(k2, (1, config.embed_dim), dtype=dtype)
        self.prior_logits = jnp.zeros((config.K,), dtype=dtype)

    def __call__(self, x, lengths=None, leave_one_out: bool = False):
        """``lengths`` (...,): tokens per sequence, the rest padding (masked keys). With
        ``leave_one_out``, one query per token j over the other tokens: logits (..., N, K)."""
        n = x.shape[-2]
        count = jnp.asarray(n, dtype=x.dtype) if lengths is None else lengths
        mask = None
        if lengths is not None:  # (..., heads, queries, keys)
            mask = (jnp.arange(n) < lengths[..., None])[..., None, None, :]
        if leave_one_out:
            others = ~jnp.eye(n, dtype=bool)
            mask = others if mask is None else mask & others
            query = jnp.broadcast_to(self.query, (n, self.query.shape[-1]))
            out = self.attention(query, x, x, mask=mask)
            return (count - 1)[..., None, None] * out + self.prior_logits
        out = self.attention(self.query, x, x, mask=mask)[..., 0, :]
        return count[..., None] * out + self.prior_logits


def _network(config, init, like):
    """The network in the data's dtype, from ``init`` (zoo parameter names) if it holds them;
    otherwise a fresh initialisation from the model's random key. Built at every call: under
    ``jit`` the parameters come from the optimiser and the unused initialisation compiles away."""
    prefix = "posterior."
    if not init or not any(k.startswith(prefix) for k in init):
        key = numpyro.prng_key()
        if key is None:
            raise ValueError(
                "Building the attention network needs a random key: use handlers.seed."
            )
        return AttentionPosterior(config, like.dtype, key)
    return equinox_module(
        lambda key: AttentionPosterior(config, like.dtype, key),
        "posterior",
        init,
        like.dtype,
        config,
    )


def tokens_given_z(loc, scale, length: int, valid=None):
    """The ``length`` token slots of a sequence given its component mean ``loc`` (..., D): one
    event of shape (N, D), iid Normal(loc, scale^2) tokens; padding slots (``valid`` False) count
    nothing."""
    tokens = dist.Normal(loc[..., None, :], scale).expand(loc.shape[:-1] + (length, loc.shape[-1]))
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
    return jnp.arange(x.shape[-2]) < lengths[..., None]


def make_model(config, init=None):
    """The model of ``config.objective`` (see ``zoo.exchangeable``)."""

    def model(data, config, temperature=None, num_data=None):
        x, lengths = data["x"], data.get("length")
        valid, scale = _valid(lengths, x), jnp.asarray(config.scale, dtype=x.dtype)
        if config.objective == "elbo":
            with data_plate(x.shape[0], num_data):
                z = numpyro.sample("z", dist.Categorical(probs=config.weights))
                tokens = tokens_given_z(config.means[z], scale, x.shape[-2], valid)
                numpyro.sample("x", tokens, obs=x)
            return
        net = eqx_module("posterior", _network(config, init, x))
        if config.objective == "supervised":
            logits = net(x, lengths)
            with data_plate(x.shape[0], num_data):
                labels = data["z"].astype(jnp.int32)
                numpyro.sample("z", dist.Categorical(logits=logits), obs=labels)
        else:  # "masked"
            logits = net(x, lengths, leave_one_out=True)
            with data_plate(x.shape[0], num_data):
                numpyro.sample("x", held_out_tokens(logits, config.means, scale, valid), obs=x)

    return model


def make_guide(name, config, init=None):
    """``"attention"``: q(z_s | X_s) = Categorical(softmax(attention logits)) for the ``"elbo"``
    objective, enumerated; the other objectives hold the network in the model, so it is empty."""
    if name != "attention":
        raise ValueError(
            f"Unknown guide {name!r} for 'exchangeable_tokens'; valid guides are ['attention']."
        )

    def guide(data, config, temperature=None, num_data=None):
        if config.objective != "elbo":
            return
        x = data["x"]
        logits = eqx_module("posterior", _network(config, init, x))(x, data.get("length"))
        with data_plate(x.shape[0], num_data):
            numpyro.sample("z", dist.Categorical(logits=logits), infer={"enumerate": "parallel"})

    return guide
