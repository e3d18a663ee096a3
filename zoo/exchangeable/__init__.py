r"""Attention as inference of the latent of exchangeable tokens.

Generative process, for sequences ``s = 1..S`` and tokens ``i = 1..N``::

    z_s           ~ Categorical(weights)                     (K components)
    x_{s,i} | z_s ~ Normal(means[z_s], scale^2 I_D)          (independent given z_s)

The tokens of a sequence are exchangeable: iid given the latent ``z_s`` (de Finetti). The
generative parameters (``weights``, ``means``, ``scale``) are known: they are options of
:func:`prepare` and live in the config, so the exact posterior is there to compare with, and a fit
trains only the inference network.

**Exact posterior** (Bayes' rule, :func:`exact_log_posterior`)::

    log P(z = k | X) = log pi_k + sum_i x_i . mu_k / s^2 - N |mu_k|^2 / (2 s^2) - log Z(X)
                     = log pi_k + N (xbar . mu_k / s^2 - |mu_k|^2 / (2 s^2))   - log Z(X)

**Attention posterior** (the guide ``"attention"``, :func:`attention_logits`): one learned query
attends over the tokens (multi-head attention of :mod:`zoo.attention`, keys and values the
tokens themselves); its output has one entry per component::

    o        = MultiHeadAttention(query, keys = values = X)      shape (K,)
    logits   = n * o + prior_logits                              n = number of tokens attended
    q(z | X) = softmax(logits)

Attention is the only operation across tokens. How it reaches the exact posterior:

* *Attention averages, Bayes adds.* Softmax weights sum to one, so the pooled output is an
  average over tokens, while the posterior logit is a *sum* of per-token log-likelihoods: ``N``
  times the average. ``N`` is the inverse temperature of ``q(z | X)``, and the readout multiplies
  by the number of tokens the query attended to (``N``, or ``N - 1`` with one token held out; it is
  the sequence length, not learned). A readout without it (``readout_length=`` fixed) computes a
  tempered posterior, exact at that one length only (the ablation in
  ``examples/exchangeable_attention.py``).
* *Exchangeable tokens weigh the same.* Given ``z`` every token carries the same kind of evidence,
  so the Bayes-optimal attention weights are uniform, ``1/N``: the keys carry nothing
  (``k_weight = 0``), and any content-dependent weighting would bias the sufficient statistic
  ``xbar``. The per-token evidence ``x_i . mu_k / s^2`` ("the query from ``mu_k``") enters through
  the values and the output projection: ``out_weight @ v_weight = means / s^2``,
  ``out_bias = -|mu_k|^2 / (2 s^2)``, ``prior_logits = log pi``. Putting ``mu_k`` into the attention
  query instead would weight tokens by ``exp(x_i . mu_k / s^2)`` normalised over tokens, which is
  not Bayes' rule: the scores must be summed over tokens, and the softmax taken over components.
  With these parameters (:func:`ideal_params`) ``q`` *is* ``P`` at every ``N`` (to rounding).

**Objectives** (``objective=`` of :func:`prepare`, i.e. of ``inference.fit``); every one fits the
same parameters ``posterior.*`` by SVI, so ``raw_params`` move between objectives and backends
(``init=``):

* ``"elbo"`` (default): the generative model with the attention guide. ``z`` is enumerated in the
  guide (``TraceEnum_ELBO``, an exact sum over the K values, no score-function noise), so the
  objective is ``sum_s log p(X_s) - KL(q(. | X_s) || P(. | X_s))``: amortised variational
  inference, the reverse KL; needs the token likelihood, no labels.
* ``"supervised"``: data ``{"x", "z"}`` with the true latents (:func:`simulate`). The model is the
  conditional ``z_s | X_s ~ Categorical(q(. | X_s))`` with ``z`` observed, and the network in the
  model: maximum likelihood of ``log q(z_true | X)``, i.e. the forward KL to the exact posterior
  up to a constant (neural posterior estimation; needs only simulations).
* ``"masked"``: self-supervised. Each token is held out in turn and predicted from the others
  through the attention posterior, ``x_{s,j} | X_{s,-j} ~ sum_k q(k | X_{s,-j})
  Normal(mu_k, s^2 I)`` (the leave-one-out attention masks key ``j`` for query ``j``). The log
  score is proper and the Gaussian components are linearly independent, so the pseudo-likelihood
  is maximal when ``q(. | X_{-j}) = P(. | X_{-j})``: no labels, only the token likelihood.

**Sequences of several lengths** (optional data key ``length``, (S,) ints): ``x`` is padded to the
longest sequence, the attention masks the padding keys (a key-padding mask) and the readout
multiplies by each sequence's own length. Training on several lengths matters: at a single
length ``N_0`` only ``N_0 c + b`` is identified, where ``c`` is the readout's per-token bias
(scaled by ``N``) and ``b`` the ``prior_logits``, so a guide fitted at one length is exact there
and wrong elsewhere; varying ``N`` separates them (:func:`simulate` with ``min_length``).

Sites: ``"elbo"``: ``z`` (latent) and ``x`` (observed, event ``(N, D)``) in plate ``data``;
``"supervised"``: ``z`` observed in ``data``; ``"masked"``: ``x`` observed in ``data``. Parameters
(torch ``(out, in)`` layout, the same names in both backends): ``posterior.query`` (1, E),
``posterior.prior_logits`` (K,), ``posterior.attention.{q,k,v,out}_{weight,bias}``.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from zoo.exchangeable.generate import positive_int, simulate
from zoo.exchangeable.posterior import (
    attention_log_posterior,
    attention_logits,
    attention_posterior,
    attention_weights,
    exact_log_posterior,
    exact_posterior,
    ideal_params,
    kl_divergence,
    param_shapes,
    posterior_error,
    total_variation,
)
from zoo.options import check_array
from zoo.spec import DataField, GuideKind, ModelSpec

__all__ = [
    "OBJECTIVES",
    "SPEC",
    "ExchangeableConfig",
    "attention_log_posterior",
    "attention_logits",
    "attention_posterior",
    "attention_weights",
    "default_means",
    "exact_log_posterior",
    "exact_posterior",
    "ideal_params",
    "kl_divergence",
    "make_data",
    "param_shapes",
    "posterior_error",
    "prepare",
    "simulate",
    "total_variation",
]

OBJECTIVES = ("elbo", "supervised", "masked")


@dataclass(frozen=True)
class ExchangeableConfig:
    """The generative parameters (known) and the attention network's sizes.

    ``means`` (K, D), ``weights`` (K,) and ``scale`` define the model; ``embed_dim`` and
    ``num_heads`` the attention; ``objective`` what a fit maximises (see the module docstring).
    """

    means: np.ndarray
    weights: np.ndarray
    scale: float = 1.0
    objective: str = "elbo"
    embed_dim: int = 2
    num_heads: int = 1

    @property
    def K(self) -> int:  # the zoo's name for the number of components
        return int(self.means.shape[0])

    @property
    def dim(self) -> int:
        return int(self.means.shape[1])


def _positive_float(name, value) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise TypeError(f"{name} must be a float; got {type(value).__name__}.")
    value = float(value)
    if not np.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a float in the range (0, inf); got {value}.")
    return value


def default_means(K: int, dim: int, separation: float = 1.0) -> np.ndarray:
    """``K`` means evenly spaced on a circle of radius ``separation`` in the first two coordinates
    (on a line, centred, for ``dim == 1``); the other coordinates are zero. Returns (K, dim)."""
    K, dim = positive_int("K", K), positive_int("dim", dim)
    separation = _positive_float("separation", separation)
    means = np.zeros((K, dim))
    if dim == 1:
        means[:, 0] = separation * (np.arange(K) - (K - 1) / 2)
    else:
        angle = 2 * np.pi * np.arange(K) / K
        means[:, 0], means[:, 1] = separation * np.cos(angle), separation * np.sin(angle)
    return means


def _check_x(x, name="data['x']") -> np.ndarray:
    x = np.asarray(x)
    if x.ndim != 3:
        raise ValueError(
            f"{name} must have 3 dimensions (S sequences, N tokens, D features); got shape "
            f"{x.shape}."
        )
    if 0 in x.shape:
        raise ValueError(
            f"{name} must have at least one sequence, token and feature; got {x.shape}."
        )
    return x


def _check_labels(z, num_sequences: int, K: int | None = None) -> np.ndarray:
    z = np.asarray(z)
    if z.ndim != 1 or len(z) != num_sequences:
        raise ValueError(
            f"data['z'] must hold one label per sequence, shape ({num_sequences},) like "
            f"data['x'].shape[0]; got shape {z.shape}."
        )
    if z.dtype.kind not in "iu":
        raise ValueError(f"data['z'] must hold integer labels; got dtype {z.dtype}.")
    if K is not None and len(z) and (z.min() < 0 or z.max() >= K):
        raise ValueError(
            f"data['z'] must hold labels in [0, {K - 1}] (K={K} components); got values in "
            f"[{z.min()}, {z.max()}]."
        )
    return z


def _check_lengths(lengths, x_shape) -> np.ndarray:
    lengths = np.asarray(lengths)
    if lengths.ndim != 1 or len(lengths) != x_shape[0]:
        raise ValueError(
            f"data['length'] must hold one length per sequence, shape ({x_shape[0]},) like "
            f"data['x'].shape[0]; got shape {lengths.shape}."
        )
    if lengths.dtype.kind not in "iu":
        raise ValueError(f"data['length'] must hold integers; got dtype {lengths.dtype}.")
    if len(lengths) and (lengths.min() < 1 or lengths.max() > x_shape[1]):
        raise ValueError(
            f"data['length'] must hold lengths in [1, {x_shape[1]}] (data['x'] has N = "
            f"{x_shape[1]} token slots); got values in [{lengths.min()}, {lengths.max()}]."
        )
    return lengths


def check_data(data, config: ExchangeableConfig) -> None:
    """New data (e.g. held-out sequences) fit a fitted model: the same token dimension, at least
    two tokens for the masked objective, labels exactly when the objective is supervised."""
    x = data["x"]
    if x.shape[-1] != config.dim:
        raise ValueError(
            f"data['x'] must have {config.dim} features per token (the means are "
            f"{config.means.shape}); got shape {x.shape}."
        )
    shortest = int(np.min(data["length"])) if "length" in data else x.shape[1]
    if config.objective == "masked" and shortest < 2:
        raise ValueError(
            "objective='masked' predicts each token from the others: every sequence needs at "
            f"least 2 tokens; got data['x'] of shape {x.shape} and a shortest length of "
            f"{shortest}."
        )
    if config.objective == "supervised":
        if "z" not in data:
            raise ValueError(
                "objective='supervised' needs the true latents: data must be {'x': (S, N, D), "
                "'z': (S,) labels} (see zoo.exchangeable.simulate)."
            )
        _check_labels(data["z"], x.shape[0], config.K)
    elif "z" in data:
        raise ValueError(
            f"data['z'] (labels) is used only by objective='supervised'; got it with "
            f"objective={config.objective!r}. Drop it, or fit with objective='supervised'."
        )


def prepare(
    data,
    K: int | None = None,
    means=None,
    separation: float | None = None,
    scale: float = 1.0,
    weights=None,
    objective: str = "elbo",
    embed_dim: int | None = None,
    num_heads: int = 1,
) -> ExchangeableConfig:
    """Validate the options against the data.

    Parameters
    ----------
    data : dict
        ``{"x": (S, N, D)}``, plus ``"z": (S,)`` integer labels for ``objective="supervised"``
        and optionally ``"length": (S,)``, the tokens of each sequence (the rest is padding).
    K : int, optional
        Number of components (default 3, or ``len(means)``).
    means : array (K, D), optional
        The component means; default: K points evenly spaced on a circle of radius
        ``separation`` in the first two coordinates (:func:`default_means`).
    separation : float, optional
        Radius of the default means' circle (default 1; not with ``means``).
    scale : float
        The tokens' standard deviation ``s`` around their component mean.
    weights : array (K,), optional
        Prior probabilities of the components (positive, summing to one); default uniform.
    objective : {"elbo", "supervised", "masked"}
        What a fit maximises: ``"elbo"``, the generative model's ELBO with ``z`` summed out in
        the attention guide; ``"supervised"``, ``log q(z | X)`` of simulated labels (data
        ``{"x", "z"}``); ``"masked"``, each token predicted from the others through the
        attention posterior.
    embed_dim : int, optional
        The attention's width E (default D); ``ideal_params`` needs ``E >= min(K, D)``.
    num_heads : int
        Attention heads; divides ``embed_dim``.
    """
    x = _check_x(data["x"])
    dim = x.shape[-1]
    if means is None:
        separation = 1.0 if separation is None else separation
        means = default_means(3 if K is None else K, dim, separation)
    elif separation is not None:
        raise ValueError(
            "separation= is the radius of the default means' circle; with means= given it has "
            f"no effect (got separation={separation!r}). Pass one or the other."
        )
    else:
        means = check_array("means", means, what="the component means")
        if means.ndim != 2 or means.shape[1] != dim or not np.all(np.isfinite(means)):
            raise ValueError(
                f"means must be a finite (K, D) array with D = {dim} (the tokens' dimension); "
                f"got shape {means.shape}."
            )
        if K is not None and positive_int("K", K) != len(means):
            raise ValueError(f"K={K} does not match the {len(means)} means given.")
    K = positive_int("K", len(means))
    if weights is None:
        weights = np.full(K, 1.0 / K)
    else:
        weights = check_array("weights", weights, what="the components' prior probabilities")
        if weights.shape != (K,) or np.any(weights <= 0) or not np.isclose(weights.sum(), 1):
            raise ValueError(
                f"weights must be a ({K},) array of positive probabilities summing to 1; got "
                f"{weights!r}."
            )
    if objective not in OBJECTIVES:
        raise ValueError(f"objective must be one of {list(OBJECTIVES)}; got {objective!r}.")
    num_heads = positive_int("num_heads", num_heads)
    embed_dim = positive_int("embed_dim", dim if embed_dim is None else embed_dim)
    if embed_dim % num_heads:
        raise ValueError(
            f"embed_dim must be divisible by num_heads; got embed_dim={embed_dim}, "
            f"num_heads={num_heads}."
        )
    config = ExchangeableConfig(
        means=means,
        weights=weights,
        scale=_positive_float("scale", scale),
        objective=objective,
        embed_dim=embed_dim,
        num_heads=num_heads,
    )
    check_data(data, config)
    return config


#: The built-in data: K=3 components on a unit circle in 2-D, unit noise, 8 tokens a sequence.
DEFAULT_LENGTH = 8


def make_data(rng: np.random.Generator, n: int = 200) -> dict:
    """``n`` sequences of 8 two-dimensional tokens from the default model (``prepare``'s defaults
    with ``K=3``); returns ``{"x": (n, 8, 2)}``."""
    x = np.zeros((1, 1, 2))
    config = prepare({"x": x})
    return {"x": simulate(config, rng, n, DEFAULT_LENGTH)["x"]}


class ExchangeableSpec(ModelSpec):
    """``x`` is required; the labels ``z`` (supervised fits only) and the sequence lengths
    ``length`` (padded sequences) are optional."""

    def validate_data(self, data, name="data", row_ids=None):
        if not isinstance(data, Mapping):
            raise TypeError(
                "data must be a dict {'x': (S, N, D)}, optionally with 'z': (S,) labels and "
                f"'length': (S,) tokens per sequence; got {type(data).__name__}."
            )
        keys = set(data)
        if "x" not in keys or not keys <= set(self.data):
            raise ValueError(
                f"Model {self.name!r} takes data key 'x' and optionally 'z' (labels, for "
                f"objective='supervised') and 'length'; got {sorted(keys)}."
            )
        present = {k: v for k, v in self.data.items() if k in keys}
        out = ModelSpec.validate_data(dataclasses.replace(self, data=present), data, name, row_ids)
        _check_x(out["x"])
        if "z" in out:
            _check_labels(out["z"], out["x"].shape[0])
        if "length" in out:
            _check_lengths(out["length"], out["x"].shape)
        return out


#: What a fit ascends under each ``objective=`` (the module docstring says how).
OBJECTIVE_NAMES = {
    "elbo": "ELBO",
    "supervised": "log q(z | X) of the true latents",
    "masked": "leave-one-out log-likelihood",
}


def objective_name(config) -> str:
    return OBJECTIVE_NAMES[config.objective]


SPEC = ExchangeableSpec(
    name="exchangeable_tokens",
    description="Exchangeable tokens with a discrete latent; attention guide q(z | X)",
    data={
        "x": DataField(ndim=3, kind="f", doc="(S, N, D) sequences of N tokens"),
        "z": DataField(
            ndim=1, kind="iu", doc="(S,) true latents, optional (supervised only)", bounds=(0, "K")
        ),
        "length": DataField(ndim=1, kind="iu", doc="(S,) tokens per sequence, optional"),
    },
    backends={
        "pyro": "zoo.exchangeable.pyro_model",
        "numpyro": "zoo.exchangeable.numpyro_model",
    },
    guides=("attention",),
    # z is summed out exactly in the guide (TraceEnum_ELBO), K terms per sequence, and there is
    # no other latent: the guide draws nothing at random, so its ELBO is exact.
    guide_kinds={"attention": GuideKind(enumerated=True, deterministic=True)},
    prepare=prepare,
    make_data=make_data,
    config_type=ExchangeableConfig,
    objective_name=objective_name,
    check_data=check_data,
    # An attention network: Adam at 0.03 for 3,000 steps, then 0.005, as its figures of record
    # were trained (the generic SVI schedule starts at 0.05).
    algorithm_defaults={"svi": {"lr": ((3_000, 0.03), (1, 0.005)), "num_steps": 10_000}},
    minibatch=True,
    example_options={"K": 3},
    tags=("amortized", "attention", "discrete-latent", "local-latent", "exchangeable"),
)
