"""What a docstring says about its parameters, for the documentation site's option tables and for
``zoo fit MODEL --help``: one reading of numpydoc's ``Parameters`` section, shared so that the
site and the shell cannot tell a user different things. It reads the section as numpydoc does
(``tests/test_docs.py`` checks that they agree) without numpydoc, which comes with Sphinx and is
not installed with the zoo.
"""

from __future__ import annotations

import inspect
import re
from typing import NamedTuple

__all__ = ["ParameterDoc", "parameter_docs", "plain"]

_UNDERLINE = re.compile(r"^-{3,}$")


class ParameterDoc(NamedTuple):
    """One entry of a ``Parameters`` section: its type (``"int"``, ``"float, optional"``; empty
    when the entry names none) and its meaning, one line of text."""

    type: str
    meaning: str


def _section(lines: list[str], title: str) -> list[str]:
    """The lines of the section ``title`` (a title line underlined with dashes), up to the next
    section."""
    starts = [
        i
        for i in range(len(lines) - 1)
        if lines[i].strip() and _UNDERLINE.match(lines[i + 1].strip())
    ]
    for k, i in enumerate(starts):
        if lines[i].strip() == title:
            end = starts[k + 1] if k + 1 < len(starts) else len(lines)
            return lines[i + 2 : end]
    return []


def parameter_docs(obj) -> dict[str, ParameterDoc]:
    """The entries of the ``Parameters`` section of ``obj``'s docstring, by name (an entry
    ``a, b : float`` documents both).

    Parameters
    ----------
    obj : object
        A function, class or dataclass with a numpydoc docstring.

    Returns
    -------
    dict of str to ParameterDoc
        Each parameter's type and meaning (the lines of its description joined by spaces).

    Examples
    --------
    >>> import zoo
    >>> from zoo.docstrings import parameter_docs
    >>> doc = parameter_docs(zoo.get_model("gmm").prepare)["K"]
    >>> doc.type, doc.meaning
    ('int', 'Number of components, in ``[1, N]``.')
    """
    entries = []  # [names, type, description lines], as numpydoc reads them
    for line in _section((inspect.getdoc(obj) or "").splitlines(), "Parameters"):
        if line.strip() and not line[0].isspace():
            header = line.strip()
            if " : " in header:
                names, kind = header.split(" : ", 1)
            else:
                names, kind = header.removesuffix(" :"), ""
            entries.append((names, kind.strip(), []))
        elif entries:
            entries[-1][2].append(line.strip())
    out = {}
    for names, kind, description in entries:
        meaning = " ".join(description).strip()
        for name in names.split(","):
            out[name.strip()] = ParameterDoc(kind, meaning)
    return out


def plain(text: str) -> str:
    """``text`` without reST markup, for a terminal: ``:func:`~a.b``` reads ``a.b``, and
    ````code```` reads ``code``.

    Parameters
    ----------
    text : str
        Text with inline reST markup.

    Returns
    -------
    str
        The same text, plain.

    Examples
    --------
    >>> from zoo.docstrings import plain
    >>> plain('Number of components, in ``[1, N]``; see :func:`~inference.fit`.')
    'Number of components, in [1, N]; see inference.fit.'
    """
    text = re.sub(r":[a-z]+:`~?([^`]+)`", r"\1", text)
    return re.sub(r"``([^`]*)``", r"\1", text)
