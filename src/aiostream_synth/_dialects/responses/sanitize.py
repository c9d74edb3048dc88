"""Responses, request side: a streaming body (the Codex CLI's above all) onto strict non-streaming params.

Steps, in order (with decision P10's forwarding rules):

1. drop ``stream`` / ``stream_options``;
2. flatten namespace tools (``<ns>__<name>``) and rewrite replayed namespaced calls the same way;
3. normalize replayed history (N1-N3, :mod:`._replay`): assistant messages without ``status``
   or ``id``, reasoning items with ``"content": null``;
4. lift ``additional_tools`` carriers out of ``input`` into ``tools``;
5. drop tools and input items whose ``type`` the params model does not know, and the tools the
   drop options ask for;
6. hoist leading system/developer messages into ``instructions``;
7. keep only params-model fields.

:func:`validate_streaming_responses_params` then prunes unknown keys and raises what is wrong.

Deliberate differences from the upstream reference module (decision P10: nothing is
dropped for failing validation):

* a tool or item is never dropped for failing validation: a missing key is no error at all
  (a function tool without ``strict``, an assistant replay without ``status``), an unknown key
  is pruned, and a wrong value is a 400 naming its path. Only unknown ``type`` values and the
  configured drops remove a whole object, and every removal is recorded and reported;
* replayed history is normalized (N1-N3) before validation, on every path;
* a leading system message is hoisted only when all its content is text (an image in it would
  otherwise be lost), and a namespace is flattened only when it can be flattened whole;
* namespaced ``custom_tool_call`` items are rewritten like ``function_call`` ones;
* a body without ``input`` is refused by :func:`validate_streaming_responses_params` (as the
  reference's params model does) unless ``require_input=False``, which the HTTP adapters pass:
  a proxy forwards it and lets the upstream answer (``previous_response_id`` / ``prompt``);
* nothing is deep-copied up front: the cleaned body is built new and shares untouched nested
  values with the input; only items that change are copied. The input is never mutated.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import typing_extensions
from pydantic import BaseModel, ValidationError

from aiostream_synth._dialects.responses.namespaces import (
    NAMESPACE_DELIMITER,
    NAMESPACED_CALL_TYPES,
    NamespaceMap,
    Origin,
    flatten_tools,
)
from aiostream_synth._dialects.responses.replay import normalize_replay_item
from aiostream_synth._params.models import ResponsesParams, is_mirror, param_fields
from aiostream_synth._params.removals import Removals
from aiostream_synth._params.validation import member_kinds, validate_params
from aiostream_synth._params.view import attach_views
from aiostream_synth._wire.errors import InvalidRequestError

__all__ = [
    "CLIENT_BOOKKEEPING_FIELDS",
    "CLIENT_EXECUTED_TOOL_TYPES",
    "sanitize_streaming_responses_body",
    "validate_streaming_responses_params",
]

LOG = logging.getLogger("aiostream_synth.responses")

#: Tool types the client executes itself; every other type is "hosted".
CLIENT_EXECUTED_TOOL_TYPES = frozenset({"function", "custom"})
#: Top-level fields clients add for their own bookkeeping (Codex); removed quietly.
CLIENT_BOOKKEEPING_FIELDS = frozenset({"client_metadata"})
_STREAMING_ONLY = ("stream", "stream_options")
_SYSTEM_ROLES = frozenset({"system", "developer"})
#: What a message hoisted into ``instructions`` may have: its text is all that is kept.
_HOISTED_KEYS = frozenset({"role", "type", "content", "id", "status"})
#: Of those, the ones that go with the item (reported, benign: Codex sends an ``id``).
_HOISTED_BOOKKEEPING = ("id", "status")
_HOISTED_PART_KEYS = frozenset({"type", "text"})
_TEXT_PART_TYPES = frozenset({"input_text", "output_text", "text"})


def _str_field(value: Any, key: str) -> str | None:
    """``value[key]`` when ``value`` is a dict and the field is a string, else None.

    Bodies are arbitrary JSON: a ``type`` may be a list, which cannot even be hashed.
    """
    if isinstance(value, dict):
        field = value.get(key)
        if isinstance(field, str):
            return field
    return None


def _describe(value: Any) -> str:
    if isinstance(value, dict):
        kind = value.get("type")
        name = value.get("name")
        return f"type={kind!r}" + (f" name={name!r}" if name is not None else "")
    return f"a {type(value).__name__}"


def _kept_tools(
    tools: list[tuple[Any, Origin]],
    kinds: frozenset[str] | None,
    removals: Removals,
    drop_custom: bool,
    drop_hosted: bool,
) -> list[tuple[Any, Origin]]:
    """The tools that stay: not of a ``type`` the params model does not know (``kinds``), not
    removed by the drop options. Every removal is recorded at its client path."""
    kept: list[tuple[Any, Origin]] = []
    for tool, origin in tools:
        kind = tool.get("type") if isinstance(tool, dict) else None
        if not isinstance(kind, str):
            kind = None
        if kind is not None and kinds is not None and kind not in kinds:
            removals.add_at("tools", origin, f"unknown tool type {kind!r}")
        elif drop_custom and kind == "custom":
            reason = "custom tool, dropped by configuration (drop_custom_tools)"
            removals.add_at("tools", origin, reason)
        elif drop_hosted and kind not in CLIENT_EXECUTED_TOOL_TYPES:
            reason = f"hosted tool {kind!r} the backend cannot serve (drop_hosted_tools)"
            removals.add_at("tools", origin, reason)
        else:
            kept.append((tool, origin))
    return kept


def _text_only(item: dict[str, Any]) -> str | None:
    """The text of a message whose content is all text, or None when hoisting it into
    ``instructions`` would lose something (an image, a file, a malformed part, a key other
    than the message's role, type, content, id and status or a part's type and text)."""
    if not item.keys() <= _HOISTED_KEYS:
        return None
    content = item.get("content")
    if isinstance(content, str):
        return content
    if content is None:
        return ""
    if not isinstance(content, list):
        return None
    texts: list[str] = []
    for part in content:
        if not (
            isinstance(part, dict)
            and _str_field(part, "type") in _TEXT_PART_TYPES
            and part.keys() <= _HOISTED_PART_KEYS
        ):
            return None
        text = part.get("text")
        if text is not None and not isinstance(text, str):
            return None
        texts.append(text or "")
    return "".join(texts)


def _is_system_like(item: Any) -> bool:
    return (
        isinstance(item, dict)
        and (item.get("type") is None or _str_field(item, "type") == "message")
        and _str_field(item, "role") in _SYSTEM_ROLES
    )


def _flat_call(item: dict[str, Any]) -> dict[str, Any]:
    flat = {k: v for k, v in item.items() if k != "namespace"}
    flat["name"] = f"{item['namespace']}{NAMESPACE_DELIMITER}{item.get('name')!s}"
    return flat


def _hoist_instructions(
    cleaned: dict[str, Any], items: list[tuple[Any, Origin]], removals: Removals
) -> list[tuple[Any, Origin]]:
    existing = cleaned.get("instructions")
    if existing is not None and not isinstance(existing, str):
        return items  # a non-string instructions value disables hoisting
    texts: list[str] = []
    start = 0
    while start < len(items) and _is_system_like(items[start][0]):
        text = _text_only(items[start][0])
        if text is None:
            break
        texts.append(text)
        item, origin = items[start]
        for key in _HOISTED_BOOKKEEPING:
            if key in item:
                where = ("input", origin) if isinstance(origin, int) else origin
                removals.add(
                    (*where, key), "went with its message, hoisted into instructions", benign=True
                )
        start += 1
    if start:
        joined = "\n\n".join(text for text in [existing or "", *texts] if text)
        if joined:
            cleaned["instructions"] = joined
    return items[start:]


def _input_items(
    items: list[Any],
    cleaned: dict[str, Any],
    ns_map: NamespaceMap,
    model: type[BaseModel],
    removals: Removals,
    options: tuple[bool, bool, bool],
) -> list[tuple[Any, Origin]]:
    drop_custom, drop_hosted, hoist_custom = options
    kinds = member_kinds(model, "input")
    carried: list[tuple[Any, Origin]] = []
    located: list[tuple[Any, Origin]] = []
    for index, item in enumerate(items):
        if isinstance(item, dict):
            kind = item.get("type")
            if not isinstance(kind, str):
                kind = None
            if kind == "additional_tools" and isinstance(item.get("tools"), (list, type(None))):
                flat, carrier_map = flatten_tools(
                    item.get("tools"), ("input", index, "tools"), removals=removals
                )
                ns_map.update(carrier_map)
                carried.extend(flat)
                for key in item:
                    if key not in _carrier_keys():
                        removals.add(("input", index, key), "unknown key")
                continue
            if kind is not None and kinds is not None and kind not in kinds:
                removals.add(("input", index), f"unknown input item type {kind!r}")
                continue
            if kind in NAMESPACED_CALL_TYPES and item.get("namespace"):
                item = _flat_call(item)
            if kind == "reasoning" or item.get("role") == "assistant":
                item = normalize_replay_item(item)
        located.append((item, index))
    if carried:
        _hoist_carrier_tools(
            cleaned, carried, model, removals, drop_custom, drop_hosted, hoist_custom
        )
    return _hoist_instructions(cleaned, located, removals)


@functools.cache
def _carrier_keys() -> frozenset[str]:
    """The keys of an ``additional_tools`` item, per the installed openai SDK: its tools are
    hoisted, its ``role`` / ``id`` go with the item; any other key is newer than the SDK."""
    try:
        from openai.types.responses.response_input_item_param import AdditionalTools
    except ImportError:  # pragma: no cover - an openai without carrier items
        return frozenset({"type", "role", "tools", "id"})
    return frozenset(typing_extensions.get_type_hints(AdditionalTools))


def _hoist_carrier_tools(
    cleaned: dict[str, Any],
    carried: list[tuple[Any, Origin]],
    model: type[BaseModel],
    removals: Removals,
    drop_custom: bool,
    drop_hosted: bool,
    hoist_custom: bool,
) -> None:
    wanted = {"function", "custom"} if hoist_custom else {"function"}
    by_type: list[tuple[Any, Origin]] = []
    for tool, path in carried:
        if _str_field(tool, "type") in wanted:
            by_type.append((tool, path))
        else:
            reason = f"additional_tools entry {_describe(tool)}: the backend can only express function calls"
            removals.add_at("tools", path, reason)
    usable = _kept_tools(by_type, member_kinds(model, "tools"), removals, drop_custom, drop_hosted)
    if usable:
        existing = cleaned.get("tools")
        cleaned["tools"] = [
            *(existing if isinstance(existing, list) else ()),
            *(t for t, _ in usable),
        ]
        origins = removals.origins.setdefault("tools", list(range(len(existing or ()))))
        origins.extend(path for _, path in usable)


def sanitize_streaming_responses_body(
    body: dict[str, Any],
    drop_custom_tools: bool = False,
    drop_hosted_tools: bool = False,
    hoist_carrier_custom_tools: bool = False,
    *,
    params_model: type[BaseModel] = ResponsesParams,
    removals: Removals | None = None,
) -> tuple[dict[str, Any], NamespaceMap]:
    """Map a streaming Responses body onto the strict non-streaming params shape.

    Returns ``(cleaned, ns_map)``; ``ns_map`` restores namespaced call names on the way back
    (:func:`restore_namespace_tool_calls`). Never raises for any JSON value inside a dict body:
    what is wrong is left for :func:`validate_streaming_responses_params` to report. Every
    removal is recorded in ``removals`` when one is given, else logged in one record.
    """
    if not isinstance(body, dict):
        raise InvalidRequestError(
            "responses request body", (), f"expected a JSON object, got {type(body).__name__}"
        )
    report = Removals() if removals is None else removals
    cleaned = {k: v for k, v in body.items() if k not in _STREAMING_ONLY}
    ns_map: NamespaceMap = {}

    tools = cleaned.get("tools", ())
    if "tools" in cleaned and (tools is None or isinstance(tools, list)):
        flat, ns_map = flatten_tools(tools, removals=report)
        kinds = member_kinds(params_model, "tools")
        kept = _kept_tools(flat, kinds, report, drop_custom_tools, drop_hosted_tools)
        cleaned["tools"] = [tool for tool, _ in kept]
        report.origins["tools"] = [path for _, path in kept]

    items = cleaned.get("input")
    if isinstance(items, list):
        options = (drop_custom_tools, drop_hosted_tools, hoist_carrier_custom_tools)
        located = _input_items(items, cleaned, ns_map, params_model, report, options)
        cleaned["input"] = [item for item, _ in located]
        report.origins["input"] = [path for _, path in located]

    fields = param_fields(params_model)
    for key in [key for key in cleaned if key not in fields]:
        del cleaned[key]
        report.add((key,), "not a request parameter", benign=key in CLIENT_BOOKKEEPING_FIELDS)
    if removals is None:
        report.log(LOG, "responses request")
    return cleaned, ns_map


def _is_replay_id(member: dict[str, Any], key: str) -> bool:
    """A history item's ``id`` the SDK's input types do not model (Codex sends one on every
    message): reported, but not worth a WARNING."""
    return key == "id"


def missing_key(model: type[BaseModel], body: dict[str, Any], key: str) -> ValidationError:
    """pydantic's own error for a required top-level ``key`` that ``body`` lacks."""
    return ValidationError.from_exception_data(
        model.__name__, [{"type": "missing", "loc": (key,), "input": body}]
    )


def validate_streaming_responses_params(
    body: dict[str, Any],
    *,
    params_model: type[BaseModel] = ResponsesParams,
    require_input: bool = True,
    removals: Removals | None = None,
) -> BaseModel:
    """Validate a sanitized body against the strict params model (decision P10).

    Unknown keys, including those inside union members such as a tool spec or an input item,
    are pruned (recorded in ``removals``, or logged in one record without it); a missing key is
    never an error below the top level; any other error is raised as pydantic's
    :class:`ValidationError`, locations intact, for an HTTP layer to answer 400 naming the
    parameter. ``require_input`` (default, as the reference) refuses a body without ``input``.

    With our params model, object fields give attribute access typed by the SDK's types
    (``params.input[0].type``); their values stay the JSON the backend is sent. The input is
    never mutated.
    """
    if require_input and "input" not in body:
        raise missing_key(params_model, body, "input")
    report = Removals() if removals is None else removals
    model = validate_params(
        params_model, body, report, member_fields=("tools", "input"), benign=_is_replay_id
    )
    if removals is None:
        report.log(LOG, "responses request")
    if is_mirror(type(model)):
        attach_views(model)
    return model
