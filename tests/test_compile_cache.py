"""NumPyro fits compile once per structure: a later fit with the same model, guide, options and
shapes reuses the compiled initialisation and update, with its own seed, starting values, data
and config arrays as their arguments, and gets what a fit that compiled afresh gets."""

import dataclasses
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import numpyro
import numpyro.distributions as dist
import pytest

import inference
import zoo
from inference.backends import numpyro_backend
from inference.backends.svi_setup import SVISetup

#: A fit's parameters and last objectives as the code that compiled every fit afresh gave them
#: (the first values of each array), to check that the compiled functions compute the same.
REFERENCE = {
    # Taken again when a constant rate's temperature came to be annealed over the first half
    # of num_steps (it was all of them), with a fresh compilation and no kept functions.
    "gumbel": {
        "dof": [22.786151130256272, 51.97520219632483, 25.250724308213684],
        "mean_loc": [3.074065557021828, 3.3810219754990483, -1.80388831052362],
        "objective": [-478.42550119745783, -493.12724182307227, -481.01849285387624],
    },
    "enum": {
        "dof": [25.564519777281888, 49.320347871125676, 24.595066287188967],
        "mean_loc": [3.430643078910392, 3.794559959705542, -1.4305728289258963],
        "objective": [-479.15772573932946, -479.9173765158777, -479.68574314278135],
    },
}


def small_data(seed=0, n=100):
    return {"x": zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(seed), n)["x"]}


def svi(data, seed, guide="enum", **options):
    # A constant learning rate, as when REFERENCE was taken (the default is now a schedule).
    return inference.fit(
        "bayesian_gmm",
        data,
        "svi",
        "numpyro",
        K=3,
        num_steps=20,
        seed=seed,
        guide=guide,
        progress=False,
        **{"lr": 0.05, "tol": 0, **options},
    )


def assert_same_fit(a, b):
    assert a.raw_params.keys() == b.raw_params.keys()
    for name in a.raw_params:
        np.testing.assert_array_equal(a.raw_params[name], b.raw_params[name], err_msg=name)
    # XLA's CPU reductions may differ in the last bit from run to run: the loss, not the step.
    np.testing.assert_allclose(a.history["objective"], b.history["objective"], rtol=1e-13)


class CompileCounter:
    """XLA compilations while it is open, those that JAX's persistent cache answered included
    (the test run keeps one, which other tests may have filled)."""

    EVENTS = (
        "/jax/core/compile/backend_compile_duration",
        "/jax/compilation_cache/cache_retrieval_time_sec",  # recorded on a cache hit only
    )

    def __init__(self):
        self.count = 0

    def __call__(self, event, duration, **kwargs):
        if event in self.EVENTS:
            self.count += 1

    def __enter__(self):
        jax.monitoring.register_event_duration_secs_listener(self)
        return self

    def __exit__(self, *exc):
        jax.monitoring.unregister_event_duration_listener(self)


@pytest.mark.parametrize("guide", ["enum", pytest.param("gumbel", marks=pytest.mark.slow)])
def test_same_values_as_a_fresh_compilation(guide):
    data = small_data()
    numpyro_backend.clear_compiled()
    fresh = svi(data, seed=1, guide=guide)
    svi(data, seed=0, guide=guide)  # compiles; the next fit reuses it
    reused = svi(data, seed=1, guide=guide)
    assert_same_fit(fresh, reused)
    for name, first in REFERENCE[guide].items():
        got = reused.history[name][-3:] if name == "objective" else reused.raw_params[name]
        np.testing.assert_allclose(np.ravel(got)[:3], first, rtol=1e-12, err_msg=name)


def test_second_fit_compiles_nothing():
    data = small_data()
    svi(data, seed=0)
    with CompileCounter() as counter:
        svi(data, seed=5)
    assert counter.count == 0


@pytest.mark.slow  # compiles the Bayesian GMM three times (the cache tests below load it)
def test_data_and_config_values_are_arguments():
    """Other data of the same shape (and so other prior arrays, ``mean_prior`` from the data's
    mean) reuse the compilation and fit those data, not the first fit's."""
    numpyro_backend.clear_compiled()
    other = small_data(seed=7)
    fresh = svi(other, seed=2)
    svi(small_data(), seed=2)
    with CompileCounter() as counter:
        reused = svi(other, seed=2)
    assert counter.count == 0
    assert_same_fit(fresh, reused)


CLOSED_FORM = [("bayesian_gmm", "cavi"), ("gmm", "em"), ("bayesian_gmm", "svi-natural")]


def closed_form_fit(model, algorithm, data, **options):
    return inference.fit(model, data, algorithm, "numpyro", num_steps=5, tol=0, progress=False,
                         **options)  # fmt: skip


