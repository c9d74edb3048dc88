"""The Anthropic Messages -> Chat Completions bridge as the dialect interface sees it."""

from __future__ import annotations

import functools

from aiostream_synth._dialects.bridges.anthropic_chat.request import anthropic_to_chat
from aiostream_synth._dialects.bridges.anthropic_chat.result import chat_to_anthropic_message
from aiostream_synth._dialects.bridges.options import BridgeOptions
from aiostream_synth._dialects.prepared import BridgedRequest, PreparedRequest

__all__ = ["ANTHROPIC_TO_CHAT", "AnthropicToChat"]


class AnthropicToChat:
    """See :class:`aiostream_synth._dialects.base.Bridge`."""

    client = "anthropic"
    upstream = "chat"

    def open(self, prepared: PreparedRequest, options: BridgeOptions) -> BridgedRequest:
        chat, ctx = anthropic_to_chat(prepared.params, options, removals=prepared.removals)
        return BridgedRequest(
            dialect="chat",
            params=chat,
            convert=functools.partial(chat_to_anthropic_message, ctx=ctx),
        )


ANTHROPIC_TO_CHAT = AnthropicToChat()
