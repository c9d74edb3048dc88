"""The engine: keepalive ⟂ backend on anyio, on asyncio and trio."""

from __future__ import annotations

import contextvars
import json
import math
from typing import Any

import anyio
import pytest

from aiostream_synth import (
    BackendError,
    ChatDialect,
    ResponsesDialect,
    StreamOutcome,
    SynthesizedStream,
)
from aiostream_synth._dialects.chat.synthesis import chat_frames

from .support.sse_parser import comments, parse

pytestmark = pytest.mark.anyio

COMPLETION = {
    "id": "c1",
    "created": 1,
    "model": "m",
    "choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}],
}
RESULT = {
    "id": "resp_backend",
    "object": "response",
    "created_at": 1,
    "model": "m",
    "status": "completed",
    "output": [
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "hi", "annotations": []}],
        }
    ],
    "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
}
INTERVAL = 0.05


class Gate:
    """A backend that answers only when the test opens the gate; records cancellation."""

    def __init__(self, result: Any = None, error: Exception | None = None) -> None:
        self.open = anyio.Event()
        self.started = anyio.Event()
        self.cancelled = False
        self.result = result
        self.error = error

    async def __call__(self) -> Any:
        self.started.set()
        try:
            await self.open.wait()
        except anyio.get_cancelled_exc_class():
            self.cancelled = True
            raise
        if self.error is not None:
            raise self.error
        return self.result


async def _collect(
    stream: SynthesizedStream, gate: Gate | None = None, after: int = 0
) -> list[bytes]:
    frames = []
    async for frame in stream:
        frames.append(frame)
        if gate is not None and len(frames) == after:
            gate.open.set()
    return frames


async def test_result_before_first_tick_is_just_the_stream() -> None:
    """Lazy commit: a fast backend gives the plain synthesized stream, no keepalive."""

    async def backend() -> Any:
        return COMPLETION

    async with SynthesizedStream(backend, ChatDialect(), keepalive_interval=3600) as stream:
        frames = await _collect(stream)
    assert frames[-1] == b"data: [DONE]\n\n"
    assert not comments(b"".join(frames))
    assert stream.keepalives_sent == 0


async def test_failure_before_commit_raises_typed_error() -> None:
    """A fast failure raises BackendError with the status and an OpenAI-shaped body, unwrapped."""

    class RateLimited(Exception):
        status_code = 429

    async def backend() -> Any:
        raise RateLimited("slow down, try again in 20s")

    with pytest.raises(BackendError) as info:
        async with SynthesizedStream(
            backend, ResponsesDialect(), keepalive_interval=3600
        ) as stream:
            await _collect(stream)
    assert info.value.status_code == 429
    assert info.value.body["error"]["code"] == "rate_limit_exceeded"
    assert "try again in 20s" in info.value.body["error"]["message"]
    assert isinstance(info.value.__cause__, RateLimited)


async def test_chat_keepalive_comments_then_chunks() -> None:
    """Each tick a ': keep-alive' comment while waiting, then the chunks and [DONE]."""
    gate = Gate(COMPLETION)
    async with SynthesizedStream(gate, ChatDialect(), keepalive_interval=INTERVAL) as stream:
        frames = await _collect(stream, gate, after=3)
    assert frames[:3] == [b": keep-alive\n\n"] * 3
    assert stream.keepalives_sent == 3
    assert [e.json()["choices"][0]["delta"] for e in parse(b"".join(frames))[:-1]][1] == {
        "content": "hi"
    }


async def test_chat_keepalive_none_never_commits_early() -> None:
    """keepalive='none' sends nothing while waiting, so a late failure is still an HTTP error."""
    gate = Gate(error=RuntimeError("late"))

    async def opener() -> None:
        await gate.started.wait()
        await anyio.sleep(INTERVAL * 3)
        gate.open.set()

    errors: list[BackendError] = []

    async def consume() -> None:
        with pytest.raises(BackendError) as info:
            async with SynthesizedStream(
                gate, ChatDialect(keepalive="none"), keepalive_interval=INTERVAL
            ) as stream:
                await _collect(stream)
        errors.append(info.value)

    async with anyio.create_task_group() as tg:
        tg.start_soon(opener)
        tg.start_soon(consume)
    (error,) = errors
    assert error.status_code == 500


