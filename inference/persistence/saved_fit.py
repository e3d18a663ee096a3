"""A saved fit checked against what wrote it and against its model, when it is loaded: a file
with an array missing, an array of the wrong shape or a config value of the wrong type is refused
with a :class:`~inference.persistence.checkpoint.CheckpointError` naming the member, instead of failing later,
far from the cause."""

from __future__ import annotations

import dataclasses
import re
import typing

import numpy as np

from inference.persistence.checkpoint import CheckpointError
from zoo.options import check_types

#: The header fields of a saved fit and the JSON types they hold.
FIELDS = {
    "model": str,
    "algorithm": str,
    "backend": str,
    "guide": (str, type(None)),
    "config": dict,
    "converged": bool,
    "timing": dict,
    "num_data": int,
    "seed": int,
    "options": dict,
}


def check_header(path, header: dict) -> None:
    missing = sorted(set(FIELDS) - set(header))
    if missing:
        raise CheckpointError(f"{path!r} is a saved fit without its {missing}.")
    for name, kind in FIELDS.items():
        value = header[name]
        if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
            raise CheckpointError(
                f"{path!r}: the header's {name!r} is {value!r}, not of the type a saved fit holds."
            )
    if header["num_data"] < 1 or header["seed"] < 0:
        raise CheckpointError(f"{path!r}: the header's num_data or seed is out of range.")
    best = header.get("best_step")
    if best is not None and (not isinstance(best, int) or isinstance(best, bool) or best < 0):
        raise CheckpointError(f"{path!r}: the header's 'best_step' is {best!r}.")
    digest = header.get("data_fingerprint")  # absent from files written before it was kept
    if digest is not None and not (
        isinstance(digest, str) and re.fullmatch("[0-9a-f]{16}", digest)
    ):
        raise CheckpointError(f"{path!r}: the header's 'data_fingerprint' is {digest!r}.")


def _check_config_value(path, spec, name, value, hint) -> None:
    """A config value read from a file has the type its field declares: the options' own check
    for scalars and lists, and a numeric array where the field declares an array."""
    try:
        check_types(spec.config_type, {name: value})
    except TypeError as err:
        raise CheckpointError(
            f"{path!r}: config {name!r} does not fit model {spec.name!r}: {err}"
        ) from err
    declares_array = hint is np.ndarray or np.ndarray in typing.get_args(hint)
    if (isinstance(value, np.ndarray) and value.dtype.kind not in "biuf") or (
        declares_array and value is not None and not isinstance(value, np.ndarray)
    ):
        raise CheckpointError(
            f"{path!r}: config {name!r} is {value!r}; model {spec.name!r} declares a numeric array."
        )


def config(path, spec, scalars: dict, arrays: dict):
    """The model's config rebuilt from the file, each field checked against its declared type."""
    fields = {f.name: f for f in dataclasses.fields(spec.config_type)}
    hints = typing.get_type_hints(spec.config_type)
    values = {**scalars, **arrays}
    for name in sorted(set(values) - set(fields)):
        raise CheckpointError(
            f"{path!r}: config {name!r} is not an option of model {spec.name!r}'s config."
        )
    for name, field in fields.items():
        if name not in values:
            if (
                field.default is dataclasses.MISSING
                and field.default_factory is dataclasses.MISSING
            ):
                raise CheckpointError(f"{path!r} lacks model {spec.name!r}'s config {name!r}.")
            continue
        _check_config_value(path, spec, name, values[name], hints[name])
        if typing.get_origin(hints[name]) is tuple:
            values[name] = tuple(values[name])  # JSON keeps it as a list
    return spec.config_type(**values)


def _same_arrays(path, derived: dict, saved: dict, how: str) -> None:
    for key in sorted(set(derived) ^ set(saved)):
        raise CheckpointError(
            f"{path!r}: member 'params/{key}' is {'missing' if key in derived else 'unexpected'}"
            f" for {how}."
        )
    for key, value in saved.items():
        if np.shape(derived[key]) != np.shape(value):
            raise CheckpointError(
                f"{path!r}: member 'params/{key}' has shape {np.shape(value)}; {how} gives "
                f"{np.shape(derived[key])}."
            )


def check_parameters(path, spec, alg, config, params, raw, draws) -> None:
    """The user-facing parameters agree with the raw ones they summarize, for the model's
    config: a raw array missing or of the wrong shape shows there. (A sampler's summary is of its
    draws, checked for a common chain and draw length instead.)"""
    if draws:
        lengths = {k: v.shape[:2] for k, v in draws.items()}
        if len(set(lengths.values())) > 1 or any(v.ndim < 2 for v in draws.values()):
            raise CheckpointError(f"{path!r}: its draws disagree in (chains, draws): {lengths}.")
        return
    if alg is not None and callable(getattr(alg, "summarize", None)):
        return  # an algorithm with its own summary (older contract); nothing generic to hold
        # it to
    how = f"model {spec.name!r}'s summary of the raw parameters"
    if spec.summarize is None:
        _same_arrays(path, raw, params, how)
        return
    try:
        derived = spec.summarize(raw, config)
    except KeyError as err:
        raise CheckpointError(f"{path!r} lacks the member 'raw/{err.args[0]}'.") from err
    except (ValueError, TypeError, IndexError) as err:
        raise CheckpointError(
            f"{path!r}: its raw parameters do not fit model {spec.name!r} with this config "
            f"({type(err).__name__}: {err})."
        ) from err
    _same_arrays(path, derived, params, how)


def check_history(path, history: dict) -> None:
    """The history's arrays are 1-D, one entry a step, but for the validation's
    (``validation_step``, ``validation``), one an evaluation."""
    lengths = {k: v.shape for k, v in history.items()}
    per_step = {s for k, s in lengths.items() if not k.startswith("validation")}
    per_evaluation = {s for k, s in lengths.items() if k.startswith("validation")}
    if any(len(s) != 1 for s in lengths.values()) or len(per_step) > 1 or len(per_evaluation) > 1:
        raise CheckpointError(f"{path!r}: its history arrays disagree in length: {lengths}.")
