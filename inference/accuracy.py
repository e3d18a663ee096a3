"""How far a posterior, given as draws, is from a reference posterior, also given as draws.

Draws are dicts ``name -> array of shape (S, *shape)``; the two dicts may hold different numbers
of draws and are compared on their shared float-valued keys. Every measure is in units of the
reference's posterior sds (``ddof=1``), so it is unit-free and comparable across models:

* ``mean_error_sd``: the largest, over all scalar coordinates, of
  ``|mean_run - mean_ref| / sd_ref``; ``mean_error_sd_median`` is the median. 0.1 means the
  posterior means are within a tenth of a reference sd of the reference's.
* ``sd_ratio_median``, ``sd_ratio_min``, ``sd_ratio_max``: ``sd_run / sd_ref`` per coordinate,
  summarized. Below 1 the run is overconfident (as mean-field VI often is), above 1 it is
  underconfident.
* ``sliced_wasserstein``: the 1-Wasserstein distance between the two joint distributions of all
  coordinates, each standardized by the reference's mean and sd, averaged over random 1-D
  projections. It sees correlations and shapes that the marginal moments miss; it is 0 for
  identical draws and, in one dimension, equals a shift of the whole posterior in reference sds.

A point estimate (EM, MAP; ``point=True``) has no spread, so only the mean errors are defined and
the other entries are NaN. Coordinates that are constant in the reference (a known noise scale
repeated, say) have no sd to measure in and are left out.

Mixture posteriors are invariant to relabelling the components, so with ``components`` the run's
components are first matched to the reference's labelling: Hungarian matching on the components'
posterior means, in the reference's pooled posterior sds.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

#: The entries of ``posterior_accuracy``'s result, in order.
MEASURES = (
    "mean_error_sd",
    "mean_error_sd_median",
    "sd_ratio_median",
    "sd_ratio_min",
    "sd_ratio_max",
    "sliced_wasserstein",
)


def match_components(run: dict, reference: dict, keys: Sequence[str]) -> np.ndarray | None:
    """Find which run component corresponds to each reference component.

    Parameters
    ----------
    run, reference : dict
        Draws ``name -> array (S, *shape)``.
    keys : sequence of str
        The keys whose axis 1 indexes K exchangeable components (the same K in every key).
        Keys missing from either dict are skipped.

    Returns
    -------
    numpy.ndarray or None
        ``perm`` of length K such that run component ``perm[j]`` corresponds to reference
        component ``j``; None when ``keys`` is empty.

    Notes
    -----
    The cost of pairing reference component ``j`` with run component ``i`` is the squared
    distance between their posterior means, summed over ``keys``, with every coordinate of a
    key divided by the reference's sd of that coordinate pooled over draws and components.
    """
    _check_dict(run, "run")
    _check_dict(reference, "reference")
    keys = _as_key_tuple(keys)
    if not keys:
        return None
    run_draws, ref_draws = _shared_draws(run, reference, point=True)
    present = [k for k in keys if k in ref_draws]
    if not present:
        raise ValueError(
            f"none of the component keys {list(keys)} is a float-valued key of both run and "
            f"reference; shared keys: {sorted(ref_draws)}."
        )
    num_components = _num_components(run_draws, ref_draws, present)
    cost = np.zeros((num_components, num_components))
    for key in present:
        cost += _component_cost(run_draws[key], ref_draws[key])
    import scipy.optimize  # here, not at the top: importing it takes a noticeable while

    _, perm = scipy.optimize.linear_sum_assignment(cost)
    return perm.astype(np.intp)


def relabel(draws: dict, perm, keys: Sequence[str]) -> dict:
    """Reorder the components of ``keys`` so that new component ``j`` is old ``perm[j]``.

    Parameters
    ----------
    draws : dict
        Draws ``name -> array (S, *shape)``.
    perm : array of int or None
        A permutation of ``range(K)``, as returned by ``match_components``; None leaves the
        draws as they are.
    keys : sequence of str
        The keys whose axis 1 indexes the components; keys not in ``draws`` are skipped.

    Returns
    -------
    dict
        A new dict with ``draws[k][:, perm]`` for ``k`` in ``keys`` and the others unchanged.
    """
    _check_dict(draws, "draws")
    if perm is None:
        return draws
    perm = np.asarray(perm)
    relabelled = dict(draws)
    for key in _as_key_tuple(keys):
        if key in draws:
            values = np.asarray(draws[key])
            _check_permutation(perm, values, key)
            relabelled[key] = values[:, perm]
    return relabelled


def posterior_accuracy(
    run: dict,
    reference: dict,
    *,
    components: Sequence[str] = (),
    point: bool = False,
    num_projections: int = 128,
    max_draws: int = 2000,
    seed: int = 0,
) -> dict[str, float]:
    """Measure how far the run's posterior is from the reference's, in reference sds.

    Parameters
    ----------
    run, reference : dict
        Draws ``name -> array (S, *shape)``; S may differ between the two. Compared on their
        shared float-valued keys; the others are ignored.
    components : sequence of str
        Keys whose axis 1 indexes exchangeable mixture components; the run is relabelled to
        the reference's labelling (``match_components``) before measuring.
    point : bool
        The run is a point estimate (its draws are copies of one point): only the mean errors
        are computed and the other entries are NaN.
    num_projections : int
        Random directions averaged over by the sliced Wasserstein distance.
    max_draws : int
        Each side is thinned to at most this many evenly spaced draws for the sliced
        Wasserstein distance, which bounds its cost.
    seed : int
        Seed of the random directions.

    Returns
    -------
    dict
        ``MEASURES -> float``: ``mean_error_sd``, ``mean_error_sd_median``,
        ``sd_ratio_median``, ``sd_ratio_min``, ``sd_ratio_max``, ``sliced_wasserstein``
        (see the module docstring). sds use ``ddof=1``.
    """
    _check_dict(run, "run")
    _check_dict(reference, "reference")
    _check_positive_int(num_projections, "num_projections", minimum=1)
    _check_positive_int(max_draws, "max_draws", minimum=2)
    run_draws, ref_draws = _shared_draws(run, reference, point=point)
    if components:
        # The reference in a canonical order first (its components sorted by their posterior
        # means), so the random projections meet the same components whatever its labels.
        canonical = _canonical_order(ref_draws, components)
        ref_draws = relabel(ref_draws, canonical, components)
        perm = match_components(run_draws, ref_draws, components)
        run_draws = relabel(run_draws, perm, components)

    run_flat, ref_flat = _flatten(run_draws), _flatten(ref_draws)
    varies = _sd(ref_flat) > 0
    if not varies.any():
        raise ValueError(
            f"every coordinate of the reference is constant over its draws, so there is no sd "
            f"to measure in; keys: {sorted(ref_draws)}."
        )
    # Both sides subset and reduced alike, so identical draws give exactly identical moments.
    run_flat, ref_flat = run_flat[:, varies], ref_flat[:, varies]
    ref_mean, ref_sd = ref_flat.mean(axis=0), _sd(ref_flat)

    result = dict.fromkeys(MEASURES, float("nan"))
    mean_error = np.abs(run_flat.mean(axis=0) - ref_mean) / ref_sd
    result["mean_error_sd"] = float(mean_error.max())
    result["mean_error_sd_median"] = float(np.median(mean_error))
    if point:
        return result

    sd_ratio = _sd(run_flat) / ref_sd
    result["sd_ratio_median"] = float(np.median(sd_ratio))
    result["sd_ratio_min"] = float(sd_ratio.min())
    result["sd_ratio_max"] = float(sd_ratio.max())
    result["sliced_wasserstein"] = _sliced_wasserstein(
        (run_flat - ref_mean) / ref_sd,
        (ref_flat - ref_mean) / ref_sd,
        num_projections=num_projections,
        max_draws=max_draws,
        seed=seed,
    )
    return result


# --- measures ------------------------------------------------------------------------------


def _sd(flat: np.ndarray) -> np.ndarray:
    """sd over axis 0 (``ddof=1``), exactly 0 where the draws are all equal.

    Rounding makes the sd of repeated values a tiny positive number; the exact zero lets
    callers tell a constant coordinate from a narrow one.
    """
    sd = flat.std(axis=0, ddof=1)
    constant = (flat == flat[:1]).all(axis=0)
    return np.where(constant, 0.0, sd)


def _sliced_wasserstein(
    run_z: np.ndarray, ref_z: np.ndarray, *, num_projections: int, max_draws: int, seed: int
) -> float:
    """Mean over random unit directions of the exact 1-D Wasserstein distance of projections."""
    import scipy.stats  # here, not at the top: it takes most of a second to import

    run_z, ref_z = _thin(run_z, max_draws), _thin(ref_z, max_draws)
    directions = _unit_directions(num_projections, run_z.shape[1], seed)
    run_projected, ref_projected = run_z @ directions.T, ref_z @ directions.T
    distances = [
        scipy.stats.wasserstein_distance(run_projected[:, i], ref_projected[:, i])
        for i in range(num_projections)
    ]
    return float(np.mean(distances))


def _thin(flat: np.ndarray, max_draws: int) -> np.ndarray:
    """At most ``max_draws`` evenly spaced draws; deterministic, so results are repeatable."""
    num_draws = flat.shape[0]
    if num_draws <= max_draws:
        return flat
    # Steps of at least 1, so the rounded indices are distinct.
    return flat[np.linspace(0, num_draws - 1, max_draws).round().astype(np.intp)]


def _unit_directions(num_projections: int, dim: int, seed: int) -> np.ndarray:
    """Directions uniform on the unit sphere: normalized standard normal vectors."""
    directions = np.random.default_rng(seed).standard_normal((num_projections, dim))
    return directions / np.linalg.norm(directions, axis=1, keepdims=True)


def _canonical_order(draws: dict, keys) -> np.ndarray | None:
    """The components' order sorted by their posterior means (the first shared key's first
    coordinate, ties broken by the next)."""
    present = [k for k in _as_key_tuple(keys) if k in draws]
    if not present:
        return None
    means = np.concatenate(
        [draws[k].mean(axis=0).reshape(draws[k].shape[1], -1) for k in present], axis=1
    )
    return np.lexsort(means.T[::-1])


def _component_cost(run_values: np.ndarray, ref_values: np.ndarray) -> np.ndarray:
    """Squared distances ``[j, i]`` between reference and run component means, in sds."""
    num_draws, num_components = ref_values.shape[:2]
    pooled_sd = _sd(ref_values.reshape(num_draws * num_components, -1))
    scale = np.where(pooled_sd > 0, pooled_sd, 1.0)
    ref_means = ref_values.mean(axis=0).reshape(num_components, -1) / scale
    run_means = run_values.mean(axis=0).reshape(num_components, -1) / scale
    return ((ref_means[:, None, :] - run_means[None, :, :]) ** 2).sum(axis=-1)


def _flatten(draws: dict) -> np.ndarray:
    """One row per draw: every coordinate of every key, keys in sorted order."""
    return np.concatenate(
        [draws[key].reshape(draws[key].shape[0], -1) for key in sorted(draws)], axis=1
    )


# --- validation ----------------------------------------------------------------------------


def _shared_draws(run: dict, reference: dict, *, point: bool) -> tuple[dict, dict]:
    """The float-valued keys of both dicts as float64 arrays, checked for shape and values."""
    run_floats, ref_floats = _float_arrays(run), _float_arrays(reference)
    shared = sorted(run_floats.keys() & ref_floats.keys())
    if not shared:
        raise ValueError(
            f"run and reference share no float-valued keys: run has {sorted(run, key=str)}, "
            f"reference has {sorted(reference, key=str)}."
        )
    run_draws = {key: run_floats[key] for key in shared}
    ref_draws = {key: ref_floats[key] for key in shared}
    for key in shared:
        _check_values(run_draws[key], reference=ref_draws[key], key=key)
    _check_draw_counts(run_draws, "run", minimum=1 if point else 2)
    _check_draw_counts(ref_draws, "reference", minimum=2)
    return run_draws, ref_draws


def _float_arrays(draws: dict) -> dict:
    arrays = {key: np.asarray(value) for key, value in draws.items()}
    return {
        key: array.astype(np.float64)
        for key, array in arrays.items()
        if np.issubdtype(array.dtype, np.floating)
    }


def _check_values(run_values: np.ndarray, *, reference: np.ndarray, key) -> None:
    for name, values in (("run", run_values), ("reference", reference)):
        if values.ndim == 0:
            raise ValueError(f"{name}[{key!r}] is a scalar; draws need a leading draw axis.")
        if not np.isfinite(values).all():
            raise ValueError(f"{name}[{key!r}] contains NaN or infinite draws.")
    if run_values.shape[1:] != reference.shape[1:]:
        raise ValueError(
            f"run[{key!r}] has draws of shape {run_values.shape[1:]} but reference[{key!r}] "
            f"has {reference.shape[1:]}."
        )


def _check_draw_counts(draws: dict, name: str, *, minimum: int) -> None:
    counts = {key: values.shape[0] for key, values in draws.items()}
    if len(set(counts.values())) > 1:
        raise ValueError(f"the keys of {name} hold different numbers of draws: {counts}.")
    num_draws = next(iter(counts.values()))
    if num_draws >= minimum:
        return
    if name == "reference":
        raise ValueError(
            f"the reference needs at least 2 draws to have an sd; it has {num_draws} "
            f"(keys {sorted(draws)})."
        )
    if minimum == 2:
        raise ValueError(
            f"the run needs at least 2 draws to have an sd (or point=True); it has {num_draws} "
            f"(keys {sorted(draws)})."
        )
    raise ValueError(f"the run has no draws (keys {sorted(draws)}).")


def _num_components(run_draws: dict, ref_draws: dict, keys: list) -> int:
    sizes = {}
    for key in keys:
        for name, values in (("run", run_draws[key]), ("reference", ref_draws[key])):
            if values.ndim < 2:
                raise ValueError(
                    f"{name}[{key!r}] has shape {values.shape}; a component key needs axis 1 "
                    f"to index the components."
                )
        sizes[key] = ref_draws[key].shape[1]
    if len(set(sizes.values())) > 1:
        raise ValueError(f"component keys disagree on the number of components: {sizes}.")
    return next(iter(sizes.values()))


def _check_permutation(perm: np.ndarray, values: np.ndarray, key) -> None:
    num_components = values.shape[1] if values.ndim >= 2 else None
    if (
        perm.ndim != 1
        or not np.issubdtype(perm.dtype, np.integer)
        or not np.array_equal(np.sort(perm), np.arange(num_components or 0))
    ):
        raise ValueError(
            f"perm must be a permutation of range({num_components}) to relabel {key!r} of shape "
            f"{values.shape}; got {perm.tolist()}."
        )


def _check_dict(value, name: str) -> None:
    if not isinstance(value, dict):
        raise TypeError(f"{name} must be a dict of name -> draws; got {type(value).__name__}.")


def _check_positive_int(value, name: str, *, minimum: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int | np.integer):
        raise TypeError(f"{name} must be an int; got {type(value).__name__}.")
    if value < minimum:
        raise ValueError(f"{name} must be an int of at least {minimum}; got {value!r}.")


def _as_key_tuple(keys) -> tuple:
    # A lone key name would otherwise be iterated letter by letter.
    return (keys,) if isinstance(keys, str) else tuple(keys)
