r"""Variational autoencoder on binary images (Kingma & Welling, 2014).

Generative process, for ``n = 1..N``::

    z_n ~ Normal(0, I_L)                                   (latent_dim L, default 50)
    x_n | z_n ~ Bernoulli(sigmoid(decoder(z_n)))           (D pixels, independent given z_n)

The guide is amortised: ``q(z_n | x_n) = Normal(loc(x_n), scale(x_n))`` with ``loc`` and ``scale``
computed by an encoder network and sampled by reparameterisation. Encoder and decoder are MLPs
with ``hidden`` layer sizes (default 200, 200, as in Burda et al. 2016) and ``activation``; the
Pyro twin registers them with ``pyro.module``, the NumPyro twin as equinox modules through
``numpyro.contrib.module.eqx_module``, under the same parameter names (``encoder.body.hidden.0.weight``,
..., ``decoder.logits.bias``) in torch's ``(out, in)`` layout, so weights move between backends.

Sites: ``z`` (latent) and ``x`` (observed) in plate ``data``; parameters: the networks'.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from zoo.options import check_choice, check_types
from zoo.spec import DataField, ModelSpec
from zoo.vae.networks import decode, encode

__all__ = ["SPEC", "VAEConfig", "decode", "encode"]

ACTIVATIONS = ("tanh", "relu", "softplus")


@dataclass(frozen=True)
class VAEConfig:
    num_pixels: int
    latent_dim: int = 50
    hidden: tuple[int, ...] = (200, 200)
    activation: str = "tanh"

    def __post_init__(self):  # a saved fit stores ``hidden`` as a JSON list
        object.__setattr__(self, "hidden", tuple(int(h) for h in self.hidden))


def _positive_int(name, value) -> int:
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise ValueError(f"{name} must be an int in the range [1, inf); got {value!r}.")
    return int(value)


def check_binary(x: np.ndarray, key: str = "x") -> None:
    """A Bernoulli likelihood needs pixels in {0, 1}."""
    bad = (x != 0) & (x != 1)
    if bad.any():
        rows = np.unique(np.nonzero(bad)[0])
        raise ValueError(
            f"data[{key!r}] must hold binary pixels (0 or 1) for a Bernoulli likelihood; "
            f"{bad.sum()} value(s) in {len(rows)} row(s) are not, e.g. {x[bad][:3].tolist()}. "
            "Binarize grey images first (zoo.datasets.dynamic_binarize, which takes grey levels in "
            "[0, 255]), or fit grey levels in [0, 1] with dynamic_binarization=True."
        )


def check_data(data, config: VAEConfig) -> None:
    x = data["x"]
    if x.shape[1] != config.num_pixels:
        raise ValueError(
            f"data['x'] must have {config.num_pixels} pixels per row, as the fitted model; "
            f"got shape {x.shape}."
        )
    check_binary(x)


def prepare(
    data,
    latent_dim: int = 50,
    hidden: int | tuple[int, ...] = (200, 200),
    activation: str = "tanh",
) -> VAEConfig:
    """Check the options against the data; returns the config.

    Parameters
    ----------
    data : dict
        ``x``: (N, D) binary pixels (0 or 1), images flattened.
    latent_dim : int
        ``L >= 1``, the dimension of each image's latent ``z_n ~ Normal(0, I_L)``.
    hidden : int or tuple of int
        Sizes of the hidden layers (each ``>= 1``, at least one layer; an int is one layer): the
        encoder's from the pixels on, the decoder's the same in reverse order. The default
        ``(200, 200)`` is Burda et al.'s (2016).
    activation : {"tanh", "relu", "softplus"}
        The nonlinearity after every hidden layer of both networks.
    """
    x = data["x"]
    check_binary(x)
    check_types(prepare, {"hidden": hidden}, "model 'vae'")  # a string would read as digits
    hidden = (hidden,) if isinstance(hidden, int | np.integer) else tuple(hidden)
    if not hidden:
        raise ValueError("hidden must list at least one layer size; got ().")
    return VAEConfig(
        num_pixels=int(x.shape[1]),
        latent_dim=_positive_int("latent_dim", latent_dim),
        hidden=tuple(_positive_int("hidden layer size", h) for h in hidden),
        activation=check_choice("activation", activation, ACTIVATIONS),
    )


def make_data(rng: np.random.Generator, n: int = 200) -> dict:
    """Binary 8x8 images: scikit-learn's digits, thresholded, resampled with replacement."""
    from zoo.datasets import load_digits_binarized

    images, _ = load_digits_binarized()
    return {"x": images[rng.integers(0, len(images), size=n)].astype(np.float32)}


SPEC = ModelSpec(
    name="vae",
    description="Variational autoencoder for binary images, amortised Gaussian guide",
    data={
        "x": DataField(
            ndim=2, kind="fiub", doc="(N, D) binary pixels, images flattened", binary=True
        )
    },
    backends={"pyro": "zoo.vae.pyro_model", "numpyro": "zoo.vae.numpyro_model"},
    guides=("amortized",),
    prepare=prepare,
    make_data=make_data,
    config_type=VAEConfig,
    check_data=check_data,
    dtype="float32",
    # Adam at 1e-3, as VAEs are trained (Kingma & Welling 2014; Burda et al. 2016): the generic
    # SVI rate of 0.05 suits a mixture's few parameters and drives the networks to NaN.
    algorithm_defaults={"svi": {"lr": 1e-3, "num_steps": 10_000, "tol": 1e-3}},
    minibatch=True,
    example_options={"latent_dim": 2, "hidden": (16,)},
    tags=("amortized", "neural", "local-latent"),
)
