"""elbo="iwae": Burda et al.'s bound taken row by row, the data plate's scale applied to each
row's bound (Pyro's and NumPyro's RenyiELBO apply it to the particles' log-weights, inside the
log-mean-exp, so on minibatches they train another objective)."""

import warnings

import numpy as np
import pytest

import inference
import zoo

SMALL = dict(latent_dim=3, hidden=(24,))
SCALED = 5000  # num_data for 10 rows: the data plate's scale is 500


@pytest.fixture(scope="module")
def data():
    return zoo.get_model("vae").make_data(np.random.default_rng(0), 10)


def test_pyro_bound_scales_outside_each_rows_log_mean_exp(data):
    """At the same draws: the objective at scale 500 is 500 times the objective at scale 1,
    which is RenyiELBO's value; RenyiELBO's own objective at scale 500 is above the bound."""
    import pyro
    import torch

    from inference.backends.pyro_importance import ImportanceWeightedELBO
    from zoo.vae import prepare, pyro_model

    config = prepare(data, **SMALL)
    model, guide = pyro_model.make_model(config), pyro_model.make_guide("amortized", config)
    x = {"x": torch.as_tensor(data["x"])}
    renyi = pyro.infer.RenyiELBO(alpha=0, num_particles=5, vectorize_particles=True)
    with pyro.get_param_store().scope():
        renyi.loss(model, guide, x, config)  # makes the parameters
        bound = {}
        for name, elbo in (("ours", ImportanceWeightedELBO(5)), ("renyi", renyi)):
            for num_data in (None, SCALED):
                torch.manual_seed(1)
                bound[name, num_data] = -elbo.loss(model, guide, x, config, num_data=num_data)
    assert bound["ours", None] == pytest.approx(bound["renyi", None], rel=1e-6)
    assert bound["ours", SCALED] / 500 == pytest.approx(bound["ours", None], rel=1e-6)
    assert bound["renyi", SCALED] / 500 > bound["ours", None] + 1.0  # nats, over 10 rows


def test_numpyro_bound_scales_outside_and_estimates_renyis_bound(data):
    """At the same key the objective at scale 500 is 500 times the objective at scale 1; over
    keys, that objective and RenyiELBO's estimate the same bound (other draws of the key)."""
    import jax
    from numpyro import handlers
    from numpyro.infer import RenyiELBO

    from inference.backends.numpyro_importance import ImportanceWeightedELBO
    from zoo.vae import numpyro_model, prepare

    config = prepare(data, **SMALL)
    model, guide = numpyro_model.make_model(config), numpyro_model.make_guide("amortized", config)
    x = {"x": jax.numpy.asarray(data["x"])}
    trace = handlers.trace(handlers.seed(guide, 0)).get_trace(x, config)
    params = {k: site["value"] for k, site in trace.items() if site["type"] == "param"}
    ours, renyi = ImportanceWeightedELBO(5), RenyiELBO(alpha=0, num_particles=5)

    def bounds(elbo, key, num_data=None):
        return -elbo.loss(key, params, model, guide, x, config, num_data=num_data)

    @jax.jit
    @jax.vmap
    def at(key):
        return bounds(ours, key, SCALED), bounds(ours, key), bounds(renyi, key)

    scaled, a, b = (np.asarray(v) for v in at(jax.random.split(jax.random.PRNGKey(3), 256)))
    np.testing.assert_allclose(scaled / 500, a, rtol=1e-6)
    standard_error = np.hypot(a.std(), b.std()) / np.sqrt(len(a))
    assert abs(a.mean() - b.mean()) < 4 * standard_error


@pytest.mark.parametrize("backend", ["pyro", pytest.param("numpyro", marks=pytest.mark.slow)])
def test_a_vae_fit_on_minibatches_trains_the_bound_without_a_warning(data, backend):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        res = inference.fit(
            "vae", data, "svi", backend, elbo="iwae", num_particles=2, batch_size=5,
            num_steps=4, tol=0, progress=False, **SMALL,
        )  # fmt: skip
    assert not [w for w in caught if "iwae" in str(w.message)]
    assert np.all(np.isfinite(res.history["objective"]))


