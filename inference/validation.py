"""Validation during a fit: a held-out objective every few steps, early stopping, best params.

``fit(..., validation_data=..., validate_every=N, patience=P)`` evaluates the per-point held-out
objective (for SVI: the ELBO of the validation data under the current guide, its discrete
latents summed out where training sums them: an enumerated guide) every ``N`` steps,
records it in ``history["validation_step"]`` and ``history["validation"]``, stops after ``P``
evaluations without improvement, and returns the parameters of the best evaluation, as
scikit-learn's ``early_stopping`` and Keras's ``restore_best_weights`` do.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass(frozen=True)
class EarlyStopping:
    """``fit``'s ``validation_data``, ``validate_every`` and ``patience`` as given: held-out data
    scored every ``every`` steps (None: one epoch of minibatches, else 100), the fit stopping
    after ``patience`` evaluations without improvement (None: never); no validation without
    ``validation_data``."""

    validation_data: Any = None
    every: int | None = None
    patience: int | None = None


class Validation:
    def __init__(self, evaluate: Callable, every: int, patience: int | None):
        if isinstance(every, bool) or not isinstance(every, int | np.integer) or every < 1:
            raise ValueError(f"validate_every must be an int in the range [1, inf); got {every!r}.")
        if patience is not None and (
            isinstance(patience, bool) or not isinstance(patience, int | np.integer) or patience < 1
        ):
            raise ValueError(f"patience must be None or an int in [1, inf); got {patience!r}.")
        self.evaluate, self.every, self.patience = evaluate, int(every), patience
        self.best_step, self.best_value, self.best_params = None, -np.inf, None

    def after_step(self, step: int, state, alg, history) -> bool:
        """Evaluate if due; returns True when early stopping says stop."""
        if step % self.every:
            return False
        value = float(self.evaluate(state))
        history.setdefault("validation_step", []).append(step)
        history.setdefault("validation", []).append(value)
        if not np.isfinite(value):
            return False  # the fit ends as a non-finite objective does (inference.loop)
        if value > self.best_value:
            self.best_step, self.best_value = step, value
            self.best_params = alg.get_params(state)
        evaluations_since_best = (step - self.best_step) // self.every
        return self.patience is not None and evaluations_since_best >= self.patience

    # Checkpoints carry the best parameters so a resumed run returns what an uninterrupted one
    # would.
    def state_dict(self) -> tuple[dict, dict]:
        arrays = {f"best/{k}": v for k, v in (self.best_params or {}).items()}
        return {"best_step": self.best_step, "best_value": self.best_value}, arrays

    def load_state_dict(self, skeleton: dict, arrays: dict) -> None:
        self.best_step = skeleton["best_step"]
        self.best_value = float(skeleton["best_value"])
        best = {k[len("best/") :]: arrays.pop(k) for k in list(arrays) if k.startswith("best/")}
        self.best_params = best or None
