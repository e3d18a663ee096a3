"""Bayesian attention modules (Fan, Zhang, Chen & Zhou, "Bayesian Attention Modules", NeurIPS 2020).

The unnormalised attention weights :math:`S_{ij} > 0` of query ``i`` over key ``j`` are latent.
Their reparameterised approximate posterior has mean :math:`p_{ij}`, the deterministic softmax
weights, and the attention weights are :math:`S_{ij} / \\sum_{j'} S_{ij'}`:

* ``"weibull"``: :math:`S \\sim \\mathrm{Weibull}(k, \\lambda)` with
  :math:`\\lambda = p / \\Gamma(1 + 1/k)`, prior :math:`\\mathrm{Gamma}(\\alpha, \\beta)`;
* ``"lognormal"``: :math:`\\log S \\sim \\mathcal N(\\log p - \\sigma^2/2, \\sigma^2)`, prior
  log-normal with mean ``m`` and log-scale :math:`\\sigma_0`;
* ``"softmax"``: the deterministic weights :math:`p` (no latent, KL zero).

The prior is ``"fixed"`` (scalars or arrays) or ``"contextual"``: :math:`\\alpha` (Weibull) or the
prior mean ``m`` (log-normal) is a softmax over keys of a two-layer network of the keys alone.

Modules, one per backend with the same function names (import the one you use; this package
itself imports neither torch nor JAX):

* :mod:`zoo.bayesian_attention.torch_bam` -- torch. Importing it imports
  :mod:`zoo.bayesian_attention.torch_distributions`, which registers
  ``KL(Weibull || Gamma)`` with :func:`torch.distributions.kl.register_kl` (torch has none).
* :mod:`zoo.bayesian_attention.jax_bam` -- JAX (the contextual prior is an ``equinox.Module``).
  It imports :mod:`zoo.bayesian_attention.numpyro_distributions`, which registers
  ``KL(LogNormal || LogNormal)`` with NumPyro's ``kl_divergence`` (NumPyro has none).

Both distribution modules also provide ``LogScaleWeibull``, a reparameterised Weibull
parameterised by its log-scale, for guides of Pyro / NumPyro models.

The model zoo's ``"bam_classifier"`` (:mod:`zoo.bayesian_attention.classifier`, twins
:mod:`~zoo.bayesian_attention.pyro_classifier` and :mod:`~zoo.bayesian_attention.numpyro_classifier`)
is a patch-transformer classifier whose attention weights are these latents, as a model-guide
pair fitted by ``inference.fit``; ``classifier.predict_proba`` predicts with it and
:mod:`zoo.bayesian_attention.metrics` scores the predictions (accuracy, NLL, ECE, entropy,
AUROC).
"""

from zoo.bayesian_attention._common import ATTENTION_TYPES, MODES, PRIOR_TYPES, BamOutput

__all__ = ["ATTENTION_TYPES", "MODES", "PRIOR_TYPES", "BamOutput"]
