"""``compare``: the product of algorithms x guides x backends x seeds on one model and data set."""

from __future__ import annotations

import json
import math
import os
import time
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np

from inference import accuracy, convergence
from inference.algorithm import ignores
from inference.algorithms import closed_form, svi
from inference.api import check_flag, check_tol, fit, make_problem, model_options
from inference.backends import get_backend
from inference.evaluation import check_num_samples, check_seed
from inference.loop import first_line, labelled_bar
from inference.minibatch import check_batch_size
from inference.persistence.checkpoint_header import config_summary, differences
from inference.registry import algorithm_source, every_option_name, get_algorithm, list_algorithms
from inference.result import data_fingerprint
from zoo import get_model
from zoo.files import save_figure
from zoo.initialization import INIT_METHODS
from zoo.options import did_you_mean

TARGET_GAP = 0.01  # nats per point: "reached the optimum" means within this of the best run
REFERENCE_DRAWS = 4000  # draws of an exact reference posterior
IMPORTANCE_WEIGHTED = "iwae"  # SVI's elbo= of the importance-weighted bound


@dataclass
class Comparison:
    """What :func:`compare` returns: one row per run (``rows``) and the fits themselves
    (``results``).

    ``print(comparison)`` shows the rows as a markdown table (:meth:`to_markdown`).

    Attributes
    ----------
    rows : list of dict
        One dict per run, with the keys of :attr:`columns`, ``objective`` (what the objective
        is: ``"ELBO"``, ``"log-likelihood"``, ...) and ``converged``. Times are in seconds,
        objectives in nats per data point; a value that does not apply to a run
        (``time_to_target_s`` of a sampler) is NaN. ``steps`` is the steps a run took, or for
        a sampler its chains x iterations per chain, warm-up included (``"4 x 1000"``). A run
        that raised under ``compare(..., on_error="record")`` has its error in ``error``.
    results : list of FitResult
        The runs, in the order of ``rows`` (None for a run that raised).
    reference : FitResult or None
        The fit the accuracy columns are measured against: the one given as ``reference=``,
        the comparison's own run of the sampler named, or the sampler's fit that
        :func:`compare` made itself (its diagnostics: ``reference.converged``,
        ``inference.convergence.draw_problems(reference)``); None without a reference, with
        ``reference="exact"``, or where the sampler's fit failed under
        ``compare(..., on_error="record")``.
    reference_s : float
        Seconds spent on the reference posterior outside the rows: the fit :func:`compare`
        made of it, where no run of the table is that fit, and its draws; 0 without a
        reference. With the rows' ``setup_s``, ``wall_time_s`` and ``evaluation_s`` it adds up
        to the time the call took, but for the checks before the first run and, where a
        backend is first used in the process, its import, which no column counts.

    Examples
    --------
    >>> import numpy as np
    >>> import inference, zoo
    >>> data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 100)
    >>> table = inference.compare("gmm", data, algorithms=["em"], backends=["pyro"], K=2)
    >>> type(table).__name__, len(table.rows), len(table.results)
    ('Comparison', 1, 1)
    >>> row = table.rows[0]
    >>> row["algorithm"], row["objective"], row["converged"]
    ('em', 'log-likelihood', True)
    >>> table.results[0].num_steps == row["steps"]
    True
    """

    rows: list[dict]
    results: list = field(repr=False)
    reference: object = field(default=None, repr=False)
    reference_s: float = 0.0

    #: The columns of every table, each a ``(name, format)`` pair.
    COLUMNS = (
        ("model", "{}"),
        ("algorithm", "{}"),
        ("guide", "{}"),
        ("backend", "{}"),
        ("seed", "{}"),
        ("objective", "{}"),
        ("objective_per_point", "{:.4f}"),
        ("heldout_log_pred_per_point", "{:.4f}"),
        ("steps", "{}"),
        ("converged", "{}"),
        ("setup_s", "{:.3f}"),
        ("wall_time_s", "{:.3f}"),
        ("first_step_s", "{:.3f}"),
        ("time_to_target_s", "{:.3f}"),
        ("evaluation_s", "{:.3f}"),
    )

    #: The columns added by a reference posterior, how far each run's posterior is from it
    #: (``inference.accuracy``).
    ACCURACY_COLUMNS = (
        ("mean_error_sd", "{:.2f}"),
        ("mean_error_sd_median", "{:.2f}"),
        ("sd_ratio_median", "{:.2f}"),
        ("sd_ratio_min", "{:.2f}"),
        ("sliced_wasserstein", "{:.3f}"),
    )

    @property
    def columns(self) -> tuple:
        """The table's columns, each a ``(name, format)`` pair.

        :attr:`COLUMNS`, and :attr:`ACCURACY_COLUMNS` when the rows were measured against a
        reference posterior.

        Examples
        --------
        >>> import numpy as np
        >>> import inference, zoo
        >>> data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 100)
        >>> table = inference.compare("gmm", data, algorithms=["em"], backends=["pyro"], K=2)
        >>> [name for name, _ in table.columns][:7]
        ['model', 'algorithm', 'guide', 'backend', 'seed', 'objective', 'objective_per_point']
        """
        accuracy = any("mean_error_sd" in r for r in self.rows)
        failed = any(r.get("error") for r in self.rows)  # compare(..., on_error="record")
        return (
            self.COLUMNS
            + (self.ACCURACY_COLUMNS if accuracy else ())
            + ((("error", "{}"),) if failed else ())
        )

    def __str__(self) -> str:
        return self.to_markdown()

    def _repr_markdown_(self) -> str:  # a notebook shows the table
        return self.to_markdown()

    def to_markdown(self) -> str:
        """The rows as a markdown table, one line per run, each value in its column's format
        (``-`` where a value does not apply).

        Returns
        -------
        str
            The table, with a header line and a separator line.

        Examples
        --------
        >>> import numpy as np
        >>> import inference, zoo
        >>> data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 100)
        >>> table = inference.compare("gmm", data, algorithms=["em"], backends=["pyro"], K=2)
        >>> print(table.to_markdown())  # doctest: +ELLIPSIS
        | model | algorithm | guide | backend | seed | objective | objective_per_point | ...
        |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
        | gmm | em | - | pyro | 0 | log-likelihood | -4.7132 | -4.7132 | 8 | True | ...
        """
        names = [c for c, _ in self.columns]
        lines = ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
        for row in self.rows:
            cells = [
                "-"
                if row.get(c) is None or (isinstance(row[c], float) and np.isnan(row[c]))
                else f.format(row[c]).replace("|", "\\|")  # a cell's own bar is not a column's
                for c, f in self.columns
            ]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def to_json(self) -> str:
        """The rows as a JSON list of objects (every key of every row, unformatted).

        Returns
        -------
        str
            Indented JSON; ``json.loads`` gives back the rows, a figure that is not finite (a
            sampler's objective, a time never reached) as ``None``: JSON has no NaN.

        Examples
        --------
        >>> import json
        >>> import numpy as np
        >>> import inference, zoo
        >>> data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 100)
        >>> table = inference.compare("gmm", data, algorithms=["em"], backends=["pyro"], K=2)
        >>> rows = json.loads(table.to_json())
        >>> rows[0]["model"], rows[0]["steps"]
        ('gmm', 8)
        """
        rows = [{k: _finite_or_none(v) for k, v in row.items()} for row in self.rows]
        return json.dumps(rows, indent=2, allow_nan=False)

    def plot(self, path, title=None) -> None:
        """Objective per point against wall time (log x-axis), one line per run, written to the
        file ``path`` (its extension picks the format; a write that fails or is stopped leaves
        the file that was there) or a binary file object.

        One panel per model; stochastic objectives are smoothed by a trailing mean over 25
        steps, and the first step's one-off cost (JAX compilation) is replaced by a typical
        step's. A dotted line marks 0.01 nats/point below the best run. Each line is the run's
        history, the objective it ascended: a relaxed guide's is labelled "relaxed ELBO", a run
        trained with ``elbo="iwae"`` "importance-weighted bound" (above the ELBO the table
        scores it by), and CAVI's "mean-field ELBO", below the summed-out ELBO the table scores
        it by. With more than one seed in the comparison each line names its seed.

        Parameters
        ----------
        path : str, os.PathLike or binary file object
            Where to write the figure (matplotlib's ``savefig``: ``"compare.png"``,
            ``"compare.pdf"``, ...).
        title : str, optional
            The title of every panel; default ``"<model>: objective vs wall time"``.

        Returns
        -------
        None

        Raises
        ------
        IsADirectoryError
            ``path`` is a directory.

        Examples
        --------
        >>> import io
        >>> import numpy as np
        >>> import inference, zoo
        >>> data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 100)
        >>> table = inference.compare("gmm", data, algorithms=["em"], backends=["pyro"], K=2)
        >>> figure = io.BytesIO()
        >>> table.plot(figure)  # a PNG: matplotlib's default format
        >>> figure.getvalue()[:4]
        b'\\x89PNG'
        """
        if isinstance(path, str | os.PathLike) and os.path.isdir(path):
            raise IsADirectoryError(
                f"Cannot plot to {os.fspath(path)!r}: it is a directory; name a file in it, "
                "such as compare.png."
            )
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        models = sorted({r["model"] for r in self.rows})
        fig, axes = plt.subplots(1, len(models), figsize=(6.5 * len(models), 4.5), squeeze=False)
        try:
            for ax, model in zip(axes[0], models, strict=True):
                self._plot_model(ax, model)
                ax.set_title(title or f"{model}: objective vs wall time")
            fig.tight_layout()
            if isinstance(path, str | os.PathLike):  # whole or not at all, the previous kept
                save_figure(fig, path, dpi=120)
            else:
                fig.savefig(path, dpi=120)
        finally:  # a figure whose write failed is not left open
            plt.close(fig)

    def _plot_model(self, ax, model):
        runs = [
            (r, res) for r, res in zip(self.rows, self.results, strict=True) if r["model"] == model
        ]
        runs = [(r, res) for r, res in runs if np.isfinite(r["objective_per_point"])]
        if not runs:
            _no_objective(ax)
            return
        best = max(r["objective_per_point"] for r, _ in runs)
        lowest = best
        # Runs that differ by their seed alone are told apart by it.
        seeded = len({r["seed"] for r in self.rows}) > 1
        for row, res in runs:
            y = _smoothed(res) / res.num_data
            lowest = min(lowest, np.nanmin(y, initial=best))
            seed = f", seed {row['seed']}" if seeded else ""
            label = (
                f"{row['algorithm']}{'-' + row['guide'] if row['guide'] else ''} "
                f"({row['backend']}{seed})"
            )
            # The curve is the run's own objective: named where it is not the table's (a relaxed
            # ELBO, an importance-weighted bound above the ELBO, CAVI's mean-field ELBO below
            # the summed-out one the table scores it by).
            alg = get_algorithm(row["algorithm"])
            own = objective_label(
                alg, res.spec, row["backend"], row["guide"], res.config, _trained_bound(res)
            )
            if own != row.get("objective"):
                label += f", {own}"
            ax.plot(_time_after_warmup(res), y, label=label, lw=1.5)
        ax.set_xscale("log")
        # Each panel spans its own curves (at most 2 nats/point below the best run, where a first
        # step may start far off), so that curves a few hundredths apart stay apart.
        low = max(lowest, best - 2.0)
        pad = max(0.05 * (best - low), 0.005)
        ax.set_ylim(low - pad, best + pad)
        ax.axhline(best - TARGET_GAP, color="grey", ls=":", lw=1)
        ax.set_xlabel("wall time (s, log scale; first step's compilation excluded)")
        objectives = sorted({row["objective"] for row, _ in runs})
        ax.set_ylabel(f"{' / '.join(objectives)} per point (nats)")
        ax.legend(fontsize=8)


