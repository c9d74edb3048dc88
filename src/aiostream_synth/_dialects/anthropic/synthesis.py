"""Anthropic Messages, response side: a complete ``Message`` re-emitted as its event stream.

The sequence, every block named by an ``event:`` line equal to its type::

    message_start          message with "content": [] and the input-side usage
    content_block_start    per block, indices 0..n-1 contiguous, then its deltas
    content_block_delta    text_delta | citations_delta | thinking_delta + signature_delta |
                           input_json_delta (exactly one per tool_use: Claude Code reads the
                           input from it, never from the start event)
    content_block_stop
    message_delta          stop_reason (never null here) and the final usage
    message_stop

Blocks that are not streamed token by token (``redacted_thinking``, server-tool results,
``container_upload``...) start complete and stop. A block type the installed SDK does not know
is dropped by default (Claude Code fails a turn whose *last* block is one; the SDKs would keep
it), or passed through. Empty text blocks are dropped unless the message has no other block (an
empty text block cannot be replayed to Anthropic).

Keepalive frames for a stream committed before the result exists: ``message_start`` with an id
we mint and zero usage (the final usage then travels in ``message_delta``), ``ping`` each tick,
and, because Claude Code re-arms its watchdog on 30 pings at most, an intermediate
``message_delta`` with ``stop_reason: null`` every few minutes.
"""

from __future__ import annotations

import logging
import typing
from collections.abc import Iterator
from functools import cache
from typing import Any, Literal

import orjson

from aiostream_synth._params.sdks import require_sdk
from aiostream_synth._wire.coerce import as_json_dict
from aiostream_synth._wire.errors import InvalidResultError
from aiostream_synth._wire.ids import random_hex
from aiostream_synth._wire.sse import event_prefix

__all__ = [
    "PING_FRAME",
    "UnknownBlocks",
    "anthropic_error_frame",
    "anthropic_frames",
    "event_keepalive_frame",
    "known_block_types",
    "message_start_frame",
    "new_message_id",
    "synthesize_anthropic_sse",
    "zero_usage",
]

LOG = logging.getLogger("aiostream_synth.anthropic")

UnknownBlocks = Literal["drop", "passthrough"]

_WHAT = "anthropic message"


@cache
def known_block_types() -> frozenset[str]:
    """The content block types of the installed anthropic SDK's (beta) Message (read on first
    use: importing the SDK's types costs most of a second)."""
    require_sdk("anthropic", "the Anthropic Messages dialect")
    from anthropic.types.beta import BetaContentBlock

    arms = typing.get_args(typing.get_args(BetaContentBlock)[0])
    return frozenset(typing.get_args(arm.model_fields["type"].annotation)[0] for arm in arms)


#: Blocks whose input streams as one ``input_json_delta``.
_TOOL_BLOCKS = frozenset({"tool_use", "server_tool_use", "mcp_tool_use"})
_STOP_DELTA_KEYS = ("stop_details", "container")
#: Message fields ``message_delta`` carries at its top level (``BetaRawMessageDeltaEvent``).
_DELTA_EVENT_KEYS = ("context_management", "input_transformations")
#: Message fields the frames write themselves; every other one rides on ``message_start``.
_OWN_KEYS = frozenset(
    {"id", "type", "role", "model", "content", "stop_reason", "stop_sequence", "usage"}
    | set(_STOP_DELTA_KEYS)
    | set(_DELTA_EVENT_KEYS)
)
#: Usage counters clients sum and compare; never ``null``, present even when 0 (A6).
_INPUT_COUNTERS = ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")
#: What ``message_delta.usage`` may carry besides ``output_tokens`` (``MessageDeltaUsage``).
_DELTA_EXTRAS = ("server_tool_use", "output_tokens_details")

PING_FRAME = b'event: ping\ndata: {"type":"ping"}\n\n'
_STOP_FRAME = b'event: message_stop\ndata: {"type":"message_stop"}\n\n'


