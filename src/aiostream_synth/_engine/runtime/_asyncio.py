"""asyncio's runtime: bare futures, loop timers and tasks straight on the loop.

* a tick is one future, resolved by :meth:`AsyncioTickWait.wake` or by the loop's
  :class:`Ticker`, which groups the deadlines of every stream on the loop in slots of 5 ms
  under one loop timer: a place in a group costs far less than arming a loop timer, and each
  group is one wake-up of the loop; no cancel scope and no coroutine layers per tick;
* tasks start straight on the loop (:class:`AsyncioTaskSet`), eagerly: their first step runs
  inside the caller's, up to its first suspension (asyncio's ``eager_start`` from 3.12,
  :mod:`._eager311` before), unless the loop has a task factory of its own. Only these tasks:
  a loop-wide ``eager_task_factory`` (every task of the server eager, its request tasks too)
  gained nothing measurable and cost first-byte latency in a burst (benchmarks/COSTS.md);
* a shared call's linger is a loop timer cancelling the call's task (:class:`TimerLinger`;
  an anyio cancel scope costs a task state per call here).
"""

from __future__ import annotations

import asyncio
import heapq
import logging
import math
import sys
import weakref
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

import anyio

from aiostream_synth._engine.runtime import Lingered
from aiostream_synth._engine.runtime._eager311 import start_eagerly

__all__ = ["AsyncioRuntime", "AsyncioTaskSet", "AsyncioTickWait", "Ticker", "TimerLinger"]

LOG = logging.getLogger("aiostream_synth.engine")


class Ticker:
    """Every tick deadline on one asyncio loop, grouped in slots of :attr:`RESOLUTION`, under one
    loop timer at a time: set for the earliest group, it resolves every group then due (never
    before their deadlines; a waiter already resolved or cancelled is skipped) and is set again
    for the next.

    One timer rather than one per group: a uvloop timer holds about 600 bytes, and thousands of
    streams opened in a burst form a group every slot or two. A timer superseded by an
    earlier group is not cancelled (that would keep a handle, and with it the loop): it finds
    itself stale when it fires and does nothing.

    It holds its loop and its waiters weakly: a waiter is kept alive by the task awaiting it,
    and a loop closed with groups still pending (a stream that ended long before its next tick)
    is not kept alive by its runtime."""

    __slots__ = ("_armed", "_groups", "_loop", "_slots")

    #: Deadlines are rounded up to a multiple of this (seconds). Each group is a wake-up of the
    #: loop, whose cost (the process sleeping and waking, the poll) is paid whether one stream
    #: or a hundred tick in it: with phases spread over the second (streams arriving at any
    #: time, not in one burst) groups of 5 ms cost about half the CPU per keepalive of groups
    #: of 1 ms (benchmarks/COSTS.md). 5 ms late is nothing to a
    #: keepalive, a deadline of minutes or the embedded model's delays.
    RESOLUTION = 0.005

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = weakref.ref(loop)
        self._groups: dict[int, list[weakref.ref[asyncio.Future[None]]]] = {}
        #: The groups' slots, as a heap: the earliest first.
        self._slots: list[int] = []
        #: The slot the loop timer is set for (None: no timer).
        self._armed: int | None = None

    def add(self, deadline: float, waiter: asyncio.Future[None]) -> None:
        """Resolve ``waiter`` at ``deadline`` (the loop's clock) or up to :attr:`RESOLUTION`
        after."""
        if deadline == math.inf:
            return  # no deadline: only a wake ends the wait
        slot = math.ceil(deadline / self.RESOLUTION)
        group = self._groups.get(slot)
        if group is None:
            group = self._groups[slot] = []
            heapq.heappush(self._slots, slot)
            if self._armed is None or slot < self._armed:
                self._arm(slot)
        group.append(weakref.ref(waiter))

    def _arm(self, slot: int) -> None:
        loop = self._loop()
        if loop is None:  # pragma: no cover - a waiter outliving its loop cannot be awaited
            return
        self._armed = slot
        loop.call_at(slot * self.RESOLUTION, self._fire, slot)

    def _fire(self, slot: int) -> None:
        if slot != self._armed:
            return  # superseded by an earlier group, whose timer has set the next one
        self._armed = None
        loop = self._loop()
        # The armed group, and every later one already due (a busy loop runs timers late):
        # all in this loop iteration, not one group per iteration.
        due = slot if loop is None else max(slot, math.floor(loop.time() / self.RESOLUTION))
        slots, groups = self._slots, self._groups
        while slots and slots[0] <= due:
            for ref in groups.pop(heapq.heappop(slots)):
                waiter = ref()
                if waiter is not None and not waiter.done():
                    waiter.set_result(None)
        if slots:
            self._arm(slots[0])

    @property
    def pending(self) -> int:
        """Waiters not yet due (for tests)."""
        return sum(len(group) for group in self._groups.values())


