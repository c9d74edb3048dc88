"""The keepalive timer's asyncio ticker: deadlines grouped by the millisecond, never early."""

from __future__ import annotations

import asyncio
import gc
import math
import weakref
from typing import Any

import anyio
import pytest

from aiostream_synth._engine.tick import Ticker, TickWait, sleep, ticker_for

pytestmark = pytest.mark.anyio


class _RecordingLoop:
    """Only what a Ticker uses of its loop: ``call_at``, recorded instead of armed."""

    def __init__(self) -> None:
        self.timers: list[tuple[float, Any, tuple[Any, ...]]] = []

    def call_at(self, when: float, callback: Any, *args: Any) -> None:
        self.timers.append((when, callback, args))


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"  # the ticker is asyncio's; trio sleeps in a cancel scope (test_engine)


async def test_deadlines_in_one_millisecond_share_one_loop_timer() -> None:
    loop = asyncio.get_running_loop()
    fake = _RecordingLoop()
    ticker = Ticker(fake)  # type: ignore[arg-type]
    first, second, later, gone = (loop.create_future() for _ in range(4))
    ticker.add(10.0004, first)
    ticker.add(10.0001, second)
    ticker.add(10.0011, later)
    ticker.add(10.0002, gone)
    ticker.add(math.inf, loop.create_future())  # no deadline: no timer, only a wake ends it
    assert [round(when, 6) for when, _, _ in fake.timers] == [10.001, 10.002]
    assert ticker.pending == 4
    gone.cancel()  # a wait cancelled from outside stays in its group: skipped when due
    first.set_result(None)  # woken early: skipped too
    _when, callback, args = fake.timers[0]
    callback(*args)
    assert second.done()
    assert not later.done()
    assert ticker.pending == 1
    _when, callback, args = fake.timers[1]
    callback(*args)
    assert later.done()
    assert ticker.pending == 0


async def test_a_group_is_never_due_before_any_of_its_deadlines() -> None:
    fake = _RecordingLoop()
    ticker = Ticker(fake)  # type: ignore[arg-type]
    loop = asyncio.get_running_loop()
    deadlines = [k * 0.00037 + 5.0 for k in range(200)]
    for deadline in deadlines:
        ticker.add(deadline, loop.create_future())
    due = sorted(when for when, _, _ in fake.timers)
    for deadline in deadlines:
        # each deadline's group is the first one due at or after it, within a millisecond
        group = next(when for when in due if when >= deadline - 1e-9)
        assert group - deadline < Ticker.RESOLUTION + 1e-9


async def test_one_ticker_per_loop_and_a_real_wait_ends_at_its_deadline() -> None:
    loop = asyncio.get_running_loop()
    assert ticker_for(loop) is ticker_for(loop)
    tick = TickWait()
    deadline = anyio.current_time() + 0.02
    await tick.until(deadline)
    assert tick.now() >= deadline - 1e-6  # asyncio may run a timer a clock resolution early
    woken = TickWait()
    waiting = woken.until(anyio.current_time() + 3600)
    woken.wake()
    await waiting  # a wake ends the wait at once
    woken.wake()  # nothing waiting: no effect


def test_a_loop_closed_with_ticks_pending_is_not_kept_alive() -> None:
    """A stream that ended long before its next tick leaves its place in a group; the loop
    that held it can still go (the table of tickers holds loops weakly, tickers their loop
    and waiters weakly)."""
    loop = asyncio.new_event_loop()

    async def leave_a_tick_pending() -> int:
        tick = TickWait()
        waiting = tick.until(tick.now() + 3600)
        tick.wake()
        await waiting
        return ticker_for(asyncio.get_running_loop()).pending

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
    assert anyio.current_time() - start >= 0.02
    with anyio.fail_after(5):
        await sleep(-1)
