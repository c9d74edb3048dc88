"""Request coalescing: a client's retry attaches to the backend call already running for it.

Claude Code re-sends a request without streaming after any mid-stream failure or watchdog abort,
and the Codex CLI retries a dropped stream; each retry would otherwise start a second generation
of minutes on the backend. A :class:`Coalescer` keys backend calls by the identifying part of the
request (its body without ``stream`` and the output limit, plus the caller's credentials) and
lets a later identical request *attach* to the earlier call instead of starting its own.

Which requests attach (``mode``):

* ``"retries"`` (default): a request attaches to a call that no client is waiting on any more
  (its client left; the call lingers ``linger`` seconds for a retry before it is cancelled, or
  finished while abandoned), or to a call that failed less than ``window`` seconds ago when a
  retry would not do better: a *deterministic* failure (a 4xx such as a template error or a
  context overflow) is served to any retry at once instead of a doomed second call; a
  *transient* one (5xx, 429, a timeout) only to the non-streaming re-send of a streamed call —
  Claude Code's fallback after a mid-stream error, which the failure already answered — while a
  streaming retry (Codex's) reaches the backend again. A call whose client is still
  connected is never shared:
  RL and eval harnesses send identical requests at the same time on purpose, to sample several
  answers, and each must get its own generation.
* ``"all"``: any identical request attaches while the call runs (and within ``window`` after it
  failed or was abandoned).
* ``"off"``: every request calls the backend itself.

The shared call runs in a task of a long-lived task group (the ASGI lifespan's), never in a
client's own task, so it outlives the client that started it only by the linger. It is cancelled
when no client is left and the linger runs out: nothing runs for nobody.

Across processes (replicas, workers) sharing a store, the same rules hold through
:class:`SharedCalls`: the coalescer tells it of each of its calls (started, whether a client
waits, the outcome), and a request with nothing to share here asks it for a call running or
remembered elsewhere, whose outcome it then waits for (with its own keepalives) instead of
calling the backend. A client elsewhere that waits on a call here counts as one of its clients
(:meth:`Coalescer.joined_elsewhere`, :meth:`Coalescer.left_elsewhere`).
"""

from __future__ import annotations

import copy
import hashlib
import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Literal, Protocol

import anyio
import anyio.abc
import orjson

from aiostream_synth._engine.runtime import Event, Linger, Lingered, Runtime, current_runtime
from aiostream_synth._engine.shutdown import ShutdownSignal
from aiostream_synth._engine.tasks import TaskStarter
from aiostream_synth._wire.errors import StreamAborted
from aiostream_synth._wire.failures import is_transient

__all__ = ["CoalesceMode", "Coalescer", "SharedCalls", "coalesce_key"]

CoalesceMode = Literal["retries", "all", "off"]

LOG = logging.getLogger("aiostream_synth.coalesce")

#: Request headers that identify the caller (a retry carries the same credentials).
_CREDENTIALS = ("authorization", "x-api-key")


def coalesce_key(dialect: str, identifying: Mapping[str, Any], headers: Mapping[str, str]) -> bytes:
    """A digest of what identifies one generation: the dialect, the identifying part of the body
    (canonical JSON) and the caller's credentials."""
    credentials = [headers.get(name, "") for name in _CREDENTIALS]
    try:
        canonical = orjson.dumps([dialect, identifying, credentials], option=orjson.OPT_SORT_KEYS)
    except (orjson.JSONEncodeError, TypeError):
        canonical = repr((dialect, identifying, credentials)).encode("utf-8", "replace")
    return hashlib.sha256(canonical).digest()