def _no_objective(ax):
    """A panel with no finite objective to draw (its runs are samplers, which ascend none)
    says so, rather than standing empty or failing the whole figure."""
    ax.text(
        0.5,
        0.5,
        "No curve: no run of this model has an objective\n"
        "(a sampler, such as NUTS, ascends none; the table holds\n"
        "its held-out log predictive and accuracy).",
        ha="center",
        va="center",
        transform=ax.transAxes,
        fontsize=9,
    )
    ax.set_xticks([])
    ax.set_yticks([])


def _time_after_warmup(res):
    """Wall time with the first step's one-off cost (JAX compilation) replaced by a typical step."""
    t = np.asarray(res.history["time"], dtype=float)
    return t - res.timing["first_step"] + res.timing["per_step"]


def _smoothed(res, window=25):
    """Stochastic objectives are one-sample estimates: a trailing mean makes the curve readable."""
    y = np.asarray(res.history["objective"], dtype=float)
    if not get_algorithm(res.algorithm).traits.stochastic or len(y) < window:
        return y
    c = np.cumsum(np.concatenate([[0.0], y]))
    out = np.empty_like(y)
    idx = np.arange(1, len(y) + 1)
    lo = np.maximum(idx - window, 0)
    out[:] = (c[idx] - c[lo]) / (idx - lo)
    return out


