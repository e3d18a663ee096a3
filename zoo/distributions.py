"""NumPyro distributions that NumPyro does not ship.

* :class:`RelaxedOneHotCategorical` -- the Concrete / Gumbel-softmax distribution, with the
  parameterisation and density of :class:`torch.distributions.RelaxedOneHotCategorical`, so a
  Pyro model and its NumPyro twin score the same values identically.
* :class:`GumbelSoftmax` -- a categorical drawn as a relaxed (or straight-through) one-hot
  vector, with the discrete density and the categoricals' closed-form KL (Jang et al., 2017).
* :class:`ExpRelaxedCategorical` -- the ExpConcrete distribution (Maddison et al., 2017), with
  the parameterisation and density of :class:`torch.distributions.ExpRelaxedCategorical`.
* :class:`StickBreakingCategorical` -- a categorical over a truncated stick-breaking prior whose
  mass beyond the truncation is left out rather than renormalised away (its torch twin lives in
  :mod:`zoo.torch_distributions`).
* :data:`lower_cholesky` and :data:`simplex` -- NumPyro's constraints with transforms that keep
  float32 parameters float32 (:class:`LowerCholeskyTransform`, :class:`StickBreakingTransform`).
* :data:`scale_free_lower_cholesky` -- lower-Cholesky factors whose off-diagonal entries are
  parameterised relative to their row's diagonal (:class:`ScaleFreeLowerCholeskyTransform`).
* :func:`scaled_real` -- real parameters moved in units of a given scale, such as the data's.
"""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax, random
from jax.scipy.special import gammaln, logsumexp
from numpyro.distributions import (
    CategoricalLogits,
    Distribution,
    TransformedDistribution,
    constraints,
)
from numpyro.distributions import Normal as _NumPyroNormal
from numpyro.distributions import Wishart as _NumPyroWishart
from numpyro.distributions import WishartCholesky as _NumPyroWishartCholesky
from numpyro.distributions.kl import kl_divergence
from numpyro.distributions.transforms import (
    AffineTransform,
    CholeskyTransform,
    IdentityTransform,
    biject_to,
)
from numpyro.distributions.transforms import LowerCholeskyTransform as _LowerCholeskyTransformBase
from numpyro.distributions.transforms import StickBreakingTransform as _StickBreakingTransformBase
from numpyro.distributions.util import add_diag, clamp_probs, lazy_property, validate_sample
from numpyro.util import not_jax_tracer

__all__ = [
    "ExpRelaxedCategorical",
    "GumbelSoftmax",
    "LowerCholeskyTransform",
    "RelaxedOneHotCategorical",
    "ScaleFreeLowerCholeskyTransform",
    "StickBreakingCategorical",
    "StickBreakingTransform",
    "MAX_CONCENTRATION",
    "lower_cholesky",
    "sampleable_concentration",
    "scale_free_lower_cholesky",
    "scaled_real",
    "simplex",
    "stick_breaking_log_weights",
]


#: The largest concentration the zoo's guides hand to JAX's Gamma sampler (Beta, Dirichlet and
#: Wishart draws go through it). A posterior's concentration is its prior's plus a count of data
#: points, so a larger one means the optimiser has left the model's range (a learning rate far
#: too high); and there the pathwise gradient of a Gamma draw sums a series of about
#: sqrt(concentration) terms, which from about 1e16 on does not end in practice.
MAX_CONCENTRATION = 1e10


def sampleable_concentration(concentration):
    """``concentration`` where it is at most :data:`MAX_CONCENTRATION`, else NaN.

    The step's objective then turns NaN and the fit stops with a clear error, instead of the
    Gamma sampler's gradient looping without end. Values in range pass through unchanged, with
    their gradients.

    Parameters
    ----------
    concentration : array
        A Gamma, Beta, Dirichlet or Wishart concentration about to be sampled from.

    Returns
    -------
    array
        The same values, NaN where they exceed :data:`MAX_CONCENTRATION`.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> sampleable_concentration(jnp.array([2.0, 1e20])).tolist()
    [2.0, nan]
    """
    return jnp.where(concentration <= MAX_CONCENTRATION, concentration, jnp.nan)


def stick_breaking_log_weights(sticks):
    r"""Log stick-breaking weights :math:`\log \pi_k = \log v_k + \sum_{j<k} \log(1 - v_j)`.

    Parameters
    ----------
    sticks : array, shape (..., K)
        Stick proportions :math:`v_k \in [0, 1]`.

    Returns
    -------
    array, shape (..., K)
        :math:`\log \pi_k`, not normalised: :math:`\sum_k \pi_k = 1 - \prod_k (1 - v_k)`.

    See Also
    --------
    zoo.torch_distributions.stick_breaking_log_weights : The torch twin.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from zoo.distributions import stick_breaking_log_weights
    >>> weights = jnp.exp(stick_breaking_log_weights(jnp.array([0.5, 0.5, 0.5])))
    >>> [round(float(w), 4) for w in weights]  # 1/8 of the mass lies beyond the truncation
    [0.5, 0.25, 0.125]

    A stick equal to one leaves nothing for the components after it (no NaN):

    >>> [round(float(w), 4) for w in jnp.exp(stick_breaking_log_weights(jnp.array([1.0, 0.5])))]
    [1.0, 0.0]
    """
    log_rest = jnp.log1p(-sticks)
    # Exclusive cumulative sum by padding rather than ``cumsum - log_rest``, which would give
    # -inf - (-inf) = nan after a stick equal to one.
    zeros = jnp.zeros_like(log_rest[..., :1])
    log_prefix = jnp.concatenate([zeros, jnp.cumsum(log_rest[..., :-1], axis=-1)], axis=-1)
    return jnp.log(sticks) + log_prefix


