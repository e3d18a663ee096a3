"""``ClosedFormUpdates``: how a model declares its closed-form coordinate updates.

A model whose conditionals are conjugate can be fitted by updates written once against the
array namespace ``xp`` (``zoo.array_namespace``): coordinate-ascent VI when they ascend the
ELBO, EM when they ascend a log-likelihood or log joint. The model declares what its updates
ascend and where they start; the inference layer decides from that alone which of its
algorithms run on the model, and calls the updates through the methods below, which hide the
two ways a model may start:

* ``start="data"``: the module defines ``init_cache(data, config, xp)`` (the data dict),
  ``init_state(cache, config, xp)``, ``update(state, cache, config, xp) -> (state, objective)``
  and ``raw_params(state, cache, xp)``; the fit starts from the model's own starting point.
* ``start="responsibilities"`` (mixtures): ``init_cache(x, config, xp)`` takes the (N, D) array
  ``data["x"]`` and ``init_state(resp, cache, config, xp)`` the initial responsibilities (N, K)
  that every algorithm of a comparison shares (``zoo.initialization``); ``guide_init(raw, resp)``
  turns one update's parameters into the SVI guides' starting values.

With ``natural_gradient=True`` the module also defines stochastic natural-gradient steps on
minibatches: ``init_natural_state([resp,] cache, config, xp, scale)``, ``natural_step(state,
cache, config, xp, rho, scale) -> (state, objective)`` and ``natural_raw_params(state, context,
xp)`` (a mixture's cache of each minibatch is centred where the first was: ``init_cache(x,
config, xp, shift)``; see ``zoo/bayesian_gmm/closed_form.py`` and the extending example's
Bayesian linear regression). ``exact_elbo(raw, config, chunks, xp, asarray)``, where a module
defines it, evaluates a fit's ELBO over data read in chunks
(``inference.algorithms.svi_natural.full_elbo``). ``summed_out_elbo(raw, config, data, rng, num_samples,
xp, asarray, to_numpy)``, where a module of updates that ascend the ELBO defines it, is the
ELBO of a fit's global factors with the discrete latents summed out (a Monte-Carlo estimate):
with it, and ``global_kl(raw, config, xp, asarray)`` (KL(q(theta) || p(theta)) of the factors),
a comparison scores the fit by that ELBO, as it scores SVI's guides
(``inference.algorithms.closed_form.summed_out_elbo``). Both take the backend's float64 config
on the CPU; ``data`` are numpy arrays.
"""

from __future__ import annotations

import functools
import importlib
from dataclasses import dataclass
from types import ModuleType

import numpy as np

from zoo.initialization import initial_responsibilities

#: What updates may ascend, and whether the fit is then a posterior or a point estimate.
OBJECTIVES = {
    "elbo": "posterior",  # coordinate-ascent VI: a variational posterior
    "log_likelihood": "point",  # EM: maximum likelihood
    "log_joint": "point",  # EM on the log joint: maximum a posteriori
}
STARTS = ("data", "responsibilities")
#: How a mixture's initial responsibilities are made when ``init`` is None.
DEFAULT_INIT = "kmeans"


