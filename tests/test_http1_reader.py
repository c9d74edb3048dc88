"""The lean server's request reader (``_proxy/http1_reader.py``) without a socket: requests
generated or taken from the conformance corpus, cut anywhere, and bytes that are not HTTP at all.
Whatever the cuts, the reader finds the same requests; whatever the bytes, it raises nothing and
ends in at most one refusal."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiostream_synth._proxy.http1_reader import (
    BodyData,
    Event,
    MessageEnd,
    Refused,
    RequestHead,
    RequestReader,
    UpgradeRefused,
)
from aiostream_synth._proxy.http_defences import HEAD_STEP, MAX_HEAD_BYTES

from .support.http1_cases import CASES
from .support.properties import property_settings

#: CI's budget: 150 examples per property (see tests/support/properties.py for a longer search).
SETTINGS = property_settings(150)


def _clock() -> float:
    return 0.0


def _read(pieces: list[bytes]) -> list[Any]:
    """Every event of ``pieces`` fed in order, consecutive body pieces joined (how the body is
    cut depends on the reads), as comparable tuples."""
    reader = RequestReader(_clock)
    events: list[Event] = []
    for piece in pieces:
        events += reader.feed(piece)
    out: list[Any] = []
    for event in events:
        if isinstance(event, BodyData):
            if out and out[-1][0] == "body":
                out[-1] = ("body", out[-1][1] + event.data)
            else:
                out.append(("body", event.data))
        elif isinstance(event, RequestHead):
            out.append(
                (
                    "head",
                    event.method,
                    event.path,
                    event.raw_path,
                    event.query_string,
                    event.http_version,
                    tuple(event.headers),
                    event.keep_alive,
                    event.expect_continue,
                )
            )
        elif isinstance(event, MessageEnd):
            out.append(("end", tuple(event.trailers)))
        elif isinstance(event, Refused):
            out.append(("refused", event.status))
        else:
            assert isinstance(event, UpgradeRefused)
            out.append(("upgrade",))
    return out


def _cut(wire: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({min(c, len(wire)) for c in cuts})
    return [wire[a:b] for a, b in zip([0, *points], [*points, len(wire)], strict=True) if a < b]


# -- generated requests ---------------------------------------------------------------------------
_TOKEN = st.text(
    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_", min_size=1, max_size=12
)
_VALUE = st.text("abcdefghijklmnopqrstuvwxyz0123456789 ;,=/:.\t", max_size=24).map(str.strip)
_SEGMENT = st.text("abcdefghijklmnopqrstuvwxyz0123456789-._~%2F", min_size=1, max_size=8).filter(
    lambda s: "%" not in s or s.count("%") == s.count("%2F")
)


@st.composite
def _request(draw: st.DrawFn, last: bool) -> tuple[bytes, list[Any]]:
    """One request's bytes and the events it must give."""
    method = draw(st.sampled_from(["GET", "POST", "PUT", "DELETE"]))
    segments = draw(st.lists(_SEGMENT, max_size=3))
    raw_path = "/" + "/".join(segments)
    query = draw(st.one_of(st.just(""), _TOKEN.map(lambda t: f"{t}=1")))
    headers = draw(
        st.lists(st.tuples(_TOKEN, _VALUE), max_size=5).map(
            lambda hs: [
                (n, v)
                for n, v in hs
                if n.lower()
                not in ("content-length", "transfer-encoding", "connection", "expect", "upgrade")
            ]
        )
    )
    trailing = draw(st.sampled_from(["", " ", "\t", " \t "]))  # whitespace a value may end with
    body = draw(st.binary(max_size=300))
    chunked = draw(st.booleans())
    closes = last and draw(st.booleans())
    lines = [f"{method} {raw_path}{'?' + query if query else ''} HTTP/1.1", "Host: t"]
    lines += [f"{name}: {value}{trailing}" for name, value in headers]
    if closes:
        lines.append("Connection: close")
    trailers: list[bytes] = []
    if chunked:
        lines.append("Transfer-Encoding: chunked")
        sizes = draw(st.lists(st.integers(1, 64), max_size=8))
        chunks, start = [], 0
        for size in sizes:
            if start >= len(body):
                break
            chunks.append(body[start : start + size])
            start += size
        if start < len(body):
            chunks.append(body[start:])
        payload = b"".join(b"%x\r\n%b\r\n" % (len(c), c) for c in chunks) + b"0\r\n"
        if draw(st.booleans()):
            payload += b"X-Trailer: t\r\n"
            trailers = [b"X-Trailer"]
        payload += b"\r\n"
    else:
        lines.append(f"Content-Length: {len(body)}")
        payload = body
    wire = ("\r\n".join(lines) + "\r\n\r\n").encode() + payload
    expected_headers = [(b"host", b"t")]
    expected_headers += [(n.lower().encode(), v.encode()) for n, v in headers]
    if closes:
        expected_headers.append((b"connection", b"close"))
    expected_headers.append(
        (b"transfer-encoding", b"chunked") if chunked else (b"content-length", b"%d" % len(body))
    )
    from urllib.parse import unquote

    head = (
        "head",
        method,
        unquote(raw_path),
        raw_path.encode(),
        query.encode(),
        "1.1",
        tuple(expected_headers),
        not closes,
        False,
    )
    events: list[Any] = [head]
    if body:
        events.append(("body", body))
    events.append(("end", tuple(trailers)))
    return wire, events


