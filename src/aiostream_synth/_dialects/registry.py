"""The dialects this library serves, found by name or by path (decision P11).

The three built-in dialects are always here. Another one is a folder implementing
:mod:`aiostream_synth._dialects.base`, registered with :func:`register_dialect` (by the code that
defines it, or by ``aiostream-synth serve --dialect MODULE:ATTR``); nothing above this layer
names a dialect.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from aiostream_synth._dialects.anthropic.spec import ANTHROPIC
from aiostream_synth._dialects.base import DialectSpec
from aiostream_synth._dialects.chat.spec import CHAT
from aiostream_synth._dialects.names import Dialect
from aiostream_synth._dialects.responses.spec import RESPONSES
from aiostream_synth._dialects.routes import RouteTable, compile_template

__all__ = [
    "Dialect",
    "register_dialect",
    "registered_dialects",
    "route_table",
    "spec_for",
    "unregister_dialect",
    "wants_stream",
]

_BUILTIN: tuple[DialectSpec, ...] = (CHAT, RESPONSES, ANTHROPIC)
_BY_NAME: dict[str, DialectSpec] = {spec.name: spec for spec in _BUILTIN}
#: A dialect's name: it becomes part of option names (``--<name>-<option>``) and metric labels.
_NAME = re.compile(r"[a-z][a-z0-9_]*\Z")


def registered_dialects() -> tuple[DialectSpec, ...]:
    """Every dialect served now: the built-in ones first, then the registered ones in order."""
    return tuple(_BY_NAME.values())


def register_dialect(spec: DialectSpec) -> DialectSpec:
    """Serve ``spec``'s dialect too (returns it, so it can decorate a module-level instance).

    Raises ``ValueError`` for a name that is taken or not lower-case ``[a-z][a-z0-9_]*``, a
    path another dialect already answers, or a malformed path or upstream path template; registering the same object again does nothing."""
    if _BY_NAME.get(spec.name) is spec:
        return spec
    if not isinstance(spec.name, str) or not _NAME.match(spec.name):
        raise ValueError(
            f"a dialect's name must be lower-case letters, digits and underscores, starting "
            f"with a letter (it names options and metrics), not {spec.name!r}"
        )
    if spec.name in _BY_NAME:
        raise ValueError(f"a dialect named {spec.name!r} is already registered")
    taken = {path: other.name for other in _BY_NAME.values() for path in _paths(other)}
    for path in (*spec.paths, spec.upstream_path):
        compile_template(path)  # ValueError for a malformed template
    for path in _paths(spec):
        if path in taken:
            raise ValueError(
                f"dialect {spec.name!r} cannot answer {path}: dialect {taken[path]!r} does"
            )
    _BY_NAME[spec.name] = spec
    return spec


def unregister_dialect(name: str) -> None:
    """Stop serving a registered dialect (the built-in ones stay; ``KeyError`` for others)."""
    if any(spec.name == name for spec in _BUILTIN):
        raise ValueError(f"the built-in dialect {name!r} cannot be unregistered")
    del _BY_NAME[name]


def _paths(spec: DialectSpec) -> tuple[str, ...]:
    return (*spec.paths, *spec.local_routes)


def spec_for(dialect: str | DialectSpec) -> DialectSpec:
    """The spec of a dialect named ``dialect`` (a spec is returned as it is)."""
    if not isinstance(dialect, str):
        return dialect
    try:
        return _BY_NAME[dialect]
    except KeyError:
        known = ", ".join(repr(name) for name in _BY_NAME)
        raise ValueError(f"unknown dialect {dialect!r}; expected one of {known}") from None


def route_table(names: Mapping[str, str] | None = None) -> RouteTable:
    """``{path: spec}``: every registered dialect's paths (and templates), or the given
    ``{path: dialect name}``; :meth:`RouteTable.match` finds the spec of a request's path."""
    if names is not None:
        return RouteTable({path: spec_for(name) for path, name in names.items()})
    return RouteTable({path: spec for spec in _BY_NAME.values() for path in spec.paths})


def wants_stream(body: Any, dialect: Dialect) -> bool:
    """Whether ``body`` asks for a streamed answer in ``dialect``.

    Chat and Anthropic: only ``stream is True`` (``"true"`` or ``1`` stay on the strict path,
    where validation rejects them). Responses: any truthy ``stream``, as the reference dispatch
    does.
    """
    return spec_for(dialect).wants_stream(body)
