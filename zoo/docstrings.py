"""What a docstring says about its parameters, for the documentation site's option tables and for
``zoo fit MODEL --help``: one reading of the numpydoc ``Parameters`` section (by
``docstring_parser``, which a plain install has; numpydoc comes with Sphinx), shared so that the
site and the shell cannot tell a user different things.

Also :func:`shared_sections`, the sections of a docstring written once for a function's twins in
several array libraries.
"""

from __future__ import annotations

import inspect
import re
import string
import textwrap
from typing import NamedTuple

import docstring_parser

__all__ = ["ParameterDoc", "parameter_docs", "plain", "shared_sections"]


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


#: A numpydoc section header: a title line, then a line of dashes.
_SECTION_HEADER = re.compile(r"^([ \t]*)[A-Z][A-Za-z ]*\n[ \t]*-{3,}[ \t]*$", re.M)


def shared_sections(template: str, **fields: str):
    r"""Decorator: numpydoc sections written once for the twins of a function in several array
    libraries (the same parameters, but ``Tensor`` in one and ``array`` in another).

    The decorated function's own docstring keeps what is its own: the summary and any later
    sections (``Raises``, ``Examples``). The sections of ``template``, with its ``$name`` fields
    filled in from ``fields``, go in before the first of those sections, or at the end.

    Parameters
    ----------
    template : str
        Numpydoc sections (``Parameters``, ``Returns``, ...), at any indentation.
    **fields : str
        The values of the template's ``$name`` fields; every field needs one.

    Returns
    -------
    callable
        The decorator; it sets the function's ``__doc__`` and returns the function.

    Examples
    --------
    >>> import inspect
    >>> from zoo.docstrings import shared_sections
    >>> SECTIONS = "Parameters\n----------\nx : $array\n    The input."
    >>> @shared_sections(SECTIONS, array="Tensor")
    ... def double(x):
    ...     '''Twice ``x``.'''
    ...     return 2 * x
    >>> print(inspect.getdoc(double))
    Twice ``x``.
    <BLANKLINE>
    Parameters
    ----------
    x : Tensor
        The input.
    """
    sections = string.Template(inspect.cleandoc(template)).substitute(fields)

    def decorate(func):
        doc = func.__doc__ or ""
        header = _SECTION_HEADER.search(doc)
        if header:  # before the function's own first section, at its indentation
            at, indent = header.start(), header.group(1)
            doc = doc[:at] + textwrap.indent(sections, indent) + "\n\n" + doc[at:]
        else:  # at the end, at the indentation of the lines after the summary
            later = [line for line in doc.splitlines()[1:] if line.strip()]
            indent = min((line[: len(line) - len(line.lstrip())] for line in later), default="")
            indent = indent or "    "
            doc = doc.rstrip() + "\n\n" + textwrap.indent(sections, indent) + "\n" + indent
        func.__doc__ = doc
        return func

    return decorate
