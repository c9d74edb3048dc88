"""Request coalescing: a retry shares the backend call of the request it repeats (``_engine/coalesce``)."""

from __future__ import annotations

import gc
from typing import Any

import anyio
import anyio.abc
import anyio.lowlevel
import pytest

from aiostream_synth._engine.coalesce import Coalescer, coalesce_key
from aiostream_synth._wire.errors import StreamAborted

pytestmark = pytest.mark.anyio

KEY = coalesce_key("anthropic", {"messages": ["hi"]}, {"x-api-key": "k"})


class Backend:
    """One generation: counts calls, takes ``delay``, may fail, records cancellation."""

    def __init__(self, delay: float = 10.0, error: Exception | None = None) -> None:
        self.delay = delay
        self.error = error
        self.calls = 0
        self.cancelled_at: float | None = None
        self.cancelled = anyio.Event()

    async def __call__(self) -> Any:
        self.calls += 1
        try:
            await anyio.sleep(self.delay)
        except anyio.get_cancelled_exc_class():
            self.cancelled_at = anyio.current_time()
            self.cancelled.set()
            raise
        if self.error is not None:
            raise self.error
        return {"answer": self.calls}


@pytest.fixture
def unit(exact_timing: bool) -> float:
    """One "second" of these tests: real on trio's MockClock (instant), short on asyncio."""
    return 1.0 if exact_timing else 0.1  # slack for a shared, noisy machine


async def test_two_live_identical_requests_are_two_generations(unit: float) -> None:
    """RL and eval harnesses sample several answers with identical requests: by default each
    live request gets its own generation."""
    backend = Backend(delay=unit)
    results: list[Any] = []
    async with anyio.create_task_group() as group:
        shared = Coalescer(group)
        for _ in range(2):
            group.start_soon(_collect, shared.backend(KEY, backend), results)
    assert backend.calls == 2
    assert shared.attached == 0


async def test_mode_all_shares_any_identical_request(unit: float) -> None:
    """``all``: an identical request attaches while the call runs."""
    backend = Backend(delay=unit)
    results: list[Any] = []
    async with anyio.create_task_group() as group:
        shared = Coalescer(group, mode="all")
        for _ in range(2):
            group.start_soon(_collect, shared.backend(KEY, backend), results)
    assert backend.calls == 1
    assert results == [{"answer": 1}, {"answer": 1}]


async def _collect(call: Any, into: list[Any]) -> None:
    into.append(await call())


async def test_a_retry_after_a_drop_attaches_to_the_running_call(unit: float) -> None:
    """The client left (its call lingers); its retry attaches and gets the answer; one call."""
    backend = Backend(delay=5 * unit)
    async with anyio.create_task_group() as group:
        shared = Coalescer(group, linger=0.9 * unit)
        with anyio.move_on_after(2 * unit):  # the first client gives up
            await shared.backend(KEY, backend)()
        await anyio.sleep(0.5 * unit)  # the retry comes within the linger
        assert await shared.backend(KEY, backend)() == {"answer": 1}
        assert shared.in_flight == 0  # delivered to the retry: not kept for a repeat
    assert backend.calls == 1
    assert shared.attached == 1
    assert backend.cancelled_at is None


async def test_a_call_nobody_waits_for_is_cancelled_after_the_linger(
    unit: float, exact_timing: bool
) -> None:
    """the client left and no retry came: the backend call is cancelled within 1 s (the
    0.9 s linger; exact on trio's MockClock, where the test's seconds are real ones)."""
    backend = Backend(delay=3600)
    async with anyio.create_task_group() as group:
        shared = Coalescer(group, linger=0.9 * unit)
        with anyio.move_on_after(2 * unit):
            await shared.backend(KEY, backend)()
        left = anyio.current_time()
        await backend.cancelled.wait()
        assert backend.cancelled_at is not None
        lingered = backend.cancelled_at - left
        if exact_timing:
            assert lingered == pytest.approx(0.9 * unit)  # the linger, well within 1 s
        else:  # a real clock on a shared machine: not at once, and nothing more precise
            assert lingered > 0.5 * unit
        assert shared.in_flight == 0  # a cancelled call is not kept for later
        with anyio.move_on_after(0.1 * unit):
            await shared.backend(KEY, backend)()  # a later request starts its own call
        group.cancel_scope.cancel()
    assert backend.calls == 2


