"""Background responses (decision P12): generated to their end whatever their client does, every
event kept in a store, read by any number of readers from any sequence number, cancelled on
request, visible only to the credentials that created them.

The backend call runs as a task of the app's lifespan, to its end. Its events are rendered by
the creating client's own task while that client stays (the frames record themselves as the
engine makes them), then by the *recorder*, a lifespan task that consumes the engine stream
like a client that never leaves. Each event is appended to a live log in this process (what
this process's readers follow) and to the store (what resume reads once the live log is gone,
and, with a shared store, what other replicas read). A store that fails is logged and
counted and only makes resume unavailable: the live log, and so every connected reader, goes
on. The dialect's :class:`~aiostream_synth._dialects.base.Storage` says what an event is; this
module knows no dialect by name.

A process holds a lease in a shared store while it lives (:meth:`ResponseStore.hold`, a task of
the lifespan). A reader in another process that finds a response in progress whose process's
lease lapsed (it died) ends it with a failure event, stored for every reader, instead of waiting
for events that will never come; retrieving it says it failed.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import time
import urllib.parse
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from typing import Any, Literal

import anyio
import anyio.lowlevel
import orjson

from aiostream_synth._dialects.base import (
    DialectSpec,
    ErrorResponse,
    Storage,
    StoredFrames,
    StreamFrames,
)
from aiostream_synth._dialects.prepared import PreparedRequest, parse_json_body
from aiostream_synth._engine.runtime import Linger, Lingered, current_runtime
from aiostream_synth._engine.shutdown import ShutdownSignal
from aiostream_synth._engine.stream import SynthesizedStream
from aiostream_synth._engine.tasks import TaskStarter
from aiostream_synth._serving.answers import header_pairs, send_json
from aiostream_synth._serving.asgi_types import SSE_HEADERS, Receive, Send
from aiostream_synth._serving.pages import page, page_of, page_query, unknown_cursor
from aiostream_synth._serving.pipeline import (
    ClientGone,
    DisconnectHook,
    StreamSettings,
    dialect_error,
    read_body,
)
from aiostream_synth._serving.respond import write_until_disconnect
from aiostream_synth._store.base import (
    Creation,
    KeepaliveTemplate,
    ResponseStore,
    StoredResponse,
    StoreUnavailable,
    UnknownCursor,
    Write,
    with_keepalives,
)
from aiostream_synth._wire.errors import BackendError, RequestError, StreamAborted
from aiostream_synth._wire.failures import Failure, classify_failure, log_internal
from aiostream_synth._wire.sse import split_frames

__all__ = ["BackgroundResponses", "owner_of"]

LOG = logging.getLogger("aiostream_synth.background")

#: Seconds the recorder gives the store to take a response's last events after a cancel.
_LAST_WRITE_S = 5.0
#: Seconds the writer lets writes gather before it sends them (the store is that much behind
#: the live stream at most, besides its own round trip).
_BATCH_S = 0.01
#: Responses' writes per store call of a batch.
_FLUSH_CHUNK = 500
#: Keepalive numbers per store call of a batch.
_NUMBERS_CHUNK = 10_000
#: Seconds a cancel asked of another process waits for the response's end in the store.
_REMOTE_CANCEL_S = 10.0
#: How many responses with a lost store write are remembered (to answer 503, not 404).
_UNSTORED_KEPT = 10_000
#: A listing's walk along its store's list after the first (which asks for exactly a page
#: and one): at least this many ids, as the filters left the page short.
_LIST_WALK = 50
#: What an abandoned response's failure says (its process stopped before its end).
_ABANDONED = (
    "The server generating this response stopped before it ended (its lease in the response "
    "store lapsed), so the response is lost; create it again."
)


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
#: The tracking of a stream when no shutdown signal is given.
_UNTRACKED = contextlib.nullcontext()


def _is_keepalive(write: bytes, template: KeepaliveTemplate | None, number: int) -> bool:
    """Whether ``write`` is exactly keepalive ``number`` made from ``template``: the bytes a
    replay renders for it (:func:`~aiostream_synth._store.base.with_keepalives`), so what is
    kept as a number replays as it was sent. One rendering and one comparison: a third of the
    cost of parsing the number out of the write. Only writes the recording frames did not
    render themselves come here (a waiting response's ticks do not: they are rendered from
    the template, :meth:`_RecordingFrames.keepalive_frames`)."""
    return template is not None and write == b"%b%d%b" % (template[0], number, template[1])


class _Write:
    """A response's writes queued for the store."""

    __slots__ = ("creation", "done", "events", "keepalive", "last", "obj")

    def __init__(
        self,
        events: list[tuple[int, bytes]],
        obj: bytes | None,
        done: bool,
        creation: Creation | None,
    ) -> None:
        self.events = events
        self.obj = obj
        self.done = done
        self.creation = creation
        self.keepalive: KeepaliveTemplate | None = None
        self.last = -1

    def to_store(self) -> Write:
        return Write(self.creation, self.events, self.obj, self.done, self.keepalive, self.last)


class _Live:
    """A background response being generated in this process: its events so far, keepalives
    as one template and the number of the latest event (see :mod:`aiostream_synth._store.base`)."""

    __slots__ = (
        "cancelled",
        "changed",
        "done",
        "events",
        "generation",
        "keepalive",
        "last",
        "object_json",
        "owner",
        "storage",
    )

    def __init__(self, owner: str, generation: _Generation, storage: Storage) -> None:
        self.owner = owner
        self.generation = generation
        self.storage = storage
        #: Its events other than keepalives, in order.
        self.events: list[tuple[int, bytes]] = []
        self.keepalive: KeepaliveTemplate | None = None
        #: The number of its latest event, a keepalive's included.
        self.last = -1
        #: The response object as its latest event carried it, serialized: a waiting stream
        #: holds no tree of objects for the garbage collector to walk at every collection.
        self.object_json: bytes | None = None
        self.done = False
        self.cancelled = False
        #: Set (and replaced) when an event is added: what readers of the live log wait on.
        self.changed: anyio.Event | None = None

    @property
    def next_sequence(self) -> int:
        return self.last + 1

    @property
    def object(self) -> dict[str, Any] | None:
        """The response object as its latest event carried it."""
        return None if self.object_json is None else orjson.loads(self.object_json)

    def ended(self) -> bool:
        """Its terminal event is recorded (a method: it changes across an await)."""
        return self.done

    def after(self, sequence: int) -> list[tuple[int, bytes]]:
        """Its events numbered above ``sequence``, keepalives rendered."""
        return with_keepalives(self.events, sequence, self.last, self.keepalive)

    async def wait(self, sequence: int) -> None:
        """Until an event above ``sequence`` exists, or the response is done."""
        while not self.done and self.last <= sequence:
            if self.changed is None:
                self.changed = anyio.Event()
            await self.changed.wait()

    def notify(self) -> None:
        changed, self.changed = self.changed, None
        if changed is not None:
            changed.set()


