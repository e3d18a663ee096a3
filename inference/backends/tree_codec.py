"""Nested Python state <-> (flat dict of numpy arrays, JSON skeleton): checkpoints without pickle."""

from __future__ import annotations

import reprlib

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


#: The kinds of node a skeleton is made of, each a mapping of one key.
_NODES = ("dict", "list", "tuple", "array", "value")
#: The plain values a skeleton holds as they are (``{"value": ...}``).
_SCALARS = (type(None), bool, int, float, str)


def decode(skeleton, arrays: dict, from_numpy, place: str = ""):
    """Inverse of :func:`encode`; ``from_numpy`` turns each stored array into a backend array.
    A skeleton :func:`encode` never writes (a damaged or hand-edited file) is a ``ValueError``
    naming the place of the bad node: ``place`` (a state's field name), then dict keys and
    sequence items in brackets."""
    kind, content = _node(skeleton, place)
    if kind == "dict":
        return dict(_dict_items(content, arrays, from_numpy, place))
    if kind in ("list", "tuple"):
        if not isinstance(content, list):
            raise ValueError(
                f"{_where(place)} is a {kind} whose items are {_short(content)}, not a list"
            )
        items = [decode(v, arrays, from_numpy, f"{place}[{i}]") for i, v in enumerate(content)]
        return items if kind == "list" else tuple(items)
    if kind == "array":
        if not isinstance(content, str):
            raise ValueError(
                f"{_where(place)} names its array by {_short(content)}, not by a member's name"
            )
        return from_numpy(arrays[content])
    if not isinstance(content, _SCALARS):  # JSON's scalars: encode writes nothing else here
        raise ValueError(
            f"{_where(place)} holds the value {_short(content)}, not a number, a string, "
            "true, false or null"
        )
    return content


def _where(place: str) -> str:
    return f"its state's field {place!r}" if place else "its state"


def _short(value) -> str:
    """``value`` for a message, cut short (a damaged file may hold anything, at any length)."""
    return reprlib.repr(value)


def _node(skeleton, place: str) -> tuple[str, object]:
    """``(kind, content)`` of a skeleton node: a one-key mapping of one of :data:`_NODES`."""
    if not (isinstance(skeleton, dict) and len(skeleton) == 1 and next(iter(skeleton)) in _NODES):
        raise ValueError(
            f"{_where(place)} is {_short(skeleton)}, not a value as the zoo writes one (a "
            f"mapping of one key: {', '.join(_NODES)})"
        )
    return next(iter(skeleton.items()))


def _dict_items(content, arrays: dict, from_numpy, place: str):
    """The ``(key, value)`` pairs of a ``{"dict": [[key, value], ...]}`` node, decoded."""
    if not isinstance(content, list):
        raise ValueError(
            f"{_where(place)} is a dict whose items are {_short(content)}, not a list of "
            "[key, value] pairs"
        )
    for i, pair in enumerate(content):
        if not (isinstance(pair, list) and len(pair) == 2):
            raise ValueError(
                f"{_where(place)} is a dict whose item {i} is {_short(pair)}, not a [key, "
                "value] pair"
            )
        key = decode(pair[0], arrays, from_numpy, f"{place}(key {i})")
        try:
            hash(key)
        except TypeError:
            raise ValueError(
                f"{_where(place)} is a dict whose key {i} is {_short(key)}, which cannot be a key"
            ) from None
        yield key, decode(pair[1], arrays, from_numpy, f"{place}[{key!r}]")


def as_numpy(value) -> np.ndarray:
    """A backend array as numpy, whatever its backend: a torch tensor (detached, on the host),
    a JAX or numpy array."""
    if hasattr(value, "detach"):
        return value.detach().cpu().numpy()
    return np.asarray(value)


def place_like(saved, fresh):
    """The decoded tree ``saved`` with each numpy array put where the array at its place in
    ``fresh`` is (a torch tensor on its device, a JAX array on its device or sharding), and each
    sequence of ``fresh``'s type (a named tuple of a kernel's state); arrays at places ``fresh``
    does not have (a part that grows as a run goes: an optimiser's moments, a sampler's draws)
    stay numpy."""
    if isinstance(saved, dict):
        like = fresh if isinstance(fresh, dict) else {}
        return {k: place_like(v, like.get(k)) for k, v in saved.items()}
    if isinstance(saved, list | tuple):
        like = fresh if isinstance(fresh, list | tuple) and len(fresh) == len(saved) else ()
        items = [place_like(v, like[i] if like else None) for i, v in enumerate(saved)]
        if like and isinstance(like, tuple) and hasattr(like, "_fields"):
            return type(like)(*items)
        return type(like)(items) if like else type(saved)(items)
    if not isinstance(saved, np.ndarray) or fresh is None or isinstance(fresh, np.ndarray):
        return saved
    if hasattr(fresh, "new_tensor"):  # torch: same device (dtypes are checked equal)
        return fresh.new_tensor(saved)
    if hasattr(fresh, "sharding"):  # JAX: committed where the fresh array is
        import jax

        return jax.device_put(saved, fresh.sharding)
    return saved


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
