"""exchangeable_tokens: the exact posterior, the attention posterior in numpy / torch / JAX, the
twins' log-joints for every objective, fits through inference.fit, error against N, bad input and
the example. Tiny sizes keep it fast; Pyro fits (no compiling) where a backend is not the point."""

import dataclasses
import json
import warnings

import numpy as np
import pytest
from scipy.special import logsumexp
from scipy.stats import multivariate_normal

import inference
import zoo
from zoo import exchangeable as ex

SPEC = zoo.get_model("exchangeable_tokens")
NO_ENUM_WARNING = "ignore:TraceEnum_ELBO found no sample sites"


@pytest.fixture(autouse=True, scope="module")
def _one_torch_thread():
    """Tensors here are tiny: more threads only add synchronisation (costly on a busy machine)."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def config_for(dim=2, **options):
    return ex.prepare({"x": np.zeros((1, 2, dim))}, **options)


@pytest.fixture(scope="module")
def small():
    """K=4 components in 3-D with unequal weights and norms, sequences of 1 to 7 tokens."""
    rng = np.random.default_rng(0)
    config = config_for(
        dim=3, means=rng.normal(size=(4, 3)), scale=0.8, weights=[0.1, 0.2, 0.3, 0.4]
    )
    return config, ex.simulate(config, rng, 6, 7, min_length=1)


def test_exact_posterior_is_bayes_rule(small):
    config, data = small
    x, lengths = data["x"], data["length"]
    got = ex.exact_posterior(x, config.means, config.scale, config.weights, lengths)
    cov = config.scale**2 * np.eye(3)
    for s in range(len(x)):
        tokens = x[s, : lengths[s]]
        log_joint = [
            np.log(config.weights[k])
            + multivariate_normal(config.means[k], cov).logpdf(tokens).sum()
            for k in range(4)
        ]
        np.testing.assert_allclose(got[s], np.exp(log_joint - logsumexp(log_joint)), rtol=1e-10)
    # Exchangeable: any order of the tokens gives the same posterior; padding is ignored.
    order = np.random.default_rng(1).permutation(7)
    full = ex.exact_posterior(x, config.means, config.scale, config.weights)
    np.testing.assert_allclose(
        ex.exact_posterior(x[:, order], config.means, config.scale, config.weights), full
    )
    padded = np.where(np.arange(7)[:, None] < lengths[:, None, None], x, 1e3)
    np.testing.assert_allclose(
        ex.exact_posterior(padded, config.means, config.scale, config.weights, lengths), got
    )


def test_distances_are_accurate_for_nearly_one_hot_posteriors():
    log_p = np.log([1.0, 1e-30])
    log_q = np.log([1.0, 3e-30])
    p, q = np.exp(ex.posterior._log_softmax(log_p)), np.exp(ex.posterior._log_softmax(log_q))
    assert np.isclose(ex.total_variation(p, q), 2e-30, rtol=1e-12)  # naively: 0
    assert ex.kl_divergence(ex.posterior._log_softmax(log_p), ex.posterior._log_softmax(log_q)) > 0
    with pytest.raises(ValueError, match="same shape"):
        ex.total_variation(np.ones((2, 3)) / 3, np.ones((3, 3)) / 3)


def test_kl_divergence_counts_nothing_where_p_has_no_mass():
    with np.errstate(divide="ignore"):
        log_p, log_q = np.log([0.5, 0.5, 0.0]), np.log([0.25, 0.75, 0.0])
    assert ex.kl_divergence(log_p, log_p) == 0.0  # 0 log 0 = 0, not 0 * NaN
    with np.errstate(all="raise"):  # and no invalid operation on the way
        kl = ex.kl_divergence(log_p, log_q)
        assert np.isclose(kl, 0.5 * np.log(2) + 0.5 * np.log(0.5 / 0.75), rtol=1e-15)
        assert ex.kl_divergence(log_p, log_q[::-1]) == np.inf  # q puts no mass where p does


def _torch_net(config, params):
    import torch

    from zoo.exchangeable import pyro_model

    return pyro_model._network(config, params, torch.zeros((), dtype=torch.float64))


def _jax_net(config, params):
    import jax.numpy as jnp

    import inference.backends.numpyro_backend  # noqa: F401 - JAX in 64-bit
    from zoo.exchangeable import numpyro_model

    return numpyro_model._network(config, params, jnp.zeros((), dtype=jnp.float64))


def _three_ways(config, params, x, lengths=None, leave_one_out=False):
    """The attention logits by numpy, the Pyro twin's torch module and the NumPyro twin's
    equinox module, from the same named parameters."""
    import equinox as eqx
    import jax.numpy as jnp
    import torch

    a = ex.attention_logits(params, x, config, lengths=lengths, leave_one_out=leave_one_out)
    tl = None if lengths is None else torch.as_tensor(lengths, dtype=torch.float64)
    b = _torch_net(config, params)(torch.as_tensor(x), tl, leave_one_out=leave_one_out)
    jl = None if lengths is None else jnp.asarray(lengths, dtype=jnp.float64)
    call = eqx.filter_jit(lambda net, x, jl: net(x, jl, leave_one_out=leave_one_out))
    c = call(_jax_net(config, params), jnp.asarray(x), jl)  # one compile, not one per op
    return a, b.detach().numpy(), np.asarray(c)


@pytest.mark.parametrize("options", [{}, {"embed_dim": 4, "num_heads": 2}, {"embed_dim": 2}])
def test_ideal_parameters_give_the_exact_posterior_at_every_length(options):
    """Uniform attention, evidence in the values, readout times N: q = P to rounding, in numpy,
    torch and JAX, for 1 to 512 tokens (embed_dim 2 < D = 3: the evidence goes in the values)."""
    config = config_for(dim=3, K=2, means=[[1.0, -0.5, 0.2], [0.3, 0.8, -1.0]], **options)
    params = ex.ideal_params(config)
    rng = np.random.default_rng(2)
    for n in (1, 4, 64, 512):
        x = ex.simulate(config, rng, 50, n)["x"]
        exact = ex.exact_log_posterior(x, config.means, config.scale, config.weights)
        # numpy at every length; the twins' modules at one (their agreement is tested below)
        every = (
            _three_ways(config, params, x) if n == 64 else [ex.attention_logits(params, x, config)]
        )
        for logits in every:
            log_q = logits - logsumexp(logits, axis=-1, keepdims=True)
            np.testing.assert_allclose(log_q, exact, atol=1e-9)
    w = ex.attention_weights(params, x, config)
    np.testing.assert_allclose(w, 1 / 512)  # Bayes weighs every token the same


def test_backends_share_parameter_names_and_agree(small):
    config, data = small
    rng = np.random.default_rng(3)
    params = {k: rng.normal(size=s) for k, s in ex.param_shapes(config).items()}
    names = {"posterior." + k for k in _torch_net(config, params).state_dict()}
    assert names == set(ex.param_shapes(config))
    x, lengths = data["x"], np.maximum(data["length"], 2)
    for kw in ({}, {"lengths": lengths}, {"leave_one_out": True, "lengths": lengths}):
        a, b, c = _three_ways(config, params, x, **kw)
        np.testing.assert_allclose(b, a, rtol=1e-10, atol=1e-10)
        np.testing.assert_allclose(c, a, rtol=1e-10, atol=1e-10)
    # Padding slots are masked out of the keys: their values do not matter.
    padded = np.where(np.arange(7)[:, None] < lengths[:, None, None], x, -50.0)
    np.testing.assert_allclose(
        ex.attention_logits(params, padded, config, lengths=lengths),
        ex.attention_logits(params, x, config, lengths=lengths),
    )


def _log_joints(config, data, values, params=None):
    """The Pyro and the NumPyro model's log-joint at the same values and parameters."""
    import jax
    import jax.numpy as jnp
    import pyro
    import torch
    from numpyro.infer.util import log_density

    back_p, back_n = inference.get_backend("pyro"), inference.get_backend("numpyro")
    cpu_p, cpu_n = back_p.resolve_device("cpu"), back_n.resolve_device("cpu")
    tdata = {k: back_p.asarray(v, cpu_p, "float64") for k, v in data.items()}
    tconfig = back_p.backend_config(config, cpu_p, "float64")
    pyro.clear_param_store()
    tvalues = {k: torch.as_tensor(v) for k, v in values.items()}
    model = pyro.condition(SPEC.build_model("pyro", tconfig, params), data=tvalues)
    trace = pyro.poutine.trace(model).get_trace(tdata, tconfig)
    with torch.no_grad():
        pyro_logp = float(trace.log_prob_sum())
    jdata = {k: back_n.asarray(v, cpu_n, "float64") for k, v in data.items()}
    jconfig = back_n.backend_config(config, cpu_n, "float64")
    model = SPEC.build_model("numpyro", jconfig, params)
    jvalues = {k: jnp.asarray(v) for k, v in values.items()}
    numpyro_logp = jax.jit(lambda d, v: log_density(model, (d, jconfig), {}, v)[0])(jdata, jvalues)
    return pyro_logp, float(numpyro_logp)


