"""Checks of options (a model's ``prepare`` options, an algorithm's options), shared so that every
option is refused in the same words: its name, what it expects, and what was given.

* :func:`check_types` reads the annotations of a function or dataclass (``K: int``,
  ``reg_covar: float``, ``activation: str``, ``hidden: int | tuple[int, ...]``,
  ``batch_size: int | None``) and refuses a value of another type with a ``TypeError``, before
  any range check sees it (``reg_covar="a"`` would otherwise fail deep inside, comparing a
  string with a number). Annotations it does not read (``Any``, arrays) are left to the code
  that takes the option.
* :func:`check_int`, :func:`check_float`, :func:`check_choice`, :func:`check_array`: one option
  each, a ``TypeError`` for a value of the wrong type and a ``ValueError`` for one out of range.
"""

from __future__ import annotations

import difflib
import numbers
import types
import typing
from collections.abc import Iterable, Mapping

import numpy as np

__all__ = [
    "as_float",
    "check_array",
    "check_choice",
    "check_float",
    "check_int",
    "check_types",
    "describe",
]

_NAMES = {int: "an int", float: "a float", str: "a string", bool: "a bool", type(None): "None"}
_PLURALS = {int: "ints", float: "floats", str: "strings", bool: "bools"}


def did_you_mean(name: str, choices: Iterable[str], prefix: str = "") -> str:
    """`` Did you mean 'x'?`` for the choice closest to a misspelt ``name`` (``prefix`` before
    it, e.g. ``"--"`` for a flag), case and ``-``/``_`` aside (``k`` for ``K``, ``CAVI``);
    empty when none is close."""
    choices = [str(choice) for choice in choices]
    folded = {_folded(choice): choice for choice in choices}
    if _folded(name) in folded:
        close = [folded[_folded(name)]]
    else:
        close = difflib.get_close_matches(_folded(name), list(folded), n=1, cutoff=0.75)
        close = [folded[c] for c in close]
    return f" Did you mean {prefix}{close[0]!r}?" if close else ""


def _folded(name) -> str:
    return str(name).lower().replace("-", "_")


def describe(value) -> str:
    """A value as an error message shows it: its type and a short repr."""
    text = repr(value)
    if len(text) > 60:
        text = text[:57] + "..."
    return f"{type(value).__name__} {text}"


def _is_int(value) -> bool:
    return isinstance(value, numbers.Integral) and not isinstance(value, bool | np.bool_)


def _is_float(value) -> bool:
    if isinstance(value, np.ndarray):
        return value.ndim == 0 and value.dtype.kind in "fiu"
    return isinstance(value, numbers.Real) and not isinstance(value, bool | np.bool_)


def _accepts(kind, value) -> bool:
    if kind is int:
        return _is_int(value)
    if kind is float:
        return _is_float(value)
    if kind is bool:
        return isinstance(value, bool | np.bool_)
    if kind is type(None):
        return value is None
    if kind is str:
        return isinstance(value, str)
    if isinstance(kind, tuple):  # ("tuple", element kind): a sequence of such elements
        return (
            isinstance(value, Iterable)
            and not isinstance(value, str | bytes | Mapping)
            and all(_accepts(kind[1], v) for v in value)
        )
    return True


def _kinds(hint) -> list | None:
    """The kinds an annotation allows, or None when the checker does not read it."""
    if hint in _NAMES:
        return [hint]
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        kinds = [_kinds(arg) for arg in typing.get_args(hint)]
        if any(k is None for k in kinds):
            return None
        return [k for ks in kinds for k in ks]
    if origin is tuple:
        args = typing.get_args(hint)
        if len(args) == 2 and args[1] is Ellipsis and args[0] in (int, float, str, bool):
            return [("tuple", args[0])]
    return None


def _expected(kinds: list) -> str:
    return " or ".join(
        f"a list of {_PLURALS[k[1]]}" if isinstance(k, tuple) else _NAMES[k] for k in kinds
    )


def _hints(target) -> dict:
    try:
        return typing.get_type_hints(target)
    except Exception:  # an annotation that does not evaluate: nothing to check against
        return {}


def check_types(target, options: Mapping, owner: str = "") -> None:
    """Refuse, with a ``TypeError`` naming the option, a value of ``options`` whose type its
    annotation in ``target`` (a function, e.g. a model's ``prepare``, or a dataclass) does not
    allow. ``owner`` (e.g. ``"model 'vae'"``) is named in the message."""
    hints = _hints(target)
    for name, value in options.items():
        kinds = _kinds(hints.get(name))
        if kinds is None or any(_accepts(kind, value) for kind in kinds):
            continue
        of = f" (an option of {owner})" if owner else ""
        raise TypeError(f"{name} must be {_expected(kinds)}{of}; got {describe(value)}.")


def as_float(name: str, value, what: str = "a float") -> float:
    """``value`` as a float, or a ``TypeError`` naming the option (ranges are the caller's)."""
    if not _is_float(value):
        raise TypeError(f"{name} must be {what}; got {describe(value)}.")
    return float(value)


def check_int(name: str, value, low: int = 1) -> int:
    """``value`` as an int ``>= low``."""
    if not _is_int(value):
        raise TypeError(f"{name} must be an int in the range [{low}, inf); got {describe(value)}.")
    if value < low:
        raise ValueError(f"{name} must be an int in the range [{low}, inf); got {value!r}.")
    return int(value)


def check_float(
    name: str,
    value,
    low: float = -np.inf,
    high: float = np.inf,
    *,
    low_closed: bool = False,
    high_closed: bool = False,
    what: str = "",
) -> float:
    """``value`` as a finite float in the range from ``low`` to ``high`` (open ends unless
    ``low_closed``/``high_closed``); ``what`` says what it is, for the message."""
    interval = f"{'[' if low_closed else '('}{low:g}, {high:g}{']' if high_closed else ')'}"
    about = f" ({what})" if what else ""
    if not _is_float(value):
        raise TypeError(
            f"{name}{about} must be a float in the range {interval}; got {describe(value)}."
        )
    value = float(value)
    inside = (value >= low if low_closed else value > low) and (
        value <= high if high_closed else value < high
    )
    if not (np.isfinite(value) and inside):
        raise ValueError(f"{name}{about} must be a float in the range {interval}; got {value}.")
    return value


def check_choice(name: str, value, choices) -> str:
    """``value`` if it is one of ``choices``."""
    if not isinstance(value, str) or value not in choices:
        hint = did_you_mean(value, choices) if isinstance(value, str) else ""
        raise ValueError(f"{name} must be one of {list(choices)}; got {value!r}.{hint}")
    return value


def check_array(name: str, value, shape: tuple | None = None, *, what: str = "") -> np.ndarray:
    """``value`` as a float64 array, of ``shape`` if given (an entry that is a string, e.g.
    ``"K"``, allows any size); a string, or a value numpy cannot read as numbers, is a
    ``TypeError`` naming the option, a wrong shape a ``ValueError``."""
    about = f" ({what})" if what else ""
    shown = None if shape is None else "(" + ", ".join(str(s) for s in shape) + ")"
    expected = f"an array of floats of shape {shown}" if shape else "an array of floats"
    if isinstance(value, str | bytes):
        raise TypeError(f"{name}{about} must be {expected}; got {describe(value)}.")
    try:
        array = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name}{about} must be {expected}; got {describe(value)}.") from None
    if shape is not None and (
        array.ndim != len(shape)
        or any(not isinstance(s, str) and s != a for s, a in zip(shape, array.shape, strict=True))
    ):
        raise ValueError(f"{name}{about} must have shape {shown}; got {array.shape}.")
    return array