class RelaxedOneHotCategorical(Distribution):
    r"""Concrete / Gumbel-softmax distribution on the probability simplex.

    The continuous relaxation of a one-hot categorical of Maddison et al. (2017) and Jang et al.
    (2017). A draw is ``softmax((logits + g) / temperature)`` with ``g`` i.i.d. standard Gumbel,
    which is reparameterised, and the density on the simplex is

    .. math::
        p(x) = (K-1)!\, \tau^{K-1} \prod_{k=1}^{K} \frac{\pi_k x_k^{-\tau-1}}
        {\left(\sum_{i} \pi_i x_i^{-\tau}\right)}\,,

    the same parameterisation and ``log_prob`` as
    :class:`torch.distributions.RelaxedOneHotCategorical` (which computes it as an
    ``ExpRelaxedCategorical`` in log-space pushed through ``exp``).

    Parameters
    ----------
    temperature : float or array, shape broadcastable with the batch shape
        Relaxation temperature :math:`\tau > 0`; samples approach one-hot vectors as
        :math:`\tau \to 0`.
    probs : array, shape (..., K), optional
        Event probabilities on the simplex.
    logits : array, shape (..., K), optional
        Unnormalised log probabilities. Exactly one of ``probs`` and ``logits`` is given.
    validate_args : bool, optional
        Check the parameters (and values passed to ``log_prob``) against their constraints.

    Attributes
    ----------
    temperature : array
        Broadcast to ``batch_shape``.
    logits : array, shape ``batch_shape + (K,)``
        The logits (``log(probs)``, clamped, when built from ``probs``).
    probs : array, shape ``batch_shape + (K,)``
        The event probabilities.

    Raises
    ------
    ValueError
        Both or neither of ``probs`` and ``logits``, or a parameter with no event axis.

    Notes
    -----
    ``batch_shape`` is the broadcast of ``temperature``'s shape with ``logits.shape[:-1]`` and
    ``event_shape`` is ``(K,)``.

    Examples
    --------
    >>> import jax
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> from zoo.distributions import RelaxedOneHotCategorical
    >>> d = RelaxedOneHotCategorical(0.5, logits=jnp.zeros(3))
    >>> d.batch_shape, d.event_shape
    ((), (3,))
    >>> x = d.sample(jax.random.key(0), (2,))
    >>> x.shape, np.allclose(x.sum(-1), 1.0)
    ((2, 3), True)

    The density is torch's, at the same point:

    >>> import torch
    >>> twin = torch.distributions.RelaxedOneHotCategorical(
    ...     torch.tensor(0.5, dtype=torch.float64), logits=torch.zeros(3, dtype=torch.float64)
    ... )
    >>> expected = twin.log_prob(torch.as_tensor(np.array(x), dtype=torch.float64)).numpy()
    >>> np.allclose(d.log_prob(x), expected, rtol=1e-4)
    True
    """

    arg_constraints = {
        "temperature": constraints.positive,
        "probs": constraints.simplex,
        "logits": constraints.real_vector,
    }
    support = constraints.simplex
    reparametrized_params = ["temperature", "probs", "logits"]

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        if (probs is None) == (logits is None):
            raise ValueError("Exactly one of `probs` or `logits` must be specified.")
        param = probs if logits is None else logits
        if jnp.ndim(param) < 1:
            raise ValueError("`probs` / `logits` must be at least one-dimensional.")
        batch_shape = lax.broadcast_shapes(jnp.shape(temperature), jnp.shape(param)[:-1])
        event_shape = jnp.shape(param)[-1:]
        # Parameters are stored broadcast to the full batch so that sample() and log_prob()
        # need no shape bookkeeping and the pytree leaves have predictable shapes.
        self.temperature = jnp.broadcast_to(temperature, batch_shape)
        if probs is not None:
            self.probs = jnp.broadcast_to(probs, batch_shape + event_shape)
            # torch takes logits = log(clamp_probs(probs)); a zero probability stays finite.
            self.logits = jnp.log(clamp_probs(self.probs))
        else:
            self.logits = jnp.broadcast_to(logits, batch_shape + event_shape)
        super().__init__(batch_shape, event_shape, validate_args=validate_args)

    @lazy_property
    def probs(self):
        """Event probabilities, shape ``batch_shape + (K,)``; derived when built from logits."""
        return jax.nn.softmax(self.logits, axis=-1)

    @staticmethod
    def infer_shapes(temperature=(), probs=None, logits=None):
        param = probs if logits is None else logits
        batch_shape = lax.broadcast_shapes(tuple(temperature), tuple(param[:-1]))
        return batch_shape, tuple(param[-1:])

    def sample(self, key, sample_shape=()):
        """Draw reparameterised samples with the Gumbel-softmax trick.

        Parameters
        ----------
        key : jax.random.PRNGKey
        sample_shape : tuple of int

        Returns
        -------
        array, shape ``sample_shape + batch_shape + (K,)``
            Points strictly inside the simplex.
        """
        shape = sample_shape + self.batch_shape + self.event_shape
        dtype = jnp.result_type(self.logits, float)
        # Clamping the uniforms keeps the Gumbel noise finite, as torch's rsample does.
        uniforms = clamp_probs(random.uniform(key, shape, dtype=dtype))
        gumbels = -jnp.log(-jnp.log(uniforms))
        scores = (self.logits + gumbels) / self.temperature[..., None]
        # At low temperature softmax underflows to exact 0 / 1; clamp so log_prob stays finite.
        return clamp_probs(jax.nn.softmax(scores, axis=-1))

    @validate_sample
    def log_prob(self, value):
        """Log density on the simplex, identical to torch's ``RelaxedOneHotCategorical``.

        Parameters
        ----------
        value : array, shape ``(...,) + (K,)`` broadcastable with ``batch_shape + (K,)``

        Returns
        -------
        array, shape ``broadcast(value.shape[:-1], batch_shape)``
        """
        num_events = self.event_shape[-1]
        log_value = jnp.log(value)
        # Density of y = log(x) (torch's ExpRelaxedCategorical) ...
        score = self.logits - self.temperature[..., None] * log_value
        score = jnp.sum(score - logsumexp(score, axis=-1, keepdims=True), axis=-1)
        log_scale = gammaln(float(num_events)) + (num_events - 1) * jnp.log(self.temperature)
        # ... plus log|dy/dx| = -sum_k log x_k for the change of variables to x = exp(y).
        return score + log_scale - jnp.sum(log_value, axis=-1)


