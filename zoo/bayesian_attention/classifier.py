r"""A transformer classifier with Bayesian attention, as a model-guide pair (``"bam_classifier"``).

After Fan, Zhang, Chen & Zhou, "Bayesian Attention Modules" (NeurIPS 2020). An image of
``image_size`` x ``image_size`` pixels is cut into ``patch_size`` x ``patch_size`` patches (28 and
7: 16 tokens of 49 pixels), embedded (``Linear`` + a learned position embedding) and passed
through ``num_layers`` pre-norm transformer blocks (``num_heads`` heads, model width ``width``,
a GELU MLP of ``mlp_dim``); the mean token, layer-normed, gives the class logits.

Generative process, for every image ``n`` (all sites in the ``data`` plate)::

    S_{n,l} ~ p(S | keys of layer l)     l = 0..num_layers-1, shape (heads, tokens, tokens)
    y_n | S_n ~ Categorical(logits = transformer(x_n; attention weights S / sum_keys S))

The guide is amortised: ``q(S_{n,l} | x_n, S_{n,<l})`` has mean the softmax attention
:math:`p = \mathrm{softmax}(q k^\top / \sqrt{d})` of the same network, and is reparameterised:

* ``attention="weibull"``: ``q = Weibull(k, p / Gamma(1 + 1/k))`` (``concentration`` ``k``),
  prior ``Gamma(alpha, beta)``;
* ``attention="lognormal"``: ``log S ~ Normal(log p - sigma^2/2, sigma)``, prior ``log S ~
  Normal(log m - sigma_0^2/2, sigma_0)`` (mean ``m``; default uniform ``1 / tokens``);
* ``attention="softmax"``: the deterministic weights ``p``; no latent site, the guide is empty.

``prior="fixed"`` uses ``prior_alpha`` / ``prior_mean``; ``prior="contextual"`` makes ``alpha``
(Weibull) or ``m`` (log-normal) a softmax over keys of a small network of the keys
(:class:`~zoo.bayesian_attention.torch_bam.ContextualPrior`, one per layer, shared by heads).
The network's parameters are shared by model and guide (``pyro.module`` /
``numpyro.contrib.module.eqx_module`` under the name ``net``; the same names in both twins, in
torch's ``(out, in)`` layout).

The KL term is weighted: every attention site sits under a scale ``kl_weight`` in model and guide,
so ``elbo="trace"`` gives ``E[log p(y | S)] - kl_weight * E[log q(S) - log p(S)]`` and
``elbo="meanfield"`` the same with the analytic KL (registered in
:mod:`~zoo.bayesian_attention.torch_distributions` and
:mod:`~zoo.bayesian_attention.numpyro_distributions`). ``kl_weight=1`` is the ELBO. A warm-up
``kl_anneal_steps`` is described by :func:`kl_weight_schedule`; SVI passes a step-dependent value to
the twins through their ``temperature`` argument, which this model reads as the KL weight (None:
``kl_weight``); ``inference.algorithms.svi`` finds the schedule through the twins' ``temperature_schedule``.

Given the same draws, the model's forward pass is the guide's: the guide leaves its pass
(:class:`~zoo.bayesian_attention._common.GuidePass`) and the model, when it replays exactly those
draws (as every ELBO does), reads the keys and class logits from it instead of running the
network again; with other draws it runs its own.

Predictions: :func:`predict_proba` (Monte-Carlo average over attention draws, or the
posterior-mean attention). Metrics for the calibration study: :mod:`zoo.bayesian_attention.metrics`.

Sites: ``attention_0`` ... ``attention_{L-1}`` (latent, absent for softmax) and ``y`` (observed),
all in plate ``data``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from zoo import devices
from zoo.array_namespace import convert_config
from zoo.bayesian_attention._common import (
    ATTENTION_TYPES,
    PRIOR_TYPES,
    check_choice,
    check_mask_rows,
    check_positive,
)
from zoo.spec import DataField, ModelSpec

__all__ = [
    "BAMClassifierConfig",
    "PREDICT_METHODS",
    "SPEC",
    "check_data",
    "kl_weight_schedule",
    "make_data",
    "predict_proba",
    "prepare",
]

PREDICT_METHODS = ("mc", "mean")


@dataclass(frozen=True)
class BAMClassifierConfig:
    """The architecture, the attention family, its prior and the KL weight (see the module)."""

    image_size: int
    num_classes: int = 10
    patch_size: int = 7
    width: int = 32
    num_heads: int = 2
    num_layers: int = 2
    mlp_dim: int = 64
    attention: str = "weibull"
    prior: str = "fixed"
    concentration: float = 10.0
    sigma: float = 0.1
    prior_alpha: float = 1.0
    prior_beta: float = 1.0
    prior_mean: float | None = None
    prior_sigma: float = 1.0
    prior_hidden: int = 16
    kl_weight: float = 1.0
    kl_anneal_steps: int = 0
    kl_anneal_start: float = 0.01
    attention_mask: np.ndarray | None = None  # (tokens, tokens) bool, True = visible key

    @property
    def grid(self) -> int:
        """Patches per side."""
        return self.image_size // self.patch_size

    @property
    def num_tokens(self) -> int:
        return self.grid**2

    @property
    def patch_dim(self) -> int:
        return self.patch_size**2

    @property
    def head_dim(self) -> int:
        return self.width // self.num_heads

    @property
    def contextual(self) -> bool:
        """Whether the network holds contextual-prior networks."""
        return self.prior == "contextual" and self.attention != "softmax"


# ------------------------------------------------------------------------------ checks


def _positive_int(name, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"expected {name} to be an int >= 1; got {value!r}.")
    return int(value)


def _positive_float(name, value, what="") -> float:
    if isinstance(value, bool) or not isinstance(value, int | float | np.integer | np.floating):
        raise ValueError(f"expected {name} to be a float > 0; got {value!r}.")
    check_positive(name, np.asarray(float(value)), what)
    return float(value)


def _check_images(x: np.ndarray, image_size: int | None = None, name: str = "data['x']") -> int:
    """``x`` (N, side * side) in [0, 1], which messages call ``name``; returns the side."""
    side = math.isqrt(x.shape[1])
    if side * side != x.shape[1]:
        raise ValueError(
            f"expected {name} of shape (N, side * side): square images, flattened; got "
            f"{x.shape[1]} pixels per row, not a square."
        )
    if image_size is not None and side != image_size:
        raise ValueError(
            f"expected {name} with {image_size}x{image_size} = {image_size**2} pixels per "
            f"row, as the fitted model; got shape {x.shape}."
        )
    if x.size and (x.min() < 0 or x.max() > 1):
        raise ValueError(
            f"expected {name} with pixel values in [0, 1]; got values in "
            f"[{x.min()}, {x.max()}]. Divide grey levels 0..255 by 255."
        )
    return side


def _check_labels(y: np.ndarray, n: int, num_classes: int) -> None:
    if y.shape != (n,):
        raise ValueError(f"expected data['y'] of shape ({n},), one label per image; got {y.shape}.")
    if y.size and (y.min() < 0 or y.max() >= num_classes):
        raise ValueError(
            f"expected labels in 0..{num_classes - 1} (num_classes={num_classes}); got values in "
            f"[{y.min()}, {y.max()}]."
        )


def check_data(data, config: BAMClassifierConfig) -> None:
    """New data (e.g. a test set) fit a fitted model: image size and label range."""
    _check_images(data["x"], config.image_size)
    _check_labels(data["y"], len(data["x"]), config.num_classes)


def _check_mask(mask, num_tokens: int) -> np.ndarray | None:
    if mask is None:
        return None
    mask = np.asarray(mask)
    if mask.dtype != bool:
        raise ValueError(
            f"expected attention_mask to be a bool array (True = visible key); got dtype "
            f"{mask.dtype}."
        )
    if mask.shape != (num_tokens, num_tokens):
        raise ValueError(
            f"expected attention_mask of shape (tokens, tokens) = ({num_tokens}, {num_tokens}); "
            f"got {mask.shape}."
        )
    check_mask_rows(mask)
    return mask.copy()


def prepare(
    data,
    num_classes: int = 10,
    patch_size: int = 7,
    width: int = 32,
    num_heads: int = 2,
    num_layers: int = 2,
    mlp_dim: int | None = None,
    attention: str = "weibull",
    prior: str = "fixed",
    concentration: float = 10.0,
    sigma: float = 0.1,
    prior_alpha: float = 1.0,
    prior_beta: float = 1.0,
    prior_mean: float | None = None,
    prior_sigma: float = 1.0,
    prior_hidden: int | None = None,
    kl_weight: float = 1.0,
    kl_anneal_steps: int = 0,
    kl_anneal_start: float = 0.01,
    attention_mask=None,
) -> BAMClassifierConfig:
    """Check the options against the data; returns the config.

    Parameters
    ----------
    data : dict
        ``x`` (N, side * side) floats in [0, 1]; ``y`` (N,) integer labels.
    num_classes : int
        Labels are ``0..num_classes - 1``.
    patch_size : int
        Divides the image side; ``(side / patch_size)^2`` tokens.
    width : int
        Model width, the tokens' embedding size (divisible by ``num_heads``).
    num_heads : int
        Attention heads per block.
    num_layers : int
        Transformer blocks.
    mlp_dim : int, optional
        Hidden units of each block's MLP (default ``2 * width``).
    attention : {"weibull", "lognormal", "softmax"}
        The attention weights: ``"weibull"``, latent with a Weibull posterior and a Gamma prior;
        ``"lognormal"``, latent with a log-normal posterior and prior; both have the softmax
        attention as posterior mean. ``"softmax"``: the deterministic softmax weights, no
        latent site (the guide is empty).
    prior : {"fixed", "contextual"}
        ``"fixed"``: the prior's ``prior_alpha`` (Weibull) or ``prior_mean`` (log-normal) as
        given. ``"contextual"``: that parameter is a softmax over the visible keys of a small
        network of the keys (one per layer, shared by the heads; ``prior_hidden`` units);
        ``prior_beta`` and ``prior_sigma`` stay fixed. No effect with ``attention="softmax"``.
    concentration : float
        Weibull shape ``k > 0`` of the posterior (larger: less noise).
    sigma : float
        Log-normal posterior scale ``> 0``.
    prior_alpha : float
        Shape of the Gamma prior of the Weibull attention weights, positive; unused with
        ``prior="contextual"``, where a network of the keys gives it.
    prior_beta : float
        Rate of the Gamma prior of the Weibull attention weights, positive.
    prior_mean : float, optional
        Mean of the log-normal prior of the attention weights, positive (default
        ``1 / (visible keys)``); unused with ``prior="contextual"``.
    prior_sigma : float
        Log-scale of the log-normal prior of the attention weights, positive.
    prior_hidden : int
        Hidden units of the contextual-prior networks (default: the head dimension).
    kl_weight : float
        Weight of the KL term (> 0; 1 is the ELBO); the weight after the warm-up.
    kl_anneal_steps : int
        SVI steps of a linear warm-up of the KL weight to ``kl_weight`` (0: none); see
        :func:`kl_weight_schedule`.
    kl_anneal_start : float
        Where the warm-up starts, as a fraction of ``kl_weight``.
    attention_mask : bool array (tokens, tokens), optional
        True where a token may attend to a key; every token must see at least one key.

    Raises
    ------
    ValueError
        Saying what was expected and what was got.
    """
    x, y = data["x"], data["y"]
    num_classes = _positive_int("num_classes", num_classes)
    if num_classes < 2:
        raise ValueError(f"expected num_classes >= 2; got {num_classes}.")
    side = _check_images(x)
    _check_labels(y, len(x), num_classes)
    patch_size = _positive_int("patch_size", patch_size)
    if side % patch_size:
        raise ValueError(
            f"expected a patch_size that divides the image side {side}; got {patch_size}."
        )
    width = _positive_int("width", width)
    num_heads = _positive_int("num_heads", num_heads)
    if width % num_heads:
        raise ValueError(f"expected a width divisible by num_heads={num_heads}; got {width}.")
    attention = check_choice("attention", attention, ATTENTION_TYPES)
    prior = check_choice("prior", prior, PRIOR_TYPES)
    if (
        isinstance(kl_anneal_steps, bool)
        or not isinstance(kl_anneal_steps, int | np.integer)
        or kl_anneal_steps < 0
    ):
        raise ValueError(f"expected kl_anneal_steps to be an int >= 0; got {kl_anneal_steps!r}.")
    kl_anneal_start = _positive_float("kl_anneal_start", kl_anneal_start)
    if kl_anneal_start > 1:
        raise ValueError(
            f"expected kl_anneal_start in (0, 1] (a fraction of kl_weight); got {kl_anneal_start}."
        )
    num_tokens = (side // patch_size) ** 2
    return BAMClassifierConfig(
        image_size=side,
        num_classes=num_classes,
        patch_size=patch_size,
        width=width,
        num_heads=num_heads,
        num_layers=_positive_int("num_layers", num_layers),
        mlp_dim=_positive_int("mlp_dim", 2 * width if mlp_dim is None else mlp_dim),
        attention=attention,
        prior=prior,
        concentration=_positive_float("concentration", concentration, "the Weibull shape k"),
        sigma=_positive_float("sigma", sigma, "the log-normal scale"),
        prior_alpha=_positive_float("prior_alpha", prior_alpha, "the Gamma prior's shape"),
        prior_beta=_positive_float("prior_beta", prior_beta, "the Gamma prior's rate"),
        prior_mean=None if prior_mean is None else _positive_float("prior_mean", prior_mean),
        prior_sigma=_positive_float("prior_sigma", prior_sigma, "the log-normal prior's scale"),
        prior_hidden=_positive_int(
            "prior_hidden", width // num_heads if prior_hidden is None else prior_hidden
        ),
        kl_weight=_positive_float("kl_weight", kl_weight),
        kl_anneal_steps=int(kl_anneal_steps),
        kl_anneal_start=kl_anneal_start,
        attention_mask=_check_mask(attention_mask, num_tokens),
    )


def kl_weight_schedule(config: BAMClassifierConfig, num_steps: int | None = None):
    """``step -> KL weight``: linear from ``kl_anneal_start * kl_weight`` at step 0 to
    ``kl_weight`` at step ``kl_anneal_steps``, then constant (constant ``kl_weight`` when
    ``kl_anneal_steps`` is 0). ``num_steps`` (the fit's length) is accepted for the SVI hook's
    signature and not used."""
    start, steps, end = config.kl_anneal_start, config.kl_anneal_steps, config.kl_weight

    def schedule(step: int) -> float:
        if steps == 0 or step >= steps:
            return end
        return end * (start + (1.0 - start) * step / steps)

    return schedule


def temperature_schedule(config: BAMClassifierConfig, num_steps: int):
    """The twins' hook for SVI: ``step -> value`` to pass as ``temperature``, the KL weight of
    the warm-up (:func:`kl_weight_schedule`); None without a warm-up, and the model reads its
    constant ``kl_weight`` from the config (a number, not a tensor: at 1 no scale at all, and no
    tensor arithmetic on the sites' scales)."""
    return kl_weight_schedule(config, num_steps) if config.kl_anneal_steps else None


# ------------------------------------------------------------------------------ data


def make_data(rng: np.random.Generator, n: int = 200) -> dict:
    """Synthetic 28x28 "digits": class ``c`` is a bright blob at one of ten places on a ring,
    plus a faint bar and pixel noise, in [0, 1]. Labels (N,) int64."""
    side = 28
    labels = rng.integers(0, 10, size=n)
    grid = np.arange(side) - (side - 1) / 2
    yy, xx = np.meshgrid(grid, grid, indexing="ij")
    angles = 2 * np.pi * np.arange(10) / 10
    centres = 8.0 * np.stack([np.sin(angles), np.cos(angles)], axis=1)  # (10, 2)
    cy, cx = centres[labels, 0, None, None], centres[labels, 1, None, None]
    blob = np.exp(-((yy - cy) ** 2 + (xx - cx) ** 2) / (2 * 3.0**2))
    bar = 0.3 * (np.abs(xx - cx / 2) < 1.5)
    images = blob + bar + 0.1 * rng.random((n, side, side))
    x = np.clip(images, 0.0, 1.0).reshape(n, side * side)
    return {"x": x.astype(np.float64), "y": labels.astype(np.int64)}


# ------------------------------------------------------------------------------ prediction


def predict_proba(
    result,
    x,
    *,
    num_samples: int = 20,
    method: str = "mc",
    seed: int = 0,
    batch_size: int = 500,
    backend: str | None = None,
    device: str = "cpu",
) -> np.ndarray:
    """Class probabilities of a fitted ``bam_classifier`` for images ``x``.

    Parameters
    ----------
    result : FitResult
        A fit of ``bam_classifier`` (either backend).
    x : array, shape (N, side * side) or (N, side, side)
        Pixel values in [0, 1].
    num_samples : int
        ``method="mc"``: forward passes averaged, each with fresh attention weights drawn from the
        guide at every layer. Ignored for ``"mean"`` and for softmax attention.
    method : {"mc", "mean"}
        ``"mc"``: the Monte-Carlo predictive ``(1/S) sum_s p(y | x, S_s)``; ``"mean"``: one pass
        with the posterior-mean attention (the softmax weights ``p``).
    seed : int
        Seeds the attention draws.
    batch_size : int
        Images per forward pass (bounds memory: ``num_samples * batch_size`` passes at once).
    backend : {"pyro", "numpyro"}, optional
        Where to compute; default: the fit's backend.
    device : str
        ``"cpu"``, ``"cuda"``, ...

    Returns
    -------
    ndarray, shape (N, num_classes)
        Rows sum to one.
    """
    if getattr(result, "model", None) != "bam_classifier":
        raise ValueError(
            "expected a FitResult of model 'bam_classifier'; got "
            f"{getattr(result, 'model', type(result).__name__)!r}."
        )
    method = check_choice("method", method, PREDICT_METHODS)
    num_samples = _positive_int("num_samples", num_samples)
    batch_size = _positive_int("batch_size", batch_size)
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise ValueError(f"expected seed to be an int; got {seed!r}.")
    config = result.config
    x = np.asarray(x)
    if x.ndim == 3:
        x = x.reshape(len(x), -1)
    if x.ndim != 2 or x.dtype.kind not in "fiub":
        raise ValueError(
            "expected images x of shape (N, side * side) or (N, side, side), real-valued; got "
            f"shape {x.shape}, dtype {x.dtype}."
        )
    if not np.all(np.isfinite(x)):
        raise ValueError("expected finite pixel values; got NaN or inf.")
    _check_images(x, config.image_size, "images x")
    backend = backend or result.backend
    twin = SPEC.twin(backend)
    dtype = result.options.get("dtype", SPEC.dtype)
    place = devices.resolve(backend, device)
    return twin.predict_proba(
        result.raw_params,
        x,
        convert_config(config, lambda a: devices.asarray(backend, a, place, dtype)),
        num_samples=num_samples,
        method=method,
        seed=int(seed),
        batch_size=batch_size,
        device=place,
        dtype=dtype,
    )


def objective_name(config) -> str:
    """The ELBO, or with its KL weighted (the weight after any warm-up)."""
    if config.kl_weight == 1.0:
        return "ELBO"
    return f"ELBO with its KL weighted by {config.kl_weight:g}"


SPEC = ModelSpec(
    name="bam_classifier",
    description="Transformer classifier with Bayesian (Weibull / log-normal) attention weights",
    data={
        "x": DataField(ndim=2, kind="f", doc="(N, side * side) images in [0, 1], flattened"),
        "y": DataField(
            ndim=1, kind="iu", doc="(N,) integer class labels", bounds=(0, "num_classes")
        ),
    },
    backends={
        "pyro": "zoo.bayesian_attention.pyro_classifier",
        "numpyro": "zoo.bayesian_attention.numpyro_classifier",
    },
    guides=("amortized",),
    prepare=prepare,
    make_data=make_data,
    config_type=BAMClassifierConfig,
    check_data=check_data,
    objective_name=objective_name,
    dtype="float32",
    # A transformer: Adam at 3e-3, as the figures of record were trained (the generic SVI rate
    # of 0.05 suits a mixture's few parameters, not a network's).
    algorithm_defaults={"svi": {"lr": 3e-3, "num_steps": 5_000, "tol": 1e-3}},
    minibatch=True,
    # 14x14 patches (4 tokens) keep the Monte-Carlo KL noise of the shared checks' short fits
    # well below the improvement they look for.
    example_options={
        "attention": "weibull",
        "patch_size": 14,
        "width": 8,
        "num_heads": 2,
        "num_layers": 1,
        "mlp_dim": 8,
    },
    tags=("amortized", "neural", "local-latent", "classifier", "attention"),
)
