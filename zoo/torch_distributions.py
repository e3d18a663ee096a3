"""Pyro (torch) twins of the distributions in :mod:`zoo.distributions`, and a repaired Wishart.

Of the twins only :class:`StickBreakingCategorical` is here: on the torch side the Concrete
distribution is :class:`torch.distributions.RelaxedOneHotCategorical` itself, which
:class:`zoo.distributions.RelaxedOneHotCategorical` reproduces.
"""

from __future__ import annotations

import math

import torch
from pyro.distributions import Categorical, constraints
from pyro.distributions import Wishart as _PyroWishart
from torch.distributions import biject_to
from torch.distributions.transforms import Transform
from torch.distributions.utils import lazy_property

__all__ = [
    "PositiveDefiniteFromVector",
    "StickBreakingCategorical",
    "Wishart",
    "stick_breaking_log_weights",
]


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
    the map NumPyro's ``biject_to(positive_definite)`` uses, so both backends sample the same
    coordinates.

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
