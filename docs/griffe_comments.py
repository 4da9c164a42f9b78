"""Griffe extension: ``#:`` comments above a module attribute become its docstring.

dataecho documents its constants the Sphinx way, with ``#:`` lines right above the
assignment (``DEFAULT_MAX_FACTOR``, ``VARIANTS``); griffe reads only a string literal
below it, so without this the API pages show the value and no description.
"""

from pathlib import Path
from typing import Any

import griffe


def comment_above(lines: list[str], lineno: int) -> str | None:
    """The ``#:`` lines directly above 1-based line ``lineno``, joined, or None.

    Example:
        >>> comment_above(["#: The answer,", "#: always.", "X = 42"], 3)
        'The answer,\\nalways.'
    """
    found: list[str] = []
    i = lineno - 2
    while i >= 0 and lines[i].lstrip().startswith("#:"):
        found.append(lines[i].lstrip()[2:].strip())
        i -= 1
    return "\n".join(reversed(found)) or None


class CommentDocstrings(griffe.Extension):
    """Gives an attribute without a docstring the ``#:`` comment above it."""

    def on_attribute_instance(self, *, attr: griffe.Attribute, **kwargs: Any) -> None:
        if attr.docstring is not None or attr.lineno is None:
            return
        path = attr.filepath
        if not isinstance(path, Path) or not path.exists():
            return
        text = comment_above(path.read_text().splitlines(), attr.lineno)
        if text:
            attr.docstring = griffe.Docstring(text, lineno=attr.lineno, parent=attr)
