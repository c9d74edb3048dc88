"""An Anthropic ``Message`` as the chat completion a Chat Completions client expects."""

from __future__ import annotations

from typing import Any

import orjson

from aiostream_synth._dialects.bridges.chat_anthropic.request import ChatAnthropicContext
from aiostream_synth._dialects.bridges.failures import upstream_result_failure
from aiostream_synth._dialects.bridges.shapes import count, obj
from aiostream_synth._wire.coerce import as_json_dict
from aiostream_synth._wire.errors import InvalidResultError

__all__ = ["anthropic_to_chat_result"]

_WHAT = "Anthropic message from the upstream"
_FINISH = {
    "end_turn": "stop",
    "stop_sequence": "stop",
    "pause_turn": "stop",
    "max_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_use": "tool_calls",
    "refusal": "content_filter",
}


def anthropic_to_chat_result(message: Any, ctx: ChatAnthropicContext) -> dict[str, Any]:
    """The chat completion (a dict) for the upstream's Anthropic message."""
    data = as_json_dict(message, InvalidResultError, _WHAT)
    if data.get("type") == "error":
        error = obj(data.get("error"))
        raise upstream_result_failure(
            f"the upstream answered with an error: {error.get('message')}"
        )
    content = data.get("content")
    if not isinstance(content, list):
        raise InvalidResultError(_WHAT, ("content",), "expected a list of blocks")
    texts: list[str] = []
    thinking: list[str] = []
    calls: list[dict[str, Any]] = []
    for block in content:
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            texts.append(str(block.get("text") or ""))
        elif block.get("type") == "thinking":
            thinking.append(str(block.get("thinking") or ""))
        elif block.get("type") == "tool_use":
            calls.append(
                {
                    "id": block.get("id"),
                    "type": "function",
                    "function": {
                        "name": block.get("name"),
                        "arguments": orjson.dumps(block.get("input") or {}).decode(),
                    },
                }
            )
    answer: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(texts) if texts or not calls else None,
        "refusal": None,
    }
    if any(thinking):
        answer["reasoning_content"] = "\n\n".join(t for t in thinking if t)
    if calls:
        answer["tool_calls"] = calls
    stop_reason = data.get("stop_reason")
    finish = _FINISH.get(stop_reason, "stop") if isinstance(stop_reason, str) else "stop"
    usage = obj(data.get("usage"))
    cached = count(usage.get("cache_read_input_tokens"))
    prompt = (
        count(usage.get("input_tokens")) + cached + count(usage.get("cache_creation_input_tokens"))
    )
    completion = count(usage.get("output_tokens"))
    return {
        "id": "chatcmpl-" + str(data.get("id") or "").removeprefix("msg_"),
        "object": "chat.completion",
        "created": 0,
        "model": ctx.model if ctx.model is not None else data.get("model", ""),
        "choices": [{"index": 0, "message": answer, "finish_reason": finish, "logprobs": None}],
        "usage": {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": cached},
        },
        "system_fingerprint": None,
    }
