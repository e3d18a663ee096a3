"""The VAE twins: minibatch SVI, evaluation (ELBO, importance-weighted log p(x)), backend parity,
checkpoints and bad input. Small binary 8x8 digits and tiny networks keep it fast."""

import dataclasses
import warnings

import numpy as np
import pytest

import inference
import zoo
from inference.persistence.checkpoint import CheckpointError

SMALL = dict(latent_dim=3, hidden=(24,))


@pytest.fixture(scope="module")
def digits():
    return zoo.get_model("vae").make_data(np.random.default_rng(0), 600)["x"]


@pytest.fixture(scope="module")
def pyro_fit(digits):
    return inference.fit(
        "vae", {"x": digits}, "svi", "pyro", num_steps=120, batch_size=50, lr=3e-3,
        progress=False, **SMALL,
    )  # fmt: skip


def test_minibatch_svi_learns_on_both_backends(digits):
    for backend in ("pyro", "numpyro"):
        res = inference.fit(
            "vae", {"x": digits}, "svi", backend, num_steps=120, batch_size=50, lr=3e-3,
            progress=False, **SMALL,
        )  # fmt: skip
        h = res.history["objective"] / len(digits)
        assert np.all(np.isfinite(h)) and h[-20:].mean() > h[:20].mean() + 2.0, backend
        assert res.raw_params["decoder.logits.weight"].shape == (64, 24)
        assert res.raw_params["encoder.body.hidden.0.weight"].dtype == np.float32


def test_same_seed_same_result(digits):
    for backend in ("pyro", "numpyro"):
        a, b = (
            inference.fit(
                "vae",
                {"x": digits},
                "svi",
                backend,
                num_steps=15,
                batch_size=50,
                progress=False,
                seed=3,
                **SMALL,
            )  # fmt: skip
            for _ in range(2)
        )
        np.testing.assert_array_equal(a.history["objective"], b.history["objective"])


# NumPyro's case compiles the VAE's SVI; its twin's plate scaling is also checked in the default
# run on the attention classifier (tests/test_bayesian_attention_classifier.py).
@pytest.mark.parametrize("backend", ["pyro", pytest.param("numpyro", marks=pytest.mark.slow)])
def test_data_plate_scales_a_minibatch_to_the_full_data(digits, backend):
    """log p(x_batch, z) with num_data=N is N/B times the unscaled one."""
    spec = zoo.get_model("vae")
    back = inference.get_backend(backend)
    dev = back.resolve_device("cpu")
    config = back.backend_config(spec.prepare({"x": digits}, **SMALL), dev, "float64")
    batch = {"x": back.asarray(digits[:20], dev, "float64")}
    if backend == "pyro":
        import pyro
        import torch

        def log_joint(**kw):
            torch.manual_seed(0)
            model = spec.build_model(backend, config, None)
            return float(
                pyro.poutine.trace(model).get_trace(batch, config, **kw).log_prob_sum().detach()
            )
    else:
        import jax
        from numpyro import handlers
        from numpyro.infer.util import log_density

        def log_joint(**kw):
            seeded = handlers.seed(spec.build_model(backend, config, None), jax.random.PRNGKey(0))
            return float(log_density(seeded, (batch, config), kw, {})[0])

    full, scaled = log_joint(), log_joint(num_data=600)
    assert np.isclose(scaled, full * 600 / 20, rtol=1e-10)


def test_same_weights_same_evaluation_on_both_backends(digits, pyro_fit):
    """Pyro's fitted weights, evaluated by the NumPyro twin: the per-datum ELBO and log p(x)
    estimates agree within Monte-Carlo error (4 standard errors)."""
    x = digits[:200]
    twin = dataclasses.replace(pyro_fit, backend="numpyro")
    elbo_p = pyro_fit.elbo(x, num_samples=400, seed=1)
    elbo_n = twin.elbo(x, num_samples=400, seed=2)
    stderr = np.sqrt(2 * np.var(elbo_p - pyro_fit.elbo(x, num_samples=400, seed=5)) / len(x))
    assert abs(elbo_p.mean() - elbo_n.mean()) < 4 * max(stderr, 1e-3)
    iw_p = pyro_fit.log_marginal_likelihood(x, num_samples=400, seed=1)
    iw_n = twin.log_marginal_likelihood(x, num_samples=400, seed=2)
    assert abs(iw_p.mean() - iw_n.mean()) < 0.05
    # The importance-weighted bound is tighter than the ELBO.
    assert iw_p.mean() > elbo_p.mean()