async def test_a_retry_of_a_failed_call_gets_the_same_failure_at_once(unit: float) -> None:
    """Claude Code re-sends after a mid-stream error: within the window the retry of a
    deterministic failure (a template error) gets the same failure without a second generation;
    after it, a new call is made."""

    class Overloaded(Exception):  # the name a transient error would have; its status decides
        status_code = 422

    backend = Backend(delay=unit, error=Overloaded("busy"))
    async with anyio.create_task_group() as group:
        shared = Coalescer(group, window=10 * unit)
        with pytest.raises(Overloaded):
            await shared.backend(KEY, backend)()
        start = anyio.current_time()
        with pytest.raises(Overloaded, match="busy") as info:
            await shared.backend(KEY, backend)()
        assert anyio.current_time() - start < 0.5 * unit  # at once, not another generation
        assert info.value.status_code == 422
        await anyio.sleep(11 * unit)
        with pytest.raises(Overloaded):
            await shared.backend(KEY, backend)()
        group.cancel_scope.cancel()
    assert backend.calls == 2


@pytest.mark.parametrize("status", [429, 500, 503, 529])
async def test_a_transient_failure_is_retried_by_a_streaming_retry(
    unit: float, status: int
) -> None:
    """A streaming retry (Codex's) after a 5xx, 429 or overload may succeed: it reaches the
    backend again."""

    class Transient(Exception):
        status_code = status

    backend = Backend(delay=unit, error=Transient("try again"))
    async with anyio.create_task_group() as group:
        shared = Coalescer(group, window=10 * unit)
        for _ in range(2):
            with pytest.raises(Transient):
                await shared.backend(KEY, backend, stream=True)()
        group.cancel_scope.cancel()
    assert backend.calls == 2


async def test_a_transient_failure_answers_the_non_streaming_resend_of_a_stream(
    unit: float,
) -> None:
    """Claude Code re-sends a streamed turn without streaming after a mid-stream error: that
    re-send gets the same failure at once (one generation, not two); a non-streaming request
    that failed is not re-served to its non-streaming retry."""

    class Transient(Exception):
        status_code = 500

    backend = Backend(delay=unit, error=Transient("boom"))
    async with anyio.create_task_group() as group:
        shared = Coalescer(group, window=10 * unit)
        with pytest.raises(Transient):
            await shared.backend(KEY, backend, stream=True)()
        start = anyio.current_time()
        with pytest.raises(Transient):
            await shared.backend(KEY, backend, stream=False)()
        assert anyio.current_time() - start < 0.5 * unit
        assert backend.calls == 1
        other = b"another request"
        for _ in range(2):
            with pytest.raises(Transient):
                await shared.backend(other, backend, stream=False)()
        group.cancel_scope.cancel()
    assert backend.calls == 3


async def test_a_delivered_answer_is_never_replayed(unit: float) -> None:
    """A request repeated after its answer was delivered is a new question: a new call."""
    backend = Backend(delay=unit)
    async with anyio.create_task_group() as group:
        shared = Coalescer(group, window=10 * unit)
        assert await shared.backend(KEY, backend)() == {"answer": 1}
        assert await shared.backend(KEY, backend)() == {"answer": 2}
    assert backend.calls == 2


async def test_an_answer_that_came_after_its_client_left_goes_to_the_retry(unit: float) -> None:
    """The call finished while abandoned (within the linger): kept for the window."""
    backend = Backend(delay=2.5 * unit)
    async with anyio.create_task_group() as group:
        shared = Coalescer(group, linger=0.9 * unit, window=10 * unit)
        with anyio.move_on_after(2 * unit):
            await shared.backend(KEY, backend)()
        await anyio.sleep(3 * unit)  # the call ended at 2.5, 0.5 into the linger
        assert await shared.backend(KEY, backend)() == {"answer": 1}
        group.cancel_scope.cancel()
    assert backend.calls == 1


async def test_off_calls_the_backend_every_time() -> None:
    """``off``: the backend function is the call itself."""
    backend = Backend(delay=0)
    async with anyio.create_task_group() as group:
        shared = Coalescer(group, mode="off")
        assert shared.backend(KEY, backend) is backend


def test_what_identifies_a_generation() -> None:
    """Dialect, body and credentials; the caller decides what of the body counts (the dialect
    leaves out stream and the output limit)."""
    body = {"messages": ["hi"]}
    assert coalesce_key("anthropic", body, {"x-api-key": "k"}) == KEY
    assert coalesce_key("anthropic", body, {"x-api-key": "other"}) != KEY
    assert coalesce_key("chat", body, {"x-api-key": "k"}) != KEY
    assert coalesce_key("anthropic", {"messages": ["hello"]}, {"x-api-key": "k"}) != KEY


