"""A deterministic benchmark corpus: the same shapes for both dialects."""

from __future__ import annotations

import copy
import json
import pathlib
from typing import Any

_WORDS = [
    "the",
    "quick",
    "brown",
    "fox",
    "jumps",
    "over",
    "the",
    "lazy",
    "dog",
    "while",
    "agents",
    "wait",
    "for",
    "their",
    "backend",
]
_NON_ASCII = ["Grüße", "aus", "Köln", "—", "東京の天気は晴れ", "☀️", "Привет", "мир"]


def _text(n: int, words: list[str] = _WORDS) -> str:
    out: list[str] = []
    size = 0
    i = 0
    while size < n:
        word = words[i % len(words)]
        out.append(word)
        size += len(word) + 1
        i += 1
    return " ".join(out)[:n]


def _call(k: int) -> dict[str, Any]:
    return {
        "id": f"call_{k}",
        "type": "function",
        "function": {
            "name": f"tool_{k}",
            "arguments": json.dumps({"path": f"/src/file_{k}.py", "line": k}),
        },
    }


def chat_completion(
    content: str, *, reasoning: str | None = None, calls: int = 0, n: int = 1
) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": content}
    if reasoning:
        message["reasoning_content"] = reasoning
    if calls:
        message["tool_calls"] = [_call(k) for k in range(calls)]
    return {
        "id": "chatcmpl-bench",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "bench-model",
        "choices": [
            {
                "index": i,
                "message": copy.deepcopy(message),
                "finish_reason": "tool_calls" if calls else "stop",
            }
            for i in range(n)
        ],
        "usage": {"prompt_tokens": 1200, "completion_tokens": 300, "total_tokens": 1500},
    }


def responses_result(
    content: str, *, reasoning: str | None = None, calls: int = 0, n: int = 1
) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    for i in range(n):
        if reasoning:
            output.append(
                {
                    "type": "reasoning",
                    "id": f"rs_{i}",
                    "summary": [{"type": "summary_text", "text": reasoning}],
                }
            )
        output.append(
            {
                "type": "message",
                "id": f"msg_{i}",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": content, "annotations": []}],
            }
        )
        for k in range(calls):
            output.append(
                {
                    "type": "function_call",
                    "id": f"fc_{i}_{k}",
                    "call_id": f"call_{k}",
                    "name": f"tool_{k}",
                    "arguments": json.dumps({"path": f"/src/file_{k}.py", "line": k}),
                    "status": "completed",
                }
            )
    return {
        "id": "resp_bench",
        "object": "response",
        "created_at": 1700000000,
        "model": "bench-model",
        "status": "completed",
        "output": output,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {"input_tokens": 1200, "output_tokens": 300, "total_tokens": 1500},
    }


def anthropic_message(
    content: str, *, reasoning: str | None = None, calls: int = 0, n: int = 1
) -> dict[str, Any]:
    """The same answer as an Anthropic Message (``n`` answers become ``n`` text blocks: the
    API has no choices)."""
    blocks: list[dict[str, Any]] = []
    for i in range(n):
        if reasoning:
            blocks.append({"type": "thinking", "thinking": reasoning, "signature": f"sig_{i}"})
        blocks.append({"type": "text", "text": content})
        blocks.extend(
            {
                "type": "tool_use",
                "id": f"toolu_{i}_{k}",
                "name": f"tool_{k}",
                "input": {"path": f"/src/file_{k}.py", "line": k},
            }
            for k in range(calls)
        )
    return {
        "id": "msg_bench",
        "type": "message",
        "role": "assistant",
        "model": "bench-model",
        "content": blocks,
        "stop_reason": "tool_use" if calls else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 1200, "output_tokens": 300},
    }


SHAPES: dict[str, dict[str, Any]] = {
    "small": {"content": "Hello! How can I help you today?"},
    "medium": {"content": _text(2048), "reasoning": _text(1024)},
    "large 64KB": {"content": _text(65536)},
    "20 tool calls": {"content": "Running the tools.", "calls": 20},
    "n=4": {"content": _text(512), "n": 4},
    "non-ASCII": {"content": _text(2048, _NON_ASCII), "reasoning": _text(512, _NON_ASCII)},
}

FIXTURE = (
    pathlib.Path(__file__).resolve().parents[1]
    / "tests"
    / "fixtures"
    / "codex-0.171.0-request-text-turn.json"
)


def codex_request(target_bytes: int | None = None) -> dict[str, Any]:
    """The real Codex text-turn request; with ``target_bytes``, grown with replayed turns to that size."""
    body: dict[str, Any] = json.loads(FIXTURE.read_text())["body"]
    if target_bytes:
        k = 0
        while len(json.dumps(body)) < target_bytes:
            body["input"].append(
                {
                    "type": "function_call",
                    "id": f"fc_{k}",
                    "name": "exec_command",
                    "call_id": f"call_{k}",
                    "arguments": json.dumps({"cmd": f"cat src/file_{k}.py"}),
                }
            )
            body["input"].append(
                {"type": "function_call_output", "call_id": f"call_{k}", "output": _text(1500)}
            )
            k += 1
    return body


