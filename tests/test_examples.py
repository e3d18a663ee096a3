"""Every example runs end to end in its --quick mode, on the real data where it needs MNIST."""

import json
import runpy
from pathlib import Path

import numpy as np
import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def run_example(name, argv):
    script = runpy.run_path(str(EXAMPLES / f"{name}.py"), run_name=name)  # in-process
    return script["main"](argv)


def test_vae_example_quick(tmp_path, data_dir, monkeypatch):
    monkeypatch.setenv("ZOO_DATA_DIR", str(data_dir))
    monkeypatch.setenv("ZOO_OFFLINE", "1")
    argv = ["--quick", "--backend", "pyro", "--checkpoint", str(tmp_path / "run.zoo")]
    metrics = run_example("vae", [*argv, "--out", str(tmp_path)])
    assert metrics["epochs_run"] == 2 and metrics["test_rows"] == 500
    # A bound and a tighter estimate of log p(x), both in nats per image.
    assert -550 < metrics["test_elbo"] < metrics["test_log_px_k20"] < 0
    assert json.loads((tmp_path / "metrics.json").read_text())["test_elbo"] == metrics["test_elbo"]
    assert (tmp_path / "vae_reconstructions_samples.png").is_file()
    assert np.isfinite(metrics["best_valid_elbo"])
    # The checkpoint scored alone gives the run's figures; with another network it is refused
    # (the best parameters of a tanh network scored as a relu one are other, wrong, figures).
    again = run_example("vae", [*argv, "--evaluate-checkpoint", "--out", str(tmp_path / "e")])
    for key in ("test_elbo", "test_log_px_k20", "best_valid_elbo"):
        assert again[key] == metrics[key]
    with pytest.raises(SystemExit, match="activation: 'tanh' there, 'relu' here"):
        run_example("vae", [*argv, "--evaluate-checkpoint", "--activation", "relu"])


def test_vae_example_burda_schedule():
    """Burda et al.'s stages: 3**i epochs at lr * 10**(-i/7), i = 0..7, scaled; 3,280 in all."""
    script = runpy.run_path(str(EXAMPLES / "vae.py"), run_name="vae")
    args = script["parse_args"](["--lr-schedule", "burda"])
    stages = script["epoch_stages"](args)
    assert args.epochs == 3280 and [n for n, _ in stages] == [3**i for i in range(8)]
    np.testing.assert_allclose([lr for _, lr in stages][::7], [1e-3, 1e-4])
    third = script["parse_args"](["--lr-schedule", "burda", "--schedule-scale", "0.3333"])
    assert third.epochs == 1094 and script["parse_args"]([]).epochs == 500
    with pytest.raises(SystemExit):
        script["parse_args"](["--lr-schedule", "burda", "--schedule-scale", "0"])


def test_vae_example_dynamic_protocol_draws_the_latent_space(tmp_path, data_dir, monkeypatch):
    monkeypatch.setenv("ZOO_DATA_DIR", str(data_dir))
    monkeypatch.setenv("ZOO_OFFLINE", "1")
    argv = ["--quick", "--protocol", "dynamic", "--latent-dim", "2", "--out", str(tmp_path)]
    metrics = run_example("vae", [*argv, "--backend", "pyro", "--lr-schedule", "burda"])
    # Scored on its own fixed binarization of the grey test images and on the static test set.
    assert metrics["test_elbo"] < metrics["test_log_px_k20"] < 0
    assert metrics["static_test_elbo"] < metrics["static_test_log_px_k20"] < 0
    assert (tmp_path / "vae_latent_space.png").is_file()


@pytest.mark.slow
def test_gmm_compare_example_quick(tmp_path):
    # CAVI, EM and SVI on Pyro only (NumPyro's compilations would double the time; the
    # backends' fits are compared elsewhere); NUTS, the reference, on NumPyro.
    argv = ["--quick", "--backends", "pyro", "--out", str(tmp_path)]
    table, accuracy = run_example("gmm_compare", argv)
    fitted = {
        (algorithm, guide, "pyro")
        for algorithm, guide in [
            ("cavi", None),
            ("em", None),
            ("svi", "enum"),
            ("svi", "gumbel"),
            ("svi", "gumbel-st"),
        ]
    }
    assert {(r["algorithm"], r["guide"], r["backend"]) for r in table.rows} == fitted
    assert "sd_ratio_median" not in table.to_markdown()  # no reference: no accuracy columns
    rows = {(r["algorithm"], r["guide"], r["backend"]): r for r in accuracy.rows}
    assert set(rows) == fitted | {("nuts", None, "numpyro")}
    # NUTS is the reference: at distance zero from itself; every other run is measured against it.
    nuts = rows["nuts", None, "numpyro"]
    assert nuts["mean_error_sd"] == 0 and nuts["sliced_wasserstein"] == 0
    assert nuts["sd_ratio_min"] == nuts["sd_ratio_max"] == 1
    for key, row in rows.items():
        assert np.isfinite(row["mean_error_sd"]) and np.isfinite(row["heldout_log_pred_per_point"])
        point = key[0] == "em"  # a point estimate has no sds to compare
        assert np.isnan(row["sd_ratio_median"]) == point, key
    written = ["table.md", "table.json", "objective_vs_time.png", "ellipses.png"]
    written += ["accuracy.md", "accuracy.json", "marginals.png"]
    assert all((tmp_path / name).is_file() for name in written)
    assert "sd_ratio_median" in (tmp_path / "accuracy.md").read_text()


def test_a_table_that_fails_to_render_leaves_the_results_it_would_replace(tmp_path):
    """Results are written whole or not at all: a run stopped while it writes a table keeps the
    file of the run before (it was emptied first)."""
    script = runpy.run_path(str(EXAMPLES / "gmm_compare.py"), run_name="gmm_compare")
    (tmp_path / "table.json").write_text('{"previous": "results"}')

    class Stopped:
        def to_markdown(self):
            return "| a table |"

        def to_json(self):
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        script["write_table"](Stopped(), tmp_path, "table")
    assert (tmp_path / "table.json").read_text() == '{"previous": "results"}'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["table.json", "table.md"]