async def test_an_outside_cancellation_fails_every_waiter_cleanly() -> None:
    """The server shutting down cancels the shared call: its waiters get a failure, not None."""
    backend = Backend(delay=3600)
    async with anyio.create_task_group() as outer:
        calls = anyio.create_task_group()
        await calls.__aenter__()
        shared = Coalescer(calls, mode="all")
        outcome: list[Any] = []

        async def wait() -> None:
            try:
                outcome.append(await shared.backend(KEY, backend)())
            except StreamAborted as exc:
                outcome.append(exc)

        outer.start_soon(wait)
        await anyio.wait_all_tasks_blocked()  # the waiter is attached, the call running
        calls.cancel_scope.cancel()
        await calls.__aexit__(None, None, None)
        await anyio.lowlevel.checkpoint()
    assert len(outcome) == 1
    assert isinstance(outcome[0], StreamAborted)


class _CountingGroup:
    """A task starter that records what is started in it."""

    def __init__(self, inner: anyio.abc.TaskGroup) -> None:
        self.inner = inner
        self.started: list[str] = []

    def start_soon(self, func: Any, *args: Any, name: Any = None) -> Any:
        self.started.append(getattr(func, "__name__", repr(func)))
        return self.inner.start_soon(func, *args, name=name)


async def test_a_stream_on_a_shared_call_starts_no_task_of_its_own(unit: float) -> None:
    """The engine starts a coalesced call (``start_call``): the shared call's task is the only
    task, the stream is told the outcome, and the call runs once."""
    from aiostream_synth import SynthesizedStream
    from aiostream_synth._dialects.chat.stream import ChatDialect

    backend = Backend(delay=unit)
    async with anyio.create_task_group() as inner:
        group = _CountingGroup(inner)
        shared = Coalescer(group)
        stream = SynthesizedStream(
            shared.backend(KEY, _chat(backend)),
            ChatDialect(),
            keepalive_interval=3600,
            task_group=group,
        )
        async with stream as frames:
            body = b"".join([frame async for frame in frames])
        shared_calls = list(group.started)
        inner.cancel_scope.cancel()  # the remembered outcome's window
    assert shared_calls == ["_run"]
    assert backend.calls == 1
    assert b'"content":"1"' in body
    assert body.endswith(b"data: [DONE]\n\n")


async def test_a_stream_that_leaves_a_shared_call_lets_it_linger_for_a_retry(unit: float) -> None:
    """Leaving the stream detaches it at once (no wait for the call); the call lingers, and an
    identical request attaching within the linger gets its answer: still one call."""
    from aiostream_synth import SynthesizedStream
    from aiostream_synth._dialects.chat.stream import ChatDialect

    backend = Backend(delay=3 * unit)
    async with anyio.create_task_group() as group:
        shared = Coalescer(group, linger=10 * unit)
        async with SynthesizedStream(
            shared.backend(KEY, _chat(backend)), ChatDialect(), keepalive_interval=3600
        ) as frames:
            await anyio.lowlevel.checkpoint()
            assert frames.abort("client gone")
        retry = await shared.backend(KEY, _chat(backend))()
        group.cancel_scope.cancel()
    assert retry["choices"][0]["message"]["content"] == "1"
    assert backend.calls == 1
    assert shared.attached == 1
    assert backend.cancelled_at is None


async def test_a_stream_joining_a_remembered_failure_is_told_before_its_first_frame() -> None:
    """A deterministic failure is remembered: the next identical stream attaches, is told the
    failure at once, and answers it before commit (an HTTP error, no frames)."""
    from aiostream_synth import BackendError, SynthesizedStream
    from aiostream_synth._dialects.chat.stream import ChatDialect

    class Invalid(Exception):
        status_code = 400
        message = "bad template"

    backend = Backend(delay=0, error=Invalid("bad template"))
    async with anyio.create_task_group() as group:
        shared = Coalescer(group)
        with pytest.raises(Invalid):
            await shared.backend(KEY, backend)()
        stream = SynthesizedStream(shared.backend(KEY, backend), ChatDialect())
        with pytest.raises(BackendError) as failed:
            async with stream as frames:
                async for _ in frames:
                    pass
        group.cancel_scope.cancel()
    assert failed.value.status_code == 400
    assert backend.calls == 1
    assert shared.attached == 1


def _chat(backend: Backend) -> Any:
    """The backend answering a chat completion whose text is its call count."""

    async def call() -> Any:
        answer = await backend()
        return {
            "id": "chatcmpl-1",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": str(answer["answer"])},
                    "finish_reason": "stop",
                }
            ],
        }

    return call


