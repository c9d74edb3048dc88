"""What the bridge tests share: the chat params validator, Codex's apply_patch tool, and the invariants every converted chat history keeps."""

from __future__ import annotations

from typing import Any

from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from pydantic import TypeAdapter

CHAT_PARAMS: TypeAdapter[Any] = TypeAdapter(CompletionCreateParamsNonStreaming)


SCHEMA = {"type": "object", "properties": {"cmd": {"type": "string"}}, "required": ["cmd"]}


PATCH = "*** Begin Patch\n*** Add File: hello.txt\n+hi\n*** End Patch\n"


APPLY_PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "description": "Use the `apply_patch` tool to edit files",
    "format": {
        "type": "grammar",
        "syntax": "lark",
        "definition": "start: begin_patch hunk+ end_patch",
    },
}


def invariants(messages: list[dict[str, Any]]) -> None:
    """each assistant message with tool_calls is followed by exactly one tool message per
    call id, in call order; no tool message anywhere else; at most one system message, at 0;
    no developer role."""
    roles = [m["role"] for m in messages]
    assert "developer" not in roles
    assert roles.count("system") <= 1
    assert "system" not in roles[1:]
    k = 0
    while k < len(messages):
        message = messages[k]
        assert message["role"] != "tool", f"stray tool message at {k}: {messages}"
        k += 1
        calls = message.get("tool_calls") or []
        for call in calls:
            assert k < len(messages), "a call without its tool message"
            follower = messages[k]
            assert follower["role"] == "tool"
            assert follower["tool_call_id"] == call["id"]
            k += 1
