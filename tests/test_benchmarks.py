"""Every benchmark runs end to end in its --quick mode and reports what its README table needs.

The timings of a smoke run on a shared machine say nothing, so only their form is checked here:
every path timed, positive, finite, and the ratios taken against the right baseline.
"""

import ast
import importlib.util
import json
import math
import os
import runpy
import subprocess
import sys
import warnings
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def run_benchmark(name, argv):
    script = runpy.run_path(str(BENCHMARKS / f"{name}.py"), run_name=name)  # in-process
    return script["main"](argv)


def positive(x):
    return isinstance(x, float) and math.isfinite(x) and x > 0


@pytest.mark.slow
def test_bam_speed_quick(tmp_path):
    table = run_benchmark("bam_speed", ["--quick", "--json", str(tmp_path / "bam.json")])
    for backend in ("pyro", "numpyro"):
        assert table[f"{backend} softmax"]["x_softmax"] == 1.0
        for attention in ("softmax", "weibull", "lognormal"):
            row = table[f"{backend} {attention}"]
            assert positive(row["ms_per_step"]) and positive(row["x_softmax"])
    assert json.loads((tmp_path / "bam.json").read_text())["results"] == table


def test_bam_speed_ablate_quick():
    table = run_benchmark("bam_speed", ["--quick", "--backends", "pyro", "--ablate"])
    for attention in ("weibull", "lognormal"):
        for part in ("fixed prior", "no noise draw", "no prior gradient", "no layer KL"):
            row = table[f"pyro {attention}, {part}"]
            assert positive(row["x_softmax"]) and positive(row["x_whole_step"])
    assert "x_whole_step" not in table["pyro weibull"]
    with pytest.raises(SystemExit):  # argparse's error: the stand-ins are Pyro's
        run_benchmark("bam_speed", ["--quick", "--backends", "numpyro", "--ablate"])


def test_bam_parts_quick(tmp_path):
    table = run_benchmark("bam_parts", ["--quick", "--json", str(tmp_path / "parts.json")])
    assert {"softmax weights", "Weibull weights", "contextual prior network"} <= set(table)
    assert all(positive(us) for us in table.values())
    assert json.loads((tmp_path / "parts.json").read_text())["us_per_call"] == table


def test_vae_speed_quick(tmp_path, data_dir, monkeypatch):
    monkeypatch.setenv("ZOO_DATA_DIR", str(data_dir))
    monkeypatch.setenv("ZOO_OFFLINE", "1")
    table = run_benchmark("vae_speed", ["--quick", "--json", str(tmp_path / "vae.json")])
    assert table["plain PyTorch loop"]["x_plain_pytorch"] == 1.0
    assert {name.split(",")[0] for name in table} == {
        "plain PyTorch loop",
        "zoo Pyro",
        "zoo NumPyro",
    }
    for row in table.values():
        assert positive(row["seconds_per_epoch"]) and positive(row["x_plain_pytorch"])


def test_cavi_speed_quick(tmp_path):
    out = run_benchmark("cavi_speed", ["--quick", "--json", str(tmp_path / "cavi.json")])
    assert set(out["seconds_per_iteration"]) == {"sklearn", "numpyro", "pyro", "pyro jit"}
    assert all(positive(t) for t in out["seconds_per_iteration"].values())
    # The zoo's CAVI and scikit-learn's variational mixture reach the same means.
    assert max(out["max_relative_difference_of_means_vs_sklearn"].values()) < 1e-6
    assert json.loads((tmp_path / "cavi.json").read_text()) == out


@pytest.mark.slow
def test_svi_overhead_quick(tmp_path):
    out = run_benchmark("svi_overhead", ["--quick", "--json", str(tmp_path / "overhead.json")])
    for backend in ("numpyro", "pyro"):
        row = out[backend]
        assert positive(row["zoo_s_per_step"]) and positive(row["bare_s_per_step"])
        assert row["ratio"] == pytest.approx(row["zoo_s_per_step"] / row["bare_s_per_step"])


@pytest.mark.slow
def test_svi_natural_vs_cavi_quick(tmp_path):
    path = tmp_path / "natural.json"
    run_benchmark("svi_natural_vs_cavi", ["--quick", "--out", str(path)])
    report = json.loads(path.read_text())
    assert positive(report["svi_natural"]["wall_s"])
    assert math.isfinite(report["svi_natural"]["heldout_per_point"])