REPLAY_FIXTURE = FIXTURE.with_name("codex-0.171.0-request-multi-turn-replay.json")


def _schema(k: int) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "path": {"type": "string"},
            "limit": {"type": "integer"},
            f"opt_{k}": {"type": "boolean"},
        },
        "required": ["path"],
    }


def codex_replay_request(
    target_bytes: int = 66_000, items: int = 50, tools: int = 30
) -> dict[str, Any]:
    """A multi-turn Codex-style request as real clients replay history: the real 0.171.0
    three-turn capture grown to ``items`` input items and ``tools`` tool entries (namespaces
    included), with assistant replays without ``status``/``id``, reasoning with
    ``"content": null`` (some without ``id``), function tools without ``strict``, padded with
    tool output to about ``target_bytes``. Nothing in it should be dropped."""
    body: dict[str, Any] = json.loads(REPLAY_FIXTURE.read_text())["body"]
    extra_tools: list[dict[str, Any]] = [
        {
            "type": "function",
            "name": f"tool_{k}",
            "description": _text(40),
            "parameters": _schema(k),
        }
        for k in range(tools - len(body["tools"]) - 1)
    ]
    extra_tools.append(
        {
            "type": "namespace",
            "name": "mcp__files",
            "description": "file tools",
            "tools": [
                {"type": "function", "name": "read", "parameters": _schema(0)},
                {"type": "function", "name": "write", "parameters": _schema(1), "strict": False},
            ],
        }
    )
    body["tools"] = [*body["tools"], *extra_tools]
    turn = 0
    input_items: list[dict[str, Any]] = body["input"]
    while len(input_items) < items:
        k = turn
        reasoning: dict[str, Any] = {
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": _text(30)}],
            "content": None,
            "encrypted_content": None,
        }
        if k % 2:
            reasoning["id"] = f"rs_{k:032x}"
        input_items += [
            {
                "type": "message",
                "role": "user",
                "content": [{"type": "input_text", "text": f"Step {k}: {_text(20)}"}],
            },
            reasoning,
            {
                "type": "function_call",
                "name": "exec_command",
                "call_id": f"call_r{k}",
                "arguments": json.dumps({"cmd": f"cat src/m{k}.py"}),
            },
            {"type": "function_call_output", "call_id": f"call_r{k}", "output": _text(120)},
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": _text(25)}],
            },
        ]
        turn += 1
    del input_items[items:]
    pad = 0
    while len(json.dumps(body)) < target_bytes:
        output = next(
            i
            for i in input_items[pad % len(input_items) :] + input_items
            if i.get("type") == "function_call_output"
        )
        output["output"] += " " + _text(200)
        pad += 1
    return body


def chat_history_request(turns: int = 40, tools: int = 20) -> dict[str, Any]:
    """A streaming chat request replaying ``turns`` messages (user text parts, assistant
    answers with a tool call each) with ``tools`` function tools: the shapes whose unions the
    params validation discriminates (messages by ``role``, parts and calls by ``type``)."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": _text(300)}]
    for i in range(turns):
        if i % 2 == 0:
            messages.append({"role": "user", "content": [{"type": "text", "text": _text(30)}]})
        else:
            messages.append(
                {
                    "role": "assistant",
                    "content": _text(30),
                    "tool_calls": [
                        {
                            "id": f"c{i}",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                }
            )
    return {
        "model": "m",
        "stream": True,
        "messages": messages,
        "tools": [
            {"type": "function", "function": {"name": f"t{k}", "parameters": _schema(k)}}
            for k in range(tools)
        ],
    }


def anthropic_history_request(turns: int = 40, tools: int = 20) -> dict[str, Any]:
    """A streaming Messages request as Claude Code sends one: a ``role: "system"`` message
    (folded into the user turn), then ``turns`` messages with text, thinking, tool_use and
    tool_result blocks, and ``tools`` tools."""
    messages: list[dict[str, Any]] = [{"role": "system", "content": "reminder: " + _text(20)}]
    for i in range(turns):
        if i % 2 == 0:
            content: list[dict[str, Any]] = [{"type": "text", "text": _text(30)}]
            if i:
                content.append({"type": "tool_result", "tool_use_id": f"u{i - 1}", "content": "ok"})
            messages.append({"role": "user", "content": content})
        else:
            messages.append(
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": _text(15), "signature": "s"},
                        {"type": "text", "text": _text(30)},
                        {"type": "tool_use", "id": f"u{i}", "name": "t1", "input": {}},
                    ],
                }
            )
    return {
        "model": "m",
        "stream": True,
        "max_tokens": 100,
        "system": [{"type": "text", "text": _text(300)}],
        "tools": [{"name": f"t{k}", "input_schema": _schema(k)} for k in range(tools)],
        "messages": messages,
    }
