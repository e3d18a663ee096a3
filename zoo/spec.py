"""``ModelSpec``: everything the inference layer needs to know about a model, as plain data."""

from __future__ import annotations

import functools
import importlib
import warnings
from collections.abc import Callable, Mapping
from dataclasses import KW_ONLY, InitVar, dataclass, field
from types import ModuleType
from typing import Any

import numpy as np

from zoo.updates import ClosedFormUpdates

BACKENDS = ("pyro", "numpyro")

#: The metadata key of a model config's field computed from the data alone
#: (``dataclasses.field(..., metadata={FROM_DATA: True})``): a checkpoint fingerprints the data
#: already, so its config fingerprint leaves such a field out, and adding one does not refuse
#: the checkpoints written before it.
FROM_DATA = "from_data"

#: numpy's dtype kinds (``DataField.kind``) as an error message names them.
_KIND_WORDS = {"f": "floating-point", "i": "integer", "u": "unsigned integer", "b": "boolean"}


class ModelSpecError(ValueError):
    """A model breaks the zoo's contract; raised when it is registered (or first fetched, for a
    plugin). The message says which contract and how to fix it.

    Raised by :func:`zoo.register`, :func:`zoo.get_model` (a plugin's model),
    :func:`zoo.testing.check_spec` and :func:`zoo.testing.check_registration`. A
    ``ValueError``.

    Parameters
    ----------
    message : str
        Which contract broke, and how to fix it.

    Examples
    --------
    >>> import dataclasses
    >>> import zoo
    >>> copy = dataclasses.replace(zoo.get_model("gmm"))  # same name as the built-in model
    >>> try:
    ...     zoo.register(copy)
    ... except zoo.ModelSpecError as err:
    ...     print(err)
    A model named 'gmm' is already registered (built-in); choose another name, or pass
    replace=True to register() to replace it.
    """


@dataclass(frozen=True)
class DataField:
    """The contract for one data key: its rank, its dtype kind and what it means.

    :meth:`ModelSpec.validate_data` checks data against it: the number of dimensions, the
    numpy dtype kind, no empty axis, and no NaN or inf in floating-point data. Each parameter
    is an attribute of the same name (frozen).

    Parameters
    ----------
    ndim : int
        The number of dimensions of the array (2 for ``(N, D)`` observations).
    kind : str
        The numpy dtype kinds accepted (``dtype.kind``): ``"f"`` float, ``"i"`` integer, ``"u"``
        unsigned, ``"b"`` bool; ``"iu"`` accepts either integer kind.
    doc : str
        What the array holds, with its shape: shown in error messages and the model's page.
    binary : bool
        0/1 observations: SVI's ``dynamic_binarization`` may draw them afresh from grey levels.
    bounds : tuple of (int or str), optional
        ``(low, high)``: the integer values allowed, ``low <= value < high``; each bound an int
        or the name of an attribute of the model's config (``"num_classes"``).
        :meth:`ModelSpec.check_bounds` checks them, on every minibatch of data not held in
        memory, naming the rows of the user's array.

    Examples
    --------
    >>> import zoo
    >>> zoo.DataField(2, "f", "(N, D) observations")
    DataField(ndim=2, kind='f', doc='(N, D) observations', binary=False, bounds=None)
    >>> zoo.get_model("gmm").data
    {'x': DataField(ndim=2, kind='f', doc='(N, D) observations', binary=False, bounds=None)}
    """

    ndim: int
    kind: str = "f"  # numpy dtype kinds accepted: "f" float, "i" integer, "u" unsigned, "b" bool
    doc: str = ""
    # 0/1 observations: SVI's dynamic_binarization may draw them afresh from grey levels.
    binary: bool = False
    # (low, high) of integer values, low <= value < high; ints or names of config attributes.
    bounds: tuple[int | str, int | str] | None = None

    def problems(self, key: str) -> list[str]:
        """What is wrong with the contract of data key ``key``, for the spec checks (data are
        checked against ``kind`` one character at a time, so a word such as ``"float"`` would
        pass as its letters)."""
        out = []
        ndim = self.ndim
        if isinstance(ndim, bool) or not isinstance(ndim, int) or ndim < 0:
            out.append(
                f"data[{key!r}].ndim must be an int >= 0, the number of dimensions of the array "
                f"(2 for (N, D) observations); got {ndim!r}."
            )
        kind = self.kind
        if not isinstance(kind, str) or not kind or any(k not in _KIND_WORDS for k in kind):
            codes = ", ".join(f"{k!r} ({word})" for k, word in _KIND_WORDS.items())
            out.append(
                f"data[{key!r}].kind must be numpy dtype kind codes, one or more of {codes}: "
                f"e.g. 'f' for floats, 'iu' for integers of either sign; got {kind!r}."
            )
        return out


