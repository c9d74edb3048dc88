"""Chat Completions, response side: a complete completion re-emitted as ``chat.completion.chunk`` SSE.

Per choice, in list order (the choice index is the list position): a role chunk, then
only-when-present reasoning, content, refusal and tool-call chunks, then a chunk carrying the
finish reason; an optional ``choices: []`` usage chunk; ``data: [DONE]``.

Deliberate differences from the upstream reference module (decisions P2, P4, P5):

* JSON is compact UTF-8 (orjson); the chunk head (``id`` .. ``"choices":[``) is serialized once
  per completion and reused by every chunk;
* a custom tool call keeps its input (``{"type": "custom", "custom": {"name", "input"}}``);
* list content is joined from its text parts; ``emit_reasoning_alias`` also emits
  ``reasoning`` beside ``reasoning_content``; ``include_logprobs`` attaches the choice's
  logprobs to its content chunk;
* usage never carries a ``null`` counter, and has every counter the SDK's ``CompletionUsage``
  requires (P5, P10); a completion without ``id``, ``created`` or ``model`` gets a generated id,
  the current time and ``""``, which every chunk must carry to validate as the SDK's
  ``ChatCompletionChunk``;
* a completion of the wrong shape raises :class:`InvalidResultError` naming the path before
  the first frame.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, NoReturn

import orjson

from aiostream_synth._wire.coerce import as_json_dict
from aiostream_synth._wire.errors import InvalidResultError
from aiostream_synth._wire.ids import random_hex
from aiostream_synth._wire.json import dumps
from aiostream_synth._wire.sse import DONE_FRAME, KEEPALIVE_COMMENT, data_frame
from aiostream_synth._wire.usage import wire_chat_usage

__all__ = [
    "CHAT_KEEPALIVE_FRAME",
    "chat_error_frame",
    "chat_frames",
    "synthesize_chat_completion_sse",
]

#: The default chat keepalive: an SSE comment (decision P7).
CHAT_KEEPALIVE_FRAME = KEEPALIVE_COMMENT

_WHAT = "chat completion"
_TEXT_PART_TYPES = frozenset({"text", "output_text", "input_text"})


def _fail(path: tuple[str | int, ...], problem: str) -> InvalidResultError:
    return InvalidResultError(_WHAT, path, problem)


def _joined_text(value: Any, path: tuple[str | int, ...]) -> str | None:
    """A message text field that is not a plain string: ``None``, or a list of parts whose
    texts are joined; anything else is an error naming ``path``."""
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


def _tool_call_delta(k: int, call: Any, index: int) -> dict[str, Any]:
    if not isinstance(call, dict):
        raise _fail(_call_path(index, k), f"expected a tool call object, got {type(call).__name__}")
    if call.get("type") == "custom":
        custom = call.get("custom") or {}
        if not isinstance(custom, dict):
            raise _fail(
                (*_call_path(index, k), "custom"),
                f"expected an object, got {type(custom).__name__}",
            )
        return {
            "index": k,
            "id": call.get("id"),
            "type": "custom",
            "custom": {"name": custom.get("name"), "input": custom.get("input") or ""},
        }
    fn = call.get("function") or {}
    if not isinstance(fn, dict):
        raise _fail(
            (*_call_path(index, k), "function"), f"expected an object, got {type(fn).__name__}"
        )
    arguments = fn.get("arguments") or ""
    if not isinstance(arguments, str):
        raise _fail((*_call_path(index, k), "function", "arguments"), "expected a JSON string")
    return {
        "index": k,
        "id": call.get("id"),
        "type": call.get("type") or "function",
        "function": {"name": fn.get("name"), "arguments": arguments},
    }


def _call_path(index: int, k: int) -> tuple[str | int, ...]:
    return ("choices", index, "message", "tool_calls", k)


# Fixed JSON around the serialized values. A chunk is ``head + lead + delta + ... + tail``
# where ``head`` (``data: {"id":..,"choices":[``) is per completion and ``lead`` per choice.
_ROLE_ASSISTANT = b'{"role":"assistant"}'
_NOT_FINISHED = b',"finish_reason":null}'


def _frames(
    data: dict[str, Any], include_usage: bool, reasoning_alias: bool, include_logprobs: bool
) -> list[bytes]:
    """The frames, serialized with bare ``orjson.dumps`` (the caller maps its errors to paths).

    Only variable values are serialized, once each; every chunk is one concatenation of
    ready-made pieces, so a 64 KB content string is encoded once and copied once.
    """
    choices = data.get("choices") or []
    if not isinstance(choices, list):
        raise _fail(("choices",), f"expected a list, got {type(choices).__name__}")
    completion_id = data.get("id")
    created = data.get("created")
    model = data.get("model")
    shared = orjson.dumps(  # the fields every chunk repeats
        {
            "id": "chatcmpl-" + random_hex() if completion_id is None else completion_id,
            "object": "chat.completion.chunk",
            "created": int(time.time()) if created is None else created,
            "model": "" if model is None else model,
        }
    )
    head = b"data: " + shared[:-1] + b',"choices":['
    fingerprint = data.get("system_fingerprint")
    close = b"]" if fingerprint is None else b'],"system_fingerprint":' + orjson.dumps(fingerprint)
    tail = close + b"}\n\n"
    open_tail = _NOT_FINISHED + tail  # the delta is closed by its own piece
    text_tail = b"}" + open_tail
    frames: list[bytes] = []
    append = frames.append
    for index, choice in enumerate(choices):
        if not isinstance(choice, dict):
            raise _fail(
                ("choices", index), f"expected a choice object, got {type(choice).__name__}"
            )
        message = choice.get("message") or {}
        if not isinstance(message, dict):
            raise _fail(
                ("choices", index, "message"), f"expected an object, got {type(message).__name__}"
            )
        lead = head + b'{"index":%d,"delta":' % index
        role = message.get("role") or "assistant"
        if role == "assistant":
            append(lead + _ROLE_ASSISTANT + open_tail)
        else:
            append(b"".join((lead, b'{"role":', orjson.dumps(role), text_tail)))

        reasoning = message.get("reasoning_content")
        if type(reasoning) is not str:
            reasoning = _joined_text(reasoning, ("choices", index, "message", "reasoning_content"))
        if not reasoning:
            reasoning = message.get("reasoning")
            if type(reasoning) is not str:
                reasoning = _joined_text(reasoning, ("choices", index, "message", "reasoning"))
        if reasoning:
            text = orjson.dumps(reasoning)
            if reasoning_alias:
                alias = (lead, b'{"reasoning_content":', text, b',"reasoning":', text, text_tail)
                append(b"".join(alias))
            else:
                append(b"".join((lead, b'{"reasoning_content":', text, text_tail)))

        content = message.get("content")
        if type(content) is not str:
            content = _joined_text(content, ("choices", index, "message", "content"))
        if content:
            logprobs = choice.get("logprobs") if include_logprobs else None
            if logprobs is None:
                append(b"".join((lead, b'{"content":', orjson.dumps(content), text_tail)))
            else:
                with_logprobs = (
                    lead,
                    b'{"content":',
                    orjson.dumps(content),
                    b'},"finish_reason":null,"logprobs":',
                    orjson.dumps(logprobs),
                    b"}",
                    tail,
                )
                append(b"".join(with_logprobs))

        refusal = message.get("refusal")
        if refusal is not None:
            if type(refusal) is not str:
                refusal = _joined_text(refusal, ("choices", index, "message", "refusal"))
            if refusal:
                append(b"".join((lead, b'{"refusal":', orjson.dumps(refusal), text_tail)))

        tool_calls = message.get("tool_calls")
        if tool_calls:
            if not isinstance(tool_calls, list):
                raise _fail(
                    ("choices", index, "message", "tool_calls"),
                    f"expected a list, got {type(tool_calls).__name__}",
                )
            calls = orjson.dumps(
                [_tool_call_delta(k, call, index) for k, call in enumerate(tool_calls)]
            )
            append(b"".join((lead, b'{"tool_calls":', calls, text_tail)))
        elif tool_calls is not None and not isinstance(tool_calls, list):
            raise _fail(
                ("choices", index, "message", "tool_calls"),
                f"expected a list, got {type(tool_calls).__name__}",
            )

        finish = choice.get("finish_reason")
        finish_json = _FINISH_REASONS.get(finish) if type(finish) is str else None
        if finish_json is None:
            finish_json = orjson.dumps(finish)
        append(b"".join((lead, b'{},"finish_reason":', finish_json, b"}", tail)))

    usage = data.get("usage") if include_usage else None
    if usage is not None:
        usage_json = orjson.dumps(wire_chat_usage(usage))
        append(b"".join((head, close, b',"usage":', usage_json, b"}\n\n")))
    append(DONE_FRAME)
    return frames


_FINISH_REASONS = {
    reason: orjson.dumps(reason)
    for reason in ("stop", "length", "tool_calls", "content_filter", "function_call")
}


def _raise_unserializable(
    data: dict[str, Any], include_usage: bool, include_logprobs: bool, exc: Exception
) -> NoReturn:
    """Raise the error for a value orjson refused, naming the first such value's path."""
    candidates: list[tuple[tuple[str | int, ...], Any]] = [
        (("id",), data.get("id")),
        (("created",), data.get("created")),
        (("model",), data.get("model")),
        (("system_fingerprint",), data.get("system_fingerprint")),
    ]
    choices = data.get("choices") or []
    for index, choice in enumerate(choices if isinstance(choices, list) else []):
        if not isinstance(choice, dict):
            continue
        message = choice.get("message")
        if not isinstance(message, dict):
            message = {}
        for key in ("role", "reasoning_content", "reasoning", "content", "refusal", "tool_calls"):
            candidates.append((("choices", index, "message", key), message.get(key)))
        if include_logprobs:
            candidates.append((("choices", index, "logprobs"), choice.get("logprobs")))
        candidates.append((("choices", index, "finish_reason"), choice.get("finish_reason")))
    if include_usage:
        candidates.append((("usage",), data.get("usage")))
    for path, value in candidates:
        dumps(value, _WHAT, path)  # the first value orjson refuses raises, named by its path
    raise _fail((), f"not JSON-serializable ({exc})") from None


def chat_frames(
    completion: Any,
    include_usage: bool = False,
    *,
    emit_reasoning_alias: bool = False,
    include_logprobs: bool = False,
) -> list[bytes]:
    """All SSE frames (bytes) for ``completion``; raises before producing any on bad input."""
    data = as_json_dict(completion, InvalidResultError, _WHAT)
    try:
        return _frames(data, include_usage, emit_reasoning_alias, include_logprobs)
    except orjson.JSONEncodeError as exc:
        _raise_unserializable(data, include_usage, include_logprobs, exc)


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