@dataclass(frozen=True)
class ClosedFormUpdates:
    """A model's closed-form coordinate updates (see the module).

    Parameters
    ----------
    module : str
        Module path of the updates, imported when a fit first uses them.
    objective : {"elbo", "log_likelihood", "log_joint"}
        What every update ascends, in nats with constants: the ELBO (CAVI), or a log-likelihood
        or log joint (EM, maximum likelihood or MAP).
    start : {"data", "responsibilities"}
        Where the updates start (see the module).
    family : str, optional
        The name ``sample_posterior(raw_params, config, family, ...)`` knows the updates'
        posterior by (for example the twins' guide of that family); default: ``"closed_form"``.
    natural_gradient : bool
        Whether the module also defines natural-gradient steps on minibatches.
    """

    module: str
    objective: str
    start: str = "data"
    family: str | None = None
    natural_gradient: bool = False

    @property
    def estimate(self) -> str:
        """``"posterior"`` or ``"point"``: what a fit by these updates gives."""
        return OBJECTIVES[self.objective]

    @property
    def posterior_family(self) -> str:
        return self.family or "closed_form"

    def load(self) -> ModuleType:
        return importlib.import_module(self.module)

    def functions(self) -> list[str]:
        """The functions the module must define for this declaration."""
        names = ["init_cache", "init_state", "update", "raw_params"]
        if self.start == "responsibilities":
            names.append("guide_init")
        if self.natural_gradient:
            names += ["init_natural_state", "natural_step", "natural_raw_params"]
        return names

    def problems(self) -> list[str]:
        """What is wrong with the declaration itself (no import), for the spec checks."""
        out = []
        if not isinstance(self.module, str) or not self.module:
            out.append("updates.module must be the module path of the updates (a string).")
        if self.objective not in OBJECTIVES:
            out.append(
                f"updates.objective must be one of {list(OBJECTIVES)}; got {self.objective!r}."
            )
        if self.start not in STARTS:
            out.append(f"updates.start must be one of {list(STARTS)}; got {self.start!r}.")
        if self.natural_gradient and self.objective != "elbo":
            out.append(
                "natural_gradient=True needs updates that ascend the ELBO (objective='elbo')."
            )
        return out

    # --- what the inference layer calls ---------------------------------------------------------

    @property
    def default_init(self) -> str | None:
        """The start ``init=None`` stands for: ``DEFAULT_INIT`` for a mixture, else None."""
        return DEFAULT_INIT if self.start == "responsibilities" else None

    def initial_point(self, spec_name: str, data: dict, config, init, seed: int):
        """What the updates start from, in numpy: a mixture's initial responsibilities (``init``:
        ``"kmeans"``, the default, ``"random"``, ``"random_from_data"`` or an (N, K) array), or
        None for a model that starts from its own point (then ``init`` must be None)."""
        if self.start == "responsibilities":
            init = self.default_init if init is None else init
            return initial_responsibilities(data["x"], config.K, init, seed)
        if init is not None:
            raise ValueError(
                f"init is for mixtures' initial responsibilities; the closed-form updates of "
                f"{spec_name!r} start from the model's own starting point. Leave init=None; "
                f"got {init!r}."
            )
        return None

    def init(self, data: dict, start, config, xp):
        """``(state, cache)`` of the updates on backend arrays ``data`` from ``start`` (the
        backend array of :meth:`initial_point`)."""
        module = self.load()
        if self.start == "responsibilities":
            cache = module.init_cache(data["x"], config, xp)
            return module.init_state(start, cache, config, xp), cache
        cache = module.init_cache(data, config, xp)
        return module.init_state(cache, config, xp), cache

    def raw_params(self, state, cache, xp) -> dict:
        return self.load().raw_params(state, cache, xp)

    def guide_start(
        self, data: dict, start, config, xp, asarray, to_numpy, advice: str = "", compile_step=None
    ):
        """The SVI guides' starting values (numpy) after one update from ``start`` (numpy
        responsibilities), for updates that start from responsibilities; else None (the guides
        start from their own values). ``asarray``/``to_numpy`` move arrays to the backend of
        ``config`` and ``xp`` and back. ``compile_step(fn, config, key)`` (a backend's) compiles
        the update, which JAX would otherwise compile operation by operation (seconds for a
        mixture); without it the update runs eagerly."""
        if self.start != "responsibilities":
            return None

        def one_update(config, data, start):
            return self.raw_params(*self.init(data, start, config, xp), xp)

        if compile_step is None:
            one_update = functools.partial(one_update, config)
        else:
            one_update = compile_step(
                one_update, config, (self.module, "init_cache, init_state and raw_params")
            )
        values = one_update({k: asarray(v) for k, v in data.items()}, asarray(start))
        raw = {k: to_numpy(v) for k, v in values.items()}
        if not all(np.isfinite(v).all() for v in raw.values()):
            raise ValueError(
                "The starting parameters (one closed-form update from the initial "
                f"responsibilities) are not finite: a component is singular. {advice}".rstrip()
            )
        return self.load().guide_init(raw, start)

    # --- natural-gradient steps on minibatches (natural_gradient=True) --------------------------

    def init_natural(self, batch: dict, start, config, xp, scale: float):
        """``(state, context)``: the natural-gradient state the steps start from, given the first
        minibatch ``batch`` (backend arrays), whose statistics count ``scale`` times (a mixture
        takes one step from its responsibilities ``start``; other models start where their
        module says), and what every later minibatch is read with (a mixture's centre of the
        features; None for other models)."""
        module = self.load()
        if self.start == "responsibilities":
            cache = module.init_cache(batch["x"], config, xp)
            return module.init_natural_state(start, cache, config, xp, scale), cache["shift"]
        cache = module.init_cache(batch, config, xp)
        return module.init_natural_state(cache, config, xp, scale), None

    def natural_step(self, state, context, batch: dict, config, xp, rho, scale):
        """One natural-gradient step on ``batch``: ``(state, minibatch estimate of the ELBO)``."""
        module = self.load()
        if self.start == "responsibilities":
            cache = module.init_cache(batch["x"], config, xp, context)
        else:
            cache = module.init_cache(batch, config, xp)
        return module.natural_step(state, cache, config, xp, rho, scale)

    def natural_raw_params(self, state, context, xp) -> dict:
        return self.load().natural_raw_params(state, context, xp)

    def exact_elbo(self, raw: dict, config, rows, xp, asarray) -> float:
        """The exact ELBO (nats) of the fitted globals ``raw`` over ``rows``, an iterable of
        chunks of the data (dicts of numpy arrays), with q(z) optimal given the globals;
        ``asarray`` puts a numpy array on the backend of ``config`` and ``xp``."""
        return self.load().exact_elbo(raw, config, rows, xp, asarray)

    @property
    def has_summed_out_elbo(self) -> bool:
        """Whether the module defines ``summed_out_elbo`` and ``global_kl`` (see the module),
        for updates that ascend the ELBO."""
        module = self.load()
        return self.objective == "elbo" and all(
            callable(getattr(module, name, None)) for name in ("global_kl", "summed_out_elbo")
        )

    def global_kl(self, raw: dict, config, backend) -> float:
        """KL(q(theta) || p(theta)) in nats of the fitted global factors ``raw``; ``backend``
        gives the array namespace and moves arrays, on the CPU in float64."""
        return self.load().global_kl(raw, config, *_cpu_float64(backend)[:2])

    def summed_out_elbo(self, raw: dict, config, data: dict, rng, num_samples: int, backend):
        """The ELBO in nats of the fitted global factors ``raw`` with the discrete latents
        summed out, over the rows of ``data`` (numpy arrays, read in chunks), its expectation
        over ``num_samples`` draws by the numpy generator ``rng``; ``backend`` gives the array
        namespace (``ops``) and moves arrays (``asarray``, ``to_numpy``), on the CPU in
        float64."""
        return self.load().summed_out_elbo(
            raw, config, data, rng, num_samples, *_cpu_float64(backend)
        )


def _cpu_float64(backend):
    """``(xp, asarray, to_numpy)`` of ``backend``: its array namespace, and numpy arrays to
    float64 arrays on its CPU device and back."""
    device = backend.resolve_device("cpu")
    return backend.ops, lambda a: backend.asarray(a, device, "float64"), backend.to_numpy
