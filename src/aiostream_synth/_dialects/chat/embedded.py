"""How ``serve``'s embedded model reads a Chat Completions request and shapes its answer."""

from __future__ import annotations

import time
from typing import Any

from aiostream_synth._dialects.base import TOOL_KINDS, EmbeddedAnswer, EmbeddedTool
from aiostream_synth._dialects.bridges.shapes import text_of

__all__ = ["CHAT_EMBEDDED"]

_TEXT_PARTS = ("text", "input_text", "output_text")


class ChatEmbedded:
    """See :class:`aiostream_synth._dialects.base.EmbeddedReplies`."""

    def prompt(self, params: dict[str, Any]) -> tuple[str, str | None]:
        messages = [m for m in params.get("messages") or () if isinstance(m, dict)]
        if messages and messages[-1].get("role") == "tool":
            return "", text_of(messages[-1].get("content"), _TEXT_PARTS)
        users = [m for m in messages if m.get("role") == "user"]
        return (text_of(users[-1].get("content"), _TEXT_PARTS) if users else ""), None

    def tools(self, params: dict[str, Any]) -> list[EmbeddedTool]:
        found = []
        for tool in params.get("tools") or ():
            kind = TOOL_KINDS.get(tool.get("type")) if isinstance(tool, dict) else None
            if kind is None:
                continue
            spec = tool.get(kind)
            if isinstance(spec, dict) and isinstance(spec.get("name"), str):
                found.append(EmbeddedTool(spec["name"], kind, spec.get("parameters")))
        return found

    def reply(self, answer: EmbeddedAnswer) -> dict[str, Any]:
        message: dict[str, Any] = {"role": "assistant", "content": answer.text}
        finish = "length" if answer.incomplete else "stop"
        if answer.reasoning:
            message["reasoning_content"] = f"The user said: {answer.prompt}"
        call = answer.call
        if call is not None:
            message["content"] = None
            if call.kind == "custom":
                made = {"name": call.name, "input": call.arguments}
                message["tool_calls"] = [
                    {"id": f"call_{call.id}", "type": "custom", "custom": made}
                ]
            else:
                made = {"name": call.name, "arguments": call.arguments}
                message["tool_calls"] = [
                    {"id": f"call_{call.id}", "type": "function", "function": made}
                ]
            finish = "tool_calls"
        p, c = answer.prompt_tokens, answer.completion_tokens
        usage: dict[str, Any] = {"prompt_tokens": p, "completion_tokens": c, "total_tokens": p + c}
        if answer.usage_nulls:
            usage["prompt_tokens_details"] = {"cached_tokens": None}
            usage["completion_tokens_details"] = {"reasoning_tokens": None}
        return {
            "id": f"chatcmpl-{answer.key}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": answer.model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
            ],
            "usage": usage,
        }


CHAT_EMBEDDED = ChatEmbedded()
