"""How ``serve``'s embedded model reads an Anthropic Messages request and shapes its answer
(Claude Code's ``<system-reminder>`` text blocks are not echoed)."""

from __future__ import annotations

import json
from typing import Any

from aiostream_synth._dialects.base import EmbeddedAnswer, EmbeddedTool
from aiostream_synth._dialects.bridges.shapes import text_of
from aiostream_synth._wire.ids import random_hex

__all__ = ["ANTHROPIC_EMBEDDED"]

_TEXT_PARTS = ("text", "input_text", "output_text")


class AnthropicEmbedded:
    """See :class:`aiostream_synth._dialects.base.EmbeddedReplies`."""

    def prompt(self, params: dict[str, Any]) -> tuple[str, str | None]:
        messages = [m for m in params.get("messages") or () if isinstance(m, dict)]
        if not messages or messages[-1].get("role") != "user":
            return "", None
        content = messages[-1].get("content")
        if isinstance(content, str):
            return content, None
        blocks = [b for b in content or () if isinstance(b, dict)]
        results = [b for b in blocks if b.get("type") == "tool_result"]
        if results:
            return "", text_of(results[-1].get("content"), _TEXT_PARTS)
        texts = [
            b
            for b in blocks
            if b.get("type") == "text"
            and not str(b.get("text", "")).startswith("<system-reminder>")
        ]
        return text_of(texts, _TEXT_PARTS), None

    def tools(self, params: dict[str, Any]) -> list[EmbeddedTool]:
        """Custom tools (``{name, input_schema}``, ``type`` optional); server tools are the
        server's to run."""
        return [
            EmbeddedTool(tool["name"], "function", tool.get("input_schema"))
            for tool in params.get("tools") or ()
            if isinstance(tool, dict)
            and tool.get("type") in (None, "custom")
            and isinstance(tool.get("name"), str)
        ]

    def reply(self, answer: EmbeddedAnswer) -> dict[str, Any]:
        content: list[dict[str, Any]] = []
        if answer.reasoning:
            thinking = f"The user said: {answer.prompt}"
            signature = "sig_" + random_hex(24)
            content.append({"type": "thinking", "thinking": thinking, "signature": signature})
        stop_reason = "max_tokens" if answer.incomplete else "end_turn"
        call = answer.call
        if call is not None:
            arguments = json.loads(call.arguments) if call.kind == "function" else {}
            content.append(
                {
                    "type": "tool_use",
                    "id": f"toolu_{call.id}",
                    "name": call.name,
                    "input": arguments,
                }
            )
            stop_reason = "tool_use"
        else:
            content.append({"type": "text", "text": answer.text})
        nulls = answer.usage_nulls
        return {
            "id": f"msg_{answer.key}",
            "type": "message",
            "role": "assistant",
            "model": answer.model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {
                "input_tokens": answer.prompt_tokens,
                "output_tokens": answer.completion_tokens,
                "cache_creation_input_tokens": None if nulls else 0,
                "cache_read_input_tokens": None if nulls else 0,
            },
        }


ANTHROPIC_EMBEDDED = AnthropicEmbedded()
