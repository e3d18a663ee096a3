"""Networks built from a fit's named parameters (``init``, e.g. another fit's ``raw_params``).

Every twin that holds a network names its parameters ``<name>.<path>`` in torch's layout, the
same in both backends. These two functions build such a network from those arrays, with a clear
error when their shapes do not fit the architecture (a checkpoint or fit of another
configuration). Each backend is imported only when its function is called.
:func:`pyro_param_init` gives a Pyro parameter its starting value from such arrays, and
:func:`flatten_params` names NumPyro's parameters (networks' pytrees included) as Pyro does.
"""

from __future__ import annotations

import numpy as np

from zoo.devices import for_torch


def canonical_name(name: str) -> str:
    """``pyro.module`` stores ``decoder$$$fc1.weight``; the zoo names it ``decoder.fc1.weight``."""
    return name.replace("$$$", ".")


def flatten_params(params: dict) -> dict[str, np.ndarray]:
    """Named numpy arrays from NumPyro's parameters: a network's pytree (``encoder$params``, as
    ``numpyro.contrib.module`` names it) becomes ``encoder.fc1.weight``, ... as in Pyro."""
    import jax

    out = {}
    for name, value in params.items():
        if isinstance(value, jax.Array | np.ndarray | np.generic | int | float):
            out[name] = np.asarray(value)
            continue
        prefix = name.split("$")[0]
        for path, leaf in jax.tree_util.tree_leaves_with_path(value):
            out[prefix + "." + jax.tree_util.keystr(path, simple=True, separator=".")] = np.asarray(
                leaf
            )
    return out


def _describe(config) -> str:
    """The sizes of a config (its scalar fields): not its arrays, which inside a compiled
    function are tracers whose text says nothing to the user."""
    fields = getattr(config, "__dataclass_fields__", None)
    if fields is None:
        return str(config)
    return ", ".join(
        f"{k}={getattr(config, k)!r}"
        for k in fields
        if isinstance(getattr(config, k), int | float | str | tuple | None)
    )


def _check_shapes(name, config, expected: dict, got: dict) -> None:
    """``got`` (init's ``<name>.*`` shapes, by path) against the network's ``expected``: a
    mismatch names the init keys that are missing, unexpected or of another shape."""
    if expected == got:
        return
    missing = [f"{name}.{k}" for k in expected if k not in got]
    unexpected = [f"{name}.{k}" for k in got if k not in expected]
    shapes = [
        f"init[{f'{name}.{k}'!r}] has shape {got[k]}, expected {expected[k]}"
        for k in expected
        if k in got and got[k] != expected[k]
    ]
    problems = (
        ([f"missing {missing}"] if missing else [])
        + ([f"not parameters of this network {unexpected}"] if unexpected else [])
        + shapes
    )
    raise ValueError(
        f"The {name} parameters given do not fit this architecture ({_describe(config)}): "
        f"{'; '.join(problems)}. init must hold every one of {[f'{name}.{k}' for k in expected]} "
        "(a fit's raw_params of the same configuration)."
    )


def torch_module(build, name: str, init: dict, like, config):
    """``build()`` (a ``torch.nn.Module``) holding ``init``'s ``<name>.*`` arrays, on the device
    and in the dtype of the tensor ``like``. Built on the meta device first: no initialisation is
    drawn, so the caller's random stream is left as it was."""
    import torch

    with torch.device("meta"):
        net = build()
    net = net.to_empty(device=like.device).to(dtype=like.dtype)
    prefix = name + "."
    # Copies: torch.as_tensor alone shares a writable array and warns on a read-only one (a
    # NumPyro fit's raw_params); load_state_dict copies the values in anyway.
    state = {
        k[len(prefix) :]: torch.as_tensor(np.array(for_torch(v)))
        for k, v in init.items()
        if k.startswith(prefix)
    }
    _check_shapes(
        name,
        config,
        {k: tuple(v.shape) for k, v in net.state_dict().items()},
        {k: tuple(v.shape) for k, v in state.items()},
    )
    net.load_state_dict(state)
    return net


def equinox_module(build, name: str, init: dict, dtype, config):
    """``build(key)`` (an equinox module) holding ``init``'s ``<name>.*`` arrays in ``dtype``.
    Only the module's structure is traced (``eqx.filter_eval_shape``); nothing is initialised."""
    import equinox as eqx
    import jax
    import jax.numpy as jnp

    shapes = eqx.filter_eval_shape(build, jax.random.PRNGKey(0))
    paths = [
        jax.tree_util.keystr(p, simple=True, separator=".")
        for p, _ in jax.tree_util.tree_leaves_with_path(shapes)
    ]
    prefix = name + "."
    _check_shapes(
        name,
        config,
        {p: tuple(s.shape) for p, s in zip(paths, jax.tree_util.tree_leaves(shapes), strict=True)},
        {k[len(prefix) :]: tuple(np.shape(v)) for k, v in init.items() if k.startswith(prefix)},
    )
    leaves = [jnp.asarray(init[prefix + p], dtype=dtype) for p in paths]
    return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(shapes), leaves)


def pyro_param_init(init: dict, name: str, like: dict):
    """The starting value of ``pyro.param(name, ...)`` from ``init[name]``, given lazily: a copy
    as a tensor of ``like``'s dtype and device, made once, when the parameter is created.

    A copy (NumPy's, writable even where the caller's array is not), because the optimiser
    updates parameters in place: an unconstrained (real-valued) parameter made by
    ``torch.as_tensor`` would share the caller's array, another fit's ``raw_params`` say, and
    the fit would write into it."""
    import torch

    return lambda: torch.as_tensor(np.array(init[name]), **like)
