"""The Bernoulli mixture: MAP-EM on both backends, SVI's objective equal to EM's, and the
posterior predictive as attention against the exact Bayes formula."""

import json
import runpy
from pathlib import Path

import numpy as np
import pytest
from scipy.special import logsumexp

import inference
import zoo
from zoo import bernoulli_mixture as bm
from zoo.bernoulli_mixture import closed_form, posterior

SPEC = zoo.get_model("bernoulli_mixture")
K = 4


@pytest.fixture(scope="module")
def data():
    return SPEC.make_data(np.random.default_rng(0), 300)["x"]


@pytest.fixture(scope="module")
def resp(data):
    return np.random.default_rng(1).dirichlet(np.ones(K), size=len(data))


def _em(x, resp, backend, steps=30, **options):
    options.setdefault("tol", 0.0)
    return inference.fit(
        "bernoulli_mixture",
        {"x": x},
        algorithm="em",
        backend=backend,
        K=resp.shape[1],
        init=resp,
        num_steps=steps,
        progress=False,
        **options,
    )


@pytest.fixture(scope="module")
def em_fits(data, resp):
    return {b: _em(data, resp, b) for b in ("pyro", "numpyro")}


def test_em_backends_agree_and_never_decrease(em_fits):
    h = {b: r.history["objective"] for b, r in em_fits.items()}
    np.testing.assert_allclose(h["pyro"], h["numpyro"], rtol=1e-10)
    for b, r in em_fits.items():
        assert np.all(np.diff(h[b]) >= -1e-9 * np.abs(h[b][1:])), b
        assert h[b][-1] > h[b][0] + 1.0
        w, p = r.params["weights"], r.params["probs"]
        assert w.shape == (K,) and p.shape == (K, 16)
        assert np.isclose(w.sum(), 1.0) and (w > 0).all()
        assert (p > 0).all() and (p < 1).all()
    for key in ("weights", "probs"):
        np.testing.assert_allclose(
            em_fits["pyro"].params[key], em_fits["numpyro"].params[key], rtol=1e-10
        )


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_em_objective_is_the_log_joint_with_every_constant(data, resp, backend):
    """The objective ``update`` reports is scipy's log p(X, weights, probs) at the parameters it
    started from."""
    back = inference.get_backend(backend)
    dev = back.resolve_device("cpu")
    config = SPEC.prepare({"x": data}, K=K, weight_concentration_prior=1.7, probs_prior_b=3.0)
    bconfig = back.backend_config(config, dev, "float64")
    cache = closed_form.init_cache(back.asarray(data, dev, "float64"), bconfig, back.ops)
    state = closed_form.init_state(back.asarray(resp, dev, "float64"), cache, bconfig, back.ops)
    for _ in range(3):
        raw = {
            k: back.to_numpy(v) for k, v in closed_form.raw_params(state, cache, back.ops).items()
        }
        state, objective = closed_form.update(state, cache, bconfig, back.ops)
        np.testing.assert_allclose(
            float(objective), posterior.log_joint(raw, data, config), rtol=1e-12
        )


def test_em_converges_to_a_map_point(data, resp):
    """At convergence a small move in any direction (logit space) lowers the log joint."""
    res = _em(data, resp, "numpyro", steps=2000, tol=1e-13)
    config, w, p = res.config, res.params["weights"], res.params["probs"]
    best = posterior.log_joint(res.params, data, config)
    rng = np.random.default_rng(2)
    for _ in range(20):
        dw, dp = 1e-3 * rng.normal(size=w.shape), 1e-3 * rng.normal(size=p.shape)
        w2 = np.exp(np.log(w) + dw)
        p2 = 1 / (1 + np.exp(-(np.log(p / (1 - p)) + dp)))
        assert posterior.log_joint({"weights": w2 / w2.sum(), "probs": p2}, data, config) < best


