"""Where long-lived backend tasks run: one task home per server, cheap per task on asyncio.

A server holding thousands of waiting streams starts two tasks per stream (its backend call,
and the shared call a retry may attach to). anyio's task group costs a task handle, its
finished-event and a wrapper coroutine per task started; :class:`BackgroundTasks` takes the
running loop's own task set instead (:meth:`~aiostream_synth._engine.runtime.Runtime.task_set`:
tasks straight on the loop on asyncio, a quarter of the CPU, benchmarks/COSTS.md; an anyio task
group on trio), with a task group's guarantee: leaving it waits for every task, cancelling them
first when its body failed (or after :meth:`~BackgroundTasks.cancel_all`).

A task started here on asyncio runs its first step at once, inside the caller's step, up to
its first suspension (asyncio's eager start from 3.12, re-created for 3.11 in
:mod:`aiostream_synth._engine.runtime._eager311`), unless the loop has a task factory of its
own. For a backend call that means its request (or its timer) starts when the stream does, not
after everything else the loop had queued: a burst of 5,000 requests arriving together is
handled in a few loop iterations of hundreds of requests each, and a call started in the next
iteration began up to 0.2 s after its stream (every answer as late, end to end; measured in
``benchmarks/bench_load.py``). Whatever starts a task here must therefore be ready to be called
back (the task's outcome, or its failure) before ``start_soon`` returns.

Tasks started here must not raise: each catches its own failures and hands them to whoever
waits on it (as the engine's backend task and the coalescer's shared calls do); one that raises
anyway is logged, never lost.
"""

from __future__ import annotations

from collections.abc import Callable
from types import TracebackType
from typing import Any, Protocol

from aiostream_synth._engine.runtime import Cancellable, TaskSet, current_runtime, raise_collapsed

__all__ = ["BackgroundTasks", "Cancellable", "TaskStarter", "raise_collapsed"]


class TaskStarter(Protocol):
    """Something tasks are started in: an anyio task group, or :class:`BackgroundTasks`
    (``start_soon`` returns a :class:`Cancellable`; typed loosely so that anyio's own
    signature matches)."""

    def start_soon(self, func: Any, *args: Any, name: Any = None) -> Any: ...


class BackgroundTasks:
    """An async context manager starting tasks that it cancels (:meth:`cancel_all`) and waits
    for on exit, in the running loop's task set (see the module docstring)."""

    __slots__ = ("_set",)

    def __init__(self) -> None:
        self._set: TaskSet | None = None

    async def __aenter__(self) -> BackgroundTasks:
        self._set = current_runtime().task_set()
        await self._set.__aenter__()
        return self

    def start_soon(self, func: Callable[..., Any], *args: Any, name: object = None) -> Cancellable:
        """Start ``func(*args)`` as a task; on asyncio its first step has run when this
        returns (see the module docstring)."""
        if self._set is None:
            raise RuntimeError("BackgroundTasks is not entered")
        return self._set.start_soon(func, *args, name=name)

    def cancel_all(self) -> None:
        """Cancel every task still running."""
        if self._set is not None:
            self._set.cancel_all()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        if self._set is None:  # pragma: no cover - left without being entered
            return None
        return await self._set.__aexit__(exc_type, exc, tb)