@dataclass(frozen=True)
class GuideKind:
    """How SVI treats one of a model's guides; declared in :attr:`ModelSpec.guide_kinds`.

    A guide declared nowhere is plain: it samples every latent site, and SVI fits it with the
    ELBO the caller picks (``elbo=``, ``num_particles=``). The flags say what else SVI must know,
    and may combine (a mixture's guide that sums ``z`` out and holds point masses for the rest
    is enumerated and deterministic). Each parameter is an attribute of the same name (frozen).

    Parameters
    ----------
    enumerated : bool
        The guide leaves the model's discrete sites (in the ``data`` plate) unsampled, and SVI
        sums them out exactly (``TraceEnum_ELBO``); the registration checks accept the guide
        without those sites.
    relaxed : bool
        A Gumbel-softmax guide: it samples a relaxed one-hot site at the temperature SVI passes
        as ``temperature``, annealed from ``temperature[0]`` to ``temperature[1]`` (the
        ``temperature=`` option, which SVI refuses for other guides).
    deterministic : bool
        The guide draws nothing at random: every site is a point mass (``Delta``) or a discrete
        site summed out. Its ELBO is exact, so SVI refuses ``num_particles=`` and ``elbo=``
        (which would change nothing), and the registration checks refuse a guide declared so
        that draws a site at random.
    closed_form_kl : bool
        SVI always fits the guide with the mean-field ELBO (``elbo="meanfield"``), which takes
        the closed-form KL at the sites that have one (Jang et al.'s Gumbel-softmax objective
        uses the KL between the categoricals of ``z``); SVI refuses another ``elbo=``.

    Examples
    --------
    >>> import zoo
    >>> zoo.GuideKind(enumerated=True, deterministic=True)
    GuideKind(enumerated=True, deterministic=True)
    >>> zoo.GuideKind()  # a plain guide
    GuideKind()
    >>> spec = zoo.get_model("bayesian_gmm")
    >>> spec.guide_kind("gumbel")
    GuideKind(relaxed=True, closed_form_kl=True)
    >>> spec.guide_kind("gumbel").relaxed, spec.guide_kind("enum").relaxed
    (True, False)
    """

    enumerated: bool = False
    relaxed: bool = False
    deterministic: bool = False
    closed_form_kl: bool = False

    def __repr__(self) -> str:
        # Only the flags that are set: the repr is what a spec writes.
        flags = ", ".join(
            f"{name}={value!r}" for name, value in vars(self).items() if value is not False
        )
        return f"GuideKind({flags})"

    def problems(self, guide: str) -> list[str]:
        """What contradicts itself in the declaration of ``guide``, for the spec checks."""
        out = [
            f"guide_kinds[{guide!r}].{name} must be True or False; got {value!r}."
            for name, value in vars(self).items()
            if not isinstance(value, bool)
        ]
        if out:
            return out
        if self.relaxed and self.enumerated:
            out.append(
                f"guide {guide!r} is declared both relaxed and enumerated: a relaxed guide "
                "samples the discrete site (relaxed), an enumerated one leaves it to be summed "
                "out. Declare one of the two."
            )
        if self.relaxed and self.deterministic:
            out.append(
                f"guide {guide!r} is declared both relaxed and deterministic: a relaxed guide "
                "draws Gumbel noise, so its ELBO is not exact. Drop deterministic=True."
            )
        if self.enumerated and self.closed_form_kl:
            out.append(
                f"guide {guide!r} is declared both enumerated and closed_form_kl: SVI fits an "
                "enumerated guide with TraceEnum_ELBO, not the mean-field ELBO. Declare one of "
                "the two."
            )
        return out