class _Generation:
    """A background response's backend call, run by a task of the lifespan to its end
    whoever follows it (a timeout or a cancel ends it sooner).

    The engine stream rendering its events follows it through ``start_call`` (the engine's
    protocol for calls that run in a task of their own), one stream at a time: the creating
    client's while it is connected, then the recorder's. So a stream whose client stays costs
    one task per tick, as a stream that is not kept does."""

    __slots__ = (
        "_call",
        "_follower",
        "_linger",
        "_timeout",
        "cancelled",
        "done",
        "error",
        "result",
    )

    def __init__(self, call: Callable[[], Awaitable[Any]], timeout: float | None) -> None:
        self._call = call
        self._timeout = timeout
        self._follower: _Following | None = None
        self._linger: Linger | None = None
        self.cancelled = False
        self.done = False
        self.result: Any = None
        self.error: BaseException | None = None

    async def run(self) -> None:
        """The call, to its outcome (a task of the lifespan: never raises but a cancellation).
        Its timeout and its cancel are the runtime's linger (a loop timer on asyncio): no
        cancel scope per waiting response."""
        returned = False
        linger = self._linger = current_runtime().linger()
        if self.cancelled:
            linger.start(0)
        elif self._timeout is not None:
            linger.start(self._timeout)
        try:
            self.result = await linger.run(self._call)
            returned = True
        except Lingered:
            self.error = (
                StreamAborted("the response was cancelled")
                if self.cancelled
                else TimeoutError(f"no result within {self._timeout:g} s")
            )
        except Exception as exc:  # any failure of the call is its outcome
            # Kept without its traceback, whose frames would hold this object in a cycle.
            self.error = exc.with_traceback(None)
        finally:
            self._linger = None
            if not returned and self.error is None:  # the lifespan is ending
                self.error = StreamAborted("the backend call was cancelled")
            self.done = True
            follower, self._follower = self._follower, None
            if follower is not None:
                follower.end(self.result, self.error)

    async def __call__(self) -> Any:
        """Not awaited: a stream follows the call through :meth:`start_call`."""
        raise RuntimeError("a background response's call is followed through start_call")

    def cancel(self) -> None:
        """End the call (its follower is told, as of any outcome)."""
        if not self.done and not self.cancelled:
            self.cancelled = True
            if self._linger is not None:
                self._linger.hold()
                self._linger.start(0)

    def start_call(self, ended: Callable[[Any, BaseException | None], None]) -> _Following:
        """Follow the call: ``ended`` is told its outcome (at once when it has one)."""
        following = _Following(self, ended)
        if self.done:
            following.end(self.result, self.error)
        else:
            self._follower = following
        return following


class _Following:
    """A stream following a :class:`_Generation`: told its outcome once; ``cancel()`` stops
    following (the call goes on) and tells the stream so at once, as the engine's
    ``start_call`` protocol asks. Either way it lets go of both (no cycle through the
    stream, which holds it, outlives the response)."""

    __slots__ = ("_ended", "_generation")

    def __init__(
        self, generation: _Generation, ended: Callable[[Any, BaseException | None], None]
    ) -> None:
        self._generation: _Generation | None = generation
        self._ended: Callable[[Any, BaseException | None], None] | None = ended

    def end(self, result: Any, error: BaseException | None) -> None:
        ended = self._ended
        self._generation = self._ended = None
        if ended is not None:
            ended(result, error)

    def cancel(self) -> None:
        generation, ended = self._generation, self._ended
        self._generation = self._ended = None
        if generation is not None and generation._follower is self:
            generation._follower = None
        if ended is not None:
            ended(None, StreamAborted("the stream stopped following the response"))


class _Continuing:
    """The dialect of a stream that goes on where another stopped: the same frames object,
    so that the numbering, the opening events and the response id carry over."""

    __slots__ = ("_frames",)

    def __init__(self, frames: StreamFrames) -> None:
        self._frames = frames

    def open_stream(self) -> StreamFrames:
        return self._frames