def _svi_elbo(backend, x, config, raw):
    """The enumerated ELBO of the model with the ``enum`` (Delta) guide at ``raw``."""
    back = inference.get_backend(backend)
    dev = back.resolve_device("cpu")
    twin = SPEC.twin(backend)
    bdata = {"x": back.asarray(x, dev, "float64")}
    bconfig = back.backend_config(config, dev, "float64")
    guide = twin.make_guide("enum", bconfig, raw)
    if backend == "pyro":
        import pyro
        from pyro.infer import TraceEnum_ELBO, config_enumerate

        pyro.clear_param_store()
        loss = TraceEnum_ELBO(max_plate_nesting=1).loss(
            config_enumerate(twin.model), guide, bdata, bconfig
        )
    else:
        import jax
        from numpyro.contrib.funsor import config_enumerate
        from numpyro.infer import TraceEnum_ELBO

        # jit: funsor's eager enumeration costs seconds per first call, the compiled one < 1 s
        loss = jax.jit(
            lambda d: TraceEnum_ELBO(max_plate_nesting=1).loss(
                jax.random.PRNGKey(0), {}, config_enumerate(twin.model), guide, d, bconfig
            )
        )(bdata)
    return -float(loss)


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_svi_objective_equals_em_objective(data, em_fits, backend):
    """SVI with z enumerated and Delta factors on weights and probs maximises EM's objective."""
    res = em_fits[backend]
    config = res.config
    np.testing.assert_allclose(
        _svi_elbo(backend, data, config, res.raw_params),
        posterior.log_joint(res.raw_params, data, config),
        rtol=1e-10,
    )


def test_svi_fit_starts_at_em_objective(data):
    """An SVI fit's first objective is EM's first: both start from one M-step."""
    common = dict(K=K, num_steps=2, progress=False, backend="pyro", init="random")
    svi = inference.fit("bernoulli_mixture", {"x": data}, algorithm="svi", **common)
    em = inference.fit("bernoulli_mixture", {"x": data}, algorithm="em", tol=0.0, **common)
    np.testing.assert_allclose(svi.history["objective"][0], em.history["objective"][0], rtol=1e-10)


@pytest.mark.parametrize("dtype", [bool, np.uint8, np.int32, np.float32, np.float64])
def test_binary_data_of_any_dtype_gives_the_same_fit(data, resp, dtype):
    ref = _em(data.astype(np.float64), resp, "pyro", steps=3)
    res = _em(data.astype(dtype), resp, "pyro", steps=3)
    np.testing.assert_allclose(res.history["objective"], ref.history["objective"], rtol=1e-12)


def test_bad_data_and_options_are_clear_errors(data):
    x = data.astype(float)
    x[3, 5] = 0.5
    with pytest.raises(ValueError, match=r"must be binary .* got 1 entries that are not"):
        inference.fit("bernoulli_mixture", {"x": x}, algorithm="em", K=2, progress=False)
    with pytest.raises(ValueError, match="must be binary"):
        SPEC.validate_data({"x": 2 * data})
    x[3, 5] = np.nan
    with pytest.raises(ValueError, match="NaN or inf"):
        SPEC.validate_data({"x": x})
    with pytest.raises(
        ValueError,
        match=r"must hold floating-point or integer or unsigned integer or boolean numbers",
    ):
        SPEC.validate_data({"x": data.astype(complex)})
    for option in ("weight_concentration_prior", "probs_prior_a", "probs_prior_b"):
        with pytest.raises(ValueError, match=rf"{option} must be a float in the range \(1, inf\)"):
            SPEC.prepare({"x": data}, K=2, **{option: 1.0})
    with pytest.raises(ValueError, match="exceeds the number of data points"):
        SPEC.prepare({"x": data[:3]}, K=4)


def test_fit_saves_loads_and_scores_new_data(tmp_path, em_fits, data):
    res = em_fits["numpyro"]
    res.save(tmp_path / "fit.zoo")
    back = inference.load(tmp_path / "fit.zoo")
    assert back.config == res.config
    for key in ("weights", "probs"):
        np.testing.assert_array_equal(back.params[key], res.params[key])
    lml = back.log_marginal_likelihood(data[:10].astype(bool), num_samples=3)
    ref = bm.log_prob_observed(res.params, data[:10])
    np.testing.assert_allclose(lml, ref, rtol=1e-12)
    with pytest.raises(ValueError, match="must have 16 columns, as the fitted model"):
        back.log_marginal_likelihood(data[:10, :8])


