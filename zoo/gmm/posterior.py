"""The maximum-likelihood fit as a point-mass posterior, for the shared evaluation code."""

from __future__ import annotations

import numpy as np

from zoo.bayesian_gmm.posterior import log_likelihood  # noqa: F401  (same mixture likelihood)


def sample_posterior(params, config, family, rng, num_samples):
    """``num_samples`` copies of the fitted parameters (EM's posterior is a point); ``precisions``
    in float64, as :mod:`zoo.bayesian_gmm` draws them, ``weights`` and ``means`` as fitted."""
    # In float64 whatever the fit's dtype: a nearly singular covariance loses its precision's
    # accuracy to float32 rounding, in the inverse and again in a float32 copy of its result.
    tril = np.asarray(params["scale_tril"], dtype=np.float64)
    precision = np.linalg.inv(tril @ np.swapaxes(tril, -1, -2))
    S = int(num_samples)
    return {
        "weights": np.broadcast_to(params["weights"], (S, *params["weights"].shape)).copy(),
        "means": np.broadcast_to(params["means"], (S, *params["means"].shape)).copy(),
        "precisions": np.broadcast_to(precision, (S, *precision.shape)).copy(),
    }
