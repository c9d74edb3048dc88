"""The engine: keepalive while one backend call computes the complete result, then its stream.

:class:`SynthesizedStream` is an async context manager that owns exactly one task — the
backend call — in an anyio task group, so it runs on asyncio and trio. The keepalive timer is
not a second task: it lives in the consumer's own ``__anext__``, which waits for the backend's
completion event under a deadline set to the next keepalive tick. Consequences:

* backpressure is structural: a frame exists only when the consumer asks for one, so nothing
  is ever buffered for a slow or stalled reader (a reader that never reads gets zero frames);
* the backend's completion cancels the tick wait once, by setting the event;
* no ``yield`` happens inside a task group or cancel scope (decision P9, PEP 789): the task
  group is entered in ``__aenter__`` and left in ``__aexit__`` of the same task.

The engine knows no dialect by name (decision P11): it asks a
:class:`~aiostream_synth._dialects.base.StreamFrames` for keepalive, result and failure frames
and for the error response before commit. The contract (race, exits, policies) is drawn in
ARCHITECTURE.md.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, TypeAlias

import anyio
import anyio.abc
import anyio.lowlevel

from aiostream_synth._dialects.base import StreamDialect, StreamFrames
from aiostream_synth._engine.tasks import Cancellable, TaskStarter, raise_collapsed
from aiostream_synth._engine.tick import TickWait, new_tick_wait
from aiostream_synth._wire.errors import BackendError, InvalidResultError, StreamAborted
from aiostream_synth._wire.failures import Failure, classify_failure, log_internal

__all__ = [
    "Backend",
    "OnDisconnect",
    "StartCall",
    "StreamOutcome",
    "SynthesizedStream",
]

_BACKEND_TASK_NAME = "aiostream_synth backend call"  # given, so no name is built per spawn

#: An async callable returning the complete result (a dict or a pydantic model).
Backend: TypeAlias = Callable[[], Awaitable[Any]]
#: What a backend that runs its call in a task of its own offers besides being awaitable:
#: ``start_call(ended)`` starts (or joins) the call and returns a handle whose ``cancel()``
#: means "this stream no longer waits"; ``ended(result, error)`` is called once, with the
#: outcome, or with an error at once after ``cancel()``. The engine then starts no task of its
#: own for the call (the request coalescer's shared calls: one task per stream less).
StartCall: TypeAlias = Callable[[Callable[[Any, "BaseException | None"], None]], Cancellable]
#: When the client leaves: ``"cancel"`` the backend call, or let it ``"finish"`` (within
#: ``finish_timeout``, its outcome handed to ``on_abandoned``).
OnDisconnect = Literal["cancel", "finish"]


def _next_on_phase(tick: float, interval: float, now: float) -> float:
    """The tick after ``tick`` on its phase (``tick`` plus a whole number of intervals) that
    is later than ``now``: a tick that came late (a busy loop, a slow reader) is followed by
    the next one on the grid, within an interval, rather than by a grid of its own."""
    following = tick + interval
    if following <= now:
        following += math.ceil((now - following) / interval) * interval
        if following <= now:  # ``now`` on the grid itself (or rounding): the one after it
            following += interval
    return following


@dataclass(frozen=True, slots=True)
class StreamOutcome:
    """What became of an abandoned stream's backend call (``finish`` policy callback)."""

    result: Any = None
    error: BaseException | None = None


