"""Fits in processes forked after a fit (Linux's default start method for ``multiprocessing``
and ``ProcessPoolExecutor``): Pyro's run there, NumPyro's are refused at once with the way out,
and nothing waits forever."""

import concurrent.futures as futures
import multiprocessing
import threading

import numpy as np
import pytest

import inference
import zoo

DATA = {"x": zoo.get_model("gmm").make_data(np.random.default_rng(0), 60)["x"]}


def em_objective(backend: str, seed: int = 0) -> float:
    res = inference.fit(
        "gmm", DATA, "em", backend, K=2, num_steps=3, tol=0, seed=seed, progress=False
    )
    return res.objective


def svi_objective(backend: str) -> float:
    res = inference.fit("bayesian_gmm", DATA, "svi", backend, K=2, num_steps=3, progress=False)
    return res.history["objective"][-1]


def in_pool(method: str, fn, *args, timeout: float = 120):
    """``fn(*args)`` in a one-process pool started by ``method``; a child that hangs is killed
    and fails the test instead of hanging it."""
    pool = futures.ProcessPoolExecutor(1, mp_context=multiprocessing.get_context(method))
    try:
        return pool.submit(fn, *args).result(timeout=timeout)
    except futures.TimeoutError:
        for process in list(pool._processes.values()):
            process.kill()
        pytest.fail(f"{fn.__name__}{args} hung in a {method}ed child")
    finally:
        pool.shutdown(wait=False, cancel_futures=True)


@pytest.mark.parametrize("parent_backend", ["pyro", "numpyro"])
def test_a_pyro_fit_runs_in_a_child_forked_after_a_fit(parent_backend):
    here = em_objective(parent_backend)
    there = in_pool("fork", em_objective, "pyro")
    assert np.isclose(there, em_objective("pyro"), rtol=1e-12)
    assert np.isfinite(here)


def test_pyro_svi_runs_in_a_forked_child():
    em_objective("pyro")
    assert np.isfinite(in_pool("fork", svi_objective, "pyro"))


@pytest.mark.parametrize("fn", [em_objective, svi_objective])
def test_a_numpyro_fit_in_a_child_forked_after_jax_ran_is_refused_with_the_way_out(fn):
    em_objective("numpyro")
    with pytest.raises(inference.ForkedProcessError, match=r"get_context\('spawn'\)"):
        in_pool("fork", fn, "numpyro", timeout=60)


def test_a_fork_while_a_fit_runs_in_another_thread_leaves_the_child_free_to_fit():
    from inference import api

    started, release = threading.Event(), threading.Event()

    def hold(step, state, info):
        started.set()
        release.wait(60)

    thread = threading.Thread(
        target=inference.fit,
        args=("gmm", DATA, "em", "pyro"),
        kwargs={"K": 2, "num_steps": 2, "tol": 0, "progress": False, "callback": hold},
    )
    thread.start()
    try:
        assert started.wait(60)
        assert api._FIT_RUNNING.locked()  # the fork copies a held lock
        assert np.isfinite(in_pool("fork", em_objective, "pyro"))
    finally:
        release.set()
        thread.join()


def test_numpyro_fits_run_in_spawned_children():
    em_objective("numpyro")
    assert np.isclose(in_pool("spawn", em_objective, "numpyro"), em_objective("numpyro"))
