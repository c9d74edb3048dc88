"""What a store learns of each event of a background Responses stream (its number, whether it
ends the response, the response it carries, a keepalive's template) without parsing every
frame: the quick reading must say what a full parse of the frame says, for any answer."""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiostream_synth._dialects.responses.stored import RESPONSES_STORAGE
from aiostream_synth._dialects.responses.stream import ResponsesDialect
from aiostream_synth._dialects.responses.synthesis import responses_frames
from aiostream_synth._serving.background import BackgroundResponses, _Generation, _Live
from aiostream_synth._wire.failures import Failure

from .support.properties import property_settings

#: Text that tries to look like the end of an event's payload.
_TRICKY = st.sampled_from(['","sequence_number":7}', ',"sequence_number":', "}\n\n", '"', "\\"])
_TEXT = st.lists(st.one_of(st.text(max_size=20), _TRICKY), max_size=4).map("".join)


@st.composite
def _results(draw: st.DrawFn) -> dict[str, Any]:
    output: list[dict[str, Any]] = []
    if draw(st.booleans()):
        summary = [{"type": "summary_text", "text": draw(_TEXT)}]
        output.append({"type": "reasoning", "id": "rs_1", "summary": summary})
    part = {"type": "output_text", "text": draw(_TEXT), "annotations": []}
    output.append({"type": "message", "id": "msg_1", "role": "assistant", "content": [part]})
    for k in range(draw(st.integers(0, 2))):
        arguments = json.dumps({"q": draw(_TEXT)})
        output.append(
            {
                "type": "function_call",
                "id": f"fc_{k}",
                "call_id": f"call_{k}",
                "name": f"tool_{k}",
                "arguments": arguments,
            }
        )
    status = draw(st.sampled_from(["completed", "incomplete"]))
    return {"id": "resp_1", "object": "response", "status": status, "output": output}


def _as_parsed(frame: bytes) -> tuple[int, bool, dict[str, Any] | None]:
    payload = orjson.loads(frame.partition(b"\ndata: ")[2])
    response = payload.get("response")
    terminal = payload["type"] in ("response.completed", "response.incomplete", "response.failed")
    return payload["sequence_number"], terminal, response


@given(
    result=_results(),
    fidelity=st.sampled_from(["full", "minimal"]),
    start=st.integers(0, 10**6),
    delta_chars=st.one_of(st.none(), st.integers(1, 8)),
)
@property_settings(150)
def test_the_quick_reading_says_what_a_full_parse_says(
    result: dict[str, Any], fidelity: Any, start: int, delta_chars: int | None
) -> None:
    frames = responses_frames(
        result, fidelity=fidelity, sequence_start=start, delta_chars=delta_chars
    )
    for frame in frames:
        event = RESPONSES_STORAGE.event(frame)
        assert event is not None
        assert (event.sequence, event.terminal) == _as_parsed(frame)[:2]
        response = _as_parsed(frame)[2]
        if event.response is not None or event.terminal or b"response.created" in frame[:40]:
            assert event.response == response


@st.composite
def _streams(draw: st.DrawFn) -> tuple[list[list[bytes]], list[int | None]]:
    """A background stream's batches as a recorder gets them, and the stream's
    ``run_start`` after each: opened by keepalives (or not), numbering moved on (or not),
    then its result or its failure."""
    dialect = ResponsesDialect(
        response_id="resp_1",
        keepalive="events",
        background=True,
        fidelity=draw(st.sampled_from(["full", "minimal"])),
        delta_chars=draw(st.one_of(st.none(), st.integers(1, 8))),
    )
    stream = dialect.open_stream()
    batches: list[list[bytes]] = []
    runs: list[int | None] = []
    for tick in range(draw(st.integers(0, 3))):
        batches.append(stream.keepalive_frames(float(tick)))
        runs.append(stream.run_start())
        if draw(st.booleans()):
            last = orjson.loads(batches[-1][-1].partition(b"\ndata: ")[2])["sequence_number"]
            stream.skip_to(last + 1 + draw(st.integers(0, 50)))
    if draw(st.booleans()):
        batches.append(stream.result_frames(draw(_results())))
    else:
        message = draw(_TEXT)
        batches.append(stream.failure_frames(Failure(500, "server_error", message or "x")))
    runs.append(stream.run_start())
    return batches, runs


