"""``serve --server lean``: an HTTP/1.1 server of our own, for thousands of long-held streams.

uvicorn holds about 11 KiB per open stream with a bare ASGI function behind it (bench_load.py's
``floor-uvicorn``): a protocol object, a request cycle and a flow control without slots, two
``asyncio.Event``s each with its own ``deque``. This server keeps what a stream needs and no
more, in two slotted objects: a :class:`_Connection` (the asyncio protocol, httptools' parser)
and an :class:`_Exchange` per request (its scope, request body and response state), plus the
app's task.

What it does, as uvicorn's httptools protocol does:

* HTTP/1.0 and 1.1 over httptools (llhttp), keep-alive (an idle connection closes after
  :data:`KEEP_ALIVE_S`), pipelining (a request parsed while another is answered waits its turn,
  and reading pauses until then), ``Expect: 100-continue``, chunked request bodies;
* flow control both ways: reading pauses while more than :data:`BODY_HIGH_WATER` bytes of
  request body wait for the app, and ``send`` waits while the transport's buffer is full;
* responses framed by their ``content-length``, else chunked (HTTP/1.1) or ended by closing the
  connection (HTTP/1.0); none for ``HEAD``, 204 and 304;
* a request head over :data:`MAX_HEAD_BYTES` gets a 431, an unparsable request a 400, both with
  the connection closed; an app that fails before its response starts gives a 500, after it the
  connection closes;
* ``Upgrade`` is not supported: the request is answered as a plain one (its body read whole),
  then the connection closes.

And what uvicorn does not: deadlines for requests. A request head not whole
:data:`HEAD_TIMEOUT_S` after the connection opened (or after its first byte on an idle
connection), and a request body silent for :data:`BODY_TIMEOUT_S` while the app waits for it,
get a 408 and the connection closes; a connection that sends nothing is just closed.

And, for the app (``_serving.asgi``): each request's scope carries ``RECEIVED_AT``, the loop's
time when its first bytes were parsed, and ``ON_DISCONNECT``, a function taking the callback to
call when its client leaves — so a stream needs no task waiting in ``receive()``. The scope has
no ``state`` (the lifespan's state is not supported; the proxy does not use it).

:func:`run` runs it: the ASGI lifespan, the listening socket (or one inherited from a parent
that forked workers) and a graceful stop; :func:`serve` stops it on SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import http
import logging
import re
import signal
import socket
import time
import urllib.parse
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, cast

import httptools

from aiostream_synth._serving.asgi import ON_DISCONNECT, RECEIVED_AT

__all__ = [
    "BODY_HIGH_WATER",
    "BODY_TIMEOUT_S",
    "HEAD_TIMEOUT_S",
    "KEEP_ALIVE_S",
    "MAX_HEAD_BYTES",
    "run",
    "serve",
]

LOG = logging.getLogger("aiostream_synth.proxy")

Message = dict[str, Any]
#: An ASGI app whose call is a coroutine (``async def``): it becomes the request's task.
App = Callable[
    [dict[str, Any], Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]],
    Coroutine[Any, Any, None],
]

#: Seconds an idle keep-alive connection stays open after its last response (uvicorn's default).
KEEP_ALIVE_S = 5.0
#: Seconds a request head gets to arrive whole, counted from the connection's opening or, on
#: an idle keep-alive connection, from the head's first byte (nginx's ``client_header_timeout``
#: is 60): a client that opens connections and sends nothing, or sends its head a byte at a
#: time, does not hold them open for ever.
HEAD_TIMEOUT_S = 30.0
#: Seconds a request body may stay silent while the app waits for it (nginx's
#: ``client_body_timeout``, also 60, counts the same way: between two reads, not the whole
#: body). Not counted while reading is paused for the app, while an ``Expect: 100-continue``
#: client waits for its go-ahead, or once the response has begun; the response itself has no
#: deadline here (a stream lasts as long as its backend).
BODY_TIMEOUT_S = 30.0
#: Request body bytes buffered for the app before reading from the client pauses.
BODY_HIGH_WATER = 64 * 1024
#: Bytes of a request line and headers taken before the request is refused (431).
MAX_HEAD_BYTES = 64 * 1024
#: Seconds open exchanges get to end after the app has drained its streams, before they are
#: cancelled (uvicorn's ``timeout_graceful_shutdown`` as ``serve`` sets it).
GRACEFUL_S = 5.0

#: Distinct header names :class:`_Server` keeps lowercased (clients send the same few).
_NAMES_KEPT = 512
_ASGI = {"version": "3.0", "spec_version": "2.3"}
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_LAST_CHUNK = b"0\r\n\r\n"
_TOKEN = re.compile(rb"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_BAD_VALUE = re.compile(rb"[\x00\r\n]")
_STATUS_LINES: dict[int, bytes] = {}


def _status_line(status: int) -> bytes:
    line = _STATUS_LINES.get(status)
    if line is None:
        try:
            phrase = http.HTTPStatus(status).phrase
        except ValueError:
            phrase = ""
        line = _STATUS_LINES[status] = f"HTTP/1.1 {status} {phrase}\r\n".encode("latin-1")
    return line


class _Date:
    """The ``date`` header, rendered once a second."""

    second = -1
    header = b""

    @classmethod
    def now(cls) -> bytes:
        second = int(time.time())
        if second != cls.second:
            cls.second = second
            cls.header = b"date: " + email.utils.formatdate(second, usegmt=True).encode() + b"\r\n"
        return cls.header


def _error_response(status: int, text: str) -> bytes:
    body = text.encode("latin-1")
    return b"".join(
        (
            _status_line(status),
            b"content-type: text/plain; charset=utf-8\r\n",
            b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body),
            body,
        )
    )


class _Server:
    """What every connection of one process shares."""

    __slots__ = ("addresses", "app", "connections", "loop", "names", "tasks")

    def __init__(self, app: App, loop: asyncio.AbstractEventLoop) -> None:
        self.app = app
        self.loop = loop
        self.connections: set[_Connection] = set()
        #: The apps' tasks (the loop keeps only weak references to tasks).
        self.tasks: set[asyncio.Task[None]] = set()
        #: Header names as received -> lowercased: one bytes object per name for every request.
        self.names: dict[bytes, bytes] = {}
        #: The server's own addresses, one tuple each for all of its connections.
        self.addresses: dict[object, tuple[str, int] | None] = {}

    def address(self, info: object) -> tuple[str, int] | None:
        """The scope's ``server`` for a connection's ``sockname``."""
        try:
            return self.addresses[info]
        except (KeyError, TypeError):
            address = _address(info)
            if len(self.addresses) < 64:  # a few interfaces; never grows with the clients
                with contextlib.suppress(TypeError):
                    self.addresses[info] = address
            return address


class _Exchange:
    """One request on a connection and the app's response to it."""

    __slots__ = (
        "body",
        "body_done",
        "bodyless",
        "chunked",
        "conn",
        "done",
        "expect_continue",
        "keep_alive",
        "on_lost",
        "remaining",
        "scope",
        "started",
        "waiter",
    )

    def __init__(
        self, conn: _Connection, scope: dict[str, Any], expect_continue: bool, keep_alive: bool
    ) -> None:
        self.conn = conn
        self.scope = scope
        #: Request body received and not yet handed to the app; None once the app was handed
        #: the request's last body message.
        self.body: bytearray | None = bytearray()
        self.body_done = False  # the parser saw the request's end
        self.waiter: asyncio.Future[None] | None = None  # a receive() waiting
        self.expect_continue = expect_continue
        self.keep_alive = keep_alive
        self.bodyless = scope["method"] == "HEAD"  # the response has no body
        self.started = False  # the response head was written
        self.chunked = False
        self.remaining: int | None = None  # body bytes the content-length still allows
        self.done = False  # the response was written whole
        self.on_lost: Callable[[], object] | None = None

    # -- what the server tells it -------------------------------------------------------------

    def wake(self) -> None:
        waiter = self.waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def watch(self, callback: Callable[[], object] | None) -> None:
        """The scope's :data:`ON_DISCONNECT` function."""
        if callback is not None and self.conn.closed:
            self.conn.server.loop.call_soon(callback)  # gone already (never called from here)
            return
        self.on_lost = callback

    def lost(self) -> None:
        self.wake()
        callback, self.on_lost = self.on_lost, None
        if callback is not None and not self.done:
            callback()

    # -- ASGI ---------------------------------------------------------------------------------

    def finished(self, task: asyncio.Task[None]) -> None:
        """The app's task ended (its done callback): a failure, or an app that returned
        without answering, is a 500 when nothing was written yet, else the connection closes."""
        conn = self.conn
        conn.server.tasks.discard(task)
        if task.cancelled():
            conn.close()
            return
        failure = task.exception()
        if failure is not None:
            LOG.error(
                "the ASGI app failed (%s %s)",
                self.scope["method"],
                self.scope["path"],
                exc_info=failure,
            )
        elif self.done or conn.closed:
            return
        else:
            LOG.error(
                "the ASGI app returned without %s its response (%s %s)",
                "completing" if self.started else "starting",
                self.scope["method"],
                self.scope["path"],
            )
        if not self.started and not conn.closed:
            conn.write(_error_response(500, "Internal Server Error"))
        conn.close()

    async def _wait(self) -> None:
        self.waiter = self.conn.server.loop.create_future()
        try:
            await self.waiter
        finally:
            self.waiter = None

    async def receive(self) -> Message:
        conn = self.conn
        if self.expect_continue:
            self.expect_continue = False
            if not self.started and not conn.closed:
                conn.write(_CONTINUE)
                conn.deadline()  # the client sends its body now
        while self.body is not None:
            if conn.closed:
                return {"type": "http.disconnect"}
            body = self.body
            if body or self.body_done:
                more = not self.body_done
                message: Message = {
                    "type": "http.request",
                    "body": bytes(body) if body else b"",
                    "more_body": more,
                }
                self.body = bytearray() if more else None
                conn.resume_reading()
                return message
            conn.resume_reading()
            await self._wait()
        while not conn.closed and not self.done:
            await self._wait()
        return {"type": "http.disconnect"}

    async def send(self, message: Message) -> None:
        conn = self.conn
        if conn.write_paused and not conn.closed:
            await conn.drain()
        if conn.closed:
            return  # the client left; the app hears of it from receive() or its callback
        kind = message["type"]
        if not self.started:
            if kind != "http.response.start":
                raise RuntimeError(f"expected 'http.response.start', got {kind!r}")
            self._start(message)
        elif not self.done:
            if kind != "http.response.body":
                raise RuntimeError(f"expected 'http.response.body', got {kind!r}")
            self._body(message.get("body", b""), message.get("more_body", False))
        else:
            raise RuntimeError(f"{kind!r} sent after the response was complete")

    def _start(self, message: Message) -> None:
        status = message["status"]
        head = [_status_line(status), _Date.now()]
        remaining: int | None = None
        chunked = False
        # Answered before the request was read whole (an error, say): the rest of its body
        # would have to be read and thrown away before the next request; it closes instead.
        keep_alive = self.keep_alive and self.body_done
        closes = False
        for name, value in message.get("headers", ()):
            if not _TOKEN.match(name) or _BAD_VALUE.search(value):
                raise RuntimeError(f"invalid response header {name!r}: {value!r}")
            name = name.lower()
            if name == b"content-length":
                remaining = int(value)
            elif name == b"transfer-encoding":
                chunked = value.lower() == b"chunked"
            elif name == b"connection" and b"close" in value.lower():
                keep_alive = False
                closes = True
            head += (name, b": ", value, b"\r\n")
        if self.bodyless or status in (204, 304) or status < 200:
            self.bodyless = True
            remaining, chunked = None, False
        elif remaining is None and not chunked:
            if self.scope["http_version"] == "1.1":
                chunked = True
                head.append(b"transfer-encoding: chunked\r\n")
            else:
                keep_alive = False  # an HTTP/1.0 body ends with the connection
        if not keep_alive and not closes:
            head.append(b"connection: close\r\n")
        head.append(b"\r\n")
        self.keep_alive = keep_alive
        self.remaining = remaining
        self.chunked = chunked
        self.started = True
        self.expect_continue = False
        self.conn.write(b"".join(head))

    def _body(self, body: bytes, more: bool) -> None:
        conn = self.conn
        if self.bodyless:
            pass  # HEAD, 204, 304: whatever the app sends is not written
        elif self.chunked:
            if body and more:
                conn.write(b"%x\r\n%b\r\n" % (len(body), body))
            elif body:
                conn.write(b"%x\r\n%b\r\n0\r\n\r\n" % (len(body), body))
            elif not more:
                conn.write(_LAST_CHUNK)
        elif self.remaining is not None:
            if len(body) > self.remaining:
                raise RuntimeError("response body longer than its content-length")
            self.remaining -= len(body)
            if body:
                conn.write(body)
        elif body:
            conn.write(body)
        if more:
            return
        if self.remaining:
            raise RuntimeError("response body shorter than its content-length")
        self.done = True
        self.on_lost = None
        self.wake()
        conn.answered(self)


