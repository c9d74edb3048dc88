"""The Chat Completions -> Responses bridge as the dialect interface sees it."""

from __future__ import annotations

import functools

from aiostream_synth._dialects.bridges.chat_responses.request import chat_to_responses_request
from aiostream_synth._dialects.bridges.chat_responses.result import response_to_chat_completion
from aiostream_synth._dialects.bridges.options import BridgeOptions
from aiostream_synth._dialects.prepared import BridgedRequest, PreparedRequest

__all__ = ["CHAT_TO_RESPONSES", "ChatToResponses"]


class ChatToResponses:
    """See :class:`aiostream_synth._dialects.base.Bridge`."""

    client = "chat"
    upstream = "responses"

    def open(self, prepared: PreparedRequest, options: BridgeOptions) -> BridgedRequest:
        body, ctx = chat_to_responses_request(prepared.params, options, removals=prepared.removals)
        return BridgedRequest(
            dialect="responses",
            params=body,
            convert=functools.partial(response_to_chat_completion, ctx=ctx),
        )


CHAT_TO_RESPONSES = ChatToResponses()