def test_twins_agree_for_every_objective(small):
    """The same log-joint in both twins, equal to its formula, for every objective, with padded
    sequences (the default objective's shared check is tests/test_conformance.py)."""
    config, data = small
    rng = np.random.default_rng(4)
    params = {k: rng.normal(size=s) for k, s in ex.param_shapes(config).items()}
    x, lengths, z = data["x"], data["length"], data["z"]
    # elbo, padded: log p(X, z) = sum over the real tokens only.
    pyro_logp, numpyro_logp = _log_joints(config, {"x": x, "length": lengths}, {"z": z})
    expected = 0.0
    for s in range(len(x)):
        cov = config.scale**2 * np.eye(3)
        tokens = x[s, : lengths[s]]
        expected += np.log(config.weights[z[s]])
        expected += multivariate_normal(config.means[z[s]], cov).logpdf(tokens).sum()
    assert np.isclose(pyro_logp, expected, rtol=1e-10)
    assert np.isclose(numpyro_logp, expected, rtol=1e-10)
    # supervised: log q(z_true | X) summed over sequences.
    sup = dataclasses.replace(config, objective="supervised")
    pyro_logp, numpyro_logp = _log_joints(sup, {"x": x, "length": lengths, "z": z}, {}, params)
    log_q = ex.attention_log_posterior(params, x, sup, lengths=lengths)
    assert np.isclose(pyro_logp, log_q[np.arange(len(z)), z].sum(), rtol=1e-10)
    assert np.isclose(numpyro_logp, pyro_logp, rtol=1e-10)
    # masked: sum over sequences and real tokens j of log sum_k q(k | X_{-j}) N(x_j; mu_k, s^2).
    masked = dataclasses.replace(config, objective="masked")
    lengths = np.maximum(lengths, 2)
    pyro_logp, numpyro_logp = _log_joints(masked, {"x": x, "length": lengths}, {}, params)
    log_q = ex.attention_log_posterior(params, x, masked, lengths=lengths, leave_one_out=True)
    log_lik = np.stack(
        [multivariate_normal(m, config.scale**2 * np.eye(3)).logpdf(x) for m in config.means], -1
    )
    per_token = logsumexp(log_q + log_lik, axis=-1)
    expected = np.where(np.arange(7) < lengths[:, None], per_token, 0.0).sum()
    assert np.isclose(pyro_logp, expected, rtol=1e-10)
    assert np.isclose(numpyro_logp, expected, rtol=1e-10)