# ---------------------------------------------------------------------------------------------
# The posterior predictive as attention


def _random_problem(rng, n=25, k=5, d=12):
    params = {"weights": rng.dirichlet(np.ones(k)), "probs": rng.uniform(0.02, 0.98, (k, d))}
    x = (rng.random((n, d)) < 0.4).astype(np.uint8)
    mask = rng.random((n, d)) < 0.5
    mask[0] = False  # nothing observed: the prior
    mask[1] = True  # everything observed
    return params, x, mask


def _bayes(params, x, mask):
    """The exact posterior over components, predictive mean and log p(x_M | x_O), one image at a
    time with boolean indexing and scipy's logsumexp."""
    w, p = params["weights"], params["probs"]
    n, d = x.shape
    post, mean, lp_missing = np.empty((n, len(w))), np.empty((n, d)), np.empty(n)
    for i in range(n):
        o, m = mask[i], ~mask[i]
        lik = np.where(x[i] == 1, p, 1 - p)  # (K, D): p(x_id | z = k)
        log_joint_o = np.log(w) + np.log(lik[:, o]).sum(1)
        post[i] = np.exp(log_joint_o - logsumexp(log_joint_o))
        mean[i] = post[i] @ p
        lp_missing[i] = logsumexp(log_joint_o + np.log(lik[:, m]).sum(1)) - logsumexp(log_joint_o)
    return post, mean, lp_missing


def _np(a):
    return a.detach().cpu().numpy() if hasattr(a, "detach") else np.asarray(a)


@pytest.fixture(scope="module", autouse=True)
def _jax_x64():
    import inference.backends.numpyro_backend  # noqa: F401  (turns on JAX's 64-bit mode)


@pytest.mark.parametrize("backend", ["numpy", "torch", "jax"])
def test_completion_is_the_exact_bayes_posterior_predictive(backend):
    rng = np.random.default_rng(3)
    for _ in range(3):
        params, x, mask = _random_problem(rng)
        post, mean, lp_missing = _bayes(params, x, mask)
        x_nan = np.where(mask, x, np.nan)  # unobserved pixels are ignored, NaN or not
        res = bm.complete(params, x_nan, mask, backend=backend, fill_observed=False)
        np.testing.assert_allclose(_np(res.weights), post, rtol=1e-6, atol=1e-12)
        np.testing.assert_allclose(_np(res.mean), mean, rtol=1e-6, atol=1e-12)
        filled = _np(bm.complete(params, x, mask, backend=backend).mean)
        np.testing.assert_array_equal(filled[mask], x[mask])
        np.testing.assert_allclose(filled[~mask], mean[~mask], rtol=1e-6)
        np.testing.assert_allclose(post[0], params["weights"], rtol=1e-12)
        lp = _np(bm.log_prob_missing(params, x, mask, backend=backend))
        np.testing.assert_allclose(lp, lp_missing, rtol=1e-6, atol=1e-9)
        assert lp[1] == 0.0
        full = _np(bm.log_prob_observed(params, x, backend=backend))
        np.testing.assert_allclose(
            full, posterior.mixture_log_likelihood(params["weights"], params["probs"], x)
        )


@pytest.mark.parametrize("backend", ["numpy", "torch", "jax"])
def test_completion_broadcasts_one_mask_and_checks_inputs(backend):
    rng = np.random.default_rng(4)
    params, x, _ = _random_problem(rng, n=6)
    mask = rng.random(12) < 0.5
    res = bm.complete(params, x.astype(bool), mask, backend=backend, fill_observed=False)
    post, mean, _ = _bayes(params, x, np.broadcast_to(mask, x.shape))
    np.testing.assert_allclose(_np(res.mean), mean, rtol=1e-6)
    bad = x.astype(float)
    bad[2, np.flatnonzero(mask)[0]] = 0.3
    with pytest.raises(ValueError, match="binary .* at every observed pixel"):
        bm.complete(params, bad, mask, backend=backend)
    with pytest.raises(ValueError, match="boolean observed_mask"):
        bm.complete(params, x, mask.astype(int), backend=backend)
    with pytest.raises(ValueError, match=r"x of shape \(\.\.\., D\) with D = 12"):
        bm.complete(params, x[:, :5], mask[:5], backend=backend)
    with pytest.raises(ValueError, match="strictly inside"):
        bm.complete({**params, "probs": np.ones((5, 12))}, x, mask, backend=backend)


