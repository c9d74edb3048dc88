"""Graceful shutdown for streams: our own signal, independent of any server's global state.

:class:`ShutdownSignal` tracks the streams an application has open. ``await shutdown(drain)``
refuses new streams, lets open ones finish for up to ``drain`` seconds, then aborts the rest,
each ending with its dialect's terminal failure ("server shutting down") instead of being cut.
Other work the drain waits for (a backend call a client of another process waits on) is
*held* (:meth:`ShutdownSignal.hold`) until it is released.
It is plain anyio, so it works the same on asyncio and trio.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from types import TracebackType

import anyio

from aiostream_synth._engine.stream import SynthesizedStream

__all__ = ["ShutdownSignal"]


class ShutdownSignal:
    """Tracks open streams; ends them cleanly on shutdown."""

    def __init__(self) -> None:
        self._streams: set[SynthesizedStream] = set()
        #: Work other than this process's streams that the drain waits for.
        self._held: set[object] = set()
        self._closing = False
        self._drained: anyio.Event | None = None

    @property
    def closing(self) -> bool:
        """True once :meth:`shutdown` started: adapters refuse new streams (503)."""
        return self._closing

    @property
    def open_streams(self) -> int:
        return len(self._streams)

    def track(self, stream: SynthesizedStream) -> AbstractContextManager[None]:
        """Register ``stream`` for the duration of the ``with`` block (an adapter's request)."""
        return _Tracked(self, stream)

    def hold(self, work: object) -> None:
        """Let the drain wait for ``work`` too, until :meth:`release`."""
        self._held.add(work)

    def release(self, work: object) -> None:
        self._held.discard(work)
        self._maybe_drained()

    def _release(self, stream: SynthesizedStream) -> None:
        self._streams.discard(stream)
        self._maybe_drained()

    def _maybe_drained(self) -> None:
        if not self._streams and not self._held and self._drained is not None:
            self._drained.set()

    async def shutdown(
        self, drain_timeout: float = 30.0, message: str = "server shutting down"
    ) -> int:
        """Refuse new streams, wait up to ``drain_timeout`` s, abort what is left; return how many."""
        self._closing = True
        if self._streams or self._held:
            self._drained = anyio.Event()
            with anyio.move_on_after(drain_timeout):
                await self._drained.wait()
        return self.abort_all(message)

    def abort_all(self, message: str = "server shutting down") -> int:
        """End every open stream now, without waiting (a second signal): each gets its terminal
        failure event, or a 503 before commit; return how many were ended. New streams are
        refused from here on, as after :meth:`shutdown`."""
        self._closing = True
        return sum(stream.abort(message) for stream in list(self._streams))


class _Tracked:
    """:meth:`ShutdownSignal.track`'s block: one small object per request (a generator-based
    context manager is three, and a frame, held for the whole stream)."""

    __slots__ = ("_signal", "_stream")

    def __init__(self, signal: ShutdownSignal, stream: SynthesizedStream) -> None:
        self._signal = signal
        self._stream = stream

    def __enter__(self) -> None:
        self._signal._streams.add(self._stream)

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._signal._release(self._stream)