def test_svi_large_n_quick(tmp_path, regression_spec):
    # The fixture registers the example plugin for this module and forgets it after; the
    # benchmark finds it registered and does not register it for the tests that follow.
    results = run_benchmark("svi_large_n", ["--quick", "--json", str(tmp_path / "large.json")])
    assert [(r["backend"], r["rows"], r["steps"]) for r in results] == [
        ("pyro", 5_000, 200),
        ("numpyro", 5_000, 200),
    ]
    for row in results:
        assert len(row["sd_ratio"]) == len(row["mean_error_sds"]) == 3
        assert all(positive(r) for r in row["sd_ratio"]) and positive(row["seconds"])
    assert json.loads((tmp_path / "large.json").read_text())["results"] == results


@pytest.mark.slow
def test_nuts_overhead_quick(tmp_path):
    path = str(tmp_path / "nuts.json")
    rows = run_benchmark("nuts_overhead", ["--quick", "--backends", "numpyro", "--json", path])
    assert [row["backend"] for row in rows] == ["numpyro"]
    for row in rows:
        assert positive(row["zoo_ess_per_s"]) and positive(row["bare_ess_per_s"])
        assert row["ratio"] == pytest.approx(row["zoo_ess_per_s"] / row["bare_ess_per_s"])
        # Same kernel, settings, start and seed: the zoo's chains are the bare ones.
        zoo_ess = [ess for _, ess, _ in row["runs"]["zoo"]]
        assert zoo_ess == [ess for _, ess, _ in row["runs"]["bare"]]
    assert json.loads((tmp_path / "nuts.json").read_text())["rows"] == json.loads(json.dumps(rows))


@pytest.mark.slow
def test_latency_quick(tmp_path):
    """New processes (cold and warm cache) and the second fit of a process, on NumPyro, whose
    compiled functions the cache keeps (each new process takes seconds here; the script runs
    both backends alike). The example's part runs gmm_compare.py twice, minutes even with
    --quick; its sum is checked below."""
    argv = ["--quick", "--no-example", "--backends", "numpyro"]
    out = run_benchmark("latency", [*argv, "--json", str(tmp_path / "latency.json")])
    assert [r["backend"] for r in out["fits"]] == ["numpyro"]
    for row in out["fits"]:
        timings = [v for k, v in row.items() if k.endswith("_s")]
        assert all(positive(t) for t in timings), row
    assert out["examples"] == []
    assert json.loads((tmp_path / "latency.json").read_text()) == out


def test_latency_sums_the_example_tables(tmp_path):
    """Set-up, fit and scoring of every row of both tables, and the steps after the first; a
    table without the set-up and scoring columns (an older checkout's) counts its fits."""
    script = runpy.run_path(str(BENCHMARKS / "latency.py"), run_name="latency")
    rows = [
        {"wall_time_s": 2.0, "first_step_s": 1.5, "setup_s": 0.5, "evaluation_s": 0.25},
        {"wall_time_s": 1.0, "first_step_s": 0.5},
    ]
    (tmp_path / "table.json").write_text(json.dumps(rows))
    (tmp_path / "accuracy.json").write_text(json.dumps(rows[:1]))
    assert script["table_seconds"](tmp_path) == (2.75 + 1.0 + 2.75, 0.5 + 0.5 + 0.5)


@pytest.mark.slow
def test_gpu_check_quick_on_the_cpu(tmp_path):
    """The GPU acceptance run, every section, on the CPU at its quick sizes (one backend, one
    model for the smoke fits): each section gives its figures, the report says what it could not
    measure, and the JSON holds the report."""
    path = tmp_path / "gpu.json"
    argv = ["--device", "cpu", "--quick", "--backends", "pyro", "--models", "gmm"]
    report = run_benchmark("gpu_check", [*argv, "--json", str(path)])
    assert report["failures"] == []
    figures = report["figures"]
    assert [(r["algorithm"], r["ok"]) for r in figures["smoke"]] == [("em", True), ("svi", True)]
    assert [(r["algorithm"], r["ok"]) for r in figures["agreement"]] == [("em", True)]
    assert positive(figures["bandwidth"]["bytes_per_s"])
    table = figures["vae"]["by_batch"]["100"]
    assert table["plain PyTorch loop"]["x_plain_pytorch"] == 1.0
    assert all(positive(row["seconds_per_epoch"]) for row in table.values())
    assert set(figures["cavi"]["rows"]) == {"pyro float64", "pyro float32"}
    for row in figures["cavi"]["rows"].values():
        assert positive(row["seconds_per_iteration"]) and positive(row["x_memory_bound"])
    read_first = figures["cavi"]["objective_read_first"]["pyro float64"]
    assert positive(read_first["seconds_per_iteration"]) and positive(read_first["x_queued"])
    host_bound = figures["cavi"]["host_bound"]
    assert host_bound["n"] == 1_000
    assert positive(host_bound["rows"]["pyro float64"]["seconds_per_iteration"])
    assert positive(host_bound["rows"]["pyro float64, eager"]["seconds_per_iteration"])
    for dtype in ("float64", "float32"):
        assert positive(figures["cavi"]["pyro_eager"][dtype]["graph_x_eager"])
        jit = figures["cavi"]["pyro_jit"][dtype]
        assert positive(jit["x_uncompiled"]) and positive(jit["x_memory_bound"])
    assert figures["bam"]["pyro softmax"]["x_softmax"] == 1.0
    assert figures["bam"]["pyro jit softmax"]["x_softmax"] == 1.0  # the compiled steps' rows
    assert positive(figures["bam"]["pyro jit weibull"]["x_softmax"])
    assert figures["launches"]["vae"]["plain PyTorch loop"]["x_baseline"] == 1.0
    (nuts,) = figures["nuts"]
    assert nuts["size"] == nuts["latent_dim"] * nuts["data_size"] and not nuts["warns"]
    assert {t["met"] for t in report["targets"]} <= {True, False}
    assert isinstance(report["not_measured"], list)
    assert json.loads(path.read_text())["failures"] == []


