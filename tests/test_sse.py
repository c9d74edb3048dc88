"""SSE framing shared by every dialect."""

from __future__ import annotations

import pytest

from aiostream_synth.errors import InvalidSSEFieldError
from aiostream_synth.sse import DONE_FRAME, comment_frame, data_frame, event_frame

from .support.sse_parser import comments, parse


def test_data_frame_is_one_compact_utf8_data_line() -> None:
    """A dict becomes compact UTF-8 JSON on one data line; bytes pass through as they are."""
    frame = data_frame({"a": "héllo ✓", "b": [1, 2], "c": "line\nbreak"})
    assert frame == 'data: {"a":"héllo ✓","b":[1,2],"c":"line\\nbreak"}\n\n'.encode()
    assert data_frame(b'{"x":1}') == b'data: {"x":1}\n\n'
    (event,) = parse(frame)
    assert event.event == "message"
    assert event.json()["c"] == "line\nbreak"


def test_event_frame_has_event_and_optional_id() -> None:
    """event: line, optional id: line, one data: line; parsers see name, id and data."""
    (event,) = parse(event_frame("response.created", {"type": "response.created"}, event_id="7"))
    assert (event.event, event.id, event.json()) == (
        "response.created",
        "7",
        {"type": "response.created"},
    )
    assert event_frame("x", b"{}") == b"event: x\ndata: {}\n\n"


@pytest.mark.parametrize(
    ("name", "event_id"), [("bad\nname", None), ("ok", "bad\rid"), ("a\r\nb", None)]
)
def test_cr_or_lf_in_event_names_and_ids_is_a_clear_error(name: str, event_id: str | None) -> None:
    """A CR or LF would break the framing: InvalidSSEFieldError, a ValueError."""
    with pytest.raises(InvalidSSEFieldError, match="must not contain CR or LF") as info:
        event_frame(name, {}, event_id=event_id)
    assert isinstance(info.value, ValueError)


def test_comment_frames_are_ignored_by_parsers() -> None:
    """Each line of a comment is its own comment line; a parser dispatches no event."""
    frame = comment_frame("keep-alive\nsecond")
    assert frame == b": keep-alive\n: second\n\n"
    assert parse(frame) == []
    assert comments(frame) == ["keep-alive", "second"]


def test_done_sentinel() -> None:
    """The chat end-of-stream block."""
    assert DONE_FRAME == b"data: [DONE]\n\n"
    assert parse(DONE_FRAME)[0].data == "[DONE]"


def test_unserializable_payloads_are_input_errors() -> None:
    """A value orjson cannot encode is the library's clear error, not a TypeError."""
    from aiostream_synth.errors import InvalidResultError

    with pytest.raises(InvalidResultError, match="not JSON-serializable"):
        data_frame({"x": object()})