class SharedCalls(Protocol):
    """Coalescing across the processes sharing a store (see the module docstring). Keys are
    :func:`coalesce_key` digests; a call's *generation* is the id it is known by there."""

    def started(self, key: bytes, stream: bool) -> str:
        """This process started a call under ``key`` (its first request streams or not); its
        generation."""
        ...

    def waiting(self, key: bytes, generation: str, busy: bool) -> None:
        """Whether a client waits on the call now (False: it lingers for a retry)."""
        ...

    def ended(
        self,
        key: bytes,
        generation: str,
        result: Any,
        error: BaseException | None,
        share: Literal["any", "nonstream", ""],
        joined: bool,
    ) -> None:
        """The call's outcome; which retries may take it (``share``; ``""``: none, it is
        forgotten); whether a client elsewhere joined it."""
        ...

    def may_share(self, key: bytes) -> bool:
        """Whether a call under ``key`` may be shared elsewhere (False: :meth:`follow` would
        find none; the request starts its call without asking)."""
        ...

    async def follow(
        self, key: bytes, mode: CoalesceMode, stream: bool
    ) -> Callable[[], Any] | None:
        """Join a call under ``key`` running or remembered in another process, when ``mode``
        lets a request (``stream``: whether it streams) share it, and wait for its outcome:
        a function that returns its result or raises its failure; None when there is none to
        share (the request calls the backend itself)."""
        ...


class _SharedCall:
    """One backend call and the clients waiting on it."""

    __slots__ = (
        "abandoned",
        "clients",
        "done",
        "elsewhere",
        "error",
        "event",
        "generation",
        "joined",
        "linger",
        "listeners",
        "result",
        "stream",
    )

    def __init__(self, runtime: Runtime, stream: bool) -> None:
        #: Whether the request that started the call streams.
        self.stream = stream
        self.clients = 0
        #: The call has ended (``result`` or ``error`` is its outcome).
        self.done = False
        #: Set when it ends; made for the first client that awaits the outcome in its own task
        #: (an engine stream is a listener instead: no event per streamed call).
        self.event: Event | None = None
        self.result: Any = None
        self.error: BaseException | None = None
        #: The streams attached through ``start_call``, told the outcome when the call ends.
        self.listeners: list[_Listener] = []
        #: Cancels the call once every client has left and the linger has run out.
        self.linger: Linger = runtime.linger()
        #: The call finished with no client waiting for it (its answer is kept for a retry).
        self.abandoned = False
        #: Its id in the processes sharing a store (None without one), the clients waiting
        #: on it there, and whether one ever joined.
        self.generation: str | None = None
        self.elsewhere = 0
        self.joined = False

    def attachable(self, mode: CoalesceMode, stream: bool) -> bool:
        """Whether a request (streaming or not) may share this call's outcome."""
        if not self.done:
            return mode == "all" or self.clients == 0
        if self.abandoned or _deterministic(self.error):
            return True
        # A transient failure answers only the non-streaming re-send of a streamed call.
        return self.error is not None and self.stream and not stream

    def attach(self) -> None:
        """One more client waits on the call (before a new call starts: see
        :meth:`Coalescer._start`)."""
        self.clients += 1
        self.linger.hold()

    async def wait(self) -> None:
        """Until the call has ended."""
        if self.done:
            return
        if self.event is None:
            self.event = current_runtime().event()
        await self.event.wait()

    def end(self) -> None:
        """The call has ended: wake the clients awaiting it."""
        self.done = True
        if self.event is not None:
            self.event.set()


