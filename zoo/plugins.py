"""Entry points of installed plugins, read once each: what the model registry (``zoo.models``)
and the algorithm registry (``inference.algorithms``) share."""

from __future__ import annotations

from collections.abc import Iterator


def new_entry_points(group: str, seen: set) -> Iterator[tuple[object, str]]:
    """``(entry point, where it comes from)`` for the entry points of ``group`` not in ``seen``,
    which it updates, so a second call yields only plugins installed since."""
    from importlib.metadata import entry_points

    for entry_point in entry_points(group=group):
        key = (entry_point.name, entry_point.value)
        if key in seen:
            continue
        seen.add(key)
        dist = getattr(entry_point, "dist", None)
        origin = f"{dist.name} {dist.version} " if dist is not None else ""
        yield entry_point, f"plugin {origin}(entry point {entry_point.name} = {entry_point.value})"
