"""The Chat Completions -> Anthropic Messages bridge as the dialect interface sees it."""

from __future__ import annotations

from aiostream_synth._dialects.bridges.chat_anthropic.request import chat_to_anthropic_request
from aiostream_synth._dialects.bridges.chat_anthropic.result import (
    anthropic_to_chat_result,
)
from aiostream_synth._dialects.bridges.pair import PairBridge

__all__ = ["CHAT_TO_ANTHROPIC"]

CHAT_TO_ANTHROPIC = PairBridge(
    "chat", "anthropic", chat_to_anthropic_request, anthropic_to_chat_result
)
