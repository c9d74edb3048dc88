"""The keepalive timer's asyncio ticker: deadlines grouped by its resolution, never early."""

from __future__ import annotations

import asyncio
import gc
import math
import weakref
from typing import Any

import anyio
import pytest

from aiostream_synth._engine.runtime import current_runtime
from aiostream_synth._engine.runtime._asyncio import AsyncioRuntime, Ticker
from aiostream_synth._engine.tick import new_tick_wait, sleep

pytestmark = pytest.mark.anyio


class _RecordingLoop:
    """Only what a Ticker uses of its loop: ``call_at``, recorded instead of armed, and
    ``time()``, set by the test. :meth:`fire` runs a recorded timer at its time."""

    def __init__(self) -> None:
        self.timers: list[tuple[float, Any, tuple[Any, ...]]] = []
        self.now = 0.0

    def call_at(self, when: float, callback: Any, *args: Any) -> None:
        self.timers.append((when, callback, args))

    def time(self) -> float:
        return self.now

    def fire(self, index: int, late: float = 0.0) -> None:
        when, callback, args = self.timers[index]
        self.now = when + late
        callback(*args)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the ticker is asyncio's; trio sleeps in a cancel scope (test_engine)


def _ticker() -> tuple[Ticker, _RecordingLoop]:
    fake = _RecordingLoop()
    return Ticker(fake), fake  # type: ignore[arg-type]


R = Ticker.RESOLUTION
SLOT = 2000  # deadlines in these tests lie just after SLOT * R (10 s with a 5 ms resolution)


def _at(slots: float) -> float:
    """The time ``slots`` resolutions after the tests' base slot."""
    return (SLOT + slots) * R


def _times(fake: _RecordingLoop) -> list[float]:
    return [round(when / R - SLOT, 6) for when, _, _ in fake.timers]  # in slots after the base


async def test_a_second_of_spread_phases_wakes_the_loop_a_few_hundred_times_at_most() -> None:
    """Streams arriving at any time tick at phases spread over the second, and every group is
    a loop wake-up: at 1,000 streams, groups of 1 ms cost twice the CPU per keepalive of groups
    of 5 ms (benchmarks/README.md). Up to 5 ms late is nothing to a keepalive."""
    loop = asyncio.get_running_loop()
    ticker, fake = _ticker()
    waiters = [loop.create_future() for _ in range(1000)]
    for k, waiter in enumerate(waiters):
        ticker.add(_at(0.5) + k / 1000, waiter)  # one phase per millisecond
    fired = 0
    while fired < len(fake.timers):
        fake.fire(fired)
        fired += 1
    assert all(waiter.done() for waiter in waiters)
    assert fired <= 201


async def test_deadlines_in_one_slot_share_one_group_under_one_loop_timer() -> None:
    loop = asyncio.get_running_loop()
    ticker, fake = _ticker()
    first, second, later, gone = (loop.create_future() for _ in range(4))
    ticker.add(_at(0.4), first)
    ticker.add(_at(0.1), second)
    ticker.add(_at(1.1), later)
    ticker.add(_at(0.2), gone)
    ticker.add(math.inf, loop.create_future())  # no deadline: no timer, only a wake ends it
    assert _times(fake) == [1]  # the earliest group's
    assert ticker.pending == 4
    gone.cancel()  # a wait cancelled from outside stays in its group: skipped when due
    first.set_result(None)  # woken early: skipped too
    fake.fire(0)
    assert second.done()
    assert not later.done()
    assert ticker.pending == 1
    assert _times(fake) == [1, 2]  # set again
    fake.fire(1)
    assert later.done()
    assert ticker.pending == 0
    assert len(fake.timers) == 2  # nothing left: no timer


