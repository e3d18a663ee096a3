"""zoo.attention against torch's and JAX's own attention, and the torch, JAX and numpy twins
against each other at the same weights."""

import jax
import numpy as np
import pytest
import torch

jax.config.update("jax_enable_x64", True)

import jax.numpy as jnp  # noqa: E402

from zoo.attention import jax_attention, numpy_attention, torch_attention  # noqa: E402

TWINS = {"torch": torch_attention, "jax": jax_attention, "numpy": numpy_attention}


def _to(name, a):
    if a is None:
        return None
    if name == "torch":
        return torch.as_tensor(a)
    if name == "jax":
        return jnp.asarray(a)
    return np.asarray(a)


def _np(a):
    return a.detach().numpy() if isinstance(a, torch.Tensor) else np.asarray(a)


def _qkv(rng, batch=(2, 3), lq=5, lk=7, e=4, ev=6):
    return (
        rng.normal(size=(*batch, lq, e)),
        rng.normal(size=(*batch, lk, e)),
        rng.normal(size=(*batch, lk, ev)),
    )


def _mask(rng, shape):
    """A random boolean mask with at least one key visible to every query."""
    mask = rng.random(shape) < 0.5
    mask[..., rng.integers(shape[-1])] = True
    return mask


CASES = {
    "plain": {},
    "scale": {"scale": 0.37},
    "bool_mask": {"mask": "bool"},
    "float_mask": {"mask": "float"},
    "causal": {"causal": True},
}


