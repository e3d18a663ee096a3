"""Per-datum ELBO and importance-weighted log-likelihood of any model-guide pair.

For a model whose latent sites all sit in its ``data`` plate (local latents, e.g. a VAE), the
fitted guide is the proposal: with ``z_{n,s} ~ q(z | x_n)`` and
``w_{n,s} = log p(x_n, z_{n,s}) - log q(z_{n,s} | x_n)``,

* the ELBO of ``x_n`` is estimated by ``mean_s w_{n,s}``,
* ``log p(x_n)`` by ``logsumexp_s w_{n,s} - log S`` (Burda et al. 2016), a lower bound in
  expectation that tightens as ``S`` grows.

A guide that SVI fits with its discrete latents summed out (``GuideKind.enumerated``) is scored
the same way: ``log p(x_n, z_{n,s})`` then sums the model's discrete latents that the guide does
not draw, as ``TraceEnum_ELBO`` does, so ``w`` is that ELBO's term (for a model whose every
latent is summed out, and whose guide draws nothing, ``log p(x_n)`` itself).

Data and particles are processed in chunks and the log-sum-exp is accumulated as it goes, so
memory stays bounded for any ``S`` and ``N``.
"""

from __future__ import annotations

import dataclasses
from typing import Any, NamedTuple

import numpy as np

import zoo
from inference.backends import get_backend
from inference.persistence.checkpoint_header import config_arrays, fingerprint

#: Rows x particles evaluated at once; bounds memory at about this many network evaluations.
CHUNK_ELEMENTS = 50_000


def check_seed(seed) -> int:
    """A seed is an int in [0, 2**63), as numpy's and JAX's generators take it: None (fresh
    entropy) would make a result that cannot be reproduced."""
    if isinstance(seed, bool) or not isinstance(seed, int | np.integer):
        raise TypeError(f"seed must be an int; got {type(seed).__name__}.")
    if not 0 <= seed < 2**63:
        raise ValueError(f"seed must be an int in the range [0, 2**63); got {seed}.")
    return int(seed)


def check_num_samples(num_samples) -> int:
    if isinstance(num_samples, bool) or not isinstance(num_samples, int | np.integer):
        raise TypeError(f"num_samples must be an int; got {type(num_samples).__name__}.")
    if num_samples < 1:
        raise ValueError(f"num_samples must be an int in the range [1, inf); got {num_samples}.")
    return int(num_samples)


#: Weight functions by (model, guide, backend, device, dtype, config): NumPyro compiles once.
_WEIGHT_FUNCTIONS: dict = {}


def _forget_model(spec) -> None:
    """Forget the weight functions of a model registered or unregistered now: its code may
    have been edited and reloaded, and its name alone would score with the old code."""
    for key in [k for k in _WEIGHT_FUNCTIONS if k[0] == spec.name]:
        del _WEIGHT_FUNCTIONS[key]


zoo.on_registry_change(_forget_model)


def config_key(config) -> str:
    """The config's values as a key of ``_WEIGHT_FUNCTIONS``: the fingerprint a checkpoint
    takes of it (arrays by their bytes), with the fields computed from the data too, which
    scoring reads (a mixture's units). Not its repr: numpy's elides the middle of an array of
    more than 1000 numbers and rounds each to 8 digits, so configs that differ there would
    share a key, and one fit would be scored with another's config."""
    arrays = config_arrays(config)  # every field but those computed from the data
    for field in dataclasses.fields(config):
        if field.name not in arrays:  # as config_arrays takes a value that is not an array
            arrays[field.name] = np.asarray(getattr(config, field.name), dtype=object).astype(str)
    return fingerprint(arrays)


def _weight_function(spec, guide, back, config, device, dtype, config_key):
    key = (spec.name, guide, back.NAME, str(device), dtype, config_key)
    if key not in _WEIGHT_FUNCTIONS:
        twin = spec.twin(back.NAME)

        def model_and_guide(params):
            return spec.build_model(back.NAME, config, params), twin.make_guide(
                guide, config, params
            )

        if len(_WEIGHT_FUNCTIONS) > 16:
            _WEIGHT_FUNCTIONS.clear()
        _WEIGHT_FUNCTIONS[key] = back.log_importance_weights_fn(
            model_and_guide, config, device, dtype, spec.guide_kind(guide, back.NAME).enumerated
        )
    return _WEIGHT_FUNCTIONS[key]


class Fitted(NamedTuple):
    """What scoring data under a fitted guide needs: a state's parameters with its model, and no
    more (no result, no history). ``dtype``: the precision the fit ran in."""

    spec: Any
    backend: str
    config: Any
    dtype: str
    guide: str | None
    raw_params: dict


def fitted(result) -> Fitted:
    """What scoring needs, of a :class:`~inference.FitResult`."""
    dtype = result.options.get("dtype", result.spec.dtype or "float64")
    return Fitted(
        result.spec, result.backend, result.config, dtype, result.guide, result.raw_params
    )


