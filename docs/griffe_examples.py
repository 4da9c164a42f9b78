"""Griffe extension: adapt dataecho's docstrings to the Markdown the site renders.

The Google style names the section ``Examples:``; dataecho's docstrings say ``Example:``
(one example each), which griffe would otherwise render as an admonition whose ``>>>``
lines Markdown reads as block quotes. Renaming the heading at load time makes them
code blocks. Sphinx roles (``:class:`EchoBatches```) become inline code, since
Markdown has no such syntax.
"""

import re
from typing import Any

import griffe

_HEADING = re.compile(r"^(\s*)Example:\s*$", re.MULTILINE)
_ROLE = re.compile(r":(?:func|class|meth|attr|mod|data|exc|obj):`~?([^`]+)`")


class ExampleSections(griffe.Extension):
    """Renames ``Example:`` headings to ``Examples:`` and turns Sphinx roles into code."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is not None:
            text = _HEADING.sub(r"\1Examples:", obj.docstring.value)
            obj.docstring.value = _ROLE.sub(r"`\1`", text)