@pytest.mark.parametrize("twin", sorted(TWINS))
@pytest.mark.parametrize("case", sorted(CASES))
def test_sdpa_matches_torch(twin, case):
    rng = np.random.default_rng(0)
    q, k, v = _qkv(rng, lq=7 if case == "causal" else 5)
    options = dict(CASES[case])
    if options.get("mask") == "bool":
        options["mask"] = _mask(rng, (2, 1, q.shape[-2], k.shape[-2]))  # broadcasts over heads
    elif options.get("mask") == "float":
        options["mask"] = rng.normal(size=(q.shape[-2], k.shape[-2]))
    ref_options = {
        "attn_mask": None if "mask" not in options else torch.as_tensor(options["mask"]),
        "is_causal": options.get("causal", False),
        "scale": options.get("scale"),
    }
    ref = torch.nn.functional.scaled_dot_product_attention(
        *(torch.as_tensor(a) for a in (q, k, v)), **ref_options
    ).numpy()
    args = [_to(twin, a) for a in (q, k, v)]
    if "mask" in options:
        options["mask"] = _to(twin, options["mask"])
    out, weights = TWINS[twin].scaled_dot_product_attention(*args, return_weights=True, **options)
    np.testing.assert_allclose(_np(out), ref, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(_np(weights).sum(-1), 1.0, rtol=1e-12)
    np.testing.assert_allclose(_np(weights) @ v, ref, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("twin", sorted(TWINS))
def test_sdpa_matches_jax_nn(twin):
    """``jax.nn.dot_product_attention`` takes (B, T, N, H) and runs its softmax in float32."""
    rng = np.random.default_rng(1)
    q, k, v = _qkv(rng, lq=6, lk=6, e=4, ev=4)
    mask = _mask(rng, (2, 3, 6, 6))
    mask[..., 0] = True  # with causal=True query 0 sees only key 0
    bias = rng.normal(size=(1, 3, 6, 6))
    ref = jax.nn.dot_product_attention(
        *(jnp.swapaxes(jnp.asarray(a), 1, 2) for a in (q, k, v)),
        bias=bias,
        mask=mask,
        scale=0.7,
        is_causal=True,
    )
    out = TWINS[twin].scaled_dot_product_attention(
        *(_to(twin, a) for a in (q, k, v)),
        mask=_to(twin, mask),
        bias=_to(twin, bias),
        scale=0.7,
        causal=True,
    )
    np.testing.assert_allclose(_np(out), np.swapaxes(np.asarray(ref), 1, 2), atol=1e-6)


@pytest.mark.parametrize("twin", sorted(TWINS))
def test_batch_and_head_axes_broadcast(twin):
    rng = np.random.default_rng(2)
    q = rng.normal(size=(2, 1, 5, 4))  # one query set shared by 3 heads
    k = rng.normal(size=(3, 7, 4))  # keys shared by the batch
    v = rng.normal(size=(1, 3, 7, 2))
    out = _np(TWINS[twin].scaled_dot_product_attention(*(_to(twin, a) for a in (q, k, v))))
    ref = torch.nn.functional.scaled_dot_product_attention(
        *(torch.as_tensor(np.broadcast_to(a, (2, 3, *a.shape[-2:])).copy()) for a in (q, k, v))
    ).numpy()
    assert out.shape == (2, 3, 5, 2)
    np.testing.assert_allclose(out, ref, rtol=1e-12)


@pytest.mark.parametrize("twin", sorted(TWINS))
@pytest.mark.parametrize("how", ["mask", "bias", "causal"])
def test_query_with_every_key_hidden_is_an_error(twin, how):
    rng = np.random.default_rng(3)
    q, k, v = _qkv(rng, batch=(2,), lq=4, lk=3)
    options = {}
    if how == "mask":
        mask = np.ones((2, 4, 3), dtype=bool)
        mask[1, 2] = False
        options["mask"] = _to(twin, mask)
    elif how == "bias":
        bias = np.zeros((4, 3))
        bias[3] = -np.inf
        options["bias"] = _to(twin, bias)
    else:  # causal with key 0 masked hides every key from query 0
        mask = np.ones((4, 3), dtype=bool)
        mask[:, 0] = False
        options.update(mask=_to(twin, mask), causal=True)
    args = [_to(twin, a) for a in (q, k, v)]
    with pytest.raises(ValueError, match="expected every query to attend to at least one key"):
        TWINS[twin].scaled_dot_product_attention(*args, **options)


def test_under_jit_a_fully_masked_query_gives_nan_not_an_average():
    rng = np.random.default_rng(4)
    q, k, v = (jnp.asarray(a) for a in _qkv(rng, batch=(), lq=3, lk=4))
    mask = np.ones((3, 4), dtype=bool)
    mask[1] = False
    out = jax.jit(jax_attention.scaled_dot_product_attention)(q, k, v, mask)
    out = np.asarray(out)
    assert np.isnan(out[1]).all() and np.isfinite(out[[0, 2]]).all()


@pytest.mark.parametrize("twin", sorted(TWINS))
def test_bad_inputs_say_what_was_expected(twin):
    rng = np.random.default_rng(5)
    q, k, v = (_to(twin, a) for a in _qkv(rng))
    sdpa = TWINS[twin].scaled_dot_product_attention
    with pytest.raises(ValueError, match="same feature size"):
        sdpa(q, _to(twin, rng.normal(size=(2, 3, 7, 5))), v)
    with pytest.raises(ValueError, match="same number of keys"):
        sdpa(q, k, _to(twin, rng.normal(size=(2, 3, 6, 6))))
    with pytest.raises(ValueError, match=r"mask broadcastable to \(\.\.\., Lq, Lk\)"):
        sdpa(q, k, v, mask=_to(twin, np.ones((5, 6), dtype=bool)))
    with pytest.raises(ValueError, match="boolean mask"):
        sdpa(q, k, v, mask=_to(twin, np.ones((5, 7), dtype=np.int64)))
    with pytest.raises(ValueError, match="batch axes"):
        sdpa(q, _to(twin, rng.normal(size=(4, 3, 7, 4))), v)


def _torch_params(module):
    return {name: p.detach().numpy() for name, p in module.named_parameters()}


@pytest.mark.parametrize("kind", ["self", "cross"])
def test_multi_head_matches_torch_nn_multihead_attention(kind):
    rng = np.random.default_rng(6)
    torch.manual_seed(0)
    kdim = 8 if kind == "self" else 5
    ref_module = torch.nn.MultiheadAttention(
        8, 2, kdim=kdim, vdim=kdim if kind == "self" else 3, batch_first=True, dtype=torch.float64
    )
    p = dict(ref_module.named_parameters())
    if kind == "self":
        w, b = p["in_proj_weight"].detach().numpy(), p["in_proj_bias"].detach().numpy()
        params = {"q_weight": w[:8], "k_weight": w[8:16], "v_weight": w[16:]}
    else:
        w, b = None, p["in_proj_bias"].detach().numpy()
        params = {f"{n}_weight": p[f"{n}_proj_weight"].detach().numpy() for n in "qkv"}
    params.update(q_bias=b[:8], k_bias=b[8:16], v_bias=b[16:])
    params["out_weight"] = p["out_proj.weight"].detach().numpy()
    params["out_bias"] = p["out_proj.bias"].detach().numpy()
    x = rng.normal(size=(4, 6, 8))
    ctx = x if kind == "self" else rng.normal(size=(4, 9, 5))
    val = x if kind == "self" else rng.normal(size=(4, 9, 3))
    ref = ref_module(*(torch.as_tensor(a) for a in (x, ctx, val)), need_weights=False)[0]
    for name, twin in TWINS.items():
        out = twin.multi_head_attention(
            {k: _to(name, v) for k, v in params.items()},
            *(_to(name, a) for a in (x, ctx, val)),
            num_heads=2,
        )
        np.testing.assert_allclose(_np(out), ref.detach().numpy(), rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("dtype", ["float64", "float32"])
def test_torch_and_jax_modules_agree_at_the_same_weights(dtype):
    rng = np.random.default_rng(7)
    tdtype = getattr(torch, dtype)
    gen = torch.Generator().manual_seed(1)
    module = torch_attention.MultiHeadAttention(
        12, 3, kdim=5, vdim=7, out_dim=4, dtype=tdtype, generator=gen
    )
    with torch.no_grad():  # non-zero biases, so they are tested too
        for name, p in module.named_parameters():
            if name.endswith("bias"):
                p.normal_(generator=gen)
    params = _torch_params(module)
    jmodule = jax_attention.MultiHeadAttention(num_heads=3, params=params)
    x = rng.normal(size=(2, 6, 12)).astype(dtype)
    ctx = rng.normal(size=(2, 8, 5)).astype(dtype)
    val = rng.normal(size=(2, 8, 7)).astype(dtype)
    mask = _mask(rng, (2, 1, 6, 8))
    tol = {"float64": 1e-12, "float32": 2e-5}[dtype]
    t_out, t_w = module(
        *(torch.as_tensor(a) for a in (x, ctx, val)),
        mask=torch.as_tensor(mask),
        return_weights=True,
    )
    j_out, j_w = jmodule(x, ctx, val, mask=mask, return_weights=True)
    assert j_out.dtype == jnp.dtype(dtype) and t_w.shape == (2, 3, 6, 8)
    np.testing.assert_allclose(np.asarray(j_out), _np(t_out), rtol=tol, atol=tol)
    np.testing.assert_allclose(np.asarray(j_w), _np(t_w), rtol=tol, atol=tol)
    # self-attention, causal, the equinox module through jit
    self_module = torch_attention.MultiHeadAttention(12, 3, dtype=tdtype, generator=gen)
    jself = jax_attention.MultiHeadAttention(num_heads=3, params=_torch_params(self_module))
    y = rng.normal(size=(2, 5, 12)).astype(dtype)
    t_self = self_module(torch.as_tensor(y), causal=True)
    j_self = jax.jit(lambda m, a: m(a, causal=True))(jself, y)
    np.testing.assert_allclose(np.asarray(j_self), _np(t_self), rtol=tol, atol=tol)


def test_modules_train_and_init_params_match_shapes():
    module = torch_attention.MultiHeadAttention(8, 2, bias=False)
    assert sorted(module.params()) == ["k_weight", "out_weight", "q_weight", "v_weight"]
    x = torch.randn(3, 4, 8)
    module(x).square().sum().backward()
    assert all(p.grad is not None for p in module.parameters())
    jp = jax_attention.init_params(8, 2, kdim=3, key=jax.random.PRNGKey(0))
    tp = torch_attention.init_params(8, 2, kdim=3)
    assert {k: v.shape for k, v in jp.items()} == {k: tuple(v.shape) for k, v in tp.items()}
    with pytest.raises(ValueError, match="divisible by num_heads"):
        torch_attention.init_params(8, 3)
    with pytest.raises(ValueError, match=r"expected params\['k_weight'\] of shape"):
        jax_attention.multi_head_attention(jp, jnp.ones((4, 8)), jnp.ones((5, 4)), num_heads=2)
