"""What a docstring says about its parameters, for the documentation site's option tables and for
``zoo fit MODEL --help``: one reading of the numpydoc ``Parameters`` section (by
``docstring_parser``, which a plain install has; numpydoc comes with Sphinx), shared so that the
site and the shell cannot tell a user different things.
"""

from __future__ import annotations

import inspect
import re
from typing import NamedTuple

import docstring_parser

__all__ = ["ParameterDoc", "parameter_docs", "plain"]


class ParameterDoc(NamedTuple):
    """One entry of a ``Parameters`` section: its type (``"int"``, ``"float, optional"``; empty
    when the entry names none) and its meaning, one line of text."""

    type: str
    meaning: str


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
    out = {}
    parsed = docstring_parser.parse(
        inspect.getdoc(obj) or "", docstring_parser.DocstringStyle.NUMPYDOC
    )
    for entry in parsed.params:
        kind = (entry.type_name or "") + (", optional" if entry.is_optional else "")
        meaning = " ".join(line.strip() for line in (entry.description or "").splitlines())
        for name in entry.arg_name.split(","):
            out[name.strip()] = ParameterDoc(kind, meaning.strip())
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