class _ExtendedReal(constraints._Real):
    """The extended real line ``[-inf, inf]``: every number but NaN, as torch's ``real``.

    NumPyro's ``real`` refuses both infinities, but a log-probability of ``-inf`` is a category
    of zero mass (a stick equal to one leaves nothing for the components after it), which the
    torch twins accept.
    """

    def __call__(self, x):
        return x == x  # False for NaN only


#: Vectors on the extended real line (torch's ``real_vector``), reached from real vectors.
_extended_real_vector = constraints.independent(_ExtendedReal(), 1)
biject_to.register(_ExtendedReal, lambda constraint: IdentityTransform())


class GumbelSoftmax(Distribution):
    r"""A categorical variable drawn as a one-hot vector by the Gumbel-softmax trick.

    Jang, Gu & Poole (2017), "Categorical reparameterization with Gumbel-softmax", and Maddison,
    Mnih & Teh (2017). A draw is the relaxed one-hot vector
    ``y = softmax((log_probs + g) / temperature)``, ``g`` i.i.d. standard Gumbel, which is
    reparameterised; with ``straight_through=True`` it is the one-hot vector of
    ``argmax(log_probs + g)`` whose gradient is the relaxed draw's (Bengio et al., 2013).
    Either way ``argmax(y)`` is an exact draw of the categorical (the Gumbel-max trick), and the
    density is the *discrete* one, of that category: ``log_prob(y) = log_probs[argmax(y)]``. A
    guide and a prior of this class have the closed-form ``KL(q || p)`` between their
    categoricals (registered with :func:`numpyro.distributions.kl.kl_divergence`), which a
    mean-field ELBO takes in place of the two log-densities: the relaxed sample serves the
    likelihood, the KL is exact, as Jang et al. do it.

    Parameters
    ----------
    temperature : float or array, shape broadcastable with the batch shape
        Relaxation temperature ``> 0`` of the draw (the density does not depend on it).
    log_probs : array, shape (..., K)
        Log-probabilities of the ``K`` categories. They may sum to less than one (a defective
        prior such as a truncated stick-breaking one): the density and the KL use them as
        given; draws are of the normalised categorical. ``-inf`` is a category of zero mass,
        which is never drawn; validation refuses NaN only, as the torch twin's does.
    straight_through : bool
        Draw hard one-hot vectors with the relaxed draw's gradient.
    validate_args : bool, optional

    Examples
    --------
    >>> import jax
    >>> import jax.numpy as jnp
    >>> from numpyro.distributions.kl import kl_divergence
    >>> from zoo.distributions import GumbelSoftmax
    >>> q = GumbelSoftmax(0.5, jnp.log(jnp.array([0.5, 0.25, 0.25])))
    >>> y = q.sample(jax.random.key(0))
    >>> float(q.log_prob(y)) == float(q.log_probs[jnp.argmax(y)])
    True
    >>> p = GumbelSoftmax(0.5, jnp.log(jnp.ones(3) / 3))
    >>> round(float(kl_divergence(q, p)), 4)  # sum_k q_k log(q_k / p_k)
    0.0589
    """

    arg_constraints = {"temperature": constraints.positive, "log_probs": _extended_real_vector}
    support = constraints.simplex
    reparametrized_params = ["temperature", "log_probs"]

    def __init__(self, temperature, log_probs, straight_through=False, validate_args=None):
        if jnp.ndim(log_probs) < 1:
            raise ValueError("`log_probs` must be at least one-dimensional.")
        batch_shape = lax.broadcast_shapes(jnp.shape(temperature), jnp.shape(log_probs)[:-1])
        event_shape = jnp.shape(log_probs)[-1:]
        self.temperature = jnp.broadcast_to(temperature, batch_shape)
        self.log_probs = jnp.broadcast_to(log_probs, batch_shape + event_shape)
        self.straight_through = bool(straight_through)
        super().__init__(batch_shape, event_shape, validate_args=validate_args)

    def tree_flatten(self):
        return (self.temperature, self.log_probs), self.straight_through

    @classmethod
    def tree_unflatten(cls, aux_data, params):
        return cls(*params, straight_through=aux_data)

    @staticmethod
    def infer_shapes(temperature=(), log_probs=()):
        return lax.broadcast_shapes(tuple(temperature), tuple(log_probs[:-1])), tuple(
            log_probs[-1:]
        )

    def sample(self, key, sample_shape=()):
        """Relaxed (or straight-through one-hot) draws, shape ``sample_shape + batch_shape +
        (K,)``."""
        shape = sample_shape + self.batch_shape + self.event_shape
        dtype = jnp.result_type(self.log_probs, float)
        gumbels = -jnp.log(-jnp.log(clamp_probs(random.uniform(key, shape, dtype=dtype))))
        scores = self.log_probs + gumbels
        soft = jax.nn.softmax(scores / self.temperature[..., None], axis=-1)
        if not self.straight_through:
            return soft
        hard = jax.nn.one_hot(jnp.argmax(scores, axis=-1), shape[-1], dtype=soft.dtype)
        return hard + soft - lax.stop_gradient(soft)

    def log_prob(self, value):
        """``log_probs`` of the category ``argmax(value)``, shape ``broadcast(value.shape[:-1],
        batch_shape)``."""
        index = jnp.argmax(lax.stop_gradient(value), axis=-1)
        shape = lax.broadcast_shapes(jnp.shape(index), self.batch_shape)
        log_probs = jnp.broadcast_to(self.log_probs, shape + self.event_shape)
        index = jnp.broadcast_to(index, shape)[..., None]
        return jnp.take_along_axis(log_probs, index, axis=-1)[..., 0]


