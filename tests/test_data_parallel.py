"""Data-parallel SVI: NumPyro sharded over several (host CPU) devices, Pyro over a
torch.distributed group of processes; each against one device or process."""

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import inference
import zoo

ROOT = Path(__file__).resolve().parents[1]
WORKER = ROOT / "tests" / "data_parallel_worker.py"

# XLA_FLAGS must be set before jax is imported: this runs in a fresh process. 25,000 rows are
# enough for jaxlib to split the triangular solve of the likelihood (3 components, 2-D) over
# XLA's thread pool, which deadlocked two host devices on a 2-CPU machine before the zoo sized it.
NUMPYRO_SCRIPT = """
import json, sys
import jax, numpy as np
import inference, zoo
assert len(jax.devices()) == 2, jax.devices()
x = zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(0), 25000)["x"]
kw = dict(guide="enum", K=3, num_steps=15, seed=0, progress=False)
one = inference.fit("bayesian_gmm", {"x": x}, "svi", "numpyro", **kw)
placed = []  # the devices each step's data are split over, and the rows each holds
def where(step, state, info):
    sharding = state.engine.data["x"].sharding
    placed.append([len(sharding.device_set), sharding.shard_shape((25000, 2))[0]])
two = inference.fit("bayesian_gmm", {"x": x}, "svi", "numpyro", data_parallel=True,
                    callback=where, **kw)
assert placed[0] == [2, 12500], placed
try:
    inference.fit("bayesian_gmm", {"x": x[:24999]}, "svi", "numpyro", data_parallel=True, **kw)
except ValueError as err:
    uneven = str(err)
out = {"uneven": uneven}
for name, res in (("one", one), ("two", two)):
    out[name] = {"objective": res.history["objective"].tolist()}
    out[name].update({k: v.tolist() for k, v in res.raw_params.items()})
print("RESULT" + json.dumps(out))
"""


