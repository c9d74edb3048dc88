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

import contextlib
from collections.abc import Awaitable, Mapping

from aiostream_synth._dialects.base import (
    DialectSpec,
    LocalRoute,
)
from aiostream_synth._dialects.registry import route_table, spec_for
from aiostream_synth._dialects.routes import RouteTable, request_target
from aiostream_synth._engine.coalesce import Coalescer
from aiostream_synth._engine.shutdown import ShutdownSignal
from aiostream_synth._engine.tasks import BackgroundTasks, TaskStarter
from aiostream_synth._serving.answers import (
    send_answer,
    send_json,
    shared_header_pairs,
)
from aiostream_synth._serving.asgi_types import (
    SSE_HEADERS,
    Receive,
    Scope,
    Send,
)
from aiostream_synth._serving.background import BackgroundResponses
from aiostream_synth._serving.fleet import FleetCalls
from aiostream_synth._serving.keeping import Chain, start_background, stored_route
from aiostream_synth._serving.pipeline import (
    DEFAULT_ROUTES,
    ON_DISCONNECT,
    RECEIVED_AT,
    Admitted,
    BackendCall,
    CompletionBackend,
    StreamSettings,
    admit,
    answer_locally,
    disconnect_hook,
    open_stream,
    received_at,
    request_headers,
    run_backend_once,
)
from aiostream_synth._serving.respond import write_until_disconnect
from aiostream_synth._store.base import ResponseStore, StoreUnavailable
from aiostream_synth._wire.errors import RequestError

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
    del scope  # a waiting stream holds none of its request's scope (nor its header list)
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
            hook,
            arrived,
        )
        return
    if not prepared.stream:
        answer = await run_backend_once(spec, prepared, backend, settings, headers, coalescer)
        if keep is not None:
            answer = keep.own_id(answer)
        await send_answer(send, answer, extra)
        if keep is not None and answer.status_code == 200:
            await keep.result(answer.body)
        return
    dialect = None
    if keep is not None:
        # Stored under an id of ours, from its start when its dialect keeps it while it
        # streams; the frame keeps none of its input (in the store, or serialized).
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
            await write_until_disconnect(stream, receive, send, response_headers, hook)
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
        #: Coalescing across the processes sharing the store (set up by the lifespan).
        self.fleet: FleetCalls | None = None

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
            answering = self.background.answer(
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
            del scope  # a resume reader may stream for minutes: it keeps none of the scope
            await answering
            return
        if spec is None:
            await send_json(
                send,
                404,
                RequestError(404, f"Unknown path {scope['path']}.", code="not_found").body,
            )
            return
        background = self.background
        lists = spec.storage if background is not None else None
        listed = lists is not None and lists.answers_list is not None
        if listed and scope["method"] == "GET" and lists is not None and background is not None:
            # The caller's stored answers of the dialect (stored chat completions).
            query = scope.get("query_string", b"")
            await background.list_answers(spec, lists, query, request_headers(scope), send)
            return
        if scope["method"] != "POST":
            if listed:
                error = spec.error_response(405, "Use GET or POST.", code="method_not_allowed")
            else:
                error = spec.error_response(405, "Use POST.", code="method_not_allowed")
            await send_answer(send, error, {"allow": "GET, POST" if listed else "POST"})
            return
        handling = self.handle(spec, scope, receive, send)
        del scope  # the request's own frame keeps what it needs of it, not this one
        await handling

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

    def _fleet(self, window: float) -> FleetCalls | None:
        """Coalescing across the processes sharing the store, when it can share calls."""
        store = self.background.store if self.background is not None else None
        calls = getattr(store, "calls", None)
        return FleetCalls(calls(window_s=window), self.shutdown) if callable(calls) else None

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
                    fleet = self._fleet(settings.coalesce_window)
                    self.coalescer = Coalescer(
                        backend_tasks,
                        mode=settings.coalesce,
                        linger=settings.coalesce_linger,
                        window=settings.coalesce_window,
                        shared=fleet,
                        drain=self.shutdown,
                    )
                    if fleet is not None:
                        fleet.bind(self.coalescer)
                        fleet.start(backend_tasks)
                        self.fleet = fleet
                if self.background is not None:
                    self.background.start(backend_tasks)
                    await self.background.lease_taken()
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
                self.fleet = None
                backend_tasks.cancel_all()
        await send({"type": "lifespan.shutdown.complete"})
