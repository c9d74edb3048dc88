"""Responses, request side: a streaming body (the Codex CLI's above all) onto strict non-streaming params.

Steps, in order (protocol.md B-R18..B-R28): drop ``stream`` / ``stream_options``; flatten
namespace tools; keep the tool specs that validate and that the drop options allow; rewrite
replayed namespaced calls to their flat names; lift ``additional_tools`` carriers out of
``input`` into ``tools``; drop input items that do not validate; hoist leading system/developer
messages into ``instructions``; keep only params-model fields. Each dropped tool, item or
carrier batch logs one WARNING naming it.

Deliberate differences from the upstream reference module:

* a tool spec or input item that fails validation only because of keys newer than our params
  types (a Codex message's ``id``, a future tool flag) has those keys pruned (one WARNING each)
  and is kept, instead of being dropped whole;
* namespaced ``custom_tool_call`` items are rewritten like ``function_call`` ones (D8);
* nothing is deep-copied up front: the cleaned body is built new and shares untouched nested
  values with the input; only items that must change are copied. The input is never mutated.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from ._errors import InvalidRequestError
from ._json import json_copy
from ._namespaces import (
    NAMESPACE_DELIMITER,
    NAMESPACED_CALL_TYPES,
    NamespaceMap,
    flatten_namespace_tools,
)
from ._params import ResponsesParams, item_adapter, list_adapter, param_fields
from ._pruning import Loc, delete_path, dotted, plan_from_errors, validate_pruning

__all__ = [
    "CLIENT_EXECUTED_TOOL_TYPES",
    "sanitize_streaming_responses_body",
    "validate_streaming_responses_params",
]

LOG = logging.getLogger("aiostream_synth.responses")

#: Tool types the client executes itself; every other type is "hosted" (B-R02, B-R13).
CLIENT_EXECUTED_TOOL_TYPES = frozenset({"function", "custom"})
_STREAMING_ONLY = ("stream", "stream_options")
_SYSTEM_ROLES = frozenset({"system", "developer"})
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


def _failing_items(adapter: TypeAdapter[Any], items: list[Any]) -> dict[int, list[tuple[Loc, str]]]:
    """The errors of each item that does not validate, found with one call on the whole list."""
    try:
        adapter.validate_python(items)
    except ValidationError as exc:
        bad: dict[int, list[tuple[Loc, str]]] = {}
        for error in exc.errors(include_url=False):
            loc = error["loc"]
            if loc and isinstance(loc[0], int):
                bad.setdefault(loc[0], []).append((tuple(loc[1:]), error["type"]))
        return bad
    return {}


def _validated(
    adapter: TypeAdapter[Any], item: Any, errors: list[tuple[Loc, str]], what: str, index: int
) -> Any | None:
    """A pruned copy of a failing ``item`` if unknown keys were all that was wrong, else None.

    The pruning plan comes from the errors the whole-list validation already reported, so a
    fixable item is validated once more, not re-diagnosed from scratch.
    """
    candidate = json_copy(item)
    for path in plan_from_errors(candidate, errors):
        if delete_path(candidate, path):
            LOG.warning("pruned field %s: not in the params model", dotted((what, index, *path)))
    try:
        validate_pruning(adapter.validate_python, candidate, LOG, prefix=(what, index))
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        LOG.warning(
            "dropped %s %d (%s): does not validate: %s", what, index, _describe(item), first["msg"]
        )
        return None
    return candidate


def _validate_each(model: type[BaseModel], field: str, items: list[Any]) -> list[Any | None]:
    """Per item: itself, a pruned copy, or None (dropped, logged)."""
    adapter = item_adapter(model, field)
    whole = list_adapter(model, field)
    if adapter is None or whole is None:
        return list(items)
    bad = _failing_items(whole, items)
    return [
        _validated(adapter, item, bad[i], field, i) if i in bad else item
        for i, item in enumerate(items)
    ]


def _tool_kept(tool: Any, drop_custom_tools: bool, drop_hosted_tools: bool) -> bool:
    kind = _str_field(tool, "type")
    if drop_custom_tools and kind == "custom":
        LOG.warning("dropped tool %s: custom tools are dropped by configuration", _describe(tool))
        return False
    if drop_hosted_tools and kind not in CLIENT_EXECUTED_TOOL_TYPES:
        LOG.warning(
            "dropped tool %s: hosted tool the backend cannot serve (drop_hosted_tools)",
            _describe(tool),
        )
        return False
    return True


def _usable_tools(
    tools: list[Any], model: type[BaseModel], drop_custom: bool, drop_hosted: bool
) -> list[Any]:
    # Validity first, short-circuiting, so a dropped tool logs exactly once (D18).
    return [
        checked
        for checked in _validate_each(model, "tools", tools)
        if checked is not None and _tool_kept(checked, drop_custom, drop_hosted)
    ]


def _message_text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(
            part.get("text") or ""
            for part in content
            if isinstance(part, dict)
            and _str_field(part, "type") in _TEXT_PART_TYPES
            and isinstance(part.get("text") or "", str)
        )
    return ""


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


def _hoist_instructions(cleaned: dict[str, Any], items: list[Any]) -> list[Any]:
    existing = cleaned.get("instructions")
    if existing is not None and not isinstance(existing, str):
        return items  # D22: a non-string instructions value disables hoisting
    texts: list[str] = []
    start = 0
    while start < len(items) and _is_system_like(items[start]):
        texts.append(_message_text(items[start]))
        start += 1
    if start:
        joined = "\n\n".join(text for text in [existing or "", *texts] if text)
        if joined:
            cleaned["instructions"] = joined
    return items[start:]


def sanitize_streaming_responses_body(
    body: dict[str, Any],
    drop_custom_tools: bool = False,
    drop_hosted_tools: bool = False,
    hoist_carrier_custom_tools: bool = False,
    *,
    params_model: type[BaseModel] = ResponsesParams,
) -> tuple[dict[str, Any], NamespaceMap]:
    """Map a streaming Responses body onto the strict non-streaming params shape.

    Returns ``(cleaned, ns_map)``; ``ns_map`` restores namespaced call names on the way back
    (:func:`restore_namespace_tool_calls`). Never raises for any JSON value inside a dict body:
    what cannot be fixed is dropped with a WARNING, or left for validation to report.
    """
    if not isinstance(body, dict):
        raise InvalidRequestError(
            "responses request body", (), f"expected a JSON object, got {type(body).__name__}"
        )
    cleaned = {k: v for k, v in body.items() if k not in _STREAMING_ONLY}
    ns_map: NamespaceMap = {}

    tools = cleaned.get("tools", ())
    if "tools" in cleaned and (tools is None or isinstance(tools, list)):
        flat, ns_map = flatten_namespace_tools(tools)
        cleaned["tools"] = _usable_tools(flat, params_model, drop_custom_tools, drop_hosted_tools)

    items = cleaned.get("input")
    if isinstance(items, list):
        carried: list[Any] = []
        candidates: list[Any] = []
        for item in items:
            if _str_field(item, "type") == "additional_tools":
                extra = item.get("tools")
                if isinstance(extra, list):
                    carried.extend(extra)
                elif extra is not None:
                    LOG.warning("dropped additional_tools carrier: its tools are not a list")
                continue
            if _str_field(item, "type") in NAMESPACED_CALL_TYPES and item.get("namespace"):
                item = _flat_call(item)
            candidates.append(item)
        kept = [
            item for item in _validate_each(params_model, "input", candidates) if item is not None
        ]
        if carried:
            _hoist_carrier_tools(
                cleaned,
                carried,
                ns_map,
                params_model,
                drop_custom_tools,
                drop_hosted_tools,
                hoist_carrier_custom_tools,
            )
        cleaned["input"] = _hoist_instructions(cleaned, kept)

    fields = param_fields(params_model)
    dropped = sorted(key for key in cleaned if key not in fields)
    if dropped:
        LOG.debug("dropped responses request fields not in the params model: %s", dropped)
        for key in dropped:
            del cleaned[key]
    return cleaned, ns_map


def _hoist_carrier_tools(
    cleaned: dict[str, Any],
    carried: list[Any],
    ns_map: NamespaceMap,
    model: type[BaseModel],
    drop_custom: bool,
    drop_hosted: bool,
    hoist_custom: bool,
) -> None:
    flat, carrier_map = flatten_namespace_tools(carried)
    ns_map.update(carrier_map)
    wanted = {"function", "custom"} if hoist_custom else {"function"}
    by_type = [tool for tool in flat if _str_field(tool, "type") in wanted]
    rejected = [tool for tool in flat if _str_field(tool, "type") not in wanted]
    if rejected:
        names = [
            str(t.get("name") or t.get("type")) if isinstance(t, dict) else type(t).__name__
            for t in rejected
        ]
        LOG.warning(
            "dropped additional_tools entries %s: the backend can only express function calls",
            names,
        )
    usable = _usable_tools(by_type, model, drop_custom, drop_hosted)
    if usable:
        existing = cleaned.get("tools")
        cleaned["tools"] = [*(existing if isinstance(existing, list) else ()), *usable]


def validate_streaming_responses_params(
    body: dict[str, Any], *, params_model: type[BaseModel] = ResponsesParams
) -> BaseModel:
    """Validate a sanitized body against the strict params model, pruning unknown keys.

    Unknown keys (``extra_forbidden``), including those inside union members such as a tool
    spec or an input item, are removed with one WARNING each (dotted path) and validation is
    retried. Any other error is raised as pydantic's :class:`ValidationError`, locations
    intact, so an HTTP layer can answer 400 naming the parameter. The input is never mutated.
    """
    try:
        return params_model.model_validate(body)
    except ValidationError:
        pass
    candidate = json_copy(body)
    return validate_pruning(params_model.model_validate, candidate, LOG)
