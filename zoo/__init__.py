"""The model zoo: model-guide pairs written for Pyro and NumPyro.

The registry maps names to :class:`~zoo.spec.ModelSpec`. Models know nothing of how they are
fitted; see the ``inference`` package for that.
"""

from __future__ import annotations

from zoo.spec import BACKENDS, DataField, ModelSpec

__all__ = ["BACKENDS", "DataField", "ModelSpec", "get_model", "list_models", "register"]

_REGISTRY: dict[str, ModelSpec] = {}


def register(spec: ModelSpec, *, replace: bool = False) -> ModelSpec:
    """Add a model to the registry; a second model of the same name is an error."""
    if not isinstance(spec, ModelSpec):
        raise TypeError(f"register() takes a ModelSpec; got {type(spec).__name__}.")
    if spec.name in _REGISTRY and not replace:
        raise ValueError(
            f"A model named {spec.name!r} is already registered; choose another name "
            "or pass replace=True."
        )
    unknown = sorted(set(spec.backends) - set(BACKENDS))
    if unknown:
        raise ValueError(f"Unknown backend(s) {unknown} in {spec.name!r}; valid: {list(BACKENDS)}.")
    _REGISTRY[spec.name] = spec
    return spec


def list_models() -> list[str]:
    """Names of the registered models, sorted."""
    return sorted(_REGISTRY)


def get_model(name: str | ModelSpec) -> ModelSpec:
    """The spec registered under ``name`` (a spec passes through unchanged)."""
    if isinstance(name, ModelSpec):
        return name
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ValueError(f"Unknown model {name!r}; valid models are {list_models()}.") from None


def _register_builtins() -> None:
    from zoo import bayesian_gmm, bernoulli_mixture, exchangeable, gmm, vae
    from zoo.bayesian_attention import classifier as bam_classifier

    for module in (bam_classifier, bayesian_gmm, bernoulli_mixture, exchangeable, gmm, vae):
        register(module.SPEC)


_register_builtins()
