"""A chat-only upstream for bridge tests: ``/chat/completions`` non-streaming, 404 elsewhere.

It records every request (path, body, headers) and answers from ``queue`` (scripted replies,
first in first out) and, when that is empty, from the request's ``model``:

``reasoning``   ``reasoning_content`` beside the answer text
``think``       the reasoning as a leading ``<think>`` block in the content
``tool``        a call of the first tool, arguments ``{}`` (text once a tool result came back)
``call=NAME``   a call of ``NAME`` (whether declared or not), arguments ``{}``
``refusal``     a refusal and no content
``length``      ``finish_reason: "length"``
``error-N``     HTTP ``N`` with an error body; ``context`` in the model makes its message a
                context-window overflow
``nousage``     no ``usage`` at all; ``nullusage`` null detail counters
``slow-S``      answer (or fail) after ``S`` seconds
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

import anyio

ANSWER = "upstream answer"
REASONING = "upstream reasoning"


@dataclass
class Reply:
    """One scripted answer: an assistant message, or an error status and message."""

    message: dict[str, Any] = field(
        default_factory=lambda: {"role": "assistant", "content": ANSWER}
    )
    finish_reason: str | None = "stop"
    usage: dict[str, Any] | None = field(
        default_factory=lambda: {"prompt_tokens": 11, "completion_tokens": 7, "total_tokens": 18}
    )
    status: int = 200
    error: str = ""
    #: replaces the whole answer body when set
    raw: dict[str, Any] | None = None
    #: seconds to wait before answering
    delay: float = 0.0


def tool_call(name: str, arguments: Any = "{}", call_id: str = "call_u1") -> Reply:
    arguments = arguments if isinstance(arguments, str) else json.dumps(arguments)
    return Reply(
        message={
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": name, "arguments": arguments},
                }
            ],
        },
        finish_reason="tool_calls",
    )


def _after_tool_result(body: dict[str, Any]) -> bool:
    messages = body.get("messages") or []
    return bool(messages) and messages[-1].get("role") == "tool"


class FakeChatUpstream:
    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, Any], dict[str, str]]] = []
        self.queue: list[Reply] = []

    @property
    def bodies(self) -> list[dict[str, Any]]:
        return [body for _, body, _ in self.requests]

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        raw = b""
        while True:
            message = await receive()
            raw += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        path = scope["path"]
        if scope["method"] == "GET" and path.endswith("/models"):
            await self._json(
                send,
                200,
                {
                    "object": "list",
                    "data": [
                        {"id": "chat-model", "object": "model", "created": 0, "owned_by": "test"}
                    ],
                },
            )
            return
        if not path.endswith("/chat/completions"):
            await self._json(
                send, 404, {"error": {"message": f"no such path {path}", "type": "not_found"}}
            )
            return
        body = json.loads(raw or b"{}")
        self.requests.append((path, body, headers))
        if body.get("stream"):
            await self._json(
                send,
                400,
                {
                    "error": {
                        "message": "this upstream cannot stream",
                        "type": "invalid_request_error",
                    }
                },
            )
            return
        reply = self.queue.pop(0) if self.queue else self._by_model(body)
        slow = re.search(r"slow-([0-9.]+)", str(body.get("model", "")))
        delay = reply.delay or (float(slow.group(1)) if slow else 0.0)
        if delay:
            await anyio.sleep(delay)
        if reply.status != 200:
            await self._json(
                send,
                reply.status,
                {
                    "error": {
                        "message": reply.error,
                        "type": "invalid_request_error",
                        "param": None,
                        "code": None,
                    }
                },
            )
            return
        if reply.raw is not None:
            await self._json(send, 200, reply.raw)
            return
        answer: dict[str, Any] = {
            "id": "chatcmpl-upstream",
            "object": "chat.completion",
            "created": 1,
            "model": "upstream-model",
            "choices": [
                {
                    "index": 0,
                    "message": reply.message,
                    "finish_reason": reply.finish_reason,
                    "logprobs": None,
                }
            ],
        }
        if reply.usage is not None:
            answer["usage"] = reply.usage
        await self._json(send, 200, answer)

    def _by_model(self, body: dict[str, Any]) -> Reply:
        model = str(body.get("model", ""))
        failing = re.search(r"error-(\d+)", model)
        if failing:
            status = int(failing.group(1))
            message = (
                "This model's maximum context length is 4096 tokens. However, you requested 9000 tokens."
                if "context" in model
                else f"Unexpected message role. ({status})"
            )
            return Reply(status=status, error=message)
        tools = body.get("tools") or []
        named = re.search(r"call=([\w.-]+)", model)
        if named and not _after_tool_result(body):
            return tool_call(named.group(1))
        if "tool" in model and tools and not _after_tool_result(body):
            return tool_call(tools[0]["function"]["name"])
        reply = Reply()
        if "reasoning" in model:
            reply.message = {"role": "assistant", "content": ANSWER, "reasoning_content": REASONING}
        elif "think" in model:
            reply.message = {
                "role": "assistant",
                "content": f"<think>{REASONING}</think>\n{ANSWER}",
            }
        elif "refusal" in model:
            reply.message = {
                "role": "assistant",
                "content": None,
                "refusal": "I can't help with that.",
            }
        if "length" in model:
            reply.finish_reason = "length"
        if "nousage" in model:
            reply.usage = None
        elif "nullusage" in model:
            reply.usage = {
                "prompt_tokens": 11,
                "completion_tokens": 7,
                "total_tokens": 18,
                "prompt_tokens_details": {"cached_tokens": None},
            }
        return reply

    @staticmethod
    async def _json(send: Any, status: int, body: dict[str, Any]) -> None:
        payload = json.dumps(body).encode()
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": payload})
