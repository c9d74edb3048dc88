"""Anthropic Messages output options and one stream's frames (the engine's view of the dialect).

The first keepalive tick commits the stream: headers, then ``message_start`` (an id we mint,
the requested model, zero usage) and a ``ping``. Each later tick is a ``ping``; and at least
every ``event_keepalive_s`` an intermediate ``message_delta`` too, so that Claude Code's stream
watchdog (300 s, re-armed by at most 30 consecutive pings) never fires during a long turn. The
result then continues the stream: its blocks, the final ``message_delta`` carrying the whole
usage, ``message_stop``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from aiostream_synth._dialects.anthropic.errors import error_event_type, failure_response
from aiostream_synth._dialects.anthropic.synthesis import (
    PING_FRAME,
    UnknownBlocks,
    anthropic_error_frame,
    anthropic_frames,
    event_keepalive_frame,
    message_start_frame,
    new_message_id,
    zero_usage,
)
from aiostream_synth._dialects.base import ErrorResponse
from aiostream_synth._wire.failures import Failure

__all__ = ["AnthropicDialect", "AnthropicStream"]


@dataclass(frozen=True, slots=True, kw_only=True)
class AnthropicDialect:
    """Anthropic Messages output options."""

    #: The requested model, for the ``message_start`` a keepalive commits with.
    model: str | None = None
    #: An intermediate ``message_delta`` at least this often (seconds), besides the pings;
    #: None for pings only.
    event_keepalive_s: float | None = 240.0
    unknown_blocks: UnknownBlocks = "drop"
    #: The id the stream's ``message_start`` carries; minted when None.
    message_id: str | None = None

    def open_stream(self) -> AnthropicStream:
        return AnthropicStream(self)


class AnthropicStream:
    """One Messages stream: whether a keepalive opened it, and when its last event went out."""

    __slots__ = ("_last_event", "_opened", "_options", "response_id")

    def __init__(self, options: AnthropicDialect) -> None:
        self._options = options
        self.response_id: str = options.message_id or new_message_id()
        self._opened = False
        self._last_event = 0.0

    def keepalive_frames(self, now: float) -> list[bytes]:
        if not self._opened:
            self._opened = True
            self._last_event = now
            start = message_start_frame(self.response_id, self._options.model, zero_usage())
            return [start, PING_FRAME]
        interval = self._options.event_keepalive_s
        if interval is not None and now - self._last_event >= interval:
            self._last_event = now
            return [PING_FRAME, event_keepalive_frame()]
        return [PING_FRAME]

    def result_frames(self, result: Any) -> list[bytes]:
        return anthropic_frames(
            result,
            include_start=not self._opened,
            message_id=self.response_id if self._opened else self._options.message_id,
            unknown_blocks=self._options.unknown_blocks,
        )

    def failure_frames(self, failure: Failure) -> list[bytes]:
        return [anthropic_error_frame(error_event_type(failure), failure.message)]

    def error_response(self, failure: Failure) -> ErrorResponse:
        return failure_response(failure)