def new_message_id() -> str:
    """A fresh ``msg_`` id, for a stream committed before the backend's message exists."""
    return "msg_" + random_hex()


def _frame(payload: dict[str, Any]) -> bytes:
    return b"".join((event_prefix(payload["type"]), orjson.dumps(payload), b"\n\n"))


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _usage(usage: Any) -> dict[str, Any]:
    """The backend's usage with the counters clients need present and integer."""
    out = dict(usage) if isinstance(usage, dict) else {}
    for key in (*_INPUT_COUNTERS, "output_tokens"):
        out[key] = _count(out.get(key))
    return out


def message_start_frame(
    message_id: str, model: Any, usage: dict[str, Any], extra: dict[str, Any] | None = None
) -> bytes:
    """``message_start`` with empty content (both SDKs crash without the ``content`` key);
    ``extra``: the message's other fields (``diagnostics``...), carried as they are."""
    message: dict[str, Any] = {
        **(extra or {}),
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model if isinstance(model, str) else "",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    return _frame({"type": "message_start", "message": message})


def zero_usage() -> dict[str, Any]:
    """The usage of a ``message_start`` sent before the backend's message exists."""
    return dict.fromkeys((*_INPUT_COUNTERS, "output_tokens"), 0)


def event_keepalive_frame() -> bytes:
    """An intermediate ``message_delta`` (``stop_reason: null``): a real event that re-arms
    Claude Code's stream watchdog, which pings alone re-arm only 30 times."""
    return _frame(
        {
            "type": "message_delta",
            "delta": {"stop_reason": None, "stop_sequence": None},
            "usage": {"output_tokens": 0},
        }
    )


def anthropic_error_frame(error_type: str, message: str) -> bytes:
    """The ``event: error`` that ends a committed stream (no ``message_stop`` after it)."""
    return _frame({"type": "error", "error": {"type": error_type, "message": message}})


def _fail(path: tuple[str | int, ...], problem: str) -> InvalidResultError:
    return InvalidResultError(_WHAT, path, problem)


def _blocks(content: Any, unknown: UnknownBlocks) -> list[dict[str, Any]]:
    if not isinstance(content, list):
        raise _fail(("content",), f"expected a list, got {type(content).__name__}")
    kept: list[dict[str, Any]] = []
    for k, block in enumerate(content):
        if not isinstance(block, dict) or not isinstance(block.get("type"), str):
            raise _fail(("content", k), "expected a content block object with a type")
        if unknown == "drop" and block["type"] not in known_block_types():
            LOG.warning("dropped content block %d of unknown type %r", k, block["type"])
            continue
        kept.append(block)
    texts = [b for b in kept if b["type"] == "text" and not b.get("text")]
    if texts and len(kept) > 1:
        kept = [b for b in kept if not (b["type"] == "text" and not b.get("text"))]
    return kept


def _block_frames(index: int, block: dict[str, Any], k: int) -> list[bytes]:
    kind = block["type"]
    frames: list[bytes] = []

    def delta(payload: dict[str, Any]) -> None:
        frames.append(_frame({"type": "content_block_delta", "index": index, "delta": payload}))

    if kind == "text":
        text = block.get("text") or ""
        if not isinstance(text, str):
            raise _fail(("content", k, "text"), "expected a string")
        frames.append(
            _frame(
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "text", "text": ""},
                }
            )
        )
        for citation in block.get("citations") or ():
            delta({"type": "citations_delta", "citation": citation})
        if text:
            delta({"type": "text_delta", "text": text})
    elif kind == "thinking":
        thinking = block.get("thinking") or ""
        signature = block.get("signature") or ""
        if not isinstance(thinking, str) or not isinstance(signature, str):
            raise _fail(("content", k), "expected thinking and signature strings")
        empty = {"type": "thinking", "thinking": "", "signature": ""}
        frames.append(
            _frame({"type": "content_block_start", "index": index, "content_block": empty})
        )
        if thinking:
            delta({"type": "thinking_delta", "thinking": thinking})
        if signature:
            delta({"type": "signature_delta", "signature": signature})
    elif kind in _TOOL_BLOCKS:
        tool_input = block.get("input")
        shell: dict[str, Any] = {key: value for key, value in block.items() if key != "input"}
        shell["input"] = {}
        frames.append(
            _frame({"type": "content_block_start", "index": index, "content_block": shell})
        )
        partial = orjson.dumps(tool_input if tool_input is not None else {}).decode()
        delta({"type": "input_json_delta", "partial_json": partial})
    else:  # not streamed token by token: the whole block in its start event
        frames.append(
            _frame({"type": "content_block_start", "index": index, "content_block": block})
        )
    frames.append(_frame({"type": "content_block_stop", "index": index}))
    return frames


