"""Chat Completions output options and one stream's frames (the engine's view of the dialect)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from aiostream_synth._dialects.base import DialectSettings, ErrorResponse
from aiostream_synth._dialects.chat.options import ChatOptions
from aiostream_synth._dialects.chat.synthesis import (
    CHAT_KEEPALIVE_FRAME,
    chat_error_frame,
    chat_frames,
)
from aiostream_synth._dialects.prepared import PreparedRequest
from aiostream_synth._wire.failures import Failure

__all__ = ["ChatDialect", "ChatStream", "chat_dialect"]

_DEFAULTS = ChatOptions()


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatDialect:
    """Chat Completions output options."""

    include_usage: bool = False
    #: ``"comment"`` sends ``: keep-alive`` each tick; ``"none"`` sends nothing (and so never
    #: commits the stream before the result).
    keepalive: Literal["comment", "none"] = "comment"
    emit_reasoning_alias: bool = False
    include_logprobs: bool = False

    def open_stream(self) -> ChatStream:
        return ChatStream(self)


class ChatStream:
    """One chat stream: keepalive comments, the completion's chunks, an in-band error frame.
    Stateless beyond its options: every chunk repeats the completion's own id."""

    __slots__ = ("_options",)

    response_id = None

    def __init__(self, options: ChatDialect) -> None:
        self._options = options

    def keepalive_frames(self, now: float) -> list[bytes]:
        return [CHAT_KEEPALIVE_FRAME] if self._options.keepalive == "comment" else []

    def result_frames(self, result: Any) -> list[bytes]:
        options = self._options
        return chat_frames(
            result,
            options.include_usage,
            emit_reasoning_alias=options.emit_reasoning_alias,
            include_logprobs=options.include_logprobs,
        )

    def failure_frames(self, failure: Failure) -> list[bytes]:
        return [chat_error_frame(failure.message, type=failure.type, code=failure.code)]

    def error_response(self, failure: Failure) -> ErrorResponse:
        return ErrorResponse(failure.status_code, failure.body())


def chat_dialect(prepared: PreparedRequest, settings: DialectSettings) -> ChatDialect:
    """The output options of a prepared chat stream, under ``settings``."""
    options = settings.dialect_options.get("chat") or _DEFAULTS
    return ChatDialect(
        include_usage=prepared.state is True,
        keepalive=options.keepalive,
        emit_reasoning_alias=options.emit_reasoning_alias,
    )
