"""``compare``: the product of algorithms x guides x backends x seeds on one model and data set."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from inference.api import ALGORITHM_OPTIONS, guide_ignores
from zoo import get_model

TARGET_GAP = 0.01  # nats per point: "reached the optimum" means within this of the best run


@dataclass
class Comparison:
    """One row per run (``rows``) and the fits themselves (``results``)."""

    rows: list[dict]
    results: list = field(repr=False)

    COLUMNS = (
        ("model", "{}"),
        ("algorithm", "{}"),
        ("guide", "{}"),
        ("backend", "{}"),
        ("seed", "{}"),
        ("objective_per_point", "{:.4f}"),
        ("heldout_log_pred_per_point", "{:.4f}"),
        ("steps", "{}"),
        ("wall_time_s", "{:.3f}"),
        ("first_step_s", "{:.3f}"),
        ("time_to_target_s", "{:.3f}"),
    )

    def __str__(self) -> str:
        return self.to_markdown()

    def to_markdown(self) -> str:
        names = [c for c, _ in self.COLUMNS]
        lines = ["| " + " | ".join(names) + " |", "|" + "---|" * len(names)]
        for row in self.rows:
            cells = [
                "-"
                if row[c] is None or (isinstance(row[c], float) and np.isnan(row[c]))
                else f.format(row[c])
                for c, f in self.COLUMNS
            ]
            lines.append("| " + " | ".join(cells) + " |")
        return "\n".join(lines)

    def to_json(self) -> str:
        return json.dumps(self.rows, indent=2)

    def plot(self, path, title=None) -> None:
        """Objective per point against wall time (log x-axis), one line per run."""
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        models = sorted({r["model"] for r in self.rows})
        fig, axes = plt.subplots(1, len(models), figsize=(6.5 * len(models), 4.5), squeeze=False)
        for ax, model in zip(axes[0], models, strict=True):
            self._plot_model(ax, model)
            ax.set_title(title or f"{model}: objective vs wall time")
        fig.tight_layout()
        fig.savefig(path, dpi=120)
        plt.close(fig)

    def _plot_model(self, ax, model):
        runs = [
            (r, res) for r, res in zip(self.rows, self.results, strict=True) if r["model"] == model
        ]
        best = max(r["objective_per_point"] for r, _ in runs)
        for row, res in runs:
            y = _smoothed(res) / res.num_data
            label = (
                f"{row['algorithm']}{'-' + row['guide'] if row['guide'] else ''} ({row['backend']})"
            )
            if row["guide"] == "gumbel":
                label += ", relaxed ELBO"
            ax.plot(_time_after_warmup(res), y, label=label, lw=1.5)
        ax.set_xscale("log")
        ax.set_ylim(best - 2.0, best + 0.2)
        ax.axhline(best - TARGET_GAP, color="grey", ls=":", lw=1)
        ax.set_xlabel("wall time (s, log scale; first step's compilation excluded)")
        ax.set_ylabel(
            "ELBO per point (nats)" if model != "gmm" else "log-likelihood per point (nats)"
        )
        ax.legend(fontsize=8)


def _time_after_warmup(res):
    """Wall time with the first step's one-off cost (JAX compilation) replaced by a typical step."""
    t = np.asarray(res.history["time"], dtype=float)
    return t - res.timing["first_step"] + res.timing["per_step"]


