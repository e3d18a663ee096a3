"""A small array namespace per backend, so array algebra (closed-form updates, attention) is
written once.

Only what that code needs, with the numpy spelling (``axis=``). ``TorchOps`` keeps tensors on the
device of its inputs; ``JaxOps`` functions are pure and jit-compatible. ``NumpyOps`` has the
elementwise and attention functions only (the reference attention runs without torch or JAX);
the closed forms' layout and linear-algebra functions are torch's and JAX's.
"""

from __future__ import annotations

import dataclasses
import functools
import math

import numpy as np

from zoo.devices import for_torch


def _for_torch(value):
    """numpy arrays as torch takes them (``zoo.devices.for_torch``); tensors and numbers as
    they are."""
    return for_torch(value) if isinstance(value, np.ndarray) else value


class TorchOps:
    name = "pyro"

    def __init__(self):
        import torch

        self.torch = torch

    def asarray(self, value, like):
        return self.torch.as_tensor(_for_torch(value), dtype=like.dtype, device=like.device)

    def index(self, array, like):
        """Integer ``array`` (numpy) as an index tensor on ``like``'s device, made once: a numpy
        index moves to a GPU at every use, and each move waits for the device."""
        return self.torch.as_tensor(array, device=like.device)

    def ones(self, shape, like):
        return self.torch.ones(shape, dtype=like.dtype, device=like.device)

    def zeros(self, shape, like):
        return self.torch.zeros(shape, dtype=like.dtype, device=like.device)

    def eye(self, n, like):
        return self.torch.eye(n, dtype=like.dtype, device=like.device)

    def concatenate(self, arrays, axis=0):
        return self.torch.cat(list(arrays), dim=axis)

    def einsum(self, subscripts, *operands):
        return self.torch.einsum(subscripts, *operands)

    def sum(self, x, axis=None, keepdims=False):
        return x.sum() if axis is None else x.sum(dim=axis, keepdim=keepdims)

    def cumsum(self, x, axis):
        return self.torch.cumsum(x, dim=axis)

    def flip(self, x, axis):
        return self.torch.flip(x, dims=(axis,))

    def exp(self, x):
        return self.torch.exp(x)

    def log(self, x):
        return self.torch.log(x)

    def digamma(self, x):
        return self.torch.special.digamma(x)

    def gammaln(self, x):
        return self.torch.special.gammaln(x)

    def cholesky(self, a):
        # NaN for a matrix that is not positive definite, as JAX gives, instead of an exception:
        # the NaN guard then stops the run with the last good parameters on both backends.
        chol, info = self.torch.linalg.cholesky_ex(a)
        return self.torch.where((info > 0)[..., None, None], self.torch.nan, chol)

    def cho_inverse(self, chol):
        """Inverse of ``chol @ chol.T`` from its lower Cholesky factor (batched)."""
        return self.torch.cholesky_inverse(chol)

    def diagonal(self, a):
        return self.torch.diagonal(a, dim1=-2, dim2=-1)

    def asarray_on(self, value, like):
        """``value`` as a tensor of its own dtype on ``like``'s device."""
        return self.torch.as_tensor(_for_torch(value), device=like.device)

    def astype(self, x, dtype):
        return x.to(dtype)

    def is_bool(self, x):
        return x.dtype == self.torch.bool

    def is_floating(self, x):
        return x.is_floating_point()

    def finfo(self, dtype):
        return self.torch.finfo(dtype)

    def is_concrete(self, x):
        return True

    def tri(self, n, m, like):
        """Boolean (n, m), True on and below the diagonal."""
        return self.torch.ones(n, m, dtype=self.torch.bool, device=like.device).tril()

    def swapaxes(self, x, axis1, axis2):
        return x.transpose(axis1, axis2)

    def broadcast_to(self, x, shape):
        return x.expand(shape)

    def where(self, condition, x, y):
        return self.torch.where(condition, x, y)

    def mean(self, x, axis=None):
        return x.mean() if axis is None else x.mean(dim=axis)

    def all(self, x, axis=None):
        return x.all() if axis is None else x.all(dim=axis)

    def any(self, x, axis=None):
        return x.any() if axis is None else x.any(dim=axis)

    def argwhere(self, x):
        return self.torch.nonzero(x)

    def isneginf(self, x):
        return self.torch.isneginf(x)

    def log1p(self, x):
        return self.torch.log1p(x)

    def softmax(self, x, axis):
        return self.torch.softmax(x, dim=axis)

    def log_softmax(self, x, axis):
        return self.torch.log_softmax(x, dim=axis)

    def clip_min(self, x, low):
        return self.torch.clamp(x, min=low)

    # Layout of the (N, F) features and (N, K) responsibilities. Stored transposed, both products
    # of an iteration run about twice as fast in torch's BLAS (measured: benchmarks/cavi_speed.py).
    def layout_features(self, features):
        return features.T.contiguous()

    def layout_resp(self, resp):
        return resp.T.contiguous()

    def rows(self, resp):
        """Responsibilities back in (N, K) orientation."""
        return resp.T

    def log_softmax_logits(self, features, theta):
        """(log responsibilities, log normaliser (N,)) of ``phi @ theta``, in this layout."""
        logits = theta.T @ features  # (K, N)
        log_resp = self.torch.log_softmax(logits, dim=0)
        return log_resp, logits[0] - log_resp[0]

    def softmax_logits(self, features, theta):
        """(responsibilities, log normaliser (N,)) of ``phi @ theta``, in this layout. torch's
        fused log-softmax and one exponential are faster here than a softmax and a separate
        log-sum-exp (measured on the CPU)."""
        log_resp, log_norm = self.log_softmax_logits(features, theta)
        return self.torch.exp(log_resp), log_norm

    def weighted_feature_sums(self, resp, features):
        """``resp.T @ phi`` in (N, K) terms: (K, F)."""
        return resp @ features.T


