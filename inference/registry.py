"""The registry of algorithms: the built-in ones, ``register_algorithm`` at run time, and
installed packages that declare an algorithm under the entry-point group
``inference.algorithms`` (the way models use ``zoo.models``).

An entry point names an :class:`~inference.algorithm.Algorithm` subclass or instance, e.g. in a
plugin's ``pyproject.toml``::

    [project.entry-points."inference.algorithms"]
    map = "my_package.map_algorithm:MAP"

Plugins load the first time the registry is listed or queried; one that fails to load is
skipped with an :class:`InferencePluginWarning` naming it, and the rest work.
"""

from __future__ import annotations

import dataclasses
import warnings

from inference.algorithm import Algorithm, Traits
from inference.algorithms.closed_form import CAVI, EM
from inference.algorithms.nuts import NUTSAlgorithm
from inference.algorithms.svi import SVI
from inference.algorithms.svi_natural import NaturalGradientSVI
from zoo.options import did_you_mean
from zoo.plugins import new_entry_points

#: The entry-point group under which installed packages declare their algorithms.
ENTRY_POINT_GROUP = "inference.algorithms"
#: What ``fit`` runs when no algorithm is named: SVI fits every model that offers a guide.
DEFAULT_ALGORITHM = SVI.name

_REGISTRY: dict[str, Algorithm] = {}
_SOURCES: dict[str, str] = {}
_SEEN_ENTRY_POINTS: set[tuple[str, str]] = set()
_plugins_loaded = False


class InferencePluginWarning(UserWarning):
    """An installed algorithm plugin could not be loaded; the other algorithms work."""


def register_algorithm(algorithm, *, replace: bool = False) -> Algorithm:
    """Add an algorithm (an :class:`Algorithm` subclass or instance) under its ``name``."""
    _load_plugins_once()
    return _add(algorithm, replace=replace, source="register_algorithm()")


def unregister_algorithm(name: str) -> Algorithm:
    """Remove an algorithm from the registry (e.g. to register an edited one under its name);
    returns it. A plugin's algorithm comes back only in a new process."""
    algorithm = get_algorithm(name)
    del _REGISTRY[name]
    _SOURCES.pop(name, None)
    return algorithm


def list_algorithms() -> list[str]:
    """Names of the registered algorithms (built in, registered, installed plugins), sorted.

    Installed plugins (entry-point group ``inference.algorithms``) are loaded the first time
    the registry is listed or queried.

    Returns
    -------
    list of str
        The names :func:`inference.fit` takes as ``algorithm``.

    Examples
    --------
    >>> import inference
    >>> names = inference.list_algorithms()
    >>> [name for name in ["cavi", "em", "nuts", "svi", "svi-natural"] if name in names]
    ['cavi', 'em', 'nuts', 'svi', 'svi-natural']
    """
    _load_plugins_once()
    return sorted(_REGISTRY)


def get_algorithm(name: str) -> Algorithm:
    """The algorithm registered under ``name``.

    Parameters
    ----------
    name : str
        A registered name (:func:`list_algorithms`).

    Returns
    -------
    inference.Algorithm
        The algorithm: its ``name``, its ``traits`` (what it estimates, its objective, whether
        it takes minibatches, its default length), its ``Options`` and which models it
        ``supports``.

    Raises
    ------
    TypeError
        ``name`` is not a str.
    ValueError
        No algorithm is registered under ``name``; the message lists the valid names.

    Examples
    --------
    >>> import inference, zoo
    >>> em = inference.get_algorithm("em")
    >>> em.name, em.traits.estimate, em.traits.minibatch
    ('em', 'point', False)
    >>> em.supports(zoo.get_model("gmm")), em.supports(zoo.get_model("bayesian_gmm"))
    (True, False)
    >>> inference.get_algorithm("adam")
    Traceback (most recent call last):
    ...
    ValueError: Unknown algorithm 'adam'; valid algorithms are [...].
    """
    if not isinstance(name, str):
        raise TypeError(f"algorithm must be a name (str); got {type(name).__name__}.")
    _load_plugins_once()
    if name not in _REGISTRY:
        raise ValueError(
            f"Unknown algorithm {name!r}; valid algorithms are {sorted(_REGISTRY)}."
            + did_you_mean(name, _REGISTRY)
        )
    return _REGISTRY[name]


def supporting(spec) -> list[str]:
    """The names of the registered algorithms that fit ``spec``, sorted."""
    return [name for name in list_algorithms() if get_algorithm(name).supports(spec)]


