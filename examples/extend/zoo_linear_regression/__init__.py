r"""Bayesian linear regression with known noise: an example model plugin for the zoo.

Generative process, for ``n = 1..N`` and ``D`` coefficients::

    coef ~ Normal(0, prior_precision^-1 I_D)
    y_n | coef ~ Normal(x_n . coef, noise_scale^2)

``x`` holds the covariates (put a column of ones in it for an intercept); ``noise_scale`` is
known. The posterior of ``coef`` is Gaussian and known exactly (``posterior.exact_posterior``),
which makes the model a yardstick: CAVI lands on the posterior in one update, natural-gradient
SVI on minibatches approaches it, and SVI with a full-rank Gaussian guide must approach it.

Sites: ``coef`` (latent, one event of size D) and ``y`` (observed, plate ``data``).

The spec lists no algorithms: each algorithm decides from what the spec declares. The guides
give SVI (``svi``); the closed-form updates in ``closed_form.py``, which ascend the ELBO, give
coordinate-ascent VI (``cavi``); and their natural-gradient steps (``natural_gradient=True``)
give natural-gradient SVI (``svi-natural``). ``draws_from_sites`` and ``sites_from_params``
(every latent is global) let NUTS sample the model, and ``exact_posterior`` (the closed form as
raw parameters) is the reference that posterior comparisons measure every fit against.

The package declares ``SPEC`` under the entry-point group ``zoo.models`` (``pyproject.toml``);
once the package is installed, ``zoo.list_models()``, ``inference.fit`` and the ``zoo`` command
(``python -m inference``) find the model with nothing imported by hand, and
``inference.tools.conformance.check_model("bayesian_linear_regression")`` checks it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from zoo import ClosedFormUpdates, DataField, ModelSpec

from . import posterior

__all__ = ["SPEC", "LinearRegressionConfig", "make_data", "prepare", "summarize"]


@dataclass(frozen=True)
class LinearRegressionConfig:
    """The model's options, checked against the data. A saved fit stores these fields."""

    dim: int  # number of coefficients D (columns of x)
    prior_precision: float  # alpha: coef ~ Normal(0, alpha^-1 I)
    noise_scale: float  # sigma: y_n ~ Normal(x_n . coef, sigma^2)


def _positive(name: str, value) -> float:
    value = float(value)
    if not np.isfinite(value) or value <= 0:
        raise ValueError(f"{name} must be a float in the range (0, inf); got {value}.")
    return value


def prepare(data, prior_precision: float = 1.0, noise_scale: float = 1.0) -> LinearRegressionConfig:
    """Check the options against the data (already checked for keys, rank and dtype kind)."""
    x, y = data["x"], data["y"]
    if y.shape[0] != x.shape[0]:
        raise ValueError(
            f"data['y'] must hold one response per row of data['x'] ({x.shape[0]}); "
            f"got {y.shape[0]}."
        )
    return LinearRegressionConfig(
        dim=int(x.shape[1]),
        prior_precision=_positive("prior_precision", prior_precision),
        noise_scale=_positive("noise_scale", noise_scale),
    )


def summarize(raw_params: dict, config: LinearRegressionConfig) -> dict:
    """The posterior mean and covariance of the coefficients, from either guide's parameters."""
    covariance = posterior.covariance(raw_params)
    return {
        "coef_mean": raw_params["coef_loc"],
        "coef_covariance": covariance,
        "coef_sd": np.sqrt(np.diagonal(covariance)),
    }


def summarize_draws(draws: dict, config: LinearRegressionConfig) -> dict:
    """:func:`summarize`'s parameters from a sampler's draws of ``coef`` (S, D): their mean and
    covariance, so that a NUTS fit's ``params`` read as a CAVI or SVI fit's."""
    coef = draws["coef"]
    centred = coef - coef.mean(axis=0)
    covariance = centred.T @ centred / max(coef.shape[0] - 1, 1)
    return {
        "coef_mean": coef.mean(axis=0),
        "coef_covariance": covariance,
        "coef_sd": np.sqrt(np.diagonal(covariance)),
    }


TRUE_COEF = np.array([1.0, -2.0, 0.5])  # intercept and two slopes of the demo data


def make_data(rng: np.random.Generator, n: int = 200) -> dict:
    """Demo data that the model describes: an intercept column and two standard-normal
    covariates, unit noise (the default ``noise_scale``)."""
    x = np.column_stack([np.ones(n), rng.standard_normal((n, 2))])
    y = x @ TRUE_COEF + rng.standard_normal(n)
    return {"x": x, "y": y}


SPEC = ModelSpec(
    name="bayesian_linear_regression",
    description="Bayesian linear regression, known noise, Gaussian prior (example plugin)",
    data={
        "x": DataField(ndim=2, kind="f", doc="(N, D) covariates"),
        "y": DataField(ndim=1, kind="f", doc="(N,) responses"),
    },
    # Module paths, imported only when a backend is used: listing the model loads neither
    # torch nor JAX.
    backends={
        "pyro": "zoo_linear_regression.pyro_model",
        "numpyro": "zoo_linear_regression.numpyro_model",
    },
    guides=("full_rank", "mean_field"),  # the first is SVI's default
    prepare=prepare,
    # Closed-form updates that ascend the ELBO: the zoo fits the model by coordinate-ascent VI
    # (cavi); their natural-gradient steps (natural_gradient=True) add svi-natural.
    updates=ClosedFormUpdates(
        "zoo_linear_regression.closed_form", objective="elbo", natural_gradient=True
    ),
    make_data=make_data,
    summarize=summarize,
    config_type=LinearRegressionConfig,
    sample_posterior=posterior.sample_posterior,
    log_likelihood=posterior.log_likelihood,
    # Every latent (coef) is global, so NUTS can sample the model. Its chains start uniformly in
    # [-2, 2] (unconstrained): only a mixture's start at sites_from_params, which the spec
    # declares beside draws_from_sites all the same.
    draws_from_sites=posterior.draws_from_sites,
    sites_from_params=posterior.sites_from_params,
    summarize_draws=summarize_draws,  # a NUTS fit's params, by summarize's names
    # The reference that posterior comparisons measure every fit against.
    exact_posterior=posterior.exact_raw_params,
    tags=("conjugate", "regression", "plugin"),
    # The full-rank guide's Cholesky factor moved to scale-free coordinates in revision 2: an
    # SVI checkpoint of revision 1 is refused, not misread.
    guide_coordinates=2,
)
