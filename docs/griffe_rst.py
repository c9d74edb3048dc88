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


#: The public modules, each documented on the API page.
MODULES = ("asgi", "bridges", "engine", "errors", "params", "sse", "starlette")


def _homes() -> dict[str, str]:
    """``{public name: its reference entry}``: each name under the module that documents it
    (a name ``aiostream_synth`` re-exports is documented in its module)."""
    import importlib

    homes: dict[str, str] = {}
    for module in MODULES:
        for name in importlib.import_module(f"aiostream_synth.{module}").__all__:
            homes[name] = f"aiostream_synth.{module}.{name}"
    return homes


_HOMES = _homes()


def _role(match: re.Match[str]) -> str:
    tilde, target = match.groups()
    target = target.strip()
    shown = target.rsplit(".", 1)[-1] if tilde else target
    name = target.rsplit(".", 1)[-1]
    public = target == name or target.rsplit(".", 1)[0] in ("aiostream_synth", _module(name))
    if public and name in _HOMES:
        return f"[`{shown}`][{_HOMES[name]}]"
    return f"`{shown}`"


def _module(name: str) -> str:
    return _HOMES.get(name, "").rpartition(".")[0]


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
