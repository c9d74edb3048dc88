"""Background responses (decision P12): generated to their end whatever their client does, every
event kept in a store, read by any number of readers from any sequence number, cancelled on
request, visible only to the credentials that created them.

The generation runs as a task of the app's lifespan (the *recorder*): it consumes its engine
stream like a client that never leaves and appends each event to a live log in this process
(what this process's readers follow) and to the store (what resume reads once the live log is
gone, and, with a shared store, what other replicas read). A store that fails is logged and
counted and only makes resume unavailable: the live log, and so every connected reader, goes
on. The dialect's :class:`~aiostream_synth._dialects.base.Storage` says what an event is; this
module knows no dialect by name.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterator, Mapping
from typing import Any

import anyio
import anyio.lowlevel

from aiostream_synth._dialects.base import DialectSpec, ErrorResponse, Storage
from aiostream_synth._dialects.prepared import PreparedRequest
from aiostream_synth._engine.shutdown import ShutdownSignal
from aiostream_synth._engine.stream import SynthesizedStream
from aiostream_synth._engine.tasks import TaskStarter
from aiostream_synth._serving.answers import header_pairs, send_json
from aiostream_synth._serving.asgi_types import SSE_HEADERS, Receive, Send
from aiostream_synth._store.base import Creation, ResponseStore, StoreUnavailable
from aiostream_synth._wire.errors import BackendError
from aiostream_synth._wire.failures import Failure, classify_failure, log_internal

__all__ = ["BackgroundResponses", "owner_of"]

LOG = logging.getLogger("aiostream_synth.background")

#: Seconds the recorder gives the store to take a response's last events after a cancel.
_LAST_WRITE_S = 5.0
#: How many responses with a lost store write are remembered (to answer 503, not 404).
_UNSTORED_KEPT = 10_000


def owner_of(headers: Mapping[str, str]) -> str:
    """Whose a stored response is: a digest of the credentials the request carried (the same
    for every request with the same key, and not the key)."""
    credential = headers.get("authorization") or headers.get("x-api-key") or ""
    digest = hashlib.sha256(b"aiostream-synth owner\x00" + credential.encode()).hexdigest()[:32]
    # One string per owner, shared by its waiting streams and records (digests only are kept).
    owner = _OWNERS.get(digest)
    if owner is None:
        if len(_OWNERS) >= _OWNERS_KEPT:
            _OWNERS.clear()
        owner = _OWNERS[digest] = digest
    return owner


_OWNERS: dict[str, str] = {}
_OWNERS_KEPT = 1024


def _events_of(write: bytes) -> Iterator[bytes]:
    """The SSE events of one engine write (one or more ``...\\n\\n`` blocks)."""
    start = 0
    while start < len(write):
        end = write.find(b"\n\n", start)
        if end < 0:
            yield write[start:]
            return
        yield write[start : end + 2]
        start = end + 2


class _Write:
    """A response's writes queued for the store."""

    __slots__ = ("creation", "done", "events", "obj")

    def __init__(
        self,
        events: list[tuple[int, bytes]],
        obj: dict[str, Any] | None,
        done: bool,
        creation: Creation | None,
    ) -> None:
        self.events = events
        self.obj = obj
        self.done = done
        self.creation = creation


class _Live:
    """A background response being generated in this process: its events so far."""

    __slots__ = (
        "_changed",
        "cancelled",
        "done",
        "events",
        "object",
        "owner",
        "scope",
        "stored_object",
    )

    def __init__(self, owner: str) -> None:
        self.owner = owner
        self.events: list[tuple[int, bytes]] = []
        self.object: dict[str, Any] | None = None
        #: The object last written to the store (an event carrying the same one writes none).
        self.stored_object: dict[str, Any] | None = None
        self.done = False
        self.cancelled = False
        self.scope = anyio.CancelScope()
        self._changed: anyio.Event | None = None

    @property
    def next_sequence(self) -> int:
        return self.events[-1][0] + 1 if self.events else 0

    def add(self, sequence: int, frame: bytes, obj: dict[str, Any] | None) -> None:
        self.events.append((sequence, frame))
        if obj is not None:
            self.object = obj
        self._notify()

    def finish(self) -> None:
        self.done = True
        self._notify()

    def after(self, sequence: int) -> list[tuple[int, bytes]]:
        events = self.events
        start = sequence + 1  # the numbers count from 0 by one: an event's number is its index
        if 0 <= start <= len(events) and (start == len(events) or events[start][0] == start):
            return events[start:]
        return [event for event in events if event[0] > sequence]

    async def wait(self, sequence: int) -> None:
        """Until an event above ``sequence`` exists, or the response is done."""
        while not self.done and not (self.events and self.events[-1][0] > sequence):
            if self._changed is None:
                self._changed = anyio.Event()
            await self._changed.wait()

    def _notify(self) -> None:
        changed, self._changed = self._changed, None
        if changed is not None:
            changed.set()


