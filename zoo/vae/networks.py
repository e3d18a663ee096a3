"""The VAE's encoder and decoder in numpy, from a fit's named parameters (for pictures and
backend-neutral checks; training runs the torch and equinox twins of the same networks)."""

from __future__ import annotations

import numpy as np

_ACTIVATIONS = {"tanh": np.tanh, "relu": lambda h: np.maximum(h, 0), "softplus": np.logaddexp}


def _activation(name):
    fn = _ACTIVATIONS[name]
    return (lambda h: fn(0, h)) if name == "softplus" else fn


def _linear(params, name, h):
    return h @ params[name + ".weight"].T + params[name + ".bias"]


def _body(params, prefix, config, h):
    act = _activation(config.activation)
    for i in range(len(config.hidden)):
        h = act(_linear(params, f"{prefix}.body.hidden.{i}", h))
    return h


def encode(params, config, x) -> tuple[np.ndarray, np.ndarray]:
    """``loc, scale`` (N, L) of q(z | x) for binary images ``x`` (N, D)."""
    h = _body(params, "encoder", config, np.asarray(x, dtype=np.float64))
    return _linear(params, "encoder.loc", h), np.exp(_linear(params, "encoder.log_scale", h))


def decode(params, config, z) -> np.ndarray:
    """Pixel probabilities (N, D) of p(x | z) for latents ``z`` (N, L)."""
    from scipy.special import expit  # here: SciPy's special functions import slowly

    h = _body(params, "decoder", config, np.asarray(z, dtype=np.float64))
    return expit(_linear(params, "decoder.logits", h))
