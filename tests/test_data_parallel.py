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

# XLA_FLAGS must be set before jax is imported: this runs in a fresh process.
NUMPYRO_SCRIPT = """
import json, sys
import jax, numpy as np
import inference, zoo
assert len(jax.devices()) == 2, jax.devices()
x = zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(0), 200)["x"]
kw = dict(guide="enum", K=3, num_steps=15, seed=0, progress=False)
one = inference.fit("bayesian_gmm", {"x": x}, "svi", "numpyro", **kw)
placed = []  # the devices each step's data are split over, and the rows each holds
def where(step, state, info):
    sharding = state.engine.data["x"].sharding
    placed.append([len(sharding.device_set), sharding.shard_shape((200, 2))[0]])
two = inference.fit("bayesian_gmm", {"x": x}, "svi", "numpyro", data_parallel=True,
                    callback=where, **kw)
assert placed[0] == [2, 100], placed
try:
    inference.fit("bayesian_gmm", {"x": x[:199]}, "svi", "numpyro", data_parallel=True, **kw)
except ValueError as err:
    uneven = str(err)
out = {"uneven": uneven}
for name, res in (("one", one), ("two", two)):
    out[name] = {"objective": res.history["objective"].tolist()}
    out[name].update({k: v.tolist() for k, v in res.raw_params.items()})
print("RESULT" + json.dumps(out))
"""


def test_numpyro_sharded_over_two_devices_matches_one():
    import json

    env = {**os.environ, "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    run = subprocess.run(
        [sys.executable, "-c", NUMPYRO_SCRIPT],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    out = json.loads(run.stdout.split("RESULT")[-1])
    one, two = out["one"], out["two"]
    for key in one:
        np.testing.assert_allclose(two[key], one[key], rtol=1e-7, atol=1e-9, err_msg=key)
    assert "do not split evenly" in out["uneven"] and "multiple of 2" in out["uneven"]


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


def test_pyro_worker_dies_then_checkpoint_resumes(tmp_path, two_process_run):
    path = tmp_path / "run.zoo"
    died = torchrun("--out", tmp_path / "x.npz", "--checkpoint", path, "--die-at", 12)
    assert died.returncode != 0  # torchrun reports the failed worker and stops the group
    assert "exitcode  : 3" in died.stderr or "exitcode: 3" in died.stderr, died.stderr[-3000:]
    assert not (tmp_path / "x.npz").exists()
    saved, _ = inference.checkpoint.load(path)
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
