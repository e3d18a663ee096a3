r"""Mixture of multivariate Bernoullis (binary images) with conjugate priors, fitted at the MAP.

Generative process, for ``n = 1..N``, ``k = 1..K`` and ``d = 1..D``::

    weights           ~ Dirichlet(alpha * 1_K)               alpha = weight_concentration_prior
    probs[k, d]       ~ Beta(a, b)                           a, b  = probs_prior_a, probs_prior_b
    z_n | weights     ~ Categorical(weights)
    x_nd | z_n, probs ~ Bernoulli(probs[z_n, d])

``em`` is closed-form MAP-EM: its objective is ``log p(X | weights, probs) + log p(weights) +
log p(probs)`` in nats, every normalising constant kept. With ``alpha, a, b > 1`` (enforced) the
M-step ``weights_k = (N_k + alpha - 1) / (N + K (alpha - 1))``, ``probs_kd = (S_kd + a - 1) / (N_k + a
+ b - 2)`` keeps every probability strictly inside (0, 1). ``svi`` with the ``enum`` guide sums
``z`` out and puts point masses (Delta) on ``weights`` and ``probs``, so its ELBO is the same log
joint: SVI and EM maximise one objective (tested on both backends).

Sites: ``weights``; ``probs`` in plate ``components``; ``z`` and ``x`` in plate ``data``. The fitted
parameters (``raw_params``) are the Delta guide's ``weights_map`` (K,) and ``probs_map`` (K, D);
``params`` calls them ``weights`` and ``probs``.

The posterior predictive of missing pixels is attention (see :mod:`zoo.bernoulli_mixture.completion`):
:func:`complete`, :func:`log_prob_missing`, :func:`log_prob_observed`, :func:`multi_head_complete`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from zoo.bayesian_gmm import check_components, check_dim
from zoo.bernoulli_mixture import posterior
from zoo.bernoulli_mixture.completion import (
    Completion,
    attention_inputs,
    complete,
    log_prob_missing,
    log_prob_observed,
    multi_head_complete,
    multi_head_parameters,
)
from zoo.spec import DataField, GuideKind, ModelSpec
from zoo.updates import ClosedFormUpdates

__all__ = [
    "SPEC",
    "BernoulliMixtureConfig",
    "Completion",
    "as_binary",
    "attention_inputs",
    "complete",
    "log_prob_missing",
    "log_prob_observed",
    "make_data",
    "multi_head_complete",
    "multi_head_parameters",
    "prepare",
    "summarize",
]


@dataclass(frozen=True)
class BernoulliMixtureConfig:
    """Model options: the number of components, the data dimension and the prior."""

    K: int
    dim: int
    weight_concentration_prior: float = 2.0
    probs_prior_a: float = 2.0
    probs_prior_b: float = 2.0


def _above_one(name, value) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise TypeError(f"{name} must be a float; got {type(value).__name__}.")
    value = float(value)
    if not np.isfinite(value) or value <= 1:
        raise ValueError(
            f"{name} must be a float in the range (1, inf), so that the MAP estimate lies strictly "
            f"inside (0, 1); got {value}."
        )
    return value


def as_binary(x, name: str = "data['x']") -> np.ndarray:
    """``x`` as a float array of 0/1 after checking that every entry is 0 or 1.

    Parameters
    ----------
    x : array_like of float, int, uint or bool
        Binary data.
    name : str
        How the error message names ``x``.

    Returns
    -------
    numpy.ndarray
        ``x`` itself when it is already floating point, else a float64 copy.

    Raises
    ------
    ValueError
        When an entry is neither 0 nor 1 (or the dtype is not numeric or bool).
    """
    x = np.asarray(x)
    if x.dtype.kind not in "fiub":
        raise ValueError(f"{name} must have a float, int, uint or bool dtype; got {x.dtype}.")
    if x.dtype.kind != "b":
        bad = (x != 0) & (x != 1)
        if bad.any():
            idx = np.argwhere(bad)
            shown = ", ".join(f"{x[tuple(i)]!r} at {tuple(int(j) for j in i)}" for i in idx[:3])
            raise ValueError(
                f"{name} must be binary (every entry 0 or 1); got {len(idx)} entries that are "
                f"not, e.g. {shown}. Binarize the data first (zoo.datasets.dynamic_binarize "
                "takes grey levels in [0, 255]; fit(..., dynamic_binarization=True) takes them "
                "in [0, 1])."
            )
    return x if x.dtype.kind == "f" else x.astype(np.float64)


def prepare(
    data,
    K: int = 10,
    weight_concentration_prior: float = 2.0,
    probs_prior_a: float = 2.0,
    probs_prior_b: float = 2.0,
) -> BernoulliMixtureConfig:
    """Validate the options against the data.

    Parameters
    ----------
    data : dict
        ``{"x": (N, D) binary array}``, as :meth:`ModelSpec.validate_data` returns it.
    K : int
        Number of components, ``1 <= K <= N``.
    weight_concentration_prior : float
        ``alpha`` of the symmetric Dirichlet prior on the weights; must exceed 1.
    probs_prior_a, probs_prior_b : float
        ``a`` and ``b`` of the Beta prior on every pixel probability; must exceed 1. The default
        ``a = b = 2`` is add-one (Laplace) smoothing of the M-step counts.
    """
    x = as_binary(data["x"])
    n, d = x.shape
    return BernoulliMixtureConfig(
        K=check_components(K, n),
        dim=int(d),
        weight_concentration_prior=_above_one(
            "weight_concentration_prior", weight_concentration_prior
        ),
        probs_prior_a=_above_one("probs_prior_a", probs_prior_a),
        probs_prior_b=_above_one("probs_prior_b", probs_prior_b),
    )


def summarize(params: dict, config: BernoulliMixtureConfig) -> dict:
    """``weights`` (K,) and ``probs`` (K, D) from the raw (Delta guide) parameters."""
    return {"weights": params["weights_map"], "probs": params["probs_map"]}


def make_data(rng: np.random.Generator, n: int = 600) -> dict:
    """Binary 4x4 "images" from three overlapping prototypes (bars and a diagonal band).

    Returns ``{"x": (n, 16) uint8}``; the built-in test and demo data.
    """
    grid = np.arange(16).reshape(4, 4)
    rows, cols = np.divmod(grid, 4)
    prototypes = np.stack(
        [rows < 2, cols < 2, np.abs(rows - cols) <= 1]  # top half, left half, diagonal band
    ).reshape(3, 16)
    probs = np.where(prototypes, 0.8, 0.15)
    z = rng.choice(3, size=n, p=[0.45, 0.35, 0.2])
    return {"x": (rng.random((n, 16)) < probs[z]).astype(np.uint8)}


class BinaryDataSpec(ModelSpec):
    """A spec whose data ``x`` must be binary.

    The shared contract checks rank and dtype kind; this adds the 0/1 check and hands the
    inference layer floats (bool, int and uint data are cast to float64; scipy's k-means
    initialisation takes floats only).
    """

    def validate_data(self, data, name="data", row_ids=None):
        out = super().validate_data(data, name, row_ids)
        out["x"] = as_binary(out["x"])
        return out


SPEC = BinaryDataSpec(
    name="bernoulli_mixture",
    description="Mixture of Bernoullis for binary data (images), MAP with Dirichlet/Beta priors",
    data={
        "x": DataField(ndim=2, kind="fiub", doc="(N, D) binary observations, 0 or 1", binary=True)
    },
    backends={
        "pyro": "zoo.bernoulli_mixture.pyro_model",
        "numpyro": "zoo.bernoulli_mixture.numpyro_model",
    },
    guides=("enum",),
    # Point masses on weights and probs, z summed out (TraceEnum_ELBO): an exact ELBO, EM's
    # objective.
    guide_kinds={"enum": GuideKind(enumerated=True, deterministic=True)},
    prepare=prepare,
    updates=ClosedFormUpdates(
        "zoo.bernoulli_mixture.closed_form", objective="log_joint", start="responsibilities"
    ),
    # A component's probabilities at exactly 0 or 1 make the log joint infinite.
    numerical_advice=(
        "Use float64, or raise probs_prior_b further above 1: a pixel on in all of a "
        "component's N points gets a probability (b - 1) / (N + a + b - 2) short of 1, which "
        "float32 rounds to 1 below about 6e-8."
    ),
    make_data=make_data,
    summarize=summarize,
    config_type=BernoulliMixtureConfig,
    sample_posterior=posterior.sample_posterior,
    log_likelihood=posterior.log_likelihood,
    check_data=check_dim,
    draws_from_sites=posterior.draws_from_sites,
    sites_from_params=posterior.sites_from_params,
    exchangeable_components=("weights", "probs"),
    example_options={"K": 3},
    tags=("discrete-latent", "conjugate", "mixture", "binary", "map"),
)
