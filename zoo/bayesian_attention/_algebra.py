r"""The array algebra of one Bayesian attention site, written once against an array namespace
``xp`` (``zoo.array_namespace``: ``TorchOps`` or ``JaxOps``).

:mod:`~zoo.bayesian_attention._site` checks the arguments and calls these; the model, parameters
and shapes are documented in :mod:`~zoo.bayesian_attention.torch_bam` and
:mod:`~zoo.bayesian_attention.jax_bam`. What differs per backend comes in with the site's
``backend`` (``_site.Backend``): the noise is drawn by its ``draw_noise`` (torch's generator, a
JAX key), and its ``dists`` is the backend's distributions module
(:mod:`~zoo.bayesian_attention.torch_distributions` or
:mod:`~zoo.bayesian_attention.numpyro_distributions`), whose closed-form KLs and noise clamp are
written per backend for speed (torch evaluates the special functions once per distinct value of
a broadcast parameter).
"""

from __future__ import annotations

import math

from zoo.bayesian_attention._common import check_noise_shape


def attention_logits(q, k, xp):
    r""":math:`q k^\top / \sqrt{D}`, shape (..., Lq, Lk)."""
    return q @ xp.swapaxes(k, -1, -2) / math.sqrt(q.shape[-1])


def masked_log_softmax(logits, mask, xp):
    """Log-softmax over the visible keys (the last axis); ``-inf`` on hidden keys."""
    if mask is not None:
        logits = xp.where(mask, logits, -math.inf)
    return xp.log_softmax(logits, axis=-1)


def weibull_log_scale(log_p, k, xp):
    r""":math:`\log p - \log\Gamma(1 + 1/k)`; ``k`` an array of ``log_p``'s dtype."""
    return log_p - xp.gammaln(1 + 1 / k)


def weibull_log_weights(log_p, k, u, xp):
    r""":math:`\log\lambda + \frac1k \log(-\log(1 - u))`; ``u`` already clamped into (0, 1)."""
    return weibull_log_scale(log_p, k, xp) + xp.log(-xp.log1p(-u)) / k


def lognormal_log_weights(log_p, sigma, eps):
    r""":math:`\log p - \sigma^2/2 + \sigma\varepsilon`; ``sigma`` an array or float."""
    return log_p - sigma**2 / 2 + sigma * eps


def prior_log_param(attention, prior_alpha, prior_mean, mask, like, xp):
    """log alpha (Weibull), log m (log-normal with a prior mean) or None (uniform prior mean).

    The log is taken of the visible keys only (0 on hidden ones), so that the gradients stay
    finite where a contextual prior puts zero weight.
    """

    def safe_log(x):
        x = xp.asarray(x, like=like)
        return xp.log(x if mask is None else xp.where(mask, x, 1.0))

    if attention == "weibull":
        return safe_log(prior_alpha)
    if prior_mean is not None:
        return safe_log(prior_mean)
    return None


def weights_and_kl(logits, mask, k, prior_log_param, options, backend):
    """Weights (..., Lq, Lk) and KL (..., Lq) of one checked site.

    ``k`` is the Weibull shape as an array of the logits' dtype; ``prior_log_param`` is log
    alpha (Weibull) or log m (log-normal), or None for the uniform log-normal prior mean;
    ``options`` (``_site.Options``) holds the rest, ``options.num_samples`` checked; the noise is
    ``backend.draw_noise``'s when ``options.noise`` is None.
    """
    attention, mode, num_samples = options.attention, options.mode, options.num_samples
    xp, dists = backend.xp, backend.dists
    shape = logits.shape
    log_p = masked_log_softmax(logits, mask, xp)
    if attention == "softmax":
        return xp.exp(log_p), xp.zeros(shape[:-1], like=logits)
    if mask is not None:
        # Hidden keys get a finite stand-in; they are dropped again below (no inf * 0 in grads).
        log_p = xp.where(mask, log_p, 0.0)
    sigma = xp.asarray(options.sigma, like=logits)

    if attention == "weibull":
        log_scale = weibull_log_scale(log_p, k, xp)
        alpha = xp.clip_min(xp.exp(prior_log_param), xp.finfo(logits.dtype).tiny)
        if mask is not None:
            alpha = xp.where(mask, alpha, 1.0)
        kl = dists.kl_weibull_gamma(
            k, log_scale, alpha, xp.asarray(options.prior_beta, like=logits)
        )
    else:
        if prior_log_param is None:  # uniform over the visible keys
            visible = shape[-1] if mask is None else xp.sum(mask, axis=-1, keepdims=True)
            prior_log_param = -xp.log(xp.asarray(visible, like=logits))
        prior_sigma = xp.asarray(options.prior_sigma, like=logits)
        prior_loc = prior_log_param - prior_sigma**2 / 2
        if mask is not None:
            prior_loc = xp.where(mask, prior_loc, 0.0)
        kl = dists.kl_lognormal_lognormal(log_p - sigma**2 / 2, sigma, prior_loc, prior_sigma)
    if mask is not None:
        kl = xp.where(mask, kl, 0.0)
    kl = xp.broadcast_to(xp.sum(kl, axis=-1), shape[:-1])

    if mode == "eval" and num_samples == 0:
        weights = xp.exp(log_p)
        return (weights if mask is None else xp.where(mask, weights, 0.0)), kl
    draws = () if mode == "train" else (num_samples,)
    noise_shape = draws + tuple(shape)
    if options.noise is None:
        noise = backend.draw_noise(noise_shape, logits, options)
    else:
        noise = xp.asarray(options.noise, like=logits)
        check_noise_shape(noise.shape, noise_shape)
    if attention == "weibull":
        log_s = weibull_log_weights(log_p, k, dists.clamp_uniform(noise), xp)
    else:
        log_s = lognormal_log_weights(log_p, sigma, noise)
    if mask is not None:
        log_s = xp.where(mask, log_s, -math.inf)
    weights = xp.softmax(log_s, axis=-1)
    if draws:
        weights = xp.mean(weights, axis=0)
    return weights, kl
