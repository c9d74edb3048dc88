"""Reading HTTP/1.1 requests off a connection's bytes, without the connection: bytes in, events
out (h11's shape), over httptools' parser (llhttp). No socket, no loop, no timer: the lean
server (``lean_http.py``) feeds it what it reads and acts on the events, and the tests feed it
whatever they like, cut wherever they like (``tests/test_http1_reader.py`` fuzzes it).

:meth:`RequestReader.feed` returns, in order, for each request:

* :class:`RequestHead`: the method, the path (percent-decoded once) and raw path, the query,
  the version, the headers (names lower-cased, values without the whitespace that ends them:
  RFC 9110 §5.5), whether the connection may carry another request after it, whether the
  client waits for a ``100 Continue``, and when its first byte was read (the ``clock`` given);
* :class:`BodyData` for each piece of its body (chunked or not, as the parser frees it);
* :class:`MessageEnd`, with the names of the trailer fields read after a chunked body (they are
  dropped, never added to the headers: the server logs them);
* :class:`Refused` instead, once, when the bytes are not a request to answer: a head over
  :data:`~aiostream_synth._proxy.http_defences.MAX_HEAD_BYTES` (or bytes that complete nothing
  in a request, past that bound, however they are cut: a header value or a trailer that never
  ends) gets 431 or 400, an unparsable request 400. Nothing is read after a refusal;
* :class:`UpgradeRefused` after the head of a request asking to switch protocols (``Upgrade``):
  it is answered as a plain one, its ``content-length`` body read (a chunked one is refused),
  and nothing after it is read.

After a request that does not keep the connection alive (``Connection: close``, HTTP/1.0), the
bytes that follow are ignored: that request is answered, nothing after it is parsed.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import httptools

from aiostream_synth._proxy.http_defences import MAX_HEAD_BYTES, TRAILERS_SHOWN, head_steps

__all__ = [
    "BodyData",
    "Event",
    "MessageEnd",
    "Refused",
    "RequestHead",
    "RequestReader",
    "UpgradeRefused",
]

#: Distinct header names a reader's ``names`` table keeps lowercased (clients send the same few).
NAMES_KEPT = 512


@dataclass(slots=True)
class RequestHead:
    """A request's head, read whole."""

    method: str
    #: Percent-decoded once (an ASGI scope's ``path``); ``raw_path`` as sent.
    path: str
    raw_path: bytes
    query_string: bytes
    http_version: str
    headers: list[tuple[bytes, bytes]]
    #: Whether the connection may carry another request after this one.
    keep_alive: bool
    #: The client waits for ``100 Continue`` before it sends the body.
    expect_continue: bool
    #: When the head's first byte was read (the reader's ``clock``).
    received_at: float


@dataclass(slots=True)
class BodyData:
    """A piece of the current request's body."""

    data: bytes


@dataclass(slots=True)
class MessageEnd:
    """The current request was read whole."""

    #: The trailer fields read after a chunked body (up to ``TRAILERS_SHOWN`` names): dropped.
    trailers: list[bytes] = field(default_factory=list)


@dataclass(slots=True)
class Refused:
    """The bytes are not a request to answer: answer ``status`` (``text``) and read no more;
    ``reason`` says why, for the log."""

    status: int
    text: str
    reason: str


@dataclass(slots=True)
class UpgradeRefused:
    """The request whose head came last asked to switch protocols: answered as a plain request,
    and the connection closes after it (its body, if any, follows as usual)."""


Event: TypeAlias = RequestHead | BodyData | MessageEnd | Refused | UpgradeRefused

#: What a reader's events are outside a feed: never appended to.
_NO_EVENTS: list[Event] = []
_TOO_LARGE = (431, "Request Header Fields Too Large")
_INVALID = (400, "Invalid HTTP request")


