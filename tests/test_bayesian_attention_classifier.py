"""The ``bam_classifier`` model-guide pair (zoo.bayesian_attention.classifier), its metrics and
its MNIST example: backend twins, site scales (minibatch, KL weight), trace vs mean-field ELBO,
pathwise gradients, fitting and prediction, bad input.

Synthetic 28x28 data from the spec's ``make_data`` and tiny networks keep it fast; one test runs
the example's ``--quick`` mode on real MNIST.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import runpy
from pathlib import Path

import numpy as np
import pytest

import inference
import zoo
from zoo import testing
from zoo.bayesian_attention import metrics
from zoo.bayesian_attention.classifier import kl_weight_schedule, predict_proba

SPEC = zoo.get_model("bam_classifier")
SMALL = dict(width=8, num_heads=2, num_layers=2, mlp_dim=8)
EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "bayesian_attention.py"


def _mask(num_tokens=16):
    """Local attention: every token sees the tokens within two places of it (itself included)."""
    i = np.arange(num_tokens)
    return np.abs(i[:, None] - i[None, :]) <= 2


pytestmark = pytest.mark.usefixtures("one_torch_thread")  # tiny tensors


@pytest.fixture(scope="module")
def data():
    return SPEC.make_data(np.random.default_rng(0), 240)


def _backend_problem(backend, data, rows=slice(0, 12), **options):
    back = inference.get_backend(backend)
    dev = back.resolve_device("cpu")
    config = SPEC.prepare(data, **{**SMALL, **options})
    batch = {k: back.asarray(v[rows], dev, "float64") for k, v in data.items()}
    return config, back.backend_config(config, dev, "float64"), batch


def _pyro_params(config, batch, seed=0):
    """A Pyro model's parameters (zoo names, numpy), drawn by torch's default initialisation."""
    import pyro
    import torch

    pyro.clear_param_store()
    torch.manual_seed(seed)
    trace = pyro.poutine.trace(SPEC.build_model("pyro", config, None)).get_trace(batch, config)
    return {
        name.replace("$$$", "."): site["value"].detach().numpy().copy()
        for name, site in trace.nodes.items()
        if site["type"] == "param"
    }


# ------------------------------------------------------------------------------ the twins


@pytest.mark.parametrize(
    "attention,prior,masked",
    [
        ("softmax", "fixed", True),
        ("weibull", "fixed", False),
        ("weibull", "contextual", True),
        ("lognormal", "fixed", True),
        ("lognormal", "contextual", False),
    ],
)
def test_twins_have_the_same_sites_and_log_joint(attention, prior, masked):
    """Two layers, two heads, with and without an attention mask, every prior; at priors away
    from 1, where Gamma(1, 1) would hide a shape swapped with a rate and sigma = 1 its square."""
    options = dict(SMALL, attention=attention, prior=prior, patch_size=7)
    options |= dict(prior_alpha=0.5, prior_beta=2.0, prior_sigma=0.7)
    if masked:
        options["attention_mask"] = _mask()
    testing.check_twins_and_log_joint(SPEC, **options)


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_sites_scaled_by_minibatch_and_kl_weight(data, backend):
    """Attention sites carry ``kl_weight * N / B`` in model and guide, the labels ``N / B``; the
    step-dependent value SVI passes as ``temperature`` replaces ``kl_weight``."""
    options = dict(kl_weight=0.25, num_layers=1)
    config, bconfig, batch = _backend_problem(backend, data, **options)
    init = _pyro_params(*_backend_problem("pyro", data, **options)[1:])
    model = SPEC.build_model(backend, bconfig, init)
    guide = SPEC.twin(backend).make_guide("amortized", bconfig, init)
    n, b = 240, 12
    for kwargs, kl in (({}, 0.25), ({"temperature": 0.5}, 0.5)):
        scales = {}
        for fn in (model, guide):
            if backend == "pyro":
                import pyro

                tr = pyro.poutine.trace(fn).get_trace(batch, bconfig, num_data=n, **kwargs)
                sites = tr.nodes.values()
            else:
                import jax
                from numpyro import handlers

                seeded = handlers.seed(fn, jax.random.PRNGKey(0))
                sites = handlers.trace(seeded).get_trace(batch, bconfig, num_data=n, **kwargs)
                sites = sites.values()
            for site in sites:
                if site["type"] == "sample" and site["name"] != "data":
                    scales.setdefault(site["name"], []).append(float(site["scale"]))
        assert scales == {"attention_0": [kl * n / b] * 2, "y": [n / b]}, (backend, kwargs)


def test_kl_weight_schedule():
    data = SPEC.make_data(np.random.default_rng(0), 5)
    config = SPEC.prepare(data, kl_weight=0.5)
    assert [kl_weight_schedule(config)(s) for s in (0, 10**6)] == [0.5, 0.5]
    warm = dataclasses.replace(config, kl_anneal_steps=100, kl_anneal_start=0.1)
    for backend in ("pyro", "numpyro"):  # the twins' hook for SVI is the same schedule
        schedule = SPEC.twin(backend).temperature_schedule(warm, 1000)
        np.testing.assert_allclose(
            [schedule(s) for s in (0, 50, 100, 500)], [0.05, 0.5 * 0.55, 0.5, 0.5]
        )
    # SVI applies the twin's schedule: the value it passes at each step is the warm-up's.
    import inference
    from inference.algorithm import Problem

    svi = inference.get_algorithm("svi")
    back = inference.get_backend("pyro")
    problem = Problem(
        SPEC, SPEC.validate_data(data), warm, back, back.resolve_device("cpu"), "float32", 0,
        num_steps=1000,
    )  # fmt: skip
    state = svi.init(problem, svi.options({}))
    np.testing.assert_allclose([state.bound.schedule(s) for s in (0, 100, 500)], [0.05, 0.5, 0.5])
    # The stopping rule waits for the warm-up's end: the objective changes with it until then.
    from inference.algorithm import rule_start

    assert rule_start(svi, svi.init(problem, svi.options({"lr": 1e-3}))) == 100
    # Without a warm-up the twins give no schedule: SVI passes no temperature, and the model
    # scales the sites by the config's kl_weight, a number (no tensor arithmetic per step).
    for backend in ("pyro", "numpyro"):
        assert SPEC.twin(backend).temperature_schedule(config, 1000) is None
    problem = dataclasses.replace(problem, config=config)
    assert svi.init(problem, svi.options({})).bound.schedule is None


# ------------------------------------------------------------------------------ objectives


def _pyro_particle_elbos(model, guide, batch, config, num_particles):
    """(P,) single-particle Trace_ELBO estimates, particles vectorised left of the data plate."""
    import pyro
    import torch
    from pyro import poutine

    with torch.no_grad(), pyro.plate("particles", num_particles, dim=-2):
        g = poutine.trace(guide).get_trace(batch, config)
        m = poutine.trace(poutine.replay(model, trace=g)).get_trace(batch, config)
    m.compute_log_prob()
    g.compute_log_prob()
    total = 0.0
    for trace, sign in ((m, 1.0), (g, -1.0)):
        for site in trace.nodes.values():
            if site["type"] == "sample" and site["name"] not in ("particles", "data"):
                total = total + sign * site["log_prob"]
    return total.sum(-1).numpy()


@pytest.mark.parametrize(
    "attention,prior,masked", [("weibull", "contextual", True), ("lognormal", "fixed", False)]
)
def test_trace_and_meanfield_elbos_agree_in_expectation(data, attention, prior, masked):
    """Pyro's Trace_ELBO and TraceMeanField_ELBO (the registered analytic KLs, weighted by
    kl_weight) estimate the same objective; the analytic KL removes the KL's sampling noise."""
    import pyro
    import torch
    from pyro.infer import TraceMeanField_ELBO

    options = dict(attention=attention, prior=prior, kl_weight=0.5)
    if masked:
        options["attention_mask"] = _mask()
    _, config, batch = _backend_problem("pyro", data, **options)
    init = _pyro_params(config, batch)
    model = SPEC.build_model("pyro", config, init)
    guide = SPEC.twin("pyro").make_guide("amortized", config, init)
    torch.manual_seed(1)
    pyro.clear_param_store()
    trace = _pyro_particle_elbos(model, guide, batch, config, 300)
    mean_field = [
        -TraceMeanField_ELBO(num_particles=30, vectorize_particles=True, max_plate_nesting=1).loss(
            model, guide, batch, config
        )
        for _ in range(2)
    ]
    stderr = trace.std() / np.sqrt(len(trace))
    assert abs(trace.mean() - np.mean(mean_field)) < 4 * stderr + 1e-6
    assert abs(mean_field[0] - mean_field[1]) < 0.5 * stderr  # (nearly) no KL noise left


