"""CAVI and EM against scikit-learn from the same initial responsibilities, both backends."""

import numpy as np
import pytest
from sklearn.mixture import BayesianGaussianMixture, GaussianMixture

import inference

STEPS = 60


def _from_resp(cls, resp):
    class FromResponsibilities(cls):
        def _initialize_parameters(self, X, random_state, xp=None):
            self._initialize(X, resp)

    return FromResponsibilities


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
@pytest.mark.parametrize("weight_prior", ["dirichlet_process", "dirichlet_distribution"])
@pytest.mark.parametrize("other_priors", [False, True], ids=["default-priors", "other-priors"])
def test_cavi_matches_sklearn(gmm_data, resp0, backend, weight_prior, other_priors, gmm_priors):
    """At scikit-learn's default priors, and at priors away from them, where beta0 = 1 and
    nu0 = D would hide beta0 dropped or inverted, or nu0 confused with D."""
    K, priors = resp0.shape[1], gmm_priors if other_priors else {}
    ref = _from_resp(BayesianGaussianMixture, resp0)(
        n_components=K,
        weight_concentration_prior_type=weight_prior,
        max_iter=STEPS,
        tol=0.0,
        reg_covar=0.0,
        **priors,
    )
    with pytest.warns(Warning):  # sklearn warns that tol=0 never converges
        ref.fit(gmm_data)
    res = inference.fit(
        "bayesian_gmm",
        {"x": gmm_data},
        algorithm="cavi",
        backend=backend,
        K=K,
        weight_prior=weight_prior,
        init=resp0,
        num_steps=STEPS,
        tol=0.0,
        progress=False,
        **priors,
    )
    assert res.num_steps == STEPS
    np.testing.assert_allclose(res.params["weights"], ref.weights_, rtol=1e-6)
    np.testing.assert_allclose(res.params["means"], ref.means_, rtol=1e-6)
    np.testing.assert_allclose(res.params["covariances"], ref.covariances_, rtol=1e-6)
    # The ELBO never decreases (up to float64 round-off of a ~1e3 number).
    elbo = res.history["objective"]
    assert np.all(np.diff(elbo) >= -1e-9 * np.abs(elbo[1:]))


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_stick_counts_beyond_each_component_keep_float32_precision(backend):
    """The sticks' ``sum_{j>k} N_j`` at N = 1e6 in float32: exact zeros past the last occupied
    component and small tails to float32's relative precision, where the total minus a running
    sum is off by the total's rounding (0.06)."""
    from zoo.array_namespace import JaxOps, TorchOps
    from zoo.bayesian_gmm.closed_form import counts_beyond

    nk = np.array([999_000.0, 990.0, 9.5, 0.006, 0.0, 0.0])
    exact = np.array([999.506, 9.506, 0.006, 0.0, 0.0, 0.0])  # sum_{j>k} nk_j
    if backend == "pyro":
        import torch

        ops, values = TorchOps(), torch.tensor(nk, dtype=torch.float32)
    else:
        import jax.numpy as jnp

        ops, values = JaxOps(), jnp.asarray(nk, dtype=jnp.float32)
    beyond = np.asarray(counts_beyond(values, ops), dtype=float)
    np.testing.assert_allclose(beyond, exact, rtol=1e-6, atol=0)


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_em_matches_sklearn(gmm_data, resp0, backend):
    K = resp0.shape[1]
    ref = _from_resp(GaussianMixture, resp0)(n_components=K, max_iter=STEPS, tol=0.0)
    with pytest.warns(Warning):
        ref.fit(gmm_data)
    res = inference.fit(
        "gmm",
        {"x": gmm_data},
        algorithm="em",
        backend=backend,
        K=K,
        init=resp0,
        num_steps=STEPS,
        tol=0.0,
        progress=False,
    )
    np.testing.assert_allclose(res.params["weights"], ref.weights_, rtol=1e-6)
    np.testing.assert_allclose(res.params["means"], ref.means_, rtol=1e-6)
    np.testing.assert_allclose(res.params["covariances"], ref.covariances_, rtol=1e-6)
    # EM's objective is the log-likelihood, which never decreases.
    ll = res.history["objective"]
    assert np.all(np.diff(ll) >= -1e-9 * np.abs(ll[1:]))


def test_backends_agree_on_cavi_elbo(gmm_data, resp0):
    fits = [
        inference.fit(
            "bayesian_gmm",
            {"x": gmm_data},
            algorithm="cavi",
            backend=b,
            K=5,
            init=resp0,
            num_steps=20,
            tol=0.0,
            progress=False,
        )
        for b in ("pyro", "numpyro")
    ]
    np.testing.assert_allclose(
        fits[0].history["objective"], fits[1].history["objective"], rtol=1e-10
    )


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_responsibilities_are_the_softmax_and_its_normaliser(backend):
    """The closed forms' E-step, ``softmax_logits``, in each backend's layout: the softmax of
    ``phi @ theta`` over components and its log-sum-exp, stable at logits far from zero."""
    from scipy.special import logsumexp, softmax

    from zoo.array_namespace import JaxOps, TorchOps
    from zoo.testing import backend_arrays

    rng = np.random.default_rng(0)
    features, theta = rng.normal(size=(50, 6)), rng.normal(size=(6, 4))
    theta[0] += 800.0  # logits near 800 (the constant feature): exp would overflow unshifted
    logits = features @ theta
    ops, asarray = (TorchOps() if backend == "pyro" else JaxOps()), backend_arrays(backend)
    resp, log_norm = ops.softmax_logits(ops.layout_features(asarray(features)), asarray(theta))
    np.testing.assert_allclose(np.asarray(ops.rows(resp)), softmax(logits, axis=1), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(log_norm), logsumexp(logits, axis=1), rtol=1e-14)
