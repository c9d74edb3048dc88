"""A Responses ``Response`` as the chat completion a Chat Completions client expects."""

from __future__ import annotations

import logging
from typing import Any

from aiostream_synth._dialects.bridges.chat_responses.request import ChatResponsesContext
from aiostream_synth._dialects.bridges.shapes import count, obj
from aiostream_synth._wire.coerce import as_json_dict
from aiostream_synth._wire.errors import BackendError, InvalidResultError
from aiostream_synth._wire.failures import DETERMINISTIC_CODES

__all__ = ["responses_to_chat_result"]

LOG = logging.getLogger("aiostream_synth.bridge")
_WHAT = "Responses result from the upstream"


def _failed(response: dict[str, Any]) -> BackendError:
    error = obj(response.get("error"))
    message = str(error.get("message") or "the upstream's response failed")
    code = error.get("code") if isinstance(error.get("code"), str) else "server_error"
    status = 400 if code in DETERMINISTIC_CODES else 502
    return BackendError(
        status,
        {
            "error": {
                "message": message,
                "type": "invalid_request_error" if status < 500 else "server_error",
                "param": None,
                "code": code,
            }
        },
    )


def _usage(usage: Any) -> dict[str, Any]:
    usage = obj(usage)
    prompt = count(usage.get("input_tokens"))
    completion = count(usage.get("output_tokens"))
    input_details = usage.get("input_tokens_details") or {}
    output_details = usage.get("output_tokens_details") or {}
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": count(usage.get("total_tokens")) or prompt + completion,
        "prompt_tokens_details": {"cached_tokens": count(input_details.get("cached_tokens"))},
        "completion_tokens_details": {
            "reasoning_tokens": count(output_details.get("reasoning_tokens"))
        },
    }


def responses_to_chat_result(response: Any, ctx: ChatResponsesContext) -> dict[str, Any]:
    """The chat completion (a dict) for the upstream's Responses result; raises
    :class:`~aiostream_synth.BackendError` for a ``failed`` response."""
    data = as_json_dict(response, InvalidResultError, _WHAT)
    if data.get("status") == "failed":
        raise _failed(data)
    output = data.get("output")
    if not isinstance(output, list):
        raise InvalidResultError(_WHAT, ("output",), "expected a list of items")
    texts: list[str] = []
    refusals: list[str] = []
    reasoning: list[str] = []
    annotations: list[dict[str, Any]] = []
    calls: list[dict[str, Any]] = []
    for item in output:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "message":
            for part in item.get("content") or ():
                if not isinstance(part, dict):
                    continue
                if part.get("type") == "output_text":
                    offset = sum(len(t) for t in texts)
                    texts.append(str(part.get("text") or ""))
                    for note in part.get("annotations") or ():
                        if isinstance(note, dict) and note.get("type") == "url_citation":
                            annotations.append(
                                {
                                    "type": "url_citation",
                                    "url_citation": {
                                        "start_index": count(note.get("start_index")) + offset,
                                        "end_index": count(note.get("end_index")) + offset,
                                        "url": note.get("url"),
                                        "title": note.get("title"),
                                    },
                                }
                            )
                elif part.get("type") == "refusal":
                    refusals.append(str(part.get("refusal") or ""))
        elif kind == "reasoning":
            parts = item.get("summary") or item.get("content") or ()
            text = "\n\n".join(str(p.get("text") or "") for p in parts if isinstance(p, dict))
            if text:
                reasoning.append(text)
        elif kind == "function_call":
            name = str(item.get("name") or "")
            if item.get("namespace"):
                name = f"{item['namespace']}__{name}"
            calls.append(
                {
                    "id": item.get("call_id") or item.get("id"),
                    "type": "function",
                    "function": {"name": name, "arguments": str(item.get("arguments") or "{}")},
                }
            )
        elif kind == "custom_tool_call":
            calls.append(
                {
                    "id": item.get("call_id") or item.get("id"),
                    "type": "custom",
                    "custom": {"name": item.get("name"), "input": str(item.get("input") or "")},
                }
            )
        else:
            LOG.info("bridge: %r output item has no chat equivalent; dropped", kind)
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(texts) if texts or not calls else None,
        "refusal": "".join(refusals) or None,
    }
    if annotations:
        message["annotations"] = annotations
    if reasoning:
        message["reasoning_content"] = "\n\n".join(reasoning)
    if calls:
        message["tool_calls"] = calls
    details = obj(data.get("incomplete_details"))
    if data.get("status") == "incomplete":
        finish = "content_filter" if details.get("reason") == "content_filter" else "length"
    elif calls:
        finish = "tool_calls"
    else:
        finish = "stop"
    response_id = str(data.get("id") or "")
    created = data.get("created_at")
    return {
        "id": "chatcmpl-" + response_id.removeprefix("resp_"),
        "object": "chat.completion",
        "created": int(created) if isinstance(created, (int, float)) else 0,
        "model": ctx.model if ctx.model is not None else data.get("model", ""),
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": _usage(data.get("usage")),
        "system_fingerprint": None,
    }
