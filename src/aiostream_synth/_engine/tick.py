"""The keepalive timer: sleep until the next tick, unless the backend's completion wakes us first.

A waiting stream spends its whole life here, so this is the engine's memory and CPU hot spot:
each event loop gets its cheapest native wait from its runtime
(:mod:`aiostream_synth._engine.runtime`): on asyncio a future resolved by the loop's ticker,
on trio a trio cancel scope. Either way an outer cancellation reaches the sleeper as usual, and
a wake with nobody waiting does nothing. The deadline is on anyio's clock, which is the loop's
own clock on both.
"""

from __future__ import annotations

from collections.abc import Awaitable

from aiostream_synth._engine.runtime import TickWait, current_runtime

__all__ = ["TickWait", "new_tick_wait", "now", "sleep"]


def new_tick_wait() -> TickWait:
    """One stream's tick sleep, made inside the event loop that will wait on it."""
    return current_runtime().tick_wait()


def now() -> float:
    """The current time on anyio's clock (the running loop's own), without
    ``anyio.current_time()``'s lookups."""
    return current_runtime().now()


def sleep(seconds: float) -> Awaitable[None]:
    """Await the result to sleep ``seconds`` (never less) on the loop's own tick wait: on
    asyncio a place in a ticker group instead of a loop timer and coroutine layers of its own."""
    wait = current_runtime().tick_wait()
    return wait.until(wait.now() + max(seconds, 0.0))