def check_guide(fit: Fitted, algorithm: str, method: str) -> None:
    """A fit without a guide cannot score data under one."""
    if fit.guide is None:
        raise ValueError(
            f"{method}() scores new data under the fitted guide, and a fit by "
            f"{algorithm!r} has none; use log_marginal_likelihood()."
        )


def importance_statistics(fit: Fitted, data: dict, num_samples: int, seed: int = 0, device="cpu"):
    """``(elbo, log_marginal)``: two (N,) arrays in nats for the rows of ``data``.

    ``fit`` is what a fit of a local-latent model gives (:class:`Fitted`); its guide is the
    proposal. Deterministic given ``seed``.
    """
    num_samples = check_num_samples(num_samples)
    seed = check_seed(seed)
    spec = fit.spec
    back = get_backend(fit.backend)
    data = spec.validate_data(data)
    if spec.check_data is not None:
        spec.check_data(data, fit.config)
    device = back.resolve_device(device)
    dtype = fit.dtype
    config = back.backend_config(fit.config, device, dtype)
    weights = _weight_function(spec, fit.guide, back, config, device, dtype, config_key(fit.config))
    params = back.as_params(fit.raw_params, device, dtype)

    num_data = len(next(iter(data.values())))
    rows_per_chunk = max(1, min(num_data, CHUNK_ELEMENTS // min(num_samples, CHUNK_ELEMENTS)))
    particles_per_chunk = max(1, min(num_samples, CHUNK_ELEMENTS // rows_per_chunk))
    elbo = np.empty(num_data)
    log_marginal = np.empty(num_data)
    for start in range(0, num_data, rows_per_chunk):
        rows = np.arange(start, start + rows_per_chunk)
        # Every chunk has the same shape (the last one padded by repeating a row), so a compiled
        # backend compiles once.
        chunk = {
            k: back.asarray(v[np.minimum(rows, num_data - 1)], device, dtype)
            for k, v in data.items()
        }
        rows = rows[rows < num_data]
        total, log_sum = 0.0, LogSumExp()
        for i, p_start in enumerate(range(0, num_samples, particles_per_chunk)):
            count = min(particles_per_chunk, num_samples - p_start)
            w = weights(chunk, params, chunk_seed(seed, start, i), particles_per_chunk)
            w = w[:count, : len(rows)].astype(np.float64)
            total = total + w.sum(0)
            log_sum.add(w)
        elbo[rows] = total / num_samples
        log_marginal[rows] = log_sum.value() - np.log(num_samples)
    return elbo, log_marginal


class LogSumExp:
    """``log sum_s exp(w_s)`` over the first axis of weights added a chunk at a time, so that
    only one chunk is ever in memory: a running maximum keeps the sum of exponentials in range.

    Where the maximum so far is not finite (every weight -inf) the sum is taken relative to 0,
    as scipy's ``logsumexp`` does, so the result is -inf rather than NaN.
    """

    def __init__(self):
        self.max = self.sum = None

    def add(self, w: np.ndarray) -> None:
        chunk_max = w.max(0)
        if self.max is None:
            self.max, self.sum = chunk_max, _sum_of_exp(w, _finite(chunk_max))
            return
        new_max = np.maximum(self.max, chunk_max)
        shift = _finite(new_max)
        # Where every weight so far is -inf the sum so far is 0 and stays 0: its rescaling,
        # exp(0 - shift), would overflow for a shift below about -709, and 0 * inf is NaN.
        rescale = np.where(self.max == -np.inf, -np.inf, _finite(self.max) - shift)
        self.sum = self.sum * np.exp(rescale) + _sum_of_exp(w, shift)
        self.max = new_max

    def value(self) -> np.ndarray:
        with np.errstate(divide="ignore"):  # log(0) = -inf: no weight above -inf
            return _finite(self.max) + np.log(self.sum)


def _sum_of_exp(w: np.ndarray, shift: np.ndarray) -> np.ndarray:
    """``exp(w - shift).sum(0)`` with one temporary the size of ``w``, not two: the memory a
    chunk of weights is planned for holds it and one copy."""
    shifted = np.subtract(w, shift, dtype=np.result_type(w, shift, np.float64))
    return np.exp(shifted, out=shifted).sum(0)


def _finite(maximum: np.ndarray) -> np.ndarray:
    """The shift of a log-sum-exp: the maximum, or 0 where it is not finite."""
    return np.where(np.isfinite(maximum), maximum, 0.0)


def chunk_seed(seed: int, row_start: int, particle_chunk: int) -> int:
    """A distinct, reproducible stream per (rows, particles) chunk."""
    return int(np.random.SeedSequence([seed, row_start, particle_chunk]).generate_state(1)[0])
