"""Coalescing across the processes sharing a store (issue 31): the coalescer's
:class:`~aiostream_synth._engine.coalesce.SharedCalls` on a store that can share calls (Redis:
:mod:`aiostream_synth._store.redis_calls`).

A call is written to the store only once it may be shared (with ``--coalesce retries``, when
its client left or its outcome is kept for a retry; with ``all``, from its start), by one
writer task that gathers writes for :data:`_BATCH_S`; the store announces those keys to every
process, which keeps them (:meth:`FleetCalls.may_share`). So a request whose key nobody
announced, the common case, costs the store nothing: no look-up, no write. The clients of other
processes that join this process's calls are heard on its own channel by a listener task. A
request whose key was announced asks the store for that call and, when it may join it, waits
for its outcome there (checking every third of a lease
that the process running it lives: a call whose process died fails the request, as a
transient failure its client may retry, and is forgotten, so the retry starts a fresh one).

A failure is carried as its classification (status, code, message), and rebuilt as a
:class:`SharedCallFailed` that classifies the same, so that the joining client's error event
and the coalescing rules (deterministic or transient) are those of the original.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol

import anyio
import orjson

from aiostream_synth._engine.coalesce import CoalesceMode, Coalescer
from aiostream_synth._engine.shutdown import ShutdownSignal
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
#: Keys of other processes' calls kept at most (beyond, the expired ones go, then all).
_ANNOUNCED_KEPT = 100_000
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

    @property
    def holder(self) -> str: ...

    async def write(self, ops: Sequence[tuple[str, str, str, str, bytes | str]]) -> None: ...

    async def join(
        self, key: str, mode: str, stream: bool
    ) -> tuple[Literal["joined", "done"], str, str] | None: ...

    async def tell(self, holder: str, message: str) -> int: ...

    async def outcome(self, gen: str, wait_s: float) -> bytes | None: ...

    async def alive(self, holder: str, key: str, gen: str) -> bool: ...

    async def listen(
        self, on_message: Callable[[str], object], on_announced: Callable[[str], object]
    ) -> None: ...


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


class _Own:
    """One of this process's calls, as the store knows it."""

    __slots__ = ("key", "recorded", "stream")

    def __init__(self, key: str, stream: bool) -> None:
        self.key = key
        self.stream = stream
        #: Written to the store (it may be shared, or was).
        self.recorded = False


class FleetCalls:
    """See the module docstring. :meth:`bind` to the coalescer, then :meth:`start` in the
    app's lifespan."""

    def __init__(self, registry: CallRegistry, drain: ShutdownSignal | None = None) -> None:
        self._registry = registry
        #: Held from the end of a call a client elsewhere joined until its outcome is written.
        self._drain = drain
        self._coalescer: Coalescer | None = None
        self._mode: CoalesceMode = "retries"
        self._queue: list[tuple[str, str, str, str, bytes | str]] = []
        self._wake: anyio.Event | None = None
        self._numbers = itertools.count()
        self._own: dict[str, _Own] = {}
        #: The keys other processes announced as shareable, and until when they are kept.
        self._announced: dict[bytes, float] = {}
        self._announced_for = 60.0
        #: Store operations that failed (each logged).
        self.failures = 0

    def bind(self, coalescer: Coalescer) -> None:
        self._coalescer = coalescer
        self._mode = coalescer.mode
        self._announced_for = max(coalescer.linger, coalescer.window) + 60.0

    def start(self, tasks: TaskStarter) -> None:
        tasks.start_soon(self._write)
        tasks.start_soon(self._listen)

    # -- this process's calls ------------------------------------------------------------------
    def started(self, key: bytes, stream: bool) -> str:
        generation = f"{self._registry.holder}.{next(self._numbers)}"
        own = self._own[generation] = _Own(key.hex(), stream)
        if self._mode == "all":  # shareable from its start
            own.recorded = True
            self._queued(("r", own.key, generation, "1" if stream else "0", "busy"))
        return generation

    def waiting(self, key: bytes, generation: str, busy: bool) -> None:
        own = self._own.get(generation)
        if own is None or self._mode == "all":
            return
        if not busy and not own.recorded:  # its client left: shareable while it lingers
            own.recorded = True
            self._queued(("r", own.key, generation, "1" if own.stream else "0", "idle"))
        elif own.recorded:
            self._queued(("w", own.key, generation, "busy" if busy else "idle", ""))

    def ended(
        self,
        key: bytes,
        generation: str,
        result: Any,
        error: BaseException | None,
        share: Literal["any", "nonstream", ""],
        joined: bool,
    ) -> None:
        own = self._own.pop(generation, None)
        recorded = own is not None and own.recorded
        if share or recorded or joined:
            outcome = _outcome(result, error) if share or joined else b""
            op = ("e", key.hex(), generation, share, outcome)
            if joined and self._drain is not None:
                self._drain.hold(op)  # a drain lets the outcome reach them
            self._queued(op)

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
                chunk = batch[start : start + _FLUSH_CHUNK]
                try:
                    await self._registry.write(chunk)
                except (StoreUnavailable, OSError) as exc:
                    self.failures += 1
                    LOG.warning("calls not shared with the other servers: %s", exc)
                finally:
                    if self._drain is not None:
                        for op in chunk:
                            self._drain.release(op)

    async def _listen(self) -> None:
        while True:
            try:
                await self._registry.listen(self._heard, self._announced_now)
            except (StoreUnavailable, OSError) as exc:
                self.failures += 1
                LOG.warning("the calls of other servers are not heard: %s", exc)
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

    def _announced_now(self, message: str) -> None:
        """``s <holder> <key>``: a call of ``holder`` may be shared; ``u ...``: no longer."""
        kind, holder, key_hex = ([*message.split(" "), "", ""])[:3]
        if holder == self._registry.holder:
            return
        try:
            key = bytes.fromhex(key_hex)
        except ValueError:
            return
        if kind == "u":
            self._announced.pop(key, None)
        elif kind == "s":
            if len(self._announced) >= _ANNOUNCED_KEPT:
                now = time.monotonic()
                self._announced = {k: t for k, t in self._announced.items() if t > now}
                if len(self._announced) >= _ANNOUNCED_KEPT:
                    self._announced.clear()
            self._announced[key] = time.monotonic() + self._announced_for

    def may_share(self, key: bytes) -> bool:
        """Whether another process announced a call under ``key`` that may be shared (then,
        and only then, a request is looked up in the store)."""
        until = self._announced.get(key)
        if until is None:
            return False
        if until < time.monotonic():
            del self._announced[key]
            return False
        return True

    # -- calls elsewhere -----------------------------------------------------------------------
    async def follow(
        self, key: bytes, mode: CoalesceMode, stream: bool
    ) -> Callable[[], Any] | None:
        if not self.may_share(key):
            return None
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
