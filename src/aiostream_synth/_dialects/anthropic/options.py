"""The Anthropic Messages dialect's own options (``serve --anthropic-<option>``); light to
import."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

__all__ = ["AnthropicOptions"]


@dataclass(frozen=True, slots=True, kw_only=True)
class AnthropicOptions:
    """How Anthropic Messages streams are written."""

    #: A real event (an intermediate ``message_delta``) at least this often, seconds, besides
    #: the ``ping`` every tick: Claude Code's stream watchdog counts only 30 pings. None: pings
    #: only.
    event_keepalive_s: float | None = field(
        default=240.0,
        metadata={
            "help": "Anthropic: an intermediate message_delta at least this often, seconds, "
            "besides pings (0: pings only; Claude Code re-arms its watchdog on 30 pings at most)",
            "zero_is_none": True,
        },
    )
    #: Content blocks of a type the SDK does not know are dropped (Claude Code fails a turn
    #: whose last block is one) or passed through.
    unknown_blocks: Literal["drop", "passthrough"] = field(
        default="drop",
        metadata={
            "help": "Anthropic: content blocks of a type the SDK does not know are dropped "
            "(Claude Code fails a turn ending in one) or passed through"
        },
    )

    #: Request preparation: ``role: "system"`` messages inside ``messages`` are folded into the
    #: user turn as ``<system-reminder>`` text, forwarded, or refused with a 400.
    system_messages: Literal["translate", "forward", "reject"] = field(
        default="translate",
        metadata={
            "help": "Anthropic: role system inside messages is folded into the user turn, "
            "forwarded, or refused (400)"
        },
    )
    #: Request preparation: Claude Code's ``safeguards`` (auto mode without its classifier)
    #: are stripped instead of refusing the request.
    allow_unchecked_auto_mode: bool = field(
        default=False,
        metadata={
            "help": "Anthropic: strip Claude Code's safeguards (auto mode without its "
            "classifier) instead of refusing the request",
            "cli_name": "allow_unchecked_auto_mode",
        },
    )

    def __post_init__(self) -> None:
        value = self.event_keepalive_s
        if value is not None and not (
            isinstance(value, int | float)
            and not isinstance(value, bool)
            and math.isfinite(value)
            and value > 0
        ):
            raise ValueError(
                "event_keepalive_s must be a positive number of seconds or None (pings only; "
                f"0 on the command line), not {value!r}"
            )