def every_option_name() -> set[str]:
    """The options that some registered algorithm takes: what a call that may run any of them
    (a comparison, the shell) can be given before its algorithms are known."""
    return {name for a in list_algorithms() for name in get_algorithm(a).option_names()}


def first_supporting(spec) -> str:
    """The first algorithm, in the order of registration, that fits ``spec``: a model's own
    closed-form updates before gradient steps (the built-ins come first, in that order)."""
    _load_plugins_once()
    for name, algorithm in _REGISTRY.items():
        if algorithm.supports(spec):
            return name
    raise ValueError(f"No registered algorithm fits model {spec.name!r}.")


def algorithm_source(name: str) -> str:
    """``"built-in"``, ``"register_algorithm()"`` or ``"plugin <distribution> <version> ..."``."""
    get_algorithm(name)
    return _SOURCES[name]


def load_plugins() -> list[str]:
    """Register the algorithms of installed plugins (entry-point group
    ``inference.algorithms``); returns the names added. Runs by itself on first use; call it
    again to pick up a plugin installed since."""
    global _plugins_loaded
    _plugins_loaded = True
    added = []
    for entry_point, source in new_entry_points(ENTRY_POINT_GROUP, _SEEN_ENTRY_POINTS):
        try:
            algorithm = _instance(entry_point.load())
            if algorithm.name != entry_point.name:
                raise ValueError(
                    f"the entry point is called {entry_point.name!r} but the algorithm's name is "
                    f"{algorithm.name!r}; use the algorithm's name on the left of "
                    f"[project.entry-points.{ENTRY_POINT_GROUP!r}] in pyproject.toml."
                )
            if _REGISTRY.get(algorithm.name) is algorithm:  # registered itself on import
                continue
            _add(algorithm, replace=False, source=source)
        except Exception as err:
            warnings.warn(
                f"inference: {source} was not loaded: {type(err).__name__}: {err}",
                InferencePluginWarning,
                stacklevel=2,
            )
            continue
        added.append(algorithm.name)
    return added


def _instance(algorithm) -> Algorithm:
    if isinstance(algorithm, type) and issubclass(algorithm, Algorithm):
        algorithm = algorithm()
    if not isinstance(algorithm, Algorithm):
        raise TypeError(
            "an algorithm is an inference.Algorithm subclass or instance; got "
            f"{type(algorithm).__name__}."
        )
    name = getattr(algorithm, "name", None)
    if not isinstance(name, str) or not name or any(c.isspace() for c in name):
        raise ValueError(
            f"an algorithm's name must be a non-empty string without spaces; got {name!r}."
        )
    _check_declarations(algorithm)
    return algorithm


def _check_declarations(algorithm: Algorithm) -> None:
    """Raise ``ValueError`` unless the algorithm's ``traits`` and ``Options`` are what the layer
    reads: checked here, as listing the options of every algorithm (``compare``, the shell)
    would otherwise fail for every model, not only the broken algorithm's."""
    where = f"algorithm {algorithm.name!r}"
    traits = getattr(algorithm, "traits", None)
    if not isinstance(traits, Traits):
        raise ValueError(
            f"{where} has no traits: set the class attribute traits = inference.Traits(...) "
            f"(what it estimates, its objective, its default length); got {traits!r}."
        )
    options = algorithm.Options
    if not (isinstance(options, type) and dataclasses.is_dataclass(options)):
        raise ValueError(
            f"{where}: Options must be a dataclass of its options with their defaults, e.g. "
            "@dataclass(frozen=True) class Options: num_restarts: int = 5 "
            f"(inference.algorithm.NoOptions when it takes none); got {options!r}."
        )
    required = [
        field.name
        for field in dataclasses.fields(options)
        if field.default is dataclasses.MISSING and field.default_factory is dataclasses.MISSING
    ]
    if required:
        raise ValueError(
            f"{where}: every field of Options needs a default (a fit given none of its options "
            f"runs on the defaults); {required} have none."
        )


def _add(algorithm, *, replace: bool, source: str) -> Algorithm:
    algorithm = _instance(algorithm)
    if algorithm.name in _REGISTRY and not replace:
        raise ValueError(
            f"An algorithm named {algorithm.name!r} is already registered "
            f"({_SOURCES[algorithm.name]}); choose another name, or pass replace=True."
        )
    _REGISTRY[algorithm.name] = algorithm
    _SOURCES[algorithm.name] = source
    return algorithm


def _load_plugins_once() -> None:
    if not _plugins_loaded:
        load_plugins()


for _builtin in (CAVI, EM, SVI, NaturalGradientSVI, NUTSAlgorithm):
    _add(_builtin, replace=False, source="built-in")
