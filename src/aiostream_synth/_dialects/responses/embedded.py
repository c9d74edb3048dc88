"""How ``serve``'s embedded model reads a Responses request and shapes its answer."""

from __future__ import annotations

import time
from typing import Any

from aiostream_synth._dialects.base import TOOL_KINDS, EmbeddedAnswer, EmbeddedTool
from aiostream_synth._dialects.bridges.shapes import text_of

__all__ = ["RESPONSES_EMBEDDED"]

_TEXT_PARTS = ("text", "input_text", "output_text")
_TOOL_RESULTS = frozenset({"function_call_output", "custom_tool_call_output"})


class ResponsesEmbedded:
    """See :class:`aiostream_synth._dialects.base.EmbeddedReplies`."""

    def prompt(self, params: dict[str, Any]) -> tuple[str, str | None]:
        items = params.get("input")
        if isinstance(items, str):
            return items, None
        items = [i for i in items or () if isinstance(i, dict)]
        if items and items[-1].get("type") in _TOOL_RESULTS:
            output = items[-1].get("output")
            return "", output if isinstance(output, str) else str(output)
        users = [i for i in items if i.get("role") == "user" and i.get("type") in (None, "message")]
        return (text_of(users[-1].get("content"), _TEXT_PARTS) if users else ""), None

    def tools(self, params: dict[str, Any]) -> list[EmbeddedTool]:
        found = []
        for tool in params.get("tools") or ():
            kind = TOOL_KINDS.get(tool.get("type")) if isinstance(tool, dict) else None
            if kind is not None and isinstance(tool.get("name"), str):
                found.append(EmbeddedTool(tool["name"], kind, tool.get("parameters")))
        return found

    def reply(self, answer: EmbeddedAnswer) -> dict[str, Any]:
        key, call = answer.key, answer.call
        output: list[dict[str, Any]] = []
        if answer.reasoning:
            summary = [{"type": "summary_text", "text": f"The user said: {answer.prompt}"}]
            output.append({"type": "reasoning", "id": f"rs_{key}", "summary": summary})
        if call is not None and call.kind == "custom":
            output.append(
                {
                    "type": "custom_tool_call",
                    "id": f"ctc_{key}",
                    "call_id": f"call_{call.id}",
                    "name": call.name,
                    "input": call.arguments,
                }
            )
        elif call is not None:
            output.append(
                {
                    "type": "function_call",
                    "id": f"fc_{key}",
                    "call_id": f"call_{call.id}",
                    "name": call.name,
                    "arguments": call.arguments,
                    "status": "completed",
                }
            )
        else:
            text = {"type": "output_text", "text": answer.text, "annotations": []}
            output.append(
                {
                    "type": "message",
                    "id": f"msg_{key}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [text],
                }
            )
        p, c = answer.prompt_tokens, answer.completion_tokens
        nulls = answer.usage_nulls
        incomplete = answer.incomplete
        return {
            "id": f"resp_{key}",
            "object": "response",
            "created_at": int(time.time()),
            "model": answer.model,
            "status": "incomplete" if incomplete else "completed",
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "error": None,
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": {
                "input_tokens": p,
                "output_tokens": c,
                "total_tokens": p + c,
                "input_tokens_details": {"cached_tokens": None if nulls else 0},
                "output_tokens_details": {"reasoning_tokens": None if nulls else 0},
            },
            # When the answer was ready (after any [delay]): lets load tests time the rest.
            "completed_at": None if incomplete else time.time(),
        }


RESPONSES_EMBEDDED = ResponsesEmbedded()