class Coalescer:
    """Shares backend calls between identical requests (see the module docstring)."""

    def __init__(
        self,
        task_group: TaskStarter,
        *,
        mode: CoalesceMode = "retries",
        linger: float = 0.9,
        window: float = 10.0,
        shared: SharedCalls | None = None,
        drain: ShutdownSignal | None = None,
    ) -> None:
        if mode not in ("retries", "all", "off"):
            raise ValueError("mode must be 'retries', 'all' or 'off'")
        self._shared = shared
        #: Held while a client of another process waits on a call here, so that a drain
        #: lets the call end for it.
        self._drain = drain
        self._group = task_group
        self._mode = mode
        self._linger = linger
        self._window = window
        self._calls: dict[bytes, _SharedCall] = {}
        #: How many requests attached to a call another request started (for tests and metrics).
        self.attached = 0
        #: How many of them to a call of another process (through ``shared``).
        self.attached_elsewhere = 0

    @property
    def mode(self) -> CoalesceMode:
        """Which requests attach (see the module docstring)."""
        return self._mode

    @property
    def linger(self) -> float:
        """Seconds a call whose clients all left waits for a retry."""
        return self._linger

    @property
    def window(self) -> float:
        """Seconds a failed or abandoned call's outcome is kept for a retry."""
        return self._window

    @property
    def across_processes(self) -> bool:
        """Whether calls are shared with the other processes of a store too."""
        return self._shared is not None

    @property
    def in_flight(self) -> int:
        """Calls still running (or remembered within their window)."""
        return len(self._calls)

    def backend(
        self, key: bytes, call: Callable[[], Awaitable[Any]], *, stream: bool = True
    ) -> Callable[[], Awaitable[Any]]:
        """The backend function a request (``stream``: whether it streams) uses: it attaches
        to the call under ``key`` when it may, else starts ``call`` as a new shared call.
        Awaited, it waits for the outcome; the engine instead *starts* it (``start_call``,
        see :data:`~aiostream_synth._engine.stream.StartCall`), so that a stream waiting on a
        shared call needs no task of its own."""
        if self._mode == "off":
            return call
        if self._shared is not None:
            return _FleetJoin(self, key, call, stream)
        return _Join(self, key, call, stream)

    def _shared_for(self, key: bytes, stream: bool) -> tuple[_SharedCall, bool]:
        """The call a request attaches to: the one under ``key`` when it may, else a new one,
        not started yet (see :meth:`_start`); and whether it is new."""
        shared = self._calls.get(key)
        if shared is not None and shared.attachable(self._mode, stream):
            self.attached += 1
            if shared.clients == 0 and not shared.done:
                self._tell_waiting(key, shared, busy=True)
            return shared, False
        shared = _SharedCall(current_runtime(), stream)
        self._calls[key] = shared
        return shared, True

    def _start(self, key: bytes, shared: _SharedCall, call: Callable[[], Awaitable[Any]]) -> None:
        """Start a new call, once its first client is attached: the call may end before this
        returns (its task starts eagerly, see :mod:`aiostream_synth._engine.tasks`, and a
        backend may answer without waiting), and a call that ended with nobody attached would
        count as abandoned, its answer kept for a retry."""
        if self._shared is not None:
            shared.generation = self._shared.started(key, shared.stream)
        self._group.start_soon(self._run, key, shared, call)

    def _left(self, shared: _SharedCall, key: bytes | None = None) -> None:
        """A client stopped waiting: the last one to leave a running call starts its linger."""
        shared.clients -= 1
        if shared.clients == 0 and not shared.done:
            shared.linger.start(self._linger)
            if key is not None:
                self._tell_waiting(key, shared, busy=False)

    def _tell_waiting(self, key: bytes, shared: _SharedCall, *, busy: bool) -> None:
        if self._shared is not None and shared.generation is not None:
            self._shared.waiting(key, shared.generation, busy)

    def joined_elsewhere(self, key: bytes, generation: str) -> None:
        """A client of another process waits on this process's call ``generation`` under
        ``key`` (nothing happens when that call is over)."""
        shared = self._calls.get(key)
        if shared is not None and shared.generation == generation and not shared.done:
            shared.elsewhere += 1
            shared.joined = True
            shared.attach()
            if self._drain is not None:
                self._drain.hold(shared)

    def left_elsewhere(self, key: bytes, generation: str) -> None:
        """That client stopped waiting."""
        shared = self._calls.get(key)
        if shared is not None and shared.generation == generation and shared.elsewhere > 0:
            shared.elsewhere -= 1
            if shared.elsewhere == 0 and self._drain is not None:
                self._drain.release(shared)
            if not shared.done:
                self._left(shared, key)

    async def _run(
        self, key: bytes, shared: _SharedCall, call: Callable[[], Awaitable[Any]]
    ) -> None:
        # One frame for the whole call (it lives as long as the backend works).
        lingered = False
        try:
            shared.result = await shared.linger.run(call)
        except Lingered:  # every client left and none came back: an outcome for no one
            lingered = True
            shared.error = StreamAborted("every client left; the backend call was cancelled")
        except Exception as exc:  # any backend failure is every client's outcome
            shared.error = exc
        except BaseException:  # cancelled from outside (the server shutting down)
            shared.error = StreamAborted("every client left; the backend call was cancelled")
            raise
        finally:
            shared.abandoned = shared.clients == 0
            shared.end()
            listeners, shared.listeners = shared.listeners, []
            for listener in listeners:
                listener.deliver()
            if self._shared is not None and shared.generation is not None:
                self._shared.ended(
                    key,
                    shared.generation,
                    shared.result,
                    shared.error,
                    "" if lingered else _share(shared),
                    shared.joined,
                )
            if self._drain is not None and shared.elsewhere:
                # Its outcome is on its way to them (``ended`` holds the drain until written).
                self._drain.release(shared)
        if not lingered and (shared.error is not None or shared.abandoned):
            # Remembered for a retry: a failure (served as ``attachable`` says), or a result
            # nobody was waiting for any more.
            await anyio.sleep(self._window)
        self._forget(key, shared)

    def _forget(self, key: bytes, shared: _SharedCall) -> None:
        if self._calls.get(key) is shared:
            del self._calls[key]


