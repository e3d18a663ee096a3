"""The model zoo: model-guide pairs written for Pyro and NumPyro.

The registry maps names to :class:`~zoo.spec.ModelSpec`. Models know nothing of how they are
fitted; see the ``inference`` package for that.

Models come from three places: the zoo's own (built in), ``register(spec)`` at run time, and
installed packages that declare a spec under the entry-point group ``zoo.models`` (plugins,
loaded the first time the registry is listed or queried). ``docs/extending.md`` shows all three.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable

from zoo.options import did_you_mean
from zoo.plugins import new_entry_points
from zoo.spec import BACKENDS, DataField, GuideKind, ModelSpec, ModelSpecError
from zoo.testing import check_registration, check_spec
from zoo.updates import ClosedFormUpdates

__all__ = [
    "BACKENDS",
    "ClosedFormUpdates",
    "ENTRY_POINT_GROUP",
    "DataField",
    "GuideKind",
    "ModelSpec",
    "ModelSpecError",
    "ZooPluginWarning",
    "get_model",
    "list_models",
    "load_plugins",
    "model_source",
    "on_registry_change",
    "register",
    "unregister",
]

#: The entry-point group under which installed packages declare their models.
ENTRY_POINT_GROUP = "zoo.models"

_REGISTRY: dict[str, ModelSpec] = {}
_SOURCES: dict[str, str] = {}  # name -> where the model came from, for messages and `zoo list`
# Plugin models whose twins have not been traced yet: that happens the first time get_model()
# fetches one, so listing models imports neither torch nor JAX.
_UNCHECKED: set[str] = set()
_SEEN_ENTRY_POINTS: set[tuple[str, str]] = set()
_plugins_loaded = False
_LISTENERS: list[Callable[[ModelSpec], None]] = []


class ZooPluginWarning(UserWarning):
    """An installed plugin could not be loaded; the rest of the zoo works without it."""


def register(spec: ModelSpec, *, replace: bool = False, check: bool = True) -> ModelSpec:
    """Add a model to the registry, after checking that it meets the zoo's contract.

    Always checked (cheap): ``spec`` is a ``ModelSpec``, its name is not taken (unless
    ``replace=True``), it names a twin for every backend, and what it declares is consistent
    (``zoo.testing.check_spec``). With ``check=True`` (the default) both twins are also
    imported and traced on a small data set from ``spec.make_data``: the same sample sites and
    plates, and every guide samples every latent site (``zoo.testing.check_registration``; it
    imports torch and JAX, about a second). ``check=False`` skips the tracing.

    Raises :class:`ModelSpecError` (a ``ValueError``) saying which contract broke and how to fix
    it.

    Parameters
    ----------
    spec : ModelSpec
        The model to add, under ``spec.name``.
    replace : bool
        Replace a model registered under the same name (a built-in one included).
    check : bool
        Also import both twins and trace them (``zoo.testing.check_registration``); else
        only ``zoo.testing.check_spec``.

    Returns
    -------
    ModelSpec
        ``spec`` itself, so that ``SPEC = zoo.register(ModelSpec(...))`` registers and keeps it.

    Raises
    ------
    TypeError
        ``spec`` is not a ``ModelSpec``.
    ModelSpecError
        The name is taken (without ``replace=True``), or the spec breaks the zoo's contract.

    See Also
    --------
    unregister : Remove a model from the registry.
    inference.tools.conformance.check_model : The checks that also fit the model with every
        algorithm.

    Examples
    --------
    Register an edited copy of a built-in model under a name of its own:

    >>> import dataclasses
    >>> import zoo
    >>> spec = dataclasses.replace(
    ...     zoo.get_model("gmm"), name="my_gmm", description="A mixture of my own"
    ... )
    >>> zoo.register(spec) is spec
    True
    >>> "my_gmm" in zoo.list_models()
    True
    >>> zoo.register(spec)
    Traceback (most recent call last):
    ...
    zoo.spec.ModelSpecError: A model named 'my_gmm' is already registered (zoo.register()); ...
    >>> _ = zoo.unregister("my_gmm")
    """
    _load_plugins_once()
    _add(spec, replace=replace, check=check, source="zoo.register()")
    return spec


def unregister(name: str) -> ModelSpec:
    """Remove a model from the registry (e.g. to register an edited spec under its name while
    developing); returns its spec. A plugin's model comes back only in a new process.

    Parameters
    ----------
    name : str
        A registered model's name.

    Returns
    -------
    ModelSpec
        The spec that was registered under ``name``.

    Raises
    ------
    ValueError
        No model is registered under ``name``.
    TypeError
        ``name`` is not a str.

    Examples
    --------
    >>> import dataclasses
    >>> import zoo
    >>> spec = zoo.register(dataclasses.replace(zoo.get_model("gmm"), name="scratch"))
    >>> zoo.unregister("scratch") is spec, "scratch" in zoo.list_models()
    (True, False)
    """
    spec = get_model(name, check=False)
    del _REGISTRY[name]
    _SOURCES.pop(name, None)
    _UNCHECKED.discard(name)
    _tell_listeners(spec)
    return spec


def on_registry_change(callback: Callable[[ModelSpec], None]) -> None:
    """Call ``callback(spec)`` each time a spec is registered or unregistered, with that spec.

    What keeps work done for a model's code (the inference layer's compiled functions, by the
    model's name and its updates' module) forgets it here: a model edited while developing,
    reloaded and registered again under its name must run its new code, not the old code's
    compiled functions.

    Parameters
    ----------
    callback : callable
        Called with the ``ModelSpec`` that was registered or unregistered.

    Returns
    -------
    None

    Examples
    --------
    >>> import dataclasses
    >>> import zoo
    >>> heard = []
    >>> zoo.on_registry_change(heard.append)
    >>> spec = zoo.register(dataclasses.replace(zoo.get_model("gmm"), name="scratch"))
    >>> _ = zoo.unregister("scratch")
    >>> [s.name for s in heard]
    ['scratch', 'scratch']
    """
    _LISTENERS.append(callback)


def _tell_listeners(spec: ModelSpec) -> None:
    for callback in _LISTENERS:
        callback(spec)


def list_models() -> list[str]:
    """Names of the registered models (built in, registered, and installed plugins), sorted.

    Installed plugins (entry-point group ``zoo.models``) are loaded the first time the registry
    is listed or queried.

    Returns
    -------
    list of str
        The names :func:`get_model` and ``inference.fit`` take.

    Examples
    --------
    >>> import zoo
    >>> names = zoo.list_models()
    >>> [name for name in ["bayesian_gmm", "bernoulli_mixture", "gmm", "vae"] if name in names]
    ['bayesian_gmm', 'bernoulli_mixture', 'gmm', 'vae']
    """
    _load_plugins_once()
    return sorted(_REGISTRY)


def get_model(name: str | ModelSpec, *, check: bool = True) -> ModelSpec:
    """The spec registered under ``name`` (a spec passes through unchanged).

    A plugin's twins are traced the first time it is fetched (``check=False`` skips that, e.g.
    to show its description); a plugin that fails raises :class:`ModelSpecError` naming it.

    Parameters
    ----------
    name : str or ModelSpec
        A registered model's name (:func:`list_models`), or a spec.
    check : bool
        Trace a plugin's twins the first time it is fetched.

    Returns
    -------
    ModelSpec
        The model's spec: its data contract, twins, guides, options (``prepare``) and
        evaluation hooks.

    Raises
    ------
    TypeError
        ``name`` is neither a str nor a ``ModelSpec``.
    ValueError
        No model is registered under ``name``; the message lists the valid names.
    ModelSpecError
        A plugin's model fails its registration checks when first fetched.

    Examples
    --------
    >>> import numpy as np
    >>> import zoo
    >>> spec = zoo.get_model("bayesian_gmm")
    >>> spec.description
    'Bayesian Gaussian mixture, full covariance, Dirichlet or stick-breaking weights'
    >>> spec.guides
    ('enum', 'gumbel', 'gumbel-st')
    >>> data = spec.make_data(np.random.default_rng(0), 100)
    >>> data["x"].shape
    (100, 2)
    >>> zoo.get_model(spec) is spec
    True
    >>> zoo.get_model("bayesian-gmm")
    Traceback (most recent call last):
    ...
    ValueError: Unknown model 'bayesian-gmm'; valid models are [...]. Did you mean 'bayesian_gmm'?
    """
    if isinstance(name, ModelSpec):
        return name
    if not isinstance(name, str):
        raise TypeError(f"model must be a name (str) or a ModelSpec; got {type(name).__name__}.")
    _load_plugins_once()
    try:
        spec = _REGISTRY[name]
    except KeyError:
        raise ValueError(
            f"Unknown model {name!r}; valid models are {list_models()}."
            + did_you_mean(name, list_models())
        ) from None
    if check and name in _UNCHECKED:
        _UNCHECKED.discard(name)  # the checks themselves may fetch the model
        try:
            check_registration(spec)
        except Exception as err:
            _UNCHECKED.add(name)
            raise ModelSpecError(
                f"Model {name!r} from {_SOURCES[name]} does not meet the zoo's contract, so it "
                f"cannot be used: {err}"
            ) from err
    return spec


def model_source(name: str) -> str:
    """Where a registered model comes from: ``"built-in"``, ``"zoo.register()"`` or
    ``"plugin <distribution> <version> (entry point <name> = <object>)"``."""
    get_model(name, check=False)  # a clear error for an unknown name
    return _SOURCES[name]


def load_plugins() -> list[str]:
    """Register the models of installed plugins (entry-point group ``zoo.models``).

    Runs by itself the first time the registry is listed or queried; call it again to pick up a
    plugin installed since (it skips the entry points it has seen). A plugin that fails to import,
    does not name a ``ModelSpec``, or clashes with a registered name is skipped with a
    :class:`ZooPluginWarning` naming it; the other models stay usable. Returns the names added.
    """
    global _plugins_loaded
    _plugins_loaded = True
    added = []
    for entry_point, source in new_entry_points(ENTRY_POINT_GROUP, _SEEN_ENTRY_POINTS):
        try:
            spec = entry_point.load()
            if not isinstance(spec, ModelSpec):
                raise ModelSpecError(
                    f"the entry point must name a zoo.ModelSpec (e.g. 'my_package:SPEC'); "
                    f"it names a {type(spec).__name__}."
                )
            if spec.name != entry_point.name:
                raise ModelSpecError(
                    f"the entry point is called {entry_point.name!r} but the spec's name is "
                    f"{spec.name!r}; use the model's name on the left of "
                    f"[project.entry-points.{ENTRY_POINT_GROUP!r}] in pyproject.toml."
                )
            if _REGISTRY.get(spec.name) is spec:  # the plugin registered itself on import
                continue
            _add(spec, replace=False, check=False, source=source)
        except Exception as err:
            warnings.warn(
                f"zoo: {source} was not loaded: {type(err).__name__}: {err}",
                ZooPluginWarning,
                stacklevel=2,
            )
            continue
        _UNCHECKED.add(spec.name)
        added.append(spec.name)
    return added


def _load_plugins_once() -> None:
    if not _plugins_loaded:
        load_plugins()


def _add(spec: ModelSpec, *, replace: bool, check: bool, source: str) -> None:
    if not isinstance(spec, ModelSpec):
        raise TypeError(f"register() takes a zoo.ModelSpec; got {type(spec).__name__}.")
    if spec.name in _REGISTRY and not replace:
        raise ModelSpecError(
            f"A model named {spec.name!r} is already registered ({_SOURCES[spec.name]}); "
            "choose another name, or pass replace=True to register() to replace it."
        )
    if check:
        check_registration(spec)
    else:
        check_spec(spec)
    _REGISTRY[spec.name] = spec
    _SOURCES[spec.name] = source
    _UNCHECKED.discard(spec.name)
    _tell_listeners(spec)


def _register_builtins() -> None:
    from zoo import bayesian_gmm, bernoulli_mixture, exchangeable, gmm, vae
    from zoo.bayesian_attention import classifier as bam_classifier

    for module in (bam_classifier, bayesian_gmm, bernoulli_mixture, exchangeable, gmm, vae):
        # Built-in models are traced by tests/test_conformance.py, not at every import.
        _REGISTRY[module.SPEC.name] = module.SPEC
        _SOURCES[module.SPEC.name] = "built-in"


_register_builtins()
