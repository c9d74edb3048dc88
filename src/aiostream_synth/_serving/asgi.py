"""The native ASGI writer: pre-encoded frames written straight to ``send``, the client's
disconnect read from ``receive`` (or heard through the server's :data:`ON_DISCONNECT` hook),
and :class:`SynthesizingApp`, the app around it.

The request pipeline — reading, preparing, the backend call, opening the engine — is
:mod:`aiostream_synth._serving.pipeline`, shared with the sse-starlette adapter; this module
writes: the response head with the first frame (``text/event-stream``, ``Cache-Control:
no-cache``, ``X-Accel-Buffering: no``), then each frame as the engine yields it.

While streaming, one watcher task waits on ``receive`` for ``http.disconnect`` and cancels the
request's scope, so the engine's disconnect policy runs within a scheduling step of the client
leaving; a server that can call the app back when the client leaves spares that task (on
asyncio a callback instead of a task in ``receive()``, a task's memory per waiting stream).
:class:`ShutdownSignal` (ours, not the server's) ends open streams cleanly. With a response
store, it also keeps answers that outlive their connection (background responses, stored
chains; how a request is kept: :mod:`aiostream_synth._serving.keeping`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Mapping

import anyio
import anyio.abc

from aiostream_synth._dialects.base import (
    DialectSpec,
    LocalRoute,
)
from aiostream_synth._dialects.registry import route_table, spec_for
from aiostream_synth._dialects.routes import RouteTable, request_target
from aiostream_synth._engine.coalesce import Coalescer
from aiostream_synth._engine.runtime import current_runtime
from aiostream_synth._engine.shutdown import ShutdownSignal
from aiostream_synth._engine.stream import SynthesizedStream
from aiostream_synth._engine.tasks import BackgroundTasks, TaskStarter, raise_collapsed
from aiostream_synth._serving.answers import (
    header_pairs,
    send_answer,
    send_json,
    shared_header_pairs,
)
from aiostream_synth._serving.asgi_types import (
    SSE_HEADERS,
    Message,
    Receive,
    Scope,
    Send,
)
from aiostream_synth._serving.background import BackgroundResponses
from aiostream_synth._serving.keeping import Chain, start_background, stored_route
from aiostream_synth._serving.pipeline import (
    DEFAULT_ROUTES,
    ON_DISCONNECT,
    RECEIVED_AT,
    Admitted,
    BackendCall,
    CompletionBackend,
    DisconnectHook,
    StreamSettings,
    admit,
    answer_locally,
    disconnect_hook,
    open_stream,
    received_at,
    request_headers,
    run_backend_once,
)
from aiostream_synth._store.base import ResponseStore, StoreUnavailable
from aiostream_synth._wire.errors import BackendError, RequestError

__all__ = [
    "DEFAULT_ROUTES",
    "ON_DISCONNECT",
    "RECEIVED_AT",
    "SSE_HEADERS",
    "BackendCall",
    "CompletionBackend",
    "StreamSettings",
    "SynthesizingApp",
    "handle_request",
]


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
    loop = current_runtime().loop
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
        it; with the callback, the yield lowered the end lag of a wave: benchmarks/COSTS.md)."""
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
                extra = header_pairs({**ours, **exc.headers})
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
    target = request_target(spec, scope["path"].rstrip("/") or "/", scope.get("query_string", b""))
    # A stored conversation is continued before preparation (a bridge converts it all).
    chain = (
        None
        if background is None or spec.storage is None
        else Chain(spec, spec.storage, settings, headers, background)
    )
    admitted = await admit(spec, receive, settings, target, shutdown, chain)
    if not isinstance(admitted, Admitted):
        if admitted is not None:
            await send_answer(send, admitted)
        return
    prepared, extra = admitted.prepared, admitted.headers
    keep = None if chain is None else chain.keep
    del admitted, chain, target
    if keep is not None and not keep.stored and not prepared.background:
        keep = None  # nothing of it to keep: the frame holds none of the request
    if prepared.background:
        await start_background(
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
    response_headers = shared_header_pairs(extra)
    del prepared, extra, headers, arrived
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


class SynthesizingApp:
    """An ASGI app serving every dialect from a non-streaming backend on the native path.

    ``POST`` on each registered dialect's paths (the built-in ones: ``/v1/chat/completions``,
    ``/v1/responses``, ``/v1/messages``, also without ``/v1``), or on the ``routes`` given
    (``{path: dialect name}``); anything else is 404/405 in OpenAI's error shape.
    ``shutdown`` (created if not given) ends open streams cleanly; the ASGI lifespan shutdown
    triggers it too.

    When the server runs the ASGI lifespan, the lifespan task holds one task group for the
    backend calls of every stream (less memory per waiting stream than a group each), and
    retries share backend calls (``StreamSettings.coalesce``); without a lifespan each stream
    opens its own group and nothing is shared.
    """

    def __init__(
        self,
        backend: CompletionBackend,
        settings: StreamSettings | None = None,
        *,
        shutdown: ShutdownSignal | None = None,
        routes: Mapping[str, str] | None = None,
        drain_timeout: float = 30.0,
        store: ResponseStore | None = None,
    ) -> None:
        self.backend = backend
        self.settings = settings or StreamSettings()
        self.shutdown = shutdown or ShutdownSignal()
        self.routes: RouteTable = route_table(routes)
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
            answer = await answer_locally(local[0], local[1], receive, self.settings)
            if answer is not None:
                await send_answer(send, answer)
            return
        spec = self.routes.match(path)
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