def test_cavi_cuda_graph_quick_times_the_eager_loop_on_a_cpu(capsys):
    rows = run_benchmark("cavi_cuda_graph", ["--device", "cpu", "--quick"])
    assert [row["layout"] for row in rows] == ["transposed", "as_given"]
    for row in rows:
        assert positive(row["eager_s"]) and math.isfinite(row["eager_elbo"])
        assert "graph_s" not in row
    # Both layouts compute the same iterations, to rounding.
    assert rows[0]["eager_elbo"] == pytest.approx(rows[1]["eager_elbo"], rel=1e-12)
    assert "CUDA graphs need a CUDA device" in capsys.readouterr().out


@pytest.mark.slow
def test_cavi_cuda_graph_compiled_update_computes_the_eager_iterations(capsys):
    rows = run_benchmark(
        "cavi_cuda_graph", ["--device", "cpu", "--quick", "--compile", "--layouts", "transposed"]
    )
    assert [row["compiled"] for row in rows] == [False, True]
    assert "compile_error" not in rows[1], rows[1].get("compile_error")
    assert positive(rows[1]["compile_s"]) and positive(rows[1]["eager_s"])
    # torch's compiler fuses operations but computes the same iterations, to rounding.
    assert rows[1]["eager_elbo"] == pytest.approx(rows[0]["eager_elbo"], rel=1e-12)
    assert "| in " in capsys.readouterr().out  # the compilation's seconds


def test_gpu_check_skips_a_nuts_fit_only_when_its_sampling_would_run_too_long(monkeypatch):
    """A sampler's compilation does not grow with the data, and at small sizes neither does
    much of a step's time: a slow first fit does not stop the larger sizes, and one fit alone
    predicts nothing. A larger size is skipped, with the reason, when each step's time drawn
    through the last two sizes would take the fit past the limit."""
    from types import SimpleNamespace

    module = load_benchmark("gpu_check")
    fits = [(300, 14.0, 0.1, 0.010), (3_000, 14.5, 0.2, 0.012)]
    assert module.predicted_fit_seconds(fits, 30_000, 60) == pytest.approx(17.94)
    assert module.predicted_fit_seconds(fits[:1], 30_000, 60) is None
    flat = [(300, 2.0, 0.5, 0.010), (3_000, 2.0, 0.4, 0.008)]  # a step's time fell: no growth
    assert module.predicted_fit_seconds(flat, 30_000, 10) == pytest.approx(1.2 + 0.16)

    def fake_fit(data, backend, device, iterations, depth):  # 5 s of set-up, then the data
        per_leapfrog = 1e-3 * len(data["x"])
        sampling = 3 * per_leapfrog
        return per_leapfrog, 6, data["x"].size, 5.0 + 2 * sampling, sampling

    monkeypatch.setattr(module, "nuts_leapfrog_seconds", fake_fit)
    sizes = SimpleNamespace(nuts_sizes=(10, 20, 40, 80), nuts_iterations=2, nuts_depth=2,
                            nuts_limit=5.5)  # fmt: skip
    args = SimpleNamespace(device="cpu", backends=["pyro"], budget=60.0)
    run = module.Run(args, sizes)
    rows = module.nuts(run)
    assert [row["n"] for row in rows] == [10, 20, 40]  # 40 expected in 5.48 s; 80 in 5.96 s
    (skipped,) = run.not_measured
    assert skipped.startswith("nuts pyro N=80 on cpu: about 6 s expected from N=40")


