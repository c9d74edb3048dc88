"""A griffe extension for the API reference.

Our docstrings are written for Sphinx: reST roles (``:func:`name```) and double backquotes,
which Markdown would show as they are, and ``#:`` comments above module constants and type
aliases, which griffe does not read. Each role becomes inline code (a link to the reference
entry when it names a public name), double backquotes single ones, and a ``#:`` comment the
docstring of the attribute below it."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import griffe

_ROLE = re.compile(r":(?:py:)?(?:func|class|meth|attr|data|mod|exc|obj|const):`(~?)([^`]+)`")
_LITERAL = re.compile(r"``([^`]+)``")


def _public() -> frozenset[str]:
    import aiostream_synth

    return frozenset(aiostream_synth.__all__)


_PUBLIC = _public()


def _role(match: re.Match[str]) -> str:
    tilde, target = match.groups()
    target = target.strip()
    shown = target.rsplit(".", 1)[-1] if tilde else target
    name = target.removeprefix("aiostream_synth.")
    if "." not in name and name in _PUBLIC:
        return f"[`{shown}`][aiostream_synth.{name}]"
    return f"`{shown}`"


def markdown(text: str) -> str:
    """``text`` (a docstring written for Sphinx) as Markdown."""
    return _LITERAL.sub(r"`\1`", _ROLE.sub(_role, text))


def _comment_above(attr: griffe.Attribute) -> str | None:
    """The ``#:`` comment lines right above ``attr``'s assignment, joined."""
    if attr.lineno is None or not isinstance(attr.filepath, Path):
        return None
    lines = attr.filepath.read_text(encoding="utf-8").splitlines()
    found: list[str] = []
    index = attr.lineno - 2
    while index >= 0 and lines[index].lstrip().startswith("#:"):
        found.insert(0, lines[index].lstrip()[2:].strip())
        index -= 1
    return " ".join(found) or None


class RstToMarkdown(griffe.Extension):
    """Rewrites every docstring griffe loads (see the module docstring)."""

    def on_object(self, *, obj: griffe.Object, **kwargs: Any) -> None:
        if obj.docstring is None and isinstance(obj, griffe.Attribute):
            comment = _comment_above(obj)
            if comment is not None:
                obj.docstring = griffe.Docstring(comment, parent=obj)
        if obj.docstring is not None:
            obj.docstring.value = markdown(obj.docstring.value)

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        if pkg.docstring is not None:  # the package itself is no "object" to on_object
            pkg.docstring.value = markdown(pkg.docstring.value)