class _Connection(asyncio.Protocol):
    """One client connection: parses its requests, runs an :class:`_Exchange` for each."""

    __slots__ = (
        "body_seen",
        "client",
        "closed",
        "current",
        "drain_waiter",
        "head_bytes",
        "headers",
        "in_message",
        "parser",
        "parsing",
        "pipeline",
        "reading_paused",
        "received_at",
        "server",
        "sockname",
        "timer",
        "timing",
        "transport",
        "upgrade_left",
        "url",
        "write_paused",
    )

    def __init__(self, server: _Server) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        #: httptools' parser, while a request is being read (about 0.9 KiB with the bound
        #: methods it keeps): made when bytes arrive, let go between requests.
        self.parser: httptools.HttpRequestParser | None = None
        self.in_message = False  # the parser is inside a request
        self.client: tuple[str, int] | None = None
        self.sockname: tuple[str, int] | None = None
        self.closed = False
        self.current: _Exchange | None = None  # the exchange being answered
        self.parsing: _Exchange | None = None  # the exchange whose request is being read
        self.pipeline: deque[_Exchange] | None = None  # parsed, waiting for `current`
        self.url = b""
        self.headers: list[tuple[bytes, bytes]] = []
        self.head_bytes = 0
        self.received_at = 0.0
        #: The connection's one deadline, for what it waits for (``timing``): ``"idle"``, the
        #: keep-alive period after a response; ``"head"``, a request head; ``"body"``, the
        #: body the app waits for, silent since ``body_seen`` (the timer is pushed back lazily,
        #: when it fires, not on every read).
        self.timer: asyncio.TimerHandle | None = None
        self.timing = ""
        self.body_seen = 0.0
        self.reading_paused = False
        self.write_paused = False
        self.drain_waiter: asyncio.Future[None] | None = None
        #: After an ``Upgrade`` request's head: its body bytes still to come (then nothing).
        self.upgrade_left: int | None = None

    # -- transport ----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.client = _address(transport.get_extra_info("peername"))
        self.sockname = self.server.address(transport.get_extra_info("sockname"))
        self.server.connections.add(self)
        self._time(HEAD_TIMEOUT_S, "head")

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.connections.discard(self)
        self._untime()
        self.write_paused = False
        waiter, self.drain_waiter = self.drain_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        self.pipeline = None
        current = self.current
        # No reference cycles left for the collector: the exchanges and the parser (whose
        # bound methods hold this connection) are let go here.
        self.current = self.parsing = self.parser = None
        if current is not None:
            current.lost()

    def pause_writing(self) -> None:
        self.write_paused = True

    def resume_writing(self) -> None:
        self.write_paused = False
        waiter, self.drain_waiter = self.drain_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    async def drain(self) -> None:
        waiter = self.drain_waiter
        if waiter is None:
            waiter = self.drain_waiter = self.server.loop.create_future()
        await asyncio.shield(waiter)

    def write(self, data: bytes) -> None:
        assert self.transport is not None
        self.transport.write(data)

    def close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()

    def pause_reading(self) -> None:
        transport = self.transport
        if not self.reading_paused and transport is not None and not transport.is_closing():
            self.reading_paused = True
            transport.pause_reading()
            if self.timing == "body":  # paused for the app: the client is not late
                self._untime()

    def resume_reading(self) -> None:
        transport = self.transport
        if self.reading_paused and not self.pipeline and transport is not None:
            self.reading_paused = False
            if not transport.is_closing():  # closing: it reads no more anyway
                transport.resume_reading()
                self.deadline()

    def _time(self, delay: float, timing: str) -> None:
        if self.timer is not None:
            self.timer.cancel()
        self.timer = self.server.loop.call_later(delay, self._timed_out)
        self.timing = timing

    def _untime(self) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.timing = ""

    def _awaits_body(self, exchange: _Exchange) -> bool:
        """Whether ``exchange``'s body is still to come and the client is the one to send it:
        the app has not answered, reading is not paused, no 100-continue is owed."""
        return (
            self.parsing is exchange
            and not self.reading_paused
            and not exchange.started
            and not exchange.expect_continue
        )

    def deadline(self) -> None:
        """Start, keep or stop the timer for what the connection waits for now: after it read,
        resumed reading, sent a 100-continue or answered a request."""
        transport = self.transport
        if self.closed or transport is None or transport.is_closing():
            self._untime()  # refused, or ending: nothing to wait for
            return
        current = self.current
        if current is not None:
            if not self._awaits_body(current):
                self._untime()
                return
            if self.timing != "body":
                self._time(BODY_TIMEOUT_S, "body")
            self.body_seen = self.server.loop.time()  # silent from now
        elif self.in_message:
            if self.timing != "head":
                # A head began on an idle connection: its own deadline from now on; one already
                # counting (from the connection's opening) goes on, however the bytes trickle.
                self._time(HEAD_TIMEOUT_S, "head")
        elif not self.timing:  # a request was just answered (else: idle, or a fresh connection)
            self._time(KEEP_ALIVE_S, "idle")

    def _timed_out(self) -> None:
        timing = self.timing
        self.timer, self.timing = None, ""
        current = self.current
        if timing == "body":
            if current is None or not self._awaits_body(current):
                return  # the body came, or the app answered without it
            left = self.body_seen + BODY_TIMEOUT_S - self.server.loop.time()
            if left > 0:  # bytes came meanwhile: still silent since then
                self._time(left, "body")
                return
            LOG.warning(
                "request body from %s silent for %g s: closed", _show(self.client), BODY_TIMEOUT_S
            )
            self._refuse(408, "Request Timeout")  # the app's receive() then hears a disconnect
        elif current is not None:  # pragma: no cover - the timer is stopped when answering
            return
        elif self.in_message:  # part of a request head came
            LOG.warning(
                "no whole request head from %s in %g s: closed", _show(self.client), HEAD_TIMEOUT_S
            )
            self._refuse(408, "Request Timeout")
        else:
            self.close()

    def data_received(self, data: bytes) -> None:
        if self.upgrade_left is not None:  # after an Upgrade request's head
            self._upgrade_body(data)
            self.deadline()
            return
        parser = self.parser
        if parser is None:
            parser = self.parser = httptools.HttpRequestParser(self)
        try:
            parser.feed_data(data)
        except httptools.HttpParserUpgrade as upgrade:
            self.parser = None
            self._upgrade_refused(data[upgrade.args[0] :] if upgrade.args else b"")
        except httptools.HttpParserError as exc:
            if self.head_bytes > MAX_HEAD_BYTES:
                self._refuse(431, "Request Header Fields Too Large")
            else:
                LOG.warning("invalid HTTP request from %s: %s", _show(self.client), exc)
                self._refuse(400, "Invalid HTTP request")
        else:
            if not self.in_message:
                self.parser = None  # between requests: the next one gets a fresh parser
        self.deadline()

    def _refuse(self, status: int, text: str) -> None:
        answering = self.current is not None and self.current.started
        if not answering and not self.closed:
            self.write(_error_response(status, text))
        self.close()

    def _upgrade_refused(self, rest: bytes) -> None:
        """httptools stops at the head of a request asking to switch protocols (``Upgrade``;
        curl's ``--http2`` sends ``Upgrade: h2c`` on plain HTTP): the request is answered as a
        plain one, its ``content-length`` body read here, and the connection closes after it;
        nothing after the body is read."""
        exchange = self.pipeline[-1] if self.pipeline else self.current
        self.upgrade_left = 0
        if exchange is None:  # pragma: no cover - the head always made an exchange
            self.close()
            return
        exchange.keep_alive = False
        length = b"0"
        for name, value in exchange.scope["headers"]:
            if name == b"transfer-encoding":
                self._refuse(400, "An Upgrade request with a chunked body is not supported")
                return
            if name == b"content-length":
                length = value
        self.upgrade_left = int(length)  # llhttp checked it is a number
        if self.upgrade_left:
            exchange.body_done = False
            self.parsing = exchange
            self._upgrade_body(rest)

    def _upgrade_body(self, data: bytes) -> None:
        left = self.upgrade_left or 0
        if left and data:
            chunk = data[:left]
            self.upgrade_left = left - len(chunk)
            self.on_body(chunk)
            if not self.upgrade_left:
                self.on_message_complete()

    # -- httptools' callbacks -----------------------------------------------------------------

    def on_message_begin(self) -> None:
        self.in_message = True
        self.received_at = self.server.loop.time()
        self.url = b""
        self.headers = []
        self.head_bytes = 0

    def on_url(self, url: bytes) -> None:
        self.head_bytes += len(url)
        if self.head_bytes > MAX_HEAD_BYTES:
            raise ValueError("request head too large")
        self.url += url

    def on_header(self, name: bytes, value: bytes) -> None:
        self.head_bytes += len(name) + len(value) + 4
        if self.head_bytes > MAX_HEAD_BYTES:
            raise ValueError("request head too large")
        names = self.server.names
        lowered = names.get(name)
        if lowered is None:
            lowered = name.lower()
            if len(names) < _NAMES_KEPT:
                names[name] = lowered
        self.headers.append((lowered, value))

    def on_headers_complete(self) -> None:
        parser = self.parser
        assert parser is not None  # called back from its feed_data
        url = httptools.parse_url(self.url)
        raw_path: bytes = url.path
        path = raw_path.decode("latin-1")
        if "%" in path:
            path = urllib.parse.unquote(path)
        version = parser.get_http_version()
        headers, self.headers, self.url = self.headers, [], b""
        expect_continue = any(
            name == b"expect" and value.lower() == b"100-continue" for name, value in headers
        )
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": _ASGI,
            "http_version": version,
            "server": self.sockname,
            "client": self.client,
            "scheme": "http",
            "method": parser.get_method().decode("ascii"),
            "root_path": "",
            "path": path,
            "raw_path": raw_path,
            "query_string": url.query or b"",
            "headers": headers,
            RECEIVED_AT: self.received_at,
        }
        keep_alive = version == "1.1" and parser.should_keep_alive()
        exchange = _Exchange(self, scope, expect_continue, keep_alive)
        scope[ON_DISCONNECT] = exchange.watch
        self.parsing = exchange
        if self.current is None:
            self._start(exchange)
        else:  # pipelined behind the one being answered: it waits its turn, unread beyond
            if self.pipeline is None:
                self.pipeline = deque()
            self.pipeline.append(exchange)
            self.pause_reading()

    def on_body(self, body: bytes) -> None:
        exchange = self.parsing
        if exchange is None or exchange.body is None or exchange.done:
            return
        exchange.body += body
        if len(exchange.body) > BODY_HIGH_WATER:
            self.pause_reading()
        exchange.wake()

    def on_message_complete(self) -> None:
        self.in_message = False
        exchange, self.parsing = self.parsing, None
        if exchange is not None:
            exchange.body_done = True
            exchange.wake()

    # -- exchanges ----------------------------------------------------------------------------

    def _start(self, exchange: _Exchange) -> None:
        self.current = exchange
        server = self.server
        # The app's coroutine is the task (no wrapper: a frame less per open stream).
        task = server.loop.create_task(server.app(exchange.scope, exchange.receive, exchange.send))
        server.tasks.add(task)
        task.add_done_callback(exchange.finished)

    def answered(self, exchange: _Exchange) -> None:
        """``exchange``'s response was written whole: the next request's turn."""
        if not exchange.keep_alive:
            self.close()
            return
        self.current = None
        if self.pipeline:
            self._start(self.pipeline.popleft())
        if not self.pipeline:
            self.pipeline = None
            self.resume_reading()
        # The keep-alive period, the next head's deadline if part of it came meanwhile, or the
        # pipelined request's body deadline.
        self.deadline()

    def shut_down(self) -> None:
        """No new request on this connection: closed now if idle, else after its response."""
        if self.current is None:
            self.close()
        else:
            self.current.keep_alive = False


