r"""Maximum-likelihood Gaussian mixture with full covariances, the model EM fits.

Generative process, for ``n = 1..N``::

    z_n ~ Categorical(weights)
    x_n | z_n ~ Normal(means[z_n], covariances[z_n])

``weights``, ``means`` and ``scale_tril`` (the Cholesky factor of each covariance) are parameters,
not latent variables; ``z`` is summed out by enumeration under SVI. Sites: ``z`` and ``x`` in
plate ``data``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from zoo.bayesian_gmm import (
    MIXTURE_ADVICE,
    check_components,
    check_dim,
    check_squares,
    data_units,
)
from zoo.gmm import posterior
from zoo.options import check_float
from zoo.spec import FROM_DATA, DataField, GuideKind, ModelSpec
from zoo.updates import ClosedFormUpdates


@dataclass(frozen=True)
class GMMConfig:
    K: int
    dim: int
    reg_covar: float = 1e-6
    # Powers of two near each column's standard deviation: the units SVI moves the means in.
    # Empty in fits saved before they were recorded (unit scale).
    units: tuple[float, ...] = field(default=(), metadata={FROM_DATA: True})


def prepare(data, K: int = 10, reg_covar: float = 1e-6) -> GMMConfig:
    """``reg_covar`` is added to each covariance's diagonal in the M-step, as in scikit-learn.

    Parameters
    ----------
    data : dict
        ``x``: (N, D) observations.
    K : int
        Number of components, in ``[1, N]``.
    reg_covar : float
        ``>= 0``, added to the diagonal of each component's covariance in the closed-form M-step
        (EM's, and the one update from which SVI's starting values come), as in scikit-learn's
        ``GaussianMixture``, whose default 1e-6 it shares: it keeps the covariances positive
        definite. SVI's gradient steps do not add it.
    """
    n, d = data["x"].shape
    K = check_components(K, n)
    check_squares(data["x"], "in the k-means start and in every update")
    reg_covar = check_float("reg_covar", reg_covar, 0.0, low_closed=True)
    return GMMConfig(K=K, dim=d, reg_covar=reg_covar, units=data_units(data["x"]))


def summarize(params: dict, config: GMMConfig) -> dict:
    tril = params["scale_tril"]
    return {
        "weights": params["weights"],
        "means": params["means"],
        "covariances": tril @ np.swapaxes(tril, -1, -2),
    }


def make_data(rng: np.random.Generator, n: int = 600) -> dict:
    from zoo.bayesian_gmm import make_data as bayesian_gmm_data

    return bayesian_gmm_data(rng, n)


SPEC = ModelSpec(
    name="gmm",
    description="Gaussian mixture, full covariance, maximum likelihood (the model EM fits)",
    data={"x": DataField(ndim=2, kind="f", doc="(N, D) observations")},
    backends={"pyro": "zoo.gmm.pyro_model", "numpyro": "zoo.gmm.numpyro_model"},
    guides=("enum",),
    # z is summed out (TraceEnum_ELBO) and the model's parameters are param sites: the guide
    # draws nothing at random, so its ELBO is exact.
    guide_kinds={"enum": GuideKind(enumerated=True, deterministic=True)},
    prepare=prepare,
    updates=ClosedFormUpdates(
        "zoo.gmm.closed_form", objective="log_likelihood", start="responsibilities"
    ),
    numerical_advice=MIXTURE_ADVICE,
    make_data=make_data,
    summarize=summarize,
    config_type=GMMConfig,
    sample_posterior=posterior.sample_posterior,
    log_likelihood=posterior.log_likelihood,
    check_data=check_dim,
    example_options={"K": 3},
    # 2: the means in the data's units and the factors scale-free (SVI's steps in coordinates
    # that do not depend on the data's scale).
    guide_coordinates=2,
    tags=("discrete-latent", "maximum-likelihood", "mixture"),
)