@pytest.mark.parametrize("backend", ["numpy", "torch", "jax", "jax out of 64-bit mode"])
def test_float32_completion_takes_the_logs_before_the_cast(backend):
    """A probability near 1 cast to float32 first would move log(1 - p) by 0.013."""
    import contextlib

    import jax

    scope = jax.enable_x64(False) if backend.endswith("mode") else contextlib.nullcontext()
    params = {"weights": np.array([0.5, 0.5]), "probs": np.array([[1 - 1e-6, 0.5], [0.5, 0.5]])}
    x, mask = np.zeros((1, 2)), np.array([True, False])
    with scope:
        name = backend.split()[0]
        _, keys, bias, values = bm.attention_inputs(params, x, mask, name, dtype="float32")
        lp = bm.log_prob_observed(params, x, mask, backend=name, dtype="float32")
        assert _np(keys).dtype == _np(lp).dtype == np.float32
    ref_keys = np.concatenate([np.log(params["probs"]), np.log1p(-params["probs"])], axis=1)
    np.testing.assert_allclose(_np(keys), ref_keys, rtol=1e-7)
    np.testing.assert_allclose(_np(bias), np.log(params["weights"]), rtol=1e-7)
    np.testing.assert_array_equal(_np(values), params["probs"].astype(np.float32))
    np.testing.assert_allclose(_np(lp), np.log(0.5 * 1e-6 + 0.25), rtol=1e-6)
    assert abs(_np(keys)[0, 2] - np.log(1e-6)) < 1e-5  # cast first: -13.8023 for -13.8155


@pytest.mark.parametrize("backend", ["numpy", "torch", "jax"])
def test_h_mixtures_over_h_pixel_groups_are_multi_head_attention(backend):
    rng = np.random.default_rng(5)
    H, k, G = 3, 4, 5
    groups = rng.permutation(H * G).reshape(H, G)
    params = {
        "weights": rng.dirichlet(np.ones(k), size=H),
        "probs": rng.uniform(0.02, 0.98, (H, k, G)),
    }
    x = (rng.random((8, H * G)) < 0.5).astype(float)
    mask = rng.random((8, H * G)) < 0.6
    res = bm.multi_head_complete(params, groups, x, mask, backend=backend, fill_observed=False)
    assert _np(res.mean).shape == (8, H * G) and _np(res.weights).shape == (8, H, k)
    for h in range(H):
        head = {"weights": params["weights"][h], "probs": params["probs"][h]}
        post, mean, _ = _bayes(head, x[:, groups[h]], mask[:, groups[h]])
        np.testing.assert_allclose(_np(res.weights)[:, h], post, rtol=1e-6, atol=1e-12)
        np.testing.assert_allclose(_np(res.mean)[:, groups[h]], mean, rtol=1e-6)
    with pytest.raises(ValueError, match="partition the pixels"):
        bm.multi_head_complete(params, np.zeros((H, G), dtype=int), x, mask, backend=backend)


