"""Per-datum log-densities from the sites of a Pyro or NumPyro trace (both have the same form)."""

from __future__ import annotations

import warnings

from zoo.plates import is_subsample_site


def draws(sites):
    """The sample sites that are draws or observations (not the particles' plate or a plate's
    minibatch bookkeeping)."""
    return [
        site
        for site in sites
        if site["type"] == "sample" and site["name"] != "particles" and not is_subsample_site(site)
    ]


def global_latents(sites) -> list[str]:
    """The latent sites outside the ``data`` plate: with any, importance weights do not factor
    by row (the rows share those draws)."""
    return [
        site["name"]
        for site in draws(sites)
        if not site["is_observed"] and "data" not in {f.name for f in site["cond_indep_stack"]}
    ]


def check_reparameterised(guide_sites) -> None:
    """``NotImplementedError`` for a guide draw without ``rsample``: the importance-weighted
    bound is differentiated through the draws."""
    for site in draws(guide_sites):
        if not site["fn"].has_rsample:
            raise NotImplementedError(
                f"elbo='iwae' needs a reparameterised guide; its site {site['name']!r} "
                f"({type(site['fn']).__name__}) has no rsample."
            )


def data_plate_scale(sites) -> float:
    """The scale of the ``data`` plate's log-densities: ``num_data / rows`` on a minibatch, 1 on
    the whole data. Read from an observed site, as a latent site may carry a weight of its own
    besides (a KL weight, or a warm-up's step-dependent value of it)."""
    in_plate = [s for s in draws(sites) if "data" in {f.name for f in s["cond_indep_stack"]}]
    for site in [s for s in in_plate if s["is_observed"]] or in_plate:
        scale = site.get("scale")
        return 1.0 if scale is None else float(scale)
    return 1.0


#: What a fit is told when ``elbo="iwae"`` meets minibatches of a model with global latents.
GLOBAL_LATENTS_ON_MINIBATCHES = (
    "elbo='iwae' on minibatches of a model with latents outside the data plate ({names}) does not "
    "train the importance-weighted bound: the rows share those draws, so the bound does not "
    "split into rows, and the whole data's bound (RenyiELBO's) scales each particle's "
    "log-weight by num_data / rows inside its log-mean-exp. Fit on the whole data (no "
    "batch_size), or use elbo='trace'."
)


def splits_by_row(sites) -> bool:
    """Whether the importance-weighted bound of a trace's model splits into one bound per row
    (every latent lies in the ``data`` plate). Where it does not and the plate is scaled (a
    minibatch), warns that ``elbo="iwae"`` does not train the bound."""
    names = global_latents(sites)
    if names and data_plate_scale(sites) != 1.0:
        message = GLOBAL_LATENTS_ON_MINIBATCHES.format(names=", ".join(names))
        warnings.warn(message, UserWarning, stacklevel=3)
    return not names


def outside_data_plate(site) -> ValueError:
    """The error for a sample site outside the ``data`` plate, which per-datum importance
    weights cannot take."""
    if site["is_observed"]:
        return ValueError(f"Observed site {site['name']!r} is outside the 'data' plate.")
    return ValueError(
        f"Latent site {site['name']!r} is outside the 'data' plate: per-datum importance "
        "weights need every latent to be local to a data point. Use the model's "
        "posterior draws (spec.sample_posterior) for global latents."
    )


def first_outside_data_plate(sites) -> ValueError | None:
    """The error for the first sample site outside the ``data`` plate; None when every site
    lies in it."""
    for site in draws(sites):
        if "data" not in {f.name for f in site["cond_indep_stack"]}:
            return outside_data_plate(site)
    return None


def data_plate_log_prob(sites, plate_scale=None):
    """Sum of the sample sites' log-densities, per row of the ``data`` plate: unscaled, or with
    ``plate_scale`` (:func:`data_plate_scale`) each weighted by its own scale over the plate's,
    which leaves a KL weight on the latent sites (1 where there is none).

    Works on Pyro and NumPyro trace sites alike. A latent site outside the ``data`` plate would
    couple the rows, so it is an error.
    """
    total = 0.0
    for site in draws(sites):
        frames = {f.name: f for f in site["cond_indep_stack"]}
        if "data" not in frames:
            raise outside_data_plate(site)
        log_prob = site["fn"].log_prob(site["value"])
        scale = site.get("scale")
        plain = scale is None or (isinstance(scale, int | float) and scale == plate_scale)
        if plate_scale is not None and not plain:
            log_prob = log_prob * (scale / plate_scale)
        dim = frames["data"].dim
        if dim < -1:  # plates right of the data plate: sum them into the row
            log_prob = log_prob.sum(tuple(range(dim + 1, 0)))
        total = total + log_prob
    return total
