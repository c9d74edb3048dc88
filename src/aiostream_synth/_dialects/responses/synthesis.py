"""Responses, response side: a complete Responses result re-emitted as the SSE event stream.

Two fidelities share one emitter (decision P1):

``minimal`` — the reference sequence: ``response.created`` (optional) →
``response.output_item.done`` per item → one terminal event chosen by ``status``.

``full`` — OpenAI's own per-item lifecycle: ``created`` and
``in_progress`` envelopes carrying a response skeleton, then per item ``output_item.added`` →
content-part / summary-part brackets with their delta and done events → ``output_item.done``,
then the terminal event with the whole response. Every event is numbered with
``sequence_number``. This is what openai-node's ``responses.stream()``, the Vercel AI SDK and
LangChain need (decision P1).

Both modes restore namespaced call names (in item events and in the terminal response) and
normalize usage on the wire (P5). A *continuation* — keepalive events already opened the stream
as response ``R`` with sequence numbers up to ``k - 1`` — is expressed with
``include_created=False, response_id=R, sequence_start=k``: the result's id is rewritten to R
(the openai SDK rejects an id change between lifecycle events).

Every event validates against the installed openai SDK's own event models (decision P10), in
both modes. Deliberate differences from the upstream reference module, all for that or for P2/P6:

* compact UTF-8 JSON (P2); the failure code is never null (P6);
* every event carries ``sequence_number``, minimal mode included (numbered from 0, or from
  ``sequence_start``): the SDK's event types require it;
* every response envelope has the fields the SDK's ``Response`` requires (``id``,
  ``created_at``, ``model``, ``tools``, ``tool_choice``, ``parallel_tool_calls``, ``object``,
  ``output``), defaulted when the result, the keepalive base or the failure lacks them;
* an output item missing what the SDK requires gets it: an ``id`` (delta events must name their
  item), a message ``status``, ``annotations: []`` on its text, ``summary: []`` on reasoning;
* usage counters are derived from the SDK's usage model (:mod:`._usage`), never ``null``.

One deliberate divergence *from the SDK*: a failure's ``error.code`` may be
``context_length_exceeded`` or ``server_is_overloaded`` (decision P6), which the Codex CLI reads
from ``response.failed`` although the SDK's ``ResponseError.code`` literal does not list them.
"""

from __future__ import annotations

import contextlib
import functools
import time
import typing
from collections.abc import Iterator
from typing import Any, Literal, NoReturn

import orjson

from aiostream_synth._dialects.responses.namespaces import (
    NamespaceMap,
    restore_namespace_tool_calls,
)
from aiostream_synth._dialects.responses.replay import with_annotations
from aiostream_synth._wire.coerce import as_json_dict
from aiostream_synth._wire.errors import InvalidResultError
from aiostream_synth._wire.ids import random_hex
from aiostream_synth._wire.json import dumps
from aiostream_synth._wire.sse import event_prefix
from aiostream_synth._wire.usage import wire_responses_usage

__all__ = [
    "Fidelity",
    "ResponsesKeepalive",
    "is_responses_lifecycle_chunk",
    "new_response_id",
    "responses_failure_frames",
    "responses_frames",
    "responses_keepalive_frames",
    "synthesize_responses_failure_sse",
    "synthesize_responses_keepalive_sse",
    "synthesize_responses_sse",
]

#: How many events a Responses stream has: ``"full"`` (OpenAI's per-item lifecycle, deltas
#: included) or ``"minimal"`` (the reference's shorter sequence).
Fidelity = Literal["full", "minimal"]

_WHAT = "responses result"
_LIFECYCLE_PREFIXES = (b"event: response.created\n", b"event: response.in_progress\n")
_TERMINALS = {"incomplete": "response.incomplete", "failed": "response.failed"}
_ID_PREFIX = {"message": "msg", "reasoning": "rs", "function_call": "fc", "custom_tool_call": "ctc"}


def new_response_id() -> str:
    """A fresh ``resp_`` + 32 lowercase hex characters id."""
    return "resp_" + random_hex()


