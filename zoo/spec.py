"""``ModelSpec``: everything the inference layer needs to know about a model, as plain data."""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from zoo.updates import ClosedFormUpdates

BACKENDS = ("pyro", "numpyro")


class ModelSpecError(ValueError):
    """A model breaks the zoo's contract; raised when it is registered (or first fetched, for a
    plugin). The message says which contract and how to fix it."""


@dataclass(frozen=True)
class DataField:
    """The contract for one data key: its rank, its dtype kind and what it means."""

    ndim: int
    kind: str = "f"  # numpy dtype kinds accepted: "f" float, "i" integer, "u" unsigned, "b" bool
    doc: str = ""
    # 0/1 observations: SVI's dynamic_binarization may draw them afresh from grey levels.
    binary: bool = False


@dataclass(frozen=True)
class ModelSpec:
    """A model of the zoo, described for the inference layer.

    Parameters
    ----------
    name : str
        Registry name, e.g. ``"bayesian_gmm"``.
    description : str
        One line shown by ``zoo list``.
    data : mapping of str to DataField
        The data keys the model takes, with rank and dtype kind.
    backends : mapping of str to str
        Backend name to the module path of its twin (imported lazily). Each twin module defines
        ``model(data, config, temperature=None, init=None)`` (or ``make_model(config, init)``
        returning such a callable, for models that hold networks) and
        ``make_guide(name, config, init)``.
    guides : tuple of str
        Guide names offered to SVI; the first is the default.
    prepare : callable
        ``prepare(data: dict[str, np.ndarray], **options) -> Config``: validates the model options
        against the data and returns the model configuration (priors as numpy arrays).
    updates : ClosedFormUpdates, optional
        The model's closed-form coordinate updates, written once against the array namespace:
        what they ascend (the ELBO, or a log-likelihood or log joint) and where they start
        (``zoo.updates``). The inference layer runs coordinate-ascent VI or EM on them.
    maximum_likelihood_twin : str, optional
        The registered name of this model without its priors (``"gmm"`` for ``"bayesian_gmm"``):
        a comparison runs the algorithms that this model does not support, but the twin does
        (maximum-likelihood EM), on the twin.
    numerical_advice : str
        What to try when a fit of this model turns non-finite, added to the algorithm's own
        advice (a mixture: "raise reg_covar").
    make_data : callable, optional
        ``make_data(rng: np.random.Generator, n: int) -> dict``: a synthetic data set for tests and
        demos.
    summarize : callable, optional
        ``summarize(raw_params, config) -> dict``: user-facing parameters (numpy) from raw guide or
        closed-form parameters.
    config_type : type, optional
        The class ``prepare`` returns; rebuilds a saved fit's config.
    sample_posterior : callable, optional
        ``sample_posterior(raw_params, config, family, rng, num_samples) -> dict``: draws of the
        global latents from a fitted posterior (numpy).
    log_likelihood : callable, optional
        ``log_likelihood(draws, data) -> (S, N)``: per-datum log-likelihood for each draw.
    check_data : callable, optional
        ``check_data(data, config)``: checks that new data (e.g. a test set) fit a fitted model,
        beyond ``validate_data`` (``prepare`` does this for the training data).
    draws_from_sites : callable, optional
        ``draws_from_sites(sites, config) -> draws``: MCMC draws of the model's latent sample
        sites (site name to a numpy array ``(S, *site shape)`` of constrained values; discrete
        local sites such as a mixture's ``z`` are summed out and absent) as the draws
        ``sample_posterior`` gives: the same keys and shapes, which ``log_likelihood`` reads. A
        model that sets it declares that every latent variable is global, or discrete and
        enumerable, so that NUTS can sample it. Requires ``sites_from_params``.
    sites_from_params : callable, optional
        ``sites_from_params(raw_params, config) -> sites``: a point in the support of every
        latent sample site (numpy, site shapes without a draw axis), read from the raw parameters
        of a fitted posterior or of ``exact_posterior`` (its mean where it has one); the
        sampler's chains start there.
    exact_posterior : callable, optional
        ``exact_posterior(data, config) -> raw_params``: the posterior in closed form, as raw
        parameters that ``sample_posterior(raw_params, config, "exact", rng, num_samples)``
        draws from; for conjugate models whose posterior is known exactly.
    exchangeable_components : tuple of str
        The keys of the ``sample_posterior`` draws whose axis 1 indexes exchangeable mixture
        components: the posterior is defined only up to their relabelling, so comparisons of
        two posteriors match components first.
    dtype : {"float32", "float64"}, optional
        The precision a fit uses when the caller names none (default: the algorithm's).
    example_options : mapping
        Small model options for the shared checks (``zoo.testing``) and quick demos.
    minibatch : bool
        Whether the twins take ``num_data=`` (the full data size when ``data`` is a minibatch),
        so SVI can fit them with ``batch_size=``.
    tags : tuple of str
        Free-form labels such as ``"discrete-latent"`` or ``"conjugate"``.
    """

    name: str
    description: str
    data: Mapping[str, DataField]
    backends: Mapping[str, str]
    guides: tuple[str, ...]
    prepare: Callable[..., Any]
    updates: ClosedFormUpdates | None = None
    maximum_likelihood_twin: str | None = None
    numerical_advice: str = ""
    make_data: Callable[..., dict] | None = None
    summarize: Callable[..., dict] | None = None
    config_type: type | None = None
    sample_posterior: Callable[..., dict] | None = None
    log_likelihood: Callable[..., np.ndarray] | None = None
    check_data: Callable[..., None] | None = None
    draws_from_sites: Callable[[dict, Any], dict] | None = None
    sites_from_params: Callable[[dict, Any], dict] | None = None
    exact_posterior: Callable[[dict, Any], dict] | None = None
    exchangeable_components: tuple[str, ...] = ()
    dtype: str | None = None
    minibatch: bool = False
    example_options: Mapping[str, Any] = field(default_factory=dict)
    tags: tuple[str, ...] = field(default_factory=tuple)

    @property
    def built_in(self) -> bool:
        """Whether all of the model's code (twins and closed-form updates) is the zoo's own:
        what a fit compiles from it may be kept across processes, keyed by the zoo's source."""
        modules = [*self.backends.values(), *([self.updates.module] if self.updates else [])]
        return all(isinstance(m, str) and m.startswith("zoo.") for m in modules)

    def twin(self, backend: str) -> ModuleType:
        """Import and return the backend twin module (lazily: torch or jax load only when used)."""
        if backend not in self.backends:
            raise ValueError(
                f"Model {self.name!r} has no backend {backend!r}; "
                f"valid backends are {sorted(self.backends)}."
            )
        return importlib.import_module(self.backends[backend])

    def build_model(self, backend: str, config, init=None) -> Callable:
        """The backend's model callable ``model(data, config, temperature=None, ...)``.

        A twin that holds networks defines ``make_model(config, init)`` so the networks are built
        once per fit, not at every step; otherwise ``init`` is bound to its plain ``model``.
        """
        twin = self.twin(backend)
        if hasattr(twin, "make_model"):
            return twin.make_model(config, init)
        return functools.partial(twin.model, init=init)

    def validate_data(self, data: Mapping[str, Any]) -> dict[str, np.ndarray]:
        """Check data against the contract; return it as numpy arrays.

        Raises a ``ValueError`` that says what was expected and what was got.
        """
        if not isinstance(data, Mapping):
            keys = sorted(self.data)
            example = ", ".join(f"{k!r}: np.asarray(...)" for k in keys)
            raise TypeError(
                f"data must be a dict mapping {keys} to arrays; got {type(data).__name__}. "
                f"Name each array by its key: data={{{example}}} (a DataFrame, Series, list or "
                "tensor becomes an array with np.asarray)."
            )
        missing = sorted(set(self.data) - set(data))
        extra = sorted(set(data) - set(self.data))
        if missing or extra:
            raise ValueError(
                f"Model {self.name!r} takes data keys {sorted(self.data)}; "
                f"missing {missing}, unexpected {extra}."
            )
        out = {}
        for key, contract in self.data.items():
            try:
                value = np.asarray(data[key])
            except (TypeError, ValueError) as err:  # ragged lists, objects numpy cannot read
                raise ValueError(
                    f"data[{key!r}] cannot be read as an array ({contract.doc}): {err}"
                ) from None
            if value.ndim != contract.ndim:
                raise ValueError(
                    f"data[{key!r}] must have {contract.ndim} dimensions ({contract.doc}); "
                    f"got shape {value.shape}."
                )
            if 0 in value.shape:
                raise ValueError(
                    f"data[{key!r}] is empty ({contract.doc}); got shape {value.shape}."
                )
            if value.dtype.kind not in contract.kind:
                mixed = (
                    " (numpy could not read every entry as a number: mixed types, None, or "
                    "strings, e.g. a DataFrame with a non-numeric column)"
                    if value.dtype.kind in "OUS"
                    else ""
                )
                raise ValueError(
                    f"data[{key!r}] must have a dtype of kind {contract.kind!r} "
                    f"(numpy dtype.kind); got {value.dtype}{mixed}."
                )
            if value.dtype.kind == "f" and value.dtype.itemsize > 8:
                raise ValueError(
                    f"data[{key!r}] has dtype {value.dtype}, more precise than either backend "
                    f"computes in (float64 at most); convert it first, e.g. "
                    f"data[{key!r}].astype(np.float64)."
                )
            if value.dtype.kind == "f":
                bad = ~np.isfinite(value)
                if bad.any():
                    rows = np.unique(np.nonzero(bad)[0])
                    shown = ", ".join(str(r) for r in rows[:10])
                    more = f" and {len(rows) - 10} more" if len(rows) > 10 else ""
                    raise ValueError(
                        f"data[{key!r}] contains NaN or inf in {len(rows)} row(s): "
                        f"{shown}{more}. Drop or impute them before fitting."
                    )
            out[key] = value
        return out