def test_gpu_check_says_what_it_could_not_measure(capsys):
    """A device that is not there: the run stops after the environment, fails, and lists the
    sections it did not run."""
    report = run_benchmark("gpu_check", ["--device", "cuda:99", "--quick", "--smoke-only"])
    assert report["failures"]
    assert "stopping here" in capsys.readouterr().out
    assert report["not_measured"] == ["section smoke: no backend has device 'cuda:99'"]


def test_gpu_check_names_a_missing_or_old_requirement_and_fails(monkeypatch, capsys):
    """A machine lent for the run may lack a requirement (funsor) or hold an older version
    (NumPyro 0.21): the environment names each, and the run fails; so does a section that
    stops on an error rather than on its time limit."""
    import importlib.metadata

    script = runpy.run_path(str(BENCHMARKS / "gpu_check.py"), run_name="gpu_check")
    version = importlib.metadata.version

    def installed(name):
        if name == "funsor":
            raise importlib.metadata.PackageNotFoundError(name)
        return "0.21.0" if name == "numpyro" else version(name)

    monkeypatch.setattr(importlib.metadata, "version", installed)
    unmet = script["unmet_requirements"]()
    assert unmet == [
        "numpyro 0.21.0 is installed; the zoo needs numpyro>=0.22",
        "funsor is missing (the zoo needs funsor>=0.4.5)",
    ]
    monkeypatch.setattr(importlib.metadata, "version", version)
    assert script["unmet_requirements"]() == []

    def broken(run):
        raise RuntimeError("a bug in the check")

    from types import SimpleNamespace

    run = script["Run"](SimpleNamespace(budget=60.0), None)
    assert run.attempt("section x", broken, run, failure=True) is None
    assert run.failures == ["section x: RuntimeError: a bug in the check"]


def test_gpu_check_time_limits_nest():
    """A check ends at its own limit, or at its section's if that comes first; a check cut
    short by its own limit is listed as not measured and the section goes on."""
    import time
    from types import SimpleNamespace

    script = runpy.run_path(str(BENCHMARKS / "gpu_check.py"), run_name="gpu_check")
    time_limit, TimeUp = script["time_limit"], script["TimeUp"]

    def spin(seconds):
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            pass
        return "done"

    run = script["Run"](SimpleNamespace(budget=60.0), None)
    start = time.monotonic()
    with time_limit(1.0):
        assert run.attempt("a short check", spin, 0.05) == "done"
        assert run.attempt("a long check", spin, 5.0, limit=0.2) is None
        with pytest.raises(TimeUp):
            with time_limit(5.0):  # the section's limit comes first
                spin(5.0)
    assert time.monotonic() - start < 2.0
    assert [line.split(":")[0] for line in run.not_measured] == ["a long check"]


def test_gpu_check_finds_where_the_device_becomes_faster():
    """The NUTS rows' summary: the size where the device's time over the CPU's crosses 1."""
    script = runpy.run_path(str(BENCHMARKS / "gpu_check.py"), run_name="gpu_check")
    crossover = script["crossover"]
    assert crossover([(10**6, 0.5), (10**4, 2.0)]) == (
        "the device is faster from a size of about 100,000"
    )
    assert crossover([(10**4, 0.5)]).startswith("the device is faster at every size")
    assert crossover([(10**4, 5.0), (10**6, 2.0)]).startswith("the CPU is faster at every size")
    assert crossover([(10**4, 0.5), (10**6, 2.0)]).startswith("no single crossing")


def test_the_ablated_layer_kl_is_zero_where_the_distribution_lives():
    """The stand-in KL has its distribution's dtype and device (a CPU float32 zero made a GPU
    step fail)."""
    import torch
    from pyro.distributions import Normal

    script = runpy.run_path(str(BENCHMARKS / "bam_speed.py"), run_name="bam_speed")
    q = Normal(torch.zeros(3, dtype=torch.float64), 1.0).to_event(1)
    with script["_no_layer_kl"]():
        from inference.backends import pyro_meanfield

        zero = pyro_meanfield.kl_divergence(q, q)
    assert zero.dtype == torch.float64 and zero.device == q.base_dist.loc.device
    assert zero.shape == q.batch_shape and not zero.any()


def test_code_shape_counts_code_lines_and_parameters(tmp_path):
    script = runpy.run_path(str(BENCHMARKS / "code_shape.py"), run_name="code_shape")
    source = tmp_path / "m.py"
    source.write_text(
        "class C:\n"
        "    def f(self, a, *b, c=1, **d):\n"
        '        """Docstring,\n\n        on three lines."""\n'
        "        # a comment\n"
        "\n"
        "        x = (a +\n"
        "             c)\n"
        "        return x\n"
    )
    (found,) = script["functions"](source, tmp_path)
    assert (found.name, found.lines, found.params) == ("C.f", 3, 4)
    figures = script["shape"](BENCHMARKS.parent / "inference", 3)
    assert figures["functions"] > 100 and len(figures["longest"]) == 3
    assert script["contract"]()["abstract"] >= 4