class _Events:
    """Collects framed events, numbering them when ``seq`` is not None.

    Payloads go to bare ``orjson.dumps``; its callers map its error to the library's own.
    """

    __slots__ = ("frames", "seq")

    def __init__(self, seq: int | None) -> None:
        self.seq = seq
        self.frames: list[bytes] = []

    def emit(self, payload: dict[str, Any]) -> None:
        seq = self.seq
        if seq is not None:
            payload["sequence_number"] = seq
            self.seq = seq + 1
        # One join: a long event is copied once, not once per concatenation.
        self.frames.append(
            b"".join((event_prefix(payload["type"]), orjson.dumps(payload), b"\n\n"))
        )


def _chunks(text: str, size: int | None) -> list[str]:
    if not text:
        return []
    if not size or len(text) <= size:
        return [text]
    return [text[i : i + size] for i in range(0, len(text), size)]


def _prepare(
    result: Any,
    ns_map: NamespaceMap | None,
    response_id: str | None,
    created_at: int | None = None,
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    resp = dict(as_json_dict(result, InvalidResultError, _WHAT))
    output = resp.get("output") or []
    if not isinstance(output, list):
        raise InvalidResultError(
            _WHAT, ("output",), f"expected a list, got {type(output).__name__}"
        )
    for k, item in enumerate(output):
        if not isinstance(item, dict):
            raise InvalidResultError(
                _WHAT, ("output", k), f"expected an item object, got {type(item).__name__}"
            )
    if "usage" in resp:
        resp["usage"] = wire_responses_usage(resp["usage"])
    if response_id is not None:
        resp["id"] = response_id
    if created_at is not None:
        resp["created_at"] = created_at
    items = restore_namespace_tool_calls(output, ns_map or {})
    resp = _complete(resp)
    return resp, _output_items(items, resp["id"], resp.get("status"))


def _terminal_type(status: Any) -> str:
    return (
        _TERMINALS.get(status, "response.completed")
        if isinstance(status, str)
        else "response.completed"
    )


#: The fields the SDK's ``Response`` requires, in the order an envelope lacking them gets them.
_REQUIRED_RESPONSE_FIELDS = (
    "id",
    "object",
    "created_at",
    "model",
    "output",
    "parallel_tool_calls",
    "tool_choice",
    "tools",
)
#: What an envelope lacking one of them gets, when it is a constant.
_CONSTANT_DEFAULTS: dict[str, Any] = {
    "object": "response",
    "model": "",
    "parallel_tool_calls": True,
    "tool_choice": "auto",
}


def _default(key: str) -> Any:
    if key == "id":
        return new_response_id()
    if key == "created_at":
        return int(time.time())
    if key in _CONSTANT_DEFAULTS:
        return _CONSTANT_DEFAULTS[key]
    return []  # output, tools: a list of its own for each envelope


def _complete(resp: dict[str, Any]) -> dict[str, Any]:
    """``resp`` with every field the SDK's ``Response`` requires (itself when it has them);
    the missing ones first, always in the same order (a stream's bytes do not depend on the
    process's hash seed)."""
    missing = {key: _default(key) for key in _REQUIRED_RESPONSE_FIELDS if key not in resp}
    return {**missing, **resp} if missing else resp


def skeleton(resp: dict[str, Any]) -> dict[str, Any]:
    """The in-progress envelope of a response: its fields, no output, no usage, no outcome."""
    env = {**_complete(resp), "status": "in_progress", "output": [], "usage": None}
    for key in ("error", "incomplete_details", "completed_at"):
        if key in env:
            env[key] = None
    return env


def _minimal(
    resp: dict[str, Any], items: list[dict[str, Any]], include_created: bool, events: _Events
) -> None:
    if include_created:
        created = {**resp, "status": "in_progress", "output": []}
        events.emit({"type": "response.created", "response": created})
    for k, item in enumerate(items):
        events.emit({"type": "response.output_item.done", "output_index": k, "item": item})
    events.emit({"type": _terminal_type(resp.get("status")), "response": {**resp, "output": items}})


def _text_part(
    events: _Events,
    ids: dict[str, Any],
    part: dict[str, Any],
    field: str,
    kind: str,
    size: int | None,
) -> None:
    """A content-part bracket whose text lives in ``field`` and streams as ``response.<kind>.*``."""
    text = part.get(field) or ""
    if not isinstance(text, str):
        raise InvalidResultError(_WHAT, ("output", ids["output_index"], field), "expected a string")
    empty = {"type": part.get("type"), field: ""}
    if part.get("type") == "output_text":
        empty["annotations"] = []
    events.emit({"type": "response.content_part.added", **ids, "part": empty})
    for piece in _chunks(text, size):
        delta = {"type": f"response.{kind}.delta", **ids, "delta": piece}
        if kind == "output_text":
            delta["logprobs"] = []
        events.emit(delta)
    for n, annotation in enumerate(part.get("annotations") or ()):
        events.emit(
            {
                "type": "response.output_text.annotation.added",
                **ids,
                "annotation_index": n,
                "annotation": annotation,
            }
        )
    done: dict[str, Any] = {"type": f"response.{kind}.done", **ids, field: text}
    if kind == "output_text":
        done["logprobs"] = part.get("logprobs") or []
    events.emit(done)
    events.emit({"type": "response.content_part.done", **ids, "part": part})


@functools.cache
def _item_statuses() -> dict[str, frozenset[Any] | None]:
    """Output item type -> the ``status`` values the installed openai SDK's item model takes
    (None: it declares no status). Read on first use."""
    from openai.types.responses import ResponseOutputItem

    out: dict[str, frozenset[Any] | None] = {}
    for arm in typing.get_args(typing.get_args(ResponseOutputItem)[0]):
        kinds = typing.get_args(arm.model_fields["type"].annotation)
        status = arm.model_fields.get("status")
        values: frozenset[Any] | None = None
        if status is not None:
            values = frozenset(_literal_values(status.annotation))
        for kind in kinds:
            out[kind] = values
    return out


def _literal_values(tp: Any) -> list[Any]:
    if typing.get_origin(tp) is Literal:
        return list(typing.get_args(tp))
    return [value for arm in typing.get_args(tp) for value in _literal_values(arm)]


def _added_status(kind: Any, item: dict[str, Any]) -> bool:
    """Whether ``output_item.added`` shows the item ``in_progress``: a message, a function
    call, or an item with a status, unless its type does not take that status (an
    ``apply_patch_call_output`` or ``program_output`` is added as it ends)."""
    if not ("status" in item or kind in ("message", "function_call")):
        return False
    statuses = _item_statuses()
    if isinstance(kind, str) and kind in statuses:
        allowed = statuses[kind]
        return allowed is not None and "in_progress" in allowed
    return True


def _full_item(events: _Events, k: int, item: dict[str, Any], size: int | None) -> None:
    kind = item.get("type")
    item_id = item.get("id")
    base = {"item_id": item_id, "output_index": k}
    added = dict(item)
    if _added_status(kind, item):
        added["status"] = "in_progress"
    if kind == "message":
        added["content"] = []
        events.emit({"type": "response.output_item.added", "output_index": k, "item": added})
        for c, part in enumerate(item.get("content") or ()):
            if not isinstance(part, dict):
                raise InvalidResultError(
                    _WHAT, ("output", k, "content", c), "expected a part object"
                )
            ids = {**base, "content_index": c}
            if part.get("type") == "output_text":
                _text_part(events, ids, part, "text", "output_text", size)
            elif part.get("type") == "refusal":
                _text_part(events, ids, part, "refusal", "refusal", size)
            else:
                events.emit({"type": "response.content_part.added", **ids, "part": part})
                events.emit({"type": "response.content_part.done", **ids, "part": part})
    elif kind == "reasoning":
        added["summary"] = []
        added.pop("encrypted_content", None)
        if "content" in added:
            added["content"] = []
        events.emit({"type": "response.output_item.added", "output_index": k, "item": added})
        for s, part in enumerate(item.get("summary") or ()):
            text = part.get("text") or "" if isinstance(part, dict) else None
            if not isinstance(text, str):
                raise InvalidResultError(
                    _WHAT, ("output", k, "summary", s), "expected a summary_text part"
                )
            ids = {**base, "summary_index": s}
            events.emit(
                {
                    "type": "response.reasoning_summary_part.added",
                    **ids,
                    "part": {"type": "summary_text", "text": ""},
                }
            )
            for piece in _chunks(text, size):
                events.emit(
                    {"type": "response.reasoning_summary_text.delta", **ids, "delta": piece}
                )
            events.emit({"type": "response.reasoning_summary_text.done", **ids, "text": text})
            events.emit(
                {
                    "type": "response.reasoning_summary_part.done",
                    **ids,
                    "part": {"type": "summary_text", "text": text},
                }
            )
        for c, part in enumerate(item.get("content") or ()):
            if not isinstance(part, dict):
                raise InvalidResultError(
                    _WHAT, ("output", k, "content", c), "expected a part object"
                )
            _text_part(events, {**base, "content_index": c}, part, "text", "reasoning_text", size)
    elif kind == "function_call":
        arguments = item.get("arguments") or ""
        added["arguments"] = ""
        events.emit({"type": "response.output_item.added", "output_index": k, "item": added})
        for piece in _chunks(arguments, size):
            events.emit({"type": "response.function_call_arguments.delta", **base, "delta": piece})
        done = {"type": "response.function_call_arguments.done", **base, "arguments": arguments}
        if item.get("name") is not None:
            done["name"] = item["name"]
        events.emit(done)
    elif kind == "custom_tool_call":
        text = item.get("input") or ""
        added["input"] = ""
        events.emit({"type": "response.output_item.added", "output_index": k, "item": added})
        for piece in _chunks(text, size):
            events.emit({"type": "response.custom_tool_call_input.delta", **base, "delta": piece})
        events.emit({"type": "response.custom_tool_call_input.done", **base, "input": text})
    else:
        events.emit({"type": "response.output_item.added", "output_index": k, "item": added})
    events.emit({"type": "response.output_item.done", "output_index": k, "item": item})


def _output_items(
    items: list[dict[str, Any]], response_id: Any, status: Any
) -> list[dict[str, Any]]:
    """The items with what the SDK's output item types require and a backend may omit: an
    ``id`` (``<prefix>_<response id>_<index>``), a message's ``status`` (its response's when
    that is ``incomplete``), ``annotations`` on output text, ``summary`` on reasoning."""
    out = items
    for k, item in enumerate(items):
        kind = item.get("type")
        fixed: dict[str, Any] | None = None
        if not item.get("id"):
            prefix = _ID_PREFIX.get(kind) if isinstance(kind, str) else None
            if prefix is not None:
                suffix = str(response_id or "").removeprefix("resp_")
                fixed = {**item, "id": f"{prefix}_{suffix}_{k}"}
        if kind == "message":
            if "status" not in item:
                fixed = fixed or dict(item)
                fixed["status"] = "incomplete" if status == "incomplete" else "completed"
            content = item.get("content")
            if isinstance(content, list):
                parts = with_annotations(content)
                if parts is not content:
                    fixed = fixed or dict(item)
                    fixed["content"] = parts
        elif kind == "reasoning" and "summary" not in item:
            fixed = fixed or dict(item)
            fixed["summary"] = []
        if fixed is not None:
            if out is items:
                out = list(items)
            out[k] = fixed
    return out


def _full(
    resp: dict[str, Any],
    items: list[dict[str, Any]],
    include_created: bool,
    events: _Events,
    size: int | None,
) -> None:
    if include_created:
        env = skeleton(resp)
        events.emit({"type": "response.created", "response": env})
        events.emit({"type": "response.in_progress", "response": env})
    for k, item in enumerate(items):
        _full_item(events, k, item, size)
    events.emit({"type": _terminal_type(resp.get("status")), "response": {**resp, "output": items}})


def responses_frames(
    result: Any,
    ns_map: NamespaceMap | None = None,
    *,
    fidelity: Fidelity = "full",
    include_created: bool = True,
    response_id: str | None = None,
    sequence_start: int | None = None,
    delta_chars: int | None = None,
    created_at: int | None = None,
) -> list[bytes]:
    """All SSE frames (bytes) for a complete result; raises before producing any on bad input.

    ``sequence_start`` numbers the events from that value (from 0 when it is None).
    ``response_id`` and ``created_at`` replace the result's own (a stream whose
    ``response.created`` went out before the result keeps what it said there).
    ``delta_chars`` splits long text and arguments into deltas of at most that many
    characters (full mode only).
    """
    if fidelity not in ("full", "minimal"):
        raise ValueError(f"fidelity must be 'full' or 'minimal', not {fidelity!r}")
    resp, items = _prepare(result, ns_map, response_id, created_at)
    events = _Events(0 if sequence_start is None else sequence_start)
    try:
        if fidelity == "full":
            _full(resp, items, include_created, events, delta_chars)
        else:
            _minimal(resp, items, include_created, events)
    except orjson.JSONEncodeError as exc:
        _raise_unserializable(resp, items, exc)
    return events.frames


def _raise_unserializable(
    resp: dict[str, Any], items: list[dict[str, Any]], exc: Exception
) -> NoReturn:
    """Raise the error for a value orjson refused, naming the first such value's path."""
    for key, value in resp.items():
        if key != "output":
            dumps(value, _WHAT, (key,))  # the first value orjson refuses raises, by its path
    for k, item in enumerate(items):
        for key, value in item.items():
            dumps(value, _WHAT, ("output", k, key))
    raise InvalidResultError(_WHAT, (), f"not JSON-serializable ({exc})") from None


def responses_failure_frames(
    message: str,
    code: str | None = "server_error",
    response_id: str | None = None,
    include_created: bool = True,
    *,
    fidelity: Fidelity = "minimal",
    base: dict[str, Any] | None = None,
    sequence_start: int | None = None,
) -> list[bytes]:
    """Frames of a terminal failure: minimal ``[created,] failed``; full ``[created, in_progress,] error, failed``.

    ``base`` supplies skeleton fields such as ``model`` and ``created_at``.
    """
    error = {"code": code or "server_error", "message": message}
    rid = response_id or new_response_id()
    env = skeleton({**(base or {}), "id": rid})
    events = _Events(0 if sequence_start is None else sequence_start)
    if fidelity == "minimal":
        failed = {**env, "status": "failed", "error": error}
        with _unserializable_is_invalid():
            if include_created:
                events.emit(
                    {"type": "response.created", "response": {**failed, "status": "in_progress"}}
                )
            events.emit({"type": "response.failed", "response": failed})
        return events.frames
    with _unserializable_is_invalid():
        if include_created:
            events.emit({"type": "response.created", "response": env})
            events.emit({"type": "response.in_progress", "response": env})
        events.emit({"type": "error", "code": error["code"], "message": message, "param": None})
        events.emit(
            {"type": "response.failed", "response": {**env, "status": "failed", "error": error}}
        )
    return events.frames


@contextlib.contextmanager
def _unserializable_is_invalid() -> Iterator[None]:
    """orjson's refusal (a lone surrogate in the message, an object in ``base``) as the
    library's input error."""
    try:
        yield
    except orjson.JSONEncodeError as exc:
        raise InvalidResultError(_WHAT, (), f"not JSON-serializable ({exc})") from None


def _envelope(response_id: str, base: dict[str, Any] | None) -> dict[str, Any]:
    return skeleton({"id": response_id, **{k: v for k, v in (base or {}).items() if k != "id"}})


def responses_keepalive_frames(
    response_id: str,
    include_created: bool,
    *,
    base: dict[str, Any] | None = None,
    sequence_start: int | None = None,
) -> list[bytes]:
    """Liveness events: ``[response.created,] response.in_progress``, one frame each.

    The envelope is a response skeleton built from ``base`` (``model``, ``created_at``, request
    echoes...) with the SDK's required fields defaulted. Events are numbered from
    ``sequence_start`` (0 when None: pass the next number to keep a stream's numbers rising).
    """
    keepalive = ResponsesKeepalive(response_id, base=base)
    return keepalive.frames(include_created=include_created, sequence_start=sequence_start or 0)


_IN_PROGRESS_TYPE = b'{"type":"response.in_progress"'
_CREATED_TYPE = b'{"type":"response.created"'


class ResponsesKeepalive:
    """Keepalive frames for one stream, its envelope serialized once (the engine's hot path).

    Only the ``response.in_progress`` payload head is kept (the bytes of a waiting stream); the
    one-off ``response.created`` head is derived from it.
    """

    __slots__ = ("_in_progress", "created_at")

    def __init__(self, response_id: str, *, base: dict[str, Any] | None) -> None:
        envelope = _envelope(response_id, base)
        #: The envelope's ``created_at``: the result's events say the same.
        self.created_at: Any = envelope["created_at"]
        self._in_progress = _IN_PROGRESS_TYPE + b',"response":' + dumps(envelope, _WHAT)

    def _frame(self, head: bytes, event: str, seq: int) -> bytes:
        return b"".join((event_prefix(event), head, b',"sequence_number":%d}\n\n' % seq))

    def frames(self, *, include_created: bool, sequence_start: int) -> list[bytes]:
        """``[created,] in_progress``, numbered from ``sequence_start``."""
        seq = sequence_start
        if not include_created:
            return [self._frame(self._in_progress, "response.in_progress", seq)]
        created = _CREATED_TYPE + self._in_progress[len(_IN_PROGRESS_TYPE) :]
        return [
            self._frame(created, "response.created", seq),
            self._frame(self._in_progress, "response.in_progress", seq + 1),
        ]


def synthesize_responses_sse(
    response_json: Any,
    ns_map: NamespaceMap | None = None,
    include_created: bool = True,
    *,
    fidelity: Fidelity = "minimal",
    response_id: str | None = None,
    sequence_start: int | None = None,
    delta_chars: int | None = None,
) -> Iterator[str]:
    """Re-emit a complete Responses result as an SSE event stream (``str`` blocks).

    Defaults reproduce the reference's minimal sequence; ``fidelity="full"`` emits OpenAI's
    per-item lifecycle. The result (dict or pydantic model) is checked before the first block
    and never mutated.
    """
    for frame in responses_frames(
        response_json,
        ns_map,
        fidelity=fidelity,
        include_created=include_created,
        response_id=response_id,
        sequence_start=sequence_start,
        delta_chars=delta_chars,
    ):
        yield frame.decode()


def synthesize_responses_failure_sse(
    message: str,
    code: str | None = "server_error",
    response_id: str | None = None,
    include_created: bool = True,
    *,
    fidelity: Fidelity = "minimal",
    base: dict[str, Any] | None = None,
    sequence_start: int | None = None,
) -> Iterator[str]:
    """A terminal Responses failure stream; ``code=None`` becomes ``"server_error"`` (P6)."""
    for frame in responses_failure_frames(
        message,
        code,
        response_id,
        include_created,
        fidelity=fidelity,
        base=base,
        sequence_start=sequence_start,
    ):
        yield frame.decode()


def synthesize_responses_keepalive_sse(
    response_id: str,
    include_created: bool,
    *,
    base: dict[str, Any] | None = None,
    sequence_start: int | None = None,
) -> Iterator[str]:
    """Events that hold a Responses stream open: ``response.created`` (first call) and
    ``response.in_progress``, each its own block."""
    for frame in responses_keepalive_frames(
        response_id, include_created, base=base, sequence_start=sequence_start
    ):
        yield frame.decode()


def is_responses_lifecycle_chunk(chunk: bytes) -> bool:
    """Whether ``chunk`` is exactly one ``response.created`` / ``response.in_progress`` event:
    liveness, not output."""
    return chunk.startswith(_LIFECYCLE_PREFIXES) and chunk.find(b"\n\n") == len(chunk) - 2
