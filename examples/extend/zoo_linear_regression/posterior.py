"""The posterior in numpy: the exact answer, draws from a fitted one, and the likelihood.

The zoo evaluates every fit through these two functions of the spec (``sample_posterior`` and
``log_likelihood``): held-out log predictive, ``FitResult.to_arviz()``, ``inference.compare``.
MCMC draws of the model's site ``coef`` become the same draws through ``draws_from_sites``, and
``sites_from_params`` reads a point of ``coef`` from raw parameters (required beside it; the
sampler starts there only for mixtures); ``exact_raw_params`` is the exact posterior in the
form ``sample_posterior`` draws from, the reference the zoo compares posteriors against.
"""

from __future__ import annotations

import numpy as np


def exact_posterior(data: dict, config) -> tuple[np.ndarray, np.ndarray]:
    """Mean (D,) and covariance (D, D) of p(coef | x, y), the yardstick for every fit.

    ``cov^-1 = prior_precision I + x^T x / noise_scale^2``, ``mean = cov x^T y / noise_scale^2``.
    """
    x, y = np.asarray(data["x"], dtype=float), np.asarray(data["y"], dtype=float)
    noise_precision = config.noise_scale**-2
    precision = config.prior_precision * np.eye(x.shape[1]) + noise_precision * x.T @ x
    covariance = np.linalg.inv(precision)
    return covariance @ (noise_precision * x.T @ y), covariance


def exact_raw_params(data: dict, config) -> dict:
    """:func:`exact_posterior` as raw parameters, in the parametrisation of the full-rank guide
    and the closed-form updates, so that :func:`sample_posterior` draws from it."""
    mean, cov = exact_posterior(data, config)
    return {"coef_loc": mean, "coef_scale_tril": np.linalg.cholesky(cov)}


def covariance(raw_params: dict) -> np.ndarray:
    """The Gaussian q(coef)'s covariance from either parametrisation the guides use."""
    if "coef_scale_tril" in raw_params:  # full-rank guide and the closed-form updates
        tril = raw_params["coef_scale_tril"]
        return tril @ tril.T
    return np.diag(raw_params["coef_scale"] ** 2)  # mean-field guide


def sample_posterior(raw_params, config, family, rng, num_samples) -> dict:
    """``num_samples`` draws of coef from the fitted Gaussian (any guide, or CAVI).

    The known ``noise_scale`` rides along with the draws: ``log_likelihood(draws, data)`` sees
    nothing else.
    """
    loc = raw_params["coef_loc"]
    chol = np.linalg.cholesky(covariance(raw_params))
    coef = loc + rng.standard_normal((int(num_samples), loc.shape[0])) @ chol.T
    return {"coef": coef, "noise_scale": np.full(int(num_samples), config.noise_scale)}


def draws_from_sites(sites: dict, config) -> dict:
    """MCMC draws of the site ``coef`` (S, D) as :func:`sample_posterior`'s draws: the known
    ``noise_scale`` rides along."""
    coef = np.asarray(sites["coef"])
    return {"coef": coef, "noise_scale": np.full(coef.shape[0], config.noise_scale)}


def sites_from_params(raw_params: dict, config) -> dict:
    """The posterior mean of ``coef`` (any guide, or CAVI): a point of every latent site. The
    sampler's chains of this model start uniformly in [-2, 2] instead; only a mixture's start at
    this point."""
    return {"coef": np.asarray(raw_params["coef_loc"])}


def log_likelihood(draws: dict, data: dict) -> np.ndarray:
    """(S, N): log Normal(y_n | x_n . coef_s, noise_scale^2) for each draw s and point n."""
    mean = draws["coef"] @ np.asarray(data["x"]).T  # (S, N)
    scale = draws["noise_scale"][:, None]
    z = (np.asarray(data["y"])[None, :] - mean) / scale
    return -0.5 * z**2 - np.log(scale) - 0.5 * np.log(2 * np.pi)
