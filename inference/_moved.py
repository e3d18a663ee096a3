"""The module paths the layer had before its modules were grouped into folders
(``inference.svi`` is now ``inference.algorithms.svi``), kept importable: code and plugins
written against them, and the documentation's older examples, go on working unchanged.

An import of an old path gets the module at its new path, the same object (so ``isinstance``
checks and module state are shared); nothing is imported before it is asked for.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
#: The folders modules moved into; ``inference.<name>`` finds ``inference.<folder>.<name>``.
FOLDERS = ("algorithms", "persistence", "tools")


def new_path(fullname: str) -> str | None:
    """Where the module an old path names lives now, or None for a path that did not move."""
    package, _, name = fullname.rpartition(".")
    if package != "inference":
        return None
    for folder in FOLDERS:
        if (HERE / folder / f"{name}.py").is_file():
            return f"inference.{folder}.{name}"
    return None


class MovedModules(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Finds an old path and loads it as the module at the new one."""

    def find_spec(self, fullname, path=None, target=None):
        if new_path(fullname) is None:
            return None
        return importlib.util.spec_from_loader(fullname, self)

    def create_module(self, spec):
        # The module itself, not a copy: the import system keeps its name and spec, since both
        # are already set, and files it under the old path in sys.modules too.
        return importlib.import_module(new_path(spec.name))

    def exec_module(self, module) -> None:
        pass  # executed when it was imported at its new path


def install() -> None:
    if not any(isinstance(finder, MovedModules) for finder in sys.meta_path):
        sys.meta_path.append(MovedModules())