def anthropic_frames(
    message: Any,
    *,
    include_start: bool = True,
    message_id: str | None = None,
    unknown_blocks: UnknownBlocks = "drop",
) -> list[bytes]:
    """All SSE frames (bytes) for a complete Message; raises :class:`InvalidResultError` naming
    the path before producing any on a malformed one.

    Every field of the message reaches an event: ``message_start`` carries all but the ones
    ``message_delta`` declares (stop reason and details, ``container``,
    ``context_management``, ``input_transformations``). ``include_start=False`` continues a
    stream whose ``message_start`` keepalive already went out (its usage was zeros, so
    ``message_delta`` carries the input-side counters too); the message's other fields
    (``diagnostics``) then have no event left to travel in and are logged at DEBUG.
    ``message_id`` replaces the message's own id in ``message_start``.
    """
    data = as_json_dict(message, InvalidResultError, _WHAT)
    blocks = _blocks(data.get("content") or [], unknown_blocks)
    usage = _usage(data.get("usage"))
    frames: list[bytes] = []
    try:
        if include_start:
            start_usage = {**usage, "output_tokens": 0}
            frames.append(
                message_start_frame(
                    message_id or str(data.get("id") or new_message_id()),
                    data.get("model"),
                    start_usage,
                    {key: value for key, value in data.items() if key not in _OWN_KEYS},
                )
            )
        else:
            lost = sorted(key for key in data if key not in _OWN_KEYS)
            if lost:
                LOG.debug("message_start already sent: fields %s not streamed", lost)
        for index, block in enumerate(blocks):
            frames.extend(_block_frames(index, block, index))
        stop_reason = data.get("stop_reason") or "end_turn"
        stop = {"stop_reason": stop_reason, "stop_sequence": data.get("stop_sequence")}
        stop.update({key: data[key] for key in _STOP_DELTA_KEYS if data.get(key) is not None})
        delta_usage = {key: usage[key] for key in (*_INPUT_COUNTERS, "output_tokens")}
        delta_usage.update({key: usage[key] for key in _DELTA_EXTRAS if usage.get(key) is not None})
        delta: dict[str, Any] = {"type": "message_delta", "delta": stop, "usage": delta_usage}
        delta.update({key: data[key] for key in _DELTA_EVENT_KEYS if data.get(key) is not None})
        frames.append(_frame(delta))
    except orjson.JSONEncodeError as exc:
        raise _fail((), f"not JSON-serializable ({exc})") from None
    frames.append(_STOP_FRAME)
    return frames


def synthesize_anthropic_sse(
    message: Any, *, unknown_blocks: UnknownBlocks = "drop"
) -> Iterator[str]:
    """Re-emit a complete Anthropic ``Message`` (dict or SDK model) as its SSE event stream
    (``str`` blocks): ``message_start`` … ``message_stop``. Checked before the first block."""
    for frame in anthropic_frames(message, unknown_blocks=unknown_blocks):
        yield frame.decode()
