"""Server-sent-event framing shared by every dialect.

Three block kinds: data-only (``data: <json>``), named (``event: <name>`` + ``data: <json>``)
and comments (``: <text>``). JSON payloads are serialized once, here or by the caller, and the
resulting ``bytes`` are what every layer above sends: nothing downstream re-encodes a frame.
Compact JSON never contains a raw newline, so each payload is exactly one ``data:`` line.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from aiostream_synth._wire.errors import InvalidSSEFieldError
from aiostream_synth._wire.json import dumps

__all__ = [
    "DONE_FRAME",
    "KEEPALIVE_COMMENT",
    "comment_frame",
    "data_frame",
    "event_frame",
    "event_prefix",
    "split_frames",
]

#: The Chat Completions end-of-stream sentinel block.
DONE_FRAME = b"data: [DONE]\n\n"


def _check_field(kind: str, value: str) -> str:
    if "\r" in value or "\n" in value:
        raise InvalidSSEFieldError("SSE field", (kind,), f"must not contain CR or LF: {value!r}")
    return value


@lru_cache(maxsize=256)
def event_prefix(event: str, event_id: str | None = None) -> bytes:
    """The bytes in front of a named block's JSON: ``event: <name>\\n[id: <id>\\n]data: ``."""
    head = "event: " + _check_field("event", event) + "\n"
    if event_id is not None:
        head += "id: " + _check_field("id", event_id) + "\n"
    return (head + "data: ").encode()


def data_frame(payload: Any) -> bytes:
    """A data-only block. ``payload`` is serialized to JSON unless it is already ``bytes``."""
    body = payload if isinstance(payload, bytes) else dumps(payload)
    return b"data: " + body + b"\n\n"


def event_frame(event: str, payload: Any, event_id: str | None = None) -> bytes:
    """A named block (``event:`` line, optional ``id:`` line, one ``data:`` line)."""
    body = payload if isinstance(payload, bytes) else dumps(payload)
    return event_prefix(event, event_id) + body + b"\n\n"


def comment_frame(text: str = "keep-alive") -> bytes:
    """A comment block, ignored by SSE parsers; each line of ``text`` becomes one comment line."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    return "".join(f": {line}\n" for line in lines).encode() + b"\n"


#: The generic SSE keepalive: a comment, which every SSE parser ignores (decision P7).
KEEPALIVE_COMMENT = comment_frame("keep-alive")


def split_frames(joined: bytes) -> list[bytes]:
    """The frames of several joined together (each ends with a blank line; a last one without
    it is kept as it is)."""
    frames: list[bytes] = []
    start = 0
    while start < len(joined):
        end = joined.find(b"\n\n", start)
        end = len(joined) if end < 0 else end + 2
        frames.append(joined[start:end])
        start = end
    return frames
