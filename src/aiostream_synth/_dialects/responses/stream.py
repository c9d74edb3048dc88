"""Responses output options and one stream's frames (the engine's view of the dialect).

A stream opened by keepalive events (``response.created``, then ``response.in_progress`` each
tick) is continued by its result: same response id, sequence numbers counting on.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from aiostream_synth._dialects.base import ErrorResponse
from aiostream_synth._dialects.responses.namespaces import NamespaceMap
from aiostream_synth._dialects.responses.synthesis import (
    Fidelity,
    ResponsesKeepalive,
    new_response_id,
    responses_failure_frames,
    responses_frames,
)
from aiostream_synth._wire.coerce import as_json_dict
from aiostream_synth._wire.errors import InvalidResultError
from aiostream_synth._wire.failures import Failure
from aiostream_synth._wire.sse import KEEPALIVE_COMMENT

__all__ = ["ResponsesDialect", "ResponsesStream"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponsesDialect:
    """Responses output options."""

    ns_map: NamespaceMap = field(default_factory=dict)
    fidelity: Fidelity = "full"
    #: ``"events"``: ``response.created`` / ``response.in_progress`` (what Codex needs: SSE
    #: comments never reset its idle timer); ``"comment"``: ``: keep-alive`` comments only,
    #: as a generic SSE proxy would send.
    keepalive: Literal["events", "comment"] = "events"
    #: The id every event carries; generated when None. The result's own id is replaced by it.
    response_id: str | None = None
    #: Skeleton fields for keepalive envelopes before the result exists (``model``, echoes...).
    base: Mapping[str, Any] | None = None
    delta_chars: int | None = None
    #: A background response (decision P12): its final object says so, whatever the backend's
    #: says (the backend was asked for one complete answer, not a background one).
    background: bool = False

    def open_stream(self) -> ResponsesStream:
        return ResponsesStream(self)


class ResponsesStream:
    """One Responses stream: its id, whether keepalive events opened it, its next number."""

    __slots__ = ("_keepalive", "_opened", "_options", "_run", "_seq", "response_id")

    def __init__(self, options: ResponsesDialect) -> None:
        self._options = options
        self.response_id: str = options.response_id or new_response_id()
        self._opened = False  # keepalive events sent response.created
        self._seq = 0
        self._keepalive: ResponsesKeepalive | None = None  # its envelope serialized once
        self._run: int | None = None  # see run_start

    def keepalive_frames(self, now: float) -> list[bytes]:
        options = self._options
        self._run = None  # a keepalive (and response.created) carries the response
        if options.keepalive == "comment":
            return [KEEPALIVE_COMMENT]
        if self._keepalive is None:
            self._keepalive = ResponsesKeepalive(self.response_id, base=dict(options.base or {}))
        frames = self._keepalive.frames(include_created=not self._opened, sequence_start=self._seq)
        self._opened = True
        self._seq += len(frames)
        return frames

    def skip_to(self, sequence: int) -> None:
        if sequence < self._seq:
            raise ValueError(f"event {self._seq} is next; cannot number the next one {sequence}")
        self._seq = sequence

    def result_frames(self, result: Any) -> list[bytes]:
        options = self._options
        if options.background:
            result = {
                **as_json_dict(result, InvalidResultError, "responses result"),
                "background": True,
            }
        frames = responses_frames(
            result,
            options.ns_map,
            fidelity=options.fidelity,
            include_created=not self._opened,
            # Before commit the result keeps its own id unless the caller fixed one.
            response_id=self.response_id if self._opened else options.response_id,
            sequence_start=self._seq,
            delta_chars=options.delta_chars,
            # After keepalive events, response.created told the client when it was created.
            created_at=self._keepalive.created_at if self._keepalive is not None else None,
        )
        # After the opening events only the terminal one carries the response.
        self._run = self._seq if self._opened else None
        return frames

    def failure_frames(self, failure: Failure) -> list[bytes]:
        options = self._options
        frames = responses_failure_frames(
            failure.message,
            failure.code,
            self.response_id,
            include_created=not self._opened,
            fidelity=options.fidelity,
            base=self._base(),
            sequence_start=self._seq,
        )
        self._run = self._seq if self._opened else None  # [error,] response.failed
        return frames

    def run_start(self) -> int | None:
        return self._run

    def _base(self) -> dict[str, Any]:
        """The skeleton fields, with the ``created_at`` response.created already said."""
        base = dict(self._options.base or {})
        if self._keepalive is not None:
            base["created_at"] = self._keepalive.created_at
        return base

    def error_response(self, failure: Failure) -> ErrorResponse:
        return ErrorResponse(failure.status_code, failure.body())