@pytest.mark.slow
def test_nuts_seed_spread_quick(tmp_path):
    """Two NUTS seeds and the run on the data moved by one ulp, at the example's quick sizes
    (CAVI and EM on Pyro: SVI's fits and scoring took most of a minute). The seed-0 figures are
    the example's: the benchmark measures as ``compare(..., reference=...)`` does."""
    import numpy as np

    import inference
    from inference.compare import Comparison

    path, tables = tmp_path / "spread.json", tmp_path / "tables"
    argv = ["--quick", "--backends", "pyro", "--algorithms", "cavi,em", "--seeds", "2"]
    out = run_benchmark("nuts_seed_spread", [*argv, "--tables", str(tables), "--json", str(path)])
    rows = out["summary"]["rows"]
    assert set(rows) == {"cavi pyro", "em pyro", "nuts numpyro"}
    assert set(rows["em pyro"]) == {"mean_error_sd", "mean_error_sd_median"}  # a point: no sds
    assert set(rows["nuts numpyro"]) == {"heldout_log_pred_per_point"}  # its own reference
    for columns in rows.values():
        for s in columns.values():
            assert s["min"] <= s["seed_0"] <= s["max"] and s["spread"] == s["max"] - s["min"]
    assert [r["divergences"] >= 0 for r in out["references"]] == [True, True]
    # Another seed gives another posterior sample; a last-bit change of the data starts tiny.
    distances = out["nuts_distances"]
    assert distances["seed 0's against seed 1's"]["mean_error_sd"] > 0.01
    moved = distances["seed 0's against seed 0's on the moved data"]["mean_error_sd"]
    assert 0 < moved < 0.01
    assert json.loads(path.read_text())["nuts_distances"] == distances

    # The example's accuracy table at seed 0, its CAVI and EM rows measured by compare itself.
    gmm = runpy.run_path(str(BENCHMARKS.parent / "examples" / "gmm_compare.py"))
    settings = gmm["parse_args"](["--quick", "--backends", "pyro"])
    train, test = gmm["make_data"](settings)
    _, model = gmm["settings"](settings, test)
    reference = gmm["sample_reference"](train, settings, model).results[0]
    closed_form = dict(algorithms=("cavi", "em"), backends=("pyro",))
    closed_form["num_steps"] = {"cavi": 500, "em": 500}
    table = inference.compare("bayesian_gmm", train, reference=reference, **closed_form, **model)
    seed0 = json.loads((tables / "accuracy_seed0.json").read_text())
    seed0 = {(r["algorithm"], r["backend"]): r for r in seed0}
    for row in table.rows:
        mine = seed0[row["algorithm"], row["backend"]]
        for column, _ in Comparison.ACCURACY_COLUMNS:
            assert np.array_equal(mine[column], row[column], equal_nan=True), column
        assert rows[f"{row['algorithm']} pyro"]["mean_error_sd"]["seed_0"] == row["mean_error_sd"]


def test_same_figures_tells_identical_from_different(tmp_path, capsys):
    script = runpy.run_path(str(BENCHMARKS / "same_figures.py"), run_name="same_figures")
    rows = [
        {"algorithm": "cavi", "backend": "pyro", "objective_per_point": -3.976, "steps": 67,
         "sd_ratio_median": 0.99, "wall_time_s": 0.038},
        {"algorithm": "em", "backend": "pyro", "objective_per_point": -3.7528, "steps": "4 x 10",
         "sd_ratio_median": float("nan"), "wall_time_s": 0.024},
    ]  # fmt: skip
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    (a / "table.json").write_text(json.dumps(rows))
    (a / "only_here.json").write_text("[]")
    # Other timings, the same figures (NaN included, written as null by a newer table):
    # identical.
    other = [{**r, "wall_time_s": r["wall_time_s"] * 2} for r in rows]
    (b / "table.json").write_text(json.dumps(other).replace("NaN", "null"))
    out = script["main"]([str(a), str(b)])
    assert out["identical"] and set(out["tables"]) == {"table.json"}
    report = out["tables"]["table.json"]
    timing = {"rows": 2, "differ": 2, "largest_relative": 0.5, "timing": True}
    assert report["wall_time_s"] == timing
    assert report["sd_ratio_median"]["differ"] == 0
    assert "every figure but the timings identical" in capsys.readouterr().out
    # One figure moved by its last bit, one text figure changed.
    other[1]["objective_per_point"] = math.nextafter(-3.7528, 0)
    other[1]["steps"] = "4 x 11"
    (b / "table.json").write_text(json.dumps(other))
    out = script["main"]([str(a / "table.json"), str(b / "table.json")])
    report = out["tables"]["table.json"]
    assert not out["identical"]
    assert report["objective_per_point"]["differ"] == 1
    assert 0 < report["objective_per_point"]["largest_relative"] < 1e-15
    assert report["steps"] == {"rows": 2, "differ": 1, "largest_relative": None, "timing": False}
    assert "FIGURES DIFFER" in capsys.readouterr().out
    # Rows of other runs, or in another order, are not compared.
    (b / "table.json").write_text(json.dumps(rows[::-1]))
    with pytest.raises(SystemExit) as stopped:
        script["main"]([str(a), str(b)])
    assert stopped.value.code == 2 and "Row 0" in capsys.readouterr().err