def two_host_devices(script, timeout, **env):
    """``script`` run in a fresh process with 2 host CPU devices, XLA's thread pool left to JAX
    and the zoo unless ``env`` sets it; its ``RESULT`` line, parsed."""
    import json

    base = {k: v for k, v in os.environ.items() if k not in ("PJRT_NPROC", "NPROC")}
    base["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
    run = subprocess.run(
        [sys.executable, "-c", script],
        env={**base, **env},
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    return json.loads(run.stdout.split("RESULT")[-1])


@pytest.mark.slow
def test_numpyro_sharded_over_two_devices_matches_one():
    out = two_host_devices(NUMPYRO_SCRIPT, timeout=300)
    one, two = out["one"], out["two"]
    for key in one:
        np.testing.assert_allclose(two[key], one[key], rtol=1e-7, atol=1e-9, err_msg=key)
    assert "do not split evenly" in out["uneven"] and "multiple of 2" in out["uneven"]


# Triangular solves of a batch that jaxlib splits over XLA's CPU pool, sharded over the 2 devices:
# each device's program runs several at once, each holding a pool thread while it waits.
SHARDED_SOLVES = """
import jax, jax.numpy as jnp, numpy as np
from jax.sharding import Mesh, NamedSharding, PartitionSpec
jax.config.update("jax_enable_x64", True)
rows = NamedSharding(Mesh(np.array(jax.devices()), ("data",)), PartitionSpec("data"))
tril = jax.device_put(jnp.tile(2.0 * jnp.eye(4), (8, 1, 1)), rows)
rhs = jax.device_put(jnp.ones((8, 4, 20000)), rows)
solve = jax.scipy.linalg.solve_triangular
solves = jax.jit(lambda a, b: sum(solve(a * (k + 1), b + k, lower=True).sum() for k in range(12)))
"""

POOL_SCRIPT = (
    """
import json, os
if hasattr(os, "sched_setaffinity"):  # as on a 2-CPU machine, where JAX's pool has 2 threads
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:2])
import zoo  # before JAX starts
"""
    + SHARDED_SOLVES
    + """
total = float(solves(tril, rhs))
print("RESULT" + json.dumps({"total": total, "threads": os.environ.get("PJRT_NPROC")}))
"""
)


def test_host_devices_get_a_thread_pool_that_cannot_deadlock():
    # Before the zoo sized XLA's pool (2 threads on 2 CPUs), every thread waited in a solve
    # and this never returned.
    out = two_host_devices(POOL_SCRIPT, timeout=60)
    assert out["threads"] == "9"  # 4 per device and one more
    assert out["total"] == sum(8 * 4 * 20000 * (1 + k) / (2 * (k + 1)) for k in range(12))


STALL_SCRIPT = (
    """
import json, time
from inference.backends import numpyro_backend
try:  # as SVIEngine(data_parallel=True) does before anything runs
    numpyro_backend.data_parallel_shardings(200)
except RuntimeError as err:
    upfront = str(err)
"""
    + SHARDED_SOLVES
    + """
# Whether the two device programs meet in the pool is a race: a run that completes (the other
# device started late, on a busy machine) is tried again with new inputs.
stall = None
for attempt in range(1, 21):
    start = time.monotonic()
    try:
        numpyro_backend.wait_for_step(solves(tril, rhs + attempt), stall_seconds=2.0)
    except numpyro_backend.DeviceStallError as err:
        stall = {"message": str(err), "after": time.monotonic() - start, "attempt": attempt}
        break
print("RESULT" + json.dumps({"upfront": upfront, "stall": stall}), flush=True)
"""
)


def test_numpyro_host_devices_deadlock_is_an_error_not_a_hang():
    # A pool of one thread per device, as JAX makes it when it starts before the zoo is imported
    # on a machine with as many CPUs as devices (here set by hand): data-parallel SVI refuses to
    # start, and a step that deadlocks anyway is an error once the process stays idle.
    out = two_host_devices(STALL_SCRIPT, timeout=60, PJRT_NPROC="2")
    assert "would deadlock" in out["upfront"] and "PJRT_NPROC=9" in out["upfront"]
    assert out["stall"] is not None, "20 runs of the solves never deadlocked"
    assert "deadlocked" in out["stall"]["message"]
    assert "PJRT_NPROC=9" in out["stall"]["message"]
    assert 2.0 <= out["stall"]["after"] < 30.0
    # ... and the process still exits (the subprocess returned 0).


def test_host_thread_pool_is_sized_before_jax_starts(monkeypatch):
    from zoo import devices

    monkeypatch.setattr(devices, "_jax_started", lambda: False)
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)  # 2 CPUs
    for name in ("PJRT_NPROC", "NPROC"):
        monkeypatch.delenv(name, raising=False)
    flags = "--xla_force_host_platform_device_count=1 --xla_force_host_platform_device_count=2"
    monkeypatch.setenv("XLA_FLAGS", flags)  # the last one counts, as for XLA
    assert devices.host_device_count() == 2 and devices.host_thread_pool_size(2) == 2
    devices.reserve_host_threads()
    assert os.environ["PJRT_NPROC"] == "9" and devices.host_thread_pool_size(2) == 9
    monkeypatch.setenv("PJRT_NPROC", "3")  # the user's own size stays
    devices.reserve_host_threads()
    assert os.environ["PJRT_NPROC"] == "3" and devices.host_thread_pool_size(2) == 3
    monkeypatch.delenv("PJRT_NPROC")
    monkeypatch.setenv("NPROC", "1")  # XLA's other variable; never fewer threads than devices
    assert devices.host_thread_pool_size(2) == 2
    monkeypatch.delenv("NPROC")
    monkeypatch.setenv("XLA_FLAGS", "")  # one device: nothing to do
    devices.reserve_host_threads()
    assert "PJRT_NPROC" not in os.environ


def torchrun(*args, timeout=300):
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2"]
    return subprocess.run(
        cmd + [str(WORKER), *map(str, args)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def two_process_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("dp") / "two.npz"
    run = torchrun("--out", out)
    assert run.returncode == 0, run.stderr[-3000:]
    return dict(np.load(out))


def test_pyro_two_processes_match_one(two_process_run):
    x = zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(0), 200)["x"]
    one = inference.fit(
        "bayesian_gmm", {"x": x}, "svi", "pyro", guide="enum", K=3, num_steps=20, progress=False
    )
    np.testing.assert_allclose(two_process_run["objective"], one.history["objective"], rtol=1e-10)
    for k, v in one.raw_params.items():
        np.testing.assert_allclose(two_process_run[f"raw/{k}"], v, rtol=1e-8, atol=1e-10)


@pytest.mark.slow
def test_pyro_worker_dies_then_checkpoint_resumes(tmp_path, two_process_run):
    path = tmp_path / "run.zoo"
    died = torchrun("--out", tmp_path / "x.npz", "--checkpoint", path, "--die-at", 12)
    assert died.returncode != 0  # torchrun reports the failed worker and stops the group
    assert "exitcode  : 3" in died.stderr or "exitcode: 3" in died.stderr, died.stderr[-3000:]
    assert not (tmp_path / "x.npz").exists()
    saved, _ = inference.persistence.checkpoint.load(path)
    assert saved["step"] in (10, 12)  # periodic (every 5) or saved as the survivor stopped
    resumed = torchrun("--out", tmp_path / "resumed.npz", "--checkpoint", path, "--resume")
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    got = np.load(tmp_path / "resumed.npz")
    for k, v in two_process_run.items():
        np.testing.assert_array_equal(got[k], v, err_msg=k)


def test_pyro_data_parallel_needs_a_group(gmm_data, monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(ValueError, match="launch the script with torchrun"):
        inference.fit(
            "bayesian_gmm", {"x": gmm_data}, "svi", "pyro", K=3, num_steps=1, data_parallel=True
        )
    with pytest.raises(ValueError, match="data_parallel= is an option of algorithm 'svi'"):
        inference.fit("bayesian_gmm", {"x": gmm_data}, "cavi", K=3, data_parallel=True)