@st.composite
def _pipeline(draw: st.DrawFn) -> tuple[bytes, list[Any]]:
    count = draw(st.integers(1, 3))
    wire, events = b"", []
    for index in range(count):
        one, expected = draw(_request(last=index == count - 1))
        wire += one
        events += expected
    return wire, events


@SETTINGS
@given(_pipeline(), st.lists(st.integers(0, 2000), max_size=12))
def test_requests_cut_anywhere_give_the_same_events(
    pipeline: tuple[bytes, list[Any]], cuts: list[int]
) -> None:
    """Pipelined requests (content-length or chunked bodies, trailers, values ending in
    whitespace, percent-encoded paths, the last one maybe closing) give the events they
    must, fed whole or cut at any points."""
    wire, expected = pipeline
    assert _read([wire]) == expected
    assert _read(_cut(wire, cuts)) == expected
    assert _read([wire[i : i + 1] for i in range(len(wire))]) == expected  # a byte at a time


@SETTINGS
@given(st.binary(max_size=600), st.lists(st.integers(0, 600), max_size=8))
def test_any_bytes_end_in_at_most_one_refusal_and_raise_nothing(
    data: bytes, cuts: list[int]
) -> None:
    """Bytes that are not HTTP: no exception, requests well formed in order (a head, its body,
    its end), at most one refusal and nothing after it; the same whatever the cuts."""
    whole = _read([data])
    assert _read(_cut(data, cuts)) == whole
    _well_formed(whole)


@SETTINGS
@given(
    st.lists(
        st.sampled_from(
            [
                b"GET / HTTP/1.1\r\n",
                b"Host: t\r\n",
                b"\r\n",
                b"0\r\n",
                b"5\r\n",
                b"hello\r\n",
                b"Transfer-Encoding: chunked\r\n",
                b"HTTP/1.0",
                b"Content-Length: 3\r\n",
                b"abc",
                b"\r\n\r\n",
                b":",
                b" ",
                b"\x00",
                b"POST /x HTTP/1.1\r\n",
                b"Expect: 100-continue\r\n",
                b"Upgrade: h2c\r\nConnection: Upgrade\r\n",
                b"Connection: close\r\n",
            ]
        ),
        max_size=30,
    ),
    st.lists(st.integers(0, 600), max_size=8),
)
def test_near_http_bytes_end_in_at_most_one_refusal_and_raise_nothing(
    parts: list[bytes], cuts: list[int]
) -> None:
    """Fragments of HTTP in any order (closer to a request than random bytes, so the parser
    gets further): the same guarantees."""
    data = b"".join(parts)
    whole = _read([data])
    assert _read(_cut(data, cuts)) == whole
    _well_formed(whole)