def _global_pyro():
    import pyro
    import pyro.distributions as dist
    import torch

    def model(x, num_data=None):
        mu = pyro.sample("mu", dist.Normal(0.0, 1.0))
        with zoo.plates.pyro_data_plate(len(x), num_data):
            pyro.sample("x", dist.Normal(mu, 1.0), obs=x)

    def guide(x, num_data=None):
        loc = pyro.param("loc", torch.tensor(0.3))
        pyro.sample("mu", dist.Normal(loc, 0.5))

    return model, guide, torch.linspace(-1.0, 1.0, 8)


def _global_numpyro():
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist

    def model(x, num_data=None):
        mu = numpyro.sample("mu", dist.Normal(0.0, 1.0))
        with zoo.plates.numpyro_data_plate(len(x), num_data):
            numpyro.sample("x", dist.Normal(mu, 1.0), obs=x)

    def guide(x, num_data=None):
        loc = numpyro.param("loc", 0.3)
        numpyro.sample("mu", dist.Normal(loc, 0.5))

    return model, guide, jnp.linspace(-1.0, 1.0, 8)


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_global_latents_take_the_whole_datas_bound_and_minibatches_warn(backend):
    """A latent outside the data plate: the bound does not split into rows, so it is
    RenyiELBO's (the same value at the same draws), and with a scaled plate a warning says
    that it is not the importance-weighted bound."""
    import zoo.plates  # noqa: F401

    model, guide, x = (_global_pyro if backend == "pyro" else _global_numpyro)()
    if backend == "pyro":
        import pyro
        import torch

        from inference.backends.pyro_importance import ImportanceWeightedELBO

        def value(elbo, num_data):
            torch.manual_seed(0)
            return elbo.loss(model, guide, x, num_data=num_data)

        renyi = pyro.infer.RenyiELBO(alpha=0, num_particles=4, vectorize_particles=True)
        scope = pyro.get_param_store().scope()
    else:
        import contextlib

        import jax
        from numpyro.infer import RenyiELBO

        from inference.backends.numpyro_importance import ImportanceWeightedELBO

        def value(elbo, num_data):
            params = {"loc": jax.numpy.asarray(0.3)}
            return float(
                elbo.loss(jax.random.PRNGKey(0), params, model, guide, x, num_data=num_data)
            )

        renyi = RenyiELBO(alpha=0, num_particles=4)
        scope = contextlib.nullcontext()
    with scope:
        whole, scaled = ImportanceWeightedELBO(4), ImportanceWeightedELBO(4)
        value(renyi, None)  # an estimator's first call may read the model's structure
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            value(whole, None)
            assert value(whole, None) == pytest.approx(value(renyi, None), rel=1e-6)
        with pytest.warns(
            UserWarning, match=r"minibatches of a model with latents outside .*\(mu\)"
        ):
            value(scaled, 80)
            assert value(scaled, 80) == pytest.approx(value(renyi, 80), rel=1e-6)


def test_a_guide_without_reparameterised_draws_is_refused():
    import pyro
    import pyro.distributions as dist
    import torch

    from inference.backends.pyro_importance import ImportanceWeightedELBO

    def model(x):
        with zoo.plates.pyro_data_plate(len(x), None):
            z = pyro.sample("z", dist.Bernoulli(0.5))
            pyro.sample("x", dist.Normal(z, 1.0), obs=x)

    def guide(x):
        with zoo.plates.pyro_data_plate(len(x), None):
            pyro.sample("z", dist.Bernoulli(0.3))

    with pytest.raises(NotImplementedError, match=r"reparameterised guide; its site 'z'"):
        ImportanceWeightedELBO(2).loss(model, guide, torch.zeros(4))


# --- a weight on the latent sites (a KL weight, or its warm-up) --------------------------------

BETA, ROWS, NUM_DATA, PARTICLES = 0.3, 8, 80, 4  # the data plate's scale is 10


def _tempered_bound(x, z, loc, beta, scale):
    """By hand: each row's log-mean-exp over particles of log p(x | z) + beta (log p(z) -
    log q(z)), the rows' sum times the data plate's scale."""
    from scipy.special import logsumexp
    from scipy.stats import norm

    log_w = norm.logpdf(x, z, 1.0) + beta * (norm.logpdf(z, 0, 1) - norm.logpdf(z, loc, 0.5))
    return scale * (logsumexp(log_w, axis=0) - np.log(len(z))).sum()


