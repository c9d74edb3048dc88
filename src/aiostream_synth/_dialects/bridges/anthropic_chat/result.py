"""A chat completion as the Anthropic ``Message`` an Anthropic client expects."""

from __future__ import annotations

import logging
import re
from typing import Any

import orjson

from aiostream_synth._dialects.bridges.anthropic_chat.request import AnthropicChatContext
from aiostream_synth._dialects.bridges.chat_reasoning import extract_reasoning
from aiostream_synth._dialects.bridges.failures import upstream_result_failure
from aiostream_synth._dialects.bridges.shapes import count, obj, text_of
from aiostream_synth._wire.coerce import as_json_dict
from aiostream_synth._wire.errors import InvalidResultError
from aiostream_synth._wire.ids import random_hex

__all__ = ["chat_to_anthropic_result"]

LOG = logging.getLogger("aiostream_synth.bridge")
_WHAT = "chat completion from the upstream"
_ID_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
_STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}


def _input(arguments: Any) -> dict[str, Any]:
    if isinstance(arguments, dict):
        return arguments
    if isinstance(arguments, str) and arguments:
        try:
            parsed = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            LOG.error("bridge: tool call arguments are not JSON; sent as {}: %.200r", arguments)
            return {}
        if isinstance(parsed, dict):
            return parsed
    return {}


def chat_to_anthropic_result(completion: Any, ctx: AnthropicChatContext) -> dict[str, Any]:
    """The Anthropic ``Message`` (a dict) for the upstream's chat completion."""
    data = as_json_dict(completion, InvalidResultError, _WHAT)
    if data.get("error"):
        error = data["error"]
        message = error.get("message") if isinstance(error, dict) else str(error)
        raise upstream_result_failure(f"the upstream answered with an error: {message}")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise upstream_result_failure("the upstream's answer has no choices")
    choice = choices[0]
    message = choice.get("message")
    if not isinstance(message, dict):
        raise InvalidResultError(_WHAT, ("choices", 0, "message"), "expected a message object")
    reason = choice.get("finish_reason")
    if reason == "error":
        raise upstream_result_failure("the upstream's generation failed (finish_reason 'error')")
    reasoning, text = extract_reasoning(
        message, text_of(message.get("content")), ctx.options.think_tags
    )
    content: list[dict[str, Any]] = []
    if reasoning:
        content.append({"type": "thinking", "thinking": reasoning, "signature": ""})
    refusal = message.get("refusal")
    if isinstance(refusal, str) and refusal:
        text = f"{text}{refusal}"
    if text:
        content.append({"type": "text", "text": text})
    used: set[str] = set()
    for call in message.get("tool_calls") or ():
        if not isinstance(call, dict):
            continue
        function = obj(call.get("function"))
        raw = _ID_UNSAFE.sub("_", str(call.get("id") or ""))
        call_id = raw if raw and raw not in used else "toolu_" + random_hex(24)
        used.add(call_id)
        name = ctx.names.original(str(function.get("name") or ""), ())
        content.append(
            {
                "type": "tool_use",
                "id": call_id,
                "name": name,
                "input": _input(function.get("arguments")),
            }
        )
    stop_reason = _STOP_REASONS.get(reason, "end_turn") if isinstance(reason, str) else "end_turn"
    if any(block["type"] == "tool_use" for block in content) and stop_reason == "end_turn":
        stop_reason = "tool_use"
    usage = obj(data.get("usage"))
    details = obj(usage.get("prompt_tokens_details"))
    cached = count(details.get("cached_tokens"))
    prompt = count(usage.get("prompt_tokens"))
    backend_id = _ID_UNSAFE.sub("_", str(data.get("id") or random_hex()))
    return {
        "id": backend_id if backend_id.startswith("msg_") else "msg_" + backend_id,
        "type": "message",
        "role": "assistant",
        "model": ctx.model if ctx.model is not None else data.get("model", ""),
        "content": content,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {
            "input_tokens": max(prompt - cached, 0),
            "output_tokens": count(usage.get("completion_tokens")),
            "cache_read_input_tokens": cached,
            "cache_creation_input_tokens": 0,
        },
    }
