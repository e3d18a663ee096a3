"""What every algorithm returns from a step, and the context ``init`` receives."""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any, NamedTuple

import numpy as np

from zoo.spec import ModelSpec


class Info(NamedTuple):
    """``objective``: the ELBO (or the log-likelihood for EM) in nats, summed over data points."""

    objective: float


@dataclass
class Problem:
    """One model, data set and backend placement, as every algorithm's ``init`` receives it."""

    spec: ModelSpec
    data: dict[str, np.ndarray]  # validated numpy
    config: Any  # the model config, numpy arrays
    backend: ModuleType  # inference.backends.pyro_backend or numpyro_backend
    device: Any
    dtype: str
    seed: int
    # Data not held in memory (``inference.streaming``): ``data`` is then its first minibatch.
    source: Any = None

    @property
    def num_data(self) -> int:
        if self.source is not None:
            return self.source.num_data
        return len(next(iter(self.data.values())))

    def backend_data(self) -> dict:
        return {k: self.backend.asarray(v, self.device, self.dtype) for k, v in self.data.items()}

    def backend_config(self):
        return self.backend.backend_config(self.config, self.device, self.dtype)