@pytest.mark.slow
def test_op_counts_quick(tmp_path):
    results = run_benchmark("op_counts", ["--quick", "--json", str(tmp_path / "ops.json")])
    for table in results.values():
        for row in table.values():
            assert positive(row["operations"])
            for counted in ("host_reads", "host_arithmetic"):
                assert row[counted] is None or row[counted] >= 0
    assert results["vae"]["plain PyTorch loop"]["x_baseline"] == 1.0
    # A compiled mean-field step launches no more than the uncompiled one: its code is drawn
    # with one operation, not from tensors of zeros and ones, and its particles are averaged
    # without dividing one by 1 and adding it to 0.
    vae = results["vae"]
    assert (
        vae['zoo Pyro, elbo="meanfield" (jit=True)']["operations"]
        <= vae['zoo Pyro, elbo="meanfield"']["operations"]
    )
    # A compiled Trace_ELBO step sums its loss once (the guide is reparameterised), where
    # Pyro's graph sums a loss and a surrogate loss: fewer than the uncompiled step's too.
    assert (
        vae["zoo Pyro, Trace_ELBO (jit=True)"]["operations"]
        < vae["zoo Pyro, Trace_ELBO"]["operations"]
    )
    assert results["bam"]["bam_classifier, softmax"]["x_baseline"] == 1.0
    assert results["bam"]["bam_classifier, softmax (NumPyro, compiled)"]["x_baseline"] == 1.0
    # The multivariate digamma and log-gamma of a CAVI iteration are one operation over a (K, D)
    # grid, not D of them: the launches of an iteration do not grow with the dimension.
    cavi = results["cavi"]
    assert (
        cavi["bayesian_gmm CAVI, K=20, D=10"]["operations"]
        == cavi["bayesian_gmm CAVI, K=20, D=2"]["operations"]
    )
    assert json.loads((tmp_path / "ops.json").read_text())["results"] == results


def test_op_counts_count_the_closed_form_updates_run_eagerly(monkeypatch):
    """On a GPU a CAVI or EM fit replays its update from a CUDA graph, where counting the
    dispatched operations would find only the copies in and out: the rows count the update's
    own operations, with the graphs off."""
    import os

    count_module = runpy.run_path(str(BENCHMARKS / "op_counts.py"), run_name="op_counts")
    graphs_setting = []

    def stepper(model, data, algorithm, device="cpu", **options):
        graphs_setting.append(os.environ.get("ZOO_CUDA_GRAPHS"))
        return lambda: None

    monkeypatch.setitem(count_module["cavi_rows"].__globals__, "fit_stepper", stepper)
    monkeypatch.setitem(count_module["cavi_rows"].__globals__, "compiled_cavi", lambda *a: {})
    count_module["cavi_rows"](1, "cuda")
    assert graphs_setting == ["0", "0", "0"]


def test_op_counts_without_a_gpu_profile_no_launches():
    import torch

    count_module = runpy.run_path(str(BENCHMARKS / "op_counts.py"), run_name="op_counts")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the profiler's "CUDA is not available"
        assert count_module["profiled_launches"](lambda: torch.ones(3) + 1, 2) is None


def test_op_counts_count_kernels_not_views():
    import torch

    count_module = runpy.run_path(str(BENCHMARKS / "op_counts.py"), run_name="op_counts")
    x = torch.ones(3, 4)
    with count_module["OperationCount"]() as count:
        y = (x.view(4, 3).t() + 1).sum()
        y.item()
        torch.tensor(3).item()  # an integer: shape arithmetic, not counted
        scale = torch.tensor(3) * 2.0  # arithmetic on the host's numbers
        x * scale.reciprocal()
    assert dict(count.kernels) == {"add": 1, "sum": 1, "mul": 1}
    assert count.host_arithmetic == 2
    assert count.host_reads == 1