async def test_responses_keepalive_events_then_continuation() -> None:
    """created at the first tick, in_progress each tick, then the remainder: one id, numbered from 0."""
    gate = Gate(RESULT)
    async with SynthesizedStream(
        gate, ResponsesDialect(base={"model": "m"}), keepalive_interval=INTERVAL
    ) as stream:
        frames = await _collect(stream, gate, after=3)
    events = [e.json() for e in parse(b"".join(frames))]
    assert [e["type"] for e in events[:3]] == [
        "response.created",
        "response.in_progress",
        "response.in_progress",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    ids = {e["response"]["id"] for e in events if "response" in e}
    assert ids == {stream.response_id}
    assert events[-1]["type"] == "response.completed"
    # two ticks, three keepalive frames (the first tick opens the stream with two events)
    assert (stream.keepalives_sent, stream.keepalive_frames_sent) == (2, 3)
    assert events[0]["response"]["model"] == "m"


async def test_failure_after_commit_is_a_terminal_event() -> None:
    """After commit: Responses error + response.failed; chat one error frame, no [DONE]."""
    gate = Gate(error=TimeoutError("upstream read timeout"))
    async with SynthesizedStream(gate, ResponsesDialect(), keepalive_interval=INTERVAL) as stream:
        frames = await _collect(stream, gate, after=2)
    events = [e.json() for e in parse(b"".join(frames))]
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    assert events[-1]["response"]["error"]["code"] == "server_error"
    assert "timed out" in events[-1]["response"]["error"]["message"]

    gate = Gate(error=ValueError("maximum context length is 8192 tokens"))
    async with SynthesizedStream(gate, ChatDialect(), keepalive_interval=INTERVAL) as stream:
        frames = await _collect(stream, gate, after=1)
    last = parse(frames[-1])[0].json()
    assert last["error"]["code"] == "context_length_exceeded"
    assert b"[DONE]" not in b"".join(frames)


class _Reported(Exception):
    """A failure the backend reports (a status), whose text the client is told."""

    status_code = 500


@pytest.mark.parametrize("committed", [False, True], ids=["before commit", "after commit"])
async def test_a_message_utf8_cannot_carry_still_ends_cleanly(committed: bool) -> None:
    """An exception message with a lone surrogate (built from undecodable bytes) still gives
    the terminal event or the HTTP error, the surrogate replaced, in both dialects."""
    for dialect in (ResponsesDialect(), ChatDialect()):
        gate = Gate(error=_Reported("bad \udcff byte"))
        with anyio.fail_after(10):
            async with SynthesizedStream(gate, dialect, keepalive_interval=INTERVAL) as stream:
                if committed:
                    frames = await _collect(stream, gate, after=1)
                    last = parse(frames[-1])[-1].json()
                    error = last["response"]["error"] if "response" in last else last["error"]
                else:
                    gate.open.set()
                    with pytest.raises(BackendError) as info:
                        await _collect(stream)
                    error = info.value.body["error"]
        assert error["message"] == "bad \ufffd byte"


async def test_deadline_cancels_the_backend_and_fails_the_stream(exact_timing: bool) -> None:
    """The total timeout cancels the backend; after commit it ends with a terminal failure.
    The deadline (2.5 intervals) is not a tick: it adds no keepalive of its own."""
    gate = Gate(RESULT)
    async with SynthesizedStream(
        gate,
        ResponsesDialect(fidelity="minimal"),
        keepalive_interval=INTERVAL,
        timeout=INTERVAL * 2.5,
    ) as stream:
        frames = await _collect(stream)
    assert gate.cancelled
    assert stream.keepalives_sent == 2 if exact_timing else 1 <= stream.keepalives_sent <= 2
    events = [e.json() for e in parse(b"".join(frames))]
    assert events[-1]["type"] == "response.failed"
    assert "timed out" in events[-1]["response"]["error"]["message"]


async def test_consumer_that_stops_cancels_the_backend() -> None:
    """Leaving the context after N frames cancels the backend (it observes it); no task is left."""
    gate = Gate(RESULT)
    async with SynthesizedStream(gate, ResponsesDialect(), keepalive_interval=INTERVAL) as stream:
        async for _ in stream:
            if stream.keepalives_sent == 2:
                break
    assert gate.cancelled


async def test_finish_policy_hands_the_result_to_the_callback() -> None:
    """on_disconnect='finish' lets the backend complete and reports its outcome."""
    gate = Gate(RESULT)
    outcomes: list[StreamOutcome] = []

    async with anyio.create_task_group() as tg:

        async def consume() -> None:
            async with SynthesizedStream(
                gate,
                ResponsesDialect(),
                keepalive_interval=INTERVAL,
                on_disconnect="finish",
                on_abandoned=outcomes.append,
            ) as stream:
                async for _ in stream:
                    break

        tg.start_soon(consume)
        await gate.started.wait()
        await anyio.sleep(INTERVAL * 2)
        gate.open.set()
    assert not gate.cancelled
    assert outcomes == [StreamOutcome(RESULT, None)]


async def test_finish_policy_is_bounded_by_its_deadline() -> None:
    """A backend that never finishes is cancelled when finish_timeout runs out."""
    gate = Gate(RESULT)
    outcomes: list[StreamOutcome] = []
    async with SynthesizedStream(
        gate,
        ChatDialect(),
        keepalive_interval=INTERVAL,
        on_disconnect="finish",
        finish_timeout=INTERVAL,
        on_abandoned=outcomes.append,
    ) as stream:
        async for _ in stream:
            break
    assert gate.cancelled
    assert outcomes == []


async def test_consumer_that_never_reads_gets_nothing_produced() -> None:
    """Backpressure: no frame is produced unless asked for, however long the wait."""
    gate = Gate(COMPLETION)
    async with SynthesizedStream(gate, ChatDialect(), keepalive_interval=INTERVAL) as stream:
        await gate.started.wait()
        await anyio.sleep(INTERVAL * 5)
        assert not stream.committed
        assert stream.keepalives_sent == 0
        assert not stream._pending
        frame = await stream.__anext__()
    assert frame == b": keep-alive\n\n"


async def test_keepalive_spacing_on_the_mock_clock(anyio_backend: Any) -> None:
    """On trio's MockClock, ticks land exactly on the interval grid (no real time spent)."""
    if anyio_backend == "asyncio":
        pytest.skip("exact spacing is checked on trio's MockClock; asyncio checks counts above")
    gate = Gate(COMPLETION)
    times = []
    async with SynthesizedStream(gate, ChatDialect(), keepalive_interval=10.0) as stream:
        start = anyio.current_time()
        async for frame in stream:
            if frame.startswith(b":"):
                times.append(anyio.current_time() - start)
                if len(times) == 5:
                    gate.open.set()
        ended = anyio.current_time() - start
    assert times == pytest.approx([10.0, 20.0, 30.0, 40.0, 50.0])
    assert ended == pytest.approx(50.0)  # the result woke the tick sleep, no sixth interval


async def test_a_client_that_waited_a_whole_interval_gets_its_first_tick_at_once() -> None:
    """``waiting_since`` intervals ago (a request that queued in a busy server): the first
    keepalive is due on entry, not an hour later; the next one on its phase (an hour on, here),
    not at once to make up for the queueing."""
    gate = Gate(COMPLETION)
    hour = 3600.0
    with anyio.fail_after(60):  # a first tick an interval after entry would be an hour away
        async with SynthesizedStream(
            gate,
            ChatDialect(),
            keepalive_interval=hour,
            waiting_since=anyio.current_time() - 3 * hour,
        ) as stream:
            first = await stream.__anext__()
            assert first == b": keep-alive\n\n"
            assert stream.committed
            with anyio.move_on_after(0.2) as second:
                await stream.__anext__()
            assert second.cancelled_caught  # nothing more for the rest of the hour
            gate.open.set()
            rest = [frame async for frame in stream]
    assert stream.keepalives_sent == 1
    assert rest[-1] == b"data: [DONE]\n\n"


@pytest.mark.parametrize("intervals_overdue", [1, 2])
async def test_an_overdue_first_tick_comes_at_once_and_keeps_its_phase(
    intervals_overdue: int,
) -> None:
    """The first tick overdue (a stream entered late, as a background stream that sends its
    first events at once), by less than an interval or by more: it comes on entry, and the next
    one on the grid of ``waiting_since`` (a moment away here), not an interval after entry (an
    hour: the 60 s limit). Streams of one wave that were entered over a second or two keep
    ticking together, one wake-up of the loop for all of them."""
    gate = Gate(COMPLETION)
    hour, moment = 3600.0, 0.2
    due = intervals_overdue + 1  # the grid point just ahead of entry, in intervals from ``since``
    # the first tick (``since`` + an hour) was due ``intervals_overdue`` hours less a moment ago
    since = anyio.current_time() - due * hour + moment
    with anyio.fail_after(60):
        async with SynthesizedStream(
            gate, ChatDialect(), keepalive_interval=hour, waiting_since=since
        ) as stream:
            assert await stream.__anext__() == b": keep-alive\n\n"
            assert await stream.__anext__() == b": keep-alive\n\n"
            second = anyio.current_time()
            gate.open.set()
            rest = [frame async for frame in stream]
    assert since + due * hour - 1e-6 <= second < since + (due + 0.5) * hour
    assert stream.keepalives_sent == 2
    assert rest[-1] == b"data: [DONE]\n\n"


async def test_a_late_tick_is_followed_by_the_next_one_on_its_grid(anyio_backend: Any) -> None:
    """A reader that comes back two and a half intervals late (backpressure: nothing is
    produced while it is away) gets one tick at once, then the next on the stream's grid half
    an interval later, not a tick at once again and a grid of its own. (trio's MockClock: the
    times are exact.)"""
    if anyio_backend == "asyncio":
        pytest.skip("exact times are checked on trio's MockClock")
    gate = Gate(COMPLETION)
    times = []
    async with SynthesizedStream(gate, ChatDialect(), keepalive_interval=10.0) as stream:
        start = anyio.current_time()
        async for _ in stream:
            times.append(anyio.current_time() - start)
            if len(times) == 1:
                await anyio.sleep(25.0)  # away: the ticks at 20 and 30 are missed
            if len(times) == 4:
                gate.open.set()
    assert times[:4] == pytest.approx([10.0, 35.0, 40.0, 50.0])


async def _first_tick_at(interval: float, waiting_since: float) -> float:
    """When (anyio's clock) the first keepalive came (then the stream is finished)."""
    gate = Gate(COMPLETION)
    async with SynthesizedStream(
        gate, ChatDialect(), keepalive_interval=interval, waiting_since=waiting_since
    ) as stream:
        with anyio.fail_after(60):  # an hour on either clock when it is counted wrong
            assert await stream.__anext__() == b": keep-alive\n\n"
        fired = anyio.current_time()
        gate.open.set()
        async for _ in stream:
            pass
    return fired


async def test_the_first_tick_is_due_an_interval_after_the_client_began_waiting() -> None:
    """A client that has waited all but a moment of the hour gets its first keepalive that
    moment after it was stamped: not an hour later (the 60 s limit), and not before it is due.
    (Counted from the stamp, not from entry: entering takes time on a busy machine.)"""
    hour, moment = 3600.0, 0.05
    stamped = anyio.current_time()
    fired = await _first_tick_at(hour, stamped - hour + moment)
    assert fired >= stamped + moment - 1e-6


async def test_a_waiting_since_in_the_future_counts_as_now() -> None:
    """A stamp later than entry (another clock's reading) delays nothing: the first keepalive
    is due an interval after entry (not an hour later: the 60 s limit), and not before."""
    before_entry = anyio.current_time()
    fired = await _first_tick_at(INTERVAL, before_entry + 3600)
    assert fired >= before_entry + INTERVAL - 1e-6


@pytest.mark.parametrize("shared", [False, True], ids=["own group", "shared group"])
async def test_caller_contextvars_reach_the_backend(shared: bool) -> None:
    """The backend runs with a copy of the caller's context, also in a group opened elsewhere."""
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var")

    async def backend() -> Any:
        return {**COMPLETION, "model": var.get()}

    async with anyio.create_task_group() as host:
        var.set("from caller")
        async with SynthesizedStream(
            backend, ChatDialect(), keepalive_interval=3600, task_group=host if shared else None
        ) as stream:
            frames = await _collect(stream)
    assert json.loads(frames[0][len(b"data: ") :])["model"] == "from caller"


async def test_invalid_result_after_commit_is_a_terminal_failure() -> None:
    """A backend result of the wrong shape fails the stream cleanly, never truncates it."""
    gate = Gate({"output": "not a list"})
    async with SynthesizedStream(gate, ResponsesDialect(), keepalive_interval=INTERVAL) as stream:
        frames = await _collect(stream, gate, after=1)
    assert parse(frames[-1])[0].json()["type"] == "response.failed"


async def test_consumer_exception_propagates_unwrapped() -> None:
    """An error in the caller's body is not wrapped in an exception group."""
    gate = Gate(RESULT)
    with pytest.raises(KeyError):
        async with SynthesizedStream(gate, ChatDialect(), keepalive_interval=INTERVAL):
            await gate.started.wait()
            raise KeyError("consumer bug")
    assert gate.cancelled


def test_bad_options_are_rejected() -> None:
    """Non-positive interval, unknown policy or a NaN arrival: ValueError at construction."""

    async def backend() -> Any:
        return {}

    with pytest.raises(ValueError, match="keepalive_interval"):
        SynthesizedStream(backend, ChatDialect(), keepalive_interval=0)
    with pytest.raises(ValueError, match="on_disconnect"):
        SynthesizedStream(backend, ChatDialect(), on_disconnect="ignore")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="waiting_since"):
        SynthesizedStream(backend, ChatDialect(), waiting_since=math.nan)


