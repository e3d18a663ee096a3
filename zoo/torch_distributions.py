"""Pyro (torch) twins of the distributions in :mod:`zoo.distributions`, a repaired Wishart, a
Normal whose compiled draw is one operation, and a standard Normal without arithmetic on its 0
and 1.

Here are :class:`StickBreakingCategorical`, :class:`GumbelSoftmax` and
:class:`ExpRelaxedCategorical` (torch's, made a Pyro distribution); the Concrete distribution is
:class:`torch.distributions.RelaxedOneHotCategorical` itself, which
:class:`zoo.distributions.RelaxedOneHotCategorical` reproduces.
"""

from __future__ import annotations

import math

import torch
from pyro.distributions import Categorical, TorchDistribution, constraints
from pyro.distributions import MultivariateNormal as PyroMultivariateNormal
from pyro.distributions import Normal as _PyroNormal
from pyro.distributions import Wishart as _PyroWishart
from pyro.distributions.torch_distribution import TorchDistributionMixin
from torch.distributions import biject_to, transform_to
from torch.distributions import constraints as torch_constraints
from torch.distributions.kl import register_kl
from torch.distributions.relaxed_categorical import (
    ExpRelaxedCategorical as _ExpRelaxedCategorical,
)
from torch.distributions.transforms import AffineTransform, Transform
from torch.distributions.utils import clamp_probs, lazy_property

__all__ = [
    "ExpRelaxedCategorical",
    "GumbelSoftmax",
    "Normal",
    "PositiveDefiniteFromVector",
    "ScaleFreeLowerCholeskyTransform",
    "StandardNormal",
    "StickBreakingCategorical",
    "Wishart",
    "scale_free_lower_cholesky",
    "scaled_real",
    "stick_breaking_log_weights",
]


class Normal(_PyroNormal):
    """Pyro's ``Normal``, whose reparameterised draw is one random operation when traced too.

    torch draws ``loc + eps * scale`` with ``eps`` from ``torch.empty(shape).normal_()``, but
    under ``torch.jit.trace`` (``jit=True``) from ``torch.normal(zeros, ones)``: two more
    tensors to fill, each a kernel launch on a GPU at every compiled step. ``torch.randn`` is one
    operation in a trace and draws the same numbers from the same stream.
    """

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(torch.Size(sample_shape))
        eps = torch.randn(shape, dtype=self.loc.dtype, device=self.loc.device)
        return self.loc + eps * self.scale


#: torch's constant in ``Normal.log_prob``, written as torch writes it (the same rounding).
_LOG_SQRT_TWO_PI = math.log(math.sqrt(2 * math.pi))


class StandardNormal(Normal):
    """``Normal(0, 1)`` from a zero and a one its caller made once where the data live (made at
    every step, they would be two more kernel launches per step on a GPU).

    Its log-density and its KL divergence from a Normal (registered with
    ``torch.distributions.kl_divergence``) leave out torch's arithmetic with the location and
    scale (subtracting 0, dividing by 1, ``log 1``), which is exact: the same numbers bit for
    bit, in six operations fewer (the log-density) and three fewer (the KL), forward, each a
    kernel launch on a GPU.

    Parameters
    ----------
    zero, one : Tensor
        The location and scale, 0 and 1 (with validation on, checked; that check reads them on
        the host).
    validate_args : bool, optional
        As for ``torch.distributions.Normal``.

    Examples
    --------
    >>> import torch
    >>> from zoo.torch_distributions import StandardNormal
    >>> zero, one = torch.zeros(()), torch.ones(())
    >>> prior = StandardNormal(zero, one).expand([3])
    >>> z = torch.tensor([-1.0, 0.0, 2.0])
    >>> torch.equal(prior.log_prob(z), torch.distributions.Normal(zero, one).log_prob(z))
    True
    >>> q = torch.distributions.Normal(torch.tensor([0.5, 0.0, -1.0]), torch.tensor(0.8))
    >>> torch.distributions.kl_divergence(q, prior)
    tensor([0.1681, 0.0431, 0.5431])
    """

    def __init__(self, zero, one, validate_args=None):
        super().__init__(zero, one, validate_args=validate_args)
        if self._validate_args and not (
            bool((self.loc == 0).all()) and bool((self.scale == 1).all())
        ):
            raise ValueError("StandardNormal takes a location of 0 and a scale of 1.")

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(StandardNormal, _instance)
        return super().expand(batch_shape, _instance=new)

    def log_prob(self, value):
        if self._validate_args:
            self._validate_sample(value)
        return _broadcast(-(value**2) / 2 - _LOG_SQRT_TWO_PI, self.batch_shape)