def test_nuts_overhead_starts_from_an_empty_cache_and_the_zoo_pays_its_own_set_up(
    tmp_path, monkeypatch
):
    """Every run of the script compiles in a new, empty cache folder of its own (never the
    user's, which an earlier run may have filled), and runs the zoo first in every repeat, so
    that its first run compiles its own set-up; bare MCMC's start is computed outside its
    timing."""
    from inference.backends import exported

    script = runpy.run_path(str(BENCHMARKS / "nuts_overhead.py"), run_name="nuts_overhead")
    module = script["main"].__globals__
    users_cache = tmp_path / "users-cache"
    monkeypatch.setenv("ZOO_JAX_CACHE", str(users_cache))
    events = []

    def record(what):
        folder = Path(os.environ["ZOO_JAX_CACHE"])
        events.append((what, folder, folder.is_dir() and not any(folder.iterdir())))
        assert exported.directory() == folder / "exported"

    def bare(data, k, settings):
        record("bare")
        return 2.0, 10.0

    def fit(backend, data, k, settings):
        record("zoo")
        return 1.0, 10.0

    monkeypatch.setitem(module, "BARE", {"numpyro": bare})
    monkeypatch.setitem(module, "run_zoo", fit)
    (row,) = script["main"](["--backends", "numpyro", "--repeats", "3", "--n", "40"])
    assert [what for what, _, _ in events] == ["zoo", "bare"] * 3
    folders = {folder for _, folder, _ in events}
    assert len(folders) == 1 and users_cache not in folders
    assert events[0][2], "the cache folder was not empty when the run started"
    assert not folders.pop().exists()  # removed at the end
    assert os.environ["ZOO_JAX_CACHE"] == str(users_cache)
    assert row["ratio"] == pytest.approx((10.0 / 1.0) / (10.0 / 2.0))


def test_svi_natural_vs_cavi_fits_in_an_empty_cache(tmp_path, monkeypatch):
    """Both fits are timed from a new, empty cache folder, never the user's."""
    from types import SimpleNamespace

    import inference
    from inference.backends import exported

    script = runpy.run_path(str(BENCHMARKS / "svi_natural_vs_cavi.py"), run_name="svi_nat")
    users_cache = tmp_path / "users-cache"
    monkeypatch.setenv("ZOO_JAX_CACHE", str(users_cache))
    fits = []

    def fit(model, data, algorithm, backend, callback=None, num_steps=None, **options):
        folder = Path(os.environ["ZOO_JAX_CACHE"])
        fits.append((algorithm, folder, folder.is_dir() and not any(folder.iterdir())))
        assert exported.directory() == folder / "exported"
        if callback is not None:
            callback(num_steps, SimpleNamespace(problem=SimpleNamespace(config=None)), None)
        return SimpleNamespace(raw_params=None, config=None, num_steps=1, converged=True)

    monkeypatch.setattr(inference, "fit", fit)
    monkeypatch.setattr(
        inference, "get_algorithm", lambda name: SimpleNamespace(get_params=lambda state: None)
    )
    monkeypatch.setitem(script["main"].__globals__, "heldout", lambda *args: -1.0)
    out = tmp_path / "natural.json"
    argv = ["--n", "300", "--subsample", "100", "--test", "50", "--num-steps", "2"]
    script["main"]([*argv, "--out", str(out), "--workdir", str(tmp_path)])
    assert [algorithm for algorithm, _, _ in fits] == ["cavi", "svi-natural"]
    folders = {folder for _, folder, _ in fits}
    assert len(folders) == 1 and users_cache not in folders
    assert fits[0][2], "the cache folder was not empty when CAVI started"
    assert not folders.pop().exists()
    assert os.environ["ZOO_JAX_CACHE"] == str(users_cache)
    assert json.loads(out.read_text())["cavi"]["heldout_per_point"] == -1.0