class AsyncioTickWait:
    """One stream's tick sleep: the future itself is the awaitable (no coroutine frame per
    waiting stream). A wait cancelled from outside stays in its ticker group until the group
    is due, a no-op."""

    __slots__ = ("_loop", "_ticker", "_waiter")

    def __init__(self, loop: asyncio.AbstractEventLoop, ticker: Ticker) -> None:
        self._loop = loop
        self._ticker = ticker
        self._waiter: asyncio.Future[None] | None = None

    def until(self, deadline: float) -> Awaitable[None]:
        waiter = self._waiter = self._loop.create_future()
        self._ticker.add(deadline, waiter)  # anyio's clock is loop.time()
        return waiter

    def now(self) -> float:
        # Straight from the loop: ``anyio.current_time()`` costs lookups on every tick.
        return self._loop.time()

    def wake(self) -> None:
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            if not waiter.done():
                waiter.set_result(None)


class AsyncioTaskSet:
    """Tasks straight on the loop, kept in a set so that leaving still waits for every one,
    cancelling them first when the body failed (or after :meth:`cancel_all`): a task group's
    guarantee without its per-task cost (a task handle, its finished-event and a wrapper
    coroutine each)."""

    __slots__ = ("_ended", "_loop", "_tasks")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._tasks: set[asyncio.Task[Any]] = set()
        self._ended = False  # left: a task started now would outlive it

    async def __aenter__(self) -> AsyncioTaskSet:
        return self

    def start_soon(
        self, func: Callable[..., Any], *args: Any, name: object = None
    ) -> asyncio.Task[Any]:
        """Start ``func(*args)``; its first step has run when this returns. Once the set
        was left, a :class:`RuntimeError` (as an anyio task group that is no longer active
        raises): nothing would wait for the task."""
        if self._ended:
            raise RuntimeError("this task set was left; no new tasks can be started")
        coro: Any = func(*args)
        loop, task_name = self._loop, None if name is None else str(name)
        task: asyncio.Task[Any]
        if loop.get_task_factory() is not None:
            task = loop.create_task(coro, name=task_name)
        elif sys.version_info >= (3, 12):
            task = asyncio.Task(coro, loop=loop, name=task_name, eager_start=True)
        else:
            task = start_eagerly(loop, coro, task_name)
        self._tasks.add(task)
        task.add_done_callback(self._finished)
        return task

    def _finished(self, task: asyncio.Task[Any]) -> None:
        self._tasks.discard(task)
        if not task.cancelled() and task.exception() is not None:
            LOG.error("background task %s failed", task.get_name(), exc_info=task.exception())

    def cancel_all(self) -> None:
        for task in list(self._tasks):
            task.cancel()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        if exc_type is not None:
            self.cancel_all()  # as a task group does when its body fails: nothing waits forever
        while self._tasks:  # nothing outlives the context
            with anyio.CancelScope(shield=True):
                await asyncio.wait(list(self._tasks))
        self._ended = True
        return None


class TimerLinger:
    """A loop timer that cancels the task running the call; that cancellation is taken back
    (``uncancel``) and becomes :class:`Lingered`. A linger started before the call's task took
    its first step (a loop with a task factory of its own starts tasks late) is armed when it
    does."""

    __slots__ = ("_deferred", "_loop", "_task", "_timer", "expired")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._task: asyncio.Task[Any] | None = None
        self._timer: asyncio.TimerHandle | None = None
        self._deferred: float | None = None
        #: The linger ran out and cancelled the call.
        self.expired = False

    async def run(self, call: Callable[[], Awaitable[Any]]) -> Any:
        task = self._task = asyncio.current_task()
        if self._deferred is not None:
            self.start(self._deferred)
        try:
            return await call()
        except asyncio.CancelledError:
            if not self.expired or task is None:
                raise  # from outside (the server shutting down)
            task.uncancel()  # ours, handled here: the task's count goes back down
            raise Lingered from None
        finally:
            self._task = None
            self.hold()

    def start(self, seconds: float) -> None:
        if self._task is None:
            self._deferred = seconds
        else:
            self._deferred = None
            self._timer = self._loop.call_later(seconds, self._expire)

    def hold(self) -> None:
        self._deferred = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def _expire(self) -> None:
        self._timer = None
        if self._task is not None:
            self.expired = True
            self._task.cancel()


class AsyncioRuntime:
    """One asyncio loop's runtime (see the module docstring). It holds its loop weakly: the
    table of runtimes must not keep a closed loop alive."""

    __slots__ = ("__weakref__", "_loop", "_ticker")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = weakref.ref(loop)
        self._ticker = Ticker(loop)

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        loop = self._loop()
        if loop is None:  # pragma: no cover - asked only from inside the running loop
            raise RuntimeError("the event loop is gone")
        return loop

    @property
    def ticker(self) -> Ticker:
        """The loop's ticker."""
        return self._ticker

    def now(self) -> float:
        return self.loop.time()

    def tick_wait(self) -> AsyncioTickWait:
        return AsyncioTickWait(self.loop, self._ticker)

    def task_set(self) -> AsyncioTaskSet:
        return AsyncioTaskSet(self.loop)

    def linger(self) -> TimerLinger:
        return TimerLinger(self.loop)

    def event(self) -> asyncio.Event:
        # asyncio's own: anyio's wraps it, one more coroutine frame per waiting client and a
        # library lookup per call.
        return asyncio.Event()
