"""Coalescing across the processes sharing a store (issue 31): the coalescer's
:class:`~aiostream_synth._engine.coalesce.SharedCalls` on a store that can share calls (Redis:
:mod:`aiostream_synth._store.redis_calls`).

This process's calls are told to the store by one writer task, their writes gathered for
:data:`_BATCH_S` (a wave of requests is a few script calls, not one per request); the clients
of other processes that join them are heard on this process's channel by a listener task. A
request with nothing to share here asks the store for a call running or remembered in another
process and, when it may join it, waits for its outcome there (checking every third of a lease
that the process running it lives: a call whose process died fails the request, as a
transient failure its client may retry, and is forgotten, so the retry starts a fresh one).

A failure is carried as its classification (status, code, message), and rebuilt as a
:class:`SharedCallFailed` that classifies the same, so that the joining client's error event
and the coalescing rules (deterministic or transient) are those of the original.
"""

from __future__ import annotations

import contextlib
import logging
import uuid
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

import anyio
import orjson

from aiostream_synth._engine.coalesce import CoalesceMode, Coalescer
from aiostream_synth._engine.tasks import TaskStarter
from aiostream_synth._store.base import StoreUnavailable
from aiostream_synth._wire.errors import AiostreamSynthError
from aiostream_synth._wire.failures import classify_failure

__all__ = ["CallRegistry", "FleetCalls", "SharedCallFailed"]

LOG = logging.getLogger("aiostream_synth.coalesce")

#: Seconds the writer lets this process's call writes gather before it sends them.
_BATCH_S = 0.01
#: Writes per script call.
_FLUSH_CHUNK = 1000
#: What a request gets when the process running the call it joined died.
_STOPPED = (
    "The server running this request's backend call stopped before it answered; "
    "send the request again."
)


class CallRegistry(Protocol):
    """What sharing calls needs of a store (see :class:`~aiostream_synth._store.redis_calls.
    RedisCalls`); every operation may raise :class:`StoreUnavailable`."""

    @property
    def lease_s(self) -> float: ...

    async def write(self, ops: Sequence[tuple[str, str, str, str, bytes | str]]) -> None: ...

    async def join(
        self, key: str, mode: str, stream: bool
    ) -> tuple[Literal["joined", "done"], str, str] | None: ...

    async def tell(self, holder: str, message: str) -> int: ...

    async def outcome(self, gen: str, wait_s: float) -> bytes | None: ...

    async def alive(self, holder: str, key: str, gen: str) -> bool: ...

    async def listen(self, on_message: Callable[[str], object]) -> None: ...