async def test_responses_comment_keepalive_still_opens_with_created() -> None:
    """keepalive='comment': comments while waiting, then a complete stream starting at created."""
    gate = Gate(RESULT)
    async with SynthesizedStream(
        gate, ResponsesDialect(keepalive="comment"), keepalive_interval=INTERVAL
    ) as stream:
        frames = await _collect(stream, gate, after=2)
    assert frames[:2] == [b": keep-alive\n\n"] * 2
    events = [e.json() for e in parse(b"".join(frames[2:]))]
    assert events[0]["type"] == "response.created"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


async def test_drain_ready_hands_over_what_is_already_synthesized() -> None:
    """After one frame, drain_ready returns the rest of that batch in order, then nothing."""

    async def backend() -> Any:
        return COMPLETION

    async with SynthesizedStream(backend, ChatDialect(), keepalive_interval=3600) as stream:
        first = await stream.__anext__()
        exhausted_before = stream.exhausted  # False: the rest of the batch is still pending
        rest = stream.drain_ready()
        assert (exhausted_before, stream.exhausted) == (False, True)
        assert stream.drain_ready() == []
        with pytest.raises(StopAsyncIteration):
            await stream.__anext__()
    frames = [first, *rest]
    assert frames == list(chat_frames(COMPLETION))