def test_an_edit_of_the_fitted_weights_in_place_is_scored(digits, pyro_fit):
    """Both backends score the parameters as they are when asked, not as they were at an
    earlier call (Pyro kept the networks it had built from the same dict, whatever its
    entries had become)."""
    x = digits[:5]
    for fit in (pyro_fit, dataclasses.replace(pyro_fit, backend="numpyro")):
        fit = dataclasses.replace(fit, raw_params={k: v.copy() for k, v in fit.raw_params.items()})
        before = fit.elbo(x, num_samples=4)
        for name, value in fit.raw_params.items():
            fit.raw_params[name] = np.zeros_like(value)
        edited = fit.elbo(x, num_samples=4)
        zeroed = dataclasses.replace(fit, raw_params=dict(fit.raw_params)).elbo(x, num_samples=4)
        assert not np.allclose(before, zeroed)
        np.testing.assert_array_equal(edited, zeroed)


def test_importance_weighted_estimate_is_chunked_and_reproducible(digits, pyro_fit, monkeypatch):
    from inference import evaluation

    x = digits[:37]
    whole = pyro_fit.log_marginal_likelihood(x, num_samples=64, seed=0)
    again = pyro_fit.log_marginal_likelihood(x, num_samples=64, seed=0)
    np.testing.assert_array_equal(whole, again)
    monkeypatch.setattr(evaluation, "CHUNK_ELEMENTS", 200)  # 3 rows x 64 particles a chunk
    chunked = pyro_fit.log_marginal_likelihood(x, num_samples=64, seed=0)
    assert chunked.shape == (37,)
    assert abs(chunked.mean() - whole.mean()) < 0.1  # other draws, the same estimate


