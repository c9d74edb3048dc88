"""A stream written as an ASGI response until its client leaves: the response head with the
first frame, the frames ready behind it in the same write, the terminal frames ending the
response; the client's disconnect read from ``receive`` by a watcher task, or heard through the
server's disconnect hook on asyncio (a callback instead of a task per waiting stream).

The frames come from a :class:`FrameSource`: the engine's
:class:`~aiostream_synth._engine.stream.SynthesizedStream`, or a background response's
recorded stream (:mod:`aiostream_synth._serving.background`)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Protocol

import anyio

from aiostream_synth._engine.runtime import current_runtime
from aiostream_synth._engine.tasks import raise_collapsed
from aiostream_synth._serving.answers import header_pairs, send_json
from aiostream_synth._serving.asgi_types import SSE_HEADERS, Message, Receive, Send
from aiostream_synth._serving.pipeline import DisconnectHook
from aiostream_synth._wire.errors import BackendError

__all__ = ["FrameSource", "write_until_disconnect"]


class FrameSource(Protocol):
    """What the writer needs of a stream of SSE frames."""

    def __aiter__(self) -> FrameSource: ...

    async def __anext__(self) -> bytes:
        """The next frame; :class:`BackendError` before the first one for an error answered
        as JSON instead."""
        ...

    def drain_ready(self) -> list[bytes]:
        """The frames ready behind the one just returned (nothing awaited)."""
        ...

    @property
    def exhausted(self) -> bool:
        """The last frame has been handed out."""
        ...


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


def write_until_disconnect(
    stream: FrameSource,
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
    stream: FrameSource, receive: Receive, send: Send, headers: list[tuple[bytes, bytes]]
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
    stream: FrameSource,
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
        # The ended task keeps the exception that ended it, whose traceback holds the
        # watcher's frame and so the watch: let go of the task, or each response would end
        # in a cycle only the garbage collector frees.
        task, watch.task = watch.task, None
        _raise_what_the_watcher_raised(task)
