"""The Chat Completions -> Responses bridge as the dialect interface sees it."""

from __future__ import annotations

from aiostream_synth._dialects.bridges.chat_responses.request import chat_to_responses_request
from aiostream_synth._dialects.bridges.chat_responses.result import responses_to_chat_result
from aiostream_synth._dialects.bridges.pair import PairBridge

__all__ = ["CHAT_TO_RESPONSES"]

CHAT_TO_RESPONSES = PairBridge(
    "chat", "responses", chat_to_responses_request, responses_to_chat_result
)