def test_numpyro_objectives_agree_with_pyro_and_gradients_flow(data):
    """With Pyro's weights, NumPyro's Trace_ELBO and TraceMeanField_ELBO estimate the ELBO Pyro
    estimates; gradients reach the query projection, which enters only through the guide's
    reparameterised draws (the fixed prior ignores it)."""
    import equinox as eqx
    import jax
    import pyro
    import torch
    from numpyro.infer import Trace_ELBO, TraceMeanField_ELBO

    from zoo.bayesian_attention import numpyro_classifier as nc

    options = dict(attention="weibull", num_layers=1)
    _, pconfig, pbatch = _backend_problem("pyro", data, **options)
    init = _pyro_params(pconfig, pbatch)
    model = SPEC.build_model("pyro", pconfig, init)
    guide = SPEC.twin("pyro").make_guide("amortized", pconfig, init)
    torch.manual_seed(2)
    pyro.clear_param_store()
    reference = _pyro_particle_elbos(model, guide, pbatch, pconfig, 400)
    stderr = reference.std() / np.sqrt(len(reference))

    _, config, batch = _backend_problem("numpyro", data, **options)
    model = SPEC.build_model("numpyro", config, None)
    guide = SPEC.twin("numpyro").make_guide("amortized", config, None)
    net = nc.network(config, init, batch["x"])
    params = {"net$params": eqx.partition(net, eqx.is_inexact_array)[0]}

    @jax.jit
    def losses(params, key):
        trace, grads = jax.value_and_grad(
            lambda p: Trace_ELBO(num_particles=100).loss(key, p, model, guide, batch, config)
        )(params)
        mean_field = TraceMeanField_ELBO(num_particles=100).loss(
            key, params, model, guide, batch, config
        )
        return trace, mean_field, grads

    trace, mean_field, grads = losses(params, jax.random.PRNGKey(0))
    # 100 NumPyro particles against 400 Pyro ones: a standard error sqrt(1 + 4) times Pyro's.
    for value in (-trace, -mean_field):
        assert abs(value - reference.mean()) < 4 * np.sqrt(5) * stderr
    leaves = jax.tree_util.tree_leaves(grads)
    assert all(np.all(np.isfinite(np.asarray(g))) for g in leaves)
    grad_q = np.asarray(grads["net$params"].blocks[0].attn.q.weight)
    assert np.abs(grad_q).max() > 0


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_model_reusing_the_guides_pass_matches_its_own_pass(data, backend):
    """The model replaying the guide's own draws reads the guide's pass (keys, class logits);
    given equal draws that are other objects it runs its own network: the same log-densities,
    and in Pyro the same gradients."""
    options = dict(attention="weibull", prior="contextual", attention_mask=_mask())
    _, config, batch = _backend_problem(backend, data, **options)
    init = _pyro_params(*_backend_problem("pyro", data, **options)[1:])
    model = SPEC.build_model(backend, config, init)
    guide = SPEC.twin(backend).make_guide("amortized", config, init)
    sites = ["attention_0", "attention_1", "y"]
    if backend == "pyro":
        import pyro
        import torch
        from pyro import poutine

        pyro.clear_param_store()
        results = []
        for copy in (False, True):
            torch.manual_seed(0)
            g = poutine.trace(guide).get_trace(batch, config)
            if copy:
                for name in sites[:-1]:
                    g.nodes[name]["value"] = g.nodes[name]["value"].clone()
            m = poutine.trace(poutine.replay(model, trace=g)).get_trace(batch, config)
            log_p = [m.nodes[name]["fn"].log_prob(m.nodes[name]["value"]).sum() for name in sites]
            params = [pyro.param(name) for name in sorted(pyro.get_param_store().keys())]
            grads = torch.autograd.grad(sum(log_p), params, allow_unused=True)
            results.append(([float(v.detach()) for v in log_p], grads))
        (reused, reused_grads), (own, own_grads) = results
        for a, b in zip(reused_grads, own_grads, strict=True):
            assert (a is None) == (b is None)
            if a is not None:
                torch.testing.assert_close(a, b)
    else:
        import jax
        import jax.numpy as jnp
        from numpyro import handlers

        results = []
        for copy in (False, True):
            g = handlers.trace(handlers.seed(guide, jax.random.PRNGKey(0))).get_trace(batch, config)
            if copy:
                for name in sites[:-1]:
                    g[name]["value"] = jnp.array(g[name]["value"], copy=True)
            seeded = handlers.seed(model, jax.random.PRNGKey(1))
            m = handlers.trace(handlers.replay(seeded, trace=g)).get_trace(batch, config)
            results.append([float(m[n]["fn"].log_prob(m[n]["value"]).sum()) for n in sites])
        reused, own = results
    np.testing.assert_allclose(reused, own, rtol=1e-10)