def _weighted_pyro():
    import pyro
    import pyro.distributions as dist
    import torch

    def model(x, beta, num_data=None):
        with zoo.plates.pyro_data_plate(len(x), num_data):
            with pyro.poutine.scale(scale=beta):
                z = pyro.sample("z", dist.Normal(0.0, 1.0))
            pyro.sample("x", dist.Normal(z, 1.0), obs=x)

    def guide(x, beta, num_data=None):
        loc = pyro.param("loc", torch.linspace(-0.5, 0.5, len(x), dtype=torch.float64))
        with zoo.plates.pyro_data_plate(len(x), num_data), pyro.poutine.scale(scale=beta):
            pyro.sample("z", dist.Normal(loc, 0.5))

    return model, guide, torch.linspace(-1.0, 2.0, ROWS, dtype=torch.float64)


@pytest.mark.parametrize("beta", [1.0, BETA])
def test_pyro_bound_keeps_a_weight_on_the_latents_inside_the_log_weights(beta):
    """The data plate's scale is read from the observed site: a latent site's KL weight was
    taken for it and multiplied the whole bound (kl_weight=0.01 gave a hundredth of it)."""
    import pyro
    import torch

    from inference.backends.pyro_importance import ImportanceWeightedELBO, importance_traces

    model, guide, x = _weighted_pyro()
    with pyro.get_param_store().scope():
        torch.manual_seed(1)
        ours = -ImportanceWeightedELBO(PARTICLES).loss(model, guide, x, beta, num_data=NUM_DATA)
        torch.manual_seed(1)
        _, guide_trace = importance_traces(model, guide, PARTICLES, x, beta, num_data=NUM_DATA)
        z = guide_trace.nodes["z"]["value"].detach().numpy()
        loc = pyro.param("loc").detach().numpy()
    hand = _tempered_bound(x.numpy(), z.reshape(PARTICLES, ROWS), loc, beta, NUM_DATA / ROWS)
    assert ours == pytest.approx(hand, rel=1e-10)


def test_numpyro_bound_keeps_a_traced_weight_on_the_latents_inside_the_log_weights():
    """A weight traced under jit (a KL warm-up's step-dependent value) is a weight, not the
    data plate's scale (reading it as a number failed to compile)."""
    import jax
    import jax.numpy as jnp
    import numpyro
    import numpyro.distributions as dist
    from numpyro import handlers

    from inference.backends.numpyro_importance import ImportanceWeightedELBO

    def model(x, beta, num_data=None):
        with zoo.plates.numpyro_data_plate(len(x), num_data):
            with handlers.scale(scale=beta):
                z = numpyro.sample("z", dist.Normal(0.0, 1.0))
            numpyro.sample("x", dist.Normal(z, 1.0), obs=x)

    def guide(x, beta, num_data=None):
        loc = numpyro.param("loc", jnp.linspace(-0.5, 0.5, len(x)))
        with zoo.plates.numpyro_data_plate(len(x), num_data), handlers.scale(scale=beta):
            numpyro.sample("z", dist.Normal(loc, 0.5))

    x, key = jnp.linspace(-1.0, 2.0, ROWS), jax.random.PRNGKey(2)
    params = {"loc": jnp.linspace(-0.5, 0.5, ROWS)}
    elbo = ImportanceWeightedELBO(PARTICLES)
    loss = jax.jit(lambda beta: elbo.loss(key, params, model, guide, x, beta, num_data=NUM_DATA))
    ours = -float(loss(jnp.asarray(BETA)))
    z = [  # the draws the loss made, one key per particle
        handlers.trace(handlers.seed(handlers.substitute(guide, data=params), k)).get_trace(
            x, BETA, num_data=NUM_DATA
        )["z"]["value"]
        for k in (jax.random.split(particle, 2)[0] for particle in jax.random.split(key, PARTICLES))
    ]
    hand = _tempered_bound(np.asarray(x), np.stack(z), params["loc"], BETA, NUM_DATA / ROWS)
    assert ours == pytest.approx(hand, rel=1e-6)
