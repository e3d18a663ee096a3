"""Guide kinds are declared once, in the spec (``ModelSpec.guide_kinds``), and the keywords and
twin constants of the previous revision still work for one release, with a
``DeprecationWarning`` that says what to write instead."""

from __future__ import annotations

import dataclasses
import sys
import textwrap
import warnings

import numpy as np
import pytest

import inference
import zoo
from zoo.testing import check_registration, check_spec

GMM = zoo.get_model("gmm")

# --- the spec's declaration ---------------------------------------------------------------------


def test_every_built_in_model_declares_its_guides_kinds_in_its_spec():
    exact = zoo.GuideKind(enumerated=True, deterministic=True)
    gumbel = zoo.GuideKind(relaxed=True, closed_form_kl=True)
    expected = {
        "gmm": {"enum": exact},
        "bernoulli_mixture": {"enum": exact},
        "exchangeable_tokens": {"attention": exact},
        "bayesian_gmm": {
            "enum": zoo.GuideKind(enumerated=True),
            "gumbel": gumbel,
            "gumbel-st": gumbel,
        },
        "vae": {},
        "bam_classifier": {},
    }
    for name, kinds in expected.items():
        spec = zoo.get_model(name)
        assert dict(spec.guide_kinds) == kinds, name
        for guide in spec.guides:
            for backend in zoo.BACKENDS:  # the twins declare nothing: both read the spec
                assert spec.guide_kind(guide, backend) == kinds.get(guide, zoo.GuideKind())
            old = zoo.spec.legacy_constants(spec.twin(backend))
            assert not old, f"{name}'s {backend} twin still defines {old}"


def test_a_guide_declared_nowhere_is_plain():
    assert GMM.guide_kind("no-such-guide") == zoo.GuideKind()
    assert GMM.guide_kind(None) == zoo.GuideKind()
    assert zoo.get_model("vae").guide_kind("amortized", "numpyro") == zoo.GuideKind()
    assert repr(zoo.GuideKind()) == "GuideKind()"
    kind = zoo.GuideKind(relaxed=True)
    assert repr(kind) == "GuideKind(relaxed=True)" and eval(repr(kind), vars(zoo)) == kind


def test_an_edited_copy_keeps_the_kinds():
    copy = dataclasses.replace(GMM, name="copy")
    assert copy.guide_kinds == GMM.guide_kinds and copy.updates == GMM.updates
    plain = dataclasses.replace(GMM, name="plain", guide_kinds={})
    assert plain.guide_kind("enum") == zoo.GuideKind()


@pytest.mark.parametrize(
    "kinds, message",
    [
        ({"gumbel": zoo.GuideKind(enumerated=True)}, r"declares the kind of \['gumbel'\]"),
        ({"enum": "enumerated"}, r"guide_kinds\['enum'\] must be a zoo.GuideKind"),
        (("enum",), "guide_kinds must map guide names to zoo.GuideKind"),
        (
            {"enum": zoo.GuideKind(enumerated=True, relaxed=True)},
            "declared both relaxed and enumerated",
        ),
        (
            {"enum": zoo.GuideKind(relaxed=True, deterministic=True)},
            "declared both relaxed and deterministic",
        ),
        (
            {"enum": zoo.GuideKind(enumerated=True, closed_form_kl=True)},
            "declared both enumerated and closed_form_kl",
        ),
        ({"enum": zoo.GuideKind(enumerated=1)}, r"enumerated must be True or False; got 1"),
    ],
)
def test_a_wrong_declaration_is_refused_with_what_to_change(kinds, message):
    spec = dataclasses.replace(GMM, name="wrong", guide_kinds=kinds)
    with pytest.raises(zoo.ModelSpecError, match=message):
        check_spec(spec)


def test_an_enumerated_guide_not_declared_so_is_refused_with_what_to_declare():
    spec = dataclasses.replace(GMM, name="undeclared", guide_kinds={})
    with pytest.raises(zoo.ModelSpecError) as err:
        check_registration(spec)
    assert "does not sample the latent site(s) ['z']" in str(err.value)
    assert "guide_kinds={'enum': zoo.GuideKind(enumerated=True)}" in str(err.value)


# --- twins that still list guides in module constants ------------------------------------------


