"""The dialects this library serves, found by name or by path (decision P11).

Adding a dialect: a folder implementing :mod:`aiostream_synth._dialects.base`, and one entry in
:data:`DIALECTS`. Nothing above this layer names a dialect.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiostream_synth._dialects.anthropic.spec import ANTHROPIC
from aiostream_synth._dialects.base import DialectSpec
from aiostream_synth._dialects.chat.spec import CHAT
from aiostream_synth._dialects.prepared import Dialect
from aiostream_synth._dialects.responses.spec import RESPONSES

__all__ = ["DIALECTS", "Dialect", "route_table", "spec_for", "wants_stream"]

DIALECTS: tuple[DialectSpec, ...] = (CHAT, RESPONSES, ANTHROPIC)
_BY_NAME: dict[str, DialectSpec] = {spec.name: spec for spec in DIALECTS}


def spec_for(dialect: str | DialectSpec) -> DialectSpec:
    """The spec of a dialect named ``dialect`` (a spec is returned as it is)."""
    if not isinstance(dialect, str):
        return dialect
    try:
        return _BY_NAME[dialect]
    except KeyError:
        known = ", ".join(repr(name) for name in _BY_NAME)
        raise ValueError(f"unknown dialect {dialect!r}; expected one of {known}") from None


def route_table(names: Mapping[str, str] | None = None) -> dict[str, DialectSpec]:
    """``{path: spec}``: every dialect's paths, or the given ``{path: dialect name}``."""
    if names is not None:
        return {path: spec_for(name) for path, name in names.items()}
    return {path: spec for spec in DIALECTS for path in spec.paths}


def wants_stream(body: Any, dialect: Dialect) -> bool:
    """Whether ``body`` asks for a streamed answer in ``dialect``.

    Chat and Anthropic: only ``stream is True`` (``"true"`` or ``1`` stay on the strict path,
    where validation rejects them). Responses: any truthy ``stream``, as the reference dispatch
    does.
    """
    return spec_for(dialect).wants_stream(body)
