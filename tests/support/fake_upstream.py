"""A small non-streaming OpenAI-compatible upstream for tests (plain ASGI, no framework).

The request's ``model`` scripts it: ``error-<status>`` fails with that status, ``slow-<s>``
answers after ``s`` seconds (``slow-<s>-error-<status>`` fails after the delay), ``reasoning``
adds a reasoning item (Responses) or ``reasoning_content`` (chat), ``text`` answers in text even
when tools are offered. With tools and no ``text``, it calls the first tool, unless the last input
is a tool result (so an agent's loop ends). It answers Chat Completions, Responses and Anthropic
Messages (``/messages``), and records every body and header it receives.
"""

from __future__ import annotations

import json
import re
from typing import Any

import anyio


class FakeUpstream:
    def __init__(self) -> None:
        self.requests: list[tuple[str, dict[str, Any], dict[str, str]]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        headers = {k.decode(): v.decode() for k, v in scope["headers"]}
        if scope["method"] == "GET" and scope["path"].endswith("/models"):
            await self._json(
                send,
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": "upstream-model",
                            "object": "model",
                            "created": 0,
                            "owned_by": "test",
                        }
                    ],
                },
            )
            return
        data = json.loads(body or b"{}")
        self.requests.append((scope["path"], data, headers))
        model = str(data.get("model", ""))
        slow = re.search(r"slow-([0-9.]+)", model)
        if slow:
            await anyio.sleep(float(slow.group(1)))
        failing = re.search(r"error-(\d+)", model)
        if failing:
            status = int(failing.group(1))
            await self._json(
                send,
                status,
                {
                    "error": {
                        "message": f"upstream says no ({status})",
                        "type": "invalid_request_error" if status < 500 else "server_error",
                        "param": None,
                        "code": None,
                    }
                },
            )
            return
        if data.get("stream"):
            await self._json(
                send,
                400,
                {
                    "error": {
                        "message": "this upstream cannot stream",
                        "type": "invalid_request_error",
                        "param": "stream",
                        "code": None,
                    }
                },
            )
            return
        wants_text = "text" in model or _after_tool_result(data)
        if scope["path"].endswith("/messages"):
            await self._json(send, 200, _message(model, data, wants_text))
            return
        if scope["path"].endswith("/chat/completions"):
            tools = data.get("tools") or []
            answer: dict[str, Any] = {"role": "assistant", "content": "upstream answer"}
            if "reasoning" in model:
                answer["reasoning_content"] = "upstream reasoning"
            finish = "stop"
            if tools and not wants_text:
                name = tools[0]["function"]["name"]
                answer = {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_u",
                            "type": "function",
                            "function": {"name": name, "arguments": "{}"},
                        }
                    ],
                }
                finish = "tool_calls"
            await self._json(
                send,
                200,
                {
                    "id": "chatcmpl-u",
                    "object": "chat.completion",
                    "created": 1,
                    "model": model,
                    "choices": [
                        {"index": 0, "message": answer, "finish_reason": finish, "logprobs": None}
                    ],
                    "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
                },
            )
            return
        output: list[dict[str, Any]] = [
            {
                "type": "message",
                "id": "msg_u",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "upstream answer", "annotations": []}],
            }
        ]
        tools = data.get("tools") or []
        if tools and tools[0].get("name") and not wants_text:
            output = [
                {
                    "type": "function_call",
                    "id": "fc_u",
                    "call_id": "call_u",
                    "name": tools[0]["name"],
                    "arguments": "{}",
                    "status": "completed",
                }
            ]
        if "reasoning" in model:
            summary = [{"type": "summary_text", "text": "upstream reasoning"}]
            output = [{"type": "reasoning", "id": "rs_u", "summary": summary}, *output]
        await self._json(
            send,
            200,
            {
                "id": "resp_u",
                "object": "response",
                "created_at": 1,
                "model": model,
                "status": "completed",
                "output": output,
                "parallel_tool_calls": True,
                "tool_choice": "auto",
                "tools": [],
                "usage": {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3},
            },
        )

    @staticmethod
    async def _json(send: Any, status: int, payload: dict[str, Any]) -> None:
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": json.dumps(payload).encode()})


def _after_tool_result(data: dict[str, Any]) -> bool:
    """Whether the request's last input is a tool's result (chat ``tool`` or Responses output)."""
    items = data.get("input") if isinstance(data.get("input"), list) else data.get("messages")
    if not isinstance(items, list) or not items or not isinstance(items[-1], dict):
        return False
    last = items[-1]
    return last.get("role") == "tool" or str(last.get("type", "")).endswith("_call_output")


def _message(model: str, data: dict[str, Any], wants_text: bool) -> dict[str, Any]:
    """An Anthropic Messages answer: text, or a call of the first tool; ``reasoning`` adds a
    signed thinking block, ``future`` a block of a type no SDK knows (as the last block)."""
    tools = data.get("tools") or []
    content: list[dict[str, Any]] = []
    if "reasoning" in model:
        content.append({"type": "thinking", "thinking": "upstream reasoning", "signature": "sig_u"})
    if tools and not wants_text:
        content.append({"type": "tool_use", "id": "toolu_u", "name": tools[0]["name"], "input": {}})
    else:
        content.append({"type": "text", "text": "upstream answer"})
    if "future" in model:
        content.append({"type": "future_block_2030", "payload": 1})
    return {
        "id": "msg_u",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": "tool_use" if content[-1]["type"] == "tool_use" else "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 2},
    }