def _smoothed(res, window=25):
    """SVI objectives are one-sample estimates: a trailing mean makes the curve readable."""
    y = np.asarray(res.history["objective"], dtype=float)
    if res.algorithm != "svi" or len(y) < window:
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
    algorithms=("cavi", "em", "svi"),
    backends=("pyro", "numpyro"),
    *,
    guides=None,
    seeds=(0,),
    test_data=None,
    num_steps=None,
    num_samples: int = 500,
    progress: bool = False,
    **options,
) -> Comparison:
    """Fit every supported (algorithm, guide, backend, seed) and tabulate the runs.

    EM runs on the maximum-likelihood twin of a Bayesian model (``"gmm"`` for ``"bayesian_gmm"``)
    when the model itself has no EM. ``num_steps`` may be a dict per algorithm. Rows hold the final
    objective per point (ELBO; log-likelihood for EM), the held-out log predictive per point,
    steps, wall time and the time to get within 0.01 nats/point of the best run's objective.
    """
    from inference.api import ALGORITHMS, fit, get_algorithm, get_backend

    spec = get_model(model)
    for name, values in (("algorithms", algorithms), ("backends", backends), ("seeds", seeds)):
        if (
            isinstance(values, str)
            or not isinstance(values, Sequence | np.ndarray)
            or not len(values)
        ):
            raise ValueError(f"{name} must be a non-empty list; got {values!r}.")
    for backend in backends:
        get_backend(backend)  # an unknown name is an error, not a silently empty row
    twins = [get_model(EM_TWINS[spec.name])] if spec.name in EM_TWINS else []
    _check_options([spec, *twins], options)
    if isinstance(num_steps, dict) and set(num_steps) - set(algorithms):
        raise ValueError(
            f"num_steps names {sorted(set(num_steps) - set(algorithms))}, which are not among "
            f"the algorithms {list(algorithms)}."
        )
    test_data = data if test_data is None else test_data
    rows, results = [], []
    for algorithm in algorithms:
        alg = get_algorithm(algorithm)
        target = spec
        if algorithm == "em" and "em" not in spec.algorithms:
            target = get_model(EM_TWINS.get(spec.name, spec.name))
        for backend in backends:
            if not alg.supports(target, backend):
                continue
            run_guides = (guides or target.guides) if algorithm == "svi" else (None,)
            for guide in run_guides:
                for seed in seeds:
                    steps = num_steps.get(algorithm) if isinstance(num_steps, dict) else num_steps
                    opts = _options_for(target, algorithm, guide, backend, options)
                    res = fit(
                        target,
                        data,
                        algorithm,
                        backend,
                        guide=guide,
                        seed=seed,
                        num_steps=steps,
                        progress=progress,
                        **opts,
                    )
                    heldout = res.log_marginal_likelihood(
                        test_data, num_samples=num_samples, seed=seed
                    )
                    rows.append(
                        {
                            "model": target.name,
                            "algorithm": algorithm,
                            "guide": guide,
                            "backend": backend,
                            "seed": seed,
                            "objective_per_point": _final_objective(res, data) / res.num_data,
                            "heldout_log_pred_per_point": float(np.mean(heldout)),
                            "steps": res.num_steps,
                            "wall_time_s": res.timing["total"],
                            "first_step_s": res.timing["first_step"],
                            "converged": res.converged,
                        }
                    )
                    results.append(res)
    if not rows:
        raise ValueError(
            f"No algorithm in {list(algorithms)} supports {spec.name!r} on {list(backends)}; "
            f"valid algorithms are {sorted(ALGORITHMS)}."
        )
    # ELBOs are compared with ELBOs, EM's log-likelihoods with log-likelihoods.
    best = {}
    for r in rows:
        best[r["model"]] = max(best.get(r["model"], -np.inf), r["objective_per_point"])
    for row, res in zip(rows, results, strict=True):
        y = _smoothed(res) / res.num_data
        hit = np.nonzero(y >= best[row["model"]] - TARGET_GAP)[0]
        row["time_to_target_s"] = float(res.history["time"][hit[0]]) if len(hit) else float("nan")
    return Comparison(rows=rows, results=results)


def _final_objective(res, data) -> float:
    """Closed-form runs: the exact last objective. SVI: a 100-draw ELBO, with z enumerated for
    models that have an enumerated guide (so relaxed and enumerated runs compare), else of the
    run's own guide."""
    if res.algorithm != "svi":
        return res.objective
    spec = get_model(res.model)
    if "enum" in spec.guides:
        from inference.svi import enumerated_elbo

        return enumerated_elbo(res, data, num_particles=100, seed=res.seed)
    return _fresh_elbo(res, data, num_particles=100)


def _fresh_elbo(res, data, num_particles: int) -> float:
    """A fresh Monte-Carlo ELBO of a fitted SVI run with its own guide, in nats (sum over points)."""
    from inference.api import get_backend

    spec = get_model(res.model)
    back = get_backend(res.backend)
    device = back.resolve_device("cpu")
    dtype = res.options.get("dtype", "float64")
    config = back.backend_config(res.config, device, dtype)
    params = dict(res.raw_params)
    engine = back.SVIEngine(
        spec.build_model(back.NAME, config, params),
        spec.twin(back.NAME).make_guide(res.guide, config, params),
        {k: back.asarray(v, device, dtype) for k, v in spec.validate_data(data).items()},
        config,
        elbo=res.options.get("elbo", "trace"),
        lr=1e-3,
        num_particles=1,
        seed=res.seed,
        device=device,
    )
    return engine.elbo(num_particles=num_particles, seed=res.seed)


# A Bayesian model's maximum-likelihood twin, which EM fits in a comparison.
EM_TWINS = {"bayesian_gmm": "gmm"}


#: fit() options compare passes on, and the algorithms each applies to (None: every run).
FIT_OPTIONS = {
    **{name: takers for name, (takers, _) in ALGORITHM_OPTIONS.items()},
    "init": None,
    "tol": None,
    "dtype": None,
    "device": None,
    "batch_size": ("svi", "svi-natural"),
}


def _check_options(specs, options) -> None:
    """Every option is a fit() option above or a model option of one of the fitted models."""
    import inspect

    allowed = set(FIT_OPTIONS)
    for spec in specs:
        allowed |= set(inspect.signature(spec.prepare).parameters) - {"data"}
    unknown = sorted(set(options) - allowed)
    if unknown:
        raise TypeError(
            f"compare() got unknown option(s) {unknown}; it takes the fit() options "
            f"{sorted(FIT_OPTIONS)} and the models' own options {sorted(allowed - set(FIT_OPTIONS))}."
        )


def _options_for(spec, algorithm, guide, backend, options):
    """The options of one run: the model options its ``prepare`` takes (EM's twin has no
    priors) and the fit() options of its algorithm and guide (a temperature for the Gumbel
    guide only; an objective for the guides that do not enumerate)."""
    import inspect

    allowed = set(inspect.signature(spec.prepare).parameters)
    return {
        k: v
        for k, v in options.items()
        if k in allowed
        or (
            k in FIT_OPTIONS
            and algorithm in (FIT_OPTIONS[k] or (algorithm,))
            and not guide_ignores(spec, backend, guide, k)
        )
    }