def test_multi_head_parameters_run_in_the_torch_module():
    """The mixtures' projections loaded into ``torch_attention.MultiHeadAttention``."""
    import torch

    from zoo.attention import torch_attention

    rng = np.random.default_rng(6)
    groups = np.arange(8).reshape(2, 4)
    params = {
        "weights": rng.dirichlet(np.ones(3), size=2),
        "probs": rng.uniform(0.1, 0.9, (2, 3, 4)),
    }
    mha = bm.multi_head_parameters(params, groups)
    module = torch_attention.MultiHeadAttention(16, 2, kdim=3, vdim=3, out_dim=8, bias=False)
    module.load_state_dict({k: torch.as_tensor(v, dtype=torch.float32) for k, v in mha.items()})
    x = (rng.random((5, 8)) < 0.5).astype(np.float32)
    mask = rng.random((5, 8)) < 0.5
    query = torch.as_tensor(np.concatenate([x * mask, (1 - x) * mask], -1))[:, None]
    tokens = torch.eye(3)
    out = module(
        query,
        tokens,
        tokens,
        bias=torch.log(torch.as_tensor(params["weights"], dtype=torch.float32))[:, None],
        scale=1.0,
    )
    ref = bm.multi_head_complete(params, groups, x, mask, fill_observed=False).mean
    np.testing.assert_allclose(out[:, 0].detach().numpy(), ref, rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------------------------------------
# The MNIST example, quick mode, on the real data


def test_mnist_completion_example_quick(tmp_path, capsys, monkeypatch, data_dir):
    monkeypatch.setenv("ZOO_OFFLINE", "1")
    script = Path(__file__).resolve().parents[1] / "examples" / "mnist_completion.py"
    example = runpy.run_path(str(script), run_name="mnist_completion")  # in-process: no re-imports
    example["main"](["--quick", "--data-dir", str(data_dir), "--out", str(tmp_path), "--json"])
    report = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["results"][0]
    assert np.isfinite(report["test_log_lik_per_image"]) and report["test_log_lik_per_image"] < 0
    assert report["log_p_lower_given_upper_per_image"] > report["test_log_lik_per_image"]
    assert report["hard_log_p_lower_per_image"] < report["log_p_lower_given_upper_per_image"]
    assert (tmp_path / "completions.png").is_file()
    # the trained cross-attention baseline is scored on the same objective
    assert report["xattn_log_p_lower_given_upper_per_image"] < 0
    assert 0 <= report["xattn_pixel_error"] <= 1
    assert report["complete_s"] >= 0


def _tied_layer(params, mask):
    """A CrossAttentionCompleter holding a mixture's keys, bias and values (untrained)."""
    import torch

    from zoo.bernoulli_mixture.cross_attention import CrossAttentionCompleter

    w, p = params["weights"], params["probs"]
    layer = CrossAttentionCompleter(mask, len(w))
    keys = np.concatenate([np.log(p[:, mask]), np.log1p(-p[:, mask])], axis=1)
    values = np.log(p[:, ~mask]) - np.log1p(-p[:, ~mask])
    layer.params = {
        name: torch.tensor(v, dtype=torch.float32)
        for name, v in {"keys": keys, "bias": np.log(w), "value_logits": values}.items()
    }
    return layer


def test_cross_attention_layer_with_tied_weights_is_the_mixture():
    rng = np.random.default_rng(5)
    params, x, _ = _random_problem(rng, n=40)
    mask = np.arange(12) < 7
    layer = _tied_layer(params, mask)
    np.testing.assert_allclose(
        layer.log_prob_missing(x), bm.log_prob_missing(params, x, mask), rtol=1e-5, atol=1e-5
    )
    mean, weights = layer.complete(x)
    reference = bm.complete(params, x, mask)
    np.testing.assert_allclose(mean, reference.mean[:, ~mask], atol=1e-5)
    np.testing.assert_allclose(weights, reference.weights, atol=1e-5)


def test_cross_attention_training_improves_its_objective_and_checks_inputs():
    from zoo.bernoulli_mixture.cross_attention import CrossAttentionCompleter

    x = bm.make_data(np.random.default_rng(6), 600)["x"]
    mask = np.arange(16) < 8
    layer = CrossAttentionCompleter(mask, 3).fit(x, epochs=15, batch_size=100, lr=0.05)
    assert layer.history[-1] > layer.history[0] + 0.5
    again = CrossAttentionCompleter(mask, 3).fit(x, epochs=15, batch_size=100, lr=0.05)
    np.testing.assert_array_equal(layer.log_prob_missing(x), again.log_prob_missing(x))
    with pytest.raises(RuntimeError, match="fit"):
        CrossAttentionCompleter(mask, 3).log_prob_missing(x)
    with pytest.raises(ValueError, match="binary"):
        CrossAttentionCompleter(mask, 3).fit(x * 2.0)
    with pytest.raises(ValueError, match="shape"):
        CrossAttentionCompleter(mask, 3).fit(x[:, :5])
    with pytest.raises(ValueError, match="observed_mask"):
        CrossAttentionCompleter(np.ones(16, bool), 3)
    with pytest.raises(ValueError, match="K"):
        CrossAttentionCompleter(mask, 0)


@pytest.mark.parametrize("method", ["log_prob_missing", "complete"])
def test_a_trained_cross_attention_layer_scores_binary_images_of_its_width_only(method):
    """Scores are log-probabilities of 0/1 pixels: grey levels gave +3916 nats on MNIST's
    0..255, and rows wider than the mask were read as if cut to it."""
    params, x, _ = _random_problem(np.random.default_rng(5), n=10)
    mask = np.arange(12) < 7
    score = getattr(_tied_layer(params, mask), method)
    with pytest.raises(ValueError, match="binary"):
        score(x * 255.0)
    with pytest.raises(ValueError, match=r"shape \(N, 12\)"):
        score(np.concatenate([x, x[:, :3]], axis=1))
    with pytest.raises(ValueError, match=r"shape \(N, 12\)"):
        score(x[:, :5])


def test_random_from_data_init_assigns_each_point_to_its_nearest_drawn_centre():
    from zoo.initialization import initial_responsibilities

    x = bm.make_data(np.random.default_rng(7), 200)["x"].astype(float)
    resp = initial_responsibilities(x, 4, "random_from_data", seed=3)
    assert resp.shape == (200, 4) and set(np.unique(resp)) == {0.0, 1.0}
    np.testing.assert_array_equal(resp.sum(1), 1.0)
    np.testing.assert_array_equal(resp, initial_responsibilities(x, 4, "random_from_data", 3))
    centres = x[np.random.default_rng(3).choice(200, size=4, replace=False)]
    distances = ((x[:, None, :] - centres[None]) ** 2).sum(-1)
    np.testing.assert_array_equal(
        distances[np.arange(200), resp.argmax(1)], distances.min(1)
    )  # ties may pick another centre at the same distance
    res = inference.fit(
        "bernoulli_mixture",
        {"x": x},
        algorithm="em",
        backend="pyro",
        K=3,
        init="random_from_data",
        progress=False,
    )
    assert res.converged


def test_dynamic_binarization_fits_grey_levels(data):
    grey = np.clip(data * 0.8 + 0.1, 0.0, 1.0)  # not binary: drawn anew each epoch
    res = inference.fit(
        "bernoulli_mixture",
        {"x": grey},
        "svi",
        K=3,
        num_steps=3,
        dynamic_binarization=True,
        progress=False,
    )
    assert np.isfinite(res.objective)
    with pytest.raises(ValueError, match="dynamic_binarization=True needs data"):
        inference.fit("bernoulli_mixture", {"x": grey * 2}, "svi", K=3, dynamic_binarization=True)


def test_a_float32_em_whose_probability_rounds_to_one_says_what_to_change():
    """A pixel on in every point of a component, with probs_prior_b at 1.001, gets a MAP
    probability 1.7e-8 short of 1, which float32 rounds to 1: the error says to use float64 or
    raise probs_prior_b (both priors were already above 1, which the advice used to ask for)."""
    x = np.random.default_rng(0).integers(0, 2, size=(60_000, 5)).astype(np.uint8)
    x[:, 0] = 1
    options = dict(K=2, dtype="float32", probs_prior_a=1.001, probs_prior_b=1.001, num_steps=5)
    with pytest.raises(inference.NonFiniteObjectiveError) as err:
        inference.fit("bernoulli_mixture", {"x": x}, "em", "numpyro", progress=False, **options)
    assert "Use float64, or raise probs_prior_b further above 1" in str(err.value)