@pytest.mark.parametrize("attention", ["weibull", "lognormal"])
def test_pyro_gradients_flow_through_the_draws(data, attention):
    """The query projection gets a gradient only through the guide's reparameterised draws."""
    import pyro
    import torch
    from pyro.infer import Trace_ELBO

    _, config, batch = _backend_problem("pyro", data, attention=attention)
    pyro.clear_param_store()
    torch.manual_seed(0)
    model = SPEC.build_model("pyro", config, None)
    guide = SPEC.twin("pyro").make_guide("amortized", config, None)
    loss = Trace_ELBO().differentiable_loss(model, guide, batch, config)
    loss.backward()
    store = pyro.get_param_store()
    grads = {name: store[name].grad for name in store.keys()}
    assert all(g is not None and torch.isfinite(g).all() for g in grads.values())
    assert grads["net$$$blocks.0.attn.q.weight"].abs().max() > 0


# ------------------------------------------------------------------------------ fit and predict


@pytest.fixture(scope="module")
def pyro_fit(data):
    return inference.fit(
        "bam_classifier", data, "svi", "pyro", num_steps=80, batch_size=60, lr=0.01, seed=0,
        elbo="meanfield", progress=False, attention="weibull", prior="contextual",
        attention_mask=_mask(), kl_weight=0.1, **SMALL,
    )  # fmt: skip


