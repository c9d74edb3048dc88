"""Responses that outlive their connection (decision P12): what a store needs of the dialect.

A response is stored unless its request says ``store: false`` (as upstream); a request naming
a stored one in ``previous_response_id`` is continued by putting the stored conversation (that
response's whole input, then its output) in front of its own input, for a backend that keeps
no state. A background response streams like any other, except that its id is chosen before
the backend is called and its first events (``response.created``, ``response.in_progress``)
are sent at once, so that its object exists from the start. A cancelled one ends with
``response.failed`` whose response has status ``cancelled`` (the SDK's event union has no
cancelled event; its response status does) and no error. One whose server stopped before its
end (another server sharing the store saw its lease lapse) ends with ``response.failed`` whose
response has status ``failed`` and a ``server_error``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal

import orjson

from aiostream_synth._dialects.base import DialectSettings, StoredEvent, StreamDialect
from aiostream_synth._dialects.prepared import PreparedRequest
from aiostream_synth._dialects.responses.input_items import listed_input_items
from aiostream_synth._dialects.responses.namespaces import namespace_map
from aiostream_synth._dialects.responses.options import ResponsesOptions
from aiostream_synth._dialects.responses.stream import ResponsesDialect
from aiostream_synth._dialects.responses.synthesis import new_response_id, responses_failure_frames
from aiostream_synth._wire.failures import Failure
from aiostream_synth._wire.json import dumps_exact
from aiostream_synth._wire.sse import event_frame

__all__ = ["RESPONSES_STORAGE", "ResponsesStorage"]

_TERMINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})
_TERMINAL_KINDS = frozenset(kind.encode() for kind in _TERMINAL)
#: The events that carry the response object (the terminal ones among them).
_WITH_RESPONSE = frozenset({b"response.created", b"response.in_progress", b"response.queued"})
_WITH_RESPONSE |= _TERMINAL_KINDS
_DATA = b"\ndata: "
_SEQUENCE = b',"sequence_number":'


class ResponsesStorage:
    """See :class:`aiostream_synth._dialects.base.Storage`."""

    @property
    def noun(self) -> str:
        return "Response"

    @property
    def has_background(self) -> bool:
        return True

    def new_id(self) -> str:
        return new_response_id()

    def in_progress(self, response_id: str) -> dict[str, Any]:
        return {"id": response_id, "object": "response", "status": "in_progress"}

    def final_object_json(self, dialect: StreamDialect, last_write: bytes | None) -> bytes | None:
        # The response its terminal event carries, as the event carries it (no parse).
        for frame in reversed((last_write or b"").split(b"\n\n")):
            event = self.event(frame + b"\n\n") if frame else None
            if event is not None:
                return event.response_json if event.terminal else None
        return None

    def deleted(self, response_id: str) -> dict[str, Any]:
        return {"id": response_id, "object": "response.deleted", "deleted": True}

    def holds(self, obj: dict[str, Any]) -> bool:
        return obj.get("object", "response") in ("response",)  # a backend's may lack the field

    def stored_dialect(
        self,
        prepared: PreparedRequest,
        settings: DialectSettings,
        response_id: str,
        *,
        background: bool,
        fields: Mapping[str, Any] | None = None,
    ) -> ResponsesDialect:
        if fields:  # (kept_fields gives none: the response echoes its request's metadata)
            raise ValueError("a stored response carries no fields besides its own")
        options = settings.dialect_options.get("responses") or ResponsesOptions()
        return ResponsesDialect(
            ns_map=namespace_map(prepared),
            fidelity=options.events,
            base={**prepared.echo, "background": True} if background else prepared.echo,
            # A background stream's readers resume by sequence number: events, never comments.
            keepalive="events" if background else options.keepalive,
            response_id=response_id,
            background=background,
        )

    def event(self, frame: bytes) -> StoredEvent | None:
        start = frame.find(_DATA)
        if not frame.startswith(b"event: ") or start < 0:
            return None
        kind = frame[7 : frame.find(b"\n")]
        # Our own events end with their number: read without parsing the payload (a full
        # parse below for anything else).
        cut = frame.rfind(_SEQUENCE) + len(_SEQUENCE)
        digits = frame[cut:].rstrip(b"}\n")
        if cut > len(_SEQUENCE) and digits.isdigit():
            sequence = int(digits)
            if kind not in _WITH_RESPONSE:
                return StoredEvent(sequence, terminal=False, response_json=None)
            head = b'{"type":"%b","response":' % kind
            body = start + len(_DATA)
            if frame.startswith(head, body):
                if kind == b"response.in_progress":
                    # A keepalive (the hot path): its number is all that is new; the response
                    # it carries is the one response.created carried.
                    template = (frame[:cut], frame[cut + len(digits) :])
                    return StoredEvent(sequence, False, response_json=None, keepalive=template)
                return StoredEvent(
                    sequence,
                    terminal=kind in _TERMINAL_KINDS,
                    response_json=frame[body + len(head) : cut - len(_SEQUENCE)],
                )
        payload = orjson.loads(frame[start + len(_DATA) :])
        response = payload.get("response")
        return StoredEvent(
            sequence=int(payload["sequence_number"]),
            terminal=payload.get("type") in _TERMINAL,
            response_json=dumps_exact(response) if isinstance(response, dict) else None,
        )

    def failure_frames(
        self, prepared: PreparedRequest, response_id: str, failure: Failure, sequence_start: int
    ) -> list[bytes]:
        return responses_failure_frames(
            failure.message,
            failure.code,
            response_id,
            include_created=sequence_start == 0,
            fidelity="full",
            base={**prepared.echo, "background": True},
            sequence_start=sequence_start,
        )

    def cancelled(self, obj: dict[str, Any]) -> dict[str, Any]:
        return {**obj, "status": "cancelled", "error": None}

    def cancelled_frames(self, obj: dict[str, Any], sequence_start: int) -> list[bytes]:
        payload = {
            "type": "response.failed",
            "response": self.cancelled(obj),
            "sequence_number": sequence_start,
        }
        return [event_frame("response.failed", payload)]

    def abandoned(self, obj: dict[str, Any], message: str) -> dict[str, Any]:
        return {**obj, "status": "failed", "error": {"code": "server_error", "message": message}}

    def abandoned_frames(self, obj: dict[str, Any], sequence_start: int) -> list[bytes]:
        payload = {"type": "response.failed", "response": obj, "sequence_number": sequence_start}
        return [event_frame("response.failed", payload)]

    @property
    def items_action(self) -> str:
        return "input_items"

    @property
    def items_order(self) -> Literal["asc", "desc"]:
        return "desc"  # upstream's default: the latest item first

    def listed_items(self, stored_input: list[Any], response_id: str) -> list[dict[str, Any]]:
        return listed_input_items(stored_input, response_id)

    @property
    def answers_list(self) -> None:
        return None  # upstream lists no responses

    def kept_fields(self, body: dict[str, Any]) -> dict[str, Any]:
        return {}  # the response object echoes its request's metadata itself

    @property
    def updatable(self) -> bool:
        return False

    def updated(self, obj: dict[str, Any], body: object) -> dict[str, Any]:
        raise NotImplementedError("a stored response is not updated")

    def matches(self, obj: dict[str, Any], filters: Mapping[str, list[str]]) -> bool:
        raise NotImplementedError("upstream lists no responses")

    def stores(self, body: dict[str, Any]) -> bool:
        return body.get("store") is not False  # stored by default, as upstream

    def previous(self, body: dict[str, Any]) -> str | None:
        previous = body.get("previous_response_id")
        return previous if isinstance(previous, str) and previous else None

    def served_previous(self) -> tuple[tuple[str | int, ...], str]:
        return (
            "previous_response_id",
        ), "served by the proxy's store (its conversation is in input)"

    def input_items(self, body: dict[str, Any]) -> list[Any]:
        items = body.get("input")
        if isinstance(items, str):
            return [{"type": "message", "role": "user", "content": items}]
        return list(items) if isinstance(items, list) else []

    def continued(self, body: dict[str, Any], history: list[Any]) -> dict[str, Any]:
        rest = {key: value for key, value in body.items() if key != "previous_response_id"}
        return {**rest, "input": [*history, *self.input_items(body)]}

    def history(self, stored_input: list[Any], obj: dict[str, Any]) -> list[Any]:
        output = obj.get("output")
        return [*stored_input, *(item for item in output or () if isinstance(item, dict))]

    def continuable(self, obj: dict[str, Any]) -> bool:
        return obj.get("status") in ("completed", "incomplete")

    def status(self, obj: dict[str, Any]) -> str:
        status = obj.get("status")
        return status if isinstance(status, str) else "unknown"


RESPONSES_STORAGE = ResponsesStorage()