def compare(
    model,
    data,
    algorithms=None,
    backends=("pyro", "numpyro"),
    *,
    guides=None,
    seeds=(0,),
    test_data=None,
    num_steps=None,
    num_samples: int = 500,
    reference=None,
    progress: bool = True,
    on_error: str = "raise",
    **options,
) -> Comparison:
    """Fit every supported (algorithm, guide, backend, seed) and tabulate the runs.

    An algorithm the model does not support runs on the model's maximum-likelihood twin
    (``spec.maximum_likelihood_twin``: ``"gmm"`` for ``"bayesian_gmm"``) when the twin supports
    it, and is otherwise left out with a warning. Rows hold the final objective per point (the
    ELBO; a log-likelihood for EM), the held-out log predictive per point, steps, wall time and
    the time to get within 0.01 nats/point of the best run's objective. Every run's options are
    checked before the first run (the seeds; each run's options, data and model config as
    :func:`fit` checks them; its minibatch size and its start, ``init``), and an option that no
    run takes (each run's algorithm or model would ignore it) is an error.

    Parameters
    ----------
    model : str or ModelSpec
        A registered model name (``zoo.list_models()``) or a spec.
    data : dict of str to array-like
        The training data, as for :func:`fit`.
    algorithms : sequence of str, optional
        Names of registered algorithms; default: every one that supports the model or its
        maximum-likelihood twin except the samplers (NUTS), which take minutes where the others
        take seconds: a warning names those left out and how to add them
        (``algorithms=["cavi", "em", "svi", "svi-natural", "nuts"]``); see
        :func:`default_algorithms`.
    backends : sequence of str
        ``"pyro"``, ``"numpyro"`` or both (the default).
    guides : sequence of str, optional
        The guides that algorithms which take a guide (SVI) run with; default: each of the
        model's guides (``spec.guides``). Other algorithms run once, without a guide.
    seeds : sequence of int
        One run per seed, each an int in [0, 2**63), as :func:`fit` takes it.
    test_data : dict of str to array-like, optional
        Held-out data for the ``heldout_log_pred_per_point`` column; default: ``data``.
    num_steps : int or dict of str to int, optional
        Steps per run, or per algorithm (``{"svi": 2000, "cavi": 200}``); default: each
        algorithm's own. A sampler's length is its warm-up and draws (``num_warmup``,
        ``num_draws``): the dict may not name it, and ``tol`` does not reach it.
    num_samples : int
        Posterior draws for the held-out log predictive (and for the accuracy columns).
    reference : {"exact"}, str or FitResult, optional
        A posterior every run is measured against, adding the columns of
        :func:`inference.accuracy.posterior_accuracy` (mean error in reference sds, ratios of
        sds, sliced Wasserstein distance; mixtures matched to the reference's labelling first;
        point estimates get the mean error only):

        - ``"exact"``: the model's closed-form posterior (``ModelSpec.exact_posterior``);
        - a sampler's name (NUTS's): the comparison's own run of it (its first backend and
          seed), or a fit of it with its default options on the first backend when
          ``algorithms`` has none;
        - a :class:`~inference.FitResult` of this model on these data with this comparison's
          model config (e.g. a longer NUTS run): a posterior, not a point estimate (EM, or a
          guide of point masses), whose draws have no spread to measure in. One read from a
          file (:func:`inference.load`) is checked by the fingerprint of its data that the
          file keeps; of a file without one, only its number of data points and its config
          are checked, with a warning saying so.

        The sampler's fit is kept as :attr:`Comparison.reference`; one whose chains fail their
        diagnostics (r-hat, bulk ESS, divergences) is warned about with a
        :class:`~inference.ConvergenceWarning`, as every run's accuracy is measured against it.
    progress : bool
        Show a progress bar per run on stderr, one line each, naming the run and its place
        (``svi enum numpyro seed 0 (3/8)``), as :func:`fit` shows its own: on a terminal or in
        a notebook only, never into a log or a pipe. False: none.
    on_error : {"raise", "record"}
        What a run that raises does. ``"raise"`` (the default): its error stops the comparison.
        ``"record"``: a warning names the run and its error, the run's row keeps the error in
        an ``error`` column (its figures NaN, its result None) and the other runs go on, so
        hours of runs are not lost to one that diverged. A reference that fails is recorded
        alike: a warning names it and its error, and the accuracy columns are NaN; the
        comparison's own run of the sampler named, if it failed, is not fitted again.
    **options
        Options of :func:`fit` passed to every run that takes them: the run options
        (``init``, ``tol``, ``dtype``, ``device``), the algorithms' own options and the
        models' own options (``K=3``).

    Returns
    -------
    Comparison
        One row per run (``rows``, dicts) and the runs' :class:`~inference.FitResult`
        objects (``results``), in the same order, with the reference's fit and the seconds
        spent on it (``reference``, ``reference_s``); ``print(comparison)`` shows a markdown
        table.

    Raises
    ------
    ValueError
        ``algorithms``, ``backends`` or ``seeds`` is not a non-empty list; an unknown algorithm
        or backend; ``num_steps`` names an algorithm not among ``algorithms``; a ``reference``
        that does not fit the model, these data or this model config, or is a point estimate;
        an option that no run of the comparison would use; a negative seed; a run's options,
        data or start that its :func:`fit` would refuse (checked before the first run); a run
        that the comparison could not score (K=1 where NumPyro's enumeration scores a guide);
        no algorithm in ``algorithms`` supports the model.
    TypeError
        An option that is neither a :func:`fit` option nor an option of the fitted models; a
        seed that is not an int; a run's option or start of a type its :func:`fit` would refuse.
    Exception
        What a run's :func:`fit` raises (e.g. :class:`~inference.NonFiniteObjectiveError`)
        stops the comparison, unless ``on_error="record"``.

    Examples
    --------
    The closed-form algorithms on a small data set: CAVI fits ``bayesian_gmm`` and EM, which
    that model does not support, fits its maximum-likelihood twin ``gmm``:

    >>> import numpy as np
    >>> import inference, zoo
    >>> data = zoo.get_model("gmm").make_data(np.random.default_rng(0), 100)
    >>> table = inference.compare(
    ...     "bayesian_gmm", data, algorithms=["cavi", "em"], backends=["pyro"],
    ...     num_steps=20, num_samples=50, K=2,
    ... )
    >>> [(row["model"], row["algorithm"], row["steps"]) for row in table.rows]
    [('bayesian_gmm', 'cavi', 20), ('gmm', 'em', 8)]
    >>> [round(row["objective_per_point"], 2) for row in table.rows]  # ELBO, log-likelihood
    [-4.7, -4.71]
    >>> table.results[1].params["weights"].round(2)
    array([0.17, 0.83])
    >>> print(table)  # doctest: +ELLIPSIS
    | model | algorithm | guide | backend | seed | objective | objective_per_point | ...
    |---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|
    | bayesian_gmm | cavi | - | pyro | 0 | ELBO | -4.6978 | ...
    | gmm | em | - | pyro | 0 | log-likelihood | -4.7132 | ...
    """
    spec = get_model(model)
    if algorithms is None:
        algorithms, left_out = default_algorithms(spec)
        if left_out:
            warnings.warn(left_out_message(spec, left_out), stacklevel=2)
    check_flag("progress", progress)
    if on_error not in ("raise", "record"):
        raise ValueError(f'on_error must be "raise" or "record"; got {on_error!r}.')
    _check_lists(algorithms=algorithms, backends=backends, seeds=seeds)
    if guides is not None:
        _check_lists(guides=guides)
    for backend in backends:
        get_backend(backend)  # an unknown name is an error, not a silently empty row
    algs = [get_algorithm(a) for a in algorithms]
    twins = [get_model(spec.maximum_likelihood_twin)] if spec.maximum_likelihood_twin else []
    algs = _those_that_fit(algs, spec, twins)
    _check_options([spec, *twins], options)
    if isinstance(num_steps, dict) and set(num_steps) - set(algorithms):
        raise ValueError(
            f"num_steps names {sorted(set(num_steps) - set(algorithms))}, which are not among "
            f"the algorithms {list(algorithms)}."
        )
    if reference is not None:
        _check_reference(reference, spec, data, options)
    if test_data is None:
        test_data = data
    else:  # named as the caller's, and checked against the model the data make, before any fit
        _, config = _data_and_config(spec, data, options)
        spec.check_against_fit(spec.validate_data(test_data, "test_data"), config, "test_data")
    _check_sampler_lengths(algs, num_steps)
    plan = _plan_runs(algs, [spec, *twins], backends, guides, options)
    if guides is not None:
        _check_guides(plan, guides)
    if plan:
        _check_every_option_is_used(spec, plan, options, reference)
        _check_scoring(plan)
    check_num_samples(num_samples)  # scored after each run: checked before the first
    _check_runs_can_start(plan, data, seeds, num_steps)
    rows, results = [], []
    runs = [(run, seed) for run in plan for seed in seeds]
    for number, ((alg, target, backend, guide, opts), seed) in enumerate(runs, 1):
        steps = _steps_for(alg, num_steps)
        label = f"{_run_name(alg, guide)} {backend} seed {seed} ({number}/{len(runs)})"
        failure = None
        with labelled_bar(label), warnings.catch_warnings(record=True) as said:
            try:
                res = fit(
                    target,
                    data,
                    alg.name,
                    backend,
                    seed=seed,
                    num_steps=steps,
                    progress=progress,
                    **opts,
                )
            except Exception as err:
                if on_error == "raise":
                    raise
                res, failure = None, err
        for warning in said:  # said again naming the run, from the caller's line
            warnings.warn(f"{label}: {warning.message}", warning.category, stacklevel=2)
        run = (alg, target, backend, guide)
        if failure is not None:
            warnings.warn(
                f"{label} failed and is recorded as such; the other runs go on: "
                f"{_error_line(failure)}",
                RuntimeWarning,
                stacklevel=2,
            )
            rows.append(_failed_row(run, seed, failure))
        else:
            rows.append(_row(run, seed, res, data, test_data, num_samples))
        results.append(res)
    _add_time_to_target(rows, results)
    comparison = Comparison(rows=rows, results=results)
    if reference is not None:
        started = time.perf_counter()
        comparison.reference, ref_draws = _reference_posterior(
            reference, spec, data, rows, results, backends, options, progress, on_error
        )
        comparison.reference_s = time.perf_counter() - started
        for row, res in zip(rows, results, strict=True):
            if res is None:  # a failed run
                continue
            if ref_draws is None:  # a reference that failed (on_error="record"): not measured
                row.update(dict.fromkeys(accuracy.MEASURES, float("nan")))
                continue
            started = time.perf_counter()
            row.update(_accuracy(res, ref_draws, spec, num_samples, row["seed"]))
            row["evaluation_s"] += time.perf_counter() - started
    return comparison