@given(stream=_streams())
@property_settings(150)
def test_a_run_is_what_reading_each_of_its_frames_says(
    stream: tuple[list[list[bytes]], list[int | None]],
) -> None:
    """What ``run_start`` lets a recorder take without reading each frame holds for every
    answer: events numbered on from it, one a frame, no keepalive, only the last one
    carrying the response or ending it. Keepalive batches (and a first batch that opens the
    stream) are never runs."""
    batches, runs = stream
    for k, (frames, run) in enumerate(zip(batches, runs, strict=True)):
        events = [RESPONSES_STORAGE.event(frame) for frame in frames]
        if k < len(batches) - 1 or k == 0:
            assert run is None
            continue
        assert run is not None
        assert [frame.count(b"\n\n") for frame in frames] == [1] * len(frames)
        assert [event.sequence for event in events if event] == list(range(run, run + len(frames)))
        assert all(event is not None and event.keepalive is None for event in events)
        *before, last = events
        assert not any(e is not None and (e.terminal or e.response_json) for e in before)
        assert last is not None
        assert last.terminal
        assert last.response_json is not None


class _Counting:
    """The Responses storage, counting the frames it reads."""

    def __init__(self) -> None:
        self.read = 0

    def event(self, frame: bytes) -> Any:
        self.read += 1
        return RESPONSES_STORAGE.event(frame)


def _recorder() -> tuple[BackgroundResponses, _Live]:
    background = BackgroundResponses(None, keepalive_interval=1.0, timeout=None)  # type: ignore[arg-type]
    return background, _Live("owner", _Generation(_never_called, None), RESPONSES_STORAGE)


async def _never_called() -> None:
    raise AssertionError("not called")


@given(stream=_streams())
@property_settings(150)
def test_a_run_is_recorded_as_its_frames_read_one_by_one_are(
    stream: tuple[list[list[bytes]], list[int | None]],
) -> None:
    """The recorder given a run that follows on from its latest event reads only the run's
    last frame, and records what reading every frame records: the live log, its latest
    number, the object, the end, the store's queue (a run after a gap, numbers skipped
    without their keepalives recorded here, is read frame by frame)."""
    batches, runs = stream
    recorded = []
    for use_runs in (True, False):
        background, live = _recorder()
        storage = _Counting()
        for frames, run in zip(batches, runs, strict=True):
            before, follows = storage.read, run == live.last + 1
            assert background._add("resp_1", live, storage, frames, run if use_runs else None)  # type: ignore[arg-type]
            if use_runs and follows:
                assert storage.read - before == 1  # its last frame alone
        write = background._pending["resp_1"]
        recorded.append(
            (
                live.events,
                live.last,
                live.done,
                live.object_json,
                live.keepalive,
                write.events,
                write.obj,
                write.done,
                write.last,
            )
        )
    assert recorded[0] == recorded[1]
    assert recorded[0][2] is True  # the last batch ended the response


def test_a_keepalive_is_its_template_with_its_number() -> None:
    dialect = ResponsesDialect(response_id="resp_1", keepalive="events", background=True)
    frames = dialect.open_stream()
    created, first = frames.keepalive_frames(0.0)
    later = [frames.keepalive_frames(float(k))[0] for k in range(1, 12)]
    assert RESPONSES_STORAGE.event(created).keepalive is None  # type: ignore[union-attr]
    for number, frame in enumerate([first, *later], start=1):
        event = RESPONSES_STORAGE.event(frame)
        assert event is not None
        assert event.sequence == number
        assert event.keepalive is not None
        prefix, suffix = event.keepalive
        assert prefix + str(number).encode() + suffix == frame
        first_event = RESPONSES_STORAGE.event(first)
        assert first_event is not None
        assert event.keepalive == first_event.keepalive


def test_a_stored_stream_numbers_its_events_on_after_keepalives_rendered_elsewhere() -> None:
    """A background stream's recorder renders its keepalives from the template and moves the
    stream's numbering past them (``skip_to``): the answer's events then follow on, and the
    numbering never goes back."""
    frames = ResponsesDialect(response_id="resp_1", keepalive="events", background=True)
    stream = frames.open_stream()
    assert [RESPONSES_STORAGE.event(f).sequence for f in stream.keepalive_frames(0.0)] == [0, 1]  # type: ignore[union-attr]
    stream.skip_to(5)  # keepalives 2 to 4 went out as the template rendered them
    with pytest.raises(ValueError, match="cannot number the next one 3"):
        stream.skip_to(3)
    numbers = [_as_parsed(frame)[0] for frame in stream.result_frames(_RESULT)]
    assert len(numbers) > 2
    assert numbers == list(range(5, 5 + len(numbers)))


_RESULT = {
    "id": "resp_x",
    "object": "response",
    "status": "completed",
    "output": [
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "hi", "annotations": []}],
        }
    ],
}