class AsGivenLayout:
    """The closed forms' layout functions for (N, F) features and (N, K) responsibilities kept
    as they come, with the softmax over each row. XLA is fastest so (``JaxOps``); torch's own
    layout is the transposed one (``TorchOps``), and ``benchmarks/cavi_cuda_graph.py`` times
    torch with this one (``class AsGivenTorchOps(AsGivenLayout, TorchOps)``)."""

    def layout_features(self, features):
        return features

    def layout_resp(self, resp):
        return resp

    def rows(self, resp):
        return resp

    def log_softmax_logits(self, features, theta):
        """(log responsibilities, log normaliser (N,)) of ``phi @ theta``, in this layout."""
        logits = features @ theta
        log_resp = self.log_softmax(logits, axis=1)
        return log_resp, logits[:, 0] - log_resp[:, 0]

    def weighted_feature_sums(self, resp, features):
        """``resp.T @ phi``: (K, F)."""
        return resp.T @ features


class JaxOps(AsGivenLayout):
    name = "numpyro"

    def __init__(self):
        import jax
        import jax.numpy as jnp
        import jax.scipy as jsp

        self.jax, self.jnp, self.jsp = jax, jnp, jsp

    def asarray(self, value, like):
        return self.jnp.asarray(value, dtype=like.dtype)

    def index(self, array, like):
        """Integer ``array`` unchanged (numpy): JAX moves it with a compiled function's other
        arguments, without waiting for the device."""
        return array

    def ones(self, shape, like):
        return self.jnp.ones(shape, dtype=like.dtype)

    def zeros(self, shape, like):
        return self.jnp.zeros(shape, dtype=like.dtype)

    def eye(self, n, like):
        return self.jnp.eye(n, dtype=like.dtype)

    def concatenate(self, arrays, axis=0):
        return self.jnp.concatenate(list(arrays), axis=axis)

    def einsum(self, subscripts, *operands):
        return self.jnp.einsum(subscripts, *operands)

    def sum(self, x, axis=None, keepdims=False):
        return self.jnp.sum(x, axis=axis, keepdims=keepdims)

    def cumsum(self, x, axis):
        return self.jnp.cumsum(x, axis=axis)

    def flip(self, x, axis):
        return self.jnp.flip(x, axis=axis)

    def exp(self, x):
        return self.jnp.exp(x)

    def log(self, x):
        return self.jnp.log(x)

    def digamma(self, x):
        return self.jsp.special.digamma(x)

    def gammaln(self, x):
        return self.jsp.special.gammaln(x)

    def cholesky(self, a):
        return self.jnp.linalg.cholesky(a)

    def cho_inverse(self, chol):
        eye = self.jnp.broadcast_to(self.jnp.eye(chol.shape[-1], dtype=chol.dtype), chol.shape)
        return self.jsp.linalg.cho_solve((chol, True), eye)

    def diagonal(self, a):
        return self.jnp.diagonal(a, axis1=-2, axis2=-1)

    def asarray_on(self, value, like):
        return self.jnp.asarray(value)

    def astype(self, x, dtype):
        return x.astype(dtype)

    def is_bool(self, x):
        return x.dtype == self.jnp.bool_

    def is_floating(self, x):
        return self.jnp.issubdtype(x.dtype, self.jnp.floating)

    def finfo(self, dtype):
        return self.jnp.finfo(dtype)

    def is_concrete(self, x):
        """False while traced (under ``jit``, ``vmap``, ``grad``): the values cannot be read."""
        return not isinstance(x, self.jax.core.Tracer)

    def tri(self, n, m, like):
        return self.jnp.tri(n, m, dtype=bool)

    def swapaxes(self, x, axis1, axis2):
        return self.jnp.swapaxes(x, axis1, axis2)

    def broadcast_to(self, x, shape):
        return self.jnp.broadcast_to(x, shape)

    def where(self, condition, x, y):
        return self.jnp.where(condition, x, y)

    def mean(self, x, axis=None):
        return self.jnp.mean(x, axis=axis)

    def all(self, x, axis=None):
        return self.jnp.all(x, axis=axis)

    def any(self, x, axis=None):
        return self.jnp.any(x, axis=axis)

    def argwhere(self, x):
        return self.jnp.argwhere(x)

    def isneginf(self, x):
        return self.jnp.isneginf(x)

    def log1p(self, x):
        return self.jnp.log1p(x)

    def softmax(self, x, axis):
        return self.jax.nn.softmax(x, axis=axis)

    def log_softmax(self, x, axis):
        return self.jax.nn.log_softmax(x, axis=axis)

    def clip_min(self, x, low):
        return self.jnp.maximum(x, low)

    def softmax_logits(self, features, theta):
        # One softmax whose maximum and sum also give the log normaliser: one (N, K) array
        # fewer to write and read than exp(log_softmax) (a CAVI iteration at N = 1M: 15% faster
        # on the CPU).
        logits = features @ theta
        top = self.jnp.max(logits, axis=1, keepdims=True)
        unnormalised = self.jnp.exp(logits - top)
        total = self.jnp.sum(unnormalised, axis=1, keepdims=True)
        return unnormalised / total, (top + self.jnp.log(total))[:, 0]