def _broadcast(x: torch.Tensor, batch_shape: torch.Size) -> torch.Tensor:
    """``x`` expanded to its broadcast shape with ``batch_shape``, as torch's formulas give it
    (a view; ``torch.broadcast_shapes`` is called only where the shapes differ, because under
    ``torch.jit.trace`` it makes a tensor)."""
    if x.shape == batch_shape:
        return x
    return x.expand(torch.broadcast_shapes(x.shape, batch_shape))


class Wishart(_PyroWishart):
    """Pyro's ``Wishart`` whose draws are the Bartlett draws, as drawn.

    torch's ``Wishart.rsample`` (up to at least 2.13) means to redraw singular draws, but marks
    a draw singular where the support check passes, that is, where it is positive definite: it
    warns "Singular sample detected" and draws again at nearly every call, which doubles the cost
    and keeps the first draw exactly where it was singular (pytorch/pytorch#122021). With
    ``df > d - 1`` a Bartlett draw is positive definite but for rounding.

    Parameters
    ----------
    df : Tensor or float
        The degrees of freedom, greater than ``D - 1``.
    covariance_matrix, precision_matrix, scale_tril : Tensor, shape (..., D, D), optional
        The scale matrix, its inverse, or its Cholesky factor: exactly one of the three, as for
        ``torch.distributions.Wishart``.
    validate_args : bool, optional
        Check the parameters against their constraints.

    Attributes
    ----------
    df : Tensor
        The degrees of freedom, broadcast to the batch shape.
    scale_tril : Tensor, shape (..., D, D)
        The lower Cholesky factor of the scale matrix.

    Examples
    --------
    >>> import warnings
    >>> import pyro.distributions as dist
    >>> import torch
    >>> from zoo.torch_distributions import Wishart
    >>> def warnings_of(d):
    ...     with warnings.catch_warnings(record=True) as caught:
    ...         warnings.simplefilter("always")
    ...         torch.manual_seed(0)
    ...         draws = d.rsample((5,))
    ...     return draws.shape, [str(w.message) for w in caught]
    >>> warnings_of(Wishart(df=torch.tensor(3.0), covariance_matrix=torch.eye(2)))
    (torch.Size([5, 2, 2]), [])
    >>> warnings_of(dist.Wishart(df=torch.tensor(3.0), covariance_matrix=torch.eye(2)))
    (torch.Size([5, 2, 2]), ['Singular sample detected.'])
    """

    def rsample(self, sample_shape=()) -> torch.Tensor:
        return self._bartlett_sampling(torch.Size(sample_shape))