def _share(shared: _SharedCall) -> Literal["any", "nonstream", ""]:
    """Which later requests may take a finished call's outcome (:meth:`_SharedCall.attachable`
    for a call that is done)."""
    if isinstance(shared.error, StreamAborted):
        return ""  # cancelled (every client left, the server stopping): nothing to share
    if shared.abandoned or _deterministic(shared.error):
        return "any"
    return "nonstream" if shared.error is not None and shared.stream else ""


class _Join:
    """One request's backend function under coalescing: awaitable (a non-streaming request
    waits for the outcome in its own task) or startable (an engine stream is told the outcome
    by the shared call's task)."""

    __slots__ = ("_call", "_coalescer", "_key", "_stream")

    def __init__(
        self,
        coalescer: Coalescer,
        key: bytes,
        call: Callable[[], Awaitable[Any]],
        stream: bool,
    ) -> None:
        self._coalescer = coalescer
        self._key = key
        self._call = call
        self._stream = stream

    async def __call__(self) -> Any:
        coalescer = self._coalescer
        shared, new = coalescer._shared_for(self._key, self._stream)
        shared.attach()
        try:
            if new:
                coalescer._start(self._key, shared, self._call)
            await shared.wait()
        finally:
            coalescer._left(shared, self._key)
        if shared.error is not None:
            raise _copy(shared.error)
        return shared.result

    def start_call(self, ended: Callable[[Any, BaseException | None], None]) -> _Listener:
        coalescer = self._coalescer
        shared, new = coalescer._shared_for(self._key, self._stream)
        listener = _Listener(coalescer, shared, ended, self._key)
        if new:
            coalescer._start(self._key, shared, self._call)
        return listener


class _FleetJoin(_Join):
    """One request's backend function when processes share a store: a call to share here
    first, else one running or remembered elsewhere (its outcome awaited), else a new call
    here. Awaited (a non-streaming request), or started (an engine stream: the look-up in a
    task of the coalescer's group, then, for a call here, no task at all)."""

    __slots__ = ()

    async def __call__(self) -> Any:
        coalescer = self._coalescer
        here = coalescer._calls.get(self._key)
        fleet = coalescer._shared
        if (
            fleet is not None
            and fleet.may_share(self._key)
            and (here is None or not here.attachable(coalescer._mode, self._stream))
        ):
            elsewhere = await fleet.follow(self._key, coalescer._mode, self._stream)
            if elsewhere is not None:
                coalescer.attached_elsewhere += 1
                return elsewhere()
        return await super().__call__()

    def start_call(self, ended: Callable[[Any, BaseException | None], None]) -> Any:
        coalescer = self._coalescer
        here = coalescer._calls.get(self._key)
        fleet = coalescer._shared
        if (
            fleet is None
            or not fleet.may_share(self._key)
            or (here is not None and here.attachable(coalescer._mode, self._stream))
        ):
            return super().start_call(ended)
        return _FleetStart(self, ended)