@pytest.mark.parametrize("model, algorithm", CLOSED_FORM)
def test_closed_form_fits_compile_their_start_and_steps_once_per_structure(model, algorithm):
    """The start (one update from the initial responsibilities) and the steps are compiled
    functions, the config's arrays their arguments: run eagerly, a mixture's start compiled
    each of its operations on its own (about 90 compilations, seconds), and every fit compiled
    its update again. A second fit on other data of the same shape compiles nothing and gets
    what a fit that compiled afresh gets."""
    spec = zoo.get_model(model)
    data, other = (spec.make_data(np.random.default_rng(seed), 100) for seed in (0, 3))
    numpyro_backend.clear_compiled()
    with CompileCounter() as counter:
        closed_form_fit(model, algorithm, data)
    assert 0 < counter.count <= 6  # start, steps, scoring; not one per operation
    numpyro_backend.clear_compiled()
    fresh = closed_form_fit(model, algorithm, other, seed=1)
    closed_form_fit(model, algorithm, data)  # compiles; the next fit reuses it
    with CompileCounter() as counter:
        reused = closed_form_fit(model, algorithm, other, seed=1)
    assert counter.count == 0
    for name in fresh.raw_params:
        np.testing.assert_array_equal(fresh.raw_params[name], reused.raw_params[name], name)


@pytest.mark.slow  # compiles the Bayesian GMM for each structure
def test_other_structure_compiles_again():
    data = small_data()
    svi(data, seed=0)
    with CompileCounter() as counter:
        svi(data, seed=0, lr=0.01)
    assert counter.count > 0


@dataclasses.dataclass(frozen=True)
class LineConfig:
    scale: float
    offset: jax.Array


def line_model(data, config, temperature=None):
    loc = numpyro.sample("loc", dist.Normal(config.offset, config.scale))
    with numpyro.plate("data", data["x"].shape[0]):
        numpyro.sample("x", dist.Normal(loc, 1.0), obs=data["x"])


def line_guide(start, own_loc=None):
    """``loc_q`` starts from ``start``, or from the data's mean; ``net`` holds a weight pytree
    like an equinox network's, started from ``net.w`` and ``net.b``."""

    def guide(data, config, temperature=None):
        mean = data["x"].mean()
        if own_loc is not None:  # a constant of the guide's own
            mean = jnp.asarray(own_loc)
        elif "loc_q" in start:
            mean = jnp.asarray(start["loc_q"])
        loc = numpyro.param("loc_q", mean)
        net = {"w": jnp.asarray(start["net.w"]), "b": jnp.asarray(start["net.b"])}
        net = numpyro.param("net$params", lambda _: net)
        numpyro.sample("loc", dist.Normal(loc + net["w"].sum() * net["b"], 1.0))

    return guide


def line_engine(start, data=None, own_loc=None):
    device = numpyro_backend.resolve_device("cpu")
    return numpyro_backend.SVIEngine(
        line_model,
        line_guide(start, own_loc),
        {"x": jnp.arange(4.0) if data is None else data},
        LineConfig(scale=2.0, offset=jnp.zeros(())),
        SVISetup(
            elbo="trace", lr=0.1, seed=0, device=device, compile_key=("line", "test"), start=start
        ),
    )


def test_starting_values_are_arguments():
    """Named arrays, a network's weights by their names, and a start from the data, each
    from its own fit when the compilation is reused."""
    numpyro_backend.clear_compiled()
    for value in (1.5, -3.0):
        start = {"loc_q": np.asarray(value), "net.w": np.full(2, value), "net.b": np.asarray(2.0)}
        engine = line_engine(start)
        params = engine.params(engine.initial_state())
        assert params["loc_q"] == value and params["net.w"].tolist() == [value, value]
    for data in (jnp.arange(4.0), jnp.arange(4.0) + 10.0):
        engine = line_engine({"net.w": np.ones(2), "net.b": np.asarray(0.0)}, data=data)
        assert engine.params(engine.initial_state())["loc_q"] == data.mean()
    # One compilation for each set of starting values' names and shapes.
    assert len(numpyro_backend._COMPILED) == 2
    assert all(c.starts_are_arguments for c in numpyro_backend._COMPILED.values())


def test_constant_starts_are_not_reused():
    """A start the guide holds as a constant of its own (here ``loc_q`` of another shape than
    its site): the initialisation compiles again for other values."""
    numpyro_backend.clear_compiled()
    for value in (1.5, -3.0, 1.5):
        start = {"loc_q": np.zeros(3), "net.w": np.full(2, value), "net.b": np.asarray(1.0)}
        engine = line_engine(start, own_loc=value)
        assert engine.params(engine.initial_state())["loc_q"] == value
    (compiled,) = numpyro_backend._COMPILED.values()
    assert not compiled.starts_are_arguments