@kl_divergence.register(GumbelSoftmax, GumbelSoftmax)
def _kl_gumbel_softmax(q, p):
    """``sum_k q_k (log q_k - log p_k)``: the KL of the categoricals the two relax."""
    q_probs = jnp.exp(q.log_probs)
    # The difference is 0 where q has no mass before it meets q_k = 0: (-inf - log p) * 0 would
    # be NaN, in the gradient too, however the product is masked afterwards.
    diff = jnp.where(q_probs > 0, q.log_probs - p.log_probs, 0.0)
    return jnp.sum(q_probs * diff, axis=-1)


class ExpRelaxedCategorical(Distribution):
    r"""ExpConcrete distribution: the log of a Concrete (relaxed one-hot) draw.

    Maddison, Mnih & Teh (2017), "The Concrete distribution", appendix C: a draw is
    ``y = log_softmax((logits + g) / temperature)`` with ``g`` i.i.d. standard Gumbel, and its
    log-density, computed in log space, is

    .. math::
        \log p(y) = \log (K-1)! + (K-1) \log \tau + \sum_k (\ell_k - \tau y_k)
        - K \operatorname{logsumexp}_k (\ell_k - \tau y_k),

    the parameterisation and ``log_prob`` of torch's ``ExpRelaxedCategorical``
    (:mod:`torch.distributions.relaxed_categorical`).

    Parameters
    ----------
    temperature : float or array, shape broadcastable with the batch shape
        ``tau > 0``.
    logits : array, shape (..., K)
        Unnormalised log-probabilities (shifting them changes nothing).
    validate_args : bool, optional

    Examples
    --------
    >>> import jax
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> import torch
    >>> from zoo.distributions import ExpRelaxedCategorical
    >>> d = ExpRelaxedCategorical(0.5, jnp.array([0.1, -0.3, 0.2]))
    >>> y = d.sample(jax.random.key(0))
    >>> twin = torch.distributions.relaxed_categorical.ExpRelaxedCategorical(
    ...     torch.tensor(0.5, dtype=torch.float64),
    ...     logits=torch.tensor([0.1, -0.3, 0.2], dtype=torch.float64),
    ... )
    >>> bool(np.allclose(d.log_prob(y), twin.log_prob(torch.as_tensor(np.array(y))), rtol=1e-5))
    True
    """

    arg_constraints = {"temperature": constraints.positive, "logits": constraints.real_vector}
    support = constraints.real_vector
    reparametrized_params = ["temperature", "logits"]

    def __init__(self, temperature, logits, validate_args=None):
        if jnp.ndim(logits) < 1:
            raise ValueError("`logits` must be at least one-dimensional.")
        batch_shape = lax.broadcast_shapes(jnp.shape(temperature), jnp.shape(logits)[:-1])
        event_shape = jnp.shape(logits)[-1:]
        self.temperature = jnp.broadcast_to(temperature, batch_shape)
        self.logits = jnp.broadcast_to(logits, batch_shape + event_shape)
        super().__init__(batch_shape, event_shape, validate_args=validate_args)

    @staticmethod
    def infer_shapes(temperature=(), logits=()):
        return lax.broadcast_shapes(tuple(temperature), tuple(logits[:-1])), tuple(logits[-1:])

    def sample(self, key, sample_shape=()):
        """Draws ``log_softmax((logits + g) / temperature)``, shape ``sample_shape +
        batch_shape + (K,)``."""
        shape = sample_shape + self.batch_shape + self.event_shape
        dtype = jnp.result_type(self.logits, float)
        gumbels = -jnp.log(-jnp.log(clamp_probs(random.uniform(key, shape, dtype=dtype))))
        return jax.nn.log_softmax((self.logits + gumbels) / self.temperature[..., None], axis=-1)

    def log_prob(self, value):
        """The ExpConcrete log-density, shape ``broadcast(value.shape[:-1], batch_shape)``."""
        num_events = self.event_shape[-1]
        tau = self.temperature[..., None]
        score = self.logits - tau * value
        score = jnp.sum(score - logsumexp(score, axis=-1, keepdims=True), axis=-1)
        return score + gammaln(float(num_events)) + (num_events - 1) * jnp.log(self.temperature)


