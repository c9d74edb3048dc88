"""The Chat Completions dialect's own options (``serve --chat-<option>``); light to import."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ["ChatOptions"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatOptions:
    """How Chat Completions streams are written."""

    keepalive: Literal["comment", "none"] = field(
        default="comment",
        metadata={"help": "chat keepalive: SSE comment, or nothing"},
    )
    emit_reasoning_alias: bool = field(
        default=False,
        metadata={
            "help": "chat: send reasoning as `reasoning` as well as `reasoning_content` "
            "(clients that read the other name)"
        },
    )
