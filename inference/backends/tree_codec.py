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


_NODES = ("dict", "list", "tuple", "array", "value")


def leaves(skeleton, arrays: dict, partial: bool = False) -> dict[str, np.ndarray] | None:
    """The arrays of a checkpointed state by their place in it (dict keys by name, sequence
    items by index), whatever order they were stored in: two states of the same run have the
    same places. ``skeleton`` may hold encoded parts in plain dicts (``{"step": 3, "inner":
    ...}``); arrays no part of it names are their own place. None for a layout this cannot read:
    a skeleton that names arrays stored under other keys (an algorithm that renames the arrays
    of the states it is made of), unless ``partial``: then the places whose arrays are missing
    (a damaged file) are left out."""
    out: dict[str, np.ndarray] = {}
    named: set[str] = set()

    def walk(node, place):
        if isinstance(node, dict) and len(node) == 1 and next(iter(node)) in _NODES:
            kind, value = next(iter(node.items()))
            if kind == "array":
                named.add(value)
                if value in arrays:
                    out[place] = arrays[value]
            elif kind == "dict":
                for key, item in value:
                    walk(item, f"{place}[{decode(key, arrays, lambda a: a)!r}]")
            elif kind in ("list", "tuple"):
                for i, item in enumerate(value):
                    walk(item, f"{place}[{i}]")
        elif isinstance(node, dict):
            for key, item in node.items():
                walk(item, f"{place}.{key}" if place else str(key))
        elif isinstance(node, list):
            for i, item in enumerate(node):
                walk(item, f"{place}[{i}]")

    walk(skeleton, "")
    if not partial and not named <= set(arrays):
        return None
    out.update({key: value for key, value in arrays.items() if key not in named})
    return out