class StickBreakingCategorical(CategoricalLogits):
    r"""Categorical over the first ``K`` components of a truncated stick-breaking prior.

    With stick proportions :math:`v_0, \dots, v_{K-1}`,

    .. math::
        \log p(k) = \log \pi_k = \log v_k + \sum_{j<k} \log(1 - v_j), \quad k = 0, \dots, K-1,

    exactly, *not* renormalised: the missing mass :math:`1 - \sum_k \pi_k = \prod_k (1 - v_k)`
    belongs to the components beyond the truncation level (the nested truncation of Kurihara,
    Welling & Teh, 2007, used by scikit-learn's ``BayesianGaussianMixture`` with
    ``weight_concentration_prior_type="dirichlet_process"``). The distribution is therefore
    defective; ``log_prob`` and enumeration use these unnormalised weights.

    :meth:`sample` draws from the normalised probabilities :math:`\pi / \sum_k \pi_k`, i.e. it
    samples conditionally on the component lying within the truncation.

    Parameters
    ----------
    sticks : array, shape (..., K)
        Stick proportions in :math:`(0, 1)` (the end points are allowed and give components
        of zero mass).
    validate_args : bool, optional
        Check ``sticks`` (and values passed to ``log_prob``) against their constraints.

    Attributes
    ----------
    logits : array, shape (..., K)
        Unnormalised :math:`\log \pi`.
    probs : array, shape (..., K)
        Unnormalised :math:`\pi`.

    Raises
    ------
    ValueError
        ``sticks`` has no axis of components.

    See Also
    --------
    zoo.torch_distributions.StickBreakingCategorical : The torch twin.

    Examples
    --------
    >>> import jax
    >>> import jax.numpy as jnp
    >>> from zoo.distributions import StickBreakingCategorical
    >>> d = StickBreakingCategorical(jnp.array([0.5, 0.5, 0.5]))
    >>> [round(float(p), 4) for p in d.probs]  # sums to 7/8, not to one
    [0.5, 0.25, 0.125]
    >>> round(float(d.log_prob(2)), 4)  # log(1/8)
    -2.0794
    >>> draws = d.sample(jax.random.key(0), (1000,))
    >>> draws.shape, sorted(set(draws.tolist()))
    ((1000,), [0, 1, 2])
    """

    arg_constraints = {"sticks": constraints.independent(constraints.unit_interval, 1)}

    def __init__(self, sticks, validate_args=None):
        if jnp.ndim(sticks) < 1:
            raise ValueError("`sticks` must be at least one-dimensional.")
        self.sticks = sticks
        super().__init__(logits=stick_breaking_log_weights(sticks), validate_args=validate_args)

    @lazy_property
    def probs(self):
        """Unnormalised stick-breaking weights :math:`\\pi`, shape ``batch_shape + (K,)``."""
        return jnp.exp(self.logits)

    def sample(self, key, sample_shape=()):
        """Draw component indices from the normalised weights :math:`\\pi / \\sum_k \\pi_k`.

        Parameters
        ----------
        key : jax.random.PRNGKey
        sample_shape : tuple of int

        Returns
        -------
        int array, shape ``sample_shape + batch_shape``
        """
        # jax.random.categorical normalises the logits itself (Gumbel-max).
        return super().sample(key, sample_shape)

    @validate_sample
    def log_prob(self, value):
        r"""Unnormalised :math:`\log \pi_k` of the indices ``value``.

        Parameters
        ----------
        value : int array, broadcastable with ``batch_shape`` (e.g. ``(K, 1, ...)`` when
            enumerated)

        Returns
        -------
        array, shape ``broadcast(value.shape, batch_shape)``
        """
        batch_shape = lax.broadcast_shapes(jnp.shape(value), self.batch_shape)
        value = jnp.broadcast_to(jnp.expand_dims(value, -1), batch_shape + (1,))
        log_pi = jnp.broadcast_to(self.logits, batch_shape + jnp.shape(self.logits)[-1:])
        return jnp.take_along_axis(log_pi, value.astype(jnp.int32), axis=-1)[..., 0]

    def entropy(self):
        raise NotImplementedError("The entropy of a defective distribution is not defined.")


def _validate_degrees_of_freedom(concentration, dim: int, strict: bool) -> None:
    """Refuse Wishart degrees of freedom not greater than ``dim - 1``, as torch's ``Wishart`` does.

    NumPyro leaves the concentration unchecked (its constraint depends on the event shape); below
    ``dim - 1`` there is no Wishart distribution, and its log-density and draws are meaningless.
    Checked only where the value is concrete, as NumPyro's ``validate_args`` checks parameters:
    a traced one (inside ``jax.jit``) passes, or with ``strict`` raises a ``RuntimeError``.
    """
    with jax.ensure_compile_time_eval():
        is_valid = jnp.asarray(concentration) > dim - 1
        if not not_jax_tracer(is_valid):
            if strict:
                raise RuntimeError("Cannot validate arguments inside jitted code.")
            return
        if not np.all(is_valid):
            invalid = np.asarray(concentration)[~np.asarray(is_valid)]
            raise ValueError(
                f"Wishart's degrees of freedom (concentration) must be greater than D - 1 = "
                f"{dim - 1} for {dim} x {dim} matrices; got {invalid.tolist()}."
            )


