"""asyncio's eager task start (Python 3.12), re-created for Python 3.11.

From 3.12, ``asyncio.Task(coro, eager_start=True)`` runs a new task's first step inside its
caller's, up to its first suspension, as that task (it is the current task, its context the
task's). A backend call started so begins when its stream does; started the ordinary way, it
begins in the next loop iteration, after everything else the loop had queued, which in a burst
of thousands of requests is hundreds of other requests' work (see
:mod:`aiostream_synth._engine.tasks`).

3.11 has no such start. :func:`start_eagerly` gets the same from the outside: it makes the task
around a :class:`_Handover` of the coroutine, then takes the coroutine's first step at once,
with the new task as the loop's current task and in the context the task will run in, and keeps
what the step left (the future it now waits on, or its outcome). The task's own first step, in
the next loop iteration, only takes that over; every later step is the coroutine's own.

What differs from 3.12: until its first step the task is not done even if its coroutine has
ended, so ``cancel()`` is accepted then, and the task keeps the coroutine's outcome all the
same (as a coroutine that ends just as it is cancelled does); a ``KeyboardInterrupt`` in the
first step surfaces from the loop in the next iteration, not from :func:`start_eagerly`.

The task must be given its context (``create_task(context=...)``, new in 3.11), or a context
variable set in the first step (a tracing span, say) would be missing from the later ones: a
task on a third-party loop whose ``create_task`` takes no context starts the ordinary way.
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Coroutine, Generator
from typing import Any

__all__ = ["start_eagerly"]

_YIELDED, _RETURNED, _RAISED = 0, 1, 2


class _Handover(Coroutine[Any, Any, Any]):
    """The task's coroutine: its first step hands over what the eager step left, every later
    one is the wrapped coroutine's. It looks like the coroutine to introspection (``cr_*``, by
    which anyio asks whether a task has started; ``__name__``, a task's repr)."""

    __slots__ = ("_coro", "_first")

    def __init__(self, coro: Coroutine[Any, Any, Any]) -> None:
        self._coro = coro
        self._first: tuple[int, Any] | None = None

    def take_first_step(self) -> None:
        """The eager step: run the coroutine to its first suspension and keep what it left."""
        try:
            self._first = (_YIELDED, self._coro.send(None))
        except StopIteration as stop:
            self._first = (_RETURNED, stop.value)
        except BaseException as exc:  # the task's to report, as if raised in its own step
            self._first = (_RAISED, exc)

    def send(self, value: Any) -> Any:
        first = self._first
        if first is None:
            return self._coro.send(value)
        self._first = None
        kind, left = first
        if kind == _YIELDED:
            return left
        if kind == _RETURNED:
            raise StopIteration(left)
        raise left

    def throw(self, typ: Any, val: Any = None, tb: Any = None) -> Any:
        first, self._first = self._first, None
        if first is not None:
            kind, left = first
            if kind == _RETURNED:  # ended already: its outcome stands
                raise StopIteration(left)
            if kind == _RAISED:
                raise left
            # Cancelled before its first step: what it waits on is let go, as a task's
            # cancel() lets go of the future it waits on.
            if isinstance(left, asyncio.Future):
                left.cancel()
        if val is None and tb is None:
            return self._coro.throw(typ)
        return self._coro.throw(typ, val, tb)  # pragma: no cover - asyncio throws one argument

    def close(self) -> None:
        self._first = None
        self._coro.close()

    def __await__(self) -> Generator[Any, None, Any]:  # pragma: no cover - tasks call send
        return self._coro.__await__()

    @property
    def __name__(self) -> str:  # what a task's repr names its coroutine by
        return str(getattr(self._coro, "__name__", type(self._coro).__name__))

    @property
    def cr_frame(self) -> Any:
        return getattr(self._coro, "cr_frame", None)

    @property
    def cr_running(self) -> bool:
        return bool(getattr(self._coro, "cr_running", False))

    @property
    def cr_suspended(self) -> bool:
        return bool(getattr(self._coro, "cr_suspended", False))

    @property
    def cr_await(self) -> Any:
        return getattr(self._coro, "cr_await", None)

    @property
    def cr_code(self) -> Any:
        return getattr(self._coro, "cr_code", None)


def start_eagerly(
    loop: asyncio.AbstractEventLoop, coro: Coroutine[Any, Any, Any], name: str | None
) -> asyncio.Task[Any]:
    """Start ``coro`` as a task on ``loop`` and take its first step now (Python 3.11 only;
    see the module docstring)."""
    from asyncio.tasks import _enter_task, _leave_task

    context = contextvars.copy_context()
    handover = _Handover(coro)
    task: asyncio.Task[Any]
    try:
        task = loop.create_task(handover, name=name, context=context)
    except TypeError:  # a third-party loop that takes no context: an ordinary start, then
        return loop.create_task(coro, name=name)
    caller = asyncio.current_task(loop)
    if caller is not None:
        _leave_task(loop, caller)
    _enter_task(loop, task)
    try:
        context.run(handover.take_first_step)
    finally:
        _leave_task(loop, task)
        if caller is not None:
            _enter_task(loop, caller)
    return task