@pytest.mark.parametrize("backend", ["pyro", "numpyro"])
def test_timing_has_the_setup(backend):
    if backend == "numpyro":  # the structure the other tests here compile, kept on disk
        res = svi(small_data(), seed=0)
    else:
        res = inference.fit(
            "bayesian_gmm", small_data(), "svi", backend, K=3, num_steps=5, progress=False
        )
    timing = res.timing
    assert timing["setup"] > 0 and timing["first_step"] > 0
    assert timing["setup"] + timing["total"] <= timing["wall"]


# --- across processes: exported functions on disk ---------------------------------------------

FIT_IN_A_NEW_PROCESS = """
import json, sys
import numpy as np
import inference, zoo
from inference.backends import numpyro_backend
from inference.backends.svi_setup import SVISetup
data = {"x": zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(0), 100)["x"]}
res = inference.fit("bayesian_gmm", data, "svi", "numpyro", K=3, num_steps=20, seed=1,
                    guide=sys.argv[1], progress=False, lr=0.05, tol=0)
functions = [f for c in numpyro_backend._COMPILED.values()
             for f in (c.update, c.get_params, *[i for i, _ in c._inits.values()])]
print(json.dumps({
    "loaded": sum(f.loaded for f in functions),
    "exported": sum(f.exported for f in functions),
    "params": {k: v.tolist() for k, v in res.raw_params.items()},
    "objective": res.history["objective"].tolist(),
}))
"""


def fit_in_a_new_process(cache, guide="enum"):
    """A fit in a new process whose caches are in ``cache`` (``"0"``: none)."""
    import json
    import os
    import subprocess
    import sys

    env = {**os.environ, "ZOO_JAX_CACHE": str(cache)}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    done = subprocess.run(
        [sys.executable, "-c", FIT_IN_A_NEW_PROCESS, guide],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1])


def test_a_new_process_loads_what_an_earlier_one_exported(tmp_path):
    """The first process exports the initialisation, update and parameters; the second loads
    all three (it traces neither model nor guide) and fits exactly what a process without the
    store fits."""
    first = fit_in_a_new_process(tmp_path)
    assert first["loaded"] == 0 and first["exported"] == 3
    files = sorted((tmp_path / "exported").iterdir())
    assert [f.name.split("-")[0] for f in files] == ["init", "params", "update"]
    assert any((tmp_path / "jax").iterdir())  # XLA's executables, in JAX's cache
    second = fit_in_a_new_process(tmp_path)
    assert second["loaded"] == 3 and second["exported"] == 0
    without = svi(small_data(), seed=1)  # this process keeps nothing on disk
    assert second["params"] == first["params"]
    assert {k: v.tolist() for k, v in without.raw_params.items()} == first["params"]
    for objective in (second["objective"], without.history["objective"]):
        np.testing.assert_allclose(objective, first["objective"], rtol=1e-13)


