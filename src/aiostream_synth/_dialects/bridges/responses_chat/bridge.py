"""The Responses -> Chat Completions bridge as the dialect interface sees it."""

from __future__ import annotations

import functools
import time

from aiostream_synth._dialects.bridges.options import BridgeOptions
from aiostream_synth._dialects.bridges.responses_chat.request import responses_to_chat_request
from aiostream_synth._dialects.bridges.responses_chat.result import (
    chat_to_responses_result,
    empty_response,
)
from aiostream_synth._dialects.prepared import BridgedRequest, PreparedRequest
from aiostream_synth._dialects.responses.namespaces import namespace_map

__all__ = ["RESPONSES_TO_CHAT", "ResponsesToChat"]


class ResponsesToChat:
    """See :class:`aiostream_synth._dialects.base.Bridge`."""

    client = "responses"
    upstream = "chat"

    def open(self, prepared: PreparedRequest, options: BridgeOptions) -> BridgedRequest:
        created_at = int(time.time())
        chat, ctx = responses_to_chat_request(
            prepared.params,
            options,
            removals=prepared.removals,
            ns_map=namespace_map(prepared),
            client_body=prepared.body,
            created_at=created_at,
        )
        return BridgedRequest(
            dialect="chat",
            params=chat,
            convert=functools.partial(chat_to_responses_result, ctx=ctx),
            local_result=empty_response(ctx) if ctx.answer_locally else None,
            echo={"created_at": created_at},
        )


RESPONSES_TO_CHAT = ResponsesToChat()