#: The twin-module constants that listed guides of each kind before the spec declared them
#: (``ModelSpec.guide_kinds``), and the flag of :class:`GuideKind` each stands for. Twins that
#: still define them are read, with a ``DeprecationWarning``, while the spec declares no kinds.
LEGACY_GUIDE_CONSTANTS = {
    "ENUMERATED_GUIDES": "enumerated",
    "RELAXED_GUIDES": "relaxed",
    "DETERMINISTIC_GUIDES": "deterministic",
    "CLOSED_FORM_KL_GUIDES": "closed_form_kl",
}


def legacy_guide_kinds(twin: ModuleType) -> dict[str, GuideKind]:
    """The guide kinds a twin module declares by the old constants (empty when it has none)."""
    flags: dict[str, dict[str, bool]] = {}
    for constant, flag in LEGACY_GUIDE_CONSTANTS.items():
        for guide in getattr(twin, constant, ()):
            flags.setdefault(guide, {})[flag] = True
    return {guide: GuideKind(**set_flags) for guide, set_flags in flags.items()}


def legacy_constants(twin: ModuleType) -> list[str]:
    """The old guide-kind constants a twin module still defines."""
    return [name for name in LEGACY_GUIDE_CONSTANTS if hasattr(twin, name)]


def rows_text(rows, row_ids=None) -> str:
    """``"2 row(s): 5, 35"`` for the positions ``rows`` of an array; ``row_ids`` (one per row of
    that array) renames them, so that a minibatch's rows are named by their rows in the user's
    array, not by their places in the minibatch."""
    rows = np.unique(rows if row_ids is None else np.asarray(row_ids)[rows])
    shown = ", ".join(str(r) for r in rows[:10])
    more = f" and {len(rows) - 10} more" if len(rows) > 10 else ""
    return f"{len(rows)} row(s): {shown}{more}"


def _as_data_array(value, name: str, doc: str = "") -> np.ndarray:
    """A data value as the numpy array ``np.asarray`` reads; ``name`` (``"data['x']"``) and
    ``doc`` (what it holds) name it in the errors.

    Raises
    ------
    ValueError
        numpy cannot read it as one array (a ragged list).
    TypeError
        Its own conversion fails (a torch tensor that requires grad), or numpy wraps the whole
        object as the one element of a 0-d array instead of reading its entries (a scipy
        sparse matrix).
    """
    what = f" ({doc})" if doc else ""
    try:
        array = np.asarray(value)
    except (TypeError, ValueError) as err:  # ragged lists, objects numpy cannot read
        raise ValueError(f"{name} cannot be read as an array{what}: {err}") from None
    except Exception as err:  # the object's own conversion refused, e.g. torch's
        detach = f" Pass {name}.detach()." if getattr(value, "requires_grad", False) else ""
        raise TypeError(
            f"{name} cannot be read as an array{what}: converting its "
            f"{type(value).__name__} failed: {err}{detach}"
        ) from None
    if array.ndim == 0 and array.dtype == object and value is not None:
        # numpy wrapped the object whole, as it does a sparse matrix: not its entries.
        dense = f", e.g. {name}.toarray()" if hasattr(value, "toarray") else ""
        raise TypeError(
            f"{name} cannot be read as an array{what}: numpy takes its "
            f"{type(value).__name__} as one object, not as numbers; pass a dense numpy "
            f"array{dense}."
        )
    return array


