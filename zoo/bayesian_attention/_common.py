"""What the torch and JAX Bayesian attention modules share: names, the result type, checks.

Nothing here imports torch or JAX. The checks take numpy arrays (the backends convert concrete
values and skip the checks for values that are being traced).
"""

from __future__ import annotations

import threading
from typing import Any, NamedTuple

import numpy as np

ATTENTION_TYPES = ("softmax", "weibull", "lognormal")
PRIOR_TYPES = ("fixed", "contextual")
MODES = ("train", "eval")

#: Euler-Mascheroni constant, ``-digamma(1)``.
EULER_GAMMA = 0.57721566490153286060651209008240243


class BamOutput(NamedTuple):
    """The result of one attention site.

    Attributes
    ----------
    output : array, shape (..., Lq, Dv)
        ``weights @ v``.
    weights : array, shape (..., Lq, Lk)
        Normalised attention weights (zero on masked keys, summing to one over keys).
    kl : array, shape (..., Lq)
        ``KL(q(S) || p(S))`` summed over the visible keys of each query (zero for
        ``"softmax"``); ``kl.sum()`` is the KL term of the site.
    """

    output: Any
    weights: Any
    kl: Any


def check_choice(name: str, value: Any, choices: tuple[str, ...]) -> str:
    """Return ``value`` if it is one of ``choices``, else raise a ``ValueError``."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"expected {name} to be one of {list(choices)}; got {value!r}.")
    return value


def check_positive(name: str, value: np.ndarray | None, what: str = "") -> None:
    """Raise a ``ValueError`` unless every entry of ``value`` is finite and positive.

    ``value`` is ``None`` when the backend could not read it (a traced value): nothing is checked.
    """
    if value is None:
        return
    value = np.asarray(value)
    if value.size and np.all(np.isfinite(value)) and np.all(value > 0):
        return
    what = f" ({what})" if what else ""
    if value.size == 1:
        got = f"{value.item()!r}"
    else:
        bad = value[~(np.isfinite(value) & (value > 0))]
        got = f"an array of shape {value.shape} with {bad.size} bad entries, e.g. {bad.flat[0]!r}"
    raise ValueError(f"expected {name}{what} > 0 and finite; got {got}.")


def check_prior_param(name: str, value, shape, visible: np.ndarray | None) -> None:
    """Check a prior parameter: broadcastable to the logits' ``shape`` and positive on the
    visible keys (``visible``: bool, ``shape``; None when there is no mask). Values on hidden
    keys are ignored (a contextual prior is zero there). ``value`` None: not checked."""
    if value is None:
        return
    value = np.asarray(value)
    if value.size == 1:
        check_positive(name, value)
        return
    try:
        full = np.broadcast_to(value, tuple(shape))
    except ValueError:
        raise ValueError(
            f"expected {name} broadcastable to the logits' shape {tuple(shape)}; "
            f"got shape {value.shape}."
        ) from None
    check_positive(name, full if visible is None else full[visible], "on the visible keys")


def check_mask_rows(mask: np.ndarray | None) -> None:
    """Raise a ``ValueError`` if ``mask`` (shape (..., Lq, Lk), True = visible) hides every key
    of some query."""
    if mask is None:
        return
    empty = ~np.any(mask, axis=-1)
    if np.any(empty):
        first = tuple(int(i) for i in np.argwhere(empty)[0])
        raise ValueError(
            "expected a mask that leaves every query at least one visible key; got "
            f"{int(empty.sum())} query row(s) whose mask hides every key, the first at index "
            f"{first} of the (..., Lq) batch."
        )


def check_num_samples(num_samples: Any, mode: str) -> int:
    """``num_samples``: 0 (posterior-mean weights) or a positive count; at most 1 in training."""
    if isinstance(num_samples, bool) or not isinstance(num_samples, int | np.integer):
        raise ValueError(f"expected num_samples to be an int >= 0; got {num_samples!r}.")
    if num_samples < 0:
        raise ValueError(f"expected num_samples >= 0; got {num_samples}.")
    if mode == "train" and num_samples > 1:
        raise ValueError(
            "expected num_samples in (0, 1) in mode='train' (one draw per forward pass); "
            f"got {num_samples}. Average several draws in mode='eval'."
        )
    return int(num_samples)


def check_key_dims(key_dim: Any, hidden_dim: Any) -> int:
    """A contextual prior's sizes: both positive ints; returns the hidden size (``key_dim`` for
    None)."""
    hidden_dim = key_dim if hidden_dim is None else hidden_dim
    for name, value in (("key_dim", key_dim), ("hidden_dim", hidden_dim)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ValueError(f"expected {name} to be a positive int; got {value!r}.")
    return hidden_dim


def check_prior_keys(k_shape, key_dim: int) -> None:
    """Keys a contextual prior of ``key_dim`` inputs can score: shape (..., Lk, key_dim)."""
    if len(k_shape) < 2 or k_shape[-1] != key_dim:
        raise ValueError(
            f"expected keys of shape (..., Lk, {key_dim}) for a contextual prior of "
            f"key_dim={key_dim}; got shape {tuple(k_shape)}."
        )


def check_shapes(q_shape, k_shape, v_shape) -> None:
    """q (..., Lq, D), k (..., Lk, D), v (..., Lk, Dv), the leading dimensions broadcasting."""
    if len(q_shape) < 2 or len(k_shape) < 2 or len(v_shape) < 2:
        raise ValueError(
            "expected q, k, v with at least 2 dimensions (..., L, D); got shapes "
            f"{tuple(q_shape)}, {tuple(k_shape)}, {tuple(v_shape)}."
        )
    if q_shape[-1] != k_shape[-1]:
        raise ValueError(
            "expected q and k with the same last dimension; got shapes "
            f"{tuple(q_shape)} and {tuple(k_shape)}."
        )
    if k_shape[-2] != v_shape[-2]:
        raise ValueError(
            "expected k and v with the same number of keys (dimension -2); got shapes "
            f"{tuple(k_shape)} and {tuple(v_shape)}."
        )
    try:
        np.broadcast_shapes(tuple(q_shape[:-2]), tuple(k_shape[:-2]), tuple(v_shape[:-2]))
    except ValueError:
        raise ValueError(
            "expected q, k, v whose leading (batch) dimensions broadcast together; got shapes q "
            f"{tuple(q_shape)}, k {tuple(k_shape)}, v {tuple(v_shape)}."
        ) from None


def check_noise_shape(noise_shape, expected_shape) -> None:
    if tuple(noise_shape) != tuple(expected_shape):
        raise ValueError(
            f"expected noise of shape {tuple(expected_shape)}; got {tuple(noise_shape)}."
        )


# ------------------------------------------------------------------------------ the guide's pass


class GuidePass:
    """The guide's forward pass of the classifier: what the model needs to skip its own.

    Given the same images and the same attention draws, the model's forward pass is the guide's:
    the same keys, the same class logits. The guide records them; the model, when it replays
    exactly these draws (the ELBO's ``replay(model, guide_trace)``), reads them instead of running
    the network a second time, which would also double the backward pass.

    Attributes
    ----------
    x : array
        The images the guide saw (matched by identity).
    blocks : list
        The guide's transformer blocks (their contextual-prior networks give the model's prior);
        the guide has bound them to the parameter store for this evaluation, so a model that
        reuses the pass need not bind its own network.
    keys, logits, draws, log_draws : list
        Per layer: the keys (..., heads, tokens, head_dim), the attention logits, the guide's
        draw of the attention weights (matched by identity) and, where a backend keeps it apart
        from the draw (NumPyro), the draw's log.
    class_logits : array
        The class logits of the pass with these draws.
    """

    __slots__ = ("x", "blocks", "keys", "logits", "draws", "log_draws", "class_logits")

    def __init__(self, x, blocks):
        self.x, self.blocks = x, blocks
        self.keys, self.logits, self.draws, self.log_draws = [], [], [], []
        self.class_logits = None


_last_guide_pass = threading.local()


def remember_guide_pass(record: GuidePass) -> None:
    """Keep the guide's pass for the next model call on this thread (replacing any older one)."""
    _last_guide_pass.value = record


def take_guide_pass(x) -> GuidePass | None:
    """The pass the guide last recorded if it was on these very images (``x`` the same object),
    else None; either way the slot is emptied, so a pass is offered to one model call only."""
    record = getattr(_last_guide_pass, "value", None)
    _last_guide_pass.value = None
    return record if record is not None and record.x is x else None


def replay_guide_pass(record: GuidePass | None, sample_prior, draws: list):
    """The model's side of :class:`GuidePass`: its class logits, or None.

    Draws every attention site from the prior at the guide's keys (``sample_prior(i, attn,
    keys, logits) -> draw``, appending each draw to ``draws``) while the draws are the guide's
    own; returns the guide's class logits if all are. On the first draw that is not (or without
    a record) it returns None, and the model runs its own pass, reusing the ``draws`` made.
    """
    if record is None:
        return None
    for i, block in enumerate(record.blocks):
        draw = sample_prior(i, block.attn, record.keys[i], record.logits[i])
        draws.append(draw)
        if draw is not record.draws[i]:
            return None
    return record.class_logits
