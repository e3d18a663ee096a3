"""What both backend adapters share: dtype names and config conversion."""

from __future__ import annotations

import dataclasses

import numpy as np

DTYPES = ("float32", "float64")


def check_dtype(dtype: str) -> str:
    if dtype not in DTYPES:
        raise ValueError(f"dtype must be one of {list(DTYPES)}; got {dtype!r}.")
    return dtype


def convert_config(config, to_array):
    """A copy of a model config with its numpy arrays turned into backend arrays."""
    changes = {
        f.name: to_array(getattr(config, f.name))
        for f in dataclasses.fields(config)
        if isinstance(getattr(config, f.name), np.ndarray)
    }
    return dataclasses.replace(config, **changes)