@pytest.mark.parametrize("leaves", [False, True], ids=["told", "leaves"])
async def test_a_finished_stream_on_a_shared_call_is_freed_without_the_collector(
    leaves: bool, unit: float
) -> None:
    """Once told (or gone), the listener lets go of the stream: a finished stream is in no
    reference cycle, so it is freed at once, not by a later (rare, costly) full collection."""
    from aiostream_synth import SynthesizedStream
    from aiostream_synth._dialects.chat.stream import ChatDialect

    backend = Backend(delay=0 if not leaves else 3 * unit)
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        async with anyio.create_task_group() as group:
            shared = Coalescer(group, linger=0)
            async with SynthesizedStream(
                shared.backend(KEY, _chat(backend)), ChatDialect(), keepalive_interval=3600
            ) as frames:
                if leaves:
                    await anyio.lowlevel.checkpoint()
                    assert frames.abort("client gone")
                else:
                    assert b"".join([frame async for frame in frames]).endswith(b"[DONE]\n\n")
            del frames
            group.cancel_scope.cancel()
        gc.collect()
        cycles = [o for o in gc.garbage if isinstance(o, SynthesizedStream)]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert cycles == []


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # BackgroundTasks' own tasks
async def test_an_answer_given_without_waiting_goes_to_its_client_and_is_not_kept() -> None:
    """A new call starts once its first client is attached: started eagerly (Python 3.11+)
    and answering without a wait, it ends before the start returns, and it must not count as
    abandoned (its answer kept, and replayed to the next identical request)."""
    from aiostream_synth import ChatDialect, SynthesizedStream
    from aiostream_synth._engine.tasks import BackgroundTasks

    calls = 0

    async def instant() -> Any:
        nonlocal calls
        calls += 1
        return {
            "id": f"c{calls}",
            "created": 1,
            "model": "m",
            "choices": [{"message": {"content": f"answer {calls}"}, "finish_reason": "stop"}],
        }

    async with BackgroundTasks() as tasks:
        shared = Coalescer(tasks, window=3600)
        assert (await shared.backend(KEY, instant, stream=False)())["id"] == "c1"
        assert (await shared.backend(KEY, instant, stream=False)())["id"] == "c2"
        bodies = []
        for _ in range(2):
            stream = SynthesizedStream(
                shared.backend(KEY, instant), ChatDialect(), keepalive_interval=3600
            )
            async with stream as frames:
                bodies.append(b"".join([frame async for frame in frames]))
        assert shared.in_flight == 0  # nothing remembered: every answer was delivered
        assert shared.attached == 0
    assert calls == 4
    assert b"answer 3" in bodies[0]
    assert b"answer 4" in bodies[1]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # a loop's own task factory
async def test_a_client_leaving_before_the_call_took_its_first_step_still_ends_it() -> None:
    """A loop with a task factory of its own starts the shared call's task late (not
    eagerly): a client that leaves before that first step still starts the linger, which
    cancels the call once it runs, instead of the call running for no one."""
    import asyncio

    from aiostream_synth._engine.tasks import BackgroundTasks

    loop = asyncio.get_running_loop()
    loop.set_task_factory(lambda loop, coro, **kw: asyncio.Task(coro, loop=loop, **kw))
    backend = Backend(delay=3600)
    told: list[BaseException | None] = []
    try:
        async with BackgroundTasks() as tasks:
            shared = Coalescer(tasks, linger=0.01)
            join: Any = shared.backend(KEY, backend)
            listener = join.start_call(lambda result, error: told.append(error))
            assert backend.calls == 0  # the call's task has not begun
            listener.cancel()  # its only client leaves at once
            with anyio.fail_after(60):
                await backend.cancelled.wait()
    finally:
        loop.set_task_factory(None)
    assert backend.calls == 1
    assert len(told) == 1
    assert isinstance(told[0], StreamAborted)
    assert shared.in_flight == 0


