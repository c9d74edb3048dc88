"""Chat Completions, response side: a complete completion re-emitted as ``chat.completion.chunk`` SSE.

Per choice, in list order (the choice index is the list position, B-C26): a role chunk, then
only-when-present reasoning, content, refusal and tool-call chunks, then a chunk carrying the
finish reason; an optional ``choices: []`` usage chunk; ``data: [DONE]``.

Deliberate differences from the upstream reference module (decisions P2, P4, P5):

* JSON is compact UTF-8 (orjson); the chunk head (``id`` .. ``"choices":[``) is serialized once
  per completion and reused by every chunk;
* a custom tool call keeps its input (``{"type": "custom", "custom": {"name", "input"}}``, D9);
* list content is joined from its text parts (D15); ``emit_reasoning_alias`` also emits
  ``reasoning`` beside ``reasoning_content`` (D4); ``include_logprobs`` attaches the choice's
  logprobs to its content chunk (D16);
* usage never carries a ``null`` counter (P5);
* a completion of the wrong shape raises :class:`InvalidResultError` naming the path before
  the first frame.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from ._coerce import as_json_dict
from ._errors import InvalidResultError
from ._json import dumps
from ._sse import DONE_FRAME, comment_frame, data_frame
from ._usage import wire_chat_usage

__all__ = [
    "CHAT_KEEPALIVE_FRAME",
    "chat_error_frame",
    "chat_frames",
    "synthesize_chat_completion_sse",
]

#: The default chat keepalive: an SSE comment (decision P7).
CHAT_KEEPALIVE_FRAME = comment_frame("keep-alive")

_WHAT = "chat completion"
_TEXT_PART_TYPES = frozenset({"text", "output_text", "input_text"})


def _fail(path: tuple[str | int, ...], problem: str) -> InvalidResultError:
    return InvalidResultError(_WHAT, path, problem)


def _text(value: Any, path: tuple[str | int, ...]) -> str | None:
    """A message text field: a string, ``None``, or a list of parts whose texts are joined."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, list):
        pieces: list[str] = []
        for k, part in enumerate(value):
            if not isinstance(part, dict):
                raise _fail(
                    (*path, k), f"expected a content part object, got {type(part).__name__}"
                )
            if part.get("type", "text") in _TEXT_PART_TYPES:
                text = part.get("text")
                if text is not None and not isinstance(text, str):
                    raise _fail((*path, k, "text"), f"expected a string, got {type(text).__name__}")
                pieces.append(text or "")
        return "".join(pieces)
    raise _fail(path, f"expected a string, a list of parts or null, got {type(value).__name__}")


def _tool_call_delta(k: int, call: Any, path: tuple[str | int, ...]) -> dict[str, Any]:
    if not isinstance(call, dict):
        raise _fail(path, f"expected a tool call object, got {type(call).__name__}")
    if call.get("type") == "custom":
        custom = call.get("custom") or {}
        if not isinstance(custom, dict):
            raise _fail((*path, "custom"), f"expected an object, got {type(custom).__name__}")
        return {
            "index": k,
            "id": call.get("id"),
            "type": "custom",
            "custom": {"name": custom.get("name"), "input": custom.get("input") or ""},
        }
    fn = call.get("function") or {}
    if not isinstance(fn, dict):
        raise _fail((*path, "function"), f"expected an object, got {type(fn).__name__}")
    arguments = fn.get("arguments") or ""
    if not isinstance(arguments, str):
        raise _fail((*path, "function", "arguments"), "expected a JSON string")
    return {
        "index": k,
        "id": call.get("id"),
        "type": call.get("type") or "function",
        "function": {"name": fn.get("name"), "arguments": arguments},
    }


_OPEN = b',"finish_reason":null}'