class SynthesizedStream:
    """Keepalive ⟂ backend, consumed as an async iterator of ready-to-send SSE frames (bytes).

    ::

        async with SynthesizedStream(call_backend, ResponsesDialect(), keepalive_interval=10) as frames:
            async for frame in frames:
                await send(frame)

    * Lazy commit: nothing is produced before the first tick. A result that arrives earlier
      yields just its synthesized stream; a failure that arrives earlier raises
      :class:`BackendError` (HTTP status + OpenAI error body) from the first ``__anext__``.
    * ``waiting_since``: when the client began waiting (anyio's clock; its request's arrival).
      The first tick is due ``keepalive_interval`` after it — at once if that has passed —
      so a request that queued in a busy server is not held silent for a whole interval more
      than its time in the queue; the ticks after it stay a whole number of intervals after
      ``waiting_since``: one that was due long ago comes now (once, however many intervals
      passed), and the next at the following whole interval. A tick that comes late (a busy
      loop, a slow reader) is followed by the next one on that grid too, not an interval
      after it: streams that arrived together keep ticking together, one wake-up of the loop
      for all of them. Default: when the stream is entered.
    * After commit a failure becomes the dialect's terminal failure frames (decision P6).
    * ``timeout`` bounds the backend call; on expiry it is cancelled and fails as a timeout.
    * Leaving the context before the stream ended (consumer gone): ``on_disconnect="cancel"``
      cancels the backend call; ``"finish"`` waits up to ``finish_timeout`` for it, hands the
      outcome to ``on_abandoned`` and cancels it if the time runs out.
    * ``task_group``: by default each stream opens its own task group for its backend task.
      A server holding thousands of waiting streams can pass one long-lived task group (for
      example opened in its lifespan) to spawn every backend task into, which saves that
      group's bookkeeping per stream. The stream still never outlives its task:
      leaving the context cancels it (or, under ``"finish"``, waits as above) and waits for it
      to end. An exception other than :class:`Exception` from the backend then reaches the
      shared group instead of this context.
    * A backend that runs its call in a task of its own may also offer ``start_call`` (see
      ``StartCall`` in this module): the stream then starts no task, is told the outcome, and
      leaving it tells the backend that this stream no longer waits.
    """

    __slots__ = (
        "_backend",
        "_backend_task",
        "_cancelled_by",
        "_committed",
        "_deadline",
        "_done",
        "_done_event",
        "_entered",
        "_error",
        "_finish_timeout",
        "_finished",
        "_interval",
        "_keepalive_frames",
        "_keepalives",
        "_next_tick",
        "_on_abandoned",
        "_on_disconnect",
        "_out",
        "_own_task_group",
        "_pending",
        "_result",
        "_task_group",
        "_tick",
        "_timeout",
    )

    def __init__(
        self,
        backend: Backend,
        dialect: StreamDialect,
        *,
        keepalive_interval: float = 10.0,
        timeout: float | None = None,
        on_disconnect: OnDisconnect = "cancel",
        finish_timeout: float = 60.0,
        on_abandoned: Callable[[StreamOutcome], object] | None = None,
        task_group: TaskStarter | None = None,
        waiting_since: float | None = None,
    ) -> None:
        if keepalive_interval <= 0:
            raise ValueError("keepalive_interval must be positive")
        if waiting_since is not None and math.isnan(waiting_since):
            raise ValueError("waiting_since must be a time, not NaN")
        if on_disconnect not in ("cancel", "finish"):
            raise ValueError("on_disconnect must be 'cancel' or 'finish'")
        self._backend = backend
        self._out: StreamFrames = dialect.open_stream()
        self._interval = keepalive_interval
        self._timeout = timeout
        self._on_disconnect = on_disconnect
        self._finish_timeout = finish_timeout
        self._on_abandoned = on_abandoned
        self._done = False
        # Waiters on completion: the consumer's tick sleep (woken once by the backend's
        # completion) and, only under the finish policy, an Event created on demand.
        self._tick: TickWait | None = None
        self._done_event: anyio.Event | None = None
        self._backend_task: Cancellable | None = None
        self._cancelled_by: Exception | None = None  # why the backend task was cancelled
        self._deadline = float("inf")  # the backend call's, on the anyio clock
        self._result: Any = None
        self._error: Exception | None = None
        self._task_group = task_group
        self._own_task_group: anyio.abc.TaskGroup | None = None  # opened on entry
        self._pending: list[bytes] = []  # reversed: the next frame is at the end
        # Until entry: when the client began waiting (inf: not known, so on entry).
        self._next_tick = math.inf if waiting_since is None else waiting_since
        self._keepalives = 0
        self._keepalive_frames = 0
        self._committed = False
        self._finished = False
        self._entered = False

    # -- observable state -------------------------------------------------------------------
    @property
    def committed(self) -> bool:
        """Whether a frame has been handed out (an HTTP layer has sent its headers)."""
        return self._committed

    @property
    def exhausted(self) -> bool:
        """Whether the last frame has been handed out (by ``__anext__`` or :meth:`drain_ready`):
        the next ``__anext__`` ends the iteration. A writer can end its response with that
        write instead of one more, empty, write."""
        return self._finished and not self._pending

    @property
    def keepalives_sent(self) -> int:
        """Keepalive ticks that produced frames."""
        return self._keepalives

    @property
    def keepalive_frames_sent(self) -> int:
        """Frames those ticks produced (a first tick may open the stream with two events)."""
        return self._keepalive_frames

    @property
    def response_id(self) -> str | None:
        """The id the stream's events carry (a Responses or Messages id; None for chat)."""
        return self._out.response_id

    # -- context management -----------------------------------------------------------------
    async def __aenter__(self) -> SynthesizedStream:
        if self._entered:
            raise RuntimeError("a SynthesizedStream can only be entered once")
        self._entered = True
        start_call: StartCall | None = getattr(self._backend, "start_call", None)
        task_group = self._task_group
        if task_group is None and start_call is None:
            own = self._own_task_group = anyio.create_task_group()
            await own.__aenter__()
            task_group = self._task_group = own
        self._tick = new_tick_wait()
        now = self._tick.now()
        # A first tick already due comes at once (one tick, however many intervals the
        # client queued), and the ticks after it keep their phase: a whole number of
        # intervals after ``waiting_since``, so streams that arrived together tick together
        # (one wake-up of the loop for all of them) whenever each was entered.
        self._next_tick = min(self._next_tick, now) + self._interval
        if self._timeout is not None:
            self._deadline = now + self._timeout
        if start_call is not None:
            self._backend_task = start_call(self._call_ended)
        else:
            assert task_group is not None
            self._backend_task = task_group.start_soon(self._run_backend, name=_BACKEND_TASK_NAME)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        assert self._backend_task is not None
        if not self._done:
            if self._on_disconnect == "finish":
                give_up = min(anyio.current_time() + self._finish_timeout, self._deadline)
                with anyio.move_on_after(give_up - anyio.current_time(), shield=True):
                    await self._wait_done()
                if not self._backend_done() and give_up >= self._deadline:
                    # The backend's own deadline came first: it ends as a timeout.
                    self._cancel_backend(self._timeout_error())
                    with anyio.CancelScope(shield=True):
                        await self._wait_done()
                if self._backend_done():
                    self._report_abandoned()
            if self._own_task_group is None:
                self._backend_task.cancel()
                with anyio.CancelScope(shield=True):
                    await self._wait_done()  # nothing outlives the context
                return None
            self._own_task_group.cancel_scope.cancel()
        if self._own_task_group is None:
            return None
        try:
            return await self._own_task_group.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            raise_collapsed(group)

    async def _wait_done(self) -> None:
        if self._done_event is None:
            self._done_event = anyio.Event()
        if not self._done:
            await self._done_event.wait()

    def _backend_done(self) -> bool:
        # A method, not the attribute, so type checkers do not assume it cannot change
        # across an await.
        return self._done

    def _report_abandoned(self) -> None:
        if self._on_abandoned is not None:
            self._on_abandoned(StreamOutcome(self._result, self._error))

    async def _run_backend(self) -> None:
        # No cancel scope of its own: abort() and the deadline cancel the task's handle and
        # say why in ``_cancelled_by`` first; leaving the context cancels the task group.
        returned = False
        try:
            result = self._backend()
            self._result = await result if inspect.isawaitable(result) else result
            returned = True
        except Exception as exc:  # any backend failure becomes the outcome
            self._error = exc
        finally:
            if not returned and self._error is None:
                # Cancelled from outside (a shared task group shutting down): a failure, so
                # the consumer never synthesizes from a result that does not exist.
                self._error = StreamAborted("the backend call was cancelled")
            self._finish()

    def _call_ended(self, result: Any, error: BaseException | None) -> None:
        """The outcome of a call started with ``start_call`` (see :data:`StartCall`)."""
        if self._done:
            return
        if error is None:
            self._result = result
        else:
            self._error = (
                error
                if isinstance(error, Exception)
                else StreamAborted("the backend call was cancelled")
            )
        self._finish()

    def _finish(self) -> None:
        if self._cancelled_by is not None:
            self._error = self._cancelled_by
        self._done = True
        if self._tick is not None:
            self._tick.wake()
        if self._done_event is not None:
            self._done_event.set()

    def _cancel_backend(self, reason: Exception) -> bool:
        if self._done or self._backend_task is None:
            return False
        self._cancelled_by = reason
        self._backend_task.cancel()
        return True

    def _timeout_error(self) -> TimeoutError:
        return TimeoutError(f"no result within {self._timeout:g} s")

    def abort(self, message: str = "server shutting down") -> bool:
        """End the stream on purpose: cancel the backend call and finish with a failure.

        Before commit the consumer gets :class:`BackendError` (503); after commit the
        dialect's terminal failure frames carrying ``message``. Returns False (and does
        nothing) when the backend already finished: that stream ends normally.
        """
        return self._cancel_backend(StreamAborted(message))

    # -- iteration ----------------------------------------------------------------------------
    def __aiter__(self) -> SynthesizedStream:
        return self

    async def __anext__(self) -> bytes:
        if self._backend_task is None:
            raise RuntimeError("iterate a SynthesizedStream inside 'async with'")
        if self._pending:
            await anyio.lowlevel.checkpoint()
            return self._take()
        if self._finished:
            raise StopAsyncIteration
        tick = self._tick
        assert tick is not None
        while not self._done:
            # Sleep until the next tick; the backend's completion ends this sleep early, once.
            # The deadline is one more wake-up time of this sleep (not a scope in the backend
            # task); which of the two was asked for decides, not a clock reading.
            deadline_first = self._deadline <= self._next_tick
            await tick.until(self._deadline if deadline_first else self._next_tick)
            if self._backend_done():
                break
            if deadline_first:
                # The cancelled backend ends the wait with a timeout error.
                self._deadline = float("inf")
                self._cancel_backend(self._timeout_error())
                continue
            now = tick.now()
            self._next_tick = _next_on_phase(self._next_tick, self._interval, now)
            frames = self._out.keepalive_frames(now)
            if frames:
                self._keepalives += 1
                self._keepalive_frames += len(frames)
                return self._take(frames)
        self._finished = True
        return self._take(self._final_frames())

    def drain_ready(self) -> list[bytes]:
        """The frames already synthesized behind the one ``__anext__`` just returned, in order.

        For writers that send several frames in one write (one ASGI message instead of one per
        event). Nothing is computed or awaited: these frames exist already (the rest of a
        keepalive tick, or of the complete result), so backpressure is unchanged.
        """
        ready = self._pending[::-1]
        self._pending = []
        return ready

    def _take(self, frames: list[bytes] | None = None) -> bytes:
        if frames is not None:
            frames.reverse()
            self._pending = frames
        self._committed = True
        return self._pending.pop()

    def _final_frames(self) -> list[bytes]:
        if self._error is None:
            try:
                return self._out.result_frames(self._result)
            except InvalidResultError as exc:
                self._error = exc
        failure = self._classify(self._error)
        if not self._committed:
            response = self._out.error_response(failure)
            raise BackendError(
                response.status_code, response.body, headers=response.headers
            ) from self._error
        return self._out.failure_frames(failure)

    @staticmethod
    def _classify(error: Exception) -> Failure:
        if isinstance(error, InvalidResultError):
            return Failure(502, "server_error", f"the backend returned an invalid result: {error}")
        return log_internal(classify_failure(error), error)
