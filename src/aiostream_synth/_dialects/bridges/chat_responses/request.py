"""A Chat Completions request as a Responses request: :func:`chat_to_responses_request`.

Leading system / developer messages become ``instructions``; tool calls and tool messages
become ``function_call`` / ``function_call_output`` items (custom ones by the call's kind); a
function tool without ``strict`` is sent with ``strict: false`` (the Responses API reads an
omitted ``strict`` as strict mode, and would rewrite the schema). ``store`` is always false:
the bridge keeps no state. ``n > 1`` and audio output have no Responses equivalent (400).
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import orjson

from aiostream_synth._dialects.bridges.options import BridgeOptions
from aiostream_synth._dialects.bridges.shapes import elements, obj, text_of
from aiostream_synth._params.removals import Removals
from aiostream_synth._wire.errors import BridgeError

__all__ = ["ChatResponsesContext", "chat_to_responses_request"]

LOG = logging.getLogger("aiostream_synth.bridge")

_DROPPED_SAMPLING = (
    "stop",
    "presence_penalty",
    "frequency_penalty",
    "logit_bias",
    "seed",
    "prediction",
)
_COPIED = (
    "temperature",
    "top_p",
    "metadata",
    "user",
    "safety_identifier",
    "prompt_cache_key",
    "service_tier",
    "top_logprobs",
)
_TEXT_OR_REFUSAL = ("text", "refusal")
_MAPPED = frozenset(
    {
        "model",
        "messages",
        "tools",
        "tool_choice",
        "functions",
        "function_call",
        "parallel_tool_calls",
        "max_tokens",
        "max_completion_tokens",
        "reasoning_effort",
        "verbosity",
        "response_format",
        "logprobs",
        "store",
        "web_search_options",
        "n",
        "audio",
        "modalities",
        "stream",
        "stream_options",
        *_COPIED,
        *_DROPPED_SAMPLING,
    }
)


@dataclass(slots=True, kw_only=True)
class ChatResponsesContext:
    """What the answer's conversion needs: the client's model, its custom tools."""

    options: BridgeOptions
    model: Any = None
    custom_names: set[str] = field(default_factory=set)
    include_usage: bool = False


def _user_parts(content: Any, index: int, removals: Removals) -> Any:
    if isinstance(content, str):
        return content
    parts: list[dict[str, Any]] = []
    for k, part in enumerate(content if isinstance(content, list) else ()):
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "text":
            parts.append({"type": "input_text", "text": str(part.get("text") or "")})
        elif kind == "image_url":
            image = obj(part.get("image_url"))
            parts.append(
                {
                    "type": "input_image",
                    "image_url": image.get("url"),
                    "detail": image.get("detail") or "auto",
                }
            )
        elif kind == "file":
            file = obj(part.get("file"))
            parts.append(
                {"type": "input_file", **{k2: v for k2, v in file.items() if v is not None}}
            )
        else:
            removals.add(
                ("messages", index, "content", k), f"{kind!r} part: no Responses input type"
            )
    return parts


def _tool(
    tool: Any, index: int, ctx: ChatResponsesContext, removals: Removals
) -> dict[str, Any] | None:
    if not isinstance(tool, dict):
        return None
    if tool.get("type") == "custom" and isinstance(tool.get("custom"), dict):
        custom = tool["custom"]
        ctx.custom_names.add(str(custom.get("name")))
        out: dict[str, Any] = {"type": "custom", "name": custom.get("name")}
        if custom.get("description"):
            out["description"] = custom["description"]
        format_ = custom.get("format")
        if isinstance(format_, dict) and format_.get("type") == "grammar":
            grammar = obj(format_.get("grammar"))
            out["format"] = {
                "type": "grammar",
                "definition": grammar.get("definition"),
                "syntax": grammar.get("syntax"),
            }
        elif isinstance(format_, dict):
            out["format"] = {"type": "text"}
        return out
    function = tool.get("function") if isinstance(tool.get("function"), dict) else None
    if function is None:
        removals.add(("tools", index), f"{tool.get('type')!r} tool: no Responses equivalent")
        return None
    out = {"type": "function", "name": function.get("name")}
    if function.get("description"):
        out["description"] = function["description"]
    out["parameters"] = function.get("parameters") or {"type": "object", "properties": {}}
    out["strict"] = function.get("strict") is True
    return out


def _tool_choice(choice: Any) -> Any:
    if isinstance(choice, str) or choice is None:
        return choice
    if not isinstance(choice, dict):
        return None
    kind = choice.get("type")
    if kind == "function":
        return {"type": "function", "name": obj(choice.get("function")).get("name")}
    if kind == "custom":
        return {"type": "custom", "name": obj(choice.get("custom")).get("name")}
    if kind == "allowed_tools":
        allowed = choice.get("allowed_tools") or {}
        tools = []
        for tool in allowed.get("tools") or ():
            if isinstance(tool, dict):
                inner = tool.get(tool.get("type") or "function") or {}
                tools.append({"type": tool.get("type") or "function", "name": inner.get("name")})
        return {"type": "allowed_tools", "mode": allowed.get("mode") or "auto", "tools": tools}
    return None


class _Items:
    """The ``input`` items for chat messages after the leading system run."""

    def __init__(self, ctx: ChatResponsesContext, removals: Removals) -> None:
        self.ctx = ctx
        self.removals = removals
        self.items: list[dict[str, Any]] = []
        self.custom_calls: set[str] = set()
        self.legacy_call: str | None = None

    def add(self, message: Any, index: int) -> None:
        if not isinstance(message, dict):
            return
        role = message.get("role")
        content = message.get("content")
        if message.get("name"):
            self.removals.add(("messages", index, "name"), "participant name: no Responses field")
        if role in ("system", "developer"):
            self.items.append(
                {
                    "type": "message",
                    "role": role,
                    "content": text_of(content, _TEXT_OR_REFUSAL, "\n\n"),
                }
            )
        elif role == "user":
            self.items.append(
                {
                    "type": "message",
                    "role": "user",
                    "content": _user_parts(content, index, self.removals),
                }
            )
        elif role == "assistant":
            self._assistant(message, index)
        elif role == "tool":
            call_id = str(message.get("tool_call_id") or "")
            kind = (
                "custom_tool_call_output"
                if call_id in self.custom_calls
                else "function_call_output"
            )
            self.items.append(
                {
                    "type": kind,
                    "call_id": call_id,
                    "output": text_of(content, _TEXT_OR_REFUSAL, "\n"),
                }
            )
        elif role == "function":
            call_id = self.legacy_call or _digest(message)
            self.legacy_call = None
            self.items.append(
                {
                    "type": "function_call_output",
                    "call_id": call_id,
                    "output": text_of(content, _TEXT_OR_REFUSAL, "\n"),
                }
            )
        else:
            self.removals.add(
                ("messages", index), f"message role {role!r}: no Responses equivalent"
            )

    def _assistant(self, message: dict[str, Any], index: int) -> None:
        text = text_of(message.get("content"), _TEXT_OR_REFUSAL)
        refusal = message.get("refusal")
        if isinstance(refusal, str) and refusal:
            text = f"{text}{refusal}"
        for key in ("reasoning_content", "reasoning"):
            if message.get(key):
                self.removals.add(
                    ("messages", index, key),
                    "reasoning from another model cannot be replayed to a Responses upstream",
                    benign=True,
                )
        if text:
            self.items.append({"type": "message", "role": "assistant", "content": text})
        for call in message.get("tool_calls") or ():
            if not isinstance(call, dict):
                continue
            call_id = str(call.get("id") or _digest(call))
            if call.get("type") == "custom" and isinstance(call.get("custom"), dict):
                self.custom_calls.add(call_id)
                custom = call["custom"]
                self.items.append(
                    {
                        "type": "custom_tool_call",
                        "call_id": call_id,
                        "name": custom.get("name"),
                        "input": str(custom.get("input") or ""),
                    }
                )
            else:
                function = obj(call.get("function"))
                self.items.append(
                    {
                        "type": "function_call",
                        "call_id": call_id,
                        "name": function.get("name"),
                        "arguments": str(function.get("arguments") or "{}"),
                    }
                )
        legacy = message.get("function_call")
        if isinstance(legacy, dict):
            self.legacy_call = _digest(legacy)
            self.items.append(
                {
                    "type": "function_call",
                    "call_id": self.legacy_call,
                    "name": legacy.get("name"),
                    "arguments": str(legacy.get("arguments") or "{}"),
                }
            )


def _digest(value: Any) -> str:
    canonical = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    return "call_" + hashlib.sha1(canonical, usedforsecurity=False).hexdigest()[:24]


def _refuse(body: Mapping[str, Any]) -> None:
    n = body.get("n")
    if isinstance(n, int) and n > 1:
        raise BridgeError("n > 1 has no Responses equivalent: ask n times.", param="n")
    modalities = body.get("modalities")
    if body.get("audio") is not None or (isinstance(modalities, list) and "audio" in modalities):
        raise BridgeError("audio output has no Responses equivalent.", param="audio")


def chat_to_responses_request(
    body: Mapping[str, Any],
    options: BridgeOptions | None = None,
    *,
    removals: Removals | None = None,
) -> tuple[dict[str, Any], ChatResponsesContext]:
    """Convert a Chat Completions body to a non-streaming Responses body (raises
    :class:`~aiostream_synth.errors.BridgeError` for ``n > 1`` and audio)."""
    options = options or BridgeOptions()
    report = Removals() if removals is None else removals
    _refuse(body)
    ctx = ChatResponsesContext(options=options, model=body.get("model"))
    model = body.get("model")
    out: dict[str, Any] = {
        "model": options.model_map.get(model, model) if isinstance(model, str) else model
    }
    messages = elements(body.get("messages"))
    leading: list[str] = []
    start = 0
    while (
        start < len(messages)
        and isinstance(messages[start], dict)
        and messages[start].get("role") in ("system", "developer")
    ):
        leading.append(text_of(messages[start].get("content"), _TEXT_OR_REFUSAL, "\n\n"))
        start += 1
    if any(leading):
        out["instructions"] = "\n\n".join(text for text in leading if text)
    items = _Items(ctx, report)
    tools = [_tool(tool, i, ctx, report) for i, tool in enumerate(elements(body.get("tools")))]
    for index in range(start, len(messages)):
        items.add(messages[index], index)
    out["input"] = items.items
    all_tools = [tool for tool in tools if tool is not None]
    for function in elements(body.get("functions")):
        if isinstance(function, dict):
            all_tools.append(
                _tool({"type": "function", "function": function}, 0, ctx, report) or {}
            )
    search = body.get("web_search_options")
    if isinstance(search, dict):
        all_tools.append(
            {"type": "web_search", **{k: v for k, v in search.items() if v is not None}}
        )
    if all_tools:
        out["tools"] = all_tools
    choice = _tool_choice(body.get("tool_choice"))
    legacy_choice = body.get("function_call")
    if choice is None and isinstance(legacy_choice, dict):
        choice = {"type": "function", "name": legacy_choice.get("name")}
    elif choice is None and legacy_choice in ("auto", "none"):
        choice = legacy_choice
    if choice is not None:
        out["tool_choice"] = choice
    if isinstance(body.get("parallel_tool_calls"), bool):
        out["parallel_tool_calls"] = body["parallel_tool_calls"]
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    if limit is not None:
        out["max_output_tokens"] = limit
    reasoning_effort = body.get("reasoning_effort")
    if isinstance(reasoning_effort, str):
        mapped = options.reasoning_effort_map.get(reasoning_effort, reasoning_effort)
        if mapped is not None:
            out["reasoning"] = {"effort": mapped}
    text: dict[str, Any] = {}
    if body.get("verbosity") is not None:
        text["verbosity"] = body["verbosity"]
    response_format = body.get("response_format")
    if isinstance(response_format, dict):
        if response_format.get("type") == "json_object":
            text["format"] = {"type": "json_object"}
        elif response_format.get("type") == "json_schema":
            schema = response_format.get("json_schema") or {}
            text["format"] = {
                "type": "json_schema",
                **{k: v for k, v in schema.items() if v is not None},
            }
    if text:
        out["text"] = text
    if body.get("logprobs") is True:
        out["include"] = ["message.output_text.logprobs"]
    for key in _COPIED:
        if body.get(key) is not None and (key != "top_logprobs" or body.get("logprobs") is True):
            out[key] = body[key]
    for key in _DROPPED_SAMPLING:
        if body.get(key) is not None:
            report.add((key,), "no Responses equivalent")
    for key in body:
        if key not in _MAPPED:
            report.add((key,), "not sent to the Responses upstream")
    out["store"] = False
    out.update(options.upstream_extra_body)
    stream_options = body.get("stream_options")
    ctx.include_usage = (
        isinstance(stream_options, dict) and stream_options.get("include_usage") is True
    )
    if removals is None:
        report.log(LOG, "chat request bridged to responses")
    return out, ctx
