"""The torch, JAX and numpy attention twins promote integer and mixed-precision inputs alike."""

import jax
import numpy as np
import pytest
import torch

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402

from zoo.attention import jax_attention, numpy_attention, torch_attention  # noqa: E402

TWINS = {"torch": (torch_attention, torch.as_tensor), "jax": (jax_attention, jnp.asarray)}
TWINS["numpy"] = (numpy_attention, np.asarray)


def _np(a):
    return a.detach().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)


def _inputs(case):
    rng = np.random.default_rng(0)
    q, k, v = rng.normal(size=(2, 3, 4)), rng.normal(size=(2, 5, 4)), rng.normal(size=(2, 5, 6))
    if case == "integer":
        return q.round().astype(np.int64), k.round().astype(np.int64), v.round().astype(np.int64)
    return q.astype(np.float32), k, v  # float32 queries, float64 keys and values


@pytest.mark.parametrize("case", ["integer", "mixed"])
def test_sdpa_twins_agree_on_integer_and_mixed_inputs(case):
    inputs = _inputs(case)
    outs = {}
    for name, (twin, to) in TWINS.items():
        outs[name] = _np(twin.scaled_dot_product_attention(*map(to, inputs)))
    for name, out in outs.items():
        assert out.dtype == np.float64, name
        np.testing.assert_allclose(out, outs["numpy"], rtol=1e-12, atol=1e-12, err_msg=name)


@pytest.mark.parametrize("case", ["integer", "mixed"])
def test_multi_head_twins_agree_on_integer_and_mixed_inputs(case):
    rng = np.random.default_rng(1)
    x = rng.normal(size=(2, 3, 4))
    x = x.round().astype(np.int64) if case == "integer" else x.astype(np.float32)
    params = {f"{n}_weight": rng.normal(size=(4, 4)) for n in ("q", "k", "v", "out")}
    outs = {}
    for name, (twin, to) in TWINS.items():
        p = {n: to(w) for n, w in params.items()}
        outs[name] = _np(twin.self_attention(p, to(x), num_heads=2))
    for name, out in outs.items():
        assert out.dtype == np.float64, name
        np.testing.assert_allclose(out, outs["numpy"], rtol=1e-10, atol=1e-12, err_msg=name)