def _address(info: Any) -> tuple[str, int] | None:
    if isinstance(info, tuple) and len(info) >= 2:
        return (str(info[0]), int(info[1]))
    return None


def _show(address: tuple[str, int] | None) -> str:
    return f"{address[0]}:{address[1]}" if address is not None else "?"


class _Lifespan:
    """The ASGI lifespan: startup before serving, shutdown after."""

    def __init__(self, app: App, loop: asyncio.AbstractEventLoop) -> None:
        self.app = app
        self.started: asyncio.Future[None] = loop.create_future()
        self.stopped: asyncio.Future[None] = loop.create_future()
        self.stop = asyncio.Event()
        self.asked_to_start = False
        self.task = loop.create_task(self._run())

    async def _run(self) -> None:
        try:
            await self.app({"type": "lifespan", "asgi": _ASGI}, self._receive, self._send)
        except Exception as exc:
            if not self.started.done():
                self.started.set_exception(exc)
            else:
                LOG.exception("the ASGI lifespan failed")
        finally:
            for future in (self.started, self.stopped):
                if not future.done():
                    future.set_result(None)

    async def _receive(self) -> Message:
        if not self.asked_to_start:
            self.asked_to_start = True
            return {"type": "lifespan.startup"}
        await self.stop.wait()
        return {"type": "lifespan.shutdown"}

    async def _send(self, message: Message) -> None:
        kind = message["type"]
        if kind == "lifespan.startup.complete":
            self.started.set_result(None)
        elif kind == "lifespan.startup.failed":
            self.started.set_exception(RuntimeError(message.get("message", "startup failed")))
        elif kind in ("lifespan.shutdown.complete", "lifespan.shutdown.failed"):
            if kind.endswith("failed"):
                LOG.error("the ASGI lifespan shutdown failed: %s", message.get("message", ""))
            if not self.stopped.done():
                self.stopped.set_result(None)

    async def shutdown(self) -> None:
        self.stop.set()
        await self.stopped
        await self.task


