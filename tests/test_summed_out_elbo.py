"""The ELBO of CAVI's global factors with the assignments summed out: the bound a comparison
scores CAVI and natural-gradient VI by, as it scores SVI's guides."""

from __future__ import annotations

import types

import numpy as np
import pytest
import torch
from torch import distributions as dist

import inference
import zoo
from inference.algorithms.closed_form import global_kl, summed_out_elbo
from inference.compare import _scoring
from inference.registry import get_algorithm

pytestmark = pytest.mark.usefixtures("one_torch_thread")  # small arrays


def _cavi(data, backend="numpyro", **options):
    return inference.fit("bayesian_gmm", {"x": data}, "cavi", backend, progress=False, **options)


def _monte_carlo_kl(raw: dict, config, weight_prior: str, num_draws: int) -> tuple[float, float]:
    """KL(q(theta) || p(theta)) of CAVI's factors as the mean of log q - log p over draws from
    q, by torch's own densities (Dirichlet or Beta sticks, Wishart, MultivariateNormal), and
    the standard error of that mean."""
    torch.manual_seed(0)
    t = {k: torch.tensor(np.asarray(v), dtype=torch.float64) for k, v in raw.items()}
    cov0 = torch.tensor(np.asarray(config.covariance_prior), dtype=torch.float64)
    m0 = torch.tensor(np.asarray(config.mean_prior), dtype=torch.float64)
    beta0, nu0 = config.mean_precision_prior, config.degrees_of_freedom_prior
    a0 = config.weight_concentration_prior
    scale = t["scale_tril"] @ t["scale_tril"].transpose(-1, -2)
    q_precision = dist.Wishart(t["dof"], covariance_matrix=scale)
    p_precision = dist.Wishart(torch.tensor(nu0, dtype=torch.float64), precision_matrix=cov0)
    precision = q_precision.sample((num_draws,))  # (S, K, D, D)
    q_mean = dist.MultivariateNormal(
        t["mean_loc"], precision_matrix=t["mean_precision"][:, None, None] * precision
    )
    p_mean = dist.MultivariateNormal(m0, precision_matrix=beta0 * precision)
    mean = q_mean.sample()
    log_ratio = (q_precision.log_prob(precision) - p_precision.log_prob(precision)).sum(-1) + (
        q_mean.log_prob(mean) - p_mean.log_prob(mean)
    ).sum(-1)
    if weight_prior == "dirichlet_process":
        q_w = dist.Beta(t["stick_a"], t["stick_b"])
        p_w = dist.Beta(torch.ones_like(t["stick_a"]), torch.full_like(t["stick_b"], a0))
        w = q_w.sample((num_draws,))
        log_ratio += (q_w.log_prob(w) - p_w.log_prob(w)).sum(-1)
    else:
        alpha = t["weight_concentration"]
        q_w, p_w = dist.Dirichlet(alpha), dist.Dirichlet(torch.full_like(alpha, a0))
        w = q_w.sample((num_draws,))
        log_ratio += q_w.log_prob(w) - p_w.log_prob(w)
    return float(log_ratio.mean()), float(log_ratio.std() / num_draws**0.5)


# torch's Wishart redraws the rare draw it finds singular in float64, and says so.
@pytest.mark.filterwarnings("ignore:Singular sample detected")
@pytest.mark.parametrize("weight_prior", ["dirichlet_process", "dirichlet_distribution"])
def test_global_kl_is_the_kl_of_torchs_densities(gmm_data, weight_prior):
    """Every term of the closed-form KL (weights, Normal-Wishart means and precisions, with
    the priors resolved from the data) against a Monte-Carlo KL of independent densities."""
    res = _cavi(gmm_data, K=3, weight_prior=weight_prior)
    kl = global_kl(res)
    estimate, error = _monte_carlo_kl(res.raw_params, res.config, weight_prior, 20_000)
    assert error < 0.1, error
    assert abs(kl - estimate) < 5 * error, (kl, estimate, error)


@pytest.mark.parametrize("weight_prior", ["dirichlet_process", "dirichlet_distribution"])
@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_with_one_component_the_summed_out_elbo_is_the_mean_field_elbo(
    gmm_data, backend, weight_prior
):
    """With K=1 there is nothing to sum over: q(z) is exact, so both bounds are one number and
    the estimated gap is 0 at every draw. With stick-breaking weights the one stick's mass is
    the model's weight (a predictive density renormalises it to 1)."""
    res = _cavi(gmm_data, backend, K=1, weight_prior=weight_prior)
    estimate = summed_out_elbo(res, {"x": gmm_data}, num_samples=50, seed=0)
    np.testing.assert_allclose(estimate, res.objective, rtol=1e-10, atol=1e-9)