@pytest.fixture(scope="module")
def trained():
    """The three objectives fitted on Pyro (100 steps) on sequences of 4 to 16 tokens."""
    config = config_for(K=3)
    data = ex.simulate(config, np.random.default_rng(5), 256, 16, min_length=4)
    fits = {}
    with warnings.catch_warnings():  # Pyro's, for objectives with nothing to enumerate
        warnings.filterwarnings("ignore", message="TraceEnum_ELBO found no sample sites")
        for objective in ex.OBJECTIVES:
            d = {k: v for k, v in data.items() if k != "z" or objective == "supervised"}
            fits[objective] = inference.fit(
                "exchangeable_tokens", d, "svi", "pyro", num_steps=100, batch_size=64,
                lr=0.05, progress=False, K=3, objective=objective,
            )  # fmt: skip
    return config, data, fits


def test_every_objective_trains_the_attention_towards_the_exact_posterior(trained):
    config, _, fits = trained
    lengths = [4, 16, 64]
    untrained = ex.posterior_error(_random_params(config), config, lengths, 300)["tv"]
    for objective, res in fits.items():
        h = res.history["objective"]
        assert np.all(np.isfinite(h)) and h[-15:].mean() > h[:15].mean(), objective
        tv = ex.posterior_error(res.raw_params, config, lengths, 300)["tv"]
        assert tv[1] < 0.05 and tv[1] < untrained[1] / 3, (objective, tv, untrained)
        assert tv[2] < tv[0], (objective, tv)  # the error falls as N grows