def _choice_bodies(
    index: int, choice: Any, *, reasoning_alias: bool, include_logprobs: bool
) -> list[tuple[bytes, ...]]:
    """The pieces of the serialized choice object of each of one choice's chunks (B-C17..B-C25).

    Only the variable values are serialized; the fixed JSON around them is spliced in, and each
    frame is joined once, so a 64 KB content string is encoded once and copied once.
    """
    path: tuple[str | int, ...] = ("choices", index)
    if not isinstance(choice, dict):
        raise _fail(path, f"expected a choice object, got {type(choice).__name__}")
    message = choice.get("message") or {}
    if not isinstance(message, dict):
        raise _fail((*path, "message"), f"expected an object, got {type(message).__name__}")
    mpath = (*path, "message")
    lead = b'{"index":%d,"delta":' % index

    role = dumps(message.get("role") or "assistant", _WHAT, mpath)
    bodies: list[tuple[bytes, ...]] = [(lead, b'{"role":', role, b"}", _OPEN)]
    reasoning = _text(message.get("reasoning_content"), (*mpath, "reasoning_content")) or _text(
        message.get("reasoning"), (*mpath, "reasoning")
    )
    if reasoning:
        text = dumps(reasoning)
        alias = b',"reasoning":' + text if reasoning_alias else b""
        bodies.append((lead, b'{"reasoning_content":', text, alias, b"}", _OPEN))
    content = _text(message.get("content"), (*mpath, "content"))
    if content:
        logprobs = choice.get("logprobs") if include_logprobs else None
        extra = (
            b""
            if logprobs is None
            else b',"logprobs":' + dumps(logprobs, _WHAT, (*path, "logprobs"))
        )
        bodies.append(
            (lead, b'{"content":', dumps(content), b'},"finish_reason":null', extra, b"}")
        )
    refusal = _text(message.get("refusal"), (*mpath, "refusal"))
    if refusal:
        bodies.append((lead, b'{"refusal":', dumps(refusal), b"}", _OPEN))
    tool_calls = message.get("tool_calls")
    if tool_calls is not None and not isinstance(tool_calls, list):
        raise _fail((*mpath, "tool_calls"), f"expected a list, got {type(tool_calls).__name__}")
    if tool_calls:
        calls = [
            _tool_call_delta(k, call, (*mpath, "tool_calls", k))
            for k, call in enumerate(tool_calls)
        ]
        encoded = dumps(calls, _WHAT, (*mpath, "tool_calls"))
        bodies.append((lead, b'{"tool_calls":', encoded, b"}", _OPEN))
    finish = dumps(choice.get("finish_reason"), _WHAT, (*path, "finish_reason"))
    bodies.append((lead, b'{},"finish_reason":', finish, b"}"))
    return bodies


def chat_frames(
    completion: Any,
    include_usage: bool = False,
    *,
    emit_reasoning_alias: bool = False,
    include_logprobs: bool = False,
) -> list[bytes]:
    """All SSE frames (bytes) for ``completion``; raises before producing any on bad input."""
    data = as_json_dict(completion, InvalidResultError, _WHAT)
    choices = data.get("choices") or []
    if not isinstance(choices, list):
        raise _fail(("choices",), f"expected a list, got {type(choices).__name__}")
    # One serialization of the fields every chunk shares (B-C14, B-C15), its closing brace cut.
    shared = dumps(
        {
            "id": data.get("id"),
            "object": "chat.completion.chunk",
            "created": data.get("created"),
            "model": data.get("model"),
        },
        _WHAT,
    )
    head = b"data: " + shared[:-1] + b',"choices":['
    fingerprint = data.get("system_fingerprint")
    close = (
        b"]"
        if fingerprint is None
        else b'],"system_fingerprint":' + dumps(fingerprint, _WHAT, ("system_fingerprint",))
    )
    tail = close + b"}\n\n"
    frames = [
        b"".join((head, *body, tail))
        for index, choice in enumerate(choices)
        for body in _choice_bodies(
            index, choice, reasoning_alias=emit_reasoning_alias, include_logprobs=include_logprobs
        )
    ]
    usage = data.get("usage") if include_usage else None
    if usage is not None:
        usage_json = dumps(wire_chat_usage(usage), _WHAT, ("usage",))
        frames.append(head + close + b',"usage":' + usage_json + b"}\n\n")
    frames.append(DONE_FRAME)
    return frames


def synthesize_chat_completion_sse(
    completion: Any,
    include_usage: bool = False,
    *,
    emit_reasoning_alias: bool = False,
    include_logprobs: bool = False,
) -> Iterator[str]:
    """Re-emit a complete Chat Completion as a ``chat.completion.chunk`` SSE stream (``str`` blocks).

    ``completion`` may be a dict or an openai/pydantic model. The generator is lazy; the
    completion is checked as a whole before the first block, and never mutated.
    """
    for frame in chat_frames(
        completion,
        include_usage,
        emit_reasoning_alias=emit_reasoning_alias,
        include_logprobs=include_logprobs,
    ):
        yield frame.decode()


def chat_error_frame(
    message: str,
    *,
    type: str = "server_error",
    code: str | int | None = None,
    param: str | None = None,
) -> bytes:
    """The in-band chat failure block ``data: {"error": {...}}`` (decision P6).

    openai-python raises ``APIError`` on it; the stream ends after it (no ``[DONE]``).
    """
    return data_frame({"error": {"message": message, "type": type, "code": code, "param": param}})