class _WishartCholesky(_NumPyroWishartCholesky):
    """NumPyro's ``WishartCholesky``, drawing in the dtype of its parameters, and refusing
    degrees of freedom not greater than ``D - 1`` under validation.

    NumPyro's draws its Bartlett factor with no dtype, so float64 once JAX's 64-bit mode is on:
    float32 parameters gave float64 draws. The same operations in the same order, each given the
    parameters' dtype, so float64 draws are NumPyro's to the bit.
    """

    def validate_args(self, strict: bool = True) -> None:
        super().validate_args(strict)
        _validate_degrees_of_freedom(self.concentration, self.event_shape[-1], strict)

    def sample(self, key, sample_shape=()):
        # At least a float: a Python-number concentration is weakly typed and defers to the scale.
        dtype = jnp.result_type(self.concentration, self.scale_tril, float)
        rng_diag, rng_offdiag = random.split(key)
        latent = jnp.zeros(sample_shape + self.batch_shape + self.event_shape, dtype=dtype)
        p = self.event_shape[-1]
        i = jnp.arange(p)
        df = self.concentration[..., None] - i
        chi2 = random.chisquare(rng_diag, df, latent.shape[:-1], dtype=dtype)
        latent = latent.at[..., i, i].set(jnp.sqrt(chi2))
        i, j = jnp.tril_indices(p, -1)
        noise = random.normal(rng_offdiag, latent.shape[:-2] + (i.size,), dtype=dtype)
        latent = latent.at[..., i, j].set(noise)
        return jnp.matmul(*jnp.broadcast_arrays(self.scale_tril, latent))


class Wishart(_NumPyroWishart):
    """``numpyro.distributions.Wishart`` with pathwise gradients in the concentration too.

    NumPyro samples by the Bartlett decomposition with JAX's Gamma sampler, which is
    reparameterised (implicit gradients), but does not list ``concentration`` among the
    reparameterised parameters, so ELBOs treat the site as non-reparameterisable and add
    score-function terms. Declaring it matches torch's ``Wishart`` (``has_rsample=True``).

    Its draws are also in the dtype of its parameters with JAX's 64-bit mode on (as the
    inference layer turns it on), where NumPyro's are float64 whatever the parameters; float64
    draws are NumPyro's, bit for bit.

    With validation on, degrees of freedom not greater than ``D - 1`` are refused, as torch's
    ``Wishart`` refuses them (NumPyro's leaves them unchecked): where they are concrete, that
    is, not inside ``jax.jit``.

    Parameters
    ----------
    concentration : array or float
        The degrees of freedom, greater than ``D - 1``.
    scale_matrix, rate_matrix, scale_tril : array, shape (..., D, D), optional
        The scale, its inverse, or the Cholesky factor of the scale: exactly one of the three,
        as for ``numpyro.distributions.Wishart``.
    validate_args : bool, optional
        Check the parameters against their constraints.

    Attributes
    ----------
    has_rsample : bool
        True: draws are differentiable in every parameter.

    Raises
    ------
    ValueError
        With validation on, a concentration not greater than ``D - 1``.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> import numpyro.distributions as dist
    >>> from zoo.distributions import Wishart
    >>> d = Wishart(concentration=3.0, scale_matrix=jnp.eye(2))
    >>> d.has_rsample, dist.Wishart(concentration=3.0, scale_matrix=jnp.eye(2)).has_rsample
    (True, False)
    >>> d.mean.tolist()
    [[3.0, 0.0], [0.0, 3.0]]
    >>> Wishart(1.5, scale_matrix=jnp.eye(3), validate_args=True)
    Traceback (most recent call last):
    ...
    ValueError: Wishart's degrees of freedom (concentration) must be greater than D - 1 = 2 ...
    """

    reparametrized_params = ["concentration", "scale_matrix", "rate_matrix", "scale_tril"]

    def __init__(
        self,
        concentration,
        scale_matrix=None,
        rate_matrix=None,
        scale_tril=None,
        *,
        validate_args=None,
    ):
        # NumPyro's __init__ with the dtype-keeping base: the Cholesky factor, then L L^T.
        base_dist = _WishartCholesky(
            concentration, scale_matrix, rate_matrix, scale_tril, validate_args=validate_args
        )
        TransformedDistribution.__init__(
            self, base_dist, CholeskyTransform().inv, validate_args=validate_args
        )

    def validate_args(self, strict: bool = True) -> None:
        super().validate_args(strict)
        _validate_degrees_of_freedom(self.concentration, self.event_shape[-1], strict)

    @property
    def has_rsample(self) -> bool:
        # ``Wishart`` is a ``TransformedDistribution`` whose ``has_rsample`` asks the base
        # ``WishartCholesky``, whose list omits the concentration: answer from this class's list.
        # Without this, TraceEnum_ELBO drops the pathwise gradient for a score-function term.
        return set(self.reparametrized_params) == set(self.arg_constraints)