def test_fit_learns_and_predicts(pyro_fit):
    test = SPEC.make_data(np.random.default_rng(1), 200)
    h = pyro_fit.history["objective"]
    assert np.all(np.isfinite(h)) and h[-10:].mean() > h[:10].mean()
    probs = {m: predict_proba(pyro_fit, test["x"], method=m, num_samples=8) for m in ("mc", "mean")}
    for p in probs.values():
        assert p.shape == (200, 10)
        np.testing.assert_allclose(p.sum(1), 1.0, rtol=1e-5)
        assert metrics.accuracy(p, test["y"]) > 0.5  # chance: 0.1
    again = predict_proba(pyro_fit, test["x"].reshape(-1, 28, 28), num_samples=8)
    np.testing.assert_array_equal(again, probs["mc"])  # same seed, same draws
    other = predict_proba(pyro_fit, test["x"], num_samples=8, seed=1)
    assert not np.allclose(other, probs["mc"])


def test_predictions_agree_across_backends(pyro_fit):
    """The fitted weights give the same posterior-mean predictions in NumPyro; MC predictions
    agree to Monte-Carlo error."""
    x = SPEC.make_data(np.random.default_rng(2), 50)["x"]
    mean = {b: predict_proba(pyro_fit, x, method="mean", backend=b) for b in ("pyro", "numpyro")}
    np.testing.assert_allclose(mean["pyro"], mean["numpyro"], rtol=1e-4, atol=1e-5)
    mc = {
        b: predict_proba(pyro_fit, x, num_samples=200, batch_size=25, backend=b)
        for b in ("pyro", "numpyro")
    }
    assert np.abs(mc["pyro"] - mc["numpyro"]).max() < 0.05