class _FleetStart:
    """An engine stream's start under :class:`_FleetJoin`: a task looks the call up elsewhere
    and either waits for its outcome there or attaches the stream to a call here (a
    :class:`_Listener`, after which the task is over). ``cancel()`` as the engine's
    ``start_call`` protocol asks: the stream is told at once."""

    __slots__ = ("_ended", "_inner", "_join", "_task")

    def __init__(
        self, join: _FleetJoin, ended: Callable[[Any, BaseException | None], None]
    ) -> None:
        self._join = join
        self._ended: Callable[[Any, BaseException | None], None] | None = ended
        self._inner: _Listener | None = None
        self._task = join._coalescer._group.start_soon(self._look_up)

    async def _look_up(self) -> None:
        join = self._join
        coalescer = join._coalescer
        assert coalescer._shared is not None
        try:
            elsewhere = await coalescer._shared.follow(join._key, coalescer._mode, join._stream)
        except Exception:  # a bug in the look-up: this request calls the backend itself
            LOG.exception("looking up a call of another process failed")
            elsewhere = None
        if self._ended is None:
            return  # the stream stopped waiting meanwhile
        if elsewhere is None:  # a call here, as without other processes
            self._inner = _Join.start_call(join, self._tell)
            return
        coalescer.attached_elsewhere += 1
        try:
            result = elsewhere()
        except Exception as exc:  # the call's failure: this stream's outcome
            self._tell(None, exc)
        else:
            self._tell(result, None)

    def _tell(self, result: Any, error: BaseException | None) -> None:
        ended, self._ended = self._ended, None
        if ended is not None:
            ended(result, error)

    def cancel(self) -> None:
        if self._inner is not None:
            self._inner.cancel()  # tells the stream through _tell
            return
        if self._ended is not None:
            self._task.cancel()
            self._tell(None, StreamAborted("the stream stopped waiting for the backend call"))


class _Listener:
    """A stream attached to a shared call: told its outcome once, or leaves (``cancel``)."""

    __slots__ = ("_coalescer", "_ended", "_key", "_shared")

    def __init__(
        self,
        coalescer: Coalescer,
        shared: _SharedCall,
        ended: Callable[[Any, BaseException | None], None],
        key: bytes,
    ) -> None:
        self._coalescer = coalescer
        self._key = key
        self._shared: _SharedCall | None = shared
        # Dropped once told: the stream holds this listener, so keeping its callback (a method
        # of the stream) would leave the finished stream in a reference cycle, freed only by a
        # full collection instead of at once.
        self._ended: Callable[[Any, BaseException | None], None] | None = ended
        shared.attach()
        if shared.done:  # a remembered outcome: told at once
            self.deliver()
        else:
            shared.listeners.append(self)

    def deliver(self) -> None:
        """The call ended: its outcome (a copy of a shared failure) to this stream."""
        shared, ended = self._shared, self._ended
        if shared is None or ended is None:
            return
        self._shared = self._ended = None
        shared.clients -= 1
        error = shared.error
        ended(shared.result, None if error is None else _copy(error))

    def cancel(self) -> None:
        """The stream stopped waiting (its client left, its deadline passed, an abort)."""
        shared, ended = self._shared, self._ended
        if shared is None or ended is None:
            return
        self._shared = self._ended = None
        shared.listeners.remove(self)
        self._coalescer._left(shared, self._key)
        ended(None, StreamAborted("the stream stopped waiting for the backend call"))


def _deterministic(error: BaseException | None) -> bool:
    """Whether a retry of the same request would fail the same way (an invalid prompt, a
    context overflow), rather than perhaps succeed (an overload, a 5xx, a timeout)."""
    if error is None or isinstance(error, StreamAborted):
        return False
    return not is_transient(error)


def _copy(error: BaseException) -> BaseException:
    """A copy of a shared failure for one client (raising one object in several tasks would
    tangle their tracebacks); the original when it cannot be copied."""
    try:
        return copy.copy(error)
    except Exception:  # an exception type copy cannot rebuild
        return error
