r"""Bayesian Gaussian mixture with full covariances (Bishop, PRML section 10.2).

Generative process, for ``n = 1..N`` and ``k = 1..K``::

    pi                ~ Dirichlet(alpha0 * 1_K)                   weight_prior="dirichlet_distribution"
    v_k               ~ Beta(1, gamma0);  pi_k = v_k prod_{j<k}(1 - v_j)
                                                                  weight_prior="dirichlet_process"
    Lambda_k          ~ Wishart(nu0, W0)            (precision matrix; W0^-1 = covariance_prior)
    mu_k | Lambda_k   ~ Normal(m0, (beta0 Lambda_k)^-1)
    z_n | pi          ~ Categorical(pi)
    x_n | z_n, mu, Lambda ~ Normal(mu_{z_n}, Lambda_{z_n}^-1)

The stick-breaking prior is truncated as scikit-learn truncates it (the nested truncation of
Kurihara, Welling & Teh, 2007): the K-th stick is not forced to one, and the mass
``prod_k (1 - v_k)`` belongs to components beyond K, which the variational posterior of ``z`` never
visits. Priors default to those of ``sklearn.mixture.BayesianGaussianMixture``.

Sites: ``weights`` (Dirichlet) or ``sticks`` (stick-breaking), ``precisions``, ``means`` in plate
``components``; ``z`` and ``x`` in plate ``data``.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from zoo.bayesian_gmm import posterior
from zoo.options import as_float, check_array, check_choice, check_float
from zoo.spec import FROM_DATA, DataField, GuideKind, ModelSpec
from zoo.updates import ClosedFormUpdates

#: What to try when a mixture's fit turns non-finite: a component's covariance went singular.
MIXTURE_ADVICE = "Check the data scale and constant columns, raise reg_covar, or use float64."

WEIGHT_PRIORS = ("dirichlet_process", "dirichlet_distribution")

#: Gumbel-softmax guides (Jang et al., 2017): z_n is a one-hot vector drawn by the Gumbel-softmax
#: trick at a temperature that SVI anneals (its temperature= option), relaxed ("gumbel") or
#: straight-through ("gumbel-st"), from q(z_n), the CAVI update of q(z) from the global factors'
#: parameters; the z site's densities are the discrete ones and SVI fits these guides with the
#: mean-field ELBO, which takes the closed-form KL between q(z_n) and p(z_n | pi). The spec
#: declares their kind, and the twins build them by these names.
GUMBEL_GUIDES = ("gumbel", "gumbel-st")


@dataclass(frozen=True)
class BayesianGMMConfig:
    """Model options with priors resolved against the data (numpy, or backend arrays)."""

    K: int
    weight_prior: str
    weight_concentration_prior: float
    mean_prior: np.ndarray  # (D,)
    mean_precision_prior: float
    degrees_of_freedom_prior: float
    covariance_prior: np.ndarray  # (D, D), the inverse of the Wishart scale W0
    reg_covar: float = 0.0
    # Powers of two near each column's standard deviation (data_units): the units SVI moves the
    # guides' means in. Empty in fits saved before they were recorded (unit scale).
    units: tuple[float, ...] = field(default=(), metadata={FROM_DATA: True})

    @property
    def dim(self) -> int:
        return int(self.mean_prior.shape[-1])


def _positive(name, value):
    return check_float(name, value, 0.0)


def check_components(K, n_samples) -> int:
    """Validate the number of components against the number of data points."""
    if isinstance(K, bool) or not isinstance(K, int | np.integer):
        raise TypeError(f"K must be an int; got {type(K).__name__}.")
    if K < 1:
        raise ValueError(f"K must be an int in the range [1, inf); got {K}.")
    if K > n_samples:
        raise ValueError(f"K={K} exceeds the number of data points N={n_samples}; use K <= N.")
    return int(K)


def _check_data_scale(x, need_covariance: bool) -> None:
    """Data the model cannot use: refused naming what in the data is wrong, not the default
    prior computed from them (the data's covariance), which the caller never passed."""
    n = len(x)
    if need_covariance and n < 2:
        raise ValueError(
            f"data['x'] has {n} row; the default covariance_prior (the covariance of the data) "
            "needs at least 2 rows: pass more data, or covariance_prior= (a (D, D) matrix)."
        )
    check_squares(x, "in the data's covariance, the default covariance_prior, and in every update")


def check_squares(x, where: str) -> None:
    """Refuse data whose squares (summed over the rows) overflow float64 ``where`` they are
    taken, or whose spread squared underflows: a mixture's updates and its k-means start
    would compute with infinities, or with zeros where a column varies."""
    largest = float(np.max(np.abs(x)))
    if largest > np.sqrt(np.finfo(np.float64).max / len(x)):
        raise ValueError(
            f"data['x'] holds values up to {largest:.3g}, whose squares overflow float64 "
            f"({where}); rescale the data, e.g. standardise each column."
        )
    spread = np.ptp(x, axis=0)
    # A column that varies by less than the square root of the smallest normal float64 has
    # squared deviations of zero or subnormal: its covariance is 0 to float64.
    tiny = [int(j) for j in np.flatnonzero((spread > 0) & (spread < np.sqrt(np.finfo(float).tiny)))]
    if tiny:
        raise ValueError(
            f"column(s) {tiny} of data['x'] vary by at most {float(spread[tiny].max()):.3g}, "
            f"whose squares underflow float64 ({where}); rescale the data, e.g. standardise "
            "each column."
        )


def data_units(x) -> tuple[float, ...]:
    """The power of two nearest each column's standard deviation (1 for a constant column).

    SVI moves a mixture's means in these units, so that its steps do not depend on the data's:
    Adam's steps are a fixed size in the coordinates it moves. Powers of two, so that rescaling
    is exact in floating point and data of similar scale share one compiled step.
    """
    sd = np.std(np.asarray(x, dtype=np.float64), axis=0)
    sd = np.where(np.isfinite(sd) & (sd > 0), sd, 1.0)
    return tuple(float(2.0**e) for e in np.round(np.log2(sd)))


def _check_default_covariance(x, cov) -> None:
    """The data covariance as a prior must be positive definite: say why it is not."""
    n, d = x.shape
    if not np.isfinite(cov).all():
        return  # refused below, as a covariance_prior that is not finite
    constant = [int(j) for j in np.flatnonzero(np.ptp(x, axis=0) == 0)]
    if constant:
        raise ValueError(
            f"column(s) {constant} of data['x'] are constant, so the default covariance_prior "
            "(the covariance of the data) is singular; drop those columns, or pass "
            "covariance_prior= (a (D, D) positive definite matrix)."
        )
    if n <= d:
        raise ValueError(
            f"data['x'] has {n} rows and {d} columns; the default covariance_prior (the "
            f"covariance of the data) is singular unless there are more rows than columns: "
            "pass more data, or covariance_prior= (a (D, D) positive definite matrix)."
        )


def _positive_definite_beyond_rounding(cov, summed_rows: int) -> bool:
    """Whether ``cov`` is symmetric and positive definite by more than rounding error.

    The test is on the correlation matrix, so that the columns' units do not matter. An
    eigenvalue below ``max(D, summed_rows) * eps`` times the largest cannot be told from zero:
    this is ``numpy.linalg.matrix_rank``'s tolerance (``max(shape) * eps`` times the largest
    singular value), with N for the covariance of N rows (``summed_rows``), each entry of which
    is a sum of N products, rounded by up to N * eps. Exactly collinear columns leave an
    eigenvalue of a few eps of either sign; a test against 0 lets the positive ones through to
    fail later (a Cholesky factorisation, a NaN objective). Real data are far above the
    tolerance: a column the others predict with R^2 = 1 - 1e-8 passes with 10^6 rows, and
    scikit-learn's iris, wine, diabetes and breast-cancer data have smallest eigenvalues 1e-5
    to 1e-2 of the largest.
    """
    variances = np.diag(cov)
    if not np.allclose(cov, cov.T) or not (variances > 0).all():
        return False
    scale = np.sqrt(variances)
    eigenvalues = np.linalg.eigvalsh(cov / np.outer(scale, scale))
    tolerance = max(len(cov), summed_rows) * np.finfo(np.float64).eps * eigenvalues[-1]
    return bool(eigenvalues[0] > tolerance)


def check_dim(data, config) -> None:
    """New data (a test set, validation data) have the fitted mixture's D columns."""
    x = data["x"]
    if x.shape[-1] != config.dim:
        raise ValueError(
            f"data['x'] must have {config.dim} columns, as the fitted model; got shape {x.shape}."
        )


def prepare(
    data,
    K: int = 10,
    weight_prior: str = "dirichlet_process",
    weight_concentration_prior: float | None = None,
    mean_prior=None,
    mean_precision_prior: float | None = None,
    degrees_of_freedom_prior: float | None = None,
    covariance_prior=None,
    reg_covar: float = 0.0,
) -> BayesianGMMConfig:
    """Resolve the model options against the data, with scikit-learn's defaults.

    ``reg_covar`` adds a constant to the diagonal of each component's scatter matrix in the
    closed-form update, as scikit-learn does; it defaults to 0 here so that CAVI is exact.

    Parameters
    ----------
    data : dict
        ``x``: (N, D) observations.
    K : int
        Number of components, in ``[1, N]`` (with ``weight_prior="dirichlet_process"``, the
        truncation level of the stick-breaking prior).
    weight_prior : {"dirichlet_process", "dirichlet_distribution"}
        Prior of the mixture weights: ``"dirichlet_process"``, stick-breaking
        ``v_k ~ Beta(1, gamma0)``, ``pi_k = v_k prod_{j<k} (1 - v_j)``, truncated at ``K`` as
        scikit-learn truncates it; ``"dirichlet_distribution"``, ``pi ~ Dirichlet(alpha0 1_K)``.
    weight_concentration_prior : float, optional
        The concentration ``> 0`` of the weight prior: ``gamma0`` of the sticks' Beta(1, gamma0)
        or ``alpha0`` of the Dirichlet. None: ``1 / K``, as in scikit-learn.
    mean_prior : array of shape (D,), optional
        ``m0``, the prior mean of every component's mean (finite). None: the mean of the data,
        as in scikit-learn.
    mean_precision_prior : float, optional
        ``beta0 > 0``: ``mu_k | Lambda_k ~ Normal(m0, (beta0 Lambda_k)^-1)``. None: 1, as in
        scikit-learn.
    degrees_of_freedom_prior : float, optional
        ``nu0``, the degrees of freedom of the Wishart prior of each precision matrix; finite and
        greater than ``D - 1``. None: ``D``, as in scikit-learn.
    covariance_prior : array of shape (D, D), optional
        ``W0^-1``, the inverse of the Wishart scale matrix (so ``E[Lambda_k]^-1 = W0^-1 / nu0``);
        symmetric positive definite. None: the covariance of the data (``np.cov``), as in
        scikit-learn; that needs more rows than columns and no constant column.
    reg_covar : float
        ``>= 0``, added to the diagonal of each component's covariance estimate (its scatter
        matrix over ``N_k``) in the closed-form update: CAVI's and svi-natural's updates, and
        the one update from which SVI's guides and NUTS's chains start. It is not part of the
        model's density. Default 0, which keeps CAVI exact (scikit-learn's default is 1e-6);
        raise it when a component's covariance goes singular.
    """
    x = data["x"]
    n, d = x.shape
    K = check_components(K, n)
    weight_prior = check_choice("weight_prior", weight_prior, WEIGHT_PRIORS)
    alpha0 = _positive(
        "weight_concentration_prior",
        1.0 / K if weight_concentration_prior is None else weight_concentration_prior,
    )
    beta0 = _positive(
        "mean_precision_prior", 1.0 if mean_precision_prior is None else mean_precision_prior
    )
    nu0 = as_float(
        "degrees_of_freedom_prior",
        d if degrees_of_freedom_prior is None else degrees_of_freedom_prior,
    )
    if not (nu0 > d - 1 and np.isfinite(nu0)):
        raise ValueError(
            f"degrees_of_freedom_prior must be finite and greater than D - 1 = {d - 1}; got {nu0}."
        )
    _check_data_scale(x, need_covariance=covariance_prior is None)
    m0 = x.mean(axis=0) if mean_prior is None else check_array("mean_prior", mean_prior, (d,))
    if not np.isfinite(m0).all():
        raise ValueError(f"mean_prior must be finite; got {m0}.")
    if covariance_prior is None:
        cov0 = np.atleast_2d(np.cov(x.T))
        _check_default_covariance(x, cov0)
    else:
        cov0 = check_array("covariance_prior", covariance_prior, (d, d))
    if not np.isfinite(cov0).all():
        raise ValueError("covariance_prior must be finite; it holds NaN or inf.")
    summed_rows = n if covariance_prior is None else 0
    if not _positive_definite_beyond_rounding(cov0, summed_rows):
        if covariance_prior is None:
            raise ValueError(
                "the covariance of data['x'] (the default covariance_prior) is singular: some "
                "columns of data['x'] are linear combinations of others (as they are when it "
                "has fewer than D + 1 distinct rows). Drop them, or pass covariance_prior= (a "
                "(D, D) positive definite matrix)."
            )
        raise ValueError(
            "covariance_prior must be symmetric positive definite; with N <= D or constant "
            "columns the default (the data covariance) is singular: pass one explicitly."
        )
    reg_covar = check_float("reg_covar", reg_covar, 0.0, low_closed=True)
    return BayesianGMMConfig(
        K=K,
        weight_prior=weight_prior,
        weight_concentration_prior=alpha0,
        mean_prior=m0.astype(float),
        mean_precision_prior=beta0,
        degrees_of_freedom_prior=nu0,
        covariance_prior=cov0.astype(float),
        reg_covar=float(reg_covar),
        units=data_units(x),
    )


def expected_weights(params: dict, weight_prior: str) -> np.ndarray:
    """Mixture weights under the variational posterior, normalised as scikit-learn does."""
    if weight_prior == "dirichlet_process":
        a, b = params["stick_a"], params["stick_b"]
        stick_mean = a / (a + b)
        weights = stick_mean * np.concatenate([[1.0], np.cumprod(1 - stick_mean)[:-1]])
    else:
        weights = params["weight_concentration"]
    return weights / weights.sum()


def summarize(params: dict, config: BayesianGMMConfig) -> dict:
    """User-facing parameters in scikit-learn's conventions, from variational parameters.

    ``covariances`` is ``E[Lambda_k]^-1 = W_k^-1 / nu_k``, as ``BayesianGaussianMixture``
    reports it.
    """
    tril, dof = params["scale_tril"], params["dof"]
    scale = tril @ np.swapaxes(tril, -1, -2)
    weights = expected_weights(params, config.weight_prior)
    return {
        "weights": weights,
        "means": params["mean_loc"],
        "covariances": np.linalg.inv(scale) / dof[:, None, None],
        "n_effective_components": _effective_components(weights),
    }


def summarize_draws(draws: dict, config: BayesianGMMConfig) -> dict:
    """:func:`summarize`'s parameters from posterior draws (a sampler's, pooled over chains):
    the posterior means of the weights and means, and ``covariances`` ``E[Lambda_k]^-1``, the
    inverse of the precisions' posterior mean, as :func:`summarize` reports them."""
    weights = draws["weights"].mean(axis=0)
    return {
        "weights": weights,
        "means": draws["means"].mean(axis=0),
        "covariances": np.linalg.inv(draws["precisions"].mean(axis=0)),
        "n_effective_components": _effective_components(weights),
    }


def _effective_components(weights: np.ndarray) -> np.ndarray:
    """How many components the data kept: one "switched off" keeps under 1% of the weight."""
    return np.asarray(int((weights > 0.01).sum()))


def make_data(rng: np.random.Generator, n: int = 600) -> dict:
    """Four anisotropic 2-D clusters of unequal size: the built-in demo and test data."""
    means = np.array([[0.0, 0.0], [4.0, 4.0], [-4.0, 3.0], [3.0, -4.0]])
    covs = np.array(
        [
            [[1.0, 0.6], [0.6, 1.0]],
            [[0.5, 0.0], [0.0, 1.5]],
            [[1.2, -0.7], [-0.7, 0.8]],
            [[0.3, 0.1], [0.1, 0.3]],
        ]
    )
    weights = np.array([0.4, 0.25, 0.2, 0.15])
    z = rng.choice(4, size=n, p=weights)
    chol = np.linalg.cholesky(covs)
    x = means[z] + np.einsum("nij,nj->ni", chol[z], rng.standard_normal((n, 2)))
    return {"x": x}


SPEC = ModelSpec(
    name="bayesian_gmm",
    description="Bayesian Gaussian mixture, full covariance, Dirichlet or stick-breaking weights",
    data={"x": DataField(ndim=2, kind="f", doc="(N, D) observations")},
    backends={
        "pyro": "zoo.bayesian_gmm.pyro_model",
        "numpyro": "zoo.bayesian_gmm.numpyro_model",
    },
    # The "cavi" guide (make_guide) is the CAVI posterior, not for SVI.
    guides=("enum", *GUMBEL_GUIDES),
    guide_kinds={
        # z summed out (TraceEnum_ELBO); the global factors are sampled, so not deterministic.
        "enum": GuideKind(enumerated=True),
        **{guide: GuideKind(relaxed=True, closed_form_kl=True) for guide in GUMBEL_GUIDES},
    },
    prepare=prepare,
    updates=ClosedFormUpdates(
        "zoo.bayesian_gmm.closed_form",
        objective="elbo",
        start="responsibilities",
        family="cavi",  # the twins' guide of the CAVI posterior
        natural_gradient=True,
    ),
    maximum_likelihood_twin="gmm",
    numerical_advice=MIXTURE_ADVICE,
    # 2: the Cholesky factors' off-diagonal entries relative to their row's diagonal;
    # 3: the means' locations in the data's units (config.units).
    guide_coordinates=3,
    make_data=make_data,
    summarize=summarize,
    summarize_draws=summarize_draws,
    config_type=BayesianGMMConfig,
    sample_posterior=posterior.sample_posterior,
    log_likelihood=posterior.log_likelihood,
    check_data=check_dim,
    draws_from_sites=posterior.draws_from_sites,
    sites_from_params=posterior.sites_from_params,
    exchangeable_components=("weights", "means", "precisions"),
    example_options={"K": 3},
    minibatch=True,  # the "enum" guide; SVI draws minibatches, svi-natural streams them
    tags=("discrete-latent", "conjugate", "mixture"),
)
