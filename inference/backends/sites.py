"""Per-datum log-densities from the sites of a Pyro or NumPyro trace (both have the same form)."""

from __future__ import annotations

from zoo.plates import is_subsample_site


def data_plate_log_prob(sites):
    """Sum of the sample sites' log-densities, per row of the ``data`` plate (unscaled).

    Works on Pyro and NumPyro trace sites alike. A latent site outside the ``data`` plate would
    couple the rows, so it is an error.
    """
    total = 0.0
    for site in sites:
        if site["type"] != "sample" or site["name"] == "particles" or is_subsample_site(site):
            continue
        frames = {f.name: f for f in site["cond_indep_stack"]}
        if "data" not in frames:
            if site["is_observed"]:
                raise ValueError(f"Observed site {site['name']!r} is outside the 'data' plate.")
            raise ValueError(
                f"Latent site {site['name']!r} is outside the 'data' plate: per-datum importance "
                "weights need every latent to be local to a data point. Use the model's "
                "posterior draws (spec.sample_posterior) for global latents."
            )
        log_prob = site["fn"].log_prob(site["value"])
        dim = frames["data"].dim
        if dim < -1:  # plates right of the data plate: sum them into the row
            log_prob = log_prob.sum(tuple(range(dim + 1, 0)))
        total = total + log_prob
    return total