class _RecordingFrames:
    """The frames of the creating client's stream: each batch the engine has synthesized is
    recorded (live log, store) before the engine hands it out, and what it hands out is what
    the live log has, so the client gets exactly what was recorded (after a cancel, the
    cancelled response's events rather than the engine's failure). Recording inside the
    engine's own call leaves the writer no layer of its own to resume on every tick."""

    __slots__ = ("_frames", "key", "live", "owner", "sent", "storage")

    def __init__(
        self,
        owner: BackgroundResponses,
        key: str,
        live: _Live,
        storage: Storage,
        frames: StoredFrames,
    ) -> None:
        self.owner = owner
        #: The response's id.
        self.key = key
        self.live = live
        self.storage = storage
        self._frames = frames
        #: The number of the last event handed to the engine for its client.
        self.sent = -1

    @property
    def response_id(self) -> str | None:
        return self._frames.response_id

    def keepalive_frames(self, now: float) -> list[bytes]:
        live = self.live
        template = live.keepalive
        if template is not None and self.sent == live.last and not live.done:
            # A tick of a waiting response (the hot path): its keepalive rendered here from
            # the template the live log keeps, byte for byte as a replay renders it, and
            # recorded as its number alone; the dialect's numbering goes on after it.
            # (What BackgroundResponses._add_keepalive does, inlined: a call less a tick.)
            number = self.sent = live.last = live.last + 1
            if live.changed is not None:
                live.notify()
            owner = self.owner
            owner._keepalives[self.key] = number
            if not owner._writing:
                owner._start_writer()
            self._frames.skip_to(number + 1)
            return [b"%b%d%b" % (template[0], number, template[1])]
        return self._recorded(self._frames.keepalive_frames(now))

    def result_frames(self, result: Any) -> list[bytes]:
        return self._recorded(self._frames.result_frames(result))

    def failure_frames(self, failure: Failure) -> list[bytes]:
        return self._recorded(self._frames.failure_frames(failure))

    def error_response(self, failure: Failure) -> ErrorResponse:
        return self._frames.error_response(failure)

    def _recorded(self, frames: list[bytes]) -> list[bytes]:
        live = self.live
        if not frames:
            return frames
        run = self._frames.run_start()
        if self.sent == live.last and self.owner._add(self.key, live, self.storage, frames, run):
            self.sent = live.last  # recorded whole, nothing else was waiting to be sent
            return frames
        # Something else was recorded meanwhile (a cancel): the live log's events instead.
        # There are some: the writer stops at the terminal event and asks for nothing after
        # it (were there none, the engine's own frames: an empty batch would end nothing).
        return [frame for _, frame in self.unsent()] or frames

    def unsent(self) -> list[tuple[int, bytes]]:
        """The live log's events after those handed out, now counted as handed out."""
        events = self.live.after(self.sent)
        if events:
            self.sent = events[-1][0]
        return events