@dataclass(frozen=True)
class ModelSpec:
    """A model of the zoo, described for the inference layer.

    Every parameter is also an attribute of the same name; the spec is frozen (use
    ``dataclasses.replace`` for an edited copy). :attr:`built_in` says whether all of its code
    is the zoo's own.

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
    guide_kinds : mapping of str to GuideKind
        How SVI treats each guide that is not plain, by name (a name of ``guides``): which sum
        the discrete sites out, which are relaxed (Gumbel-softmax), which draw nothing at random,
        which take the closed-form KL. Declared once here, for both twins; a guide absent from
        it is plain. :meth:`guide_kind` reads it.
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
        The class ``prepare`` returns; rebuilds a saved fit's config. A checkpoint fingerprints
        the config, but for fields whose metadata holds ``FROM_DATA`` (computed from the data
        alone, which it fingerprints already): such a field can be added to a config without
        refusing the checkpoints written before it.
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
    summarize_draws : callable, optional
        ``summarize_draws(draws, config) -> dict``: a sampler's user-facing parameters from its
        posterior draws (``draws_from_sites``' draws, pooled over chains: ``(S, ...)``), by
        ``summarize``'s names and conventions, so that a NUTS fit's ``FitResult.params`` have the
        keys of every other fit's. Without it they are the posterior means of the draws, by the
        draws' names. Requires ``draws_from_sites``.
    sites_from_params : callable, optional
        ``sites_from_params(raw_params, config) -> sites``: a point in the support of every
        latent sample site (numpy, site shapes without a draw axis), read from raw parameters
        (its mean where it has one). The sampler's chains start there for a model whose
        ``updates`` start from responsibilities (a mixture), at the point every algorithm
        starts from (one closed-form update from the initial responsibilities); other models'
        chains start where the backend puts them (uniform in [-2, 2] on the unconstrained
        space), and the function is not called.
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
    objective_name : callable, optional
        ``objective_name(config) -> str``: what a fit by gradient steps ascends, for a model
        whose options make it other than the ELBO (a weighted KL, a supervised loss); None: the
        ELBO. Printed beside the figure (``zoo fit``, a comparison's ``objective`` column).
    algorithm_defaults : mapping of str to mapping
        The defaults this model wants where an algorithm's generic ones do not suit it, by
        algorithm name: its options (for ``"svi"``: ``lr``, ``num_particles``), ``num_steps``
        and ``tol``, e.g. ``{"svi": {"lr": 1e-3, "num_steps": 20000}}`` for a network. Used only
        where the caller gives none of its own.
    minibatch : bool
        Whether the twins take ``num_data=`` (the full data size when ``data`` is a minibatch),
        so SVI can fit them with ``batch_size=``.
    tags : tuple of str
        Free-form labels such as ``"discrete-latent"`` or ``"conjugate"``.
    guide_coordinates : int
        Which revision of the coordinates SVI moves the parameters in (the guides', and the
        model's own ``param`` sites; their unconstrained values, which a checkpoint holds):
        raise it when a twin changes a parameter's constraint or its transform, so that resuming
        a checkpoint taken in the old coordinates is refused rather than misread. Starts at 1.

    Other Parameters
    ----------------
    algorithms : tuple of str, optional
        Deprecated and ignored, with a ``DeprecationWarning``: which algorithms fit a model
        follows from what the spec declares (``guides`` for SVI, ``updates`` for CAVI or EM).
    closed_form, conjugate_updates : str, optional
        Deprecated, with a ``DeprecationWarning``: the module path of a mixture's closed-form
        updates (which start from responsibilities), or of another model's (which start from the
        data). Mapped to ``updates=ClosedFormUpdates(module, objective=..., start=...)``, the
        objective read from ``algorithms`` (``"cavi"``: the ELBO; ``"em"``: a log-likelihood);
        a ``ModelSpecError`` when ``algorithms`` does not say which.

    See Also
    --------
    zoo.register : Add a spec to the registry, after checking it.
    zoo.testing.check_registration : The checks every registration runs.

    Examples
    --------
    The spec of a built-in model:

    >>> import numpy as np
    >>> import zoo
    >>> spec = zoo.get_model("gmm")
    >>> spec.name, spec.guides, sorted(spec.backends)
    ('gmm', ('enum',), ['numpyro', 'pyro'])
    >>> spec.guide_kinds  # SVI sums z out; the rest of the guide is point masses
    {'enum': GuideKind(enumerated=True, deterministic=True)}
    >>> spec.backends["pyro"]
    'zoo.gmm.pyro_model'
    >>> data = spec.make_data(np.random.default_rng(0), 5)
    >>> {key: value.shape for key, value in data.items()}
    {'x': (5, 2)}
    >>> spec.prepare(data, K=2)
    GMMConfig(K=2, dim=2, reg_covar=1e-06, units=(2.0, 2.0))

    A spec of one's own is a ``ModelSpec`` naming its twins by module path (a
    copy of the built-in one here); :func:`zoo.register` checks it and adds it to the registry:

    >>> import dataclasses
    >>> mine = dataclasses.replace(spec, name="my_gmm", description="My mixture")
    >>> zoo.register(mine).name
    'my_gmm'
    >>> zoo.get_model("my_gmm") is mine
    True
    >>> zoo.unregister("my_gmm").name
    'my_gmm'
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
    summarize_draws: Callable[[dict, Any], dict] | None = None
    sites_from_params: Callable[[dict, Any], dict] | None = None
    exact_posterior: Callable[[dict, Any], dict] | None = None
    exchangeable_components: tuple[str, ...] = ()
    dtype: str | None = None
    algorithm_defaults: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    minibatch: bool = False
    example_options: Mapping[str, Any] = field(default_factory=dict)
    objective_name: Callable[[Any], str] | None = None
    tags: tuple[str, ...] = field(default_factory=tuple)
    guide_coordinates: int = 1
    _: KW_ONLY
    guide_kinds: Mapping[str, GuideKind] = field(default_factory=dict)
    # The keywords of the previous revision, accepted for one release (__post_init__). An
    # InitVar with a default keeps dataclasses.replace working: it passes the class attribute,
    # None, which means "not given".
    algorithms: InitVar[tuple[str, ...] | None] = None
    closed_form: InitVar[str | None] = None
    conjugate_updates: InitVar[str | None] = None

    def __post_init__(self, algorithms, closed_form, conjugate_updates) -> None:
        if algorithms is None and closed_form is None and conjugate_updates is None:
            return
        updates = _updates_from_old_keywords(
            self.name, self.updates, algorithms, closed_form, conjugate_updates
        )
        object.__setattr__(self, "updates", updates)

    def guide_kind(self, name: str, backend: str | None = None) -> GuideKind:
        """How SVI treats guide ``name``: its entry in ``guide_kinds``, else a plain guide.

        A spec that declares no kinds while its twin module still lists guides in the constants
        of the previous revision (``ENUMERATED_GUIDES``, ``RELAXED_GUIDES``,
        ``DETERMINISTIC_GUIDES``, ``CLOSED_FORM_KL_GUIDES``) gets them from the twin of
        ``backend`` (imported), with a ``DeprecationWarning`` that says what to declare instead.

        Parameters
        ----------
        name : str
            A guide name (``guides``); a name declared nowhere, or None, is a plain guide.
        backend : {"pyro", "numpyro"}, optional
            The twin whose old constants are read where the spec declares no kinds.

        Returns
        -------
        GuideKind
            The guide's kind; ``GuideKind()`` for a plain guide.

        Examples
        --------
        >>> import zoo
        >>> spec = zoo.get_model("gmm")
        >>> spec.guide_kind("enum")
        GuideKind(enumerated=True, deterministic=True)
        >>> spec.guide_kind("enum").deterministic
        True
        >>> zoo.get_model("vae").guide_kind("amortized")
        GuideKind()
        """
        if self.guide_kinds or backend is None or backend not in self.backends:
            return self.guide_kinds.get(name, PLAIN_GUIDE)
        twin = self.twin(backend)
        old = legacy_constants(twin)
        if not old:
            return PLAIN_GUIDE
        kinds = legacy_guide_kinds(twin)
        warnings.warn(legacy_constants_message(self, twin, old, kinds), DeprecationWarning, 2)
        return kinds.get(name, PLAIN_GUIDE)

    @property
    def built_in(self) -> bool:
        """Whether all of the model's code (twins and closed-form updates) is the zoo's own:
        what a fit compiles from it may be kept across processes, keyed by the zoo's source.

        Examples
        --------
        >>> import zoo
        >>> zoo.get_model("gmm").built_in
        True
        """
        modules = [*self.backends.values(), *([self.updates.module] if self.updates else [])]
        return all(isinstance(m, str) and m.startswith("zoo.") for m in modules)

    def twin(self, backend: str) -> ModuleType:
        """Import and return the backend twin module (lazily: torch or jax load only when used).

        Parameters
        ----------
        backend : {"pyro", "numpyro"}
            The backend.

        Returns
        -------
        module
            The twin module: ``model`` (or ``make_model``) and ``make_guide``.

        Raises
        ------
        ValueError
            The model has no twin for ``backend``.
        ImportError
            The twin module does not import.

        Examples
        --------
        >>> import zoo
        >>> spec = zoo.get_model("gmm")
        >>> spec.twin("pyro").__name__
        'zoo.gmm.pyro_model'
        >>> spec.twin("stan")
        Traceback (most recent call last):
        ...
        ValueError: Model 'gmm' has no backend 'stan'; valid backends are ['numpyro', 'pyro'].
        """
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

        Parameters
        ----------
        backend : {"pyro", "numpyro"}
            The backend.
        config
            The model configuration (``prepare``'s result), its arrays converted to the
            backend's.
        init : optional
            Starting values the twin reads (e.g. the guides' starting point), or None.

        Returns
        -------
        callable
            ``model(data, config, temperature=None, ...)``, a Pyro or NumPyro model.

        Raises
        ------
        ValueError
            The model has no twin for ``backend``.

        Examples
        --------
        >>> import numpy as np
        >>> import pyro
        >>> import torch
        >>> import zoo
        >>> spec = zoo.get_model("gmm")
        >>> data = spec.make_data(np.random.default_rng(0), 5)
        >>> config = spec.prepare(data, K=2)
        >>> model = spec.build_model("pyro", config)
        >>> x = torch.as_tensor(data["x"])
        >>> trace = pyro.poutine.trace(model).get_trace({"x": x}, config)
        >>> [name for name, site in trace.nodes.items() if site["type"] == "sample"]
        ['data', 'z', 'x']
        >>> [name for name, site in trace.nodes.items() if site["type"] == "param"]
        ['weights', 'means', 'scale_tril']
        """
        twin = self.twin(backend)
        if hasattr(twin, "make_model"):
            return twin.make_model(config, init)
        return functools.partial(twin.model, init=init)

    def validate_data(
        self, data: Mapping[str, Any], name: str = "data", row_ids=None
    ) -> dict[str, np.ndarray]:
        """Check data against the contract; return it as numpy arrays.

        Raises a ``ValueError`` that says what was expected and what was got.

        Parameters
        ----------
        data : mapping of str to array-like
            One array per data key of the model (``spec.data``).
        name : str
            What the caller calls ``data`` (``"validation_data"``, ``"test_data"``), for the
            messages.
        row_ids : array of int, optional
            For a minibatch: the row of the user's array that each of its rows is, so that the
            messages name those rows.

        Returns
        -------
        dict of str to ndarray
            The same keys, each value as a numpy array.

        Raises
        ------
        TypeError
            ``data`` is not a mapping (a bare array, a list, a DataFrame).
        ValueError
            A key missing or unexpected; an array that cannot be read, of another rank, empty,
            of another dtype kind, more precise than float64, or holding NaN or inf.

        Examples
        --------
        >>> import zoo
        >>> spec = zoo.get_model("gmm")
        >>> spec.validate_data({"x": [[1.0, 2.0], [3.0, 4.0]]})
        {'x': array([[1., 2.],
               [3., 4.]])}
        >>> spec.validate_data({"x": [1.0, 2.0, 3.0]})
        Traceback (most recent call last):
        ...
        ValueError: data['x'] must have 2 dimensions ((N, D) observations); got shape (3,).
        """
        if not isinstance(data, Mapping):
            keys = sorted(self.data)
            example = ", ".join(f"{k!r}: np.asarray(...)" for k in keys)
            raise TypeError(
                f"{name} must be a dict mapping {keys} to arrays; got {type(data).__name__}. "
                f"Name each array by its key: {name}={{{example}}} (a DataFrame, Series, list or "
                "tensor becomes an array with np.asarray)."
            )
        missing = sorted(set(self.data) - set(data))
        extra = sorted(set(data) - set(self.data))
        if missing or extra:
            raise ValueError(
                f"Model {self.name!r} takes {name} keys {sorted(self.data)}; "
                f"missing {missing}, unexpected {extra}."
            )
        out = {}
        for key, contract in self.data.items():
            value = _as_data_array(data[key], f"{name}[{key!r}]", contract.doc)
            if value.ndim != contract.ndim:
                raise ValueError(
                    f"{name}[{key!r}] must have {contract.ndim} dimensions ({contract.doc}); "
                    f"got shape {value.shape}."
                )
            if 0 in value.shape:
                raise ValueError(
                    f"{name}[{key!r}] is empty ({contract.doc}); got shape {value.shape}."
                )
            if value.dtype.kind in "biu" and contract.kind == "f":
                value = value.astype(np.float64)  # integers are numbers, as scikit-learn reads them
            if value.dtype.kind not in contract.kind:
                mixed = (
                    " (numpy could not read every entry as a number: mixed types, None, or "
                    "strings, e.g. a DataFrame with a non-numeric column)"
                    if value.dtype.kind in "OUS"
                    else ""
                )
                kinds = " or ".join(_KIND_WORDS[k] for k in contract.kind)
                raise ValueError(
                    f"{name}[{key!r}] must hold {kinds} numbers ({contract.doc}); got dtype "
                    f"{value.dtype}{mixed}."
                )
            if value.dtype.kind == "f" and value.dtype.itemsize > 8:
                raise ValueError(
                    f"{name}[{key!r}] has dtype {value.dtype}, more precise than either backend "
                    f"computes in (float64 at most); convert it first, e.g. "
                    f"{name}[{key!r}].astype(np.float64)."
                )
            if value.dtype.kind == "f":
                bad = ~np.isfinite(value)
                if bad.any():
                    raise ValueError(
                        f"{name}[{key!r}] contains NaN or inf in "
                        f"{rows_text(np.nonzero(bad)[0], row_ids)}. Drop or impute them first."
                    )
            out[key] = value
        return out

    def check_against_fit(self, data, config, name: str = "data") -> None:
        """``check_data(data, config)``: new data (validated) fit a model with ``config``; its
        message names the data as ``name`` where the model's names them ``data``."""
        if self.check_data is None:
            return
        try:
            self.check_data(data, config)
        except ValueError as err:
            text = str(err)
            if name == "data" or not text.startswith("data["):
                raise
            raise ValueError(name + text[len("data") :]) from None

    def check_bounds(self, data, config, name: str = "data", row_ids=None) -> None:
        """Every integer field with declared ``bounds`` (:class:`DataField`) holds values in
        them; else a ``ValueError`` naming the field, its rows (``row_ids`` renames them, as in
        :meth:`validate_data`), the values found and the range allowed.

        Examples
        --------
        >>> import numpy as np
        >>> import zoo
        >>> spec = zoo.get_model("bam_classifier")
        >>> data = spec.make_data(np.random.default_rng(0), 4)
        >>> config = spec.prepare(data, patch_size=14, width=8, num_heads=2, mlp_dim=8)
        >>> data["y"][1] = 10
        >>> spec.check_bounds(data, config, row_ids=[30, 31, 32, 33])
        Traceback (most recent call last):
        ...
        ValueError: data['y'] must hold values in [0, 10) (num_classes=10); got 10 in 1 row(s): 31.
        """
        for key, contract in self.data.items():
            if contract.bounds is None or key not in data:
                continue
            low, high = (getattr(config, b) if isinstance(b, str) else b for b in contract.bounds)
            value = _as_data_array(data[key], f"{name}[{key!r}]", contract.doc)
            bad = (value < low) | (value >= high)
            if bad.any():
                named = ", ".join(
                    f"{b}={getattr(config, b)}" for b in contract.bounds if isinstance(b, str)
                )
                found = ", ".join(str(v) for v in np.unique(value[bad])[:5])
                raise ValueError(
                    f"{name}[{key!r}] must hold values in [{low}, {high})"
                    + (f" ({named})" if named else "")
                    + f"; got {found} in {rows_text(np.nonzero(bad)[0], row_ids)}."
                )


