"""The Responses dialect's own options (``serve --responses-<option>``); light to import."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ["ResponsesOptions"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponsesOptions:
    """How Responses streams are written."""

    events: Literal["full", "minimal"] = field(
        default="full", metadata={"help": "Responses event fidelity"}
    )
    #: ``comment`` sends SSE comments instead of keepalive events (Codex's idle timer ignores
    #: comments: it needs the events).
    keepalive: Literal["events", "comment"] = field(
        default="events",
        metadata={"help": "Responses keepalive: events (Codex needs them) or SSE comments"},
    )