class Normal(_NumPyroNormal):
    """NumPyro's ``Normal``, drawing its noise in the dtype of its parameters.

    With JAX's 64-bit mode on (the zoo turns it on for the closed-form updates), NumPyro's
    ``Normal`` draws float64 noise whatever its parameters, so a float32 network fed with the
    sample runs in float64: in the VAE that made every step several times slower.

    Parameters
    ----------
    loc : array or float
        The mean; its dtype (with ``scale``'s) is the dtype of the draws.
    scale : array or float
        The standard deviation, positive.
    validate_args : bool, optional
        Check the parameters against their constraints.

    Attributes
    ----------
    loc : array
        The mean, broadcast to the batch shape.
    scale : array
        The standard deviation, broadcast to the batch shape.

    Examples
    --------
    With JAX's 64-bit mode on, as the inference layer turns it on, float32 parameters still
    give float32 draws:

    >>> import jax
    >>> import jax.numpy as jnp
    >>> from zoo.distributions import Normal
    >>> jax.config.update("jax_enable_x64", True)
    >>> d = Normal(jnp.zeros(3, dtype=jnp.float32), jnp.float32(1.0))
    >>> d.sample(jax.random.key(0), (2,)).dtype
    dtype('float32')
    """

    def sample(self, key, sample_shape=()):
        shape = sample_shape + self.batch_shape + self.event_shape
        # At least a float: integer parameters draw in JAX's default float, as NumPyro's do.
        dtype = jnp.result_type(self.loc, self.scale, float)
        eps = random.normal(key, shape=shape, dtype=dtype)
        return self.loc + eps * self.scale


class _LowerCholesky(constraints._LowerCholesky):
    """NumPyro's ``lower_cholesky`` constraint, mapped to :class:`LowerCholeskyTransform`."""


class LowerCholeskyTransform(_LowerCholeskyTransformBase):
    """NumPyro's lower-Cholesky transform in the dtype of its input.

    NumPyro's own builds the factor on ``jnp.zeros`` of the default dtype, float64 once JAX's
    64-bit mode is on (as the inference layer turns it on), and scattering float32 parameters
    into it fails (``lax.scatter requires arguments to have the same dtypes``): float32 fits of
    a covariance factor did not run. Same layout of the unconstrained vector (strictly lower
    entries row by row, then the log-diagonal), so parameters and checkpoints are those of
    NumPyro's transform.

    Importing :mod:`zoo.distributions` registers it with ``biject_to`` for
    :data:`lower_cholesky`.

    Attributes
    ----------
    domain : Constraint
        Real vectors of length ``D (D + 1) / 2``.
    codomain : Constraint
        :data:`lower_cholesky`.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> from numpyro.distributions.transforms import biject_to
    >>> from zoo.distributions import LowerCholeskyTransform, lower_cholesky
    >>> t = LowerCholeskyTransform()
    >>> factor = t(jnp.array([0.5, 0.0, 0.0], dtype=jnp.float32))  # L_10, log L_00, log L_11
    >>> factor.dtype, factor.tolist()
    (dtype('float32'), [[1.0, 0.0], [0.5, 1.0]])
    >>> type(biject_to(lower_cholesky)).__name__
    'LowerCholeskyTransform'
    """

    codomain = None  # set below: the constraint this transform is registered for

    def __call__(self, x):
        n = round((math.sqrt(1 + 8 * x.shape[-1]) - 1) / 2)
        rows, cols = np.tril_indices(n, -1)
        z = jnp.zeros(x.shape[:-1] + (n, n), dtype=x.dtype).at[..., rows, cols].set(x[..., :-n])
        return add_diag(z, jnp.exp(x[..., -n:]))


#: ``constraints.lower_cholesky`` for parameters that may be float32 (see
#: :class:`LowerCholeskyTransform`); use it in place of NumPyro's in ``numpyro.param``.
lower_cholesky = _LowerCholesky()
LowerCholeskyTransform.codomain = lower_cholesky
biject_to.register(_LowerCholesky, lambda constraint: LowerCholeskyTransform())


class _ScaleFreeLowerCholesky(constraints._LowerCholesky):
    """Lower-Cholesky factors, reached through :class:`ScaleFreeLowerCholeskyTransform`."""


class ScaleFreeLowerCholeskyTransform(LowerCholeskyTransform):
    r"""From vectors of ``D (D + 1) / 2`` reals to lower-Cholesky factors whose rows are scaled
    by their diagonal: the strictly lower entries ``u`` (row by row), then the log-diagonal
    ``s``, give :math:`L = \mathrm{diag}(e^{s}) (I + u)`, in the dtype of the input.

    An optimiser's step then changes every entry of ``L`` by the same relative amount, whatever
    the factor's scale: a Gaussian mixture's posterior precision factor on 50,000 points of unit
    scale has a diagonal of about 0.01, which Adam's first steps (0.05 each) broke when they
    moved its off-diagonal entries themselves. NumPyro's ``ScaledUnitLowerCholeskyTransform``
    is the same decomposition with a softplus diagonal, which scales additively for large
    entries. The twin of :class:`zoo.torch_distributions.ScaleFreeLowerCholeskyTransform` (which
    takes the same numbers as a ``D x D`` matrix).

    Attributes
    ----------
    domain : Constraint
        Real vectors of length ``D (D + 1) / 2``.
    codomain : Constraint
        :data:`scale_free_lower_cholesky`.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> from numpyro.distributions.transforms import biject_to
    >>> from zoo.distributions import scale_free_lower_cholesky
    >>> t = biject_to(scale_free_lower_cholesky)
    >>> x = jnp.array([0.5, 0.0, -1.0], dtype=jnp.float32)  # L_10 / L_11, log L_00, log L_11
    >>> factor = t(x)
    >>> factor.dtype, np.asarray(factor, dtype=float).round(4).tolist()
    (dtype('float32'), [[1.0, 0.0], [0.1839, 0.3679]])
    >>> bool(jnp.allclose(t.inv(factor), x))
    True
    """

    codomain = None  # set below: the constraint this transform is registered for

    def __call__(self, x):
        n = round((math.sqrt(1 + 8 * x.shape[-1]) - 1) / 2)
        unit = super().__call__(x.at[..., -n:].set(0))  # I + u: a log-diagonal of zeros
        return unit * jnp.exp(x[..., -n:])[..., None]

    def _inverse(self, y):
        n = y.shape[-1]
        rows, cols = np.tril_indices(n, -1)
        diagonal = jnp.diagonal(y, axis1=-2, axis2=-1)
        unit = (y / diagonal[..., None])[..., rows, cols]
        return jnp.concatenate([unit, jnp.log(diagonal)], axis=-1)

    def log_abs_det_jacobian(self, x, y, intermediates=None):
        # Row i (from 0): exp on the diagonal, then its i entries below scaled by L_ii.
        n = y.shape[-1]
        powers = jnp.arange(1, n + 1, dtype=x.dtype)
        return (powers * x[..., -n:]).sum(-1)