async def test_a_wait_is_never_resolved_before_its_deadline() -> None:
    loop = asyncio.get_running_loop()
    ticker, fake = _ticker()
    deadlines = [k * 0.00037 + 5.0 for k in range(200)]
    resolved_at: dict[float, float] = {}
    waiters = []  # the ticker holds them weakly: their tasks would keep them alive

    def stamp(deadline: float) -> Any:
        return lambda _: resolved_at.setdefault(deadline, fake.now)

    for deadline in deadlines:
        waiter: asyncio.Future[None] = loop.create_future()
        waiter.add_done_callback(stamp(deadline))
        ticker.add(deadline, waiter)
        waiters.append(waiter)
    fired = 0
    while fired < len(fake.timers):
        fake.fire(fired)
        fired += 1
        await asyncio.sleep(0)  # done callbacks run on the loop
    assert sorted(resolved_at) == deadlines
    for deadline, at in resolved_at.items():
        assert deadline - 1e-9 <= at < deadline + Ticker.RESOLUTION + 1e-9


async def test_an_earlier_group_takes_the_timer_and_the_superseded_one_does_nothing() -> None:
    loop = asyncio.get_running_loop()
    ticker, fake = _ticker()
    late, early = loop.create_future(), loop.create_future()
    ticker.add(20.0, late)
    ticker.add(10.0, early)
    assert [when for when, _, _ in fake.timers] == [20.0, 10.0]
    fake.fire(0)  # the superseded timer (its time set on the fake clock): stale, does nothing
    assert not late.done()
    assert not early.done()
    fake.fire(1)
    assert early.done()
    assert not late.done()
    fake.fire(2)  # set again for the later group
    assert late.done()


async def test_a_late_timer_resolves_every_group_already_due_at_once() -> None:
    """A busy loop runs its timer late: every group due by then goes in that one call, not one
    group per loop iteration; a group not yet due waits for the next timer."""
    loop = asyncio.get_running_loop()
    ticker, fake = _ticker()
    waiters = [loop.create_future() for _ in range(3)]
    for deadline, waiter in zip((_at(0.5), _at(1.5), _at(4.5)), waiters, strict=True):
        ticker.add(deadline, waiter)
    fake.fire(0, late=2.5 * R)  # at slot 3.5: the groups of slots 1 and 2 are due
    assert [w.done() for w in waiters] == [True, True, False]
    assert _times(fake)[-1] == 5


async def test_one_runtime_and_ticker_per_loop() -> None:
    runtime = current_runtime()
    assert isinstance(runtime, AsyncioRuntime)
    assert runtime is current_runtime()
    assert runtime.loop is asyncio.get_running_loop()
    assert runtime.ticker is runtime.ticker


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_real_wait_ends_at_its_deadline_or_at_a_wake() -> None:
    tick = new_tick_wait()
    deadline = anyio.current_time() + 0.02
    await tick.until(deadline)
    assert tick.now() >= deadline - 1e-6  # asyncio may run a timer a clock resolution early
    woken = new_tick_wait()
    woken.wake()  # nothing waiting: no effect

    async def wait_an_hour() -> None:
        await woken.until(anyio.current_time() + 3600)

    with anyio.fail_after(60):
        async with anyio.create_task_group() as group:
            group.start_soon(wait_an_hour)
            await anyio.wait_all_tasks_blocked()
            woken.wake()  # a wake ends the wait at once


def test_a_loop_closed_with_ticks_pending_is_not_kept_alive() -> None:
    """A stream that ended long before its next tick leaves its place in a group; the loop
    that held it can still go (the table of runtimes holds loops weakly, runtimes and tickers
    their loop and tickers their waiters weakly)."""
    loop = asyncio.new_event_loop()

    async def leave_a_tick_pending() -> int:
        tick = new_tick_wait()
        waiting = tick.until(tick.now() + 3600)
        tick.wake()
        await waiting
        runtime = current_runtime()
        assert isinstance(runtime, AsyncioRuntime)
        return runtime.ticker.pending

    assert loop.run_until_complete(leave_a_tick_pending()) == 1
    loop.close()
    gone = weakref.ref(loop)
    del loop
    gc.collect()
    assert gone() is None


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_sleep_is_never_early_and_a_negative_one_is_a_checkpoint() -> None:
    start = anyio.current_time()
    await sleep(0.02)
    # The sleeper's own arithmetic (a deadline of start + 0.02): the difference of two clock
    # readings may round below 0.02 when the wake lands exactly on the deadline.
    assert anyio.current_time() >= start + 0.02
    with anyio.fail_after(5):
        await sleep(-1)
