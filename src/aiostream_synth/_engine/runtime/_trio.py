"""trio's runtime: a tick is ``trio.sleep_forever()`` in a ``trio.CancelScope`` whose deadline
is the tick (less CPU per tick than an anyio scope around ``anyio.sleep_until``); tasks live in
an anyio task group and a linger is an anyio cancel scope's deadline, both thin on trio."""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from types import TracebackType
from typing import Any

import anyio
import anyio.abc
import trio

from aiostream_synth._engine.runtime import Cancellable, Lingered, raise_collapsed

__all__ = ["ScopeLinger", "TrioRuntime", "TrioTaskSet", "TrioTickWait"]


class TrioTickWait:
    """One stream's tick sleep: a scope :meth:`wake` cancels."""

    __slots__ = ("_scope",)

    def __init__(self) -> None:
        self._scope: trio.CancelScope | None = None

    def until(self, deadline: float) -> Awaitable[None]:
        return self._sleep(deadline)

    async def _sleep(self, deadline: float) -> None:
        try:
            with trio.CancelScope(deadline=deadline) as scope:
                self._scope = scope
                await trio.sleep_forever()
        finally:
            self._scope = None

    def now(self) -> float:
        return trio.current_time()

    def wake(self) -> None:
        if self._scope is not None:
            self._scope.cancel()


class TrioTaskSet:
    """An anyio task group (its one-member exception groups collapsed, as at every public
    boundary that owns one)."""

    __slots__ = ("_group",)

    def __init__(self) -> None:
        self._group = anyio.create_task_group()

    async def __aenter__(self) -> TrioTaskSet:
        await self._group.__aenter__()
        return self

    def start_soon(self, func: Callable[..., Any], *args: Any, name: object = None) -> Cancellable:
        return self._group.start_soon(func, *args, name=name)

    def cancel_all(self) -> None:
        self._group.cancel_scope.cancel()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        try:
            return await self._group.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            raise_collapsed(group)


class ScopeLinger:
    """The call runs in a cancel scope whose deadline is the linger."""

    __slots__ = ("_scope",)

    def __init__(self) -> None:
        self._scope = anyio.CancelScope()

    async def run(self, call: Callable[[], Awaitable[Any]]) -> Any:
        with self._scope:
            return await call()
        raise Lingered  # the scope caught its own cancellation: the linger ran out

    def start(self, seconds: float) -> None:
        self._scope.deadline = anyio.current_time() + seconds

    def hold(self) -> None:
        self._scope.deadline = math.inf


class TrioRuntime:
    """trio's runtime (see the module docstring)."""

    __slots__ = ()

    @property
    def loop(self) -> None:
        return None

    def now(self) -> float:
        return trio.current_time()

    def tick_wait(self) -> TrioTickWait:
        return TrioTickWait()

    def task_set(self) -> TrioTaskSet:
        return TrioTaskSet()

    def linger(self) -> ScopeLinger:
        return ScopeLinger()

    def event(self) -> anyio.Event:
        return anyio.Event()