def _well_formed(events: list[Any]) -> None:
    state = "between"  # between requests, in one (its head came), or finished (refused)
    for event in events:
        assert state != "finished", f"{event} after a refusal"
        kind = event[0]
        if kind == "refused":
            assert event[1] in (400, 431)
            state = "finished"
        elif kind == "head":
            assert state == "between"
            state = "in"
        elif kind in ("body", "upgrade"):
            assert state == "in"
        else:
            assert kind == "end"
            assert state == "in"
            state = "between"


@SETTINGS
@given(
    st.sampled_from([b"X-Big: ", b"GET /", b"X-A: 1\r\nX-B: "]),
    st.lists(st.integers(1, 70_000), min_size=1, max_size=6),
)
def test_a_head_that_never_ends_is_refused_within_a_step_of_the_limit(
    start: bytes, sizes: list[int]
) -> None:
    """A header value (or a URL) that never ends: a 431 once the head limit came, however the
    bytes are cut, never more than a step of them past it."""
    prefix = b"" if start.startswith(b"GET") else b"GET / HTTP/1.1\r\nHost: t\r\n"
    reader = RequestReader(_clock)
    fed = 0
    refused: list[Event] = []
    reader_events = reader.feed(prefix + start)
    assert not reader_events
    sizes = sizes * (2 * MAX_HEAD_BYTES // sum(sizes) + 2)
    for size in sizes:
        events = reader.feed(b"a" * size)
        fed += size
        refused = [e for e in events if isinstance(e, Refused)]
        if refused:
            break
    assert [(e.status, e.text) for e in refused if isinstance(e, Refused)] == [
        (431, "Request Header Fields Too Large")
    ]
    assert fed <= MAX_HEAD_BYTES + HEAD_STEP + max(sizes)
    assert reader.done
    assert reader.feed(b"GET / HTTP/1.1\r\n\r\n") == []  # nothing is read after a refusal


def test_bytes_after_the_last_request_are_ignored() -> None:
    """After a request that closes the connection, what follows (even a whole request) gives
    no event: that request is answered, nothing after it."""
    close = b"GET / HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
    events = _read([close + b"GET /after HTTP/1.1\r\nHost: t\r\n\r\n", b"GET /x HTTP/1.1\r\n\r\n"])
    assert [event[0] for event in events] == ["head", "end"]
    assert events[0][2] == "/"


def test_an_upgrade_request_gets_its_body_then_nothing() -> None:
    reader = RequestReader(_clock)
    first = reader.feed(
        b"POST /up HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
        b"Content-Length: 2\r\n\r\nh"
    )
    assert [type(e) for e in first] == [RequestHead, UpgradeRefused, BodyData]
    head = first[0]
    assert isinstance(head, RequestHead)
    assert head.keep_alive is False
    second = reader.feed(b"i\x81\x05hello")
    assert second == [BodyData(b"i"), MessageEnd()]
    assert reader.feed(b"more") == []


def test_the_head_says_when_its_first_byte_was_read() -> None:
    times = iter([1.5, 2.5])
    reader = RequestReader(lambda: next(times))
    events = reader.feed(b"GET /a HTTP/1.1\r\nHost: t\r\n\r\nGET /b HTTP/1.1\r\nHost: t\r\n\r\n")
    heads = [e for e in events if isinstance(e, RequestHead)]
    assert [h.received_at for h in heads] == [1.5, 2.5]


@pytest.mark.parametrize(("case", "wire", "answers", "closes"), CASES, ids=[c[0] for c in CASES])
def test_the_conformance_corpus_without_a_socket(
    case: str, wire: bytes, answers: int, closes: bool
) -> None:
    """The corpus both servers answer alike over sockets: here the requests the reader finds
    in it, whole and a byte at a time (an answer each; a refusal is the one answer)."""
    events = _read([wire])
    assert _read([wire[i : i + 1] for i in range(len(wire))]) == events
    _well_formed(events)
    heads = [e for e in events if e[0] == "head"]
    refused = [e for e in events if e[0] == "refused"]
    continues = sum(1 for h in heads if h[8])  # a 100 Continue is one more answer
    assert len(heads) + len(refused) + continues == answers
    if refused:
        assert closes
    elif closes:
        assert not heads[-1][7]  # its last request does not keep the connection
    else:
        assert all(h[7] for h in heads)
        assert events[-1][0] == "end"
