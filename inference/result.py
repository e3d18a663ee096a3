"""``FitResult``: what a fit returns; backend-neutral (numpy), saved without pickle."""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from inference.algorithm import posterior_family
from inference.backends import get_backend
from inference.evaluation import (
    LogSumExp,
    check_guide,
    check_num_samples,
    check_seed,
    chunk_seed,
    fitted,
    importance_statistics,
)
from inference.persistence import checkpoint, checkpoint_header, saved_fit
from inference.registry import get_algorithm
from zoo import get_model, memory


# Compared by identity, as scikit-learn's estimators are: its fields hold dicts of arrays, whose
# == is elementwise, so a generated __eq__ could not say whether two results are equal.
@dataclass(eq=False)
class FitResult:
    """The fitted parameters, the objective's history and timings of one run.

    What :func:`inference.fit` returns and :func:`inference.load` reads back; backend-neutral
    (every array is numpy), saved without pickle (:meth:`save`). Results compare by identity
    (``a == b`` is ``a is b``); compare two fits by their ``params`` or their scores.

    Attributes
    ----------
    model : str
        The fitted model's registered name.
    algorithm : str
        The algorithm's registered name (``"cavi"``, ``"em"``, ``"svi"``, ...).
    backend : str
        ``"pyro"`` or ``"numpyro"``.
    guide : str or None
        The guide an SVI fit used; None for algorithms without one (closed-form updates,
        samplers).
    params : dict of str to ndarray
        User-facing parameters: the model's ``summarize`` of the raw parameters (for
        ``bayesian_gmm``: ``weights``, ``means``, ``covariances`` in scikit-learn's conventions,
        and ``n_effective_components``). A sampler's have the same names, read from its draws
        (the model's ``summarize_draws``; for ``bayesian_gmm``: ``weights``, ``means``,
        ``covariances`` and ``n_effective_components``), or are the posterior means of its
        draws by ``sample_posterior``'s names for a model without ``summarize_draws``.
    raw_params : dict of str to ndarray
        The algorithm's own parameters (variational parameters, named as the guide's params).
    config : dataclass
        The model configuration ``prepare`` built from the data and the model's options
        (priors as numpy arrays).
    history : dict of str to ndarray
        ``step``, ``objective`` (nats, summed over data points) and ``time`` (seconds since the
        start of the loop) per step, keyed by name: ``res.history["objective"]`` is the
        objective at every step (``res.history[0]`` is a ``KeyError``). With validation data
        also ``validation_step`` and ``validation``: the steps at which the held-out data were
        scored, and their per-point ELBO there.
    converged : bool
        Whether the run stopped because it met its stopping rule with ``tol``
        (``inference.convergence``); a run that used all of its ``num_steps`` without meeting it
        is False and warned with :class:`~inference.ConvergenceWarning`. A sampler, which has
        no stopping rule: whether its chains passed their diagnostics (r-hat, effective sample
        size, divergences), False when they are warned about.
    timing : dict of str to float
        Seconds: ``total`` (the steps), ``per_step`` (the median step), ``first_step`` (with
        its compilation), ``setup`` (from the call to the first step) and, from
        :func:`inference.fit`, ``wall`` (the whole call).
    num_data : int
        The number of data points (rows) fitted.
    seed : int
        The run's seed.
    options : dict
        The options the run was made with, as recorded in its checkpoints.
    data : dict of str to ndarray or None
        The training data, kept in memory only (not saved); the default data of
        :meth:`to_arviz`.
    best_step : int or None
        With validation data: the step whose parameters these are.
    draws : dict of str to ndarray or None
        A sampler's draws of the model's latent sites, shaped (chains, draws, ...).
    sample_stats : dict of str to ndarray or None
        A sampler's statistics per draw (``diverging``, ``step_size``, ...), shaped (chains,
        draws).
    spec : ModelSpec
        The fitted model's spec, kept from the fit (or found by ``model`` when not given).
    family : str or None
        The fitted posterior's family as the model's ``sample_posterior`` names it, decided
        when the fit was made (see :attr:`guide_family`).
    data_fingerprint : str or None
        A digest of the training data (their keys, shapes and bytes), which :meth:`save`
        writes in place of the data and :func:`inference.load` reads back, so that a fit read
        from a file can still be told to be of some data (``inference.compare`` checks a
        reference by it); None for a fit that keeps its data, or a file written without it.

    Examples
    --------
    >>> import numpy as np
    >>> import inference, zoo
    >>> data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 100)
    >>> res = inference.fit(
    ...     "bayesian_gmm", data, "cavi", "pyro", K=2, num_steps=20, tol=0, progress=False
    ... )
    >>> res.model, res.algorithm, res.backend, res.num_data
    ('bayesian_gmm', 'cavi', 'pyro', 100)
    >>> sorted(res.params)
    ['covariances', 'means', 'n_effective_components', 'weights']
    >>> res.params["weights"].round(2)
    array([0.74, 0.26])

    ``history`` is a dict of arrays keyed by name, not a list of steps:

    >>> sorted(res.history)
    ['objective', 'step', 'time']
    >>> res.history["objective"].shape
    (20,)
    >>> res.history[0]
    Traceback (most recent call last):
    ...
    KeyError: 0
    """

    model: str
    algorithm: str
    backend: str
    guide: str | None
    params: dict[str, np.ndarray]
    raw_params: dict[str, np.ndarray]
    config: Any
    history: dict[str, np.ndarray]
    converged: bool
    timing: dict[str, float]
    num_data: int
    seed: int
    options: dict = field(default_factory=dict)
    data: dict | None = field(default=None, repr=False)  # training data, kept in memory only
    best_step: int | None = None  # with validation data: the step whose parameters these are
    # A sampler's draws of the model's latent sites and its statistics, (chains, draws, ...).
    draws: dict[str, np.ndarray] | None = field(default=None, repr=False)
    sample_stats: dict[str, np.ndarray] | None = field(default=None, repr=False)
    spec: Any = field(default=None, repr=False)
    family: str | None = None
    data_fingerprint: str | None = field(default=None, repr=False)

    def __post_init__(self):
        if self.spec is None:  # a result made by hand: its model by name
            self.spec = get_model(self.model)

    def __repr__(self) -> str:
        """What the run was and how it ended, in one line (the arrays are in ``params``,
        ``history`` and ``draws``)."""
        guide = f", guide={self.guide!r}" if self.guide is not None else ""
        return (
            f"FitResult(model={self.model!r}, algorithm={self.algorithm!r}, "
            f"backend={self.backend!r}{guide}, num_data={self.num_data}, "
            f"num_steps={self.num_steps}, converged={self.converged}, "
            f"objective_per_point={self.objective_per_point:.6g})"
        )

    @property
    def objective(self) -> float:
        """The last objective, in nats (sum over points).

        The ELBO, or the log-likelihood for EM; NaN when the run took no step. It is what the
        run ascended at its last step: CAVI's mean-field ELBO, of the returned parameters;
        EM's log-likelihood, of the parameters before the last M-step; for a stochastic
        algorithm (SVI), that step's objective before its update, a Monte-Carlo
        estimate unless the guide draws nothing at random, and not a score of the returned
        parameters (SVI in stages returns the average of its last stage's iterates).
        :func:`inference.compare` scores every run afresh on one objective.

        Examples
        --------
        >>> import numpy as np
        >>> import inference, zoo
        >>> data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 100)
        >>> res = inference.fit(
        ...     "bayesian_gmm", data, "cavi", "pyro", K=2, num_steps=20, tol=0, progress=False
        ... )
        >>> round(res.objective, 2)
        -470.12
        >>> res.objective == float(res.history["objective"][-1])
        True
        """
        return (
            float(self.history["objective"][-1]) if len(self.history["objective"]) else float("nan")
        )

    @property
    def objective_per_point(self) -> float:
        """The last objective per data point, in nats (:attr:`objective` / :attr:`num_data`).

        Examples
        --------
        >>> import numpy as np
        >>> import inference, zoo
        >>> data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 100)
        >>> res = inference.fit(
        ...     "bayesian_gmm", data, "cavi", "pyro", K=2, num_steps=20, tol=0, progress=False
        ... )
        >>> round(res.objective_per_point, 3)
        -4.701
        """
        return self.objective / self.num_data

    @property
    def num_steps(self) -> int:
        """The number of steps the run took (the length of ``history["objective"]``).

        Examples
        --------
        >>> import numpy as np
        >>> import inference, zoo
        >>> data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 100)
        >>> res = inference.fit(
        ...     "bayesian_gmm", data, "cavi", "pyro", K=2, num_steps=20, tol=0, progress=False
        ... )
        >>> res.num_steps
        20
        """
        return len(self.history["objective"])

    @property
    def chains(self) -> tuple[int, int, int] | None:
        """A sampler's chains, warm-up iterations and draws per chain; None for a fit that
        kept no draws."""
        if not self.draws:
            return None
        chains, draws = next(iter(self.draws.values())).shape[:2]
        return chains, int(self.options.get("num_warmup", 0)), draws

    def sample_posterior(self, num_samples: int = 1000, seed: int = 0) -> dict[str, np.ndarray]:
        """Draws of the global latents from the fitted posterior (a point mass for EM).

        A sampler's result gives its own draws, pooled over chains: all of them when
        ``num_samples`` is at least their number, else ``num_samples`` evenly spaced ones.

        Parameters
        ----------
        num_samples : int
            How many draws.
        seed : int
            Seeds the draws (unused for a sampler's result).

        Returns
        -------
        dict of str to ndarray
            The model's global latents as ``spec.sample_posterior`` names them, each with a
            leading axis of ``num_samples`` draws (for mixtures: ``weights`` (S, K), ``means``
            (S, K, D), ``precisions`` (S, K, D, D)).

        Raises
        ------
        ValueError
            The model has no global latent variables (e.g. a VAE: score it with
            :meth:`log_marginal_likelihood` or :meth:`elbo`), or ``num_samples`` is below 1.
        zoo.memory.InsufficientMemoryError
            The draws cannot fit in the memory available (a ``MemoryError`` and a
            ``ValueError``); the message gives the estimate in GiB and the most that fit.
        TypeError
            ``num_samples`` is not an int.

        Examples
        --------
        >>> import numpy as np
        >>> import inference, zoo
        >>> data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 100)
        >>> res = inference.fit(
        ...     "bayesian_gmm", data, "cavi", "pyro", K=2, num_steps=20, tol=0, progress=False
        ... )
        >>> draws = res.sample_posterior(num_samples=200, seed=0)
        >>> {name: value.shape for name, value in draws.items()}
        {'weights': (200, 2), 'means': (200, 2, 2), 'precisions': (200, 2, 2, 2)}
        >>> draws["weights"].mean(axis=0).round(2)
        array([0.75, 0.25])
        """
        num_samples, seed = check_num_samples(num_samples), check_seed(seed)
        spec = self.spec
        if self.draws is not None:
            return spec.draws_from_sites(_thinned(_pooled(self.draws), num_samples), self.config)
        if spec.sample_posterior is None:
            raise ValueError(
                f"Model {self.model!r} has no global latent variables to draw (its latents are "
                "local to each data point); evaluate it with log_marginal_likelihood() or elbo()."
            )
        per_draw = _bytes_per_draw(self._draw(1, np.random.default_rng(0)), allocated=True)
        memory.check_fits(
            num_samples * per_draw,
            f"sample_posterior(num_samples={num_samples:,})",
            f"Pass num_samples <= {_most_that_fit(per_draw):,}, or draw in several calls with "
            "different seeds.",
        )
        return self._draw(num_samples, np.random.default_rng(seed))

    def _draw(self, num_samples: int, rng) -> dict[str, np.ndarray]:
        """``num_samples`` fresh draws from the fitted posterior (``spec.sample_posterior``)."""
        return self.spec.sample_posterior(
            self.raw_params, self.config, self.guide_family, rng, num_samples
        )

    def _scoring_bytes_per_draw(self, num_rows: int) -> int:
        """Memory that scoring ``num_rows`` rows takes per posterior draw: the draw as the
        likelihood reads it (a point estimate's repeated draws included, which it compares)
        and a row of log-likelihoods with the log-sum-exp's exponentials of it."""
        if self.draws is not None:  # a sampler's draws are in memory already
            return 2 * 8 * num_rows
        return _bytes_per_draw(self._draw(1, np.random.default_rng(0))) + 2 * 8 * num_rows

    @property
    def guide_family(self) -> str | None:
        """The fitted posterior's family, as the model's ``sample_posterior`` names it.

        The guide, or the family of the model's closed-form updates.

        Examples
        --------
        >>> import numpy as np
        >>> import inference, zoo
        >>> data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 100)
        >>> res = inference.fit(
        ...     "bayesian_gmm", data, "cavi", "pyro", K=2, num_steps=20, tol=0, progress=False
        ... )
        >>> res.guide is None, res.guide_family
        (True, 'cavi')
        """
        return self.guide if self.family is None else self.family

    def _checked(self, data) -> dict:
        """New data, checked as training data are and against the fitted model (its width)."""
        spec = self.spec
        data = spec.validate_data(_as_dict(spec, data))
        if spec.check_data is not None:
            spec.check_data(data, self.config)
        return data

    def pointwise_log_likelihood(self, data, num_samples=1000, seed=0) -> np.ndarray:
        """(num_samples, N) log p(x_n | theta_s) with theta_s drawn from the fitted posterior.

        Parameters
        ----------
        data : dict of str to array-like, or array-like
            New data with the model's data keys (an array for a model with one data key),
            checked as training data are and against the fitted model (its width).
        num_samples : int
            Draws ``theta_s`` of the global latents (:meth:`sample_posterior`).
        seed : int
            Seeds the draws.

        Returns
        -------
        ndarray, shape (num_samples, N)
            Log-likelihood of each data point under each draw, in nats.

        Raises
        ------
        ValueError
            Data that break the model's data contract or do not fit the fitted model, or a
            model without global latents (as :meth:`sample_posterior`).
        zoo.memory.InsufficientMemoryError
            The draws and their (num_samples, N) log-likelihoods cannot fit in the memory
            available; :meth:`log_marginal_likelihood` draws in chunks instead.
        TypeError
            An array for a model with several data keys.

        Examples
        --------
        >>> import numpy as np
        >>> import inference, zoo
        >>> data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 100)
        >>> res = inference.fit(
        ...     "bayesian_gmm", data, "cavi", "pyro", K=2, num_steps=20, tol=0, progress=False
        ... )
        >>> res.pointwise_log_likelihood(data["x"][:5], num_samples=200).shape
        (200, 5)
        """
        return self._pointwise(self._checked(data), num_samples, seed)

    def _pointwise(self, data: dict, num_samples: int, seed: int) -> np.ndarray:
        """:meth:`pointwise_log_likelihood` of checked ``data``, refused up front when the
        draws and their (S, N) log-likelihoods cannot fit in memory."""
        spec = self.spec
        if spec.sample_posterior is not None or self.draws is not None:
            per_draw = self._scoring_bytes_per_draw(_num_rows(data))
            memory.check_fits(
                self._num_draws(check_num_samples(num_samples)) * per_draw,
                f"pointwise_log_likelihood(num_samples={num_samples:,}) of "
                f"{_num_rows(data):,} rows",
                f"Pass num_samples <= {_most_that_fit(per_draw):,} or fewer rows; for log p(x) "
                "use log_marginal_likelihood(), which draws in chunks of bounded memory.",
            )
        return spec.log_likelihood(self.sample_posterior(num_samples, seed), data)

    def _num_draws(self, num_samples: int) -> int:
        """How many draws ``sample_posterior(num_samples)`` gives: a sampler's at most all."""
        if not self.draws:
            return num_samples
        chains, draws = next(iter(self.draws.values())).shape[:2]
        return min(num_samples, chains * draws)

    def log_marginal_likelihood(
        self, x, num_samples: int = 1000, seed: int = 0, device: str = "cpu"
    ) -> np.ndarray:
        """Per-datum importance-weighted estimate of log p(x_n), in nats; returns (N,).

        Models with global latents (mixtures) use the fitted posterior as proposal,
        ``log (1/S) sum_s p(x_n | theta_s)``, an estimate of ``log p(x_n | training data)``;
        more draws than fit in 256 MiB (with their log-likelihoods) are drawn in chunks, chunk
        ``i`` seeded by ``inference.evaluation.chunk_seed(seed, 0, i)``, and summed with a
        running log-sum-exp, so any ``num_samples`` runs in bounded memory.
        Models whose latents are local to a data point (a VAE) use the fitted guide,
        ``log (1/S) sum_s p(x_n, z_s) / q(z_s | x_n)`` (``inference.evaluation``), evaluated in
        chunks so memory stays bounded for any ``num_samples``.

        Parameters
        ----------
        x : dict of str to array-like, or array-like
            New data with the model's data keys (an array for a model with one data key).
        num_samples : int
            Importance samples ``S`` per data point.
        seed : int
            Seeds the draws.
        device : str
            Where a guide is evaluated (``"cpu"``, ``"cuda"``, ``"cuda:N"``); mixtures are
            scored in numpy on the CPU, but a device that is not there is still an error.

        Returns
        -------
        ndarray, shape (N,)
            The estimate of ``log p(x_n)`` for each data point.

        Raises
        ------
        ValueError
            Data that break the model's data contract or do not fit the fitted model,
            ``num_samples`` below 1, or a device that is not there.
        TypeError
            ``num_samples`` is not an int, or an array for a model with several data keys.

        Examples
        --------
        >>> import numpy as np
        >>> import inference, zoo
        >>> data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 100)
        >>> res = inference.fit(
        ...     "bayesian_gmm", data, "cavi", "pyro", K=2, num_steps=20, tol=0, progress=False
        ... )
        >>> res.log_marginal_likelihood(data["x"][:3], num_samples=200).round(2)
        array([-4.37, -4.99, -3.45])
        """
        num_samples, seed = check_num_samples(num_samples), check_seed(seed)
        if self.spec.sample_posterior is None:
            data = _as_dict(self.spec, x)
            return importance_statistics(fitted(self), data, num_samples, seed, device)[1]
        # Mixtures are scored in numpy, on the CPU; a device that is not there is still an error.
        get_backend(self.backend).resolve_device(device)
        data = self._checked(x)
        size = max(1, CHUNK_BYTES // self._scoring_bytes_per_draw(_num_rows(data)))
        log_sum, count = LogSumExp(), 0
        if self._num_draws(num_samples) <= size:  # one draw, with the seed as given
            # Not scipy's logsumexp: it takes several copies of its input, where this takes one.
            ll = self._pointwise(data, num_samples, seed)
            log_sum.add(ll)
            return log_sum.value() - np.log(ll.shape[0])
        for draws in self._posterior_in_chunks(num_samples, seed, size):
            ll = self.spec.log_likelihood(draws, data)
            log_sum.add(ll)
            count += ll.shape[0]
            del ll, draws  # the next chunk is scored without this one beside it
        return log_sum.value() - np.log(count)

    def _posterior_in_chunks(self, num_samples: int, seed: int, size: int):
        """``num_samples`` posterior draws, ``size`` at a time: chunk ``i`` drawn fresh with
        seed ``chunk_seed(seed, 0, i)``, or a sampler's draws (in memory already) sliced."""
        if self.draws is not None:
            draws = self.sample_posterior(num_samples, seed)
            total = len(next(iter(draws.values())))
            for start in range(0, total, size):
                yield {k: v[start : start + size] for k, v in draws.items()}
            return
        for i, start in enumerate(range(0, num_samples, size)):
            rng = np.random.default_rng(chunk_seed(seed, 0, i))
            yield self._draw(min(size, num_samples - start), rng)

    def elbo(self, x, num_samples: int = 1, seed: int = 0, device: str = "cpu") -> np.ndarray:
        """Per-datum ELBO of new data under the fitted guide, in nats; returns (N,).

        For models whose latents are local to a data point (a VAE): the mean over
        ``num_samples`` draws of ``log p(x_n, z) - log q(z | x_n)``.

        Parameters
        ----------
        x : dict of str to array-like, or array-like
            New data with the model's data keys (an array for a model with one data key).
        num_samples : int
            Draws of the local latents ``z`` per data point.
        seed : int
            Seeds the draws.
        device : str
            Where the guide is evaluated (``"cpu"``, ``"cuda"``, ``"cuda:N"``).

        Returns
        -------
        ndarray, shape (N,)
            The ELBO of each data point, a lower bound on ``log p(x_n)``.

        Raises
        ------
        ValueError
            The fit has no guide (closed-form updates, samplers: use
            :meth:`log_marginal_likelihood`), the model has latents outside the data plate (a
            mixture's global latents), or the data do not fit the model.
        TypeError
            An array for a model with several data keys.

        Examples
        --------
        A small VAE, fitted for a few SVI steps (at the model's learning rate, 1e-3):

        >>> import numpy as np
        >>> import inference, zoo
        >>> data = zoo.get_model("vae").make_data(np.random.default_rng(0), 20)
        >>> res = inference.fit(
        ...     "vae", data, "svi", "pyro", latent_dim=2, hidden=(8,), num_steps=5, progress=False
        ... )
        >>> elbo = res.elbo(data["x"][:3], num_samples=10)
        >>> log_p = res.log_marginal_likelihood(data["x"][:3], num_samples=10)
        >>> elbo.shape, bool(np.all(np.isfinite(elbo)))
        ((3,), True)
        >>> elbo.round(1), log_p.round(1)
        (array([-44.1, -43.7, -43.5]), array([-43.9, -43.5, -43.5]))
        """
        check_guide(fitted(self), self.algorithm, "elbo")
        data = _as_dict(self.spec, x)
        return importance_statistics(fitted(self), data, num_samples, seed, device)[0]

    def to_arviz(self, num_samples: int = 1000, seed: int = 0, data=None):
        """Posterior draws as ``arviz.InferenceData``, with the pointwise log-likelihood of
        ``data`` (default: the training data, if this result still has it).

        A sampler's result gives its draws of the model's sites with their chains
        (``posterior``: chain and draw dimensions) and its ``sample_stats`` (``diverging``,
        ``step_size``, ``tree_depth``, ``acceptance_rate``, ...), so ``az.summary`` reports
        r-hat and effective sample sizes; ``num_samples`` and ``seed`` are then unused. Other
        results give ``num_samples`` draws from the fitted posterior as one chain.

        Parameters
        ----------
        num_samples : int
            Draws from the fitted posterior (not for a sampler's result).
        seed : int
            Seeds the draws (not for a sampler's result).
        data : dict of str to array-like, or array-like, optional
            Data whose pointwise log-likelihood goes into the ``log_likelihood`` group (one
            variable named by the model's data keys, e.g. ``"x"``) and ``observed_data``;
            default: the training data when this result holds them, else no such groups. A
            loaded result, or one fitted on a stream, does not hold them: pass them for
            ``az.loo`` and ``az.waic``, which read the ``log_likelihood`` group.

        Returns
        -------
        arviz.InferenceData
            Groups ``posterior`` and, with data, ``log_likelihood`` and ``observed_data``; a
            sampler's result also ``sample_stats``.

        Raises
        ------
        ValueError
            The model has no global latent variables (as :meth:`sample_posterior`), or data
            that do not fit the model.

        Examples
        --------
        >>> import numpy as np
        >>> import inference, zoo
        >>> data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 100)
        >>> res = inference.fit(
        ...     "bayesian_gmm", data, "cavi", "pyro", K=2, num_steps=20, tol=0, progress=False
        ... )
        >>> idata = res.to_arviz(num_samples=100)
        >>> idata.groups()
        ['posterior', 'log_likelihood', 'observed_data']
        >>> idata.posterior["weights"].shape  # (chain, draw, component)
        (1, 100, 2)
        """
        import arviz as az

        spec = self.spec
        kwargs = {}
        if self.draws is not None:
            chains, per_chain = next(iter(self.draws.values())).shape[:2]
            posterior = self.draws
            draws = spec.draws_from_sites(_pooled(self.draws), self.config)
            kwargs["sample_stats"] = self.sample_stats
        else:
            chains, per_chain = 1, None
            draws = self.sample_posterior(num_samples, seed)
            posterior = {k: v[None] for k, v in draws.items()}
        data = self.data if data is None else data
        if data is not None:
            data = self._checked(data)
            pointwise = spec.log_likelihood(draws, data)
            # One variable, the likelihood of a whole datum, named by the model's data keys.
            pointwise = pointwise.reshape(chains, per_chain or pointwise.shape[0], -1)
            kwargs["log_likelihood"] = {",".join(spec.data): pointwise}
            kwargs["observed_data"] = data
        return az.from_dict(posterior=posterior, **kwargs)

    def save(self, path) -> None:
        """Write to ``path`` (atomic, pickle-free); read back with ``inference.load``.

        The file is a zip of ``.npy`` arrays and one JSON header: parameters, history,
        config, a sampler's draws, and the run's description. The training data are not
        saved. The file is written next to ``path`` and renamed over it, so an interrupted
        save leaves an earlier file intact.

        Parameters
        ----------
        path : str or os.PathLike
            The file to write; its directory must exist.

        Returns
        -------
        None

        Raises
        ------
        OSError
            The file cannot be written (e.g. its directory does not exist).

        Examples
        --------
        >>> import os, tempfile
        >>> import numpy as np
        >>> import inference, zoo
        >>> data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 100)
        >>> res = inference.fit(
        ...     "bayesian_gmm", data, "cavi", "pyro", K=2, num_steps=20, tol=0, progress=False
        ... )
        >>> with tempfile.TemporaryDirectory() as folder:
        ...     path = os.path.join(folder, "bayesian_gmm.zoo")
        ...     res.save(path)
        ...     back = inference.load(path)
        >>> back.objective == res.objective, back.params["weights"].round(2)
        (True, array([0.74, 0.26]))
        """
        arrays = {f"params/{k}": v for k, v in self.params.items()}
        arrays.update({f"raw/{k}": v for k, v in self.raw_params.items()})
        arrays.update({f"history/{k}": v for k, v in self.history.items()})
        for group, values in (("draws", self.draws), ("sample_stats", self.sample_stats)):
            arrays.update({f"{group}/{k}": v for k, v in (values or {}).items()})
        config_scalars = {}
        for f in dataclasses.fields(self.config):
            value = getattr(self.config, f.name)
            if isinstance(value, np.ndarray):
                arrays[f"config/{f.name}"] = value
            else:
                config_scalars[f.name] = value
        header = {
            "kind": "fit_result",
            "model": self.model,
            "algorithm": self.algorithm,
            "backend": self.backend,
            "guide": self.guide,
            "converged": self.converged,
            "timing": self.timing,
            "num_data": self.num_data,
            "seed": self.seed,
            "options": self.options,
            "best_step": self.best_step,
            "family": self.family,
            "config": config_scalars,
            "data_fingerprint": self.data_fingerprint or _fingerprint_of(self.spec, self.data),
        }
        try:
            checkpoint.save(path, header, arrays)
        except OSError as err:
            # A write to a file already open (a full disk) names no file: name the one asked for.
            if err.errno is None or err.filename is not None:
                raise
            raise type(err)(err.errno, err.strerror, os.fspath(path)) from err


def _fingerprint_of(spec, data) -> str | None:
    """The digest of training data held in memory, as :func:`data_fingerprint` takes it."""
    return None if data is None else data_fingerprint(spec, data)


def data_fingerprint(spec, data) -> str:
    """A digest of ``data`` as the model validates them (keys, shapes, bytes): equal for the
    same data however they were passed (lists or arrays, a C or Fortran order)."""
    return checkpoint_header.fingerprint(spec.validate_data(data))


def _pooled(draws: dict) -> dict:
    """(chains, draws, ...) -> (chains * draws, ...)."""
    return {k: v.reshape(-1, *v.shape[2:]) for k, v in draws.items()}


def _thinned(draws: dict, num_samples: int) -> dict:
    """At most ``num_samples`` evenly spaced draws (all of them when there are fewer)."""
    total = len(next(iter(draws.values())))
    if num_samples >= total:
        return draws
    keep = np.linspace(0, total - 1, num_samples).round().astype(int)
    return {k: v[keep] for k, v in draws.items()}


#: Memory of posterior draws and their log-likelihoods scored at once by
#: ``log_marginal_likelihood``; more draws than fit in it are drawn in chunks.
CHUNK_BYTES = 256 * 2**20


def _bytes_per_draw(draws: dict, allocated: bool = False) -> int:
    """Bytes of one draw of ``draws`` (each with a leading axis of draws); with ``allocated``,
    only of arrays that hold their own draws (a point estimate's are views of one array)."""
    return sum(
        v[:1].nbytes
        for v in map(np.asarray, draws.values())
        if v.ndim and not (allocated and v.strides[0] == 0)
    )


def _most_that_fit(per_draw: int) -> int:
    """How many draws of ``per_draw`` bytes fit in the memory available (at least 1)."""
    return max(1, (memory.available_memory() or 0) // max(1, per_draw))


def _num_rows(data: dict) -> int:
    return len(next(iter(data.values())))


def _as_dict(spec, data) -> dict:
    """``data`` as the model's data dict: an array stands for the one key of a one-key model."""
    if isinstance(data, dict):
        return data
    if len(spec.data) != 1:
        raise TypeError(
            f"Model {spec.name!r} takes data keys {sorted(spec.data)}: pass a dict of arrays; "
            f"got {type(data).__name__}."
        )
    return {next(iter(spec.data)): data}


def load(path) -> FitResult:
    """Read a ``FitResult`` written by ``FitResult.save`` (no code runs from the file).

    The file is checked against what wrote it and against its model before anything is built
    from it: a member missing or of the wrong shape, or a config value of the wrong type, raises
    :class:`~inference.persistence.checkpoint.CheckpointError` naming it.

    Parameters
    ----------
    path : str or os.PathLike
        A file written by :meth:`FitResult.save`.

    Returns
    -------
    FitResult
        The saved result, without training data (``data`` is None). A fit by a plugin's
        algorithm that is not installed still reads.

    Raises
    ------
    FileNotFoundError
        No file at ``path``.
    inference.CheckpointError
        The file is not a saved fit (a checkpoint, another file, a damaged one), or its model
        is not registered here (is its plugin installed?).

    Examples
    --------
    >>> import os, tempfile
    >>> import numpy as np
    >>> import inference, zoo
    >>> data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 100)
    >>> res = inference.fit("gmm", data, "em", "pyro", K=2, progress=False)
    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "gmm.zoo")
    ...     res.save(path)
    ...     back = inference.load(path)
    >>> back.model, back.algorithm, back.num_steps, back.data is None
    ('gmm', 'em', 8, True)
    >>> np.array_equal(back.params["means"], res.params["means"])
    True

    A file that is not a saved fit:

    >>> with tempfile.TemporaryDirectory() as folder:
    ...     path = os.path.join(folder, "notes.txt")
    ...     with open(path, "w") as f:
    ...         _ = f.write("not a fit")
    ...     inference.load(path)
    Traceback (most recent call last):
    ...
    inference.persistence.checkpoint.CheckpointError: '...notes.txt' is not a zoo file, or is corrupt ...
    """
    header, arrays = checkpoint.load(path)
    if header.get("kind") != "fit_result":
        raise checkpoint.CheckpointError(f"{path!r} is a {header.get('kind')!r}, not a saved fit.")
    saved_fit.check_header(path, header)
    try:
        spec = get_model(header["model"])
    except (KeyError, ValueError) as err:
        raise checkpoint.CheckpointError(
            f"{path!r} is a fit of model {header['model']!r}, which is not registered here "
            "(is its plugin installed?)."
        ) from err
    try:
        alg = get_algorithm(header["algorithm"])
    except (KeyError, ValueError):
        alg = None  # a plugin's algorithm that is not installed: the result still reads

    def group(prefix):
        return {k[len(prefix) + 1 :]: v for k, v in arrays.items() if k.startswith(prefix + "/")}

    config = saved_fit.config(path, spec, header["config"], group("config"))
    params, raw, draws = group("params"), group("raw"), group("draws")
    saved_fit.check_parameters(path, spec, alg, config, params, raw, draws)
    history = group("history")
    saved_fit.check_history(path, history)
    return FitResult(
        model=header["model"],
        algorithm=header["algorithm"],
        backend=header["backend"],
        guide=header["guide"],
        params=params,
        raw_params=raw,
        config=config,
        history=history,
        converged=header["converged"],
        timing=header["timing"],
        num_data=header["num_data"],
        seed=header["seed"],
        options=header["options"],
        best_step=header.get("best_step"),
        draws=draws or None,
        sample_stats=group("sample_stats") or None,
        spec=spec,
        # Files written before the family was recorded: the family their fit decided.
        family=header["family"] if "family" in header else _family(spec, alg, header["guide"]),
        data_fingerprint=header.get("data_fingerprint"),
    )


def _family(spec, alg, guide):
    """The posterior family of a saved fit that did not record it, as its fit decided it."""
    if alg is None:  # a plugin's algorithm that is not installed
        return guide
    return posterior_family(spec, alg.traits, guide)