def test_same_figures_exit_status_tells_a_usage_error_from_different_figures(tmp_path):
    """0: the same figures; 1: a figure differs; 2, with a one-line message and no traceback:
    nothing could be compared (a missing table, a file with a folder, folders sharing no table,
    a table that is not JSON, tables of other runs)."""
    import subprocess
    import sys

    row = {"algorithm": "cavi", "backend": "pyro", "objective_per_point": -3.976}
    tables = {
        "a.json": [row],
        "same.json": [row],
        "moved.json": [{**row, "objective_per_point": -3.975}],
        "other_runs.json": [{**row, "algorithm": "em"}],
    }
    for name, rows in tables.items():
        (tmp_path / name).write_text(json.dumps(rows))
    (tmp_path / "broken.json").write_text("[{")
    (tmp_path / "empty_a").mkdir()
    (tmp_path / "empty_b").mkdir()

    def status(*paths):
        done = subprocess.run(
            [sys.executable, str(BENCHMARKS / "same_figures.py"), *map(str, paths)],
            cwd=BENCHMARKS.parent, capture_output=True, text=True, check=False,
        )  # fmt: skip
        return done.returncode, done.stderr

    assert status(tmp_path / "a.json", tmp_path / "same.json") == (0, "")
    assert status(tmp_path / "a.json", tmp_path / "moved.json") == (1, "")
    usage_errors = {
        "does not exist": (tmp_path / "a.json", tmp_path / "missing.json"),
        "Give two files or two folders": (tmp_path / "a.json", tmp_path / "empty_a"),
        "share no JSON table": (tmp_path / "empty_a", tmp_path / "empty_b"),
        "is not JSON": (tmp_path / "a.json", tmp_path / "broken.json"),
        "Row 0 is": (tmp_path / "a.json", tmp_path / "other_runs.json"),
    }
    for says, paths in usage_errors.items():
        code, err = status(*paths)
        assert code == 2 and says in err, (paths, code, err)
        assert err.startswith("same_figures: error:") and err.count("\n") == 1, err


def test_op_counts_recorded_for_a_pyro_cavi_iteration_are_todays():
    """The figures the GPU page quotes (``benchmarks/results/op_counts.json``) are what the
    script counts in the code now: a change of the iteration's operations re-runs it."""
    from inference import ConvergenceWarning

    count_module = runpy.run_path(str(BENCHMARKS / "op_counts.py"), run_name="op_counts")
    cavi_speed = runpy.run_path(str(BENCHMARKS / "cavi_speed.py"), run_name="cavi_speed")
    recorded = json.loads((BENCHMARKS / "results" / "op_counts.json").read_text())["results"]
    for d in (10, 2):
        x, resp = cavi_speed["make_problem"](2000, d, 20)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)  # the stepper's one-step fit
            step = count_module["fit_stepper"](
                "bayesian_gmm", {"x": x}, "cavi", K=20, weight_prior="dirichlet_process",
                init=resp,
            )  # fmt: skip
        counted = count_module["per_step"](step, 1)
        row = recorded["cavi"][f"bayesian_gmm CAVI, K=20, D={d}"]
        assert counted["operations"] == row["operations"], d
        assert counted["most_frequent"] == row["most_frequent"], d


def load_benchmark(name):
    """The benchmark as a module, so that a test can replace its functions."""
    spec = importlib.util.spec_from_file_location(f"_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_cavi_cuda_graph_rows_after_a_failed_recording_say_they_were_not_tried(monkeypatch):
    """After a library's recording fails, its later rows are not recorded, and say so rather than
    claim a failure of their own; the next library is tried afresh. No GPU needed: the CUDA
    calls are replaced."""
    graph = load_benchmark("cavi_cuda_graph")
    recordings = []

    def graphed(update, state, steps, device):
        recordings.append(update)
        raise RuntimeError("operation not permitted when stream is capturing\nmore")

    monkeypatch.setattr(graph.torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(graph.torch.backends.cuda, "preferred_linalg_library", lambda lib: None)
    monkeypatch.setattr(graph, "setup", lambda n, d, k, device, dtype, layout: (n, None))
    monkeypatch.setattr(graph, "eager", lambda update, state, steps, device: (1e-3, -1.0))
    monkeypatch.setattr(graph, "graphed", graphed)
    argv = ["--sizes", "1000", "10", "--dtypes", "float64", "--layouts", "transposed"]
    rows = graph.main(argv + ["--linalg", "cusolver", "magma"])
    assert recordings == [1000, 1000]  # the first row of each library, and no other
    error = "RuntimeError: operation not permitted when stream is capturing"
    for first, later in (rows[0:2], rows[2:4]):
        assert first["graph_error"] == error
        assert later["graph_error"] == (
            "not tried: recording failed at n=1000, dtype=float64, layout=transposed, "
            f"compiled=False: {error}"
        )


@pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="reads Linux's /proc")
def test_streaming_memory_child_reads_its_own_peak_not_its_parents():
    """On Linux a child's ru_maxrss starts at its parent's peak: each N's fit, run in a child of
    the script that wrote the data, must report the child's own peak."""
    import resource

    import numpy as np

    held = np.ones(2**24)  # 128 MiB, written: this process's peak is above it
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 > 128
    child = "import runpy, sys; print(runpy.run_path(sys.argv[1], run_name='m')['peak_rss_mib']())"
    script = str(BENCHMARKS / "streaming_memory.py")
    run = subprocess.run([sys.executable, "-c", child, script], capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    peak, source = ast.literal_eval(run.stdout.strip())
    assert source == "VmHWM"
    assert 0 < peak < 100, peak  # python, numpy and the script: about 30 MiB
    del held
