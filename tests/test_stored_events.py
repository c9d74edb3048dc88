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
