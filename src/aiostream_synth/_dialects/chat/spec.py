"""Chat Completions as an HTTP API: ``POST /v1/chat/completions`` (the dialect's spec)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from aiostream_synth._dialects.base import DialectSettings, Outcome
from aiostream_synth._dialects.chat.embedded import CHAT_EMBEDDED, ChatEmbedded
from aiostream_synth._dialects.chat.options import ChatOptions
from aiostream_synth._dialects.chat.sanitize import (
    sanitize_streaming_chat_body,
    validate_streaming_chat_params,
)
from aiostream_synth._dialects.chat.stored import CHAT_STORAGE, ChatStorage
from aiostream_synth._dialects.chat.stream import ChatDialect, chat_dialect
from aiostream_synth._dialects.openai_errors import OpenAISpecBase
from aiostream_synth._dialects.prepared import PreparedRequest, validation_error
from aiostream_synth._params.models import params_dict
from aiostream_synth._params.removals import Removals
from aiostream_synth._wire.errors import RequestError
from aiostream_synth._wire.sse import DONE_FRAME

__all__ = ["CHAT"]


class ChatSpec(OpenAISpecBase):
    """See :class:`aiostream_synth._dialects.base.DialectSpec`."""

    not_identifying = ("stream", "stream_options", "max_tokens", "max_completion_tokens")

    name: str = "chat"
    #: Stored completions (``store: true``): retrieved and deleted, no background mode.
    storage: ChatStorage = CHAT_STORAGE
    options_type: type[ChatOptions] = ChatOptions
    embedded: ChatEmbedded = CHAT_EMBEDDED
    paths: tuple[str, ...] = ("/v1/chat/completions", "/chat/completions")
    upstream_path: str = "/chat/completions"

    def wants_stream(self, body: Any) -> bool:
        """Only ``stream is True``: ``"true"`` or ``1`` stay on the strict path."""
        return isinstance(body, dict) and body.get("stream") is True

    def prepare(
        self,
        body: dict[str, Any],
        *,
        options: Any,
        params_model: type[BaseModel] | None,
        bridged: bool = False,
    ) -> PreparedRequest:
        if not self.wants_stream(body):
            if body.get("stream") not in (None, False):
                raise RequestError(
                    400,
                    "Invalid value for stream: expected true or false.",
                    param="stream",
                    code="invalid_type",
                )
            return PreparedRequest(dialect="chat", stream=False, params=body, body=body)
        removals = Removals()
        extra: dict[str, Any] = {} if params_model is None else {"params_model": params_model}
        cleaned, include_usage = sanitize_streaming_chat_body(body, removals=removals, **extra)
        try:
            model = validate_streaming_chat_params(cleaned, removals=removals, **extra)
        except ValidationError as exc:
            raise validation_error(cleaned, exc, removals) from None
        return PreparedRequest(
            dialect="chat",
            stream=True,
            params=params_dict(model),
            state=include_usage,
            removals=removals,
            body=body,
        )

    def stream_dialect(self, prepared: PreparedRequest, settings: DialectSettings) -> ChatDialect:
        return chat_dialect(prepared, settings)

    def outcome(self, last: bytes) -> Outcome:
        return "completed" if last.endswith(DONE_FRAME) else "failed"


CHAT = ChatSpec()