class RequestReader:
    """One connection's request parser (see the module docstring). ``names``: a table of
    lowercased header names to share between connections (one bytes object per name a server
    sees, not one per request)."""

    __slots__ = (
        "_events",
        "_head_bytes",
        "_headers",
        "_in_head",
        "_keep_alive",
        "_names",
        "_parser",
        "_progressed",
        "_received_at",
        "_stalled",
        "_trailers",
        "_upgrade_left",
        "_url",
        "clock",
        "done",
        "in_message",
    )

    def __init__(self, clock: Callable[[], float], names: dict[bytes, bytes] | None = None) -> None:
        self.clock = clock
        self._names = {} if names is None else names
        #: httptools' parser while a request is being read (it keeps bound methods, close to
        #: a KiB): made when bytes arrive, let go between requests.
        self._parser: httptools.HttpRequestParser | None = None
        #: Inside a request (its head or its body).
        self.in_message = False
        self._in_head = False
        #: Nothing more is read: after a refusal, a request that closes the connection, or an
        #: upgrade request's body.
        self.done = False
        #: Bytes fed since the parser last called back: what a header value, a trailer or a
        #: chunk line that never ends has taken so far.
        self._stalled = 0
        self._progressed = False
        self._head_bytes = 0
        self._url = b""
        self._headers: list[tuple[bytes, bytes]] = []
        self._trailers: list[bytes] | None = None
        self._received_at = 0.0
        #: Whether the current request lets the connection carry another one.
        self._keep_alive = True
        #: After an ``Upgrade`` request's head: its body bytes still to come.
        self._upgrade_left: int | None = None
        #: The events of the feed under way (callbacks come only from within one).
        self._events: list[Event] = _NO_EVENTS

    def feed(self, data: bytes) -> list[Event]:
        """The events ``data`` completes (see the module docstring)."""
        events: list[Event] = []
        if self.done or not data:
            return events
        self._events = events
        try:
            if self._upgrade_left is not None:
                self._upgrade_body(data)
            else:
                self._parse_all(data)
        finally:
            self._events = _NO_EVENTS  # a waiting stream's connection keeps none of them
        return events

    def _parse_all(self, data: bytes) -> None:
        consumed = 0
        for piece in head_steps(data, self._reading_head):
            self._parse(piece)
            consumed += len(piece)
            if self.done:
                return
            if self._upgrade_left is not None:  # the rest is the Upgrade request's body
                if consumed < len(data):
                    self._upgrade_body(data[consumed:])
                return

    def stop(self) -> None:
        """Read nothing more: the connection's last request is in (the server may decide so
        too, answering a request before its body came). What is fed after is ignored."""
        self.done = True
        self._parser = None
        self._upgrade_left = None

    def _reading_head(self) -> bool:
        """Whether the next bytes may be (part of) a request head."""
        return self._in_head or not self.in_message

    def _refuse(self, status: int, text: str, reason: str) -> None:
        self._events.append(Refused(status, text, reason))
        self.stop()
        self.in_message = self._in_head = False

    def _parse(self, data: bytes) -> None:
        parser = self._parser
        if parser is None:
            parser = self._parser = httptools.HttpRequestParser(self)
        self._progressed = False
        try:
            parser.feed_data(data)
        except httptools.HttpParserUpgrade as upgrade:
            self._parser = None
            self._upgrade(data[upgrade.args[0] :] if upgrade.args else b"")
        except httptools.HttpParserError as exc:
            if self.done:
                return  # llhttp refuses data after `Connection: close`: ignored, not a 400
            if self._head_bytes > MAX_HEAD_BYTES:
                self._refuse(*_TOO_LARGE, f"request head over {MAX_HEAD_BYTES} bytes")
            else:
                self._refuse(*_INVALID, f"invalid HTTP request: {exc}")
        else:
            if not self.in_message:
                self._parser = None  # between requests: the next one gets a fresh parser
                self._stalled = 0
            elif self._progressed:
                # Counted from the last callback on: the bytes after it in this step are not,
                # so the bound is exceeded by at most one step, never reached early.
                self._stalled = 0
            else:
                self._stalled += len(data)
                if self._head_bytes + self._stalled > MAX_HEAD_BYTES:
                    if self._in_head:
                        self._refuse(*_TOO_LARGE, f"request head over {MAX_HEAD_BYTES} bytes")
                    else:
                        reason = f"{self._stalled} bytes in a request that complete nothing"
                        self._refuse(*_INVALID, reason)

    def _upgrade(self, rest: bytes) -> None:
        """httptools stops at the head of a request asking to switch protocols (curl's
        ``--http2`` sends ``Upgrade: h2c`` on plain HTTP): its ``content-length`` body is
        read here, then nothing."""
        events = self._events
        if events and isinstance(events[-1], MessageEnd):
            # llhttp ends the message at the head (the rest would be the new protocol's): it
            # is not over until its body is in.
            events.pop()
        self.in_message, self.done = True, False
        head = next(e for e in reversed(events) if isinstance(e, RequestHead))
        head.keep_alive = self._keep_alive = False
        events.append(UpgradeRefused())
        length = b"0"
        for name, value in head.headers:
            if name == b"transfer-encoding":
                text = "An Upgrade request with a chunked body is not supported"
                self._refuse(400, text, "an Upgrade request with a chunked body")
                return
            if name == b"content-length":
                length = value
        self._upgrade_left = int(length)  # llhttp checked it is a number
        if self._upgrade_left:
            self._upgrade_body(rest)
        else:
            self._events.append(MessageEnd())
            self.stop()

    def _upgrade_body(self, data: bytes) -> None:
        left = self._upgrade_left or 0
        if left and data:
            chunk = data[:left]
            self._upgrade_left = left - len(chunk)
            self._events.append(BodyData(chunk))
            if not self._upgrade_left:
                self._events.append(MessageEnd())
                self.stop()

    # -- httptools' callbacks -----------------------------------------------------------------

    def on_message_begin(self) -> None:
        self.in_message = self._in_head = self._progressed = True
        self._received_at = self.clock()
        self._url = b""
        self._headers = []
        self._head_bytes = 0

    def on_url(self, url: bytes) -> None:
        self._progressed = True
        self._head_bytes += len(url)
        if self._head_bytes > MAX_HEAD_BYTES:
            raise ValueError("request head too large")
        self._url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self._progressed = True
        self._head_bytes += len(name) + len(value) + 4
        if self._head_bytes > MAX_HEAD_BYTES:
            raise ValueError("request head too large")
        if not self._in_head:  # a trailer (after a chunked body): read, counted, dropped
            if self._trailers is None:
                self._trailers = []
            if len(self._trailers) < TRAILERS_SHOWN:
                self._trailers.append(name)
            return
        if value[-1:] in (b" ", b"\t"):
            value = value.rstrip(b" \t")  # llhttp keeps the whitespace ending a value
        names = self._names
        lowered = names.get(name)
        if lowered is None:
            lowered = name.lower()
            if len(names) < NAMES_KEPT:
                names[name] = lowered
        self._headers.append((lowered, value))

    def on_headers_complete(self) -> None:
        self._in_head = False
        self._progressed = True
        parser = self._parser
        assert parser is not None  # called back from its feed_data
        url: Any = httptools.parse_url(self._url)
        raw_path: bytes = url.path
        path = raw_path.decode("latin-1")
        if "%" in path:
            path = urllib.parse.unquote(path)
        version = parser.get_http_version()
        headers, self._headers, self._url = self._headers, [], b""
        expect_continue = any(
            name == b"expect" and value.lower() == b"100-continue" for name, value in headers
        )
        self._keep_alive = version == "1.1" and parser.should_keep_alive()
        self._events.append(
            RequestHead(
                method=parser.get_method().decode("ascii"),
                path=path,
                raw_path=raw_path,
                query_string=url.query or b"",
                http_version=version,
                headers=headers,
                keep_alive=self._keep_alive,
                expect_continue=expect_continue,
                received_at=self._received_at,
            )
        )

    def on_body(self, body: bytes) -> None:
        self._progressed = True
        self._events.append(BodyData(body))

    def on_message_complete(self) -> None:
        self.in_message = self._in_head = False
        self._progressed = True
        trailers, self._trailers = self._trailers, None
        self._events.append(MessageEnd(trailers or []))
        if not self._keep_alive:
            self.stop()  # the connection's last request: nothing after it is parsed
