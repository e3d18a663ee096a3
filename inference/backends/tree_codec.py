"""Nested Python state <-> (flat dict of numpy arrays, JSON skeleton): checkpoints without pickle."""

from __future__ import annotations

import numpy as np


def encode(obj, to_numpy, arrays: dict, prefix: str = "s"):
    """Return a JSON-able skeleton of ``obj``; array leaves go into ``arrays`` under fresh keys."""
    if isinstance(obj, dict):
        return {
            "dict": [
                [
                    encode(k, to_numpy, arrays, f"{prefix}.k{i}"),
                    encode(v, to_numpy, arrays, f"{prefix}.{i}"),
                ]
                for i, (k, v) in enumerate(obj.items())
            ]
        }
    if isinstance(obj, list | tuple):
        kind = "tuple" if isinstance(obj, tuple) else "list"
        return {kind: [encode(v, to_numpy, arrays, f"{prefix}.{i}") for i, v in enumerate(obj)]}
    if obj is None or isinstance(obj, bool | int | float | str):
        return {"value": obj}
    arrays[prefix] = np.asarray(to_numpy(obj))
    return {"array": prefix}


def decode(skeleton, arrays: dict, from_numpy):
    """Inverse of :func:`encode`; ``from_numpy`` turns each stored array into a backend array."""
    if "dict" in skeleton:
        return {
            decode(k, arrays, from_numpy): decode(v, arrays, from_numpy)
            for k, v in skeleton["dict"]
        }
    if "list" in skeleton:
        return [decode(v, arrays, from_numpy) for v in skeleton["list"]]
    if "tuple" in skeleton:
        return tuple(decode(v, arrays, from_numpy) for v in skeleton["tuple"])
    if "array" in skeleton:
        return from_numpy(arrays[skeleton["array"]])
    return skeleton["value"]