class Tracked(Gate):
    """A gate that also records whether its call has ended (returned, raised or cancelled)."""

    def __init__(self, result: Any = None) -> None:
        super().__init__(result)
        self.ended = False

    async def __call__(self) -> Any:
        try:
            return await super().__call__()
        finally:
            self.ended = True


async def test_shared_task_group_streams_like_its_own() -> None:
    """Backend tasks spawned into a caller's task group give the same frames, numbered alike."""
    gate = Gate(RESULT)
    async with (
        anyio.create_task_group() as host,
        SynthesizedStream(
            gate,
            ResponsesDialect(base={"model": "m"}, response_id="resp_x"),
            keepalive_interval=INTERVAL,
            task_group=host,
        ) as stream,
    ):
        frames = await _collect(stream, gate, after=2)
    events = [e.json() for e in parse(b"".join(frames))]
    assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
    assert events[-1]["type"] == "response.completed"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert {e["response"]["id"] for e in events if "response" in e} == {"resp_x"}


async def test_shared_task_group_stream_does_not_outlive_its_backend() -> None:
    """Leaving early cancels the backend task and waits for it; the host group is untouched."""
    gate = Tracked(RESULT)
    async with anyio.create_task_group() as host:
        async with SynthesizedStream(
            gate, ChatDialect(), keepalive_interval=INTERVAL, task_group=host
        ) as stream:
            async for _ in stream:
                break
        assert gate.cancelled
        assert gate.ended
        assert not host.cancel_scope.cancel_called


