"""The maximum-likelihood fit as a point-mass posterior, for the shared evaluation code."""

from __future__ import annotations

import numpy as np

from zoo.bayesian_gmm.posterior import log_likelihood  # noqa: F401  (same mixture likelihood)


def sample_posterior(params, config, family, rng, num_samples):
    """``num_samples`` copies of the fitted parameters (EM's posterior is a point)."""
    tril = params["scale_tril"]
    precision = np.linalg.inv(tril @ np.swapaxes(tril, -1, -2))
    S = int(num_samples)
    return {
        "weights": np.broadcast_to(params["weights"], (S, *params["weights"].shape)).copy(),
        "means": np.broadcast_to(params["means"], (S, *params["means"].shape)).copy(),
        "precisions": np.broadcast_to(precision, (S, *precision.shape)).copy(),
    }
