"""Namespace flattening and restoring."""

from __future__ import annotations

import copy
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from aiostream_synth.params import (
    NamespaceMap,
    flatten_namespace_tools,
    restore_namespace_tool_calls,
)


def test_none_and_empty_flatten_to_nothing() -> None:
    """None or empty → ([], {})."""
    assert flatten_namespace_tools(None) == ([], {})
    assert flatten_namespace_tools([]) == ([], {})


def test_non_namespace_entries_pass_through_in_position() -> None:
    """Non-dicts, untyped dicts and other types are the same objects, in place."""
    plain = {"type": "function", "name": "f"}
    untyped = {"name": "u"}
    ns = {"type": "namespace", "name": "ns", "description": "d", "tools": [{"name": "a"}]}
    flat, ns_map = flatten_namespace_tools([plain, "junk", ns, untyped])
    assert flat[0] is plain
    assert flat[1] == "junk"
    assert flat[2] == {"name": "ns__a", "type": "function"}
    assert flat[3] is untyped
    assert ns_map == {"ns__a": ("ns", "a")}


def test_subtools_keep_declared_type_and_other_keys() -> None:
    """A custom sub-tool stays custom; description/parameters kept; namespace description dropped."""
    ns = {
        "type": "namespace",
        "name": "mcp__weather",
        "description": "weather tools",
        "tools": [
            {
                "name": "get_weather",
                "description": "d",
                "parameters": {"type": "object"},
                "strict": True,
            },
            {"type": "custom", "name": "raw", "format": {"type": "text"}},
            {"description": "no name"},
            "not a dict",
        ],
    }
    before = copy.deepcopy(ns)
    flat, ns_map = flatten_namespace_tools([ns])
    assert flat == [
        {
            "name": "mcp__weather__get_weather",
            "description": "d",
            "parameters": {"type": "object"},
            "strict": True,
            "type": "function",
        },
        {"type": "custom", "name": "mcp__weather__raw", "format": {"type": "text"}},
    ]
    assert ns_map == {
        "mcp__weather__get_weather": ("mcp__weather", "get_weather"),
        "mcp__weather__raw": ("mcp__weather", "raw"),
    }
    assert ns == before


def test_namespace_without_usable_subtools_contributes_nothing() -> None:
    """Empty or broken sub-tool lists vanish."""
    assert flatten_namespace_tools([{"type": "namespace", "name": "x", "tools": []}]) == ([], {})
    assert flatten_namespace_tools([{"type": "namespace", "name": "x", "tools": None}]) == ([], {})


def test_restore_sets_namespace_and_short_name_on_calls() -> None:
    """function_call and custom_tool_call get namespace + name; others are the same objects."""
    ns_map: NamespaceMap = {"mcp__weather__get": ("mcp__weather", "get")}
    fc = {"type": "function_call", "name": "mcp__weather__get", "call_id": "c", "arguments": "{}"}
    cc = {"type": "custom_tool_call", "name": "mcp__weather__get", "call_id": "d", "input": "x"}
    other = {"type": "function_call", "name": "plain", "namespace": None}
    msg = {"type": "message"}
    items = [fc, cc, other, msg]
    out = restore_namespace_tool_calls(items, ns_map)
    assert out is not items
    assert out[0] == {**fc, "namespace": "mcp__weather", "name": "get"}
    assert out[1] == {**cc, "namespace": "mcp__weather", "name": "get"}
    assert out[2] is other
    assert out[2]["namespace"] is None
    assert out[3] is msg
    assert fc["name"] == "mcp__weather__get"


def test_restore_with_empty_map_is_identity() -> None:
    """Empty map → an equal new list."""
    items = [{"type": "function_call", "name": "a__b"}]
    assert restore_namespace_tool_calls(items, {}) == items


_ident = st.text("abcxyz_", min_size=1, max_size=8)


@given(
    namespaces=st.dictionaries(
        _ident, st.lists(_ident, min_size=1, max_size=4, unique=True), min_size=1, max_size=4
    )
)
def test_flatten_then_restore_round_trips_every_call(namespaces: dict[str, list[str]]) -> None:
    """Any call the backend makes with a flat name comes back with its namespace and short name,
    even when namespaces and names contain the delimiter."""
    tools: list[Any] = [
        {"type": "namespace", "name": ns, "description": "", "tools": [{"name": n} for n in names]}
        for ns, names in namespaces.items()
    ]
    flat, ns_map = flatten_namespace_tools(tools)
    expected = {f"{ns}__{n}": (ns, n) for ns, names in namespaces.items() for n in names}
    assert ns_map == expected  # later entries win on collisions, as dict insertion does
    calls = [
        {"type": "function_call", "name": t["name"], "call_id": str(i)} for i, t in enumerate(flat)
    ]
    for call, back in zip(calls, restore_namespace_tool_calls(calls, ns_map), strict=True):
        assert (back["namespace"], back["name"]) == ns_map[call["name"]]


def test_collision_with_a_plain_tool_restores_as_namespaced() -> None:
    """A plain tool literally named ns__x and a namespaced x: the map entry wins."""
    flat, ns_map = flatten_namespace_tools(
        [
            {"type": "function", "name": "ns__x"},
            {"type": "namespace", "name": "ns", "tools": [{"name": "x"}]},
        ]
    )
    assert [t["name"] for t in flat] == ["ns__x", "ns__x"]
    (call,) = restore_namespace_tool_calls([{"type": "function_call", "name": "ns__x"}], ns_map)
    assert call["namespace"] == "ns"
