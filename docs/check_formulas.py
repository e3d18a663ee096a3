"""Check that every formula of the built site renders with the network cut off.

Each page of the built HTML site that holds math is opened in a headless Chromium whose
host names all fail to resolve, so MathJax can come only from the site itself. A page passes
when MathJax turned each of its formulas into a rendered element (``mjx-container``); raw TeX
left on a page means the math renderer did not load.

    python -m sphinx -W -b html docs docs/_build/html
    python docs/check_formulas.py docs/_build/html --screenshot formulas.png

``--screenshot`` also saves a picture of the first page with a display formula, for a person
to look at. The browser is the first of ``$CHROME``, ``chromium``, ``chromium-browser`` and
``google-chrome`` that is installed.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

# Sphinx writes inline math as <span class="math notranslate nohighlight"> and display math as
# <div class="math notranslate nohighlight">; MathJax replaces the TeX inside each with one
# <mjx-container> (display formulas that hold several equations still make one).
MATH = re.compile(r'<(?:span|div) class="math notranslate nohighlight">')
RENDERED = re.compile(r"<mjx-container[ >]")
OFFLINE = "--host-resolver-rules=MAP * ~NOTFOUND"


def browser() -> str:
    for name in (os.environ.get("CHROME"), "chromium", "chromium-browser", "google-chrome"):
        if name and shutil.which(name):
            return shutil.which(name)
    sys.exit("No Chromium found: install it, or set CHROME to a Chromium or Chrome executable.")


def headless(chrome: str, profile: str, *args: str) -> str:
    command = [
        chrome,
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        f"--user-data-dir={profile}",
        OFFLINE,
        "--virtual-time-budget=15000",  # let MathJax finish typesetting before the DOM is read
        *args,
    ]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    return done.stdout


def check(site: Path, screenshot: Path | None) -> list[str]:
    chrome = browser()
    failures, checked, shot = [], 0, None
    with tempfile.TemporaryDirectory() as profile:
        for page in sorted(site.rglob("*.html")):
            expected = len(MATH.findall(page.read_text(errors="replace")))
            if not expected:
                continue
            rendered = len(RENDERED.findall(headless(chrome, profile, "--dump-dom", page.as_uri())))
            checked += 1
            if rendered < expected:
                failures.append(f"{page.relative_to(site)}: {rendered} of {expected} rendered")
            if shot is None and '<div class="math' in page.read_text(errors="replace"):
                shot = page
        if screenshot is not None and shot is not None:
            size = "--window-size=1100,1400"
            headless(chrome, profile, size, f"--screenshot={screenshot.resolve()}", shot.as_uri())
            print(f"screenshot of {shot.relative_to(site)}: {screenshot}")
    print(f"{checked} pages with formulas checked offline; {len(failures)} with raw TeX left")
    if not checked:
        failures.append(f"no page of {site} holds a formula: is it the built site?")
    return failures


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("site", type=Path, help="the built HTML site (docs/_build/html)")
    parser.add_argument("--screenshot", type=Path, help="save a picture of a page with formulas")
    args = parser.parse_args(argv)
    failures = check(args.site.resolve(), args.screenshot)
    for failure in failures:
        print(failure, file=sys.stderr)
    sys.exit(1 if failures else 0)


if __name__ == "__main__":
    main()
