"""The engine: keepalive while one backend call computes the complete result, then its stream.

:class:`SynthesizedStream` is an async context manager that owns exactly one task — the
backend call — in an anyio task group, so it runs on asyncio and trio. The keepalive timer is
not a second task: it lives in the consumer's own ``__anext__``, which waits for the backend's
completion event under a deadline set to the next keepalive tick. Consequences:

* backpressure is structural: a frame exists only when the consumer asks for one, so nothing
  is ever buffered for a slow or stalled reader (a reader that never reads gets zero frames);
* the backend's completion cancels the tick wait once, by setting the event;
* no ``yield`` happens inside a task group or cancel scope (decision P9, PEP 789): the task
  group is entered in ``__aenter__`` and left in ``__aexit__`` of the same task.

The contract (race, exits, policies) is drawn in ARCHITECTURE.md.
"""

from __future__ import annotations

import inspect
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Literal, TypeAlias

import anyio
import anyio.abc
import anyio.lowlevel

if sys.version_info < (3, 11):  # pragma: no cover - exercised on 3.10 only
    from exceptiongroup import BaseExceptionGroup  # type: ignore[import-not-found,unused-ignore]

from ._chat_synthesis import CHAT_KEEPALIVE_FRAME, chat_error_frame, chat_frames
from ._errors import BackendError, InvalidResultError, StreamAborted
from ._failures import Failure, classify_failure
from ._namespaces import NamespaceMap
from ._responses_synthesis import (
    Fidelity,
    ResponsesKeepalive,
    new_response_id,
    responses_failure_frames,
    responses_frames,
)

__all__ = [
    "Backend",
    "ChatDialect",
    "OnDisconnect",
    "ResponsesDialect",
    "StreamOutcome",
    "SynthesizedStream",
]

#: An async callable returning the complete result (a dict or a pydantic model).
Backend: TypeAlias = Callable[[], Awaitable[Any]]
OnDisconnect = Literal["cancel", "finish"]


@dataclass(frozen=True, slots=True, kw_only=True)
class ChatDialect:
    """Chat Completions output options."""

    include_usage: bool = False
    #: ``"comment"`` sends ``: keep-alive`` each tick; ``"none"`` sends nothing (and so never
    #: commits the stream before the result).
    keepalive: Literal["comment", "none"] = "comment"
    emit_reasoning_alias: bool = False
    include_logprobs: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ResponsesDialect:
    """Responses output options."""

    ns_map: NamespaceMap = field(default_factory=dict)
    fidelity: Fidelity = "full"
    #: ``"events"``: ``response.created`` / ``response.in_progress`` (what Codex needs: SSE
    #: comments never reset its idle timer); ``"comment"``: ``: keep-alive`` comments only,
    #: as a generic SSE proxy would send.
    keepalive: Literal["events", "comment"] = "events"
    #: The id every event carries; generated when None. The result's own id is replaced by it.
    response_id: str | None = None
    #: Skeleton fields for keepalive envelopes before the result exists (``model``, echoes...).
    base: Mapping[str, Any] | None = None
    delta_chars: int | None = None


@dataclass(frozen=True, slots=True)
class StreamOutcome:
    """What became of an abandoned stream's backend call (``finish`` policy callback)."""

    result: Any = None
    error: BaseException | None = None


