"""The examples' command lines, parsed only (nothing trained): --quick shrinks the options the
user left out and none that the user gave, even one given at its full default."""

import runpy
from functools import cache
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
NAMES = ["mnist_completion", "gmm_compare", "bayesian_attention", "exchangeable_attention", "vae"]


@cache
def script(name):
    return runpy.run_path(str(EXAMPLES / f"{name}.py"), run_name=name)  # in-process, no main()


# Each gives some options at their full defaults (which --quick used to overwrite) and leaves
# one out, which --quick still shrinks.
GIVEN = {
    "mnist_completion": (
        ["--K", "50", "--baseline-epochs", "0"],
        dict(K=[50], baseline_epochs=0),
        dict(steps=30),
    ),
    "gmm_compare": (
        ["--n", "500", "--svi-steps", "100", "--nuts-chains", "4"],
        dict(n=500, svi_steps=100, nuts_chains=4),
        dict(nuts_warmup=30),
    ),
    "bayesian_attention": (
        ["--width", "32", "--lr", "0.001", "--backend", "numpyro"],
        dict(width=32, lr=1e-3, backend="numpyro"),
        dict(layers=1),
    ),
    "exchangeable_attention": (
        ["--K", "4", "--lengths", "4", "8", "--backend", "numpyro"],
        dict(K=4, lengths=[4, 8], backend="numpyro"),
        dict(steps=20),
    ),
    "vae": (
        ["--patience", "30", "--eval-k", "5000", "--latent-dim", "50"],
        dict(patience=30, eval_k=5000, latent_dim=50),
        dict(epochs=2),
    ),
}


@pytest.mark.parametrize("name", NAMES)
def test_quick_keeps_the_options_given(name):
    argv, given, left_out = GIVEN[name]
    args = vars(script(name)["parse_args"](["--quick", *argv]))
    assert {key: args[key] for key in given} == given
    assert {key: args[key] for key in left_out} == left_out


@pytest.mark.parametrize("name", NAMES)
def test_options_left_out_take_the_full_or_the_quick_default(name):
    parse_args, defaults = script(name)["parse_args"], script(name)["QUICK"].table
    full, quick = vars(parse_args([])), vars(parse_args(["--quick"]))
    for key, (full_value, quick_value) in defaults.items():
        assert quick[key] == quick_value, key
        if full_value is not None:  # None: a default worked out later (vae's --epochs)
            assert full[key] == full_value, key