class BackgroundResponses:
    """Background mode, retrieval, resume, cancel and delete over one :class:`ResponseStore`."""

    def __init__(
        self,
        store: ResponseStore,
        *,
        keepalive_interval: float,
        timeout: float | None,
        shutdown: ShutdownSignal | None = None,
    ) -> None:
        self.store = store
        self.keepalive_interval = keepalive_interval
        self.timeout = timeout
        self.shutdown = shutdown
        self._live: dict[str, _Live] = {}
        #: Store operations that failed (each logged): those responses cannot be resumed,
        #: retrieved or continued (``aiostream_synth_store_failures_total``).
        self.store_failures = 0
        #: Responses the store lost a write of (the most recent ones): retrieving one says the
        #: store failed, rather than replaying a partial record or calling it unknown.
        self._unstored: OrderedDict[str, None] = OrderedDict()
        #: Writes queued for the store, by response, and whether the writer task runs.
        self._pending: dict[str, _Write] = {}
        self._in_flight: dict[str, _Write] = {}
        self._flushed: anyio.Event | None = None
        self._writing = False
        self._tasks: TaskStarter | None = None

    @property
    def generating(self) -> int:
        """Background responses being generated in this process now."""
        return len(self._live)

    # -- create ------------------------------------------------------------------------------
    async def create(
        self,
        spec: DialectSpec,
        storage: Storage,
        prepared: PreparedRequest,
        call: Callable[[], Awaitable[Any]],
        dialect_settings: Any,
        headers: Mapping[str, str],
        tasks: TaskStarter | None,
        receive: Receive,
        send: Send,
        extra: list[tuple[bytes, bytes]],
        input_items: list[Any] | None = None,
    ) -> None:
        """Start a background response; stream it to its client, or answer its object.
        ``input_items``: the whole input it is made from, kept for a request continuing it."""
        if tasks is None:
            await _send_error(
                send,
                spec.error_response(
                    503,
                    "background mode needs the server to run the ASGI lifespan (where the "
                    "generation outlives its request).",
                    code="background_unavailable",
                ),
            )
            return
        response_id = storage.new_id()
        live = _Live(owner_of(headers))
        self._live[response_id] = live
        dialect = storage.stored_dialect(prepared, dialect_settings, response_id, background=True)
        self._tasks = tasks
        # Created in the store by the writer, with the first events: no store round trip
        # before the stream starts (a wave of creations is one batch).
        self._write_later(
            response_id,
            [],
            None,
            False,
            Creation(live.owner, {"id": response_id}, input_items, background=True),
        )
        tasks.start_soon(self._record, response_id, live, storage, prepared, call, dialect)
        if prepared.stream:
            await self._follow(live, response_id, -1, receive, send, extra)
            return
        await live.wait(-1)
        # Once in the store: the id answered here is found by every process sharing it.
        await self._until_written(response_id)
        await send_json(send, 200, live.object or {"id": response_id}, extra)

    async def _record(
        self,
        response_id: str,
        live: _Live,
        storage: Storage,
        prepared: PreparedRequest,
        call: Callable[[], Awaitable[Any]],
        dialect: Any,
    ) -> None:
        """The generation: the engine's events into the live log and the store (never raises:
        a task of the lifespan); one log line when it ends (its request's line covered only
        the client's connection)."""
        started = time.monotonic()
        try:
            with live.scope:
                stream = SynthesizedStream(
                    call,
                    dialect,
                    keepalive_interval=self.keepalive_interval,
                    timeout=self.timeout,
                    # The first events now: the response's object exists from the start.
                    waiting_since=anyio.current_time() - self.keepalive_interval,
                )
                tracked = (
                    self.shutdown.track(stream)
                    if self.shutdown is not None
                    else contextlib.nullcontext()
                )
                try:
                    async with stream:
                        with tracked:
                            async for write in stream:
                                await self._add(response_id, live, storage, write)
                except BackendError as exc:  # it failed before its first event
                    error = exc.body.get("error", {}) if isinstance(exc.body, dict) else {}
                    failure = Failure(
                        exc.status_code,
                        str(error.get("code") or "server_error"),
                        str(error.get("message") or exc),
                    )
                    frames = storage.failure_frames(
                        prepared, response_id, failure, live.next_sequence
                    )
                    await self._add(response_id, live, storage, b"".join(frames))
        except Exception as exc:  # a bug: the response still ends, its readers with it
            failure = log_internal(classify_failure(exc), exc)
            frames = storage.failure_frames(prepared, response_id, failure, live.next_sequence)
            with anyio.CancelScope(shield=True):
                await self._add(response_id, live, storage, b"".join(frames))
        finally:
            with anyio.CancelScope(shield=True), anyio.move_on_after(_LAST_WRITE_S):
                if not live.done and live.cancelled:
                    frames = storage.cancelled_frames(live.object or {}, live.next_sequence)
                    await self._add(response_id, live, storage, b"".join(frames))
            live.finish()
            LOG.info(
                "background %s ended: status=%s events=%d duration_s=%.3f",
                response_id,
                storage.status(live.object or {}),
                live.next_sequence,
                time.monotonic() - started,
            )
            self._live.pop(response_id, None)  # after its line: `generating` 0 means logged

    async def _add(self, response_id: str, live: _Live, storage: Storage, write: bytes) -> None:
        batch: list[tuple[int, bytes]] = []
        obj: dict[str, Any] | None = None
        terminal = False
        for frame in _events_of(write):
            event = storage.event(frame)
            if event is None:
                continue
            live.add(event.sequence, frame, event.response)
            batch.append((event.sequence, frame))
            obj = event.response or obj
            terminal = terminal or event.terminal
        if terminal:
            live.done = True  # readers end after this batch
        if obj is not None and obj == live.stored_object:
            obj = None  # the same object again (a keepalive's): not written again
        elif obj is not None:
            live.stored_object = obj
        if batch and response_id not in self._unstored:
            self._write_later(response_id, batch, obj, terminal)

    # -- write-behind ------------------------------------------------------------------------
    def _write_later(
        self,
        response_id: str,
        events: list[tuple[int, bytes]],
        obj: dict[str, Any] | None,
        done: bool,
        creation: Creation | None = None,
    ) -> None:
        """Queue a response's events (and first its creation) for the store: one writer task sends whatever is queued
        in one batch (a Redis pipeline for thousands of streams' keepalives), so a slow store
        delays no event on its way to the live readers."""
        pending = self._pending.get(response_id)
        if pending is None:
            self._pending[response_id] = _Write(events, obj, done, creation)
        else:
            pending.events.extend(events)
            pending.obj = obj or pending.obj
            pending.done = pending.done or done
        if not self._writing and self._tasks is not None:
            self._writing = True
            self._tasks.start_soon(self._write_behind)

    async def _write_behind(self) -> None:
        """Send the queued writes, batch after batch, until none is left (a lifespan task:
        never raises; a batch in flight is finished even when the lifespan ends)."""
        try:
            while self._pending:
                batch, self._pending = self._pending, {}
                self._in_flight = batch
                with anyio.CancelScope(shield=True), anyio.move_on_after(_LAST_WRITE_S):
                    await self._flush(batch)
                self._in_flight = {}
                flushed, self._flushed = self._flushed, None
                if flushed is not None:
                    flushed.set()
                await anyio.lowlevel.checkpoint()  # what queued meanwhile makes the next batch
        finally:
            self._writing = False
            self._in_flight = {}
            flushed, self._flushed = self._flushed, None
            if flushed is not None:
                flushed.set()

    async def _until_written(self, response_id: str) -> None:
        """Until nothing of ``response_id`` waits for the store (written, or failed)."""
        while self._writing and (response_id in self._pending or response_id in self._in_flight):
            if self._flushed is None:
                self._flushed = anyio.Event()
            await self._flushed.wait()

    async def _flush(self, batch: dict[str, _Write]) -> None:
        writes = {rid: (w.creation, w.events, w.obj, w.done) for rid, w in batch.items()}
        if await self._keep(self.store.append_many(writes)):
            return
        for response_id in batch:
            self._unstored[response_id] = None
            # What it holds of this response is partial: gone rather than replayed.
            await self._keep(self.store.delete(response_id))
        while len(self._unstored) > _UNSTORED_KEPT:
            self._unstored.popitem(last=False)

    async def _keep(self, operation: Awaitable[object]) -> bool:
        """A store operation that may fail: logged and counted, never the live stream's end."""
        try:
            await operation
        except (StoreUnavailable, OSError) as exc:
            self.store_failures += 1
            LOG.warning("store write failed (resume is unavailable for it): %s", exc)
            return False
        return True

    # -- read --------------------------------------------------------------------------------
    async def _follow(
        self,
        live: _Live | None,
        response_id: str,
        after: int,
        receive: Receive,
        send: Send,
        extra: list[tuple[bytes, bytes]],
    ) -> None:
        """Stream the events above ``after`` to one reader, live ones as they come, up to the
        terminal event (or until the reader leaves)."""
        await send(
            {"type": "http.response.start", "status": 200, "headers": [*SSE_HEADERS, *extra]}
        )
        left = False
        async with anyio.create_task_group() as group:

            async def watch() -> None:
                nonlocal left
                while (await receive())["type"] != "http.disconnect":
                    pass
                left = True
                group.cancel_scope.cancel()

            group.start_soon(watch)
            while True:
                if live is not None:
                    events = live.after(after)
                    done = live.done
                else:
                    stored = await self.store.get(response_id)
                    events = await self.store.events(response_id, after) if stored else []
                    done = stored is None or stored.done
                for sequence, frame in events:
                    await send({"type": "http.response.body", "body": frame, "more_body": True})
                    after = sequence
                if events and live is None:
                    continue  # a stored response: read on before deciding it is done
                if done and not (live is not None and live.after(after)):
                    break
                if live is not None:
                    await live.wait(after)
                else:
                    await self.store.wait(response_id, after, self.keepalive_interval)
            group.cancel_scope.cancel()
        if not left:  # the reader that left gets nothing more (its response stays unfinished)
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def answer(
        self,
        spec: DialectSpec,
        storage: Storage,
        response_id: str,
        action: str,
        method: str,
        query: bytes,
        headers: Mapping[str, str],
        receive: Receive,
        send: Send,
    ) -> None:
        """``GET {path}/{id}`` (``?stream=true&starting_after=N``), ``POST {path}/{id}/cancel``,
        ``DELETE {path}/{id}``."""
        allowed = "POST" if action == "cancel" else "GET, DELETE"
        if action not in ("", "cancel") or method not in allowed.split(", "):
            status = 404 if action not in ("", "cancel") else 405
            error = spec.error_response(
                status,
                f"Use {allowed}."
                if status == 405
                else f"Unknown path for response {response_id!r}.",
            )
            await _send_error(send, error, [(b"allow", allowed.encode())] if status == 405 else [])
            return
        owner = owner_of(headers)
        live = self._live.get(response_id)
        stored = None
        if live is None and response_id in self._unstored:
            error = spec.error_response(
                503,
                f"Response '{response_id}' cannot be retrieved: the response store failed "
                "while it was generated.",
                code="store_unavailable",
            )
            await _send_error(send, error)
            return
        if live is None:
            try:
                stored = await self.store.get(response_id)
            except StoreUnavailable as exc:
                self.store_failures += 1
                LOG.warning("store read failed: %s", exc)
                await _send_error(
                    send,
                    spec.error_response(
                        503, f"The response store is unavailable: {exc}", code="store_unavailable"
                    ),
                )
                return
        if (live is None or live.owner != owner) and (stored is None or stored.owner != owner):
            await _send_error(
                send,
                spec.error_response(
                    404, f"Response with id '{response_id}' not found.", code="not_found"
                ),
            )
            return
        obj = live.object if live is not None else stored.object if stored is not None else None
        if method == "DELETE":
            if live is not None:
                await self._cancel(live)
            self._pending.pop(response_id, None)
            await self._keep(self.store.delete(response_id))
            await send_json(
                send, 200, {"id": response_id, "object": "response.deleted", "deleted": True}
            )
            return
        if action == "cancel":
            if live is None and stored is not None and not stored.done:
                # Generated by another process sharing the store: its cancel does not reach it.
                await _send_error(
                    send,
                    spec.error_response(
                        409,
                        f"Response '{response_id}' is being generated by another server "
                        "sharing this store; cancel it there.",
                        code="conflict",
                    ),
                )
                return
            if live is None or live.done:
                status = (obj or {}).get("status", "completed")
                await _send_error(
                    send,
                    spec.error_response(
                        400,
                        f"Cannot cancel a response that is already {status}: only one still "
                        "in progress can be cancelled.",
                        code="invalid_state",
                    ),
                )
                return
            await self._cancel(live)
            await send_json(send, 200, storage.cancelled(live.object or {"id": response_id}))
            return
        params = urllib.parse.parse_qs(query.decode("latin-1"))
        if params.get("stream", ["false"])[-1].lower() not in ("true", "1"):
            await send_json(send, 200, obj or {"id": response_id})
            return
        if live is None and stored is not None and not stored.background:
            error = spec.error_response(
                400,
                f"Response '{response_id}' was not created in background mode: its events were "
                "not kept. Retrieve it without stream.",
                param="stream",
                code="invalid_value",
            )
            await _send_error(send, error)
            return
        raw = params.get("starting_after", ["-1"])[-1]
        try:
            after = int(raw)
        except ValueError:
            await _send_error(
                send,
                spec.error_response(
                    400,
                    f"starting_after must be an integer, not {raw!r}.",
                    param="starting_after",
                    code="invalid_value",
                ),
            )
            return
        await self._follow(live, response_id, after, receive, send, [])

    async def _cancel(self, live: _Live) -> None:
        """Cancel a live generation and wait until its terminal event is recorded."""
        if not live.done:
            live.cancelled = True
            live.scope.cancel()
        while not live.done:
            await live.wait(live.events[-1][0] if live.events else -1)


async def _send_error(
    send: Send, error: ErrorResponse, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send_json(
        send, error.status_code, error.body, [*header_pairs(error.headers), *(headers or [])]
    )
