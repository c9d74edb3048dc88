"""Stored chat completions (decision P12): what a store needs of the Chat Completions dialect.

A completion is stored when its request says ``store: true`` (the API's default is not to),
and is then retrieved whole (``GET /v1/chat/completions/{id}``) or deleted (``DELETE``) by
the credentials that created it. A streamed one is kept once its stream has ended with its
answer, under an id of ours that every chunk carries; the object kept is the completion as a
non-streaming request would have got it (``object: "chat.completion"``, its usage's counters
complete). A non-streaming one is kept under an id of ours too, which its answer carries
(a backend's ids may repeat). The API has no background mode, no cancel and no continuation
(the client sends the whole conversation each turn). A stored completion's messages are
listed (``GET /v1/chat/completions/{id}/messages``), a key's stored completions too (``GET
/v1/chat/completions``, by ``model`` and ``metadata``), and their metadata, which the kept
object carries as upstream's does, is updated by ``POST /v1/chat/completions/{id}``.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from typing import Any, Literal

import orjson

from aiostream_synth._dialects.base import (
    DialectSettings,
    ErrorResponse,
    StoredEvent,
    StreamDialect,
)
from aiostream_synth._dialects.chat.stream import ChatDialect, ChatStream, chat_dialect
from aiostream_synth._dialects.prepared import PreparedRequest
from aiostream_synth._wire.coerce import as_json_dict
from aiostream_synth._wire.errors import InvalidResultError, RequestError
from aiostream_synth._wire.failures import Failure
from aiostream_synth._wire.ids import random_hex
from aiostream_synth._wire.sse import DONE_FRAME
from aiostream_synth._wire.usage import wire_chat_usage

__all__ = ["CHAT_STORAGE", "ChatStorage", "KeptChatDialect", "KeptChatStream"]


class KeptChatDialect:
    """The output options of a stored chat stream: its id ours, and the completion it
    rendered, kept for the store (``final``, serialized) once its chunks are made."""

    __slots__ = ("fields", "final", "options", "response_id")

    def __init__(
        self, options: ChatDialect, response_id: str, fields: Mapping[str, Any] | None = None
    ) -> None:
        self.options = options
        self.response_id = response_id
        #: What of the request the kept completion carries besides the answer (its metadata).
        self.fields = fields
        self.final: bytes | None = None

    def open_stream(self) -> KeptChatStream:
        return KeptChatStream(self)


class KeptChatStream:
    """A stored chat stream's frames: a plain chat stream's, every chunk carrying the stored
    id."""

    __slots__ = ("_kept", "_plain")

    def __init__(self, kept: KeptChatDialect) -> None:
        self._kept = kept
        self._plain = ChatStream(kept.options)

    @property
    def response_id(self) -> str:
        return self._kept.response_id

    def keepalive_frames(self, now: float) -> list[bytes]:
        return self._plain.keepalive_frames(now)

    def result_frames(self, result: Any) -> list[bytes]:
        data = as_json_dict(result, InvalidResultError, "chat completion")
        created, model = data.get("created"), data.get("model")
        completion = {
            **data,
            "id": self._kept.response_id,
            "object": "chat.completion",
            # What the chunks carry (the same defaults), so the object kept matches them.
            "created": int(time.time()) if created is None else created,
            "model": "" if model is None else model,
        }
        frames = self._plain.result_frames(completion)  # a bad result raises: nothing kept
        if isinstance(completion.get("usage"), dict):
            completion["usage"] = wire_chat_usage(completion["usage"])
        fields = self._kept.fields
        self._kept.final = orjson.dumps({**completion, **fields} if fields else completion)
        return frames

    def failure_frames(self, failure: Failure) -> list[bytes]:
        return self._plain.failure_frames(failure)

    def error_response(self, failure: Failure) -> ErrorResponse:
        return self._plain.error_response(failure)

    def skip_to(self, sequence: int) -> None:
        return None  # no numbered events: never recorded event by event

    def run_start(self) -> int | None:
        return None


class ChatStorage:
    """See :class:`aiostream_synth._dialects.base.Storage`: retrieval and deletion only."""

    @property
    def noun(self) -> str:
        return "Chat completion"

    @property
    def has_background(self) -> bool:
        return False

    def new_id(self) -> str:
        return "chatcmpl-" + random_hex()

    def in_progress(self, response_id: str) -> None:
        return None  # kept once it has ended (upstream has no completion in progress)

    def final_object_json(self, dialect: StreamDialect, last_write: bytes | None) -> bytes | None:
        if not isinstance(dialect, KeptChatDialect) or last_write is None:
            return None
        # Only a stream that ended with its answer: an in-band error ends without [DONE].
        return dialect.final if last_write.endswith(DONE_FRAME) else None

    def deleted(self, response_id: str) -> dict[str, Any]:
        return {"id": response_id, "object": "chat.completion.deleted", "deleted": True}

    def holds(self, obj: dict[str, Any]) -> bool:
        # A backend's own object may lack the field.
        return obj.get("object", "chat.completion") in ("chat.completion",)

    @property
    def items_action(self) -> str:
        return "messages"

    @property
    def items_order(self) -> Literal["asc", "desc"]:
        return "asc"  # upstream's default: the conversation's order

    def listed_items(self, stored_input: list[Any], response_id: str) -> list[dict[str, Any]]:
        listed: list[dict[str, Any]] = []
        for place, message in enumerate(stored_input):
            if not isinstance(message, dict):  # (validated messages hold none)
                continue
            shown = {**message, "id": f"{response_id}-{place}"}
            content = message.get("content")
            if isinstance(content, list):
                # Upstream's stored message: its text as content, its parts beside it.
                texts = [
                    part["text"]
                    for part in content
                    if isinstance(part, dict) and isinstance(part.get("text"), str)
                ]
                shown["content"] = "".join(texts) if texts else None
                shown["content_parts"] = content
            listed.append(shown)
        return listed

    @property
    def answers_list(self) -> str:
        return "chat.completions"

    def kept_fields(self, body: dict[str, Any]) -> dict[str, Any]:
        metadata = body.get("metadata")
        return {"metadata": metadata if isinstance(metadata, dict) else {}}

    @property
    def updatable(self) -> bool:
        return True

    def updated(self, obj: dict[str, Any], body: object) -> dict[str, Any]:
        if not isinstance(body, dict) or "metadata" not in body:
            raise RequestError(
                400, "An update takes {'metadata': {...}}.", param="metadata", code="missing"
            )
        unknown = sorted(key for key in body if key != "metadata")
        if unknown:
            raise RequestError(
                400,
                f"Only metadata can be updated, not {', '.join(map(repr, unknown))}.",
                param=unknown[0],
                code="unknown_parameter",
            )
        return {**obj, "metadata": _metadata(body["metadata"])}

    def matches(self, obj: dict[str, Any], filters: Mapping[str, list[str]]) -> bool:
        model = filters.get("model")
        if model and obj.get("model") != model[-1]:
            return False
        metadata = obj.get("metadata")
        kept = metadata if isinstance(metadata, dict) else {}
        wanted = {
            key[len("metadata[") : -1]: values[-1]
            for key, values in filters.items()
            if key.startswith("metadata[") and key.endswith("]")
        }
        return all(kept.get(key) == value for key, value in wanted.items())

    def stored_dialect(
        self,
        prepared: PreparedRequest,
        settings: DialectSettings,
        response_id: str,
        *,
        background: bool,
        fields: Mapping[str, Any] | None = None,
    ) -> KeptChatDialect:
        if background:
            raise ValueError("Chat Completions has no background mode")
        return KeptChatDialect(chat_dialect(prepared, settings), response_id, fields)

    def stores(self, body: dict[str, Any]) -> bool:
        return body.get("store") is True  # not stored by default, as upstream

    def input_items(self, body: dict[str, Any]) -> list[Any]:
        messages = body.get("messages")
        return messages if isinstance(messages, list) else []

    def previous(self, body: dict[str, Any]) -> None:
        return None  # no continuation: each request carries its whole conversation

    def continuable(self, obj: dict[str, Any]) -> bool:
        return False

    def status(self, obj: dict[str, Any]) -> str:
        return "completed"

    # -- background mode, continuation: never asked of a dialect without them -----------------
    def served_previous(self) -> tuple[tuple[str | int, ...], str]:
        raise NotImplementedError("Chat Completions has no previous_response_id")

    def continued(self, body: dict[str, Any], history: list[Any]) -> dict[str, Any]:
        raise NotImplementedError("Chat Completions has no previous_response_id")

    def history(self, stored_input: list[Any], obj: dict[str, Any]) -> list[Any]:
        raise NotImplementedError("Chat Completions has no previous_response_id")

    def event(self, frame: bytes) -> StoredEvent | None:
        raise NotImplementedError("Chat Completions has no background mode")

    def failure_frames(
        self, prepared: PreparedRequest, response_id: str, failure: Failure, sequence_start: int
    ) -> list[bytes]:
        raise NotImplementedError("Chat Completions has no background mode")

    def cancelled_frames(self, obj: dict[str, Any], sequence_start: int) -> list[bytes]:
        raise NotImplementedError("Chat Completions has no background mode")

    def cancelled(self, obj: dict[str, Any]) -> dict[str, Any]:
        raise NotImplementedError("Chat Completions has no background mode")

    def abandoned(self, obj: dict[str, Any], message: str) -> dict[str, Any]:
        raise NotImplementedError("Chat Completions has no background mode")

    def abandoned_frames(self, obj: dict[str, Any], sequence_start: int) -> list[bytes]:
        raise NotImplementedError("Chat Completions has no background mode")


#: Upstream's bounds on metadata: pairs, a key's length, a value's length.
_METADATA_PAIRS, _METADATA_KEY, _METADATA_VALUE = 16, 64, 512


def _metadata(value: object) -> dict[str, str]:
    """An update's metadata (None: none), checked as upstream checks it."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(key, str) and isinstance(text, str) for key, text in value.items()
    ):
        raise RequestError(
            400,
            "metadata is an object of string values (or null).",
            param="metadata",
            code="invalid_type",
        )
    if len(value) > _METADATA_PAIRS:
        raise RequestError(
            400,
            f"metadata holds at most {_METADATA_PAIRS} pairs, not {len(value)}.",
            param="metadata",
            code="invalid_value",
        )
    for key, text in value.items():
        if len(key) > _METADATA_KEY or len(text) > _METADATA_VALUE:
            raise RequestError(
                400,
                f"metadata key {key[:80]!r}: keys are at most {_METADATA_KEY} characters, "
                f"values at most {_METADATA_VALUE}.",
                param=f"metadata.{key[:80]}",
                code="invalid_value",
            )
    return dict(value)


CHAT_STORAGE = ChatStorage()
