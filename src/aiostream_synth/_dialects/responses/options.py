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
    #: Request preparation: custom (free-form) tools are dropped (and reported).
    drop_custom_tools: bool = field(
        default=False,
        metadata={
            "help": "drop Responses custom (free-form) tools",
            "cli_name": "drop_custom_tools",
        },
    )
    #: Request preparation: hosted tools (``web_search``...) are dropped (and reported).
    drop_hosted_tools: bool = field(
        default=False,
        metadata={
            "help": "drop hosted tools (web_search, ...) the backend cannot serve",
            "cli_name": "drop_hosted_tools",
        },
    )
    #: Request preparation: custom tools inside ``additional_tools`` carriers are hoisted with
    #: the function ones (a request bridged to another dialect always hoists them).
    hoist_carrier_custom_tools: bool = field(
        default=False,
        metadata={
            "help": "hoist custom tools from additional_tools carriers",
            "cli_name": "hoist_carrier_custom_tools",
        },
    )