def _random_params(config, seed=6):
    rng = np.random.default_rng(seed)
    return {k: rng.normal(size=s) for k, s in ex.param_shapes(config).items()}


def test_error_falls_with_length_and_a_length_blind_readout_does_not():
    """Slightly wrong parameters (ideal + noise): the error falls with N, towards zero. The ideal
    parameters read out at a fixed N0 = 16 whatever N is are exact at 16 only, and level off at
    the wrong-component mass of a posterior tempered to 16 tokens."""
    config = config_for(K=4, separation=0.75)
    ideal = ex.ideal_params(config)
    rng = np.random.default_rng(7)
    noisy = {k: v + 0.02 * rng.normal(size=v.shape) for k, v in ideal.items()}
    lengths = [4, 16, 64, 256]
    tv = ex.posterior_error(noisy, config, lengths, 500)["tv"]
    assert np.all(np.diff(tv) < 0) and tv[-1] < 1e-30, tv
    assert ex.posterior_error(ideal, config, lengths, 500)["tv"].max() < 1e-12
    blind = ex.posterior_error(ideal, config, lengths, 500, readout_length=16)["tv"]
    assert blind[1] < 1e-12 and min(blind[0], blind[2], blind[3]) > 1e-4, blind


def test_warm_start_on_the_other_backend(trained):
    """A Pyro fit's raw_params start a NumPyro fit at the same parameters and the same
    (deterministic) supervised objective."""
    config, data, fits = trained
    res = fits["supervised"]
    again = inference.fit(
        "exchangeable_tokens", data, "svi", "numpyro", init=res.raw_params, num_steps=1,
        lr=1e-12, progress=False, K=3, objective="supervised",
    )  # fmt: skip
    for k, v in res.raw_params.items():
        np.testing.assert_allclose(again.raw_params[k], v, rtol=1e-9, atol=1e-12)
    log_q = ex.attention_log_posterior(res.raw_params, data["x"], config, lengths=data["length"])
    assert np.isclose(again.objective, log_q[np.arange(256), data["z"]].sum(), rtol=1e-9)