async def serve(
    app: App,
    *,
    host: str,
    port: int,
    sock: socket.socket | None,
    backlog: int,
    drain: Callable[[], Awaitable[object]],
) -> None:
    """Serve ``app`` until SIGTERM/SIGINT: the first stops it gracefully (:func:`run`), a
    second at once."""
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    forced = asyncio.Event()

    def on_signal() -> None:
        if stopping.is_set():
            forced.set()
        stopping.set()

    handled = []
    for sig in (signal.SIGTERM, signal.SIGINT):
        try:
            loop.add_signal_handler(sig, on_signal)
            handled.append(sig)
        except NotImplementedError:  # pragma: no cover - Windows' loops
            signal.signal(sig, lambda *_: loop.call_soon_threadsafe(on_signal))
    try:
        await run(
            app,
            host=host,
            port=port,
            sock=sock,
            backlog=backlog,
            drain=drain,
            stopping=stopping,
            forced=forced,
        )
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)


async def run(
    app: App,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    sock: socket.socket | None = None,
    backlog: int = 4096,
    drain: Callable[[], Awaitable[object]],
    stopping: asyncio.Event,
    forced: asyncio.Event,
    listening: Callable[[int], object] | None = None,
) -> None:
    """Run the lifespan's startup, then serve ``app`` on ``sock`` (else ``host``:``port``;
    ``listening`` is told the port) until ``stopping`` is set. Then: stop accepting, await
    ``drain()`` (the app ending its open streams), close idle connections, give the other
    exchanges :data:`GRACEFUL_S` to end and cancel what is left, run the lifespan's shutdown.
    ``forced`` cuts the graceful part short."""
    loop = asyncio.get_running_loop()
    lifespan = _Lifespan(app, loop)
    await lifespan.started
    state = _Server(app, loop)
    if sock is not None:
        server = await loop.create_server(lambda: _Connection(state), sock=sock)
    else:
        server = await loop.create_server(
            lambda: _Connection(state), host, port, backlog=backlog, reuse_address=True
        )
    address = server.sockets[0].getsockname()
    LOG.info("serving on http://%s:%d (lean HTTP/1.1)", address[0], address[1])
    if listening is not None:
        listening(address[1])

    async def stop_gracefully() -> None:
        server.close()  # stop accepting
        await drain()
        for conn in list(state.connections):
            conn.shut_down()
        if state.tasks:
            await asyncio.wait(set(state.tasks), timeout=GRACEFUL_S)

    try:
        await stopping.wait()
        graceful = loop.create_task(stop_gracefully())
        now = loop.create_task(forced.wait())
        try:
            await asyncio.wait((graceful, now), return_when=asyncio.FIRST_COMPLETED)
        finally:
            graceful.cancel()
            now.cancel()
    finally:
        server.close()
        for task in list(state.tasks):
            task.cancel()
        for conn in list(state.connections):
            conn.close()
        await lifespan.shutdown()
