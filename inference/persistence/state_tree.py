"""What a checkpoint holds of an algorithm's state: the fields its class names in
``saved_fields`` (arrays, a step count, small plain values), one tree through ``tree_codec``.

A state is a value: the fields that change as it steps, the run's own settings, and a ``bound``
object that ``init`` makes (the problem, the backend's engine and compiled functions), which is
never saved. A checkpoint is restored into a fresh state from ``init``: the saved fields replace
the fresh ones, each array put where the fresh state's array at its place is. Files written
before this layout are read by ``older_states``.
"""

from __future__ import annotations

import collections
import dataclasses
import reprlib

import numpy as np

from inference.backends import tree_codec
from inference.persistence import older_states
from inference.persistence.checkpoint import CheckpointError

#: The key of a state's skeleton in this layout: ``{"fields": {name: encoded field}}``.
FIELDS = "fields"


class DeviceStreams(dict):
    """A state's random streams by device: the host's (``"cpu"``), and on a GPU that device's
    too. A checkpoint may move between the CPU and a GPU, so a device's stream is the one part
    of a state that a checkpoint may lack (the run keeps the stream it seeded from its seed) or
    hold beyond this run's (a GPU's stream, of no use on the CPU); the host's is required."""

    #: The stream every run holds, wherever it runs.
    HOST = "cpu"


def is_value(state) -> bool:
    """Whether ``state`` names the fields a checkpoint holds (``saved_fields``)."""
    return isinstance(getattr(type(state), "saved_fields", None), tuple)


def saved_part(state) -> dict:
    return {name: getattr(state, name) for name in type(state).saved_fields}


def save(state) -> tuple[dict, dict[str, np.ndarray]]:
    """``(JSON-able skeleton, arrays)`` of the saved fields of ``state``; each field's arrays
    are stored under its name."""
    unsaveable = getattr(state, "unsaveable", None)
    if unsaveable:
        raise ValueError(unsaveable)
    arrays: dict = {}
    fields = {
        name: tree_codec.encode(value, tree_codec.as_numpy, arrays, name)
        for name, value in saved_part(state).items()
    }
    return {FIELDS: fields}, arrays


def read(skeleton, arrays: dict, fresh) -> dict:
    """The saved fields (numpy arrays) of a checkpoint's state, in this layout or an older one;
    ``fresh`` is this run's state from ``init``. A skeleton the zoo never writes (a damaged or
    hand-edited file) is a ``ValueError`` naming the field; a layout this version does not read,
    a :class:`CheckpointError`."""
    if isinstance(skeleton, dict) and FIELDS in skeleton:
        fields = skeleton[FIELDS]
        if not isinstance(fields, dict):  # a damaged or hand-edited file
            raise ValueError(
                f"its state's fields are {reprlib.repr(fields)}, not a mapping of names"
            )
        # An array missing from a damaged file reads as None, for ``check`` to name its place.
        present = collections.defaultdict(lambda: None, arrays)
        tree = {
            name: tree_codec.decode(node, present, lambda a: a, name)
            for name, node in fields.items()
        }
    else:
        tree = older_states.read(skeleton, arrays, saved_part(fresh))
    return _streams_of_this_device(_integers_as(tree, saved_part(fresh)), saved_part(fresh))


def _integers_as(saved, fresh):
    """``saved`` with each integer array in the integer dtype of ``fresh``'s array at its place,
    where its values fit. A counter's width follows JAX's 64-bit mode, which a float32 NumPyro
    fit turns off inside its trace: checkpoints written before it did hold an int64 update count
    where this run's is int32."""
    if isinstance(saved, dict):
        like = fresh if isinstance(fresh, dict) else {}
        return {k: _integers_as(v, like.get(k)) for k, v in saved.items()}
    if isinstance(saved, list | tuple):
        like = fresh if isinstance(fresh, list | tuple) and len(fresh) == len(saved) else ()
        return type(saved)(_integers_as(v, like[i] if like else None) for i, v in enumerate(saved))
    if not (isinstance(saved, np.ndarray) and saved.dtype.kind in "iu"):
        return saved
    try:
        dtype = np.dtype(fresh.dtype)  # a JAX or numpy array (a torch dtype is not numpy's)
    except (AttributeError, TypeError):
        return saved
    if dtype.kind not in "iu" or dtype == saved.dtype:
        return saved
    narrowed = saved.astype(dtype)
    return narrowed if np.array_equal(narrowed, saved) else saved