def _finite_or_none(value):
    """A float that is not finite as None (JSON's null), any other value as it is."""
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _check_lists(**lists) -> None:
    """Each of ``lists`` (algorithms, backends, seeds) is a non-empty list naming each run once."""
    for name, values in lists.items():
        if (
            isinstance(values, str)
            or not isinstance(values, Sequence | np.ndarray)
            or not len(values)
        ):
            raise ValueError(f"{name} must be a non-empty list; got {values!r}.")
        repeated = sorted({str(v) for v in values if list(values).count(v) > 1})
        if repeated:  # the same run twice: a duplicate row, and its time spent again
            raise ValueError(f"{name} lists {repeated} more than once; give each once.")


def _check_sampler_lengths(algs, num_steps) -> None:
    """A sampler runs its warm-up and draws: a ``num_steps`` dict that names one is an error
    before any run, not after the runs before it."""
    if not isinstance(num_steps, dict):
        return
    named = [a.name for a in algs if a.traits.estimate == "draws" and a.name in num_steps]
    if named:
        raise ValueError(
            f"num_steps names the sampler(s) {named}, whose length is their warm-up and draws: "
            "give num_warmup= and num_draws= instead, and leave them out of num_steps."
        )


def _check_guides(plan, guides) -> None:
    """Before any run: every name of ``guides`` is a guide of the model that the runs taking a
    guide fit, and some run takes one (``guides`` would otherwise be dropped unsaid)."""
    targets = {target.name: target for alg, target, backend, guide, opts in plan if guide}
    if not targets:
        runs = sorted({alg.name for alg, *_ in plan})
        raise ValueError(
            f"guides={list(guides)} would have no effect: no algorithm of this comparison "
            f"({runs}) takes a guide. Add one that does (svi), or leave guides out."
        )
    for target in targets.values():
        unknown = [g for g in guides if g not in target.guides]
        if unknown:
            raise ValueError(
                f"Unknown guide(s) {unknown} for {target.name!r}; valid guides are "
                f"{list(target.guides)}." + did_you_mean(unknown[0], target.guides)
            )


def _steps_for(alg, num_steps):
    """The ``num_steps`` a run of ``alg`` is given: the number, or its algorithm's entry of the
    dict; None for a sampler, whose length is its warm-up and draws."""
    if alg.traits.estimate == "draws":
        return None
    return num_steps.get(alg.name) if isinstance(num_steps, dict) else num_steps


def _check_runs_can_start(plan, data, seeds, num_steps) -> None:
    """Before any fit, what a run's :func:`fit` would refuse at its start, so that no run is
    lost to a run after it that could never start: the seeds, and each run's problem as
    :func:`fit` makes it (:func:`~inference.make_problem`: its options, steps, dtype, device,
    data and model config), its minibatch size against the data, and its start
    (:func:`_check_start`). What they warn of is left to the runs, which say it naming the
    run."""
    for seed in seeds:
        try:
            check_seed(seed)
        except (TypeError, ValueError) as err:
            raise type(err)(f"seeds={list(seeds)!r}: {err}") from err
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for alg, target, backend, guide, opts in plan:
            check_tol(opts.get("tol"))  # make_problem takes no tol
            given = {k: v for k, v in opts.items() if k != "tol"}
            steps = _steps_for(alg, num_steps)
            problem, alg_options = make_problem(
                target, data, alg.name, backend, seed=seeds[0], num_steps=steps, **given
            )
            batch_size = getattr(alg_options, "batch_size", None)
            if batch_size is not None and problem.source is None:
                check_batch_size(batch_size, problem.num_data)
            _check_start(alg, guide, problem)


