"""What identifies a run in its checkpoint: the header a checkpoint is written with, which a
resume compares with its own (``inference.loop.restore``) to refuse a checkpoint of another
model, data set, seed, option, starting values or validation set-up.

Fingerprints are short digests of array values, so that a header stays small JSON however large
the data: the data (or the stream's identity, ``inference.streaming.fingerprint``), the model's
config, ``init`` arrays and validation data.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections.abc import Mapping

import numpy as np

from inference import streaming
from inference.algorithm import run_record, state_fact
from zoo.spec import FROM_DATA


def config_arrays(config) -> dict:
    """The model config as named arrays, for a fingerprint (a checkpoint of another
    architecture or other priors is refused on resume). Fields computed from the data alone
    (``zoo.spec.FROM_DATA``) are left out: the data's fingerprint covers them."""
    return {
        f.name: np.asarray(getattr(config, f.name), dtype=object).astype(str)
        if not isinstance(getattr(config, f.name), np.ndarray)
        else getattr(config, f.name)
        for f in dataclasses.fields(config)
        if not f.metadata.get(FROM_DATA)
    }


def config_summary(config) -> dict:
    """The model config as a refused resume names what differs (``K: 3 there, 4 here``):
    numbers, strings and booleans as they are, other values (arrays, tuples) by a fingerprint
    of their values. The comparison itself is the fingerprint of the whole config."""
    summary = {}
    for name, value in config_arrays(config).items():
        raw = getattr(config, name)
        if isinstance(raw, np.generic):
            raw = raw.item()
        plain = raw is None or isinstance(raw, bool | int | float | str)
        summary[name] = raw if plain else f"array {fingerprint({'': value})}"
    return summary


def differences(saved, current, where: str = "there") -> str:
    """What differs between two recorded values (a refused resume's or reference's message),
    naming the keys of dicts: ``K: 3 there, 4 here``, with ``where`` for "there"."""
    if isinstance(saved, dict) and isinstance(current, dict):
        keys = sorted(k for k in saved.keys() | current.keys() if saved.get(k) != current.get(k))
        return ", ".join(f"{k}: {saved.get(k)!r} {where}, {current.get(k)!r} here" for k in keys)
    return f"{saved!r} {where}, {current!r} here"


def fingerprint(data) -> str:
    """A 16-hex-digit digest of a dict of arrays: their names, shapes and bytes."""
    digest = hashlib.sha256()
    for key in sorted(data):
        digest.update(key.encode())
        digest.update(str(data[key].shape).encode())
        digest.update(np.ascontiguousarray(data[key]).tobytes())
    return digest.hexdigest()[:16]


def init_record(init) -> str | None:
    """``init`` as a checkpoint compares it: None or the method's name as given, arrays (an
    (N, K) array of responsibilities, a dict of parameter arrays) by a fingerprint of their
    values, so that a resume from other starting values is refused. Arrays are compared as
    float64, the precision every start is computed in: the same values given as float32 or
    as ints are the same start."""
    if init is None or isinstance(init, str):
        return init
    arrays = init if isinstance(init, Mapping) else {"": init}
    values = {str(k): np.asarray(v) for k, v in arrays.items()}
    values = {k: v.astype(np.float64) if v.dtype.kind in "biuf" else v for k, v in values.items()}
    return f"array {fingerprint(values)}"


def default_init(spec) -> str | None:
    """The start ``init=None`` stands for on ``spec``'s model (``"kmeans"`` for a mixture), or
    None where it stands for the model's own initialisation."""
    return None if spec.updates is None else spec.updates.default_init


def with_default_init(record: dict, name: str | None) -> dict:
    """A checkpoint header ``record`` with ``init=None`` written as the start it stands for,
    ``name``, at the top and among the options: what a resume compares."""
    if name is None:
        return record
    record = dict(record)
    if "init" in record and record["init"] is None:
        record["init"] = name
    options = record.get("options")
    if isinstance(options, Mapping) and "init" in options and options["init"] is None:
        record["options"] = {**options, "init": name}
    return record


def options_record(alg, options, state, problem) -> dict:
    """The options of a run as its result and its checkpoint record them (JSON-able): how it
    started (``init`` arrays only as ``"array"``; the header fingerprints them), the
    algorithm's own record of its options, and the dtype."""
    init = problem.init
    return {
        "init": init if init is None or isinstance(init, str) else "array",
        **run_record(alg, options, state),
        "dtype": problem.dtype,
    }


def validation_setup(held_out: dict, every: int, patience) -> dict:
    """What a run validates on, as its header records it: validation data added, removed or
    changed on resume make another run."""
    return {
        "data_fingerprint": fingerprint(held_out),
        "every": every,
        "patience": None if patience is None else int(patience),
    }


def header(
    alg, state, problem, record: dict, *, guide, redrawn=(), validation=None, checkpointed=True
) -> dict:
    """The header of a checkpoint of a run of ``alg`` from ``state`` on ``problem``: what
    :func:`inference.loop.restore` compares on resume. ``record`` is
    :func:`options_record`'s; ``redrawn`` names the data keys the algorithm drew afresh from
    those given (dynamic binarization), which are fingerprinted as given; ``validation`` is
    :func:`validation_setup`'s, or None for a run without validation data. Without a checkpoint
    (``checkpointed=False``) the data are not fingerprinted: that reads a memory-mapped file
    whole, before the first step, for a header no file will hold."""
    if not checkpointed:
        data_fingerprint = None
    elif problem.source is not None:
        data_fingerprint = streaming.fingerprint(problem.source)
    else:
        given = {k: np.asarray(problem.given[k]) for k in redrawn}
        data_fingerprint = fingerprint({**problem.data, **given})
    return {
        "model": problem.spec.name,
        "algorithm": alg.name,
        "backend": problem.backend.NAME,
        "guide": guide,
        # What a checkpoint's unconstrained guide parameters mean (zoo.ModelSpec).
        "guide_coordinates": None if guide is None else problem.spec.guide_coordinates,
        "seed": problem.seed,
        "init": init_record(problem.init),
        # What init=None stands for, so that it resumes a run given that start by name (read on
        # resume, not compared).
        "default_init": default_init(problem.spec),
        # The revision of the layout of the algorithm's saved state, where it has changed.
        "state_layout": state_fact(alg, state, "state_layout"),
        # Processes sharing each step draw their own particles for their rows (Pyro).
        "processes": state_fact(alg, state, "processes"),
        "data_fingerprint": data_fingerprint,
        "config_fingerprint": fingerprint(config_arrays(problem.config)),
        "config": config_summary(problem.config),  # to name a field that differs
        # Resume may ask for more steps than the checkpointed run did (training extended).
        "options": {
            k: v
            for k, v in record.items()
            if k != "num_steps" or not state_fact(alg, state, "extendable")
        },
        # A run without validation data is another run than one with them.
        "validation_setup": validation,
    }