class SharedCallFailed(AiostreamSynthError):
    """The failure of a call another process ran, as it was classified there."""

    def __init__(self, status_code: int, code: str, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.code = code
        self.message = message
        self.body = {"error": {"message": message, "code": code}}


def _outcome(result: Any, error: BaseException | None) -> bytes:
    """A call's outcome as JSON (empty when its result is not JSON: it is not shared)."""
    if error is not None:
        failure = classify_failure(error)
        return orjson.dumps(
            {
                "error": {
                    "status": failure.status_code,
                    "code": failure.code,
                    "message": failure.message,
                }
            }
        )
    try:
        return orjson.dumps({"result": result})
    except (orjson.JSONEncodeError, TypeError):
        return b""


def _taken(raw: bytes | None) -> Callable[[], Any] | None:
    """The function a joining request's backend returns through (None: call the backend)."""
    if raw is None:
        return None
    try:
        outcome = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    if not isinstance(outcome, dict):
        return None
    if "result" in outcome:
        result = outcome["result"]
        return lambda: result
    error = outcome.get("error")
    if isinstance(error, dict):
        failure = SharedCallFailed(
            int(error.get("status") or 500),
            str(error.get("code") or "server_error"),
            str(error.get("message") or "the backend failed"),
        )
        return _raising(failure)
    return None  # {"retry": true}: the call ended with nothing to share


def _raising(failure: BaseException) -> Callable[[], Any]:
    def outcome() -> Any:
        raise failure

    return outcome


class FleetCalls:
    """See the module docstring. :meth:`start` in the app's lifespan, once the coalescer
    exists (:meth:`bind`)."""

    def __init__(self, registry: CallRegistry) -> None:
        self._registry = registry
        self._coalescer: Coalescer | None = None
        self._queue: list[tuple[str, str, str, str, bytes | str]] = []
        self._wake: anyio.Event | None = None
        #: Store operations that failed (each logged).
        self.failures = 0

    def bind(self, coalescer: Coalescer) -> None:
        self._coalescer = coalescer

    def start(self, tasks: TaskStarter) -> None:
        tasks.start_soon(self._write)
        tasks.start_soon(self._listen)

    # -- this process's calls ------------------------------------------------------------------
    def started(self, key: bytes, stream: bool) -> str:
        generation = uuid.uuid4().hex
        self._queued(("s", key.hex(), generation, "1" if stream else "0", ""))
        return generation

    def waiting(self, key: bytes, generation: str, busy: bool) -> None:
        self._queued(("w", key.hex(), generation, "busy" if busy else "idle", ""))

    def ended(
        self,
        key: bytes,
        generation: str,
        result: Any,
        error: BaseException | None,
        share: Literal["any", "nonstream", ""],
        joined: bool,
    ) -> None:
        outcome = _outcome(result, error) if share or joined else b""
        self._queued(("e", key.hex(), generation, share, outcome))

    def _queued(self, op: tuple[str, str, str, str, bytes | str]) -> None:
        self._queue.append(op)
        wake, self._wake = self._wake, None
        if wake is not None:
            wake.set()

    async def _write(self) -> None:
        """Send the queued writes until the lifespan ends (what is queued then is lost: the
        records expire; a failure is logged and the batch dropped)."""
        while True:
            if not self._queue:
                self._wake = anyio.Event()
                await self._wake.wait()
            await anyio.sleep(_BATCH_S)
            batch, self._queue = self._queue, []
            for start in range(0, len(batch), _FLUSH_CHUNK):
                try:
                    await self._registry.write(batch[start : start + _FLUSH_CHUNK])
                except (StoreUnavailable, OSError) as exc:
                    self.failures += 1
                    LOG.warning("calls not shared with the other servers: %s", exc)

    async def _listen(self) -> None:
        while True:
            try:
                await self._registry.listen(self._heard)
            except (StoreUnavailable, OSError) as exc:
                self.failures += 1
                LOG.warning("clients of other servers joining calls here are not heard: %s", exc)
            await anyio.sleep(1.0)

    def _heard(self, message: str) -> None:
        """``+<key> <generation>`` (a client elsewhere joined) or ``-...`` (it left)."""
        sign, body = message[:1], message[1:]
        key_hex, _, generation = body.partition(" ")
        coalescer = self._coalescer
        try:
            key = bytes.fromhex(key_hex)
        except ValueError:
            return
        if coalescer is None or not generation:
            return
        if sign == "+":
            coalescer.joined_elsewhere(key, generation)
        elif sign == "-":
            coalescer.left_elsewhere(key, generation)

    # -- calls elsewhere -----------------------------------------------------------------------
    async def follow(
        self, key: bytes, mode: CoalesceMode, stream: bool
    ) -> Callable[[], Any] | None:
        registry = self._registry
        key_hex = key.hex()
        try:
            joined = await registry.join(key_hex, mode, stream)
            if joined is None:
                return None
            kind, generation, holder = joined
            if kind == "done":
                return _taken(await registry.outcome(generation, 0))
            if not await registry.tell(holder, f"+{key_hex} {generation}"):
                return None  # nobody runs it any more
        except (StoreUnavailable, OSError) as exc:
            self.failures += 1
            LOG.warning("calls of other servers not looked up: %s", exc)
            return None
        LOG.info("joined call %s of another server", generation)
        over = False
        try:
            while True:
                raw = await registry.outcome(generation, registry.lease_s / 3)
                if raw is not None:
                    over = True
                    return _taken(raw)
                if not await registry.alive(holder, key_hex, generation):
                    over = True
                    return _raising(SharedCallFailed(502, "server_error", _STOPPED))
        except (StoreUnavailable, OSError) as exc:
            self.failures += 1
            LOG.warning("the outcome of a call of another server was lost: %s", exc)
            return _raising(
                SharedCallFailed(
                    503,
                    "server_error",
                    f"The response store failed while this request waited: {exc}",
                )
            )
        finally:
            if not over:  # the client left (cancelled): the process running it is told
                with (
                    anyio.CancelScope(shield=True),
                    anyio.move_on_after(2.0),
                    contextlib.suppress(StoreUnavailable, OSError),
                ):
                    await registry.tell(holder, f"-{key_hex} {generation}")