@pytest.fixture
def legacy_twins(tmp_path, monkeypatch):
    """Twin modules of the previous revision: gmm's twins, with the guide kinds as constants."""
    for backend in zoo.BACKENDS:
        source = f"""
            from zoo.gmm.{backend}_model import make_guide, model

            ENUMERATED_GUIDES = ("enum",)
            DETERMINISTIC_GUIDES = ("enum",)
        """
        (tmp_path / f"legacy_gmm_{backend}.py").write_text(textwrap.dedent(source))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield {backend: f"legacy_gmm_{backend}" for backend in zoo.BACKENDS}
    for backend in zoo.BACKENDS:
        sys.modules.pop(f"legacy_gmm_{backend}", None)


LEGACY_MESSAGE = (
    r"declares its guides' kinds by ENUMERATED_GUIDES, DETERMINISTIC_GUIDES; these twin "
    r"constants are deprecated.*guide_kinds=\{'enum': zoo.GuideKind\(enumerated=True, "
    r"deterministic=True\)\}\), and delete the constants from both twins"
)


def test_twin_constants_still_work_with_a_deprecation_warning(legacy_twins):
    spec = dataclasses.replace(GMM, name="legacy_gmm", backends=legacy_twins, guide_kinds={})
    for backend in zoo.BACKENDS:
        with pytest.warns(DeprecationWarning, match=LEGACY_MESSAGE):
            kind = spec.guide_kind("enum", backend)
        assert kind == zoo.GuideKind(enumerated=True, deterministic=True)
    # Registration traces the guide with z enumerated, as the constants say.
    with pytest.warns(DeprecationWarning, match=LEGACY_MESSAGE):
        zoo.register(spec)
    try:
        data = GMM.make_data(np.random.default_rng(0), 60)
        options = dict(K=2, num_steps=3, tol=0.0, progress=False)
        with pytest.warns(DeprecationWarning, match=LEGACY_MESSAGE):
            old = inference.fit("legacy_gmm", data, "svi", "pyro", **options)
        new = inference.fit("gmm", data, "svi", "pyro", **options)
        np.testing.assert_array_equal(old.history["objective"], new.history["objective"])
        # Deterministic: num_particles= is refused, as for the built-in model.
        with (
            pytest.warns(DeprecationWarning, match=LEGACY_MESSAGE),
            pytest.raises(ValueError, match="draws nothing at random"),
        ):
            inference.fit("legacy_gmm", data, "svi", "pyro", num_particles=2, **options)
    finally:
        zoo.unregister("legacy_gmm")


def test_twin_constants_beside_the_spec_declaration_are_ignored_with_a_warning(legacy_twins):
    wrong = {"enum": zoo.GuideKind(enumerated=True)}  # the spec's, not deterministic
    spec = dataclasses.replace(GMM, name="both", backends=legacy_twins, guide_kinds=wrong)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the spec declares: the constants are not read
        assert spec.guide_kind("enum", "pyro") == zoo.GuideKind(enumerated=True)
    with pytest.warns(DeprecationWarning, match="still defines ENUMERATED_GUIDES, "):
        check_registration(spec)


# --- the keywords of the previous revision -----------------------------------------------------


def _old_spec(name, **old):
    """gmm's spec written with the previous revision's keywords in place of ``updates``."""
    fields = {f.name: getattr(GMM, f.name) for f in dataclasses.fields(GMM)}
    return zoo.ModelSpec(**{**fields, "name": name, "updates": None, **old})


def test_algorithms_is_ignored_with_a_deprecation_warning():
    with pytest.warns(DeprecationWarning, match="algorithms= is deprecated, no longer needed and"):
        spec = _old_spec("old_algorithms", algorithms=("svi",))
    assert spec.updates is None
    with pytest.warns(DeprecationWarning, match="algorithms= is deprecated.*ignored"):
        spec = dataclasses.replace(GMM, name="old_algorithms", algorithms=("em", "svi"))
    assert spec.updates == GMM.updates
    zoo.register(spec)
    try:
        assert inference.get_algorithm("em").supports(spec)
    finally:
        zoo.unregister("old_algorithms")


