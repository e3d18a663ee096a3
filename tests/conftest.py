import numpy as np
import pytest

import zoo


@pytest.fixture(scope="session")
def gmm_data():
    """The built-in 2-D mixture, small enough for exact checks."""
    return zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(0), 300)["x"]


@pytest.fixture(scope="session")
def resp0(gmm_data):
    return np.random.default_rng(1).dirichlet(np.ones(5), size=len(gmm_data))
