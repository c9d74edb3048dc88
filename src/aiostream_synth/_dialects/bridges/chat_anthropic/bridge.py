"""The Chat Completions -> Anthropic Messages bridge as the dialect interface sees it."""

from __future__ import annotations

import functools

from aiostream_synth._dialects.bridges.chat_anthropic.request import chat_to_anthropic_request
from aiostream_synth._dialects.bridges.chat_anthropic.result import (
    anthropic_message_to_chat_completion,
)
from aiostream_synth._dialects.bridges.options import BridgeOptions
from aiostream_synth._dialects.prepared import BridgedRequest, PreparedRequest

__all__ = ["CHAT_TO_ANTHROPIC", "ChatToAnthropic"]


class ChatToAnthropic:
    """See :class:`aiostream_synth._dialects.base.Bridge`."""

    client = "chat"
    upstream = "anthropic"

    def open(self, prepared: PreparedRequest, options: BridgeOptions) -> BridgedRequest:
        body, ctx = chat_to_anthropic_request(prepared.params, options, removals=prepared.removals)
        return BridgedRequest(
            dialect="anthropic",
            params=body,
            convert=functools.partial(anthropic_message_to_chat_completion, ctx=ctx),
        )


CHAT_TO_ANTHROPIC = ChatToAnthropic()