def test_closed_form_maps_to_updates_with_a_deprecation_warning():
    message = (
        r"closed_form= and algorithms= are deprecated\. Write instead updates=zoo\."
        r"ClosedFormUpdates\('zoo.gmm.closed_form', objective='log_likelihood', "
        r"start='responsibilities', family='em'\).*objective='log_joint'"
    )
    with pytest.warns(DeprecationWarning, match=message):
        spec = _old_spec("old_gmm", algorithms=("em", "svi"), closed_form="zoo.gmm.closed_form")
    assert spec.updates == zoo.ClosedFormUpdates(
        "zoo.gmm.closed_form", objective="log_likelihood", start="responsibilities", family="em"
    )
    # An edited copy is not warned again, and keeps the mapped updates.
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        copy = dataclasses.replace(spec, description="edited")
    assert copy.updates == spec.updates
    zoo.register(spec)
    try:
        data = GMM.make_data(np.random.default_rng(0), 60)
        options = dict(K=2, num_steps=3, tol=0.0, progress=False)
        old = inference.fit("old_gmm", data, "em", "pyro", **options)
        new = inference.fit("gmm", data, "em", "pyro", **options)
        np.testing.assert_array_equal(old.history["objective"], new.history["objective"])
        np.testing.assert_array_equal(old.params["means"], new.params["means"])
    finally:
        zoo.unregister("old_gmm")


def test_conjugate_updates_map_to_updates_that_start_from_the_data(regression_spec):
    fields = {f.name: getattr(regression_spec, f.name) for f in dataclasses.fields(regression_spec)}
    fields.update(name="old_regression", updates=None)
    message = (
        r"conjugate_updates= and algorithms= are deprecated\. Write instead updates=zoo\."
        r"ClosedFormUpdates\('zoo_linear_regression.closed_form', objective='elbo', "
        r"start='data', family='cavi'\)"
    )
    with pytest.warns(DeprecationWarning, match=message):
        spec = zoo.ModelSpec(
            **fields,
            algorithms=("cavi", "svi"),
            conjugate_updates="zoo_linear_regression.closed_form",
        )
    assert spec.updates == zoo.ClosedFormUpdates(
        "zoo_linear_regression.closed_form", objective="elbo", start="data", family="cavi"
    )
    zoo.register(spec, check=False)
    try:
        assert inference.get_algorithm("cavi").supports(spec)
        assert not inference.get_algorithm("em").supports(spec)
    finally:
        zoo.unregister("old_regression")


@pytest.mark.parametrize(
    "old, message",
    [
        (
            {"closed_form": "zoo.gmm.closed_form"},
            r"closed_form='zoo.gmm.closed_form' is deprecated, and it cannot be mapped to "
            r"updates= here: with no algorithms= the spec does not say whether",
        ),
        (
            {"closed_form": "zoo.gmm.closed_form", "algorithms": ("cavi", "em", "svi")},
            r"cannot be mapped to updates= here: with algorithms=\('cavi', 'em', 'svi'\)",
        ),
        (
            {"closed_form": "a.b", "conjugate_updates": "c.d", "algorithms": ("em",)},
            "at most one of them was ever allowed",
        ),
        (
            {
                "closed_form": "zoo.gmm.closed_form",
                "algorithms": ("em",),
                "updates": GMM.updates,
            },
            "closed_form= \\(deprecated\\) and updates= both name closed-form updates",
        ),
    ],
)
def test_old_keywords_that_cannot_be_mapped_say_what_to_write(old, message):
    with pytest.raises(zoo.ModelSpecError, match=message) as err:
        _old_spec("unmappable", **old)
    assert "updates=" in str(err.value)


def test_natural_gradient_steps_are_not_guessed_from_an_old_closed_form():
    with pytest.warns(DeprecationWarning, match="if the module defines it, add natural_gradient"):
        spec = _old_spec(
            "old_bayesian_gmm",
            algorithms=("cavi", "svi"),
            closed_form="zoo.bayesian_gmm.closed_form",
        )
    assert spec.updates.objective == "elbo" and spec.updates.family == "cavi"
    assert not spec.updates.natural_gradient


def test_a_comparison_labels_the_curves_of_other_objectives():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = zoo.get_model("bayesian_gmm").make_data(np.random.default_rng(0), 60)
    table = inference.compare(
        "bayesian_gmm",
        data,
        algorithms=["cavi", "svi"],
        backends=["pyro"],
        guides=["enum", "gumbel"],
        K=2,
        num_steps=3,
        tol=0,  # a fixed number of steps, without a warning that it did not converge
        progress=False,
    )
    fig, ax = plt.subplots()
    table._plot_model(ax, "bayesian_gmm")
    labels = [line.get_label() for line in ax.get_lines() if not line.get_label().startswith("_")]
    plt.close(fig)
    # Each curve is the objective its run ascended; the table scores them all on another.
    assert sorted(labels) == [
        "cavi (pyro), mean-field ELBO",
        "svi-enum (pyro)",
        "svi-gumbel (pyro), relaxed ELBO",
    ]
