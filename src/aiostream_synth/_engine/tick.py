"""The keepalive timer: sleep until the next tick, unless the backend's completion wakes us first.

A waiting stream spends its whole life here, so this is the engine's memory and CPU hot spot,
and each event loop gets its cheapest native wait instead of anyio's portable layers:

* asyncio: one future, resolved by :meth:`TickWait.wake` or by the loop's :class:`Ticker`;
  no cancel scope and no coroutine layers per tick (anyio's scope and ``sleep`` wrappers cost
  memory per waiting stream and CPU per tick). The ticker groups the deadlines of every stream
  on the loop in slots of 5 ms under one loop timer, set for the earliest group: a place in a
  group costs far less than arming a loop timer, and each group is one wake-up of the loop (see
  :class:`Ticker`);
* trio: ``trio.sleep_forever()`` inside a ``trio.CancelScope`` whose deadline is the tick and
  which :meth:`TickWait.wake` cancels (less CPU per tick than an anyio scope around
  ``anyio.sleep_until``).

The figures behind each choice are in benchmarks/COSTS.md.

Either way an outer cancellation reaches the sleeper as usual, and a wake with nobody waiting
does nothing. The deadline is on anyio's clock, which is the loop's own clock on both.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import weakref
from collections.abc import Awaitable
from typing import TYPE_CHECKING

from aiostream_synth._engine.loops import running_asyncio_loop

if TYPE_CHECKING:
    import trio

__all__ = ["TickWait", "Ticker", "now", "sleep", "ticker_for"]


def _resolve(waiter: asyncio.Future[None]) -> None:
    if not waiter.done():
        waiter.set_result(None)


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
    is not kept alive by the table of tickers."""

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


_tickers: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Ticker] = weakref.WeakKeyDictionary()


def ticker_for(loop: asyncio.AbstractEventLoop) -> Ticker:
    """The loop's ticker (made on first use; it goes with the loop)."""
    ticker = _tickers.get(loop)
    if ticker is None:
        ticker = _tickers[loop] = Ticker(loop)
    return ticker


class TickWait:
    """One stream's tick sleep; create it inside the event loop that will wait on it."""

    __slots__ = ("_loop", "_scope", "_ticker", "_waiter")

    def __init__(self) -> None:
        self._loop = loop = running_asyncio_loop()
        self._ticker = None if loop is None else ticker_for(loop)
        self._waiter: asyncio.Future[None] | None = None
        self._scope: trio.CancelScope | None = None

    def until(self, deadline: float) -> Awaitable[None]:
        """Await the result to sleep until ``deadline`` (``anyio.current_time()`` clock) or
        until :meth:`wake`, whichever comes first."""
        loop, ticker = self._loop, self._ticker
        if loop is None or ticker is None:
            return self._trio_sleep(deadline)
        # The future itself is the awaitable: no coroutine frame per waiting stream. A wait
        # cancelled from outside stays in its ticker group until the group is due, a no-op.
        waiter = loop.create_future()
        ticker.add(deadline, waiter)  # anyio's clock is loop.time()
        self._waiter = waiter
        return waiter

    def now(self) -> float:
        """The time on the clock deadlines are on (anyio's, which is the loop's own), read
        straight from the loop (``anyio.current_time()`` costs lookups on every tick)."""
        loop = self._loop
        return loop.time() if loop is not None else _trio_now()

    async def _trio_sleep(self, deadline: float) -> None:
        import trio  # not asyncio, so trio: anyio runs on nothing else

        try:
            with trio.CancelScope(deadline=deadline) as scope:
                self._scope = scope
                await trio.sleep_forever()
        finally:
            self._scope = None

    def wake(self) -> None:
        """End the current wait early; no effect when nothing is waiting."""
        waiter = self._waiter
        if waiter is not None:
            self._waiter = None
            _resolve(waiter)
        elif self._scope is not None:
            self._scope.cancel()


def _trio_now() -> float:
    import trio  # not asyncio, so trio: anyio runs on nothing else

    return trio.current_time()


def now() -> float:
    """The current time on anyio's clock (the running loop's own), as :meth:`TickWait.now`
    reads it: without ``anyio.current_time()``'s lookups."""
    loop = running_asyncio_loop()
    return loop.time() if loop is not None else _trio_now()


def sleep(seconds: float) -> Awaitable[None]:
    """Await the result to sleep ``seconds`` (never less) on the loop's ticker: on asyncio a
    place in a ticker group instead of a loop timer and coroutine layers of its own."""
    wait = TickWait()
    return wait.until(wait.now() + max(seconds, 0.0))