class PositiveDefiniteFromVector(Transform):
    """A bijection from vectors of ``D (D + 1) / 2`` reals to ``D x D`` positive definite
    matrices: the vector fills a lower-triangular ``L`` row by row, its diagonal through
    ``exp``, and the matrix is ``L L^T``.

    Samplers that move in an unconstrained space (NUTS) need a bijection for every continuous
    site; torch registers none for ``positive_definite`` (its ``PositiveDefiniteTransform`` maps
    from all ``D x D`` matrices and ignores the upper triangle, leaving directions the density
    does not depend on), so importing this module registers this one with ``biject_to``. It is
    the map NumPyro's ``biject_to(positive_definite)`` uses, with its entries in another order
    (NumPyro's vector holds the entries below the diagonal first, then the log-diagonal): the
    same densities and Jacobians, but a vector of one backend is not the other's.

    Attributes
    ----------
    domain : Constraint
        Real vectors of length ``D (D + 1) / 2``.
    codomain : Constraint
        ``constraints.positive_definite``.

    Raises
    ------
    ValueError
        (On a call) a vector whose length is not ``D (D + 1) / 2`` for any ``D``.

    Examples
    --------
    >>> import torch
    >>> from torch.distributions import biject_to, constraints
    >>> from zoo.torch_distributions import PositiveDefiniteFromVector
    >>> t = PositiveDefiniteFromVector()
    >>> x = torch.tensor([0.0, 0.5, 0.0])  # log L_00, L_10, log L_11
    >>> y = t(x)
    >>> y
    tensor([[1.0000, 0.5000],
            [0.5000, 1.2500]])
    >>> torch.allclose(t.inv(y), x)
    True
    >>> type(biject_to(constraints.positive_definite)).__name__
    'PositiveDefiniteFromVector'
    >>> t(torch.zeros(4))
    Traceback (most recent call last):
    ...
    ValueError: a vector of 4 reals fills no lower triangle
    """

    domain = constraints.independent(constraints.real, 1)
    codomain = constraints.positive_definite
    bijective = True

    def __eq__(self, other):
        return isinstance(other, PositiveDefiniteFromVector)

    @staticmethod
    def _dim(size: int) -> int:
        dim = int(round((math.sqrt(8 * size + 1) - 1) / 2))
        if dim * (dim + 1) // 2 != size:
            raise ValueError(f"a vector of {size} reals fills no lower triangle")
        return dim

    def _cholesky(self, x):
        dim = self._dim(x.shape[-1])
        rows, cols = torch.tril_indices(dim, dim, device=x.device)
        tril = x.new_zeros(*x.shape[:-1], dim, dim)
        tril[..., rows, cols] = x
        diagonal = torch.diagonal(tril, dim1=-2, dim2=-1)
        return tril - torch.diag_embed(diagonal) + torch.diag_embed(diagonal.exp())

    def _call(self, x):
        tril = self._cholesky(x)
        return tril @ tril.mT

    def _inverse(self, y):
        tril = torch.linalg.cholesky(y)
        dim = y.shape[-1]
        diagonal = torch.diagonal(tril, dim1=-2, dim2=-1)
        tril = tril - torch.diag_embed(diagonal) + torch.diag_embed(diagonal.log())
        rows, cols = torch.tril_indices(dim, dim, device=y.device)
        return tril[..., rows, cols]

    def log_abs_det_jacobian(self, x, y):
        # exp on the diagonal: sum_i log L_ii; L -> L L^T: D log 2 + sum_i (D - i) log L_ii
        # (i from 0), which together give D log 2 + sum_i (D - i + 1) log L_ii.
        dim = y.shape[-1]
        log_diagonal = torch.diagonal(self._cholesky(x), dim1=-2, dim2=-1).log()
        powers = torch.arange(dim + 1, 1, -1, dtype=x.dtype, device=x.device)
        return dim * math.log(2.0) + (powers * log_diagonal).sum(-1)

    def forward_shape(self, shape):
        return torch.Size((*shape[:-1], self._dim(shape[-1]), self._dim(shape[-1])))

    def inverse_shape(self, shape):
        return torch.Size((*shape[:-2], shape[-1] * (shape[-1] + 1) // 2))


@biject_to.register(constraints.positive_definite)
def _positive_definite_from_vector(constraint):
    return PositiveDefiniteFromVector()


class _ScaleFreeLowerCholesky(torch_constraints._LowerCholesky):
    """Lower-Cholesky factors, reached through :class:`ScaleFreeLowerCholeskyTransform`."""


#: ``constraints.lower_cholesky`` reached through :class:`ScaleFreeLowerCholeskyTransform`:
#: give it to ``pyro.param`` for a factor whose scale depends on the data.
scale_free_lower_cholesky = _ScaleFreeLowerCholesky()


class ScaleFreeLowerCholeskyTransform(Transform):
    r"""From ``D x D`` real matrices to lower-Cholesky factors whose rows are scaled by their
    diagonal: :math:`L = \mathrm{diag}(e^{x_{ii}}) (I + \mathrm{tril}(x, -1))`, so
    :math:`L_{ii} = e^{x_{ii}}` and :math:`L_{ij} = L_{ii} x_{ij}` below it (the upper triangle
    of ``x`` is ignored).

    An optimiser's step in ``x`` then changes every entry of ``L`` by the same relative amount,
    whatever the factor's scale. torch's ``LowerCholeskyTransform`` keeps the off-diagonal
    entries as they are: a step of Adam's learning rate (0.05) moves them by 0.05, which breaks
    a factor whose diagonal is 0.01, as a Gaussian mixture's posterior precision factor is on
    50,000 points of unit scale. Its NumPyro twin is
    :class:`zoo.distributions.ScaleFreeLowerCholeskyTransform`.

    Attributes
    ----------
    domain : Constraint
        Real ``D x D`` matrices.
    codomain : Constraint
        :data:`scale_free_lower_cholesky`.

    Examples
    --------
    >>> import torch
    >>> from torch.distributions import biject_to
    >>> from zoo.torch_distributions import (
    ...     ScaleFreeLowerCholeskyTransform, scale_free_lower_cholesky,
    ... )
    >>> t = ScaleFreeLowerCholeskyTransform()
    >>> x = torch.tensor([[0.0, 0.0], [0.5, -1.0]])  # log L_00; L_10 / L_11, log L_11
    >>> t(x)
    tensor([[1.0000, 0.0000],
            [0.1839, 0.3679]])
    >>> torch.allclose(t.inv(t(x)), x)
    True
    >>> type(biject_to(scale_free_lower_cholesky)).__name__
    'ScaleFreeLowerCholeskyTransform'
    """

    domain = constraints.independent(constraints.real, 2)
    codomain = scale_free_lower_cholesky
    bijective = True

    def __eq__(self, other):
        return isinstance(other, ScaleFreeLowerCholeskyTransform)

    def _call(self, x):
        diagonal = torch.diagonal(x, dim1=-2, dim2=-1).exp()
        return x.tril(-1) * diagonal.unsqueeze(-1) + torch.diag_embed(diagonal)

    def _inverse(self, y):
        diagonal = torch.diagonal(y, dim1=-2, dim2=-1)
        return (y / diagonal.unsqueeze(-1)).tril(-1) + torch.diag_embed(diagonal.log())

    def log_abs_det_jacobian(self, x, y):
        # Row i (from 0): exp on the diagonal, then its i entries below scaled by L_ii.
        log_diagonal = torch.diagonal(x, dim1=-2, dim2=-1)
        powers = torch.arange(1, x.shape[-1] + 1, dtype=x.dtype, device=x.device)
        return (powers * log_diagonal).sum(-1)


@biject_to.register(_ScaleFreeLowerCholesky)
def _scale_free_lower_cholesky(constraint):
    return ScaleFreeLowerCholeskyTransform()


# Pyro's parameter store maps through transform_to, samplers through biject_to.
transform_to.register(_ScaleFreeLowerCholesky, _scale_free_lower_cholesky)


class _ScaledReal(torch_constraints._Real):
    """Real numbers, reached from ``x`` as ``scale * x`` (:func:`scaled_real`)."""

    def __init__(self, scale: torch.Tensor):
        self.scale = scale
        super().__init__()


def scaled_real(scale: torch.Tensor):
    """``constraints.real`` in units of ``scale``: an optimiser moves ``x``, and the parameter
    is ``scale * x`` (broadcast), so that Adam's steps, a fixed size in ``x``, are a fixed
    fraction of ``scale``.

    Give it the data's scale for a parameter in the data's units, such as a mixture's means:
    in plain coordinates a step of Adam's learning rate (0.05) is fifty standard deviations of
    data measured in thousandths, and a thousandth of one for data measured in thousands. The
    twin of :func:`zoo.distributions.scaled_real`. Pyro keeps the constraint a parameter was
    created with, so ``scale`` must not change during a fit.

    Parameters
    ----------
    scale : torch.Tensor
        The unit of each entry, broadcast against the parameter (e.g. ``(D,)`` for ``(K, D)``
        means), positive, in the parameter's dtype and on its device.

    Returns
    -------
    Constraint
        ``real``, mapped to ``AffineTransform(0, scale)`` by ``biject_to`` and ``transform_to``.

    Examples
    --------
    >>> import torch
    >>> from torch.distributions import transform_to
    >>> t = transform_to(scaled_real(torch.tensor([0.5, 4.0])))
    >>> t(torch.tensor([[1.0, 1.0], [2.0, -1.0]]))
    tensor([[ 0.5000,  4.0000],
            [ 1.0000, -4.0000]])
    """
    # Under torch.jit.trace a tensor's truth value cannot be read: a scale made inside a trace
    # is not checked.
    if not torch.jit.is_tracing() and not bool(((scale > 0) & torch.isfinite(scale)).all()):
        raise ValueError(
            f"scaled_real's scale must be positive and finite in every entry; got {scale.tolist()}."
        )
    return _ScaledReal(scale)


@biject_to.register(_ScaledReal)
def _scaled_real(constraint):
    return AffineTransform(0.0, constraint.scale)


transform_to.register(_ScaledReal, _scaled_real)


def stick_breaking_log_weights(sticks: torch.Tensor) -> torch.Tensor:
    r"""Log stick-breaking weights :math:`\log \pi_k = \log v_k + \sum_{j<k} \log(1 - v_j)`.

    Parameters
    ----------
    sticks : Tensor, shape (..., K)
        Stick proportions :math:`v_k \in [0, 1]`.

    Returns
    -------
    Tensor, shape (..., K)
        :math:`\log \pi_k`, not normalised: :math:`\sum_k \pi_k = 1 - \prod_k (1 - v_k)`.

    See Also
    --------
    zoo.distributions.stick_breaking_log_weights : The JAX twin.

    Examples
    --------
    >>> import torch
    >>> from zoo.torch_distributions import stick_breaking_log_weights
    >>> stick_breaking_log_weights(torch.tensor([0.5, 0.5, 0.5])).exp()
    tensor([0.5000, 0.2500, 0.1250])
    """
    log_rest = torch.log1p(-sticks)
    # Exclusive cumulative sum by padding rather than ``cumsum - log_rest``, which would give
    # -inf - (-inf) = nan after a stick equal to one.
    log_prefix = torch.nn.functional.pad(torch.cumsum(log_rest[..., :-1], dim=-1), (1, 0))
    return torch.log(sticks) + log_prefix


class StickBreakingCategorical(Categorical):
    r"""Categorical over the first ``K`` components of a truncated stick-breaking prior.

    The torch twin of :class:`zoo.distributions.StickBreakingCategorical`:
    ``log_prob(k)`` is the unnormalised :math:`\log \pi_k = \log v_k + \sum_{j<k} \log(1-v_j)`
    (the mass :math:`\prod_k (1 - v_k)` belongs to components beyond the truncation), and
    :meth:`sample` draws from :math:`\pi / \sum_k \pi_k`, i.e. conditionally on the component
    lying within the truncation.

    Parameters
    ----------
    sticks : Tensor, shape (..., K)
        Stick proportions in :math:`(0, 1)` (the end points are allowed and give components
        of zero mass). All derived tensors live on ``sticks.device``.
    validate_args : bool, optional
        Check ``sticks`` (and values passed to ``log_prob``) against their constraints.

    Attributes
    ----------
    logits : Tensor, shape (..., K)
        Unnormalised :math:`\log \pi` (unlike torch's ``Categorical``, not normalised).
    probs : Tensor, shape (..., K)
        Unnormalised :math:`\pi`.

    Raises
    ------
    ValueError
        ``sticks`` has no axis of components.

    Examples
    --------
    >>> import torch
    >>> from zoo.torch_distributions import StickBreakingCategorical
    >>> d = StickBreakingCategorical(torch.tensor([0.5, 0.5, 0.5]))
    >>> d.probs  # sums to 7/8, not to one
    tensor([0.5000, 0.2500, 0.1250])
    >>> d.log_prob(torch.tensor(2))  # log(1/8)
    tensor(-2.0794)
    >>> torch.manual_seed(0)  # doctest: +ELLIPSIS
    <torch._C.Generator object at ...>
    >>> d.sample((1000,)).unique()
    tensor([0, 1, 2])

    The same log-probabilities as the NumPyro twin:

    >>> import jax.numpy as jnp
    >>> from zoo import distributions
    >>> twin = distributions.StickBreakingCategorical(jnp.array([0.3, 0.6]))
    >>> d = StickBreakingCategorical(torch.tensor([0.3, 0.6]))
    >>> round(float(twin.log_prob(1)), 5) == round(float(d.log_prob(torch.tensor(1))), 5)
    True
    """

    arg_constraints = {"sticks": constraints.independent(constraints.unit_interval, 1)}

    def __init__(self, sticks: torch.Tensor, validate_args: bool | None = None):
        if sticks.dim() < 1:
            raise ValueError("`sticks` must be at least one-dimensional.")
        self.sticks = sticks
        log_pi = stick_breaking_log_weights(sticks)
        super().__init__(logits=log_pi, validate_args=validate_args)
        # Categorical normalises its logits; keep the defective weights instead. The inherited
        # log_prob (both torch's gather and Pyro's enumeration fast path) reads self.logits, and
        # torch.multinomial in sample() normalises self.probs itself.
        self.logits = self._param = log_pi

    @lazy_property
    def probs(self) -> torch.Tensor:
        """Unnormalised stick-breaking weights :math:`\\pi`, shape ``batch_shape + (K,)``."""
        return self.logits.exp()

    def expand(self, batch_shape, _instance=None):
        new = self._get_checked_instance(StickBreakingCategorical, _instance)
        batch_shape = torch.Size(batch_shape)
        new.sticks = self.sticks.expand(batch_shape + self.sticks.shape[-1:])
        # Categorical.expand carries self.logits (already unnormalised) over to `new`.
        return super().expand(batch_shape, _instance=new)

    def entropy(self):
        raise NotImplementedError("The entropy of a defective distribution is not defined.")


class ExpRelaxedCategorical(_ExpRelaxedCategorical, TorchDistributionMixin):
    """torch's ExpConcrete distribution (Maddison et al., 2017) as a Pyro distribution: the
    twin of :class:`zoo.distributions.ExpRelaxedCategorical` (same draws' law, same density).

    Unlike torch's, it checks the temperature under validation (torch leaves it out of its
    ``arg_constraints``, so a negative one gave NaN densities), as the NumPyro twin does.

    Parameters
    ----------
    temperature : Tensor or float
        ``tau > 0``; a Python number is made a tensor in the dtype and on the device of
        ``probs`` or ``logits``.
    probs, logits : Tensor, shape (..., K)
        As torch's ``ExpRelaxedCategorical``: exactly one of them.
    validate_args : bool, optional
        Check the parameters (the temperature too) and values against their constraints.

    Raises
    ------
    ValueError
        With validation on, a temperature that is not positive.

    Examples
    --------
    >>> import torch
    >>> from zoo.torch_distributions import ExpRelaxedCategorical
    >>> d = ExpRelaxedCategorical(torch.tensor(0.5), logits=torch.zeros(3))
    >>> y = d.rsample()
    >>> bool(torch.isclose(y.exp().sum(), torch.tensor(1.0)))  # a point of the simplex, in logs
    True
    >>> ExpRelaxedCategorical(torch.tensor(-0.5), logits=torch.zeros(3), validate_args=True)
    Traceback (most recent call last):
    ...
    ValueError: Expected parameter temperature ... to satisfy the constraint GreaterThan(...
    """

    arg_constraints = {
        **_ExpRelaxedCategorical.arg_constraints,
        "temperature": constraints.positive,
    }

    def __init__(self, temperature, probs=None, logits=None, validate_args=None):
        param = logits if logits is not None else probs
        if isinstance(param, torch.Tensor) and not isinstance(temperature, torch.Tensor):
            # torch's validation reads a parameter as a tensor (a number raised a TypeError).
            temperature = torch.as_tensor(temperature, dtype=param.dtype, device=param.device)
        super().__init__(temperature, probs, logits, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        # torch's expand refuses subclasses with their own __init__ unless given the instance.
        new = self._get_checked_instance(ExpRelaxedCategorical, _instance)
        return super().expand(batch_shape, _instance=new)


class GumbelSoftmax(TorchDistribution):
    r"""A categorical variable drawn as a one-hot vector by the Gumbel-softmax trick: the torch
    twin of :class:`zoo.distributions.GumbelSoftmax` (see there).

    A draw is ``softmax((log_probs + g) / temperature)`` (``straight_through=True``: the one-hot
    vector of ``argmax(log_probs + g)`` with that draw's gradient); ``log_prob(y)`` is
    ``log_probs[argmax(y)]``, the discrete density; ``KL(q || p)`` between two of them is the
    closed-form KL of their categoricals (registered with :func:`torch.distributions.kl.
    register_kl`), which a mean-field ELBO uses.

    Parameters
    ----------
    temperature : float or Tensor
        Relaxation temperature ``> 0`` of the draw.
    log_probs : Tensor, shape (..., K)
        Log-probabilities of the categories (they may sum to less than one).
    straight_through : bool
        Draw hard one-hot vectors with the relaxed draw's gradient.
    validate_args : bool, optional

    Examples
    --------
    >>> import torch
    >>> from torch.distributions import kl_divergence
    >>> from zoo.torch_distributions import GumbelSoftmax
    >>> q = GumbelSoftmax(torch.tensor(0.5), torch.tensor([0.5, 0.25, 0.25]).log())
    >>> p = GumbelSoftmax(torch.tensor(0.5), torch.full((3,), 1 / 3).log())
    >>> round(float(kl_divergence(q, p)), 4)
    0.0589
    """

    arg_constraints = {"temperature": constraints.positive, "log_probs": constraints.real_vector}
    support = constraints.simplex
    has_rsample = True

    def __init__(self, temperature, log_probs, straight_through=False, validate_args=None):
        if log_probs.dim() < 1:
            raise ValueError("`log_probs` must be at least one-dimensional.")
        temperature = torch.as_tensor(temperature, dtype=log_probs.dtype, device=log_probs.device)
        batch_shape = torch.broadcast_shapes(temperature.shape, log_probs.shape[:-1])
        event_shape = log_probs.shape[-1:]
        self.temperature = temperature.expand(batch_shape)
        self.log_probs = log_probs.expand(batch_shape + event_shape)
        self.straight_through = bool(straight_through)
        super().__init__(batch_shape, event_shape, validate_args=validate_args)

    def expand(self, batch_shape, _instance=None):
        batch_shape = torch.Size(batch_shape)
        return GumbelSoftmax(
            self.temperature.expand(batch_shape),
            self.log_probs.expand(batch_shape + self.event_shape),
            self.straight_through,
            validate_args=False,
        )

    def rsample(self, sample_shape=()):
        shape = self._extended_shape(torch.Size(sample_shape))
        uniforms = clamp_probs(
            torch.rand(shape, dtype=self.log_probs.dtype, device=self.log_probs.device)
        )
        scores = self.log_probs - (-uniforms.log()).log()
        soft = torch.softmax(scores / self.temperature.unsqueeze(-1), dim=-1)
        if not self.straight_through:
            return soft
        index = scores.argmax(-1, keepdim=True)
        hard = torch.zeros_like(soft).scatter_(-1, index, 1.0)
        return hard + soft - soft.detach()

    def log_prob(self, value):
        index = value.detach().argmax(-1)
        shape = torch.broadcast_shapes(index.shape, self.batch_shape)
        log_probs = self.log_probs.expand(shape + self.event_shape)
        return log_probs.gather(-1, index.expand(shape).unsqueeze(-1)).squeeze(-1)


@register_kl(GumbelSoftmax, GumbelSoftmax)
def _kl_gumbel_softmax(q, p):
    q_probs = q.log_probs.exp()
    # The difference is 0 where q has no mass before it meets q_k = 0: (-inf - log p) * 0 would
    # be NaN, in the gradient too, however the product is masked afterwards.
    diff = q.log_probs - p.log_probs
    diff = torch.where(q_probs > 0, diff, torch.zeros_like(diff))
    return (q_probs * diff).sum(-1)


@register_kl(torch.distributions.Normal, StandardNormal)
def _kl_normal_standard_normal(p, q):
    """torch's ``KL(Normal || Normal)`` where the second is standard (see
    :class:`StandardNormal`): the same formula without its division by 1 and subtraction of 0."""
    var_ratio = p.scale.pow(2)
    kl = 0.5 * (var_ratio + p.loc.pow(2) - 1 - var_ratio.log())
    return _broadcast(kl, q.batch_shape)


@register_kl(Wishart, Wishart)
def _kl_wishart_wishart(p, q):
    """No closed form here, as in NumPyro: a mean-field ELBO falls back to the single-draw
    estimate. (torch's generic exponential-family KL would apply otherwise: it differentiates
    the log-normaliser with autograd, so it fails without gradients, and the twins would
    differ.)"""
    raise NotImplementedError("KL(Wishart || Wishart) has no closed form in the zoo.")


@register_kl(PyroMultivariateNormal, PyroMultivariateNormal)
def _kl_multivariate_normal(p, q):
    """``KL(p || q)`` of two multivariate normals, torch's value, written with operations that
    ``torch.jit.trace`` records (torch's own reads batch shapes as Python ints, which a traced
    mean-field ELBO, Pyro's ``JitTraceMeanField_ELBO``, cannot give it)."""
    p_tril, q_tril = p.scale_tril, q.scale_tril
    spread = torch.linalg.solve_triangular(q_tril, p_tril, upper=False)
    shift = torch.linalg.solve_triangular(q_tril, (q.loc - p.loc).unsqueeze(-1), upper=False)
    log_ratio = q_tril.diagonal(dim1=-2, dim2=-1).log().sum(-1) - p_tril.diagonal(
        dim1=-2, dim2=-1
    ).log().sum(-1)
    quadratic = spread.pow(2).sum((-2, -1)) + shift.squeeze(-1).pow(2).sum(-1)
    return 0.5 * (quadratic - p.event_shape[0]) + log_ratio
