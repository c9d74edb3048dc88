"""The one place where asyncio and trio differ: each event loop's cheapest native way of doing
what a waiting stream does all its life.

The engine is written once, on anyio, against :class:`Runtime`; a stream asks
:func:`current_runtime` for the running loop's. anyio's portable primitives (cancel scopes,
task groups, ``sleep``) cost memory per waiting stream and CPU per tick, which thousands of
streams waiting minutes each multiply; so each runtime gives the engine its loop's own
(the figures behind each choice: benchmarks/COSTS.md):

* :mod:`._asyncio`: a future per tick resolved by one loop timer per group of deadlines
  (:class:`~._asyncio.Ticker`), tasks straight on the loop, started eagerly (3.12's
  ``eager_start``; on 3.11, :mod:`._eager311`), a loop timer for a shared call's linger;
* :mod:`._trio`: trio's own cancel scopes and anyio's task group and cancel scopes, which are
  thin there.

Anything a stream does that is not below is plain anyio, the same on both. A new loop (say
an anyio backend yet to come) is one more module here.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any, NoReturn, Protocol

try:
    import sniffio
except ImportError:  # pragma: no cover - sniffio comes with trio; anyio works without it
    sniffio = None  # type: ignore[assignment]

if TYPE_CHECKING:
    from aiostream_synth._engine.runtime._asyncio import AsyncioRuntime

__all__ = [
    "Cancellable",
    "Event",
    "Linger",
    "Lingered",
    "Runtime",
    "TaskSet",
    "TickWait",
    "current_runtime",
    "raise_collapsed",
    "running_asyncio_loop",
]


def raise_collapsed(group: BaseExceptionGroup[BaseException]) -> NoReturn:
    """Re-raise a task group's one-member exception group as that member (starlette's habit),
    its own cause intact, so callers see the same exception on asyncio and trio; a group of
    several is re-raised as it is. Used at every public boundary that owns a task group."""
    if len(group.exceptions) == 1:
        inner = group.exceptions[0]
        raise inner from inner.__cause__
    raise group


class Cancellable(Protocol):
    """A started task: what the engine needs of it."""

    def cancel(self) -> Any: ...


class TickWait(Protocol):
    """One stream's tick sleep (see :mod:`aiostream_synth._engine.tick`)."""

    def until(self, deadline: float) -> Awaitable[None]:
        """Await the result to sleep until ``deadline`` (the loop's clock, which is anyio's) or
        until :meth:`wake`, whichever comes first."""
        ...

    def wake(self) -> None:
        """End the current wait early; no effect when nothing is waiting."""
        ...

    def now(self) -> float:
        """The time on the clock deadlines are on."""
        ...


class TaskSet(Protocol):
    """An async context manager starting tasks that it cancels (:meth:`cancel_all`) and waits
    for on exit; a task group's guarantee (see :mod:`aiostream_synth._engine.tasks`)."""

    async def __aenter__(self) -> TaskSet: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None: ...

    def start_soon(self, func: Callable[..., Any], *args: Any, name: object = None) -> Cancellable:
        """Start ``func(*args)`` as a task."""
        ...

    def cancel_all(self) -> None:
        """Cancel every task still running."""
        ...


class Lingered(Exception):
    """The call a :class:`Linger` ran was cancelled because its linger ran out."""


class Linger(Protocol):
    """A call that may be cancelled some time after nobody waits for it any more (a shared
    backend call whose clients left, kept a moment for their retry)."""

    async def run(self, call: Callable[[], Awaitable[Any]]) -> Any:
        """``call()``'s result; :class:`Lingered` when the linger cancelled it (any other
        cancellation goes on as usual)."""
        ...

    def start(self, seconds: float) -> None:
        """Cancel the running call in ``seconds`` unless :meth:`hold` comes first."""
        ...

    def hold(self) -> None:
        """No linger (someone waits for the call again)."""
        ...


class Event(Protocol):
    def set(self) -> None: ...

    def is_set(self) -> bool: ...

    async def wait(self) -> Any: ...


class Runtime(Protocol):
    """What the engine needs of an event loop."""

    @property
    def loop(self) -> asyncio.AbstractEventLoop | None:
        """The asyncio loop, for a writer's own asyncio path; None on any other loop."""
        ...

    def now(self) -> float:
        """The current time on anyio's clock (the loop's own)."""
        ...

    def tick_wait(self) -> TickWait:
        """A stream's tick sleep, made inside the loop that will wait on it."""
        ...

    def task_set(self) -> TaskSet:
        """A home for long-lived tasks (entered inside the loop)."""
        ...

    def linger(self) -> Linger:
        """A linger for one call."""
        ...

    def event(self) -> Event:
        """An event, set once and awaited."""
        ...


def running_asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio loop when the current async library is asyncio (as anyio decides);
    None on trio or outside any loop.

    The loop is asked first (one C call), then only the two places where a library announces
    itself to sniffio (its thread-local and context variable): a third of the cost of
    sniffio's full lookup through ``asyncio.current_task()`` (benchmarks/COSTS.md)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    if sniffio is not None:
        named = sniffio.thread_local.name or sniffio.current_async_library_cvar.get()
        if named is not None and named != "asyncio":
            return None
    return loop


_by_loop: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, AsyncioRuntime] = (
    weakref.WeakKeyDictionary()
)
#: trio's runtime, once made (it holds nothing: one serves every trio run).
_trio_runtime: list[Runtime] = []


def current_runtime() -> Runtime:
    """The running loop's runtime: asyncio's (one per loop, made on first use; it goes with
    the loop), else trio's (anyio runs on nothing else)."""
    loop = running_asyncio_loop()
    if loop is not None:
        runtime = _by_loop.get(loop)
        if runtime is None:
            from aiostream_synth._engine.runtime._asyncio import AsyncioRuntime

            runtime = _by_loop[loop] = AsyncioRuntime(loop)
        return runtime
    if not _trio_runtime:
        from aiostream_synth._engine.runtime._trio import TrioRuntime

        _trio_runtime.append(TrioRuntime())
    return _trio_runtime[0]