def _check_start(alg, guide, problem) -> None:
    """A run's ``init`` as its built-in algorithm reads it, checked before any fit (one
    algorithm may take a start that another refuses): a mixture's initial responsibilities by
    the closed-form updates' own check (``initial_point``), which every built-in algorithm
    starts a mixture from, and which refuses a dict of parameters; that dict is SVI's own start,
    whose names its set-up checks against its guide's. A model that starts from its own point
    takes no other start but SVI's dict. A plugin's algorithm reads ``init`` its own way, at its
    start."""
    init, updates, name = problem.init, problem.spec.updates, problem.spec.name
    if init is None or algorithm_source(alg.name) != "built-in":
        return
    if guide is not None and isinstance(init, Mapping):
        return
    if updates is not None and updates.start == "responsibilities":
        if not (isinstance(init, str) and init in INIT_METHODS):  # a method: run at the start
            updates.initial_point(name, problem.data, problem.config, init, problem.seed)
        return
    given = f"init={init!r}" if isinstance(init, str) else f"init (a {type(init).__name__})"
    svi_start = " (SVI's runs take a dict of parameters, such as a fit's raw_params)"
    raise ValueError(
        f"{given} cannot start the {_run_name(alg, guide)!r} runs of model {name!r}, which "
        f"start from the model's own point{svi_start if guide is not None else ''}; leave "
        "init=None."
    )


def _plan_runs(algs, models, backends, guides, options) -> list[tuple]:
    """``(algorithm, model, backend, guide, options)`` of each run, before any runs: each
    algorithm fits the first of ``models`` (the model, then its maximum-likelihood twin) that
    it supports, on every backend, with each of its guides."""
    plan = []
    for alg in algs:
        target = next((m for m in models if alg.supports(m)), None)
        if target is None:
            continue
        for backend in backends:
            for guide in _guides(alg, target, guides):
                opts = _options_for(target, alg, guide, backend, options)
                plan.append((alg, target, backend, guide, opts))
    return plan


def comparable_objective(alg, res, data: dict) -> float:
    """The final objective of a run that a comparison puts beside the others (nats, summed): a
    sampler ascends nothing (NaN); a fit through a guide is scored afresh with 100 draws, with
    the model's discrete latents summed out where it has a guide that sums them (so relaxed and
    enumerated runs compare), else of its own guide; a variational fit by closed-form updates
    whose module gives ``summed_out_elbo``, by the same summed-out ELBO (100 draws), not by the
    mean-field ELBO it ascends, a lower bound; any other fit, its last objective. An algorithm
    of the older contract with its own ``comparable_objective`` is asked."""
    how = _scoring(alg, res.spec, res.backend, res.guide)
    if how == "own":
        return alg.comparable_objective(res, data)
    if how == "draws":
        return float("nan")
    if how == "last":
        return res.objective
    if how == "summed-out":
        return closed_form.summed_out_elbo(res, data, num_samples=100, seed=res.seed)
    if how == "enumerated":
        return svi.enumerated_elbo(res, data, num_particles=100, seed=res.seed)
    return svi.fresh_elbo(res, data, num_particles=100)


def _scoring(alg, spec, backend: str, guide: str | None) -> str:
    """How ``comparable_objective`` scores a run of ``alg`` on ``spec`` with ``guide``: by the
    algorithm's own method (``"own"``), not at all (``"draws"``), its last objective
    (``"last"``), the ELBO of its closed-form factors with the discrete latents summed out
    (``"summed-out"``), an ELBO with them summed out by the model's enumerated guide
    (``"enumerated"``), or a fresh ELBO of its own guide (``"fresh"``). Decided from the plan
    alone, so a comparison can check before any fit that it can score every run."""
    if callable(getattr(alg, "comparable_objective", None)):
        return "own"
    if alg.traits.estimate == "draws":
        return "draws"
    if guide is None:
        # An algorithm of the older contract may name its own posterior family: not the
        # updates' factors, which the summed-out ELBO reads.
        own_family = callable(getattr(alg, "posterior_family", None))
        updates = spec.updates
        closed = updates is not None and alg.traits.estimate == "posterior" and not own_family
        return "summed-out" if closed and updates.has_summed_out_elbo else "last"
    return "enumerated" if svi.enumerated_guide(spec, backend) is not None else "fresh"


def _row(run, seed, res, data, test_data, num_samples) -> dict:
    """The row of the run ``(algorithm, model, backend, guide)`` with ``seed``, whose result is
    ``res``: its objective and held-out log predictive per point (their evaluation timed), its
    length and timings."""
    alg, target = run[:2]
    evaluation = time.perf_counter()
    heldout = res.log_marginal_likelihood(test_data, num_samples=num_samples, seed=seed)
    objective = comparable_objective(alg, res, data)
    evaluation = time.perf_counter() - evaluation
    return {
        **_run_columns(run, seed),
        "objective": _objective_name(alg, target, res.config),
        "objective_per_point": objective / res.num_data,
        "heldout_log_pred_per_point": float(np.mean(heldout)),
        "steps": _length(alg, res),
        "setup_s": res.timing.get("setup", float("nan")),
        "wall_time_s": res.timing["total"],
        "first_step_s": res.timing["first_step"],
        "evaluation_s": evaluation,
        "converged": res.converged,
    }


def _run_columns(run, seed) -> dict:
    """The columns that name the run ``(algorithm, model, backend, guide)`` with ``seed``."""
    alg, target, backend, guide = run
    return {
        "model": target.name,
        "algorithm": alg.name,
        "guide": guide,
        "backend": backend,
        "seed": int(seed),
    }


def _error_line(err: BaseException) -> str:
    """An error in one line: its type and the first line of its message."""
    return f"{type(err).__name__}: {first_line(err)}"


def _failed_row(run, seed, err) -> dict:
    """The row of a run that raised (``on_error="record"``): what ran, and its error."""
    nan = float("nan")
    return {
        **_run_columns(run, seed),
        "objective": None,
        "objective_per_point": nan,
        "heldout_log_pred_per_point": nan,
        "steps": None,
        "setup_s": nan,
        "wall_time_s": nan,
        "first_step_s": nan,
        "evaluation_s": nan,
        "converged": False,
        "error": _error_line(err),
    }