@pytest.mark.filterwarnings(NO_ENUM_WARNING)
def test_bad_input_is_a_clear_error(trained):
    config, data, fits = trained
    x = data["x"]
    fit = dict(algorithm="svi", backend="pyro", num_steps=1, progress=False)
    with pytest.raises(ValueError, match="must have 3 dimensions"):
        inference.fit("exchangeable_tokens", {"x": x[0]}, **fit)
    with pytest.raises(ValueError, match=r"means must be a finite \(K, D\) array with D = 2"):
        inference.fit("exchangeable_tokens", {"x": x}, means=np.zeros((3, 4)), **fit)
    with pytest.raises(ValueError, match="one label per sequence"):
        inference.fit("exchangeable_tokens", {"x": x, "z": data["z"][:-1]}, **fit)
    with pytest.raises(ValueError, match=r"data\['length'\] must hold lengths in \[1, 16\]"):
        inference.fit("exchangeable_tokens", {"x": x, "length": data["length"] + 40}, **fit)
    with pytest.raises(ValueError, match="needs the true latents"):
        inference.fit("exchangeable_tokens", {"x": x}, objective="supervised", **fit)
    with pytest.raises(ValueError, match="used only by objective='supervised'"):
        inference.fit("exchangeable_tokens", {"x": x, "z": data["z"]}, **fit)
    with pytest.raises(ValueError, match=r"labels in \[0, 2\]"):
        bad = {"x": x, "z": data["z"] + 3}
        inference.fit("exchangeable_tokens", bad, objective="supervised", **fit)
    with pytest.raises(ValueError, match="at least 2 tokens"):
        inference.fit("exchangeable_tokens", {"x": x[:, :1]}, objective="masked", **fit)
    with pytest.raises(ValueError, match="objective must be one of"):
        inference.fit("exchangeable_tokens", {"x": x}, objective="mlm", **fit)
    with pytest.raises(ValueError, match="divisible by num_heads"):
        inference.fit("exchangeable_tokens", {"x": x}, embed_dim=3, num_heads=2, **fit)
    with pytest.raises(ValueError, match="takes data key 'x'"):
        inference.fit("exchangeable_tokens", {"x": x, "y": x}, **fit)
    with pytest.raises(ValueError, match="do not fit this architecture"):
        inference.fit("exchangeable_tokens", {"x": x}, init=fits["elbo"].raw_params, K=4, **fit)
    # The numpy functions: wrong rank, token dimension, lengths, architecture.
    with pytest.raises(ValueError, match=r"shape \(N, D\) .* or \(S, N, D\)"):
        ex.exact_posterior(x[..., None], config.means, 1.0)
    with pytest.raises(ValueError, match="D = 2 features per token"):
        ex.attention_posterior(fits["elbo"].raw_params, np.zeros((5, 4, 3)), config)
    with pytest.raises(ValueError, match=r"lengths must be integers of shape \(256,\)"):
        ex.exact_posterior(x, config.means, 1.0, lengths=data["length"][:10])
    with pytest.raises(ValueError, match=r"lengths must lie in \[1, 16\]"):
        ex.attention_posterior(fits["elbo"].raw_params, x, config, lengths=data["length"] * 0)
    with pytest.raises(ValueError, match="leave_one_out needs at least 2 tokens"):
        ex.attention_logits(fits["elbo"].raw_params, x[:, :1], config, leave_one_out=True)
    with pytest.raises(ValueError, match="embed_dim >= min"):
        ex.ideal_params(config_for(dim=3, K=3, embed_dim=2))
    with pytest.raises(
        ValueError, match=r"data\['length'\] must hold integer or unsigned integer numbers"
    ):
        SPEC.validate_data({"x": x, "length": data["length"].astype(float)})
    # Evaluation data must fit the fitted model.
    with pytest.raises(ValueError, match="2 features per token"):
        fits["elbo"].elbo({"x": np.zeros((3, 4, 5))})


