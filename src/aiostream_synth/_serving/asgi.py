"""Native ASGI path: pre-encoded frames written straight to ``send``, disconnect read from ``receive``.

Dialect-agnostic (decision P11): each route belongs to a dialect spec
(:mod:`aiostream_synth._dialects.registry`), which prepares the request, picks the stream's
output options and shapes every error. One request, in order (nothing is sent before step 4):

1. the body is read with a size limit (413);
2. it is parsed, sanitized and validated by its dialect (400 in the dialect's error shape);
3. a non-streaming request calls the backend once and returns its JSON (or its error status);
4. a streaming one opens the engine; the first frame sends the headers (``text/event-stream``,
   ``Cache-Control: no-cache``, ``X-Accel-Buffering: no``); a backend failure before that is a
   real HTTP error; after it, the dialect's terminal failure frames.

The first frame is due one keepalive interval after the request *arrived*, not after the app
got round to it: in a burst a request can wait in the server's queue for a good part of a
second, which the client spends in silence too. A server that knows when it began receiving
the request says so in the scope (:data:`RECEIVED_AT`; ``aiostream-synth serve`` on uvicorn
does); otherwise the app's first look at the request stands in for it.

While streaming, one watcher task waits on ``receive`` for ``http.disconnect`` and cancels the
request's scope, so the engine's disconnect policy runs within a scheduling step of the client
leaving. A server that can call the app back when the client leaves offers that in the scope
(:data:`ON_DISCONNECT`; ``aiostream-synth serve`` does, on its own server and on uvicorn): on
asyncio the app then registers a callback instead of keeping a task in ``receive()`` (about
1 KiB per waiting stream). :class:`ShutdownSignal` (ours, not the server's) ends open streams
cleanly.

What the request lost on the way (decision P10: unknown fields and keys, tools or items of an
unknown type, configured drops) is sent in the ``x-aiostream-synth-dropped`` header of the answer
(empty when nothing was) and logged in one record per request.

A client's retry of a request whose backend call is still running (or just failed) attaches to
that call instead of starting another (:mod:`aiostream_synth._engine.coalesce`), when the server
runs the ASGI lifespan (the shared calls live in its task group).

The sse-starlette adapter (:mod:`aiostream_synth.starlette`) shares steps 1-3 and the stream
construction below; only the writing differs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

import anyio
import anyio.abc

from aiostream_synth._dialects.base import (
    DialectSpec,
    ErrorResponse,
    LocalRoute,
    Storage,
    StreamDialect,
)
from aiostream_synth._dialects.bridges.options import BridgeOptions
from aiostream_synth._dialects.bridges.registry import bridge_for, prepare_bridged
from aiostream_synth._dialects.prepared import (
    DEFAULT_MAX_BODY_BYTES,
    Dialect,
    PreparedRequest,
    SanitizeOptions,
    parse_json_body,
)
from aiostream_synth._dialects.registry import route_table, spec_for
from aiostream_synth._engine.coalesce import CoalesceMode, Coalescer, coalesce_key
from aiostream_synth._engine.loops import running_asyncio_loop
from aiostream_synth._engine.shutdown import ShutdownSignal
from aiostream_synth._engine.stream import OnDisconnect, StreamOutcome, SynthesizedStream
from aiostream_synth._engine.tasks import BackgroundTasks, TaskStarter, raise_collapsed
from aiostream_synth._engine.tick import now
from aiostream_synth._params.removals import HEADER as DROPPED_HEADER
from aiostream_synth._params.removals import Removals
from aiostream_synth._serving.asgi_types import (
    JSON_HEADERS,
    SSE_HEADERS,
    Message,
    Receive,
    Scope,
    Send,
)
from aiostream_synth._serving.background import BackgroundResponses, owner_of
from aiostream_synth._serving.chains import (
    continue_chain,
    finish_kept,
    keep_finished,
    start_kept,
)
from aiostream_synth._store.base import ResponseStore, StoreUnavailable
from aiostream_synth._wire.coerce import as_json_dict
from aiostream_synth._wire.errors import BackendError, InvalidResultError, RequestError
from aiostream_synth._wire.failures import Failure, classify_failure, log_internal
from aiostream_synth._wire.json import dumps

__all__ = [
    "DEFAULT_ROUTES",
    "ON_DISCONNECT",
    "RECEIVED_AT",
    "SSE_HEADERS",
    "BackendCall",
    "ClientGone",
    "CompletionBackend",
    "StreamSettings",
    "SynthesizingApp",
    "answer_locally",
    "backend_call",
    "dialect_error",
    "disconnect_hook",
    "handle_request",
    "open_stream",
    "prepare",
    "read_body",
    "received_at",
    "refuse_when_closing",
    "run_backend_once",
    "send_answer",
    "send_json",
]

LOG = logging.getLogger("aiostream_synth.asgi")


#: The scope key a server may set to when it began receiving the request: a float on the event
#: loop's clock (``loop.time()``, which is anyio's), taken before the app is called.
RECEIVED_AT = "aiostream_synth.received_at"
#: The scope key a server may set to a function ``watch(callback)``: the server calls
#: ``callback()`` once, from the event loop (never from within ``watch`` itself), when the
#: client disconnects before the response is complete — soon after the call if it already has;
#: ``watch(None)`` withdraws the callback. The app then needs no task waiting in ``receive()``.
ON_DISCONNECT = "aiostream_synth.on_disconnect"

#: What a server's :data:`ON_DISCONNECT` function is.
DisconnectHook: TypeAlias = Callable[[Callable[[], object] | None], object]


#: The default route table of :class:`SynthesizingApp`: every dialect's paths.
DEFAULT_ROUTES: Mapping[str, str] = {path: spec.name for path, spec in route_table().items()}


@dataclass(frozen=True, slots=True)
class BackendCall:
    """What a backend is asked: the dialect, the (sanitized) params, and the request headers."""

    dialect: Dialect
    params: dict[str, Any]
    #: Whether the client asked for a stream (the backend call itself is never streaming).
    stream: bool
    headers: Mapping[str, str] = field(default_factory=dict)


#: The non-streaming backend: one call, one complete result (dict or pydantic model).
CompletionBackend: TypeAlias = Callable[[BackendCall], Awaitable[Any]]


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamSettings:
    """Engine, output and serving options shared by both adapters (and every dialect)."""

    keepalive_interval: float = 10.0
    timeout: float | None = None
    on_disconnect: OnDisconnect = "cancel"
    finish_timeout: float = 60.0
    on_abandoned: Callable[[StreamOutcome], object] | None = None
    responses_events: Literal["full", "minimal"] = "full"
    responses_keepalive: Literal["events", "comment"] = "events"
    chat_keepalive: Literal["comment", "none"] = "comment"
    emit_reasoning_alias: bool = False
    #: Anthropic: a real event (an intermediate ``message_delta``) at least this often, seconds,
    #: besides the ``ping`` every tick: Claude Code's stream watchdog counts only 30 pings.
    anthropic_event_keepalive_s: float | None = 240.0
    #: Anthropic: content blocks of a type the SDK does not know are dropped (Claude Code fails
    #: a turn whose last block is one) or passed through.
    anthropic_unknown_blocks: Literal["drop", "passthrough"] = "drop"
    sanitize: SanitizeOptions = field(default_factory=SanitizeOptions)
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    #: Called with every request that passed preparation (for logging and metrics).
    on_prepared: Callable[[PreparedRequest], object] | None = None
    #: Called with every engine stream as it is made, before its first frame (for logging and
    #: metrics: ``keepalive_frames_sent`` and the like, read when the response is over).
    on_stream: Callable[[SynthesizedStream], object] | None = None
    #: Log one record per request that lost something (WARNING, or DEBUG when all of it was
    #: benign). The proxy turns it off: its own request line carries the removals.
    log_removals: bool = True
    #: Which identical requests share one backend call (see :mod:`aiostream_synth._engine.coalesce`).
    coalesce: CoalesceMode = "retries"
    #: Seconds a call whose clients all left waits for a retry before it is cancelled.
    coalesce_linger: float = 0.9
    #: Seconds a failed or abandoned call's outcome stays available to a retry.
    coalesce_window: float = 10.0
    #: The dialect the backend speaks; None: each client's own. Otherwise requests in another
    #: dialect are converted for it and its answers converted back (a bridge).
    upstream_api: Dialect | None = None
    #: How the bridge converts (``bridge_options("deepseek")``...).
    bridge: BridgeOptions = field(default_factory=BridgeOptions)

    def __post_init__(self) -> None:
        if self.upstream_api is not None:
            for spec in route_table().values():
                bridge_for(spec.name, self.upstream_api)  # ValueError for a pair with no bridge


def received_at(scope: Scope) -> float:
    """When the client began waiting (anyio's clock): the server's :data:`RECEIVED_AT` stamp,
    taken out of the scope (nothing else reads it, and a waiting stream's scope lives as long
    as the stream), else now."""
    stamp = scope.pop(RECEIVED_AT, None)
    return stamp if isinstance(stamp, float) and math.isfinite(stamp) else now()


def disconnect_hook(scope: Scope) -> DisconnectHook | None:
    """The server's :data:`ON_DISCONNECT` function, taken out of the scope; None without one."""
    hook = scope.pop(ON_DISCONNECT, None)
    return hook if callable(hook) else None


def dropped_header(removals: Removals) -> tuple[bytes, bytes]:
    """The ``x-aiostream-synth-dropped`` header: the paths removed from the request."""
    return (DROPPED_HEADER.encode(), removals.header_value().encode("ascii"))


def _header_pairs(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


#: Response header lists shared by the streams sending the same headers (most send identical
#: ones, and a waiting stream keeps its list for minutes): read only, never extended in place.
_SHARED_HEADERS: dict[tuple[tuple[str, str], ...], list[tuple[bytes, bytes]]] = {}
#: How many distinct header sets are shared before the table starts again.
_SHARED_HEADERS_KEPT = 256


def _shared_header_pairs(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    key = tuple(headers.items())
    pairs = _SHARED_HEADERS.get(key)
    if pairs is None:
        if len(_SHARED_HEADERS) >= _SHARED_HEADERS_KEPT:
            _SHARED_HEADERS.clear()
        pairs = _SHARED_HEADERS[key] = _header_pairs(headers)
    return pairs


def request_headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}


def dialect_error(spec: DialectSpec, exc: RequestError) -> ErrorResponse:
    """A refused request (:class:`RequestError`, OpenAI-shaped) in the dialect's own shape."""
    error = exc.body["error"]
    return spec.error_response(
        exc.status_code,
        error["message"],
        code=error.get("code"),
        param=error.get("param"),
        type=error.get("type"),
    )


def _backend_for(
    call: Callable[[], Awaitable[Any]],
    spec: DialectSpec,
    prepared: PreparedRequest,
    headers: Mapping[str, str],
    coalescer: Coalescer | None,
) -> Callable[[], Awaitable[Any]]:
    if coalescer is None:
        return call
    key = coalesce_key(spec.name, spec.coalesce_key(dict(prepared.body)), headers)
    return coalescer.backend(key, call, stream=prepared.stream)


class _CallOnce:
    """A backend call to make once, holding its :class:`BackendCall` only until it is made: from
    then on the backend alone decides what of the request a waiting stream keeps (the upstream
    backend keeps the bytes it sent, not the parsed params: ~2.3x the request's JSON size)."""

    __slots__ = ("_backend", "_call")

    def __init__(self, backend: CompletionBackend, call: BackendCall) -> None:
        self._backend = backend
        self._call: BackendCall | None = call

    def __call__(self) -> Awaitable[Any]:
        call, self._call = self._call, None
        if call is None:
            raise RuntimeError("this backend call has been made already")
        return self._backend(call)


def backend_call(
    backend: CompletionBackend, prepared: PreparedRequest, headers: Mapping[str, str]
) -> Callable[[], Awaitable[Any]]:
    """The one backend call a prepared request makes: in its own dialect, or (bridged) in the
    upstream's, with the answer converted back to the client's dialect."""
    bridged = prepared.bridged
    if bridged is None:
        return _CallOnce(
            backend, BackendCall(prepared.dialect, prepared.params, prepared.stream, headers)
        )
    convert, local_result = bridged.convert, bridged.local_result
    upstream_call = _CallOnce(
        backend, BackendCall(bridged.dialect, bridged.params, prepared.stream, headers)
    )

    async def call() -> Any:
        if local_result is not None:
            return local_result
        return convert(await upstream_call())

    return call


def open_stream(
    spec: DialectSpec,
    prepared: PreparedRequest,
    backend: CompletionBackend,
    settings: StreamSettings,
    headers: Mapping[str, str],
    task_group: TaskStarter | None = None,
    coalescer: Coalescer | None = None,
    waiting_since: float | None = None,
    dialect: StreamDialect | None = None,
) -> SynthesizedStream:
    """The engine for a prepared streaming request (not yet entered); ``task_group``, when
    given, hosts its backend task (see :class:`SynthesizedStream`); ``coalescer`` lets a retry
    of it share its backend call; ``waiting_since`` is when the request arrived
    (:func:`received_at`)."""
    call = backend_call(backend, prepared, headers)
    stream = SynthesizedStream(
        _backend_for(call, spec, prepared, headers, coalescer),
        dialect or spec.stream_dialect(prepared, settings),
        keepalive_interval=settings.keepalive_interval,
        timeout=settings.timeout,
        on_disconnect=settings.on_disconnect,
        finish_timeout=settings.finish_timeout,
        on_abandoned=settings.on_abandoned,
        task_group=task_group,
        waiting_since=waiting_since,
    )
    if settings.on_stream is not None:
        settings.on_stream(stream)
    return stream


async def run_backend_once(
    spec: DialectSpec,
    prepared: PreparedRequest,
    backend: CompletionBackend,
    settings: StreamSettings,
    headers: Mapping[str, str],
    coalescer: Coalescer | None = None,
) -> ErrorResponse:
    """A non-streaming request: the backend's answer (status 200) or its failure, in the
    dialect's shape (the status, body and headers to answer with)."""
    call = backend_call(backend, prepared, headers)
    try:
        with anyio.fail_after(settings.timeout):
            result = await _backend_for(call, spec, prepared, headers, coalescer)()
        return ErrorResponse(200, as_json_dict(result, InvalidResultError, "backend result"))
    except Exception as exc:  # any backend failure becomes an HTTP error
        failure = (
            Failure(502, "server_error", f"the backend returned an invalid result: {exc}")
            if isinstance(exc, InvalidResultError)
            else log_internal(classify_failure(exc), exc)
        )
        return spec.error_response(
            failure.status_code, failure.message, code=failure.code, type=failure.type
        )


class ClientGone(Exception):
    """The client disconnected before its request body was read."""


async def read_body(receive: Receive, limit: int = DEFAULT_MAX_BODY_BYTES) -> bytes:
    """The whole request body, or a 413 :class:`RequestError` past ``limit`` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise RequestError(
                413,
                f"The request body is larger than the limit of {limit} bytes.",
                code="request_too_large",
            )
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def send_json(
    send: Send,
    status: int,
    body: bytes | dict[str, Any],
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    payload = body if isinstance(body, bytes) else dumps(body)
    all_headers = JSON_HEADERS if headers is None else [*JSON_HEADERS, *headers]
    await send({"type": "http.response.start", "status": status, "headers": all_headers})
    await send({"type": "http.response.body", "body": payload, "more_body": False})


async def send_answer(
    send: Send, answer: ErrorResponse, extra: Mapping[str, str] | None = None
) -> None:
    """A JSON answer in a dialect's shape, with ``extra`` headers under its own."""
    await send_json(
        send, answer.status_code, answer.body, _header_pairs({**(extra or {}), **answer.headers})
    )


async def _watch_disconnect(receive: Receive, cancel: Callable[[], object]) -> None:
    """Call ``cancel`` when the client disconnects, or when ``receive`` fails (not when this
    watcher is cancelled itself: the response is over then, and a cancel costs a task repr)."""
    try:
        while (await receive())["type"] != "http.disconnect":
            pass
    except Exception:
        cancel()
        raise
    cancel()


def _write_until_disconnect(
    stream: SynthesizedStream,
    receive: Receive,
    send: Send,
    headers: list[tuple[bytes, bytes]],
    hook: DisconnectHook | None = None,
) -> Awaitable[None]:
    """Respond, while a second task watches ``receive`` (or, on asyncio, the server's
    disconnect ``hook`` calls back): a disconnect cancels the writing.

    Returns the running loop's way of doing it, unawaited: a waiting stream's task resumes
    every coroutine frame between the server and the engine on each tick, so this one is not
    a frame of its own."""
    loop = running_asyncio_loop()
    if loop is None:
        return _write_watched_by_a_task_group(stream, receive, send, headers)
    # asyncio: the writing runs in an ``asyncio.timeout`` that the server's callback or a bare
    # loop task expires; no task group, no anyio spawn bookkeeping (about 2.5 KB less per
    # waiting stream) and no anyio cancel scope in the request's task (its task state costs
    # about 15 µs and 1 KB per request). The watch is an object the writing joins, not a
    # frame around it.
    return _respond(stream, send, headers, _Watch(loop, receive, hook))


async def _write_watched_by_a_task_group(
    stream: SynthesizedStream, receive: Receive, send: Send, headers: list[tuple[bytes, bytes]]
) -> None:
    """trio: the watcher in a task group of its own."""
    try:
        async with anyio.create_task_group() as watcher:
            watcher.start_soon(_watch_disconnect, receive, watcher.cancel_scope.cancel)
            try:
                await _respond(stream, send, headers)
            finally:
                watcher.cancel_scope.cancel()
    except BaseExceptionGroup as group:
        raise_collapsed(group)


class _Watch:
    """A response's disconnect watcher on asyncio, expiring :attr:`timeout` (the
    writing runs inside it) when the client leaves: the server's disconnect ``hook`` calling
    back, or without one a loop task reading ``receive``."""

    __slots__ = ("_hook", "_loop", "_writing", "task", "timeout")

    def __init__(
        self, loop: asyncio.AbstractEventLoop, receive: Receive, hook: DisconnectHook | None
    ) -> None:
        self._loop = loop
        self._writing = True
        self._hook = hook
        self.timeout = asyncio.timeout(None)
        self.task: asyncio.Task[None] | None = None
        if hook is None:
            self.task = loop.create_task(_watch_disconnect(receive, self._expire))
        else:
            hook(self._expire)  # called back from the loop, after the writing has begun

    def _expire(self) -> None:
        if not self._writing:
            return  # the response is complete (the server's own disconnect after it)
        with contextlib.suppress(RuntimeError):  # not entered yet, or already left
            self.timeout.reschedule(self._loop.time())

    def join(self, responded: bool) -> Awaitable[None] | None:
        """End the watch: withdraw the callback, or end the watcher task and return the wait
        for it (see :func:`_join_watcher`).

        Either way a complete response yields the loop once before its request's own
        bookkeeping (the proxy's log line and metrics): in a burst of endings every stream's
        terminal write then goes out before any stream's bookkeeping (the watcher's wait does
        it; with the callback, end lag p50 at N = 5,000 was 0.16-0.18 s with the yield against
        0.19-0.27 s without)."""
        self._writing = False
        if self.task is None:
            if self._hook is not None:
                self._hook(None)
                self._hook = None
            return asyncio.sleep(0) if responded else None
        return _join_watcher(self.task, responded)


async def _join_watcher(task: asyncio.Task[None], responded: bool) -> None:
    """End a response's watcher task and wait for it, shielded: a cancellation of the request
    meanwhile is raised afterwards, so the watcher never outlives the response."""
    cancelled = None
    if responded and not task.done():
        # A server that answers a pending ``receive()`` with ``http.disconnect`` once the
        # response is complete (uvicorn does, as the ASGI spec has it for later calls) has
        # already woken the watcher: one loop iteration lets it end by itself, which costs
        # less than cancelling it (an exception through its frames, then a wait).
        try:
            await asyncio.sleep(0)
        except asyncio.CancelledError as exc:
            cancelled = exc
    task.cancel()
    while not task.done():  # one loop iteration
        try:
            await asyncio.wait((task,))
        except asyncio.CancelledError as exc:
            cancelled = exc
    if cancelled is not None:
        raise cancelled


def _raise_what_the_watcher_raised(watcher_task: asyncio.Task[None]) -> None:
    """A failed ``receive()`` is raised in the request's task, as a task group would."""
    error = None if watcher_task.cancelled() else watcher_task.exception()
    if error is not None:
        raise error


def _sse_start(headers: list[tuple[bytes, bytes]]) -> Message:
    """The ``http.response.start`` of a stream (built when sent: a waiting stream keeps none)."""
    return {
        "type": "http.response.start",
        "status": 200,
        "headers": [*SSE_HEADERS, *headers] if headers else SSE_HEADERS,
    }


async def _respond(
    stream: SynthesizedStream,
    send: Send,
    headers: list[tuple[bytes, bytes]],
    watch: _Watch | None = None,
) -> None:
    """The stream's frames as the response: headers with the first frame, the frames ready
    behind it in the same write, the write with the terminal frames ending the response; a
    :class:`BackendError` before the first frame is a JSON error with its status instead.

    With a ``watch`` the writing runs in its timeout (a disconnect ends it quietly) and the
    watcher is joined before this returns; without one the caller watches."""
    responded = False
    try:
        async with contextlib.nullcontext() if watch is None else watch.timeout:
            started = False
            try:
                async for frame in stream:
                    if not started:
                        await send(_sse_start(headers))
                        started = True
                    ready = stream.drain_ready()
                    body = b"".join((frame, *ready)) if ready else frame
                    if stream.exhausted:  # the terminal frames end the response in this write
                        await send({"type": "http.response.body", "body": body, "more_body": False})
                        break
                    await send({"type": "http.response.body", "body": body, "more_body": True})
                    del frame, ready, body  # a waiting stream keeps no sent bytes (~1 KiB)
                else:
                    if not started:  # an empty stream still needs its headers
                        await send(_sse_start(headers))
                    await send({"type": "http.response.body", "body": b"", "more_body": False})
            except BackendError as exc:  # raised only before the first frame: nothing sent yet
                ours = {k.decode("latin-1"): v.decode("latin-1") for k, v in headers}
                extra = _header_pairs({**ours, **exc.headers})
                await send_json(send, exc.status_code, exc.body, extra)
        responded = True
    except TimeoutError:
        if watch is None or not watch.timeout.expired():
            raise  # not the disconnect's
    finally:
        joined = None if watch is None else watch.join(responded)
        if joined is not None:
            await joined
    if watch is not None and watch.task is not None:
        _raise_what_the_watcher_raised(watch.task)


def refuse_when_closing(shutdown: ShutdownSignal | None) -> None:
    """A 503 :class:`RequestError` once shutdown has begun: no new stream is opened."""
    if shutdown is not None and shutdown.closing:
        raise RequestError(
            503, "The server is shutting down.", type="server_error", code="server_shutting_down"
        )


def prepare(
    spec: DialectSpec,
    raw: bytes | dict[str, Any],
    settings: StreamSettings,
    served: Sequence[tuple[tuple[str | int, ...], str]] = (),
) -> PreparedRequest:
    """The dialect's request preparation (of the raw body, or of one already parsed) with the
    settings' sanitizer options, one log record for what it removed (``log_removals``; with
    what the proxy's store ``served`` of the client's body, benign), then the ``on_prepared``
    hook."""
    body = raw if isinstance(raw, dict) else parse_json_body(raw)
    if settings.upstream_api is None:
        prepared = spec.prepare(body, sanitize=settings.sanitize, params_model=None)
    else:
        prepared = prepare_bridged(
            spec, body, settings.upstream_api, sanitize=settings.sanitize, options=settings.bridge
        )
    for path, reason in served:
        prepared.removals.add(path, reason, benign=True)
    if settings.log_removals:
        prepared.removals.log(LOG, f"{spec.name} request")
    if settings.on_prepared is not None:
        settings.on_prepared(prepared)
    return prepared


async def handle_request(
    spec: DialectSpec | str,
    scope: Scope,
    receive: Receive,
    send: Send,
    backend: CompletionBackend,
    settings: StreamSettings,
    shutdown: ShutdownSignal | None = None,
    task_group: TaskStarter | None = None,
    coalescer: Coalescer | None = None,
    background: BackgroundResponses | None = None,
) -> None:
    """Serve one POST in a dialect (a spec, or its name) on the native path."""
    arrived = received_at(scope)
    hook = disconnect_hook(scope)
    spec = spec_for(spec)
    headers = request_headers(scope)
    extra = dict(spec.response_headers())
    keep: _Keep | None = None
    try:
        refuse_when_closing(shutdown)
        raw = await read_body(receive, settings.max_body_bytes)
        if background is not None and spec.storage is not None:
            # A stored conversation is continued before preparation (a bridge converts it all).
            keep = await _continued(spec, spec.storage, raw, settings, headers, background)
            prepared = prepare(spec, keep.take_body(), settings, keep.served)
            if not keep.stored and not prepared.background:
                keep = None  # nothing of it to keep: the frame holds none of the request
        else:
            prepared = prepare(spec, raw, settings)
    except RequestError as exc:
        error = dialect_error(spec, exc)
        await send_answer(send, error, extra)
        return
    except ClientGone:
        return
    name, value = dropped_header(prepared.removals)
    extra[name.decode()] = value.decode()
    if prepared.background:
        await _start_background(
            spec,
            prepared,
            backend,
            settings,
            headers,
            task_group,
            background,
            receive,
            send,
            extra,
            None if keep is None else keep.input_items,
        )
        return
    if not prepared.stream:
        answer = await run_backend_once(spec, prepared, backend, settings, headers, coalescer)
        await send_answer(send, answer, extra)
        if keep is not None and answer.status_code == 200:
            await keep.result(answer.body)
        return
    dialect = None
    if keep is not None:
        # Stored from its start under an id of ours (retrievable while it streams); the frame
        # keeps none of its input, which is in the store.
        dialect = await keep.start(prepared, settings)
        send = keep.watching(send)
    stream = open_stream(
        spec,
        prepared,
        backend,
        settings,
        headers,
        task_group,
        coalescer,
        waiting_since=arrived,
        dialect=dialect,
    )
    # The stream holds what it needs: neither the client's body (raw or parsed) nor a copy of
    # the response headers is kept in this frame for minutes.
    response_headers = _shared_header_pairs(extra)
    del prepared, extra, name, value, headers, arrived, raw
    # The disconnect watcher's scope lies *inside* the engine's context: a client that leaves
    # cancels only the writing, and the engine then applies its own disconnect policy (cancel
    # the backend, or let it finish). Were the engine inside the watcher's scope, a disconnect
    # would cancel the backend whatever the policy said. (In this frame, not a helper's: a
    # waiting stream's task resumes every coroutine frame above the engine on each tick.)
    async with stream:
        with shutdown.track(stream) if shutdown is not None else contextlib.nullcontext():
            await _write_until_disconnect(stream, receive, send, response_headers, hook)
    if keep is not None:
        await keep.finish()


class _Keep:
    """A request whose answer is to be stored (decision P12): its body with its chain put in
    front (until prepared), the whole input (until stored), the id it is stored under, and the
    final write of its stream (which carries the response)."""

    __slots__ = (
        "background",
        "body",
        "input_items",
        "last_write",
        "owner",
        "response_id",
        "send",
        "served",
        "storage",
        "stored",
    )

    def __init__(
        self,
        background: BackgroundResponses,
        storage: Storage,
        body: dict[str, Any],
        input_items: list[Any] | None,
        owner: str,
        served: bool = False,
    ) -> None:
        self.background = background
        self.storage = storage
        self.body = body
        #: What the store served of the body, reported with its preparation (P10).
        self.served = (storage.served_previous(),) if served else ()
        self.input_items = input_items
        self.owner = owner
        self.stored = storage.stores(body)
        self.last_write: bytes | None = None
        self.response_id: str | None = None
        self.send: Send | None = None  # the server's, once watched

    def take_body(self) -> dict[str, Any]:
        body, self.body = self.body, {}
        return body

    async def result(self, result: dict[str, Any]) -> None:
        """A non-streaming answer: stored under its own id."""
        background = self.background
        if not await keep_finished(
            background.store, self.storage, None, result, self.owner, self.input_items
        ):
            background.store_failures += 1

    async def start(self, prepared: PreparedRequest, settings: StreamSettings) -> StreamDialect:
        """Store the response under a fresh id before it streams; its stream's dialect."""
        self.response_id = self.storage.new_id()
        background = self.background
        if not await start_kept(background.store, self.response_id, self.owner, self.input_items):
            background.store_failures += 1
        self.input_items = None
        return self.storage.stored_dialect(prepared, settings, self.response_id, background=False)

    def watching(self, send: Send) -> Send:
        """``send``, keeping the final write (``more_body`` false: the terminal frames); a
        bound method, not a closure: two objects less per waiting stream."""
        self.send = send
        return self._watched

    async def _watched(self, message: Message) -> None:
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self.last_write = message.get("body")
        send = self.send
        assert send is not None  # watching() set it
        await send(message)

    async def finish(self) -> None:
        """The stream is over: its final object stored, or, when it never got there (its
        client left), its record dropped."""
        if self.response_id is not None:
            background = self.background
            if not await finish_kept(
                background.store, self.storage, self.response_id, self.last_write
            ):
                background.store_failures += 1


async def _continued(
    spec: DialectSpec,
    storage: Storage,
    raw: bytes,
    settings: StreamSettings,
    headers: Mapping[str, str],
    background: BackgroundResponses,
) -> _Keep:
    owner = owner_of(headers)
    bridged = settings.upstream_api is not None and settings.upstream_api != spec.name
    body, input_items, served = await continue_chain(
        background.store, storage, parse_json_body(raw), owner, bridged=bridged
    )
    return _Keep(background, storage, body, input_items, owner, served)


async def _start_background(
    spec: DialectSpec,
    prepared: PreparedRequest,
    backend: CompletionBackend,
    settings: StreamSettings,
    headers: Mapping[str, str],
    task_group: TaskStarter | None,
    background: BackgroundResponses | None,
    receive: Receive,
    send: Send,
    extra: dict[str, str],
    input_items: list[Any] | None,
) -> None:
    """A background request (decision P12): refused without a store, else started there."""
    storage = spec.storage
    if background is None or storage is None:
        error = spec.error_response(
            400,
            "background mode needs a response store, and this server has none.",
            param="background",
            code="unsupported_parameter",
        )
        await send_answer(send, error, extra)
        return
    call = backend_call(backend, prepared, headers)
    await background.create(
        spec,
        storage,
        prepared,
        call,
        settings,
        headers,
        task_group,
        receive,
        send,
        _header_pairs(extra),
        input_items,
    )


def stored_route(
    routes: Mapping[str, DialectSpec], path: str
) -> tuple[DialectSpec, Storage, str, str] | None:
    """``{dialect path}/{id}[/{action}]`` of a dialect that stores its answers: the dialect,
    its storage, the id and the action (``""`` or ``"cancel"``); None for any other path."""
    head, _, tail = path.rpartition("/")
    for prefix, action in ((head, tail), (path, "")):
        base, _, response_id = prefix.rpartition("/")
        spec = routes.get(base)
        if spec is not None and spec.storage is not None and response_id:
            return spec, spec.storage, response_id, action if prefix == head else ""
    return None


async def answer_locally(
    spec: DialectSpec, route: LocalRoute, receive: Receive, send: Send, settings: StreamSettings
) -> None:
    """A dialect-local endpoint (``count_tokens``): the body in, the dialect's answer out."""
    extra = dict(spec.response_headers())
    try:
        body = parse_json_body(await read_body(receive, settings.max_body_bytes))
    except RequestError as exc:
        error = dialect_error(spec, exc)
        await send_answer(send, error, extra)
        return
    except ClientGone:
        return
    await send_json(send, 200, route(body), _header_pairs(extra))


class SynthesizingApp:
    """An ASGI app serving every dialect from a non-streaming backend on the native path.

    ``POST`` on each dialect's paths (``/v1/chat/completions``, ``/v1/responses``,
    ``/v1/messages``, also without ``/v1``); anything else is 404/405 in OpenAI's error shape.
    ``shutdown`` (created if not given) ends open streams cleanly; the ASGI lifespan shutdown
    triggers it too.

    When the server runs the ASGI lifespan, the lifespan task holds one task group for the
    backend calls of every stream (about 1 KB less per waiting stream than a group each), and
    retries share backend calls (``StreamSettings.coalesce``); without a lifespan each stream
    opens its own group and nothing is shared.
    """

    def __init__(
        self,
        backend: CompletionBackend,
        settings: StreamSettings | None = None,
        *,
        shutdown: ShutdownSignal | None = None,
        routes: Mapping[str, str] = DEFAULT_ROUTES,
        drain_timeout: float = 30.0,
        store: ResponseStore | None = None,
    ) -> None:
        self.backend = backend
        self.settings = settings or StreamSettings()
        self.shutdown = shutdown or ShutdownSignal()
        self.routes: dict[str, DialectSpec] = route_table(routes)
        #: Paths a dialect answers itself (``count_tokens``), for the dialects routed above.
        self.local_routes: dict[str, tuple[DialectSpec, LocalRoute]] = {
            path: (spec, route)
            for spec in {id(spec): spec for spec in self.routes.values()}.values()
            for path, route in spec.local_routes.items()
        }
        self.drain_timeout = drain_timeout
        self._backend_tasks: BackgroundTasks | None = None
        #: Background responses over ``store`` (decision P12); None: background mode refused.
        self.background: BackgroundResponses | None = (
            None
            if store is None
            else BackgroundResponses(
                store,
                keepalive_interval=self.settings.keepalive_interval,
                timeout=self.settings.timeout,
                shutdown=self.shutdown,
            )
        )
        #: Shares backend calls between a request and its retries (set up by the lifespan).
        self.coalescer: Coalescer | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        if scope["type"] != "http":
            return
        path = scope["path"].rstrip("/") or "/"
        local = self.local_routes.get(path)
        if local is not None and scope["method"] == "POST":
            await answer_locally(local[0], local[1], receive, send, self.settings)
            return
        spec = self.routes.get(path)
        stored = (
            None if spec is not None or self.background is None else stored_route(self.routes, path)
        )
        if stored is not None and self.background is not None:
            spec, storage, response_id, action = stored
            await self.background.answer(
                spec,
                storage,
                response_id,
                action,
                scope["method"],
                scope.get("query_string", b""),
                request_headers(scope),
                receive,
                send,
            )
            return
        if spec is None:
            await send_json(
                send,
                404,
                RequestError(404, f"Unknown path {scope['path']}.", code="not_found").body,
            )
            return
        if scope["method"] != "POST":
            error = spec.error_response(405, "Use POST.", code="method_not_allowed")
            await send_answer(send, error, {"allow": "POST"})
            return
        await self.handle(spec, scope, receive, send)

    def handle(
        self, spec: DialectSpec | str, scope: Scope, receive: Receive, send: Send
    ) -> Awaitable[None]:
        """Serve a ``POST`` already routed to a dialect (a spec, or its name), for apps wrapping
        this one that route themselves. Returns the request's coroutine unawaited: a waiting stream resumes every
        coroutine frame above the engine on each tick, so this is not one of them."""
        return handle_request(
            spec,
            scope,
            receive,
            send,
            self.backend,
            self.settings,
            self.shutdown,
            self._backend_tasks,
            self.coalescer,
            self.background,
        )

    async def _lifespan(self, receive: Receive, send: Send) -> None:
        message = await receive()
        if message["type"] != "lifespan.startup":
            return
        # The store first (connected, checked), then the tasks that use it: they end before it.
        stores = contextlib.AsyncExitStack()
        if self.background is not None:
            try:
                await stores.enter_async_context(self.background.store)
            except StoreUnavailable as exc:
                await send({"type": "lifespan.startup.failed", "message": str(exc)})
                return
        async with stores, BackgroundTasks() as backend_tasks:
            try:
                self._backend_tasks = backend_tasks
                settings = self.settings
                if settings.coalesce != "off":
                    self.coalescer = Coalescer(
                        backend_tasks,
                        mode=settings.coalesce,
                        linger=settings.coalesce_linger,
                        window=settings.coalesce_window,
                    )
                await send({"type": "lifespan.startup.complete"})
                while (await receive())["type"] != "lifespan.shutdown":
                    pass
                await self.shutdown.shutdown(self.drain_timeout)
            finally:
                # Streams still open after the drain were aborted; a backend call still
                # running is cancelled (its consumer gets a clean failure) and waited for, so
                # no task outlives the lifespan.
                self._backend_tasks = None
                self.coalescer = None
                backend_tasks.cancel_all()
        await send({"type": "lifespan.shutdown.complete"})