def test_warm_start_from_the_other_backend(digits, pyro_fit):
    """A fit's raw_params start a fit on the other backend at the same ELBO."""
    res = inference.fit(
        "vae", {"x": digits}, "svi", "numpyro", init=pyro_fit.raw_params, num_steps=1,
        lr=1e-12, progress=False, **SMALL,
    )  # fmt: skip
    for k, v in pyro_fit.raw_params.items():
        np.testing.assert_allclose(res.raw_params[k], v, rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_minibatch_resume_reaches_the_same_result(tmp_path, digits, backend):
    # The run stopped at step 13 of 20 resumes asking for 30 (training extended: nothing in a VAE
    # fit depends on num_steps) and must match an uninterrupted 30-step run.
    opts = dict(batch_size=64, progress=False, lr=3e-3, **SMALL)  # 9 steps an epoch
    full = inference.fit("vae", {"x": digits}, "svi", backend, num_steps=30, **opts)
    path = tmp_path / "ck.zoo"
    with pytest.raises(KeyboardInterrupt):
        inference.fit(
            "vae", {"x": digits}, "svi", backend, num_steps=20, checkpoint=path,
            checkpoint_every=100, callback=_stop_after(13), **opts,
        )  # fmt: skip
    with pytest.raises(ValueError, match="past num_steps=10"):
        inference.fit(
            "vae", {"x": digits}, "svi", backend, num_steps=10, checkpoint=path, resume=True,
            **opts,
        )  # fmt: skip
    resumed = inference.fit(
        "vae", {"x": digits}, "svi", backend, num_steps=30, checkpoint=path, resume=True, **opts
    )
    np.testing.assert_allclose(resumed.history["objective"], full.history["objective"], rtol=1e-5)
    for k, v in full.raw_params.items():
        np.testing.assert_allclose(resumed.raw_params[k], v, rtol=1e-5, atol=1e-6)


def _stop_after(n):
    def callback(step, state, info):
        if step == n:
            raise KeyboardInterrupt

    return callback


def test_save_load_and_evaluate(tmp_path, digits, pyro_fit):
    path = tmp_path / "vae.zoo"
    pyro_fit.save(path)
    loaded = inference.load(path)
    assert loaded.config == pyro_fit.config
    np.testing.assert_array_equal(
        loaded.log_marginal_likelihood(digits[:20], num_samples=8),
        pyro_fit.log_marginal_likelihood(digits[:20], num_samples=8),
    )


def test_bad_input_is_a_clear_error(digits, pyro_fit):
    fit = dict(algorithm="svi", backend="pyro", num_steps=1, progress=False, **SMALL)
    grey = digits.copy()
    grey[3, 5] = 0.5
    with pytest.raises(ValueError, match="binary pixels"):
        inference.fit("vae", {"x": grey}, **fit)
    with pytest.raises(ValueError, match="must have 2 dimensions"):
        inference.fit("vae", {"x": digits.reshape(-1, 8, 8)}, **fit)
    with pytest.raises(ValueError, match=r"batch_size must be an int in the range \[1, 600\]"):
        inference.fit("vae", {"x": digits}, batch_size=601, **fit)
    with pytest.raises(ValueError, match=r"num_samples must be an int in the range \[1, inf\)"):
        pyro_fit.log_marginal_likelihood(digits, num_samples=0)
    with pytest.raises(ValueError, match="64 pixels per row"):
        pyro_fit.elbo(np.zeros((3, 784), np.float32))
    with pytest.raises(ValueError, match="binary pixels"):
        pyro_fit.elbo(grey)
    for backend in ("pyro", "numpyro"):
        with pytest.raises(ValueError, match="do not fit this architecture"):
            inference.fit(
                "vae", {"x": digits}, "svi", backend, init=pyro_fit.raw_params, num_steps=1,
                progress=False, latent_dim=5, hidden=(24,),
            )  # fmt: skip
    with pytest.raises(ValueError, match="no global latent variables"):
        pyro_fit.to_arviz()


def test_checkpoint_of_another_architecture_is_refused(tmp_path, digits):
    path = tmp_path / "ck.zoo"
    opts = dict(num_steps=2, progress=False, checkpoint=path)
    inference.fit("vae", {"x": digits}, "svi", "pyro", **opts, **SMALL)
    with pytest.raises(CheckpointError):
        inference.fit(
            "vae", {"x": digits}, "svi", "pyro", resume=True, **opts, latent_dim=3, hidden=(8,)
        )


# NumPyro's validation runs in the default run by the save-and-load test below.
@pytest.mark.parametrize("backend", ["pyro", pytest.param("numpyro", marks=pytest.mark.slow)])
def test_validation_early_stopping_keeps_the_best_params(tmp_path, digits, backend):
    train, held_out = digits[:500], digits[500:]
    opts = dict(
        batch_size=100, lr=3e-2, validation_data={"x": held_out}, validate_every=5, patience=2,
        progress=False, **SMALL,
    )  # fmt: skip
    res = inference.fit("vae", {"x": train}, "svi", backend, num_steps=400, **opts)
    steps, values = res.history["validation_step"], res.history["validation"]
    assert res.best_step == steps[np.argmax(values)]
    assert res.num_steps < 400 and steps[-1] - res.best_step == 10  # stopped after 2 misses
    best_elbo = res.elbo(held_out).mean()  # the returned parameters are the best evaluated
    assert np.isclose(best_elbo, values.max(), rtol=1e-5)
    # Interrupted and resumed, the run stops at the same step with the same best parameters.
    path = tmp_path / "ck.zoo"
    with pytest.raises(KeyboardInterrupt):
        inference.fit(
            "vae", {"x": train}, "svi", backend, num_steps=400, checkpoint=path,
            callback=_stop_after(res.best_step + 2), **opts,
        )  # fmt: skip
    resumed = inference.fit(
        "vae", {"x": train}, "svi", backend, num_steps=400, checkpoint=path, resume=True, **opts
    )
    assert resumed.best_step == res.best_step and resumed.num_steps == res.num_steps
    for k, v in res.raw_params.items():
        np.testing.assert_allclose(resumed.raw_params[k], v, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_a_fit_with_validation_saves_and_loads(tmp_path, digits, backend):
    """The validation's history has one entry per evaluation, not per step."""
    res = inference.fit(
        "vae", {"x": digits[:60]}, "svi", backend, num_steps=12, batch_size=20, tol=0,
        validation_data={"x": digits[60:80]}, validate_every=3, progress=False, **SMALL,
    )  # fmt: skip
    res.save(tmp_path / "fit.zoo")
    loaded = inference.load(tmp_path / "fit.zoo")
    assert len(loaded.history["validation"]) == 4 and len(loaded.history["step"]) == 12
    for k, v in res.history.items():
        np.testing.assert_array_equal(loaded.history[k], v)
    for k, v in res.raw_params.items():
        np.testing.assert_array_equal(loaded.raw_params[k], v)


# NumPyro's validation runs in the default run by the save-and-load test above.
@pytest.mark.parametrize("backend", ["pyro", pytest.param("numpyro", marks=pytest.mark.slow)])
def test_a_diverging_fit_with_validation_ends_as_a_nonfinite_objective(digits, backend):
    """A held-out objective that is not finite, or that fails on parameters gone out of range,
    ends the fit as a non-finite training objective does: with advice and the last good
    parameters, not a TypeError or a distribution's complaint."""
    with pytest.raises(inference.NonFiniteObjectiveError, match="Lower the learning rate") as err:
        inference.fit(
            "vae", {"x": digits[:30]}, "svi", backend, num_steps=6, lr=1e6, tol=0,
            validation_data={"x": digits[30:40]}, validate_every=1, progress=False, **SMALL,
        )  # fmt: skip
    assert "alidation" in str(err.value) and err.value.result is not None


def test_numpy_networks_match_both_twins(digits, pyro_fit):
    """zoo.vae.encode/decode (numpy) compute what the torch and equinox networks compute."""
    import jax.numpy as jnp
    import torch

    from zoo.vae import decode, encode, numpyro_model, pyro_model

    params, config, x = pyro_fit.raw_params, pyro_fit.config, digits[:10]
    loc, scale = encode(params, config, x)
    z = loc + scale
    like_t, like_j = torch.zeros((), dtype=torch.float64), jnp.zeros((), jnp.float64)
    enc_t = pyro_model._network(pyro_model.Encoder, "encoder", config, params, like_t)
    dec_t = pyro_model._network(pyro_model.Decoder, "decoder", config, params, like_t)
    enc_j = numpyro_model._network(numpyro_model.Encoder, "encoder", config, params, like_j)
    dec_j = numpyro_model._network(numpyro_model.Decoder, "decoder", config, params, like_j)
    for got_loc, got_scale in (
        [t.detach().numpy() for t in enc_t(torch.as_tensor(x, dtype=torch.float64))],
        [np.asarray(a) for a in enc_j(jnp.asarray(x, jnp.float64))],
    ):
        np.testing.assert_allclose(got_loc, loc, rtol=1e-5, atol=1e-6)
        np.testing.assert_allclose(got_scale, scale, rtol=1e-5, atol=1e-6)
    probs = decode(params, config, z)
    np.testing.assert_allclose(
        torch.sigmoid(dec_t(torch.as_tensor(z))).detach().numpy(), probs, rtol=1e-5, atol=1e-7
    )
    np.testing.assert_allclose(
        np.asarray(1 / (1 + jnp.exp(-dec_j(jnp.asarray(z))))), probs, rtol=1e-5, atol=1e-7
    )


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_meanfield_and_importance_weighted_objectives_train(digits, backend):
    """elbo="meanfield" (analytic KL) and elbo="iwae" (k=3) run and improve on both backends;
    at the same parameters the importance-weighted bound is above the ELBO."""
    opts = dict(num_steps=60, batch_size=50, lr=3e-3, progress=False, **SMALL)
    for elbo in ("meanfield", "iwae"):
        res = inference.fit(
            "vae", {"x": digits}, "svi", backend, elbo=elbo, num_particles=3, **opts
        )
        h = res.history["objective"] / len(digits)
        assert np.all(np.isfinite(h)) and h[-10:].mean() > h[:10].mean() + 2.0, elbo
    x = digits[:100]
    assert res.log_marginal_likelihood(x, num_samples=3).mean() > res.elbo(x, num_samples=3).mean()


def test_pyro_jit_trains_reproducibly_and_refuses_what_it_cannot_compile(digits):
    """jit=True runs Pyro's JitTrace*_ELBO: it learns; in float64 it computes what the
    uncompiled fit computes, bit for bit, with every minibatch size (a last short batch
    included), and in float32 it agrees with it to float32's rounding."""
    opts = dict(num_steps=80, batch_size=60, lr=3e-3, progress=False, seed=2, **SMALL)
    compiled = inference.fit("vae", {"x": digits}, "svi", "pyro", jit=True, **opts)
    plain = inference.fit("vae", {"x": digits}, "svi", "pyro", **opts)
    np.testing.assert_allclose(compiled.history["objective"], plain.history["objective"], 1e-5)
    h = compiled.history["objective"] / len(digits)
    assert h[-20:].mean() > h[:20].mean() + 2.0
    short = {**opts, "num_steps": 12, "batch_size": 250, "dtype": "float64"}  # batches 250, 100
    compiled = inference.fit("vae", {"x": digits}, "svi", "pyro", jit=True, **short)
    plain = inference.fit("vae", {"x": digits}, "svi", "pyro", **short)
    np.testing.assert_array_equal(compiled.history["objective"], plain.history["objective"])
    for name, value in plain.raw_params.items():
        np.testing.assert_array_equal(compiled.raw_params[name], value, err_msg=name)
    meanfield = inference.fit(
        "vae", {"x": digits}, "svi", "pyro", jit=True, elbo="meanfield", **{**opts, "num_steps": 10}
    )
    assert np.all(np.isfinite(meanfield.history["objective"]))
    with pytest.raises(ValueError, match="jit=True needs"):
        inference.fit(
            "vae", {"x": digits}, "svi", "pyro", jit=True, elbo="iwae", num_particles=2, **opts
        )
    gmm = zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(0), 50)
    with pytest.raises(
        ValueError,
        match="jit= is an option of algorithms 'cavi', 'em' and 'svi'; algorithm 'nuts' does not",
    ):
        inference.fit("bayesian_gmm", gmm, "nuts", "pyro", jit=True, progress=False)


@pytest.mark.parametrize("elbo", ["trace", "meanfield"])
def test_pyro_jit_on_the_optimising_executor_agrees_to_rounding(digits, monkeypatch, elbo):
    """``SVIEngine.jit_optimized`` (timed by ``benchmarks/gpu_check.py``): torch's optimising
    executor differentiates by its own formulas, so the fit is not the default compiled fit bit
    for bit, but agrees with it to rounding."""
    import torch

    from inference.backends.pyro_backend import SVIEngine

    asked = []
    executor = torch.jit.optimized_execution
    monkeypatch.setattr(
        torch.jit, "optimized_execution", lambda on: asked.append(on) or executor(on)
    )
    opts = dict(num_steps=12, batch_size=100, lr=3e-3, progress=False, seed=2, jit=True, tol=0)
    default = inference.fit("vae", {"x": digits}, "svi", "pyro", elbo=elbo, **opts, **SMALL)
    assert asked and not any(asked)
    monkeypatch.setattr(SVIEngine, "jit_optimized", True)
    asked.clear()
    optimized = inference.fit("vae", {"x": digits}, "svi", "pyro", elbo=elbo, **opts, **SMALL)
    assert asked and all(asked)
    np.testing.assert_allclose(optimized.history["objective"], default.history["objective"], 1e-5)
    for name, value in default.raw_params.items():
        np.testing.assert_allclose(optimized.raw_params[name], value, 1e-4, 1e-6, err_msg=name)


def test_pyro_meanfield_jit_compiles_each_graph_once_and_computes_the_uncompiled_fit(
    digits, monkeypatch
):
    """Pyro's JitTraceMeanField_ELBO traced a new graph at every step (and drew the random
    numbers three times a step); the zoo's compiles each minibatch size once, and in float64
    takes the uncompiled fit's steps bit for bit."""
    import torch

    traced = []
    trace = torch.jit.trace
    monkeypatch.setattr(torch.jit, "trace", lambda *a, **k: traced.append(1) or trace(*a, **k))
    short = dict(num_steps=12, batch_size=250, lr=3e-3, progress=False, seed=2, **SMALL)
    short.update(dtype="float64", elbo="meanfield")  # 600 rows: batches of 250, one graph
    compiled = inference.fit("vae", {"x": digits}, "svi", "pyro", jit=True, **short)
    assert len(traced) == 1
    plain = inference.fit("vae", {"x": digits}, "svi", "pyro", **short)
    np.testing.assert_array_equal(compiled.history["objective"], plain.history["objective"])
    for name, value in plain.raw_params.items():
        np.testing.assert_array_equal(compiled.raw_params[name], value, err_msg=name)


def test_a_pyro_fit_starts_from_read_only_arrays_without_a_warning(digits, pyro_fit):
    """A NumPyro fit's raw_params are read-only: a Pyro fit started from them (as the guide to
    getting started shows) once made torch warn that the array is not writable."""
    start = {k: np.array(v) for k, v in pyro_fit.raw_params.items()}
    for value in start.values():
        value.flags.writeable = False
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        res = inference.fit(
            "vae",
            {"x": digits},
            "svi",
            "pyro",
            init=start,
            num_steps=1,
            tol=0,
            progress=False,
            **SMALL,
        )
    assert all(not value.flags.writeable for value in start.values())  # left as given
    assert set(res.raw_params) == set(start)