def test_softmax_attention_is_deterministic_and_save_load(tmp_path, data):
    res = inference.fit(
        "bam_classifier", data, "svi", "pyro", num_steps=3, progress=False, attention="softmax",
        **SMALL,
    )  # fmt: skip
    assert not any(name.startswith("attention") for name in res.raw_params)
    x = data["x"][:20]
    mc = predict_proba(res, x, method="mc", num_samples=3)
    np.testing.assert_array_equal(mc, predict_proba(res, x, method="mean"))
    path = tmp_path / "bam.zoo"
    res.save(path)
    loaded = inference.load(path)
    assert loaded.config == res.config
    np.testing.assert_array_equal(predict_proba(loaded, x), mc)


@pytest.mark.parametrize("attention", ["softmax", "weibull", "lognormal"])
def test_pyro_jit_computes_the_uncompiled_fit(data, attention):
    """jit=True (Pyro's compiled mean-field ELBO) takes the uncompiled fit's steps bit for bit
    in float64: masked attention, the contextual prior and a short last minibatch (a second
    compiled graph) included."""
    fit = dict(
        num_steps=5, batch_size=100, lr=0.01, seed=0, elbo="meanfield", progress=False, tol=0,
        dtype="float64", attention=attention, prior="contextual", attention_mask=_mask(),
        kl_weight=0.1, **SMALL,
    )  # fmt: skip
    compiled = inference.fit("bam_classifier", data, "svi", "pyro", jit=True, **fit)
    plain = inference.fit("bam_classifier", data, "svi", "pyro", **fit)
    np.testing.assert_array_equal(compiled.history["objective"], plain.history["objective"])
    for name, value in plain.raw_params.items():
        np.testing.assert_array_equal(compiled.raw_params[name], value, err_msg=name)


@pytest.mark.slow  # three NumPyro fits, mostly compiling
def test_a_resumed_fit_may_be_extended(tmp_path, data):
    """The KL warm-up is fixed in steps, not spread over the fit: more steps on resume give
    the fit an uninterrupted run of the new length gives."""
    fit = dict(batch_size=30, seed=0, progress=False, attention="weibull", kl_anneal_steps=3)
    fit.update(SMALL, checkpoint=tmp_path / "bam.zoo", checkpoint_every=2)
    inference.fit("bam_classifier", data, "svi", "numpyro", num_steps=2, **fit)
    more = inference.fit("bam_classifier", data, "svi", "numpyro", num_steps=5, resume=True, **fit)
    fit.pop("checkpoint"), fit.pop("checkpoint_every")
    whole = inference.fit("bam_classifier", data, "svi", "numpyro", num_steps=5, **fit)
    np.testing.assert_array_equal(more.history["objective"], whole.history["objective"])


def test_saved_mask_round_trips(tmp_path, pyro_fit):
    path = tmp_path / "bam.zoo"
    pyro_fit.save(path)
    loaded = inference.load(path)
    np.testing.assert_array_equal(loaded.config.attention_mask, _mask())
    x = SPEC.make_data(np.random.default_rng(3), 10)["x"]
    np.testing.assert_array_equal(predict_proba(loaded, x), predict_proba(pyro_fit, x))


# ------------------------------------------------------------------------------ bad input


def _hiding_mask():
    mask = _mask()
    mask[5] = False
    return mask


@pytest.mark.parametrize(
    "options,message",
    [
        (dict(concentration=0.0), r"concentration \(the Weibull shape k\) > 0"),
        (dict(concentration=-2.0), r"concentration .* > 0"),
        (dict(sigma=0.0), r"sigma \(the log-normal scale\) > 0"),
        (dict(sigma=float("nan")), r"sigma .* > 0 and finite"),
        (dict(prior_beta=-1.0), r"prior_beta .* > 0"),
        (dict(prior_sigma=0.0), r"prior_sigma .* > 0"),
        (dict(prior_mean=0.0), r"prior_mean > 0"),
        (dict(kl_weight=0.0), r"kl_weight > 0"),
        (dict(prior="learned"), r"prior to be one of \['fixed', 'contextual'\]; got 'learned'"),
        (dict(attention="gaussian"), r"attention to be one of \['softmax', 'weibull', "),
        (dict(attention_mask=_hiding_mask()), r"hides every key, the first at index \(5,\)"),
        (dict(attention_mask=_mask(15)), r"attention_mask of shape \(tokens, tokens\)"),
        (dict(attention_mask=_mask().astype(int)), r"attention_mask to be a bool array"),
        (dict(width=10, num_heads=4), r"width divisible by num_heads=4; got 10"),
        (dict(patch_size=5), r"patch_size that divides the image side 28; got 5"),
        (dict(num_layers=0), r"num_layers to be an int >= 1; got 0"),
        (dict(kl_anneal_start=1.5), r"kl_anneal_start in \(0, 1\]"),
        (dict(kl_anneal_steps=2.5), r"kl_anneal_steps to be an int >= 0; got 2.5"),
    ],
)
def test_bad_options(data, options, message):
    with pytest.raises(ValueError, match=message):
        SPEC.prepare(data, **options)