async def test_shared_task_group_finish_policy_reports_the_outcome() -> None:
    """Under 'finish' the abandoned backend still completes and is reported, then the context ends."""
    gate = Tracked(COMPLETION)
    outcomes: list[StreamOutcome] = []
    left = anyio.Event()
    async with anyio.create_task_group() as host:

        async def consume() -> None:
            async with SynthesizedStream(
                gate,
                ChatDialect(),
                keepalive_interval=INTERVAL,
                on_disconnect="finish",
                on_abandoned=outcomes.append,
                task_group=host,
            ) as stream:
                async for _ in stream:  # a keepalive: the gate is still shut
                    left.set()
                    break
            assert gate.ended

        host.start_soon(consume)
        await left.wait()
        gate.open.set()
    assert not gate.cancelled
    assert outcomes == [StreamOutcome(COMPLETION, None)]


async def test_backend_cancelled_from_outside_fails_cleanly() -> None:
    """A shared group (another task's, as a server lifespan's) cancelled under a waiting stream:
    the consumer gets a 503 before commit, never a synthesis of a missing result."""
    gate = Gate(RESULT)

    async def run_host(*, task_status: anyio.abc.TaskStatus[anyio.abc.TaskGroup]) -> None:
        async with anyio.create_task_group() as host:
            task_status.started(host)
            await anyio.sleep_forever()

    async def cancel_host(host: anyio.abc.TaskGroup) -> None:
        await gate.started.wait()
        host.cancel_scope.cancel()

    async with anyio.create_task_group() as outer:
        host = await outer.start(run_host)
        outer.start_soon(cancel_host, host)
        with pytest.raises(BackendError) as info:
            async with SynthesizedStream(
                gate, ChatDialect(keepalive="none"), keepalive_interval=3600, task_group=host
            ) as stream:
                await _collect(stream)
    assert gate.cancelled
    assert info.value.status_code == 503


