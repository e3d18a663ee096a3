"""The README and the documentation's markdown pages link only to files that exist, so the
README's links work on a repository host and the site's links are checked by its build too."""

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("**/*.md"))]
PAGES = [p for p in PAGES if not {"_build", "_generated", "gallery"} & set(p.parts)]
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_point_to_files(page):
    text = re.sub(r"```.*?```", "", page.read_text(), flags=re.S)  # code is not a link
    missing = []
    for target, _ in LINK.findall(text):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not reachable from the test machine
        if page.parent.name == "docs" and target.startswith("gallery/"):
            continue  # written by the build from examples/; the build checks these links
        base = ROOT / "docs" if target.startswith("/") else page.parent
        if not (base / target.lstrip("/")).exists():
            missing.append(target)
    assert not missing, f"{page.relative_to(ROOT)} links to missing files: {missing}"


def test_readme_is_short():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 150