class _Fleet:
    """Other processes sharing a store, as the coalescer sees them: what it was told of its
    calls, and what a look-up finds (``outcome``; after ``release`` when one is given)."""

    def __init__(self, outcome: Any = None, release: anyio.Event | None = None) -> None:
        self.told: list[tuple[Any, ...]] = []
        self.looked_up = 0
        self.outcome = outcome
        self.release = release
        self.over = anyio.Event()

    def started(self, key: bytes, stream: bool) -> str:
        self.told.append(("started", stream))
        return "g1"

    def waiting(self, key: bytes, generation: str, busy: bool) -> None:
        self.told.append(("waiting", generation, busy))

    def ended(
        self, key: bytes, generation: str, result: Any, error: Any, share: str, joined: bool
    ) -> None:
        self.told.append(("ended", generation, share, joined))
        self.over.set()

    def may_share(self, key: bytes) -> bool:
        return True  # announced: every request is looked up

    async def follow(self, key: bytes, mode: str, stream: bool) -> Any:
        self.looked_up += 1
        if self.release is not None:
            await self.release.wait()
        return self.outcome


async def test_a_call_is_told_to_the_other_processes_and_a_client_there_holds_it(
    unit: float,
) -> None:
    """Across processes: a new call is looked up elsewhere first, then told (started, its
    client gone, its end); a client of another process that joined it counts as a client (the
    call outlives the linger for it), and its leaving starts the linger again."""
    from aiostream_synth import SynthesizedStream
    from aiostream_synth._dialects.chat.stream import ChatDialect

    fleet = _Fleet()
    backend = Backend(delay=3 * unit)
    async with anyio.create_task_group() as group:
        shared = Coalescer(group, linger=unit, shared=fleet)
        async with SynthesizedStream(
            shared.backend(KEY, _chat(backend)), ChatDialect(), keepalive_interval=3600
        ) as frames:
            while not fleet.told:  # the look-up, then the call's start
                await anyio.lowlevel.checkpoint()
            assert frames.abort("client gone")
        shared.joined_elsewhere(KEY, "g1")
        shared.joined_elsewhere(KEY, "other")  # another call's generation: nothing happens
        await fleet.over.wait()
        shared.left_elsewhere(KEY, "g1")  # after the end: nothing to linger for
        group.cancel_scope.cancel()
    assert fleet.looked_up == 1
    assert fleet.told == [
        ("started", True),
        ("waiting", "g1", False),
        ("ended", "g1", "", True),  # a client (elsewhere) took it: nothing to keep
    ]
    assert backend.calls == 1
    assert backend.cancelled_at is None  # held past the linger by the client elsewhere


async def test_a_stream_takes_the_outcome_of_a_call_elsewhere_and_can_leave_while_looking(
    unit: float,
) -> None:
    """A look-up that finds a call elsewhere: the stream renders its outcome, and the backend
    is never called here; a stream that leaves while the look-up waits is told at once."""
    from aiostream_synth import SynthesizedStream
    from aiostream_synth._dialects.chat.stream import ChatDialect

    backend = Backend(delay=0)
    answer = {
        "id": "c9",
        "object": "chat.completion",
        "created": 0,
        "model": "m",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "from elsewhere"},
                     "finish_reason": "stop"}],
    }  # fmt: skip
    release = anyio.Event()
    async with anyio.create_task_group() as group:
        shared = Coalescer(group, shared=_Fleet(outcome=lambda: answer))
        async with SynthesizedStream(
            shared.backend(KEY, _chat(backend)), ChatDialect(), keepalive_interval=3600
        ) as frames:
            body = b"".join([frame async for frame in frames])
        waiting = Coalescer(group, shared=_Fleet(release=release))
        async with SynthesizedStream(
            waiting.backend(KEY, _chat(backend)), ChatDialect(), keepalive_interval=3600
        ) as frames:
            await anyio.lowlevel.checkpoint()
            assert frames.abort("client gone")
        release.set()
        group.cancel_scope.cancel()
    assert b"from elsewhere" in body
    assert shared.attached_elsewhere == 1
    assert backend.calls == 0


async def test_a_client_elsewhere_that_leaves_lets_the_call_linger_out(unit: float) -> None:
    """The last client, in another process, leaves: the call lingers, then is cancelled (and
    told ended with nothing to share: nothing ran to its end)."""
    fleet = _Fleet()
    backend = Backend(delay=100 * unit)
    async with anyio.create_task_group() as group:
        shared = Coalescer(group, linger=unit, shared=fleet)
        with anyio.move_on_after(0):  # the client here leaves at once
            await shared.backend(KEY, backend)()
        shared.joined_elsewhere(KEY, "g1")
        shared.left_elsewhere(KEY, "g1")
        await backend.cancelled.wait()
        await fleet.over.wait()
        group.cancel_scope.cancel()
    assert fleet.told[-1] == ("ended", "g1", "", True)
    assert ("waiting", "g1", False) in fleet.told
    assert backend.calls == 1