#: ``constraints.lower_cholesky`` reached through :class:`ScaleFreeLowerCholeskyTransform`:
#: give it to ``numpyro.param`` for a factor whose scale depends on the data.
scale_free_lower_cholesky = _ScaleFreeLowerCholesky()
ScaleFreeLowerCholeskyTransform.codomain = scale_free_lower_cholesky
biject_to.register(_ScaleFreeLowerCholesky, lambda constraint: ScaleFreeLowerCholeskyTransform())


class _ScaledReal(constraints.Constraint):
    """Real numbers, reached from ``x`` as ``scale * x`` (:func:`scaled_real`). NumPyro's
    ``real`` is a singleton that takes no arguments, so this checks values as it does."""

    def __init__(self, scale):
        self.scale = scale

    def __call__(self, x):
        return constraints.real(x)

    def feasible_like(self, prototype):
        return constraints.real.feasible_like(prototype)

    def tree_flatten(self):
        return (self.scale,), (("scale",), dict())


def scaled_real(scale):
    """``constraints.real`` in units of ``scale``: an optimiser moves ``x``, and the parameter
    is ``scale * x`` (broadcast), so that Adam's steps, a fixed size in ``x``, are a fixed
    fraction of ``scale``.

    Give it the data's scale for a parameter in the data's units, such as a mixture's means,
    as a NumPy array in the parameter's dtype (a constant of the compiled step, not one of its
    arguments: NumPyro's ``SVI`` keeps the transforms it made when it started). The twin of
    :func:`zoo.torch_distributions.scaled_real`.

    Parameters
    ----------
    scale : numpy.ndarray
        The unit of each entry, broadcast against the parameter (e.g. ``(D,)`` for ``(K, D)``
        means), positive, in the parameter's dtype.

    Returns
    -------
    Constraint
        ``real``, mapped to ``AffineTransform(0, scale)`` by ``biject_to``.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> from numpyro.distributions.transforms import biject_to
    >>> t = biject_to(scaled_real(np.array([0.5, 4.0], dtype=np.float32)))
    >>> y = t(jnp.array([[1.0, 1.0], [2.0, -1.0]], dtype=jnp.float32))
    >>> y.dtype, y.tolist()
    (dtype('float32'), [[0.5, 4.0], [1.0, -4.0]])
    """
    values = np.asarray(scale)
    if not (np.all(np.isfinite(values)) and np.all(values > 0)):
        raise ValueError(
            f"scaled_real's scale must be positive and finite in every entry; got {values.tolist()}."
        )
    return _ScaledReal(scale)


biject_to.register(_ScaledReal, lambda constraint: AffineTransform(0.0, constraint.scale))


class _Simplex(constraints._Simplex):
    """NumPyro's ``simplex`` constraint, mapped to :class:`StickBreakingTransform`."""


class StickBreakingTransform(_StickBreakingTransformBase):
    """NumPyro's stick-breaking transform in the dtype of its input: NumPyro's own shifts its
    input by the log of an integer ``arange``, float64 in JAX's 64-bit mode, so float32
    parameters on the simplex came back float64 (and a float32 fit held them in float64).

    Importing :mod:`zoo.distributions` registers it with ``biject_to`` for :data:`simplex`.

    Attributes
    ----------
    domain : Constraint
        Real vectors of length ``K - 1``.
    codomain : Constraint
        :data:`simplex`.

    Examples
    --------
    >>> import jax.numpy as jnp
    >>> import numpy as np
    >>> from zoo.distributions import StickBreakingTransform
    >>> t = StickBreakingTransform()
    >>> y = t(jnp.zeros(2, dtype=jnp.float32))
    >>> y.dtype, [round(float(v), 4) for v in y]
    (dtype('float32'), [0.3333, 0.3333, 0.3333])
    >>> np.allclose(t.inv(y), 0.0, atol=1e-6)
    True
    """

    codomain = None  # set below

    def __call__(self, x):
        return super().__call__(x).astype(x.dtype)

    def _inverse(self, y):
        return super()._inverse(y).astype(y.dtype)


#: ``constraints.simplex`` for parameters that may be float32 (see :class:`StickBreakingTransform`).
simplex = _Simplex()
StickBreakingTransform.codomain = simplex
biject_to.register(_Simplex, lambda constraint: StickBreakingTransform())