def _streams_of_this_device(saved, fresh):
    """``saved`` with the random streams of the devices ``fresh`` runs on: a device's stream the
    checkpoint lacks (written on the CPU, resumed on a GPU) is the one ``fresh`` seeded from the
    run's seed, and one ``fresh`` has no device for (written on a GPU) is left out. Everything
    else stays as saved, for :func:`check` to compare with ``fresh``."""
    if isinstance(fresh, DeviceStreams) and isinstance(saved, dict):
        kept = {k: v for k, v in saved.items() if k in fresh or k == DeviceStreams.HOST}
        seeded = {
            k: tree_codec.as_numpy(v)
            for k, v in fresh.items()
            if k not in saved and k != DeviceStreams.HOST
        }
        return {**kept, **seeded}
    if isinstance(saved, dict):
        like = fresh if isinstance(fresh, dict) else {}
        return {k: _streams_of_this_device(v, like.get(k)) for k, v in saved.items()}
    if isinstance(saved, list | tuple):
        like = fresh if isinstance(fresh, list | tuple) and len(fresh) == len(saved) else ()
        return type(saved)(
            _streams_of_this_device(v, like[i] if like else None) for i, v in enumerate(saved)
        )
    return saved


def _places(tree, place: str, out: dict, empty: set, values: dict) -> None:
    """The arrays of ``tree`` by their place (fields by name, dict keys and sequence items in
    brackets) into ``out``, its plain values but None (a count, a flag) into ``values``, and the
    places of its empty containers (a part that grows as the run goes) into ``empty``."""
    if isinstance(tree, dict):
        if not tree:
            empty.add(place)
        for key, value in tree.items():
            _places(value, f"{place}[{key!r}]" if place else str(key), out, empty, values)
    elif isinstance(tree, list | tuple):
        if not tree:
            empty.add(place)
        for i, value in enumerate(tree):
            _places(value, f"{place}[{i}]", out, empty, values)
    elif isinstance(tree, bool | int | float | str):
        values[place] = tree
    elif tree is not None:
        out[place] = tree_codec.as_numpy(tree)


def check(path, fresh, tree: dict, step: int | None = None) -> None:
    """Every array of this run's state is in the checkpoint with its dtype and shape, and the
    checkpoint holds no array this run's state has no place for (outside a part that grows), so
    that a damaged or foreign file is refused here, not steps later far from the cause (a
    device's random stream, :class:`DeviceStreams`, is matched to this run's by :func:`read`).
    Each plain value of the state (a count, a flag) is there too, of its type; a field named
    ``step`` counts the run's steps, and is the checkpoint's ``step`` when one is given."""
    expected, empty, values = {}, set(), {}
    _places(saved_part(fresh), "", expected, empty, values)
    found, found_values = {}, {}
    _places(tree, "", found, set(), found_values)
    unknown = sorted(set(tree) - set(type(fresh).saved_fields))
    if unknown:
        raise CheckpointError(f"Checkpoint {path!r} holds state fields {unknown} this run lacks.")
    _check_arrays(path, expected, empty, found)
    _check_values(path, values, found_values)
    saved_step = tree.get("step")
    if step is not None and isinstance(values.get("step"), int) and saved_step != step:
        raise CheckpointError(
            f"Checkpoint {path!r} is damaged: its state's field 'step' is {saved_step!r}, and "
            f"the checkpoint is at step {step}."
        )


def _check_arrays(path, expected: dict, empty: set, found: dict) -> None:
    """The arrays ``found`` in a checkpoint's state are those ``expected`` of this run's, of
    their dtype and shape, and more only in a part that grows (under a place in ``empty``)."""
    for place, like in expected.items():
        if place not in found:
            raise CheckpointError(f"Checkpoint {path!r} lacks the state's array {place!r}.")
        got = found[place]
        if got.dtype != like.dtype or got.shape != like.shape:
            raise CheckpointError(
                f"Checkpoint {path!r} holds the state's array {place!r} with shape "
                f"{got.shape} and dtype {got.dtype}; this run's has shape {like.shape} and "
                f"dtype {like.dtype}."
            )
    for place in found:
        grows = any(place.startswith(f"{e}[") for e in empty)
        if place not in expected and not grows:
            raise CheckpointError(
                f"Checkpoint {path!r} holds an array {place!r} that this run's state has no "
                "place for."
            )


def _check_values(path, expected: dict, found: dict) -> None:
    """Each plain value of this run's state is in the checkpoint's, of its type (an int where
    the run counts, a float may be written as an int), so that a hand-edited count is refused
    here, not at the first step."""
    for place, like in expected.items():
        got = found.get(place)
        if not _same_kind(got, like):
            raise CheckpointError(
                f"Checkpoint {path!r} is damaged: its state's field {place!r} is {got!r}, not "
                f"{_kind(like)}."
            )


#: The plain values of a state as a message names them (bool before int, of which it is one).
_KINDS = ((bool, "true or false"), (int, "a whole number"), (float, "a number"), (str, "a string"))


def _kind(value) -> str:
    return next(name for kind, name in _KINDS if isinstance(value, kind))


def _same_kind(got, like) -> bool:
    if isinstance(like, bool) or isinstance(got, bool):
        return isinstance(got, bool) and isinstance(like, bool)
    if isinstance(like, float):
        return isinstance(got, int | float)
    return isinstance(got, type(like))


def restore(fresh, tree: dict):
    """``fresh`` (a state from ``init``) with the saved fields ``tree`` put back."""
    like = saved_part(fresh)
    return dataclasses.replace(
        fresh, **{name: tree_codec.place_like(value, like[name]) for name, value in tree.items()}
    )