#: The kind of a guide declared nowhere: it samples every latent site, fitted with any ELBO.
PLAIN_GUIDE = GuideKind()


def legacy_constants_message(spec, twin, constants, kinds) -> str:
    """The deprecation of a twin's guide-kind constants, with what to write instead."""
    if kinds:
        declared = ", ".join(f"{guide!r}: zoo.{kind!r}" for guide, kind in kinds.items())
        instead = (
            f"Declare the kinds once, in the spec: ModelSpec(..., guide_kinds={{{declared}}}), "
            "and delete the constants from both twins."
        )
    else:
        instead = (
            "They list no guide: a guide the spec does not declare in guide_kinds is plain. "
            "Delete the constants from both twins."
        )
    return (
        f"Model {spec.name!r}: twin {twin.__name__!r} declares its guides' kinds by "
        f"{', '.join(constants)}; these twin constants are deprecated, read only while the spec "
        f"declares no guide_kinds, and will be ignored in a future release. {instead}"
    )


def _updates_from_old_keywords(name, updates, algorithms, closed_form, conjugate_updates):
    """``updates`` from the ``ModelSpec`` keywords of the previous revision, with a
    ``DeprecationWarning`` that says what to write instead; a ``ModelSpecError`` where they do
    not say enough to be mapped faithfully."""
    module = closed_form if closed_form is not None else conjugate_updates
    if module is None:
        warnings.warn(
            f"ModelSpec {name!r}: algorithms= is deprecated, no longer needed and ignored: "
            "which algorithms fit a model follows from what the spec declares (guides for "
            "SVI, updates=zoo.ClosedFormUpdates(...) for coordinate-ascent VI or EM, "
            "draws_from_sites for NUTS). Delete algorithms=.",
            DeprecationWarning,
            stacklevel=4,
        )
        return updates
    keyword = "closed_form" if closed_form is not None else "conjugate_updates"
    if closed_form is not None and conjugate_updates is not None:
        raise ModelSpecError(
            f"ModelSpec {name!r}: closed_form= and conjugate_updates= are deprecated, and at "
            "most one of them was ever allowed. Write updates=zoo.ClosedFormUpdates(module, "
            "objective=..., start=...) instead (start='responsibilities' for a mixture's "
            "updates, 'data' for others)."
        )
    if updates is not None:
        raise ModelSpecError(
            f"ModelSpec {name!r}: {keyword}= (deprecated) and updates= both name closed-form "
            f"updates; keep updates= and delete {keyword}=."
        )
    start = "responsibilities" if keyword == "closed_form" else "data"
    ran = {a for a in (algorithms or ()) if a in ("cavi", "em")}
    if len(ran) != 1:
        said = f"algorithms={tuple(algorithms)!r}" if algorithms else "no algorithms="
        raise ModelSpecError(
            f"ModelSpec {name!r}: {keyword}={module!r} is deprecated, and it cannot be mapped "
            f"to updates= here: with {said} the spec does not say whether the updates ascend "
            "the ELBO (coordinate-ascent VI, algorithms=('cavi', ...)) or a log-likelihood (EM, "
            "algorithms=('em', ...)). Write instead "
            f"updates=zoo.ClosedFormUpdates({module!r}, objective='elbo', start={start!r}) for "
            "coordinate-ascent VI, or objective='log_likelihood' (maximum likelihood) or "
            "'log_joint' (maximum a posteriori) for EM, and delete algorithms=."
        )
    if "cavi" in ran:
        # The previous revision knew a CAVI fit's posterior by the family "cavi", an EM fit's
        # by "em": sample_posterior receives the same name as before.
        objective, family, more = "elbo", "cavi", ""
        if keyword == "closed_form":
            more = (
                " Natural-gradient SVI (svi-natural) is no longer found by looking for "
                "natural_step in the module: if the module defines it, add "
                "natural_gradient=True (zoo.updates lists the functions that then needs)."
            )
    else:
        objective, family = "log_likelihood", "em"
        more = (
            " EM updates that ascend a log joint (maximum a posteriori, as with priors) "
            "should say objective='log_joint': results are the same, and comparisons then "
            "name the objective rightly."
        )
    mapped = ClosedFormUpdates(module, objective=objective, start=start, family=family)
    warnings.warn(
        f"ModelSpec {name!r}: {keyword}= and algorithms= are deprecated. Write instead "
        f"updates=zoo.ClosedFormUpdates({module!r}, objective={objective!r}, start={start!r}, "
        f"family={family!r}), which is what they now mean, and delete algorithms=: which "
        f"algorithms fit a model follows from what the spec declares.{more}",
        DeprecationWarning,
        stacklevel=4,
    )
    return mapped
