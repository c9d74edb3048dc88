"""sse-starlette adapter: serve the engine through ``sse_starlette.EventSourceResponse``.

Install with the ``starlette`` extra. Use it as a Starlette route or a FastAPI endpoint::

    from starlette.applications import Starlette
    from aiostream_synth.starlette import synthesizing_routes

    async def backend(call):              # one non-streaming call, complete result back
        return await client.responses.create(**call.params)   # or chat.completions.create

    app = Starlette(routes=synthesizing_routes(backend))

    # FastAPI
    from fastapi import FastAPI
    from aiostream_synth.starlette import synthesizing_endpoint
    api = FastAPI()
    api.add_api_route("/v1/responses", synthesizing_endpoint("responses", backend), methods=["POST"])

Deliberate differences from a plain ``EventSourceResponse``:

* sse-starlette's own ping is off (``ping=0``): the engine's keepalive is the ping, and it is a
  real ``response.in_progress`` event for Responses clients;
* the engine is entered in :meth:`SynthesizedEventSourceResponse.__call__`, around the whole
  response, and its first frame is awaited before any header is sent, so a backend failure
  before the first keepalive tick is a real HTTP error status;
* shutdown never depends on sse-starlette's process-global exit state: the response's
  exit-signal listener waits on nothing, and our :class:`ShutdownSignal` ends the stream with
  its terminal failure event instead.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import anyio
from sse_starlette import EventSourceResponse
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ._asgi import (
    DEFAULT_ROUTES,
    ClientGone,
    CompletionBackend,
    StreamSettings,
    dropped_header,
    open_stream,
    prepare,
    read_body,
    refuse_when_closing,
    request_headers,
    run_backend_once,
)
from ._dispatch import Dialect
from ._engine import SynthesizedStream
from ._errors import BackendError, RequestError
from ._json import dumps
from ._removals import HEADER as DROPPED_HEADER
from ._shutdown import ShutdownSignal

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
        )
        self._stream = stream
        self._shutdown = shutdown

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        async with self._stream:
            try:
                first: bytes | None = await self._stream.__anext__()
            except BackendError as exc:
                response = _json(exc.status_code, exc.body)
                response.headers.update(
                    {k: v for k, v in self.headers.items() if k == DROPPED_HEADER}
                )
                await response(scope, receive, send)
                return
            except StopAsyncIteration:
                first = None
            self.body_iterator = _FirstThenRest(first, self._stream)
            if self._shutdown is None:
                await super().__call__(scope, receive, send)
            else:
                with self._shutdown.track(self._stream):
                    await super().__call__(scope, receive, send)

    async def _listen_for_exit_signal_with_grace(self) -> None:
        # Never sse-starlette's process-global exit state: shutdown is ShutdownSignal's job,
        # which ends the stream with a terminal event rather than cancelling it.
        await anyio.sleep_forever()


def _json(status: int, body: dict[str, Any]) -> Response:
    return Response(dumps(body), status_code=status, media_type="application/json")


def synthesizing_endpoint(
    dialect: Dialect,
    backend: CompletionBackend,
    settings: StreamSettings | None = None,
    *,
    shutdown: ShutdownSignal | None = None,
    send_timeout: float | None = None,
) -> Callable[[Request], Awaitable[Response]]:
    """A Starlette / FastAPI endpoint serving ``dialect`` from ``backend``."""
    options = settings or StreamSettings()

    async def endpoint(request: Request) -> Response:
        headers = request_headers(request.scope)
        try:
            refuse_when_closing(shutdown)
            # The same limited read as the native path, on this request's ASGI receive.
            raw = await read_body(request.receive, options.max_body_bytes)
            prepared = prepare(dialect, raw, options)
        except RequestError as exc:
            return _json(exc.status_code, exc.body)
        except ClientGone:
            return Response(status_code=400)
        if not prepared.stream:
            status, payload = await run_backend_once(prepared, backend, options, headers)
            return Response(payload, status_code=status, media_type="application/json")
        stream = open_stream(prepared, backend, options, headers)
        name, value = dropped_header(prepared.removals)
        return SynthesizedEventSourceResponse(
            stream,
            send_timeout=send_timeout,
            shutdown=shutdown,
            headers={name.decode(): value.decode()},
        )

    endpoint.__name__ = f"{dialect}_endpoint"
    return endpoint


def synthesizing_routes(
    backend: CompletionBackend,
    settings: StreamSettings | None = None,
    *,
    shutdown: ShutdownSignal | None = None,
    send_timeout: float | None = None,
) -> list[Route]:
    """Starlette routes for both dialects (``/v1/chat/completions``, ``/v1/responses``, ...)."""
    return [
        Route(
            path,
            synthesizing_endpoint(
                dialect, backend, settings, shutdown=shutdown, send_timeout=send_timeout
            ),
            methods=["POST"],
        )
        for path, dialect in DEFAULT_ROUTES.items()
    ]