def _add_time_to_target(rows, results) -> None:
    """Each row's ``time_to_target_s``: the time its run took to come within ``TARGET_GAP``
    nats per point of the best objective of its model's runs (NaN where it never did). A run
    reached it if its final objective, scored as the table scores it, did; the time is when its
    history (smoothed) first did, or its end if the history never did (the history holds each
    step's estimate at the iterate, the table the returned parameters). A relaxed guide's
    history is another objective (the relaxed ELBO), and so is the importance-weighted bound
    of a run trained with ``elbo="iwae"``, above the ELBO: neither tells a time (NaN). A
    closed-form run scored by its summed-out ELBO has the mean-field ELBO as its history, a
    lower bound of it at each iterate, so its time is one by which the run was there, at the
    latest."""
    # ELBOs are compared with ELBOs, EM's log-likelihoods with log-likelihoods; a sampler's
    # rows have no objective to compare.
    best = {}
    for r in rows:
        if np.isfinite(r["objective_per_point"]):
            best[r["model"]] = max(best.get(r["model"], -np.inf), r["objective_per_point"])
    for row, res in zip(rows, results, strict=True):
        row["time_to_target_s"] = float("nan")
        target = best.get(row["model"], np.inf) - TARGET_GAP
        if res is None or not row["objective_per_point"] >= target:  # failed, or not there
            continue
        relaxed = row["guide"] and res.spec.guide_kind(row["guide"], row["backend"]).relaxed
        if relaxed or _trained_bound(res) == IMPORTANCE_WEIGHTED:
            continue
        times = res.history["time"]
        hit = np.nonzero(_smoothed(res) / res.num_data >= target)[0]
        row["time_to_target_s"] = float(times[hit[0]] if len(hit) else times[-1])


def _those_that_fit(algs, spec, twins) -> list:
    """The algorithms named that fit the model or its maximum-likelihood twin; each other one
    is left out with a warning saying why (a list meant for several models may name one that a
    model has not), and a list of none that fit is an error."""
    fitting = []
    for alg in algs:
        if any(alg.supports(m) for m in [spec, *twins]):
            fitting.append(alg)
            continue
        fits = (
            f"fits neither model {spec.name!r} nor its maximum-likelihood twin {twins[0].name!r}"
            if twins
            else f"does not fit model {spec.name!r}"
        )
        warnings.warn(
            f"Algorithm {alg.name!r} {fits} "
            f"({alg.unsupported(spec)}): its runs are left out. The algorithms that fit it are "
            f"{_fitting(spec)}.",
            UserWarning,
            stacklevel=3,
        )
    if not fitting:
        raise ValueError(
            f"No algorithm in {[a.name for a in algs]} fits model {spec.name!r}; the algorithms "
            f"that fit it are {_fitting(spec)}."
        )
    return fitting


def _fitting(spec) -> list[str]:
    """The algorithms that fit ``spec`` or its maximum-likelihood twin."""
    models = [spec] + (
        [get_model(spec.maximum_likelihood_twin)] if spec.maximum_likelihood_twin else []
    )
    return [a for a in list_algorithms() if any(get_algorithm(a).supports(m) for m in models)]


def default_algorithms(spec) -> tuple[list[str], list[str]]:
    """``(run, left_out)``: what a comparison runs when no algorithms are named (every
    registered algorithm that fits the model or its maximum-likelihood twin, but the samplers),
    and the samplers that would fit it.

    Samplers are left out because they take minutes where the others take seconds (NUTS on a
    mixture: each gradient sums over every assignment, thousands of times per chain), and a
    first comparison should finish while one waits.

    Parameters
    ----------
    spec : ModelSpec
        The model compared.

    Returns
    -------
    tuple of (list of str, list of str)
        The algorithms run by default, and the samplers left out that fit ``spec`` or its
        maximum-likelihood twin (name them in ``algorithms`` to run them).

    Examples
    --------
    >>> import zoo
    >>> from inference.compare import default_algorithms
    >>> run, left_out = default_algorithms(zoo.get_model("bayesian_gmm"))
    >>> "nuts" in run, left_out
    (False, ['nuts'])
    """
    samplers, fitting = set(_samplers()), _fitting(spec)
    return [a for a in fitting if a not in samplers], [a for a in fitting if a in samplers]


def left_out_message(spec, left_out, shell: bool = False) -> str:
    """One line: which samplers a default comparison leaves out, and how to run them too, in
    Python's words or (``shell``) in the command line's."""
    every = _fitting(spec)
    add = (
        f"--algorithms {','.join(every)}"
        if shell
        else f"algorithms=[{', '.join(repr(a) for a in every)}]"
    )
    return (
        f"Left out {', '.join(left_out)}: a sampler takes minutes where the other algorithms "
        f"take seconds. Run it too with {add}."
    )


def _run_name(alg, guide) -> str:
    return alg.name + (f" {guide}" if guide else "")


def _length(alg, res):
    """How long a run was: its steps, or a sampler's chains x iterations per chain (warm-up
    included), such as ``"4 x 1000"``: the loop's steps of a sampler are chunks of
    iterations, a figure no one asked for."""
    if alg.traits.estimate != "draws" or res.chains is None:
        return res.num_steps
    chains, warmup, draws = res.chains
    return f"{chains} x {warmup + draws}"


def _samplers() -> list[str]:
    return [a for a in list_algorithms() if get_algorithm(a).traits.estimate == "draws"]


def _check_reference(reference, spec, data, options) -> None:
    """A reference is the model's exact posterior, a sampler, or a posterior of this model
    given these data and this model config, checked before any fit: a reference that cannot be
    measured against would otherwise fail after every run."""
    if isinstance(reference, str):
        if reference == "exact":
            if spec.exact_posterior is None:
                raise ValueError(
                    f"reference='exact' needs the model's posterior in closed form, and model "
                    f"{spec.name!r} declares none (ModelSpec.exact_posterior); use a sampler: "
                    f"{_samplers()}."
                )
            return
        if reference not in _samplers():
            raise ValueError(
                f"reference must be 'exact', a sampler {_samplers()} or a FitResult of this "
                f"model; got {reference!r}."
            )
        why = get_algorithm(reference).unsupported(spec)
        if why:
            raise ValueError(f"reference={reference!r}: {why}.")
        return
    if not hasattr(reference, "sample_posterior"):
        raise ValueError(
            f"reference must be 'exact', a sampler {_samplers()} or a FitResult of this model; "
            f"got {type(reference).__name__}."
        )
    if reference.model != spec.name:
        raise ValueError(
            f"The reference is a fit of model {reference.model!r}; this comparison is of "
            f"{spec.name!r}."
        )
    given, config = _data_and_config(spec, data, options)
    if not _same_data(reference, spec, given):
        raise ValueError(
            "The reference was fitted to other data than this comparison's; fit it to the "
            "same data (or name a sampler, which samples them here)."
        )
    _check_reference_config(reference, config)
    _check_reference_spread(reference)
    if reference.data is None and reference.data_fingerprint is None:
        warnings.warn(
            f"The reference ({reference.algorithm} on {reference.backend}) keeps neither its "
            "data nor their fingerprint (a fit read from a file saved before fits kept one): "
            f"only its number of data points ({reference.num_data}) and its model config were "
            "checked against this comparison's. If it was fitted to other data, every accuracy "
            "column is wrong; to have its data checked, set reference.data to the data it was "
            "fitted to.",
            UserWarning,
            stacklevel=3,
        )