def test_evaluation_and_saved_fit(tmp_path, trained):
    """Per-sequence ELBO and importance-weighted log p(X) (every latent in the data plate). With
    the ideal guide q = P, every importance weight is log p(X): both are exact, to rounding."""
    config, data, fits = trained
    x, lengths = data["x"][:40], data["length"][:40]
    cov = config.scale**2 * np.eye(2)
    exact = np.array(
        [
            logsumexp(
                [
                    np.log(config.weights[k])
                    + multivariate_normal(config.means[k], cov).logpdf(x[s, : lengths[s]]).sum()
                    for k in range(3)
                ]
            )
            for s in range(40)
        ]
    )
    ideal = dataclasses.replace(fits["elbo"], raw_params=ex.ideal_params(config))
    new = {"x": x, "length": lengths}
    np.testing.assert_allclose(ideal.elbo(new, num_samples=3), exact, rtol=1e-10)
    np.testing.assert_allclose(ideal.log_marginal_likelihood(new, num_samples=5), exact, rtol=1e-10)
    gap = exact - fits["elbo"].elbo(new, num_samples=50)  # KL(q || P) >= 0, up to MC noise
    assert -0.02 < gap.mean() < 0.1, gap.mean()
    path = tmp_path / "fit.zoo"
    fits["elbo"].save(path)
    loaded = inference.load(path)
    np.testing.assert_array_equal(loaded.config.means, config.means)
    assert loaded.config.objective == "elbo"
    for k, v in fits["elbo"].raw_params.items():
        np.testing.assert_array_equal(loaded.raw_params[k], v)


def _example():
    import importlib.util
    import pathlib

    path = pathlib.Path(__file__).parents[1] / "examples" / "exchangeable_attention.py"
    spec = importlib.util.spec_from_file_location("exchangeable_attention", path)
    example = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(example)
    return example


def test_example_slopes_leave_out_the_point_where_the_readout_is_exact():
    example = _example()
    lengths = [4, 8, 16, 32, 64, 128, 256, 512]
    tv = [0.28, 0.134, 5.04e-17, 0.0742, 0.0729, 0.0538, 0.0451, 0.0404]  # readout fixed at 16
    others = [i for i, n in enumerate(lengths) if n != 16]
    expected = np.polyfit(np.log(lengths)[others], np.log(tv)[others], 1)[0]
    slope = example.loglog_slope(lengths, tv, exact_at=[16])
    assert np.isclose(slope, expected, rtol=1e-12) and -0.4 < slope < -0.3  # with it: +1.46
    local = example.local_slopes(lengths, tv, exact_at=[16])
    assert local[1] is None and local[2] is None and np.isclose(local[0], np.log2(0.134 / 0.28))
    assert example.loglog_slope([16, 32], [5e-17, 0.07], exact_at=[16]) is None
    assert np.isclose(example.loglog_slope([4, 8], [0.2, 0.1]), -1.0)  # nothing left out
    rows = {"a": {"tv": [0.2, 5e-17], "slope": None}, "b": {"tv": [0.2, 0.1], "slope": -1.0}}
    assert example.markdown_table([16, 32], rows).endswith("| log-log slope | n/a | -1.00 |\n")


def test_example_quick(tmp_path, capsys):
    results = _example().main(["--quick", "--out", str(tmp_path)])
    for name in ("error_vs_length.md", "error_vs_length.png", "results.json"):
        assert (tmp_path / name).stat().st_size > 0
    rows = results["rows"]
    assert max(rows["ideal"]["tv"]) < 1e-12
    for objective in ex.OBJECTIVES:
        tv = rows[f"trained: {objective}"]["tv"]
        assert np.all(np.isfinite(tv)) and tv[-1] < tv[0], (objective, tv)
    fixed = rows["ideal, readout at N=4"]  # lengths 4, 16, 64: exact at 4, fitted over 16 and 64
    assert fixed["tv"][0] < 1e-12
    assert np.isclose(fixed["slope"], np.log(fixed["tv"][2] / fixed["tv"][1]) / np.log(4))
    assert fixed["local_slopes"][0] is None
    json.dumps(results, allow_nan=False)  # slopes left undefined are null, not NaN
    assert "slope of log TV vs log N, trained: elbo" in capsys.readouterr().out
