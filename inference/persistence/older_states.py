"""Readers of the states of checkpoints written before states were saved as one tree of their
fields (``state_tree``): each layout an algorithm of the zoo wrote, read into that tree."""

from __future__ import annotations

from inference.backends import tree_codec
from inference.persistence.checkpoint import CheckpointError


def _decoded(node, arrays):
    return tree_codec.decode(node, arrays, lambda a: a)


def _count(value, name: str) -> int:
    """A count an older file recorded (a step, an iteration); a ``ValueError`` naming it for
    anything else, as a damaged or hand-edited file may hold."""
    whole = isinstance(value, int) or (isinstance(value, float) and value.is_integer())
    if isinstance(value, bool) or not whole:
        raise ValueError(f"its state's {name} is {value!r}, not a count")
    return int(value)


def _group(arrays: dict, prefix: str) -> dict:
    return {k[len(prefix) :]: v for k, v in arrays.items() if k.startswith(prefix)}


def read(skeleton, arrays: dict, fresh: dict) -> dict:
    """The saved fields of an older checkpoint's state, for a run whose fresh saved fields are
    ``fresh``; a layout this version does not know is a :class:`CheckpointError`, a damaged
    one a ``ValueError``."""
    skeleton = skeleton if isinstance(skeleton, dict) else {}
    engine = skeleton.get("engine")
    if "inner" in skeleton and "step" in skeleton:
        # Closed-form updates; natural-gradient SVI stored its context in them as "shift".
        inner = _decoded(skeleton["inner"], arrays)
        tree = {"step": _count(skeleton["step"], "step")}
        if "context" in fresh and isinstance(inner, dict) and "shift" in inner:
            tree["context"] = inner.pop("shift")
        return {"inner": inner, **tree}
    if isinstance(engine, dict) and "leaves" in engine and "step" in skeleton:
        # NumPyro SVI: the leaves of NumPyro's SVI state.
        return {
            "params": tuple(_decoded(engine["leaves"], arrays)),
            "step": _count(skeleton["step"], "step"),
        }
    if isinstance(engine, dict) and "params" in engine and "step" in skeleton:
        # Pyro SVI: the parameter store, Adam, the random stream and the updates applied (none
        # recorded before learning-rate stages).
        return {
            "params": {
                "params": _decoded(engine["params"], arrays),
                "optim": _decoded(engine["optim"], arrays),
                "rng": _decoded(engine["rng"], arrays),
                "updates": _count(engine.get("updates", 0), "update count"),
            },
            "step": _count(skeleton["step"], "step"),
        }
    if "iteration" in skeleton and "chains" in fresh:
        # NUTS: the chains' kernel states as their flat leaves, the kept draws in one chunk.
        import jax

        leaves, treedef = jax.tree.flatten(fresh["chains"])
        saved = _group(arrays, "chains/")
        if len(saved) != len(leaves):
            raise CheckpointError(
                f"it holds a sampler state of {len(saved)} arrays, this run's has {len(leaves)}."
            )
        chains = jax.tree.unflatten(treedef, [saved[str(i)] for i in range(len(leaves))])
        sites, stats = _group(arrays, "draws/"), _group(arrays, "stats/")
        return {
            "chains": chains,
            "iteration": _count(skeleton["iteration"], "iteration"),
            "draws": (sites,) if sites else (),
            "stats": (stats,) if stats else (),
        }
    raise CheckpointError(
        "its state was written by an older version of the zoo in a layout this version does "
        "not read; rerun the fit without resume=True, or with a new checkpoint path."
    )