@pytest.mark.slow
def test_a_damaged_file_is_exported_again(tmp_path):
    first = fit_in_a_new_process(tmp_path, guide="gumbel")
    (update,) = (tmp_path / "exported").glob("update-*")
    content = bytearray(update.read_bytes())
    content[len(content) // 2] ^= 0xFF
    update.write_bytes(bytes(content))
    second = fit_in_a_new_process(tmp_path, guide="gumbel")
    assert second["loaded"] == 2 and second["exported"] == 1
    assert second["params"] == first["params"]
    assert update.read_bytes() != bytes(content)  # written again, whole


def test_the_key_covers_the_source_and_settings(monkeypatch, tmp_path):
    from inference.backends import exported

    args = ({"x": jnp.zeros(3)},)

    def file_for(key="key", args=args):
        return exported.file_for("update", key, args, "cpu", tmp_path)

    path = file_for()
    assert file_for() == path
    assert file_for(key="other") != path
    assert file_for(args=({"x": jnp.zeros(4)},)) != path
    assert file_for(args=({"x": jnp.zeros(3, "float32")},)) != path
    with jax.default_matmul_precision("highest"):
        assert file_for() != path
    monkeypatch.setattr(exported, "_source_fingerprint", lambda: "edited source")
    assert file_for() != path


def test_plugin_models_are_not_kept():
    """A model defined outside the zoo could change without the key changing."""
    spec = zoo.get_model("bayesian_gmm")
    assert spec.built_in
    assert not dataclasses.replace(
        spec, backends={**spec.backends, "numpyro": "mine.model"}
    ).built_in
    assert not dataclasses.replace(
        spec, updates=dataclasses.replace(spec.updates, module="mine.updates")
    ).built_in


# --- the platform a kept function is for ------------------------------------------------------


class FakeDevice:
    def __init__(self, platform):
        self.platform = platform


def test_a_gpu_device_is_keyed_and_exported_by_the_platform_name_export_uses(monkeypatch):
    """JAX calls a CUDA device's platform "gpu"; ``jax.export`` names it "cuda" and refuses a
    module lowered for "gpu". The name comes from the backend this process has."""
    from inference.backends import exported

    backends = {"cuda"}

    def devices(name=None):
        if name in backends:
            return [FakeDevice("gpu")]
        raise RuntimeError(f"Backend '{name}' is not in the list of known backends")

    monkeypatch.setattr(exported.jax, "devices", devices)
    assert exported.export_platform("gpu") == "cuda"
    backends = {"rocm"}
    assert exported.export_platform("gpu") == "rocm"
    assert exported.export_platform("cpu") == "cpu"
    assert exported.export_platform("tpu") == "tpu"
    fn = exported.PersistentFunction(lambda x: x, "f", "key", FakeDevice("gpu"))
    assert fn.platform == "rocm"


def test_a_module_lowered_for_cuda_exports_without_a_gpu():
    """What a GPU process writes: lowering for "cuda" needs no GPU, and the module names it."""
    from inference.backends import exported

    module = jax.export.export(jax.jit(lambda x: 2 * x), platforms=["cuda"])(jnp.zeros(3))
    assert module.platforms == ("cuda",)
    assert exported.export_platform(jax.devices()[0].platform) in ("cpu", "cuda", "rocm", "tpu")


def test_a_kept_function_that_cannot_run_here_falls_back_to_tracing(monkeypatch, tmp_path):
    """A file in the cache holding a module for another platform (or one that does not fit its
    key) is not an error: the call warns once and traces the function as jax.jit would."""
    from inference.backends import exported

    monkeypatch.setenv("ZOO_JAX_CACHE", str(tmp_path))
    args = (jnp.arange(3.0),)
    fn = exported.PersistentFunction(lambda x: 2 * x + 1, "update", "key", jax.devices()[0])
    path = exported.file_for("update", "key", args, fn.platform, tmp_path / "exported")
    foreign = jax.export.export(jax.jit(lambda x: 2 * x + 1), platforms=["cuda"])(*args)
    assert exported.write(path, foreign)
    with pytest.warns(RuntimeWarning, match="could not run here.*tracing it again"):
        out = fn(*args)
    np.testing.assert_array_equal(out, [1.0, 3.0, 5.0])
    assert fn.loaded == 1
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # once per signature: the next call is the traced one
        np.testing.assert_array_equal(fn(*args), [1.0, 3.0, 5.0])
    # A module of the right platform but another signature behind the key: the same.
    other = jax.export.export(jax.jit(lambda x, y: x), platforms=[fn.platform])(*args, *args)
    assert exported.write(path, other)
    fresh = exported.PersistentFunction(lambda x: 2 * x + 1, "update", "key", jax.devices()[0])
    with pytest.warns(RuntimeWarning, match="could not run here"):
        np.testing.assert_array_equal(fresh(*args), [1.0, 3.0, 5.0])


def test_a_fifo_in_the_cache_is_traced_past_not_waited_on(monkeypatch, tmp_path):
    """A named pipe where a kept function's file should be: reading it would wait forever for
    a writer, so it counts as no file: the function is traced, and not kept (a file of
    results never replaces a FIFO), with the one warning that says so."""
    import os
    import threading

    from inference.backends import exported

    monkeypatch.setenv("ZOO_JAX_CACHE", str(tmp_path))
    args = (jnp.arange(3.0),)
    fn = exported.PersistentFunction(lambda x: 2 * x + 1, "update", "key", jax.devices()[0])
    path = exported.file_for("update", "key", args, fn.platform, tmp_path / "exported")
    path.parent.mkdir(parents=True, exist_ok=True)
    os.mkfifo(path)
    out = []
    call = threading.Thread(target=lambda: out.append(fn(*args)), daemon=True)
    with warnings.catch_warnings(record=True) as caught:  # the filters are the process's
        warnings.simplefilter("always")
        call.start()
        call.join(timeout=60)
    if call.is_alive():  # old behaviour: blocked in the read; a writer's open releases it
        os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
        call.join(timeout=10)
        pytest.fail("the call waited on the FIFO")
    np.testing.assert_array_equal(out[0], [1.0, 3.0, 5.0])
    assert [str(w.message).split(" (")[0] for w in caught] == [
        f"Could not keep a compiled function in {path.parent}"
    ]


def test_a_genuine_error_of_the_function_is_raised(monkeypatch, tmp_path):
    from inference.backends import exported

    monkeypatch.setenv("ZOO_JAX_CACHE", str(tmp_path))

    def broken(x):
        raise ValueError("the model's own error")

    fn = exported.PersistentFunction(broken, "update", "key", jax.devices()[0])
    with pytest.raises(ValueError, match="the model's own error"):
        fn(jnp.zeros(2))
