"""The Anthropic Messages -> Chat Completions bridge as the dialect interface sees it."""

from __future__ import annotations

from aiostream_synth._dialects.bridges.anthropic_chat.request import anthropic_to_chat_request
from aiostream_synth._dialects.bridges.anthropic_chat.result import chat_to_anthropic_result
from aiostream_synth._dialects.bridges.pair import PairBridge

__all__ = ["ANTHROPIC_TO_CHAT"]

ANTHROPIC_TO_CHAT = PairBridge(
    "anthropic", "chat", anthropic_to_chat_request, chat_to_anthropic_result
)