def _same_data(reference, spec, given: dict) -> bool:
    """Whether the reference may be of ``given``: the same number of rows, and the same data
    where it keeps them, else the same fingerprint where it keeps one (a fit read from a file)."""
    if reference.num_data != len(next(iter(given.values()))):
        return False
    if reference.data is not None:
        return all(np.array_equal(np.asarray(reference.data[k]), given[k]) for k in given)
    if reference.data_fingerprint is not None:
        return reference.data_fingerprint == data_fingerprint(spec, given)
    return True


def _check_reference_config(reference, config) -> None:
    """The reference's model config is ``config``, the one the comparison's data and model
    options make, field by field: a reference of other options (another K, other priors) is a
    posterior of another model, whose draws the runs' cannot be measured against. Fields
    computed from the data alone (``zoo.spec.FROM_DATA``) are left to the data's check, as a
    checkpoint leaves them (a fit saved before such a field was added lacks it)."""
    there, here = config_summary(reference.config), config_summary(config)
    if there != here:  # arrays by a digest of their values
        what = differences(there, here, where="in the reference")
        raise ValueError(
            f"The reference's model config differs from this comparison's ({what}): it was "
            "fitted with other model options, or to other data where the model derives its "
            "config from them (default priors). Fit the reference with this comparison's data "
            "and model options, or compare with the reference's options."
        )


def _check_reference_spread(reference) -> None:
    """A reference has spread to measure the runs in: a point estimate's draws (EM's, or a
    guide of point masses) are copies of one point, with no sd. An algorithm not installed
    here (a plugin's fit read from a file) cannot say; its draws are measured as they are."""
    try:
        alg = get_algorithm(reference.algorithm)
    except ValueError:
        return
    guide = reference.guide
    point_masses = guide is not None and (
        reference.spec.guide_kind(guide, reference.backend).deterministic
    )
    if alg.traits.estimate == "point" or point_masses:
        how = f"a fit of {reference.algorithm!r}"
        how += f" with guide {guide!r}, of point masses" if point_masses else ""
        raise ValueError(
            f"The reference is a point estimate ({how}): its draws are all one point, with no "
            "spread to measure the runs' posteriors in. A reference must be "
            f"a posterior: 'exact' where the model has one in closed form, a sampler "
            f"{_samplers()} (by name, or its FitResult), or a variational fit of this model."
        )


def _data_and_config(spec, data, options) -> tuple[dict, object]:
    """The comparison's data as validated, and the config of ``spec`` that they and the model's
    options among ``options`` make."""
    given = spec.validate_data(data)
    return given, spec.prepare(given, **_model_options_of(spec, options))


def _model_options_of(spec, options) -> dict:
    """The options among ``options`` that are the model's (its ``prepare``'s)."""
    return {k: v for k, v in options.items() if k in model_options(spec)}


def _reference_posterior(
    reference, spec, data, rows, results, backends, options, progress, on_error
):
    """The reference's fit (None for the exact posterior) and its draws.

    Under ``on_error="record"`` a reference that fails, as the comparison's own runs of it did
    (it is not fitted again, which would take as long and likely fail alike) or as the fit or
    the draws made here do, is warned about and its draws are None, so that the runs that
    finished are kept, unmeasured. Under ``"raise"`` its error stops the comparison."""
    failed_run = _failed_reference_run(reference, spec, rows)
    if failed_run is not None:  # only under on_error="record" is a failed run kept
        _warn_reference_failed(
            f"this comparison's own {reference} run on {failed_run['backend']}, seed "
            f"{failed_run['seed']}; not fitted again",
            failed_run["error"],
        )
        return None, None
    fitted = None
    try:
        fitted = _reference_fit(reference, spec, data, rows, results, backends, options, progress)
        draws = _reference_draws(fitted, spec, data, options)
    except Exception as err:
        if on_error == "raise":
            raise
        _warn_reference_failed(_reference_name(reference, fitted, backends), err)
        return fitted, None
    _warn_if_unconverged(fitted)
    return fitted, draws


def _failed_reference_run(reference, spec, rows) -> dict | None:
    """The row of the comparison's first run of the sampler named as ``reference`` where every
    such run failed (``on_error="record"``); None where one finished or none ran."""
    if not isinstance(reference, str):
        return None
    own = [row for row in rows if row["algorithm"] == reference and row["model"] == spec.name]
    if own and all(row.get("error") for row in own):
        return own[0]
    return None


def _reference_name(reference, fitted, backends) -> str:
    """The reference in words, for a message: the model's exact posterior, a sampler's fit (on
    the backend it ran on, or was to run on), or the fit given."""
    if reference == "exact":
        return "the exact posterior"
    if fitted is not None:
        return f"{fitted.algorithm} on {fitted.backend}"
    if isinstance(reference, str):
        return f"{reference} on {backends[0]}"
    return f"{reference.algorithm} on {reference.backend}"


def _warn_reference_failed(name: str, error) -> None:
    """Warn, from ``compare``'s caller's line, that the reference posterior ``name`` failed
    with ``error`` (an exception, or a failed run's error line)."""
    said = _error_line(error) if isinstance(error, BaseException) else error
    warnings.warn(
        f"The reference posterior ({name}) failed and is recorded as such; the accuracy "
        f"columns are NaN ('-' in the table) and the runs that finished are kept: {said}",
        RuntimeWarning,
        stacklevel=4,  # compare's caller, through _reference_posterior
    )


def _reference_fit(reference, spec, data, rows, results, backends, options, progress):
    """The fit that gives the reference posterior: the one given, or for a sampler's name the
    comparison's own run of it, else a new one; None for the exact posterior."""
    if reference == "exact" or not isinstance(reference, str):
        return None if reference == "exact" else reference
    runs = [
        res for row, res in zip(rows, results, strict=True)
        if res is not None and row["algorithm"] == reference and row["model"] == spec.name
    ]  # fmt: skip
    if runs:
        return runs[0]
    model_opts = _model_options_of(spec, options)
    run_opts = {k: v for k, v in options.items() if k in ("init", "dtype", "device")}
    with labelled_bar(f"{reference} {backends[0]} (the reference)"):
        return fit(spec, data, reference, backends[0], progress=progress, **model_opts, **run_opts)


def _warn_if_unconverged(reference) -> None:
    """A sampler's reference whose chains failed their diagnostics is warned about: every
    run's accuracy is measured against it, so its own errors show up as theirs."""
    problems = _reference_problems(reference)
    if problems:
        warnings.warn(
            f"The accuracy columns are measured against a reference posterior "
            f"({reference.algorithm} on {reference.backend}) whose chains have not converged: "
            f"{'; '.join(problems)}. Its errors count as every run's: sample it longer "
            "(num_warmup, num_draws) or with more chains, and compare again with it.",
            convergence.ConvergenceWarning,
            stacklevel=4,  # compare's caller, through _reference_posterior
        )


