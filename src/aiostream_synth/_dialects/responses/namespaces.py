"""Namespace tools: flattening ``{type: namespace}`` specs to ``<ns>__<name>`` and back.

The map built while flattening is the only inverse: namespaces often contain the delimiter
themselves (``mcp__weather``), so a flat name is never split on ``__``. When a plain tool and a
namespaced one flatten to the same name, the later map entry wins.
"""

from __future__ import annotations

import typing
from collections.abc import Iterable
from functools import cache
from typing import Any, TypeAlias

import typing_extensions

from aiostream_synth._params.removals import Removals

if typing.TYPE_CHECKING:
    from aiostream_synth._dialects.prepared import PreparedRequest

__all__ = [
    "NAMESPACED_CALL_TYPES",
    "NAMESPACE_DELIMITER",
    "NamespaceMap",
    "Origin",
    "Path",
    "flatten_namespace_tools",
    "flatten_tools",
    "namespace_map",
    "restore_namespace_tool_calls",
]

#: flat tool name -> (namespace, name within the namespace)
NamespaceMap: TypeAlias = dict[str, tuple[str, str]]

NAMESPACE_DELIMITER = "__"
#: Output / replayed item types that carry a ``namespace`` (custom calls too, decision P4).
NAMESPACED_CALL_TYPES = frozenset({"function_call", "custom_tool_call"})


Path = tuple[str | int, ...]
#: Where a member came from: an index in the client's list of the same name, or a full path.
Origin = int | Path


def _well_formed(tool: dict[str, Any]) -> bool:
    """A namespace that can be flattened without losing anything: a non-empty string name, a
    string description (or none) and a list of sub-tool objects, each with a non-empty string
    name."""
    subtools = tool.get("tools")
    return (
        isinstance(tool.get("name"), str)
        and bool(tool["name"])
        and isinstance(tool.get("description"), str | None)
        and isinstance(subtools, list)
        and all(
            isinstance(sub, dict) and isinstance(sub.get("name"), str) and sub["name"]
            for sub in subtools
        )
    )


@cache
def _namespace_keys() -> frozenset[str]:
    """The keys of a namespace spec, per the installed openai SDK (older ones lack the type)."""
    try:
        from openai.types.responses.namespace_tool_param import NamespaceToolParam
    except ImportError:  # pragma: no cover - an openai without namespace tools
        return frozenset({"type", "name", "description", "tools"})
    return frozenset(typing_extensions.get_type_hints(NamespaceToolParam))


#: JSON Schema's boolean schemas as the objects that mean the same (a sub-tool's
#: ``parameters`` is any JSON Schema; a function tool's must be an object).
_BOOLEAN_SCHEMAS: dict[bool, dict[str, Any]] = {True: {}, False: {"not": {}}}


def _flat_subtool(sub: dict[str, Any], flat_name: str) -> dict[str, Any]:
    flat = {**sub, "type": sub.get("type") or "function", "name": flat_name}
    parameters = sub.get("parameters")
    if isinstance(parameters, bool):
        flat["parameters"] = dict(_BOOLEAN_SCHEMAS[parameters])
    return flat


def flatten_tools(
    tools: Iterable[Any] | None,
    path: Path | None = None,
    *,
    keep_malformed: bool = True,
    removals: Removals | None = None,
) -> tuple[list[tuple[Any, Origin]], NamespaceMap]:
    """Flatten namespace specs, each flat tool paired with where the client wrote it: its index
    in ``tools`` (no ``path``), or its full path under ``path`` (a carrier's ``tools``).

    ``keep_malformed`` (the sanitizer's P10 mode): a namespace that cannot be flattened whole
    (no name, a sub-tool that is not an object or has no name) stays as it is, for validation
    to judge, instead of losing sub-tools. Without it, such sub-tools are skipped.

    A sub-tool's boolean ``parameters`` schema (``true``: anything) becomes the object schema
    that means the same (``{}``), which a flat function tool can carry. A key of a flattened
    namespace that the SDK's namespace type does not declare has no place in a flat tool: it
    is recorded in ``removals`` ("unknown key"), as validation records one elsewhere; so are
    the namespace's description (benign: Codex sends one with every namespace) and a namespace
    with no sub-tools. A sub-tool whose ``parameters`` is another JSON value (an array, a
    string) stays as it is: validation answers 400 at its path, since a function tool's
    parameters must be a JSON Schema object.
    """
    flat: list[tuple[Any, Origin]] = []
    ns_map: NamespaceMap = {}
    base = ("tools",) if path is None else path
    for index, tool in enumerate(tools or ()):
        if not (isinstance(tool, dict) and tool.get("type") == "namespace") or (
            keep_malformed and not _well_formed(tool)
        ):
            flat.append((tool, index if path is None else (*path, index)))
            continue
        where = (*base, index)
        if removals is not None:
            for key in tool:
                if key not in _namespace_keys():
                    removals.add((*where, key), "unknown key")
            if tool.get("description"):
                removals.add(
                    (*where, "description"),
                    "namespace description (a flat tool has no place for it)",
                    benign=True,
                )
            if not tool.get("tools"):
                removals.add(where, "namespace without tools")
        namespace = str(tool.get("name") or "")
        subtools = tool.get("tools")
        if not isinstance(subtools, list):
            continue
        for k, sub in enumerate(subtools):
            if not (isinstance(sub, dict) and sub.get("name")):
                continue
            flat_name = f"{namespace}{NAMESPACE_DELIMITER}{sub['name']}"
            flat.append((_flat_subtool(sub, flat_name), (*where, "tools", k)))
            ns_map[flat_name] = (namespace, str(sub["name"]))
    return flat, ns_map


def flatten_namespace_tools(tools: Iterable[Any] | None) -> tuple[list[Any], NamespaceMap]:
    """Replace every namespace spec, in place in the list, by its sub-tools with joined names.

    A sub-tool keeps its own declared ``type`` (a ``custom`` tool stays custom), an untyped one
    becomes ``function``; sub-tools that are not objects or have no name are skipped; the
    namespace's own description is dropped. Everything else passes through unchanged, and no
    input object is mutated. The streaming sanitizer flattens with
    :func:`flatten_tools` instead, which never skips a sub-tool.
    """
    flat, ns_map = flatten_tools(tools, keep_malformed=False)
    return [tool for tool, _ in flat], ns_map


def restore_namespace_tool_calls(items: list[Any], ns_map: NamespaceMap) -> list[Any]:
    """A new list in which calls named with a mapped flat name get ``namespace`` + short ``name``.

    Applies to ``function_call`` and ``custom_tool_call`` items. Other items, and calls
    whose name is not in the map, are the same objects, untouched.
    """
    if not ns_map:
        return list(items)
    restored: list[Any] = []
    for item in items:
        if (
            isinstance(item, dict)
            and isinstance(item.get("type"), str)
            and item["type"] in NAMESPACED_CALL_TYPES
            and isinstance(item.get("name"), str)
            and item["name"] in ns_map
        ):
            namespace, name = ns_map[item["name"]]
            item = {**item, "namespace": namespace, "name": name}
        restored.append(item)
    return restored


def namespace_map(prepared: PreparedRequest) -> NamespaceMap:
    """The namespace map a prepared Responses request keeps as its dialect state (empty for a
    request that was forwarded as it came)."""
    state = prepared.state
    return state if isinstance(state, dict) else {}