class SynthesizedStream:
    """Keepalive ⟂ backend, consumed as an async iterator of ready-to-send SSE frames (bytes).

    ::

        async with SynthesizedStream(call_backend, ResponsesDialect(), keepalive_interval=10) as frames:
            async for frame in frames:
                await send(frame)

    * Lazy commit: nothing is produced before the first tick. A result that arrives earlier
      yields just its synthesized stream; a failure that arrives earlier raises
      :class:`BackendError` (HTTP status + OpenAI error body) from the first ``__anext__``.
    * After commit a failure becomes the dialect's terminal failure frames (decision P6).
    * ``timeout`` bounds the backend call; on expiry it is cancelled and fails as a timeout.
    * Leaving the context before the stream ended (consumer gone): ``on_disconnect="cancel"``
      cancels the backend call; ``"finish"`` waits up to ``finish_timeout`` for it, hands the
      outcome to ``on_abandoned`` and cancels it if the time runs out.
    """

    __slots__ = (
        "_aborted",
        "_backend",
        "_backend_scope",
        "_committed",
        "_created_sent",
        "_dialect",
        "_done",
        "_done_event",
        "_entered",
        "_error",
        "_finish_timeout",
        "_finished",
        "_interval",
        "_keepalive",
        "_keepalives",
        "_next_tick",
        "_on_abandoned",
        "_on_disconnect",
        "_pending",
        "_response_id",
        "_result",
        "_seq",
        "_sleep_scope",
        "_task_group",
        "_timeout",
    )

    def __init__(
        self,
        backend: Backend,
        dialect: ChatDialect | ResponsesDialect,
        *,
        keepalive_interval: float = 10.0,
        timeout: float | None = None,
        on_disconnect: OnDisconnect = "cancel",
        finish_timeout: float = 60.0,
        on_abandoned: Callable[[StreamOutcome], object] | None = None,
    ) -> None:
        if keepalive_interval <= 0:
            raise ValueError("keepalive_interval must be positive")
        if on_disconnect not in ("cancel", "finish"):
            raise ValueError("on_disconnect must be 'cancel' or 'finish'")
        self._backend = backend
        self._dialect = dialect
        self._interval = keepalive_interval
        self._timeout = timeout
        self._on_disconnect = on_disconnect
        self._finish_timeout = finish_timeout
        self._on_abandoned = on_abandoned
        self._done = False
        # Waiters on completion: the consumer's tick sleep (cancelled once by the backend's
        # completion) and, only under the finish policy, an Event created on demand.
        self._sleep_scope: anyio.CancelScope | None = None
        self._done_event: anyio.Event | None = None
        self._backend_scope: anyio.CancelScope | None = None
        self._aborted: StreamAborted | None = None
        self._result: Any = None
        self._error: Exception | None = None
        self._task_group: anyio.abc.TaskGroup | None = None
        self._pending: list[bytes] = []  # reversed: the next frame is at the end
        self._next_tick = 0.0
        self._keepalives = 0
        self._committed = False
        self._finished = False
        self._entered = False
        self._seq = 0
        self._created_sent = False  # Responses: keepalive events already opened the stream
        self._keepalive: ResponsesKeepalive | None = None
        self._response_id = (
            (dialect.response_id or new_response_id())
            if isinstance(dialect, ResponsesDialect)
            else None
        )

    # -- observable state -------------------------------------------------------------------
    @property
    def committed(self) -> bool:
        """Whether a frame has been handed out (an HTTP layer has sent its headers)."""
        return self._committed

    @property
    def keepalives_sent(self) -> int:
        """Keepalive ticks that produced frames."""
        return self._keepalives

    @property
    def response_id(self) -> str | None:
        """The Responses id every event carries (None for chat)."""
        return self._response_id

    # -- context management -----------------------------------------------------------------
    async def __aenter__(self) -> SynthesizedStream:
        if self._entered:
            raise RuntimeError("a SynthesizedStream can only be entered once")
        self._entered = True
        task_group = anyio.create_task_group()
        await task_group.__aenter__()
        self._task_group = task_group
        self._next_tick = anyio.current_time() + self._interval
        task_group.start_soon(self._run_backend)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool | None:
        task_group = self._task_group
        assert task_group is not None
        if not self._done:
            if self._on_disconnect == "finish":
                self._done_event = anyio.Event()
                with anyio.move_on_after(self._finish_timeout, shield=True):
                    await self._done_event.wait()
                if self._backend_done():
                    self._report_abandoned()
            task_group.cancel_scope.cancel()
        try:
            return await task_group.__aexit__(exc_type, exc, tb)
        except BaseExceptionGroup as group:
            if len(group.exceptions) == 1:
                # Collapse at the public boundary (starlette's habit): callers see the
                # exception itself, its own cause intact, on asyncio and trio alike.
                inner = group.exceptions[0]
                raise inner from inner.__cause__
            raise

    def _backend_done(self) -> bool:
        # A method, not the attribute, so type checkers do not assume it cannot change
        # across an await.
        return self._done

    def _report_abandoned(self) -> None:
        if self._on_abandoned is not None:
            self._on_abandoned(StreamOutcome(self._result, self._error))

    async def _call_backend(self) -> Any:
        result = self._backend()
        if inspect.isawaitable(result):
            result = await result
        return result

    async def _run_backend(self) -> None:
        # One scope serves the total deadline and abort(); it is the backend's only scope.
        scope = anyio.CancelScope()
        if self._timeout is not None:
            scope.deadline = anyio.current_time() + self._timeout
        self._backend_scope = scope
        try:
            with scope:
                self._result = await self._call_backend()
            if scope.cancelled_caught:
                self._error = self._aborted or TimeoutError(f"no result within {self._timeout:g} s")
        except Exception as exc:  # any backend failure becomes the outcome
            self._error = exc
        finally:
            self._done = True
            self._backend_scope = None
            if self._sleep_scope is not None:
                self._sleep_scope.cancel()
            if self._done_event is not None:
                self._done_event.set()

    def abort(self, message: str = "server shutting down") -> bool:
        """End the stream on purpose: cancel the backend call and finish with a failure.

        Before commit the consumer gets :class:`BackendError` (503); after commit the
        dialect's terminal failure frames carrying ``message``. Returns False (and does
        nothing) when the backend already finished: that stream ends normally.
        """
        if self._done or self._backend_scope is None:
            return False
        self._aborted = StreamAborted(message)
        self._backend_scope.cancel()
        return True

    # -- iteration ----------------------------------------------------------------------------
    def __aiter__(self) -> SynthesizedStream:
        return self

    async def __anext__(self) -> bytes:
        if self._task_group is None:
            raise RuntimeError("iterate a SynthesizedStream inside 'async with'")
        if self._pending:
            await anyio.lowlevel.checkpoint()
            return self._take()
        if self._finished:
            raise StopAsyncIteration
        while not self._done:
            # Sleep until the next tick; the backend's completion cancels this sleep once.
            # (A deadline scope would expire by cancellation: an exception on every tick.)
            with anyio.CancelScope() as scope:
                self._sleep_scope = scope
                await anyio.sleep(max(self._next_tick - anyio.current_time(), 0.0))
            self._sleep_scope = None
            if self._backend_done():
                break
            self._next_tick = max(self._next_tick + self._interval, anyio.current_time())
            frames = self._keepalive_frames()
            if frames:
                self._keepalives += 1
                return self._take(frames)
        self._finished = True
        return self._take(self._final_frames())

    def drain_ready(self) -> list[bytes]:
        """The frames already synthesized behind the one ``__anext__`` just returned, in order.

        For writers that send several frames in one write (one ASGI message instead of one per
        event). Nothing is computed or awaited: these frames exist already (the rest of a
        keepalive tick, or of the complete result), so backpressure is unchanged.
        """
        ready = self._pending[::-1]
        self._pending = []
        return ready

    def _take(self, frames: list[bytes] | None = None) -> bytes:
        if frames is not None:
            frames.reverse()
            self._pending = frames
        self._committed = True
        return self._pending.pop()

    def _keepalive_frames(self) -> list[bytes]:
        dialect = self._dialect
        if isinstance(dialect, ChatDialect):
            return [CHAT_KEEPALIVE_FRAME] if dialect.keepalive == "comment" else []
        if dialect.keepalive == "comment":
            return [CHAT_KEEPALIVE_FRAME]
        if self._keepalive is None:
            assert self._response_id is not None
            self._keepalive = ResponsesKeepalive(
                self._response_id,
                base=None if dialect.fidelity == "minimal" else dict(dialect.base or {}),
                numbered=dialect.fidelity == "full",
            )
        frames = self._keepalive.frames(
            include_created=not self._created_sent, sequence_start=self._seq
        )
        self._created_sent = True
        self._seq += len(frames)
        return frames

    def _final_frames(self) -> list[bytes]:
        if self._error is None:
            try:
                return self._result_frames()
            except InvalidResultError as exc:
                self._error = exc
        failure = self._classify(self._error)
        if not self._committed:
            raise BackendError(failure.status_code, failure.body()) from self._error
        return self._failure_frames(failure)

    @staticmethod
    def _classify(error: Exception) -> Failure:
        if isinstance(error, InvalidResultError):
            return Failure(502, "server_error", f"the backend returned an invalid result: {error}")
        return classify_failure(error)

    def _result_frames(self) -> list[bytes]:
        dialect = self._dialect
        if isinstance(dialect, ChatDialect):
            return list(
                chat_frames(
                    self._result,
                    dialect.include_usage,
                    emit_reasoning_alias=dialect.emit_reasoning_alias,
                    include_logprobs=dialect.include_logprobs,
                )
            )
        full = dialect.fidelity == "full"
        return responses_frames(
            self._result,
            dialect.ns_map,
            fidelity=dialect.fidelity,
            include_created=not self._created_sent,
            # Before commit the result keeps its own id unless the caller fixed one.
            response_id=self._response_id if self._created_sent else dialect.response_id,
            sequence_start=self._seq if full else None,
            delta_chars=dialect.delta_chars,
        )

    def _failure_frames(self, failure: Failure) -> list[bytes]:
        dialect = self._dialect
        if isinstance(dialect, ChatDialect):
            return [chat_error_frame(failure.message, type=failure.type, code=failure.code)]
        full = dialect.fidelity == "full"
        return responses_failure_frames(
            failure.message,
            failure.code,
            self._response_id,
            include_created=not self._created_sent,
            fidelity=dialect.fidelity,
            base=dict(dialect.base or {}),
            sequence_start=self._seq if full else None,
        )
