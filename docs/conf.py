"""Sphinx configuration: ``python -m sphinx -W -b html docs docs/_build/html`` builds the site.

The gallery runs every example in ``examples/`` in its ``--quick`` mode (a few minutes in all on
a CPU); the examples on MNIST read it from ``$ZOO_DATA_DIR`` (else they download it, verified
against pinned checksums, into ``~/.cache/ppl-zoo``).
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path

DOCS = Path(__file__).resolve().parent
ROOT = DOCS.parent
sys.path[:0] = [str(ROOT), str(DOCS / "_ext")]
os.environ.setdefault("MPLBACKEND", "Agg")

project = "ppl-zoo"
author = "the ppl-zoo authors"
copyright = "the ppl-zoo authors, Apache-2.0"

extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    # A copy of MathJax in the built site (mathjax_path points at it), so that formulas render
    # without a network; the package ships MathJax's files.
    "sphinx-mathjax-offline",
    "sphinx.ext.viewcode",
    "sphinx_copybutton",
    "sphinx_gallery.gen_gallery",
    "zoo_reference",
]

exclude_patterns = [
    "_build",
    "_generated",
    "_gallery_src",
    "gallery_header.rst",
    "Thumbs.db",
    ".DS_Store",
]
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence", "deflist"]
myst_heading_anchors = 3
suppress_warnings = ["config.cache"]  # the gallery's callables are not picklable

html_theme = "furo"
html_title = "ppl-zoo"
html_static_path: list[str] = []

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented"
autodoc_default_options = {"show-inheritance": False}
napoleon_google_docstring = False
napoleon_numpy_docstring = True
napoleon_use_rtype = False


# --- the gallery ----------------------------------------------------------------------------------

OUTPUTS = Path(tempfile.mkdtemp(prefix="zoo-gallery-"))


def quick_argv(gallery_conf, script_vars) -> list[str]:
    """Every example runs in its --quick mode, writing into a folder of its own."""
    name = Path(script_vars["src_file"]).stem
    return ["--quick", "--out", str(OUTPUTS / name)]


class WrittenImages:
    """Shows the PNG files an example wrote into its ``--out`` folder (the examples save their
    figures and close them, so matplotlib's own scraper finds none)."""

    def __init__(self):
        self.seen: set[Path] = set()

    def __repr__(self) -> str:  # a stable repr: Sphinx compares configurations by it
        return "WrittenImages()"

    def __call__(self, block, block_vars, gallery_conf) -> str:
        from sphinx_gallery.scrapers import figure_rst

        name = Path(block_vars["src_file"]).stem
        new = sorted(p for p in (OUTPUTS / name).glob("**/*.png") if p not in self.seen)
        self.seen.update(new)
        targets = []
        for source, target in zip(new, block_vars["image_path_iterator"], strict=False):
            shutil.copyfile(source, target)
            targets.append(target)
        return figure_rst(targets, gallery_conf["src_dir"])


def staged_examples() -> Path:
    """The scripts of ``examples/`` copied into a folder of their own: the gallery takes every
    subfolder of its source as a section, and ``examples/`` also holds the plugin packages."""
    staged = DOCS / "_gallery_src"
    shutil.rmtree(staged, ignore_errors=True)
    staged.mkdir()
    shutil.copyfile(DOCS / "gallery_header.rst", staged / "GALLERY_HEADER.rst")
    for script in sorted((ROOT / "examples").glob("*.py")):
        shutil.copy2(script, staged / script.name)  # the time too: unchanged scripts are not rerun
    return staged


sphinx_gallery_conf = {
    "examples_dirs": str(staged_examples()),
    "gallery_dirs": "gallery",
    "filename_pattern": r".*\.py$",  # run them all (in --quick mode)
    "reset_argv": quick_argv,
    "image_scrapers": (WrittenImages(),),
    "download_all_examples": False,
    "show_signature": False,
    "min_reported_time": 1,
    "abort_on_example_error": True,
    "write_computation_times": False,
}