class _Recorded:
    """The creating client's stream as its writer iterates it: the engine stream itself
    while it goes on (its frames record themselves, :class:`_RecordingFrames`), the live log
    when something else recorded the response's end, or the engine failed before its first
    event."""

    __slots__ = ("_frames", "_live", "_prepared", "_stream", "drain_ready")

    def __init__(
        self, frames: _RecordingFrames, stream: SynthesizedStream, prepared: PreparedRequest
    ) -> None:
        self._frames = frames
        self._live = frames.live
        self._stream = stream
        self._prepared = prepared
        #: The rest of what the engine handed out (nothing after the live log's events: the
        #: engine had handed out all it had when they were read). The engine's own method:
        #: no call of this object's on every tick.
        self.drain_ready: Callable[[], list[bytes]] = stream.drain_ready

    def __aiter__(self) -> _Recorded:
        return self

    def __anext__(self) -> Coroutine[Any, Any, bytes]:
        live = self._live
        sent = self._frames.sent
        # Something handed out (the engine committed) and nothing of the log still to send.
        if sent >= 0 and sent >= live.last and not live.done:
            # The engine's own coroutine: no frame of this object in the chain every tick
            # resumes.
            return self._stream.__anext__()
        return self._from_log()

    async def _from_log(self) -> bytes:
        live = self._live
        frames = self._frames
        if frames.sent >= live.last:
            if live.done:
                raise StopAsyncIteration
            try:
                return await self._stream.__anext__()
            except StopAsyncIteration:
                if not live.ended():
                    # The engine ends with a terminal event, which ended the response.
                    raise RuntimeError(
                        "the engine stream ended before its terminal event"
                    ) from None
            except BackendError as exc:  # failed before its first event
                frames.owner._failed_early(frames.key, live, frames.storage, self._prepared, exc)
        events = frames.unsent()
        if not events:
            raise StopAsyncIteration
        return events[0][1] if len(events) == 1 else b"".join(frame for _, frame in events)

    @property
    def exhausted(self) -> bool:
        return self._live.done and self._frames.sent >= self._live.last


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
        #: Responses of a process that stopped, ended here as failed (each logged;
        #: ``aiostream_synth_store_abandoned_total``).
        self.abandoned = 0
        #: Responses the store lost a write of (the most recent ones): retrieving one says the
        #: store failed, rather than replaying a partial record or calling it unknown.
        self._unstored: OrderedDict[str, None] = OrderedDict()
        #: Writes queued for the store, by response, and whether the writer task runs.
        self._pending: dict[str, _Write] = {}
        self._in_flight: dict[str, _Write] = {}
        self._flushed: anyio.Event | None = None
        self._writing = False
        #: The latest keepalive numbers of waiting responses, not yet written (a write of its
        #: own for each would cost a store command per tick): the writer takes them every
        #: ``store.progress_every_s``, all in one call.
        self._keepalives: dict[str, int] = {}
        self._wake_writer: anyio.Event | None = None
        self._tasks: TaskStarter | None = None
        #: Set once this process's lease is first taken (or the store failed to give it).
        self._lease_taken: anyio.Event | None = None
        #: The monotonic second of the latest stream kept from its start (see :meth:`now_mark`).
        self._mark = float("-inf")

    @property
    def generating(self) -> int:
        """Background responses being generated in this process now."""
        return len(self._live)

    # -- responses kept as they stream (not background) -----------------------------------------
    def now_mark(self) -> float:
        """Monotonic now, to within a second: one float object shared by every stream kept
        within that second (a wave of thousands holds one, not one each)."""
        now = time.monotonic()
        if now - self._mark >= 1.0:
            self._mark = now
        return self._mark

    @property
    def writes_behind(self) -> bool:
        """Whether writes can be queued for the writer task (the lifespan runs it)."""
        return self._tasks is not None

    def keep_later(self, response_id: str, creation: Creation) -> None:
        """Start keeping a response through the writer (a wave's records: a few batches, no
        round trip before each stream)."""
        self._write_later(response_id, [], None, False, creation)

    def finish_later(
        self, response_id: str, obj_json: bytes, creation: Creation | None = None
    ) -> None:
        """A kept response's final object (serialized), through the writer; ``creation``
        for one kept only once it ended."""
        self._write_later(response_id, [], obj_json, True, creation)

    async def forget(self, response_id: str) -> None:
        """Drop a kept response (its stream ended without its answer): once what is queued
        of it is written, so that no creation lands after the delete."""
        await self._until_written(response_id)
        await self._keep(self.store.delete(response_id))

    async def until_written(self, response_id: str) -> None:
        """Until this process's queued writes of ``response_id`` reached the store (a request
        continuing it reads it there)."""
        await self._until_written(response_id)

    # -- create ------------------------------------------------------------------------------
    async def create(
        self,
        spec: DialectSpec,
        storage: Storage,
        prepared: PreparedRequest,
        call: Callable[[], Awaitable[Any]],
        dialect_settings: StreamSettings,
        headers: Mapping[str, str],
        tasks: TaskStarter | None,
        receive: Receive,
        send: Send,
        extra: list[tuple[bytes, bytes]],
        input_items: list[Any] | None = None,
        hook: DisconnectHook | None = None,
        *,
        arrived: float | None = None,
    ) -> None:
        """Start a background response; stream it to its client, or answer its object.
        ``input_items``: the whole input it is made from, kept for a request continuing it;
        ``hook``: the server's disconnect callback (see :mod:`aiostream_synth._serving.respond`);
        ``arrived``: when the request arrived (anyio's clock): its keepalives are due a whole
        number of intervals after it, as a stream's that is not kept (default: now)."""
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
        generation = _Generation(call, self.timeout)
        live = _Live(owner_of(headers), generation, storage)
        self._live[response_id] = live
        frames = storage.stored_dialect(
            prepared, dialect_settings, response_id, background=True
        ).open_stream()
        self._tasks = tasks
        # Created in the store by the writer, with the first events: no store round trip
        # before the stream starts (a wave of creations is one batch).
        self._write_later(
            response_id,
            [],
            None,
            False,
            Creation.serialized(live.owner, {"id": response_id}, input_items, background=True),
        )
        started = time.monotonic()
        tasks.start_soon(generation.run)
        # The engine's frames record themselves, whether the client's own task renders them
        # or the recorder does once it left: the same object, the same numbers.
        recording = _RecordingFrames(self, response_id, live, storage, frames)
        if not prepared.stream:
            tasks.start_soon(self._record, recording, prepared, started)
            await live.wait(-1)
            # Once in the store: the id answered here is found by every process sharing it.
            await self._until_written(response_id)
            await send_json(send, 200, live.object or {"id": response_id}, extra)
            return
        # The client's own task renders the events while it stays; if it leaves first, the
        # recorder goes on from where it stopped.
        stream = self._stream(generation, recording, first_at_once=True, arrived=arrived)
        if dialect_settings.on_stream is not None:
            dialect_settings.on_stream(stream)  # the request's own record (its keepalives)
        try:
            async with stream:
                with self._tracked(stream):
                    recorded = _Recorded(recording, stream, prepared)
                    await write_until_disconnect(recorded, receive, send, extra, hook)
        finally:
            if live.done:
                self._ended(response_id, live, storage, started)
            else:
                try:
                    tasks.start_soon(self._record, recording, prepared, started)
                except RuntimeError:  # the lifespan has ended: the server is stopping
                    self._ended(response_id, live, storage, started)  # as a cancelled recorder

    def _stream(
        self,
        generation: _Generation,
        frames: StreamFrames,
        *,
        first_at_once: bool,
        arrived: float | None = None,
    ) -> SynthesizedStream:
        """An engine stream following ``generation`` (whose task bounds it in time)."""
        now = anyio.current_time()
        interval = self.keepalive_interval
        since = now
        if first_at_once:
            # A new response's first events at once (its object exists from the start), then
            # keepalives a whole number of intervals after the request's arrival, as for a
            # stream that is not kept: streams that arrived together tick together.
            since = (now if arrived is None else min(arrived, now)) - interval
        return SynthesizedStream(
            generation, _Continuing(frames), keepalive_interval=interval, waiting_since=since
        )

    def _tracked(self, stream: SynthesizedStream) -> contextlib.AbstractContextManager[object]:
        return self.shutdown.track(stream) if self.shutdown is not None else _UNTRACKED

    async def _record(
        self, recording: _RecordingFrames, prepared: PreparedRequest, started: float
    ) -> None:
        """The generation's events, with no client of its own following (never raises: a task
        of the lifespan); from the start, or from where the creating client left. The frames
        record themselves as the engine makes them (a tick the way it does for a client):
        the iteration only takes them out."""
        response_id, live, storage = recording.key, recording.live, recording.storage
        try:
            if not live.done:
                stream = self._stream(live.generation, recording, first_at_once=live.last < 0)
                async with stream:
                    with self._tracked(stream):
                        try:
                            async for _ in stream:
                                stream.drain_ready()
                                if live.ended():
                                    break
                        except BackendError as exc:
                            self._failed_early(response_id, live, storage, prepared, exc)
        except Exception as exc:  # a bug: the response still ends, its readers with it
            failure = log_internal(classify_failure(exc), exc)
            self._add_frames(
                response_id,
                live,
                storage,
                storage.failure_frames(prepared, response_id, failure, live.next_sequence),
            )
        finally:
            self._ended(response_id, live, storage, started)

    def _ended(self, response_id: str, live: _Live, storage: Storage, started: float) -> None:
        """The response's end: its call ended too, its readers woken, one log line."""
        live.generation.cancel()  # nobody follows it any more
        live.done = True
        live.notify()
        if self._live.pop(response_id, None) is None or not LOG.isEnabledFor(logging.INFO):
            return  # told already, or not to be told
        LOG.info(
            "background %s ended: status=%s events=%d duration_s=%.3f",
            response_id,
            storage.status(live.object or {}),
            live.next_sequence,
            time.monotonic() - started,
        )

    def _failed_early(
        self,
        response_id: str,
        live: _Live,
        storage: Storage,
        prepared: PreparedRequest,
        exc: BackendError,
    ) -> None:
        """A failure the engine raised before its first event: the dialect's failure events."""
        error = exc.body.get("error", {}) if isinstance(exc.body, dict) else {}
        failure = Failure(
            exc.status_code,
            str(error.get("code") or "server_error"),
            str(error.get("message") or exc),
        )
        frames = storage.failure_frames(prepared, response_id, failure, live.next_sequence)
        self._add_frames(response_id, live, storage, frames)

    def _add_frames(
        self, response_id: str, live: _Live, storage: Storage, frames: list[bytes]
    ) -> None:
        self._add(response_id, live, storage, frames)

    def _add(
        self,
        response_id: str,
        live: _Live,
        storage: Storage,
        frames: list[bytes],
        run: int | None = None,
    ) -> bool:
        """Record one engine write (its frames, an event each; one holding several is split):
        into the live log (its readers woken) and the store's queue; keepalives only move the
        number of the latest event. ``run``: the frames' :meth:`StoredFrames.run_start`
        (only the last of them is read then). A response that is done (cancelled meanwhile)
        takes nothing more: False then."""
        if live.done:
            return False
        number = live.last + 1
        if len(frames) == 1 and _is_keepalive(frames[0], live.keepalive, number):
            self._add_keepalive(response_id, live, number)  # one more keepalive
            return True
        batch: list[tuple[int, bytes]] = []
        obj: bytes | None = None
        terminal = False
        template: KeepaliveTemplate | None = None
        final = storage.event(frames[-1]) if run == number else None
        if final is not None and final.sequence == number + len(frames) - 1:
            # A run (a result's events): each numbered by its place, only the last one read.
            # One tuple an event, shared by the live log and the store's queue.
            batch = list(zip(range(number, final.sequence + 1), frames, strict=True))
            live.events += batch
            live.last = final.sequence
            obj = final.response_json
            terminal = final.terminal
        else:
            if any(frame.count(b"\n\n") > 1 for frame in frames):
                frames = split_frames(b"".join(frames))
            for frame in frames:
                event = storage.event(frame)
                if event is None:
                    continue
                keepalive = event.keepalive
                if keepalive is not None and live.keepalive is None:
                    live.keepalive = template = keepalive
                if keepalive is None or keepalive != live.keepalive:
                    entry = (event.sequence, frame)
                    live.events.append(entry)
                    batch.append(entry)
                live.last = event.sequence
                if event.response_json is not None:
                    obj = event.response_json
                terminal = terminal or event.terminal
        if terminal:
            live.done = True  # readers end after this write
        live.notify()
        if obj is not None:
            if obj == live.object_json:
                obj = None  # the same object again: not written again
            else:
                live.object_json = obj
        if response_id not in self._unstored:
            self._write_later(response_id, batch, obj, terminal, keepalive=template, last=live.last)
        return True

    def _add_keepalive(self, response_id: str, live: _Live, number: int) -> None:
        """Record keepalive ``number`` of a response that is not done (every tick of every
        waiting stream): the live log's latest number, and the store's, which the writer
        takes there later with the other responses' in one call."""
        live.last = number
        live.notify()
        self._keepalives[response_id] = number
        if not self._writing:
            self._start_writer()

    def _start_writer(self) -> None:
        """Start the writer task, unless there is no lifespan to run it in."""
        if self._tasks is not None:
            self._writing = True
            self._tasks.start_soon(self._write_behind)

    # -- write-behind ------------------------------------------------------------------------
    def _write_later(
        self,
        response_id: str,
        events: list[tuple[int, bytes]],
        obj: bytes | None,
        done: bool,
        creation: Creation | None = None,
        *,
        keepalive: KeepaliveTemplate | None = None,
        last: int = -1,
    ) -> None:
        """Queue a response's write for the store: one writer task sends whatever is queued in
        one batch (one Redis pipeline for thousands of streams), so a slow store delays no
        event on its way to the live readers."""
        pending = self._pending.get(response_id)
        if pending is None:
            pending = self._pending[response_id] = _Write(events, obj, done, creation)
        else:
            pending.events.extend(events)
            pending.obj = obj or pending.obj
            pending.done = pending.done or done
        if keepalive is not None:
            pending.keepalive = keepalive
        pending.last = max(pending.last, last)
        woken, self._wake_writer = self._wake_writer, None
        if woken is not None:
            woken.set()
        if not self._writing:
            self._start_writer()

    async def _write_behind(self) -> None:
        """Send the queued writes, batch after batch, until none is left (a lifespan task:
        never raises but its cancellation; what is queued when the lifespan ends is still
        written, within :data:`_LAST_WRITE_S`)."""
        try:
            while self._pending or self._keepalives:
                ending: BaseException | None = None
                try:
                    await self._gather()
                except anyio.get_cancelled_exc_class() as exc:
                    ending = exc  # the lifespan ends: what is queued is still written
                batch, self._pending = self._pending, {}
                numbers, self._keepalives = self._keepalives, {}
                if self._unstored:  # lost a write: nothing more of them is written
                    numbers = {k: n for k, n in numbers.items() if k not in self._unstored}
                self._in_flight = batch
                with anyio.CancelScope(shield=True), anyio.move_on_after(_LAST_WRITE_S):
                    await self._flush(batch, numbers)
                self._in_flight = {}
                flushed, self._flushed = self._flushed, None
                if flushed is not None:
                    flushed.set()
                if ending is not None:
                    raise ending
        finally:
            self._writing = False
            self._wake_writer = None
            self._in_flight = {}
            flushed, self._flushed = self._flushed, None
            if flushed is not None:
                flushed.set()

    async def _gather(self) -> None:
        """Let writes gather before a flush: keepalive numbers alone for up to the store's
        ``progress_every_s`` (or until anything else is queued), anything else for
        :data:`_BATCH_S` — what a wave of requests queues meanwhile joins the batch, whose
        fixed cost (a round trip, the client's own bookkeeping) a flush per handful of
        requests would pay a thousand times a second."""
        if self._pending:
            await anyio.sleep(_BATCH_S)
            return
        self._wake_writer = anyio.Event()
        try:
            with anyio.move_on_after(self.store.progress_every_s):
                await self._wake_writer.wait()
        finally:
            self._wake_writer = None

    async def _until_written(self, response_id: str) -> None:
        """Until nothing of ``response_id`` waits for the store (written, or failed)."""
        while self._writing and (response_id in self._pending or response_id in self._in_flight):
            if self._flushed is None:
                self._flushed = anyio.Event()
            await self._flushed.wait()

    async def _flush(self, batch: dict[str, _Write], keepalives: dict[str, int]) -> None:
        """Send a batch, :data:`_FLUSH_CHUNK` responses' writes per call: a call is built
        without a pause (thousands of responses ending together would hold the loop for as
        long). Keepalive numbers are one word each, :data:`_NUMBERS_CHUNK` of them a call:
        a call costs its client far more than a number (benchmarks/COSTS.md)."""
        if len(batch) <= _FLUSH_CHUNK and len(keepalives) <= _NUMBERS_CHUNK:
            await self._flush_chunk(batch, keepalives)  # one call (most flushes)
            return
        items = list(batch.items())
        numbers = list(keepalives.items())
        calls = max(-(-len(items) // _FLUSH_CHUNK), -(-len(numbers) // _NUMBERS_CHUNK))
        for call in range(calls):
            chunk = dict(items[call * _FLUSH_CHUNK : (call + 1) * _FLUSH_CHUNK])
            taken = numbers[call * _NUMBERS_CHUNK : (call + 1) * _NUMBERS_CHUNK]
            await self._flush_chunk(chunk, dict(taken))

    async def _flush_chunk(self, batch: dict[str, _Write], keepalives: dict[str, int]) -> None:
        writes = {response_id: write.to_store() for response_id, write in batch.items()}
        if await self._keep(self.store.append_many(writes, keepalives)):
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
        storage: Storage,
        live: _Live | None,
        response_id: str,
        after: int,
        receive: Receive,
        send: Send,
        extra: list[tuple[bytes, bytes]],
        first: tuple[StoredResponse, list[tuple[int, bytes]]] | None = None,
    ) -> None:
        """Stream the events above ``after`` to one reader, live ones as they come, up to the
        terminal event (or until the reader leaves); what is there already in one write.
        ``first``: the response and its events above ``after`` as the request has just read
        them from the store (not generated here), taken as the first read."""
        await send(
            {"type": "http.response.start", "status": 200, "headers": [*SSE_HEADERS, *extra]}
        )
        ended = (
            live.after(after)
            if live is not None and live.done
            else first[1]
            if first is not None and first[0].done
            else None
        )
        if ended is not None:  # all of it at hand: sent whole, no wait, nothing to watch
            body = b"".join([frame for _, frame in ended])
            await send({"type": "http.response.body", "body": body, "more_body": False})
            return
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
                    read = first or await self.store.read(response_id, after)
                    first = None
                    stored, events = read or (None, [])
                    if stored is not None and stored.abandoned:
                        await self._end_abandoned(storage, response_id, stored)
                        continue  # read again: its end is stored, by whichever reader
                    # Its events read with it: the terminal one among them when it is done.
                    done = stored is None or stored.done
                if events:
                    body = b"".join([frame for _, frame in events])
                    await send({"type": "http.response.body", "body": body, "more_body": True})
                    after = events[-1][0]
                    if live is None and not done:
                        continue  # generated elsewhere: read on before waiting
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
        ``DELETE {path}/{id}`` (a dialect without background mode: only ``GET``, without
        ``stream``, and ``DELETE``), and ``GET {path}/{id}/{items_action}``, a page of what it
        was made from (:meth:`Storage.listed_items`)."""
        items = action == storage.items_action
        allowed = (
            "POST"
            if action == "cancel"
            else "GET"
            if items
            else "GET, POST, DELETE"
            if storage.updatable
            else "GET, DELETE"
        )
        actions = ("", storage.items_action, *(("cancel",) if storage.has_background else ()))
        if action not in actions or method not in allowed.split(", "):
            status = 404 if action not in actions else 405
            error = spec.error_response(
                status,
                f"Use {allowed}."
                if status == 405
                else f"Unknown path for {storage.noun.lower()} {response_id!r}.",
            )
            await _send_error(send, error, [(b"allow", allowed.encode())] if status == 405 else [])
            return
        owner = owner_of(headers)
        if items:
            await self._list_items(spec, storage, response_id, query, owner, send)
            return
        if method == "POST" and action == "":
            await self._update(spec, storage, response_id, owner, receive, send)
            return
        live = self._live.get(response_id)
        stored = None
        params = urllib.parse.parse_qs(query.decode("latin-1"))
        asked = params.get("stream", ["false"])[-1].lower() in ("true", "1")
        streamed = asked and storage.has_background  # no events kept without background mode
        raw_after = params.get("starting_after", ["-1"])[-1]
        # A stream's events are read with the response (None: not a stream, or refused below).
        try:
            after = max(int(raw_after), -1) if streamed else None  # below -1: from the start
        except ValueError:
            after = None
        first = None
        if live is None and response_id in self._unstored:
            error = spec.error_response(
                503,
                f"{storage.noun} '{response_id}' cannot be retrieved: the response store "
                "failed while it was generated.",
                code="store_unavailable",
            )
            await _send_error(send, error)
            return
        if live is None:
            # This process's own writes first (its last events may still be queued).
            await self._until_written(response_id)
            try:
                first = await self.store.read(response_id, after)
            except StoreUnavailable as exc:
                await self._store_failed(spec, send, "store read failed: %s", exc)
                return
            stored = None if first is None else first[0]
        mine = (live is not None and live.owner == owner) or (
            stored is not None and stored.owner == owner and storage.holds(stored.object)
        )
        if not mine:  # another's, or another dialect's (one store keeps every dialect's)
            await _send_not_found(spec, storage, response_id, send)
            return
        if stored is not None and stored.abandoned and method != "DELETE":
            try:
                stored = await self._end_abandoned(storage, response_id, stored)
            except StoreUnavailable as exc:
                await self._store_failed(
                    spec, send, f"store failed while ending {response_id}: %s", exc
                )
                return
            first = None  # read again, its end added
            if stored is None:  # deleted meanwhile
                await _send_not_found(spec, storage, response_id, send)
                return
        obj = live.object if live is not None else stored.object if stored is not None else None
        if method == "DELETE":
            if live is not None:
                await self._cancel(response_id, live, storage)
            elif stored is not None and not stored.done:
                # Generated elsewhere: ended there (best effort), so that it writes no more.
                with contextlib.suppress(StoreUnavailable):
                    await self.store.request_cancel(response_id)
            self._pending.pop(response_id, None)
            self._keepalives.pop(response_id, None)
            await self._keep(self.store.delete(response_id))
            await send_json(send, 200, storage.deleted(response_id))
            return
        if action == "cancel":
            if live is None and stored is not None and not stored.done:
                # Generated by another process sharing the store: asked there, and awaited.
                stored = await self._cancel_elsewhere(spec, response_id, stored, send)
                if stored is None:
                    return
                obj = stored.object
                if storage.status(obj) == "cancelled":
                    await send_json(send, 200, obj)
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
            await self._cancel(response_id, live, storage)
            await send_json(send, 200, storage.cancelled(live.object or {"id": response_id}))
            return
        if not streamed:
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
        if after is None:
            await _send_error(
                send,
                spec.error_response(
                    400,
                    f"starting_after must be an integer, not {raw_after!r}.",
                    param="starting_after",
                    code="invalid_value",
                ),
            )
            return
        await self._follow(storage, live, response_id, after, receive, send, [], first)

    async def list_answers(
        self,
        spec: DialectSpec,
        storage: Storage,
        query: bytes,
        headers: Mapping[str, str],
        send: Send,
    ) -> None:
        """``GET {path}``: a page of the caller's stored answers of the dialect, oldest first
        by default, those its query's filters ask for (:meth:`Storage.matches`). The store's
        list is walked from the page's cursor, a page's worth of answers read at a time: a
        page of a long list costs about a page."""
        name = storage.answers_list
        if name is None:
            raise ValueError(f"the {spec.name} dialect lists no stored answers")
        owner = owner_of(headers)
        try:
            asked = page_query(query, "asc")
        except RequestError as exc:
            await _send_error(send, dialect_error(spec, exc))
            return
        filters = asked.params
        wanted = asked.limit + 1  # one more tells whether more follow
        found: list[dict[str, Any]] = []
        after, walked = asked.after, False
        try:
            # This process's queued writes first (a stream that just ended may be among them).
            for queued in [*self._pending, *self._in_flight]:
                await self._until_written(queued)
            while len(found) < wanted:
                count = wanted - len(found)
                if walked:
                    count = max(count, _LIST_WALK)
                try:
                    ids = await self.store.listed(
                        name,
                        owner,
                        count,
                        descending=asked.order == "desc",
                        after=after,
                        before=asked.before,
                    )
                except UnknownCursor as exc:
                    if walked and exc.param == "after":
                        break  # the walk's own cursor went meanwhile: the list ends there
                    raise unknown_cursor(exc.param, exc.cursor) from None
                objects = await self._read_objects(ids, owner)
                found.extend(
                    obj
                    for obj in objects
                    if isinstance(obj.get("id"), str)
                    and storage.holds(obj)
                    and storage.matches(obj, filters)
                )
                if len(ids) < count:
                    break  # the list's end (or the cursor before)
                after, walked = ids[-1], True
        except StoreUnavailable as exc:
            await self._store_failed(spec, send, "store read failed: %s", exc)
            return
        except RequestError as exc:
            await _send_error(send, dialect_error(spec, exc))
            return
        await send_json(send, 200, page_of(found[: asked.limit], len(found) > asked.limit))

    async def _read_objects(self, ids: list[str], owner: str) -> list[dict[str, Any]]:
        """The objects of the responses ``ids`` that are still kept, and ``owner``'s, in that
        order (read together: on a shared store, a round trip per batch of reads)."""
        found: dict[str, dict[str, Any]] = {}
        failed: list[StoreUnavailable] = []

        async def read(response_id: str) -> None:
            try:
                read = await self.store.read(response_id)
            except StoreUnavailable as exc:  # raised below, not as a group of them
                failed.append(exc)
                return
            if read is not None and read[0].owner == owner:
                found[response_id] = read[0].object

        async with anyio.create_task_group() as group:
            for response_id in ids:
                group.start_soon(read, response_id)
        if failed:
            raise failed[0]
        return [found[response_id] for response_id in ids if response_id in found]

    async def _update(
        self,
        spec: DialectSpec,
        storage: Storage,
        response_id: str,
        owner: str,
        receive: Receive,
        send: Send,
    ) -> None:
        """``POST {path}/{id}``: a stored answer's object as the request's body updates it."""
        try:
            body = parse_json_body(await read_body(receive))
        except RequestError as exc:
            await _send_error(send, dialect_error(spec, exc))
            return
        except ClientGone:
            return
        stored = await self._owned(spec, storage, response_id, owner, send)
        if stored is None:
            return
        try:
            updated = storage.updated(stored.object, body)
        except RequestError as exc:
            await _send_error(send, dialect_error(spec, exc))
            return
        try:
            replaced = await self.store.replace_object(response_id, updated)
        except StoreUnavailable as exc:
            await self._store_failed(spec, send, "store write failed: %s", exc)
            return
        if not replaced:  # gone meanwhile
            await _send_not_found(spec, storage, response_id, send)
            return
        await send_json(send, 200, updated)

    async def _owned(
        self, spec: DialectSpec, storage: Storage, response_id: str, owner: str, send: Send
    ) -> StoredResponse | None:
        """The stored answer ``response_id`` with its input, once this process's queued
        writes of it are in the store, when it is ``owner``'s and the dialect's; else None,
        the refusal sent (404, or 503 when the store fails)."""
        await self._until_written(response_id)
        try:
            stored = await self.store.get(response_id)
        except StoreUnavailable as exc:
            await self._store_failed(spec, send, "store read failed: %s", exc)
            return None
        if stored is None or stored.owner != owner or not storage.holds(stored.object):
            await _send_not_found(spec, storage, response_id, send)
            return None
        return stored

    async def _list_items(
        self,
        spec: DialectSpec,
        storage: Storage,
        response_id: str,
        query: bytes,
        owner: str,
        send: Send,
    ) -> None:
        """``GET {path}/{id}/{storage.items_action}``: a page of what a stored answer was made
        from (:mod:`aiostream_synth._serving.pages`)."""
        if response_id in self._unstored:
            error = spec.error_response(
                503,
                f"{storage.noun} '{response_id}' cannot be listed: the response store failed "
                "while it was generated.",
                code="store_unavailable",
            )
            await _send_error(send, error)
            return
        stored = await self._owned(spec, storage, response_id, owner, send)
        if stored is None:
            return
        listed = storage.listed_items(stored.input or [], response_id)
        await self._send_page(spec, send, listed, query, storage.items_order)

    async def _send_page(
        self,
        spec: DialectSpec,
        send: Send,
        items: list[dict[str, Any]],
        query: bytes,
        default_order: Literal["asc", "desc"],
    ) -> None:
        """The page of ``items`` the query asks for, or a 400 naming what it got wrong."""
        try:
            answer = page(items, query, default_order)
        except RequestError as exc:
            await _send_error(send, dialect_error(spec, exc))
            return
        await send_json(send, 200, answer)

    async def _store_failed(
        self, spec: DialectSpec, send: Send, what: str, exc: StoreUnavailable
    ) -> None:
        """A store operation of a request failed: counted, logged (``what`` % ``exc``), and
        answered 503."""
        self.store_failures += 1
        LOG.warning(what, exc)
        error = spec.error_response(
            503, f"The response store is unavailable: {exc}", code="store_unavailable"
        )
        await _send_error(send, error)

    async def _end_abandoned(
        self, storage: Storage, response_id: str, stored: StoredResponse
    ) -> StoredResponse | None:
        """End a response whose process stopped (see the module docstring): failed, with its
        failure event when its events are kept; the response then (None: deleted meanwhile)."""
        obj = storage.abandoned(stored.object, _ABANDONED)
        start = stored.last_sequence + 1
        frames = storage.abandoned_frames(obj, start) if stored.background else []
        if await self.store.end_abandoned(response_id, list(enumerate(frames, start)), obj):
            self.abandoned += 1
            LOG.warning(
                "background %s: the server generating it stopped before its end; ended here "
                "as failed",
                response_id,
            )
        read = await self.store.read(response_id)
        return None if read is None else read[0]

    async def _cancel(self, response_id: str, live: _Live, storage: Storage) -> None:
        """Cancel a live generation: its cancelled events recorded at once (what its readers
        get as the end), then its call ended."""
        self._cancel_now(response_id, live, storage)
        await anyio.lowlevel.checkpoint()

    def _cancel_now(self, response_id: str, live: _Live, storage: Storage) -> None:
        if not live.done:
            live.cancelled = True
            frames = storage.cancelled_frames(live.object or {}, live.next_sequence)
            self._add_frames(response_id, live, storage, frames)
        live.generation.cancel()

    def _cancel_heard(self, response_id: str) -> None:
        """Another process sharing the store asked to cancel ``response_id``."""
        live = self._live.get(response_id)
        if live is not None and not live.done:
            LOG.info("background %s: cancel asked by another server", response_id)
            self._cancel_now(response_id, live, live.storage)

    async def _cancel_elsewhere(
        self, spec: DialectSpec, response_id: str, stored: StoredResponse, send: Send
    ) -> StoredResponse | None:
        """Ask the process generating ``response_id`` to cancel it and wait for its end in the
        store; the response then, or None once an error is answered."""
        try:
            heard = await self.store.request_cancel(response_id)
            with anyio.move_on_after(_REMOTE_CANCEL_S):
                while heard and not stored.done:
                    await self.store.wait(response_id, stored.last_sequence, _REMOTE_CANCEL_S)
                    again = await self.store.read(response_id)
                    if again is None:
                        break
                    stored = again[0]
        except StoreUnavailable as exc:
            await self._store_failed(
                spec, send, f"store failed while cancelling {response_id}: %s", exc
            )
            return None
        if stored.done:
            return stored
        why = (
            "no server sharing this store answered"
            if not heard
            else f"the server generating it did not end it within {_REMOTE_CANCEL_S:g} s"
        )
        await _send_error(
            send,
            spec.error_response(
                409,
                f"Response '{response_id}' is being generated by another server sharing this "
                f"store, and could not be cancelled: {why}.",
                code="conflict",
            ),
        )
        return None

    # -- lifespan ----------------------------------------------------------------------------
    def start(self, tasks: TaskStarter) -> None:
        """Begin serving in the app's lifespan: this process's lease held, and cancels asked
        by other processes sharing the store heard, in tasks of ``tasks``."""
        self._tasks = tasks
        self._lease_taken = anyio.Event()
        tasks.start_soon(self._hold, self._lease_taken)
        tasks.start_soon(self._listen_cancels)

    async def lease_taken(self) -> None:
        """Until this process's lease is taken (or the store failed to give it: logged), so
        that no response is created before the other processes can see it is generated."""
        if self._lease_taken is not None:
            await self._lease_taken.wait()

    async def _hold(self, taken: anyio.Event) -> None:
        """Hold this process's lease until the lifespan ends (a store that fails is logged,
        and tried again a second later: meanwhile other processes may end this one's
        responses as abandoned, while its own clients' streams go on)."""
        while True:
            try:
                await self.store.hold(task_status=_Taken(taken))
            except (StoreUnavailable, OSError) as exc:
                self.store_failures += 1
                LOG.warning("the lease on this server's responses is not renewed: %s", exc)
            taken.set()
            await anyio.sleep(1.0)

    async def _listen_cancels(self) -> None:
        """Hear the cancels of other processes until the lifespan ends (a store that fails is
        logged, and listened to again a second later)."""
        while True:
            try:
                await self.store.listen_cancels(self._cancel_heard)
            except (StoreUnavailable, OSError) as exc:
                LOG.warning("cancels asked by other servers are not heard: %s", exc)
            await anyio.sleep(1.0)


class _Taken:
    """The ``task_status`` of :meth:`ResponseStore.hold`: its start sets an event."""

    __slots__ = ("_event",)

    def __init__(self, event: anyio.Event) -> None:
        self._event = event

    def started(self, value: None = None) -> None:
        self._event.set()


async def _send_not_found(
    spec: DialectSpec, storage: Storage, response_id: str, send: Send
) -> None:
    await _send_error(
        send,
        spec.error_response(
            404, f"{storage.noun} with id '{response_id}' not found.", code="not_found"
        ),
    )


async def _send_error(
    send: Send, error: ErrorResponse, headers: list[tuple[bytes, bytes]] | None = None
) -> None:
    await send_json(
        send, error.status_code, error.body, [*header_pairs(error.headers), *(headers or [])]
    )