async def test_deadline_during_finish_policy_is_a_reported_timeout() -> None:
    """A consumer gone under 'finish': the backend's deadline still ends it, as a timeout."""
    gate = Gate(RESULT)
    outcomes: list[StreamOutcome] = []
    async with SynthesizedStream(
        gate,
        ResponsesDialect(),
        keepalive_interval=INTERVAL,
        timeout=INTERVAL * 2,
        on_disconnect="finish",
        finish_timeout=3600,
        on_abandoned=outcomes.append,
    ) as stream:
        async for _ in stream:
            break
    assert gate.cancelled
    (outcome,) = outcomes
    assert isinstance(outcome.error, TimeoutError)


@pytest.mark.parametrize("fails", [False, True], ids=["completed", "failed"])
async def test_a_stream_opened_by_keepalives_keeps_its_created_at(fails: bool) -> None:
    """Issue 37: response.created said when the response was created; the terminal event says
    the same, whatever the result's own created_at (1 here) or a failure's fresh envelope."""
    gate = Gate(RESULT, error=_Reported("late") if fails else None)
    with anyio.fail_after(10):
        async with SynthesizedStream(
            gate, ResponsesDialect(), keepalive_interval=INTERVAL
        ) as stream:
            frames = await _collect(stream, gate, after=1)
    events = [e.json() for e in parse(b"".join(frames))]
    created = [e["response"]["created_at"] for e in events if "response" in e]
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] == ("response.failed" if fails else "response.completed")
    assert len(set(created)) == 1
    assert created[0] != 1