def _reference_problems(reference) -> list[str]:
    """What fails in the diagnostics of a sampler's reference, each in a phrase; empty for
    chains that passed them, and for the exact posterior or a fit of another algorithm (its
    ``converged`` says nothing where it was run with ``tol=0``, a fixed number of steps)."""
    if reference is None or reference.converged:
        return []
    alg = get_algorithm(reference.algorithm)
    if alg.traits.estimate != "draws":
        return []
    diagnose = getattr(alg, "diagnose", convergence.draw_problems)  # older: the algorithm's
    return diagnose(reference) or ["its chains failed their diagnostics"]


def _reference_draws(reference, spec, data, options):
    """Draws of the reference posterior, as ``sample_posterior`` names them: of the model's
    exact posterior where ``reference`` is None, else of the fit."""
    if reference is not None:
        return reference.sample_posterior(num_samples=REFERENCE_DRAWS)
    given, config = _data_and_config(spec, data, options)
    rng = np.random.default_rng(0)
    raw = spec.exact_posterior(given, config)
    return spec.sample_posterior(raw, config, "exact", rng, REFERENCE_DRAWS)


def _accuracy(res, ref_draws, spec, num_samples, seed) -> dict:
    """The accuracy columns of one run (point estimates: the mean error only)."""
    estimate = get_algorithm(res.algorithm).traits.estimate
    point = estimate == "point"
    # A sampler's draws are measured as a reference's are (up to REFERENCE_DRAWS of them), so
    # the sampler that gives the reference is at distance zero from it.
    num_samples = REFERENCE_DRAWS if estimate == "draws" else max(num_samples, 2)
    draws = res.sample_posterior(num_samples=2 if point else num_samples, seed=seed)
    return accuracy.posterior_accuracy(
        draws, ref_draws, components=spec.exchangeable_components, point=point, seed=seed
    )


def _guides(alg, spec, guides):
    """The guides a comparison runs ``alg`` with: each of the model's (or of ``guides``) for an
    algorithm that takes a guide, else one run without."""
    if "guide" not in alg.option_names():
        return (None,)
    return tuple(guides or spec.guides)


def objective_label(
    alg, spec, backend: str, guide: str | None, config=None, elbo: str | None = None
) -> str:
    """What a fit's own objective is (its ``history["objective"]``), as ``zoo fit`` prints it:
    "mean-field ELBO" for closed-form VI (a table scores its factors with ``z`` summed out,
    higher), "relaxed ELBO" for a relaxed guide (a table scores it with ``z`` enumerated),
    "importance-weighted bound" for an SVI run trained with it (``elbo``, as the run's options
    record it: ``"iwae"``; a table scores it by the ELBO, below it), else what the table's
    ``objective`` column says (:func:`_objective_name`)."""
    if _scoring(alg, spec, backend, guide) == "summed-out":
        return "mean-field ELBO"
    if guide is not None and spec.guide_kind(guide, backend).relaxed:
        return "relaxed ELBO"
    if elbo == IMPORTANCE_WEIGHTED:
        return "importance-weighted bound"
    return _objective_name(alg, spec, config)


def _trained_bound(res) -> str | None:
    """The ELBO an SVI run ascended, as its options record it (``"trace"``, ``"iwae"``, ...);
    None for a run that records none."""
    options = getattr(res, "options", None) or {}
    return options.get("elbo")


def _objective_name(alg, spec, config=None) -> str:
    """What a run's objective is: the model's closed-form updates say for them (an EM fit of
    a MAP model ascends a log joint), else the model for its config (``spec.objective_name``:
    a weighted KL, a supervised loss) where the algorithm ascends an ELBO, else the algorithm."""
    updates = spec.updates
    if updates is not None and alg.traits.estimate == updates.estimate:
        return updates.objective.replace("_", "-").replace("elbo", "ELBO")
    if spec.objective_name is not None and config is not None and alg.traits.objective == "ELBO":
        return spec.objective_name(config)
    return alg.traits.objective


#: fit() options compare passes to every run.
RUN_OPTIONS = ("init", "tol", "dtype", "device")


def _check_options(specs, options) -> None:
    """Every option is a fit() option of some algorithm, or a model option of one of the
    fitted models."""
    fit_options = set(RUN_OPTIONS) | (every_option_name() - {"guide"})
    allowed = set(fit_options)
    for spec in specs:
        allowed |= set(model_options(spec))
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise TypeError(
            f"compare() got unknown option(s) {unknown}; it takes the fit() options "
            f"{sorted(fit_options)} and the models' own options {sorted(allowed - fit_options)}."
        )


def _check_scoring(plan) -> None:
    """Before any fit: every run that ``comparable_objective`` will score by summing the model's
    discrete latents out can be scored so (NumPyro's enumeration cannot sum over K=1), rather
    than an error after the fits."""
    for alg, target, backend, guide, opts in plan:
        if _scoring(alg, target, backend, guide) != "enumerated":
            continue
        enumerated = svi.enumerated_guide(target, backend)
        why = f" (the comparison scores the {guide!r} runs by it)" if guide != enumerated else ""
        svi.check_enumerable(backend, opts.get("K"), enumerated, why)


def _check_every_option_is_used(spec, plan, options, reference) -> None:
    """An option that no run of the comparison takes (each run's algorithm ignores it, or no
    run's algorithm or model has it) is an error, as ``fit`` refuses an option it would
    ignore: a comparison would otherwise run without it and say nothing."""
    used = {k for *_, opts in plan for k in opts}
    if reference is not None:  # a reference posterior is computed with the model's options
        used |= set(model_options(spec))
    for name in sorted(set(options) - used):
        reasons = []
        for alg, target, backend, guide, _ in plan:
            if name not in alg.option_names():
                continue
            own = {k: v for k, v in options.items() if k in alg.option_names()}
            if guide is not None:
                own["guide"] = guide
            reason = ignores(alg, target, backend, alg.options(own), name)
            if reason and reason not in reasons:
                reasons.append(reason)
        runs = sorted({(alg.name, target.name) for alg, target, *_ in plan})
        why = (
            " ".join(reasons)
            if reasons
            else "no run of this comparison takes it (runs: "
            + ", ".join(f"{a!r} on {m!r}" for a, m in runs)
            + ")."
        )
        raise ValueError(
            f"{name}={options[name]!r} would have no effect on any run of this comparison: {why}"
        )


def _options_for(spec, alg, guide, backend, options):
    """The options of one run: the model options its ``prepare`` takes (EM's twin has no
    priors), the run options, and the options of its algorithm that the run would not ignore
    (a temperature for a relaxed guide only; an objective for the guides that do not
    enumerate)."""
    allowed = set(model_options(spec)) | set(RUN_OPTIONS)
    own = {k: v for k, v in options.items() if k in alg.option_names()}
    if guide is not None:
        own["guide"] = guide
    opts = alg.options(own)
    if alg.traits.estimate == "draws":
        allowed.discard("tol")  # a sampler runs its warm-up and draws: no stopping rule
    out = {k: v for k, v in options.items() if k in allowed}
    out.update({k: v for k, v in own.items() if not ignores(alg, spec, backend, opts, k)})
    return out