def test_bad_input_surfaces_through_fit_and_predict(data, pyro_fit):
    for options, message in (
        (dict(concentration=0), r"concentration"),
        (dict(attention_mask=_hiding_mask()), r"hides every key"),
        (dict(attention="dot"), r"attention to be one of"),
    ):
        with pytest.raises(ValueError, match=message):
            inference.fit("bam_classifier", data, "svi", "pyro", num_steps=1, progress=False,
                          **options)  # fmt: skip
    with pytest.raises(ValueError, match=r"pixel values in \[0, 1\]"):
        SPEC.prepare({"x": data["x"] * 255, "y": data["y"]})
    with pytest.raises(ValueError, match=r"labels in 0..9"):
        SPEC.prepare({"x": data["x"], "y": data["y"] + 1})
    with pytest.raises(ValueError, match=r"not a square"):
        SPEC.prepare({"x": data["x"][:, :700], "y": data["y"]})
    x = data["x"][:5]
    with pytest.raises(ValueError, match=r"method to be one of \['mc', 'mean'\]"):
        predict_proba(pyro_fit, x, method="mode")
    with pytest.raises(ValueError, match=r"num_samples to be an int >= 1; got 0"):
        predict_proba(pyro_fit, x, num_samples=0)
    with pytest.raises(ValueError, match=r"expected images x with 28x28 = 784 pixels per row"):
        predict_proba(pyro_fit, np.zeros((2, 196)))  # its argument, not data['x']
    with pytest.raises(ValueError, match=r"expected images x with pixel values in \[0, 1\]"):
        predict_proba(pyro_fit, x * 255)
    with pytest.raises(ValueError, match=r"FitResult of model 'bam_classifier'"):
        predict_proba(dataclasses.replace(pyro_fit, model="vae"), x)


# ------------------------------------------------------------------------------ metrics


def test_metrics_by_hand():
    probs = np.array([[0.9, 0.1], [0.6, 0.4], [0.2, 0.8], [0.5, 0.5]])
    labels = np.array([0, 1, 1, 0])
    assert metrics.accuracy(probs, labels) == 0.75  # a tie goes to the first class
    np.testing.assert_allclose(
        metrics.negative_log_likelihood(probs, labels), -np.mean(np.log([0.9, 0.4, 0.8, 0.5]))
    )
    np.testing.assert_allclose(
        metrics.predictive_entropy(probs)[[0, 3]],
        [-(0.9 * np.log(0.9) + 0.1 * np.log(0.1)), np.log(2)],  # fmt: skip
    )
    assert metrics.predictive_entropy(np.array([[1.0, 0.0]]))[0] == 0.0
    # Two bins: confidences 0.5, 0.6 in (0, 0.5] / (0.5, 1] -> bins 0 and 1; 0.8, 0.9 in bin 1.
    conf, acc, count = metrics.reliability(probs, labels, num_bins=2)
    np.testing.assert_array_equal(count, [1, 3])
    np.testing.assert_allclose(conf, [0.5, (0.9 + 0.6 + 0.8) / 3])
    np.testing.assert_allclose(acc, [1.0, 2 / 3])
    expected = (1 * abs(1.0 - 0.5) + 3 * abs(2 / 3 - 2.3 / 3)) / 4
    np.testing.assert_allclose(metrics.expected_calibration_error(probs, labels, 2), expected)
    # 15 bins (the default): a perfectly calibrated predictor has ECE 0.
    rng = np.random.default_rng(0)
    p = rng.uniform(0.5, 1.0, 200_000)
    y = (rng.uniform(size=p.size) > p).astype(int)  # class 0 with probability p
    assert metrics.expected_calibration_error(np.c_[p, 1 - p], y) < 0.01