def test_with_several_components_it_is_the_higher_bound_and_the_backends_agree(gmm_data):
    """At K=3 the mean-field ELBO gives up the sum over assignments: the summed-out ELBO of the
    same factors is higher by more than its Monte-Carlo error, and both backends' fits score
    the same figure from the same seed."""
    scores = []
    for backend in ("pyro", "numpyro"):
        res = _cavi(gmm_data, backend, K=3)
        scores.append(summed_out_elbo(res, {"x": gmm_data}, num_samples=2000, seed=0))
        assert scores[-1] > res.objective + 0.1, (scores[-1], res.objective)
    np.testing.assert_allclose(scores[0], scores[1], rtol=1e-8)


def test_a_comparison_scores_closed_form_posteriors_by_the_summed_out_elbo():
    """CAVI and natural-gradient VI on the Bayesian mixture are scored as SVI's guides are;
    EM (a point estimate) by its log-likelihood; an algorithm with a posterior family of its
    own by its last objective."""
    bayesian, gmm = zoo.get_model("bayesian_gmm"), zoo.get_model("gmm")
    assert _scoring(get_algorithm("cavi"), bayesian, "pyro", None) == "summed-out"
    assert _scoring(get_algorithm("svi-natural"), bayesian, "numpyro", None) == "summed-out"
    assert _scoring(get_algorithm("em"), gmm, "pyro", None) == "last"
    assert _scoring(get_algorithm("svi"), bayesian, "pyro", "enum") == "enumerated"
    # An algorithm of the older contract that names its own posterior family: not CAVI's.
    older = types.SimpleNamespace(
        traits=get_algorithm("cavi").traits, posterior_family=lambda result: "its own"
    )
    assert _scoring(older, bayesian, "pyro", None) == "last"


def test_the_comparison_row_of_cavi_is_its_summed_out_elbo(gmm_data):
    table = inference.compare(
        "bayesian_gmm", {"x": gmm_data}, ["cavi"], backends=["numpyro"], seeds=[2], K=3
    )
    (row,), (res,) = table.rows, table.results
    expected = summed_out_elbo(res, {"x": gmm_data}, num_samples=100, seed=2) / len(gmm_data)
    assert row["objective_per_point"] == expected
    assert row["objective_per_point"] > res.objective_per_point


def test_what_cannot_be_scored_so_is_refused_by_name(gmm_data):
    res = inference.fit("gmm", {"x": gmm_data}, "em", "numpyro", K=2, progress=False)
    with pytest.raises(ValueError, match="'gmm' defines no summed_out_elbo"):
        summed_out_elbo(res, {"x": gmm_data})
    svi = inference.fit(
        "bayesian_gmm", {"x": gmm_data}, "svi", "pyro", K=2, num_steps=2, tol=0, progress=False
    )  # fmt: skip
    with pytest.raises(ValueError, match="family 'enum', not that of the closed-form updates"):
        summed_out_elbo(svi, {"x": gmm_data})
    cavi = _cavi(gmm_data, K=2)
    with pytest.raises(ValueError, match="columns"):  # data of another width
        summed_out_elbo(cavi, {"x": gmm_data[:, :1]})


def test_its_gap_estimate_is_the_plain_estimate_and_never_below_the_mean_field_elbo(gmm_data):
    """The estimate is the exact mean-field ELBO plus a Monte-Carlo gap: it agrees with the
    plain estimate, the mean log-likelihood over draws minus the KL, within the latter's
    Monte-Carlo error, and no draw puts it below the mean-field ELBO."""
    from zoo.bayesian_gmm import posterior

    res = _cavi(gmm_data, K=3)  # stick-breaking weights
    draws = posterior.sample_posterior(
        res.raw_params, res.config, "cavi", np.random.default_rng(1), 4000, renormalise=False
    )
    log_likelihoods = posterior.log_likelihood(draws, {"x": gmm_data}).sum(axis=1)
    plain = log_likelihoods.mean() - global_kl(res)
    error = log_likelihoods.std() / np.sqrt(len(log_likelihoods))
    estimate = summed_out_elbo(res, {"x": gmm_data}, num_samples=4000, seed=2)
    assert abs(estimate - plain) < 4 * error, (estimate, plain, error)
    for seed in range(5):
        one_draw = summed_out_elbo(res, {"x": gmm_data}, num_samples=1, seed=seed)
        assert one_draw >= res.objective - 1e-9, (one_draw, res.objective)
