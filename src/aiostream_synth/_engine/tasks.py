"""Where long-lived backend tasks run: one task group per server, cheap per task on asyncio.

A server holding thousands of waiting streams starts two tasks per stream (its backend call,
and the shared call a retry may attach to). anyio's task group costs a task handle, its
finished-event and a wrapper coroutine per task started; on asyncio, :class:`BackgroundTasks`
starts them straight on the loop instead (a quarter of the CPU; the figures: benchmarks/COSTS.md) and keeps them
in a set, so that leaving it still waits for every one, cancelling them first when its body
failed (or after :meth:`~BackgroundTasks.cancel_all`) — the task group's guarantee, without its
per-task cost. On trio it *is* an anyio task group.

A task started here on asyncio runs its first step at once, inside the caller's step, up to
its first suspension (asyncio's eager start from 3.12, re-created for 3.11 in
:mod:`aiostream_synth._engine.eager`), unless the loop has a task factory of its own. For a
backend call that means its request (or its timer) starts when the stream does, not after
everything else the loop had queued: a burst of 5,000 requests arriving together is handled in
a few loop iterations of hundreds of requests each, and a call started in the next iteration
began up to 0.2 s after its stream (every answer as late, end to end; measured in
``benchmarks/bench_load.py``). Whatever starts a task here must therefore be ready to be called
back (the task's outcome, or its failure) before ``start_soon`` returns.

Tasks started here must not raise: each catches its own failures and hands them to whoever
waits on it (as the engine's backend task and the coalescer's shared calls do); one that raises
anyway is logged, never lost.
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Callable
from types import TracebackType
from typing import Any, NoReturn, Protocol

import anyio
import anyio.abc

from aiostream_synth._engine.eager import start_eagerly
from aiostream_synth._engine.loops import running_asyncio_loop

__all__ = ["BackgroundTasks", "Cancellable", "TaskStarter", "raise_collapsed"]

LOG = logging.getLogger("aiostream_synth.engine")


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


class TaskStarter(Protocol):
    """Something tasks are started in: an anyio task group, or :class:`BackgroundTasks`
    (``start_soon`` returns a :class:`Cancellable`; typed loosely so that anyio's own
    signature matches)."""

    def start_soon(self, func: Any, *args: Any, name: Any = None) -> Any: ...


class BackgroundTasks:
    """An async context manager starting tasks that it cancels (:meth:`cancel_all`) and waits
    for on exit (see the module docstring)."""

    def __init__(self) -> None:
        self._loop: asyncio.AbstractEventLoop | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._group: anyio.abc.TaskGroup | None = None

    async def __aenter__(self) -> BackgroundTasks:
        self._loop = running_asyncio_loop()
        if self._loop is None:
            self._group = anyio.create_task_group()
            await self._group.__aenter__()
        return self

    def start_soon(self, func: Callable[..., Any], *args: Any, name: object = None) -> Cancellable:
        """Start ``func(*args)`` as a task; on asyncio its first step has run when this
        returns (see the module docstring)."""
        if self._group is not None:
            return self._group.start_soon(func, *args, name=name)
        if self._loop is None:
            raise RuntimeError("BackgroundTasks is not entered")
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
        """Cancel every task still running."""
        if self._group is not None:
            self._group.cancel_scope.cancel()
        for task in list(self._tasks):
            task.cancel()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        if self._group is not None:
            try:
                return await self._group.__aexit__(exc_type, exc, tb)
            except BaseExceptionGroup as group:
                raise_collapsed(group)
        if exc_type is not None:
            self.cancel_all()  # as a task group does when its body fails: nothing waits forever
        while self._tasks:  # nothing outlives the context
            with anyio.CancelScope(shield=True):
                await asyncio.wait(list(self._tasks))
        return None