class NumpyOps:
    name = "numpy"

    def __init__(self):
        import numpy as np

        self.np = np

    @functools.cached_property
    def special(self):
        """``scipy.special``, imported when first used: it takes a while (this class is made
        when ``zoo`` is imported)."""
        import scipy.special

        return scipy.special

    def asarray(self, value, like):
        return self.np.asarray(value, dtype=like.dtype)

    def asarray_on(self, value, like):
        return self.np.asarray(value)

    def ones(self, shape, like):
        return self.np.ones(shape, dtype=like.dtype)

    def zeros(self, shape, like):
        return self.np.zeros(shape, dtype=like.dtype)

    def einsum(self, subscripts, *operands):
        return self.np.einsum(subscripts, *operands)

    def sum(self, x, axis=None, keepdims=False):
        return self.np.sum(x, axis=axis, keepdims=keepdims)

    def exp(self, x):
        return self.np.exp(x)

    def log(self, x):
        return self.np.log(x)

    def gammaln(self, x):
        return self.special.gammaln(x)

    def astype(self, x, dtype):
        return x.astype(dtype)

    def is_bool(self, x):
        return x.dtype == bool

    def is_floating(self, x):
        return x.dtype.kind == "f"

    def finfo(self, dtype):
        return self.np.finfo(dtype)

    def is_concrete(self, x):
        return True

    def tri(self, n, m, like):
        return self.np.tri(n, m, dtype=bool)

    def swapaxes(self, x, axis1, axis2):
        return self.np.swapaxes(x, axis1, axis2)

    def broadcast_to(self, x, shape):
        return self.np.broadcast_to(x, shape)

    def where(self, condition, x, y):
        return self.np.where(condition, x, y)

    def mean(self, x, axis=None):
        return self.np.mean(x, axis=axis)

    def all(self, x, axis=None):
        return self.np.all(x, axis=axis)

    def any(self, x, axis=None):
        return self.np.any(x, axis=axis)

    def argwhere(self, x):
        return self.np.argwhere(x)

    def isneginf(self, x):
        return self.np.isneginf(x)

    def log1p(self, x):
        return self.np.log1p(x)

    def softmax(self, x, axis):
        return self.special.softmax(x, axis=axis)

    def log_softmax(self, x, axis):
        return self.special.log_softmax(x, axis=axis)

    def clip_min(self, x, low):
        return self.np.maximum(x, low)


LOG_2PI = math.log(2 * math.pi)


def convert_config(config, to_array):
    """A copy of a model config with its numpy arrays turned into backend arrays."""
    changes = {
        f.name: to_array(getattr(config, f.name))
        for f in dataclasses.fields(config)
        if isinstance(getattr(config, f.name), np.ndarray)
    }
    return dataclasses.replace(config, **changes)