def test_auroc_against_sklearn():
    from sklearn.metrics import roc_auc_score

    rng = np.random.default_rng(0)
    labels = rng.uniform(size=300) < 0.4
    scores = rng.normal(size=300) + labels
    scores[:40] = np.round(scores[:40])  # ties
    assert metrics.auroc(scores, labels) == pytest.approx(roc_auc_score(labels, scores), 1e-12)
    assert metrics.auroc([1.0, 2.0, 3.0], [0, 1, 1]) == 1.0
    assert metrics.auroc([1.0, 1.0], [0, 1]) == 0.5
    with pytest.raises(ValueError, match="both classes"):
        metrics.auroc([1.0, 2.0], [1, 1])
    with pytest.raises(ValueError, match="binary labels"):
        metrics.auroc([1.0, 2.0], [0, 2])


# ------------------------------------------------------------------------------ the example


def test_example_quick_on_real_mnist(tmp_path, data_dir, monkeypatch):
    monkeypatch.setenv("ZOO_DATA_DIR", str(data_dir))
    monkeypatch.setenv("ZOO_OFFLINE", "1")
    example = runpy.run_path(str(EXAMPLE), run_name="bayesian_attention")  # in-process
    summary = example["main"](["--quick", "--out", str(tmp_path)])
    runs = summary["runs"]
    assert [r["attention"] for r in runs] == ["softmax", "weibull", "lognormal"]
    for r in runs:
        assert 0.1 < r["clean"]["accuracy"] <= 1 and np.isfinite(r["clean"]["nll"])
        assert 0 <= r["clean"]["ece"] <= 1
        assert set(r["rotated"]) == {30.0, 60.0, 90.0}
        assert all(0 <= v["auroc"] <= 1 for v in r["rotated"].values())
    table = (tmp_path / "results.md").read_text()
    assert "| 500 | weibull |" in table and "| 500 | lognormal | 90 |" in table
    assert (tmp_path / "reliability.png").stat().st_size > 0
    assert (tmp_path / "results.json").is_file()
    # --summarize rebuilds the tables from results.json; with two seeds it adds the paired
    # differences from softmax (here made +0.1 and +0.2 in accuracy).
    results = json.loads((tmp_path / "results.json").read_text())
    runs = []
    for seed, gain in ((0, 0.1), (1, 0.2)):
        for r in results["runs"]:
            r = copy.deepcopy(r)
            r["seed"] = seed
            if r["attention"] == "weibull":
                softmax = next(s for s in results["runs"] if s["attention"] == "softmax")
                r["clean"]["accuracy"] = softmax["clean"]["accuracy"] + gain
            runs.append(r)
    (tmp_path / "two_seeds").mkdir()
    path = tmp_path / "two_seeds" / "results.json"
    path.write_text(json.dumps({"settings": results["settings"], "runs": runs}))
    example["main"](["--summarize", str(path)])
    table = (tmp_path / "two_seeds" / "results.md").read_text()
    assert "2 seed(s) [0, 1]" in table
    assert "| 500 | weibull | +0.1500 ± 0.0707 (p=" in table


def test_example_rejects_bad_options(capsys):
    example = runpy.run_path(str(EXAMPLE), run_name="bayesian_attention")
    bad = [
        (["--train-sizes", "1000", "5000", "--epochs", "1", "2", "3"], "one per training size"),
        (["--train-sizes", "1000", "--reliability-size", "500"], "must be one of --train-sizes"),
    ]
    for argv, message in bad:
        with pytest.raises(SystemExit):
            example["parse_args"](argv)
        assert message in capsys.readouterr().err
    args = example["parse_args"](["--train-sizes", "1000", "5000", "--epochs", "4"])
    assert args.epochs_by_size == {1000: 4.0, 5000: 4.0}
