"""The sse-starlette adapter behind the public :mod:`aiostream_synth.starlette` (see its docstring).

Deliberate differences from a plain ``EventSourceResponse``:
* sse-starlette's own ping is off (``ping=0``): the engine's keepalive is the ping, and it is a
  real ``response.in_progress`` event for Responses clients;
* the engine is entered in :meth:`SynthesizedEventSourceResponse.__call__`, around the whole
  response, and its first frame is awaited before any header is sent, so a backend failure
  before the first keepalive tick is a real HTTP error status;
* shutdown never depends on sse-starlette's process-global exit state: its grace period is
  endless (``shutdown_grace_period=inf``, public since sse-starlette 3.x), so it never cancels
  the response, and our :class:`ShutdownSignal` ends the stream with its terminal failure event
  instead. (While a server exits, sse-starlette then checks each open response every 0.1 s
  until it ends: a cost of the drain only.)
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable, Mapping

from sse_starlette import EventSourceResponse
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from aiostream_synth._dialects.base import DialectSpec, ErrorResponse, LocalRoute, RequestTarget
from aiostream_synth._dialects.registry import route_table, spec_for
from aiostream_synth._engine.shutdown import ShutdownSignal
from aiostream_synth._engine.stream import SynthesizedStream
from aiostream_synth._serving.pipeline import (
    CompletionBackend,
    StreamSettings,
    admit,
    answer_locally,
    background_refused,
    open_stream,
    received_at,
    request_headers,
    run_backend_once,
)
from aiostream_synth._wire.errors import BackendError
from aiostream_synth._wire.json import dumps

__all__ = [
    "SynthesizedEventSourceResponse",
    "synthesizing_endpoint",
    "synthesizing_routes",
]


class _FirstThenRest:
    """An async iterator: one already-taken frame, then the rest of the stream (no scope held)."""

    __slots__ = ("_first", "_rest")

    def __init__(self, first: bytes | None, rest: SynthesizedStream) -> None:
        self._first = first
        self._rest = rest

    def __aiter__(self) -> _FirstThenRest:
        return self

    async def __anext__(self) -> bytes:
        if self._first is not None:
            first, self._first = self._first, None
            return first
        return await self._rest.__anext__()


class SynthesizedEventSourceResponse(EventSourceResponse):
    """An ``EventSourceResponse`` whose content is an engine stream, owned by this response."""

    def __init__(
        self,
        stream: SynthesizedStream,
        *,
        send_timeout: float | None = None,
        shutdown: ShutdownSignal | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(
            content=_FirstThenRest(None, stream),
            ping=0,
            send_timeout=send_timeout,
            headers={"Cache-Control": "no-cache", **(headers or {})},
            # sse-starlette's public knob for its process-global exit state: on a server's exit
            # it would cancel the response after the grace period; never, here.
            shutdown_grace_period=math.inf,
        )
        self._stream = stream
        self._shutdown = shutdown
        #: Our own headers, kept on a pre-commit error answer too (not the SSE ones).
        self._carried = {k.lower() for k in headers or {}}

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with self._stream:
            try:
                first: bytes | None = await self._stream.__anext__()
            except BackendError as exc:
                ours = {k: v for k, v in self.headers.items() if k in self._carried}
                answer = ErrorResponse(exc.status_code, exc.body, exc.headers)
                await _json(answer, ours)(scope, receive, send)
                return
            except StopAsyncIteration:
                first = None
            self.body_iterator = _FirstThenRest(first, self._stream)
            if self._shutdown is None:
                await super().__call__(scope, receive, send)
            else:
                with self._shutdown.track(self._stream):
                    await super().__call__(scope, receive, send)


def _json(answer: ErrorResponse, under: Mapping[str, str] | None = None) -> Response:
    """A JSON answer in a dialect's shape, with ``under`` headers beneath its own."""
    return Response(
        dumps(answer.body),
        status_code=answer.status_code,
        media_type="application/json",
        headers={**(under or {}), **answer.headers},
    )


def synthesizing_endpoint(
    dialect: str | DialectSpec,
    backend: CompletionBackend,
    settings: StreamSettings | None = None,
    *,
    shutdown: ShutdownSignal | None = None,
    send_timeout: float | None = None,
) -> Callable[[Request], Awaitable[Response]]:
    """A Starlette / FastAPI endpoint serving ``dialect`` (a name such as ``"responses"``, or a
    spec) from ``backend``. Retries are not coalesced on this path (the native app does that)."""
    options = settings or StreamSettings()
    spec = spec_for(dialect)

    async def endpoint(request: Request) -> Response:
        arrived = received_at(request.scope)
        target = RequestTarget(request.url.path, dict(request.path_params), request.url.query)
        admitted = await admit(spec, request.receive, options, target, shutdown)
        if admitted is None:
            return Response(status_code=400)  # the client left while sending
        if isinstance(admitted, ErrorResponse):
            return _json(admitted)
        prepared, headers = admitted.prepared, admitted.headers
        if prepared.background:
            why = (
                "these routes have none (serve with SynthesizingApp(store=...) or "
                "aiostream-synth serve)."
            )
            return _json(background_refused(spec, headers, why))
        calling = request_headers(request.scope)
        if not prepared.stream:
            answer = await run_backend_once(spec, prepared, backend, options, calling)
            return _json(answer, headers)
        stream = open_stream(spec, prepared, backend, options, calling, waiting_since=arrived)
        return SynthesizedEventSourceResponse(
            stream, send_timeout=send_timeout, shutdown=shutdown, headers=headers
        )

    endpoint.__name__ = f"{spec.name}_endpoint"
    return endpoint


def local_endpoint(
    spec: DialectSpec, route: LocalRoute, settings: StreamSettings | None = None
) -> Callable[[Request], Awaitable[Response]]:
    """A Starlette endpoint for a dialect-local route (``count_tokens``)."""
    options = settings or StreamSettings()

    async def endpoint(request: Request) -> Response:
        answer = await answer_locally(spec, route, request.receive, options)
        return Response(status_code=400) if answer is None else _json(answer)

    return endpoint


def synthesizing_routes(
    backend: CompletionBackend,
    settings: StreamSettings | None = None,
    *,
    shutdown: ShutdownSignal | None = None,
    send_timeout: float | None = None,
) -> list[Route]:
    """Starlette routes for every dialect (``/v1/chat/completions``, ``/v1/responses``,
    ``/v1/messages``...), and the routes a dialect answers itself (``count_tokens``)."""
    table = route_table()
    routes = [
        Route(
            path,
            synthesizing_endpoint(
                spec, backend, settings, shutdown=shutdown, send_timeout=send_timeout
            ),
            methods=["POST"],
        )
        for path, spec in table.items()
    ]
    for spec in {id(spec): spec for spec in table.values()}.values():
        for path, route in spec.local_routes.items():
            routes.append(Route(path, local_endpoint(spec, route, settings), methods=["POST"]))
    return routes
