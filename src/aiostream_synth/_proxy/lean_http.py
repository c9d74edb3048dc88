"""``serve --server lean``: an HTTP/1.1 server of our own, for thousands of long-held streams.

uvicorn holds several KiB per open stream even with a bare ASGI function behind it
(bench_load.py's ``floor-uvicorn``; the figures: benchmarks/COSTS.md): a protocol object, a request cycle and a flow control without slots, two
``asyncio.Event``s each with its own ``deque``. This server keeps what a stream needs and no
more, in two slotted objects: a :class:`_Connection` (the asyncio protocol) and an
:class:`_Exchange` per request (its scope, request body and response state), plus the app's
task. The connection's bytes become requests in a reader without I/O
(:class:`~aiostream_synth._proxy.http1_reader.RequestReader`, over httptools' parser, fuzzed in
``tests/test_http1_reader.py``), made when a request's bytes arrive and let go once it is read;
the connection acts on what the reader found (timers, pipelining, the answers).

What it does, as uvicorn's httptools protocol does:

* HTTP/1.0 and 1.1 over httptools (llhttp), keep-alive (an idle connection closes after
  :data:`KEEP_ALIVE_S`), pipelining (a request parsed while another is answered waits its turn,
  and reading pauses until then), ``Expect: 100-continue``, chunked request bodies;
* flow control both ways: reading pauses while more than :data:`BODY_HIGH_WATER` bytes of
  request body wait for the app, and ``send`` waits while the transport's buffer is full;
* responses framed by their ``content-length``, else chunked (HTTP/1.1) or ended by closing the
  connection (HTTP/1.0); none for ``HEAD``, 204 and 304;
* a request head over :data:`MAX_HEAD_BYTES` gets a 431, an unparsable request a 400, both with
  the connection closed; an app that fails before its response starts, or starts it with a
  status below 200, gives a 500, after it the connection closes;
* header values without the whitespace that ends them (RFC 9110 §5.5), and no trailers: the
  fields after a chunked body are read and dropped (they never reach the scope's headers);
* ``Upgrade`` is not supported: the request is answered as a plain one (its body read whole),
  then the connection closes.

And what uvicorn does not, for clients that are not to be trusted (each limit a field of
:class:`Limits`, each a ``serve`` option):

* deadlines for requests: a request head not whole ``head_timeout_s`` after the connection
  opened (or after its first byte on an idle connection), and a request body silent for
  ``body_timeout_s`` while the app waits for it, get a 408 and the connection closes; a
  connection that sends nothing is just closed;
* a write deadline: a client that reads nothing of its answer for ``write_timeout_s`` while the
  answer waits for it (the transport's buffer full, or a closing connection's last bytes
  unsent) is aborted, so an answer it never reads is not held for as long as it stays; one
  that reads, however slowly, gets a new deadline each time;
* head bytes counted as they are fed, not as lines end: one header value that never ends
  (``X-Big: aaaa...`` with no CRLF) gets its 431 once :data:`MAX_HEAD_BYTES` came, however it
  is cut; bytes that make no progress anywhere in a request (a trailer that never ends) are
  bounded the same way;
* a pipelined request waiting its turn is held unparsed, but the connection goes on being read
  (up to :data:`BODY_HIGH_WATER` bytes held): a pipelining client that leaves is noticed at
  once, and the answer it was waiting for is cancelled;
* an answer sent before its request's body was read (a 401, a 413) ends with the connection
  closing after the rest of that body is read and thrown away (up to :data:`DRAIN_BYTES`,
  within ``body_timeout_s``): closed with data unread, the kernel would send the client a
  reset, which can reach it before the answer does;
* ``max_connections``: a connection beyond it gets a 503 and is closed at once;
* bytes after a connection's last request (``Connection: close``, HTTP/1.0) are read and
  ignored: that request is answered, nothing after it is parsed or answered.

And, for the app (``_serving.asgi``): each request's scope carries ``RECEIVED_AT``, when its
bytes reached the kernel (``arrival.py``; else the loop's time when its first bytes were
parsed), and ``ON_DISCONNECT``, a function taking the callback to
call when its client leaves — so a stream needs no task waiting in ``receive()``. The scope has
no ``state`` (the lifespan's state is not supported; the proxy does not use it).

:func:`run` runs it: the ASGI lifespan, the listening socket (or one inherited from a parent
that forked workers) and a graceful stop; :func:`serve` stops it on SIGTERM/SIGINT.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import logging
import re
import signal
import socket
import time
from collections import deque
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any, cast

from aiostream_synth._proxy.arrival import arrival, tcp_socket
from aiostream_synth._proxy.http1_reader import (
    BodyData,
    MessageEnd,
    RequestHead,
    RequestReader,
    UpgradeRefused,
)
from aiostream_synth._proxy.http_defences import (
    BODY_TIMEOUT_S,
    DRAIN_BYTES,
    HEAD_TIMEOUT_S,
    KEEP_ALIVE_S,
    LINGER_S,
    MAX_HEAD_BYTES,
    WRITE_TIMEOUT_S,
    Limits,
    check_final_status,
    error_response,
    log_dropped_trailers,
    show,
    status_line,
)
from aiostream_synth._serving.pipeline import ON_DISCONNECT, RECEIVED_AT

__all__ = [
    "BODY_HIGH_WATER",
    "BODY_TIMEOUT_S",
    "HEAD_TIMEOUT_S",
    "KEEP_ALIVE_S",
    "MAX_HEAD_BYTES",
    "WRITE_TIMEOUT_S",
    "Limits",
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

#: Request body bytes buffered for the app before reading from the client pauses.
BODY_HIGH_WATER = 64 * 1024
#: Seconds open exchanges get to end after the app has drained its streams, before they are
#: cancelled (uvicorn's ``timeout_graceful_shutdown`` as ``serve`` sets it).
GRACEFUL_S = 5.0
#: Seconds exchanges get to write their last frames after a second signal ended their streams.
FORCED_S = 1.0


_ASGI = {"version": "3.0", "spec_version": "2.3"}
_CONTINUE = b"HTTP/1.1 100 Continue\r\n\r\n"
_LAST_CHUNK = b"0\r\n\r\n"
_TOKEN = re.compile(rb"^[!#$%&'*+\-.^_`|~0-9A-Za-z]+$")
_BAD_VALUE = re.compile(rb"[\x00\r\n]")
_UNAVAILABLE_TEXT = "Service Unavailable: too many connections"


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


class _Server:
    """What every connection of one process shares."""

    __slots__ = ("addresses", "app", "connections", "limits", "loop", "names", "tasks")

    def __init__(
        self, app: App, loop: asyncio.AbstractEventLoop, limits: Limits | None = None
    ) -> None:
        self.app = app
        self.loop = loop
        self.limits = limits if limits is not None else Limits()
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
        "drains",
        "expect_continue",
        "head",
        "http11",
        "keep_alive",
        "method",
        "on_lost",
        "path",
        "remaining",
        "scope",
        "started",
        "waiter",
    )

    def __init__(
        self, conn: _Connection, scope: dict[str, Any], expect_continue: bool, keep_alive: bool
    ) -> None:
        self.conn = conn
        #: Handed to the app when its turn comes, then dropped: the app owns it, and a waiting
        #: stream should not hold its request's scope and headers for minutes.
        self.scope: dict[str, Any] | None = scope
        self.method: str = scope["method"]  # for the log lines
        self.path: str = scope["path"]
        # HTTP/1.0 has no chunked framing: a body without a length ends the connection
        self.http11 = scope["http_version"] == "1.1"
        #: Request body received and not yet handed to the app; None once the app was handed
        #: the request's last body message.
        self.body: bytearray | None = bytearray()
        self.body_done = False  # the parser saw the request's end
        self.waiter: asyncio.Future[None] | None = None  # a receive() waiting
        self.expect_continue = expect_continue
        self.keep_alive = keep_alive
        self.bodyless = self.method == "HEAD"  # the response has no body
        self.started = False  # the response head was made (it may not be written yet)
        #: The response head not yet written: it goes out with the first body write, or on
        #: the loop's next turn if none comes in this one (one write, not two, for an app
        #: that sends its head with its first frame, as the engine's writer does).
        self.head: bytes | None = None
        self.chunked = False
        self.remaining: int | None = None  # body bytes the content-length still allows
        self.done = False  # the response was written whole
        #: Answered before its body was read, which the client is sending: read and thrown
        #: away before the connection closes (not when a 100-continue was still owed: such a
        #: client may send no body at all).
        self.drains = False
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
        self.write_head()  # a head the app's end left unsent goes out before what follows
        if task.cancelled():
            conn.close()
            return
        failure = task.exception()
        if failure is not None:
            LOG.error(
                "the ASGI app failed (%s %s)",
                self.method,
                self.path,
                exc_info=failure,
            )
        elif self.done or conn.closed:
            return
        else:
            LOG.error(
                "the ASGI app returned without %s its response (%s %s)",
                "completing" if self.started else "starting",
                self.method,
                self.path,
            )
        if not self.started and not conn.closed:
            conn.write(error_response(500, "Internal Server Error"))
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
        check_final_status(status)
        head = [status_line(status), _Date.now()]
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
            if self.http11:
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
        self.drains = not self.body_done and not self.expect_continue
        self.expect_continue = False
        self.head = b"".join(head)
        self.conn.server.loop.call_soon(self.write_head)

    def write_head(self) -> None:
        """Write the response head if no body write took it along."""
        head, self.head = self.head, None
        if head is not None and not self.conn.closed:
            self.conn.write(head)

    def _body(self, body: bytes, more: bool) -> None:
        data = b""
        if self.bodyless:
            pass  # HEAD, 204, 304: whatever the app sends is not written
        elif self.chunked:
            if body and more:
                data = b"%x\r\n%b\r\n" % (len(body), body)
            elif body:
                data = b"%x\r\n%b\r\n0\r\n\r\n" % (len(body), body)
            elif not more:
                data = _LAST_CHUNK
        elif self.remaining is not None:
            if len(body) > self.remaining:
                raise RuntimeError("response body longer than its content-length")
            self.remaining -= len(body)
            data = body
        else:
            data = body
        head = self.head
        if head is not None:
            self.head = None
            data = head + data
        if data:
            self.conn.write(data)
        if more:
            return
        if self.remaining:
            raise RuntimeError("response body shorter than its content-length")
        self.done = True
        self.on_lost = None
        self.wake()
        self.conn.answered(self)


class _Connection(asyncio.Protocol):
    """One client connection: parses its requests, runs an :class:`_Exchange` for each."""

    __slots__ = (
        "body_seen",
        "client",
        "closed",
        "current",
        "drain_waiter",
        "draining",
        "held",
        "lingering",
        "parsing",
        "pipeline",
        "reader",
        "reading_paused",
        "server",
        "sockname",
        "tcp",
        "timer",
        "timing",
        "transport",
        "write_paused",
        "write_timer",
        "write_unsent",
    )

    def __init__(self, server: _Server) -> None:
        self.server = server
        self.transport: asyncio.Transport | None = None
        #: The request reader (http1_reader.py), while a request is being read or after the
        #: connection's last one: made when bytes arrive, let go between requests.
        self.reader: RequestReader | None = None
        #: Bytes read while a pipelined request waits its turn, not parsed yet.
        self.held: bytearray | None = None
        #: After an early answer: request body bytes still to throw away before closing.
        self.draining: int | None = None
        #: After a refusal: bytes still to read and throw away before closing (a lingering
        #: close), else None.
        self.lingering: int | None = None
        self.client: tuple[str, int] | None = None
        self.sockname: tuple[str, int] | None = None
        self.closed = False
        self.current: _Exchange | None = None  # the exchange being answered
        self.parsing: _Exchange | None = None  # the exchange whose request is being read
        self.pipeline: deque[_Exchange] | None = None  # parsed, waiting for `current`
        #: The connection's TCP socket, which says when its data arrived (None: it cannot).
        self.tcp: Any | None = None
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
        #: The write deadline, while the client reads nothing of what waits for it.
        self.write_timer: asyncio.TimerHandle | None = None
        #: Bytes unsent when the write deadline was set: fewer when it fires is progress.
        self.write_unsent = 0

    # -- transport ----------------------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.client = _address(transport.get_extra_info("peername"))
        self.sockname = self.server.address(transport.get_extra_info("sockname"))
        server = self.server
        cap = server.limits.max_connections
        if cap is not None and len(server.connections) >= cap:
            LOG.warning(
                "%d connections open: %s refused (503)", len(server.connections), show(self.client)
            )
            self.write(error_response(503, _UNAVAILABLE_TEXT))
            self._linger()  # nothing of this connection is parsed or answered
            return
        server.connections.add(self)
        self.tcp = tcp_socket(transport)
        self._time(server.limits.head_timeout_s, "head")

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server.connections.discard(self)
        self._untime()
        if self.write_timer is not None:
            self.write_timer.cancel()
            self.write_timer = None
        self.held = None
        self.write_paused = False
        waiter, self.drain_waiter = self.drain_waiter, None
        if waiter is not None and not waiter.done():
            waiter.set_result(None)
        self.pipeline = None
        current = self.current
        # No reference cycles left for the collector: the exchanges and the parser (whose
        # bound methods hold this connection) are let go here.
        self.current = self.parsing = self.reader = None
        if current is not None:
            current.lost()

    def pause_writing(self) -> None:
        self.write_paused = True
        self._write_deadline()

    def resume_writing(self) -> None:
        self.write_paused = False
        if self.write_timer is not None:
            self.write_timer.cancel()
            self.write_timer = None
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
            self._close_transport()

    def _close_transport(self) -> None:
        """Close; bytes still unsent go out first, as long as the client reads them within
        the write deadline."""
        transport = self.transport
        assert transport is not None
        transport.close()
        if transport.get_write_buffer_size():
            self._write_deadline()

    def _write_deadline(self) -> None:
        if self.write_timer is None:
            transport = self.transport
            assert transport is not None
            self.write_unsent = transport.get_write_buffer_size()
            self.write_timer = self.server.loop.call_later(
                self.server.limits.write_timeout_s, self._write_timed_out
            )

    def _write_timed_out(self) -> None:
        """The client read nothing for the write deadline: aborted. One that reads slowly
        (fewer bytes unsent than when the deadline was set) gets another."""
        self.write_timer = None
        transport = self.transport
        if transport is None or not transport.get_write_buffer_size():
            return  # pragma: no cover - resume_writing cancels the timer first
        if transport.get_write_buffer_size() < self.write_unsent:
            self._write_deadline()
            return
        LOG.warning(
            "%s read nothing for %g s (%d bytes unsent): aborted",
            show(self.client),
            self.server.limits.write_timeout_s,
            transport.get_write_buffer_size(),
        )
        transport.abort()

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
        if self.timing in ("drain", "linger"):
            return  # reading and throwing away before closing: its own deadline runs
        limits = self.server.limits
        current = self.current
        if current is not None:
            if not self._awaits_body(current):
                self._untime()
                return
            if self.timing != "body":
                self._time(limits.body_timeout_s, "body")
            self.body_seen = self.server.loop.time()  # silent from now
        elif self.reader is not None and self.reader.in_message:
            if self.timing != "head":
                # A head began on an idle connection: its own deadline from now on; one already
                # counting (from the connection's opening) goes on, however the bytes trickle.
                self._time(limits.head_timeout_s, "head")
        elif not self.timing:  # a request was just answered (else: idle, or a fresh connection)
            self._time(limits.keep_alive_s, "idle")

    def _timed_out(self) -> None:
        timing = self.timing
        self.timer, self.timing = None, ""
        current = self.current
        limits = self.server.limits
        if timing in ("drain", "linger"):
            self.close()  # the rest did not come in time: closed all the same
        elif timing == "body":
            if current is None or not self._awaits_body(current):
                return  # the body came, or the app answered without it
            left = self.body_seen + limits.body_timeout_s - self.server.loop.time()
            if left > 0:  # bytes came meanwhile: still silent since then
                self._time(left, "body")
                return
            LOG.warning(
                "request body from %s silent for %g s: closed",
                show(self.client),
                limits.body_timeout_s,
            )
            self._refuse(408, "Request Timeout")  # the app's receive() then hears a disconnect
        elif current is not None:  # pragma: no cover - the timer is stopped when answering
            return
        elif self.reader is not None and self.reader.in_message:  # part of a request head came
            LOG.warning(
                "no whole request head from %s in %g s: closed",
                show(self.client),
                limits.head_timeout_s,
            )
            self._refuse(408, "Request Timeout")
        else:
            self.close()

    def data_received(self, data: bytes) -> None:
        if self.lingering is not None:  # refused: read and thrown away, up to a bound
            self.lingering -= len(data)
            if self.lingering < 0:
                self.close()
            return
        if self.pipeline:
            # A request waits its turn: what follows it waits unparsed, but reading goes on,
            # so a client that leaves is noticed (its FIN read) while it waits.
            held = self.held
            if held is None:
                held = self.held = bytearray()
            held += data
            if len(held) > BODY_HIGH_WATER:
                self.pause_reading()
            return
        self._feed(data)
        self.deadline()

    def _feed(self, data: bytes) -> None:
        reader = self.reader
        if reader is None:
            reader = self.reader = RequestReader(self._arrival, self.server.names)
        for event in reader.feed(data):
            if self.closed or self.lingering is not None:
                return
            transport = self.transport
            if transport is None or transport.is_closing():
                return
            if isinstance(event, BodyData):
                self._body(event.data)
            elif isinstance(event, RequestHead):
                self._head(event)
            elif isinstance(event, MessageEnd):
                self._end(event, reader)
            elif isinstance(event, UpgradeRefused):
                exchange = self.pipeline[-1] if self.pipeline else self.current
                if exchange is not None:
                    exchange.keep_alive = False
            else:
                if event.reason:
                    LOG.warning("request from %s refused: %s", show(self.client), event.reason)
                self._refuse(event.status, event.text)
        if self.reader is reader and not reader.in_message and not reader.done:
            self.reader = None  # between requests: the next one gets a fresh reader

    def _arrival(self) -> float:
        """When the bytes being parsed reached the kernel (else now, on the loop's clock)."""
        return arrival(self.tcp, self.server.loop.time())

    def _refuse(self, status: int, text: str) -> None:
        """Answer ``status`` and end the connection: with a lingering close when no request is
        being answered (see :meth:`_linger`), at once when one is (its app hears of it)."""
        current = self.current
        if self.closed or (current is not None and current.started):
            if current is not None:
                current.write_head()  # what the app began goes out before the end
            self.close()
            return
        self.write(error_response(status, text))
        if current is None:
            self._linger()
        else:
            self.close()

    def _linger(self) -> None:
        """A lingering close (nginx's): the answer written, the sending side shut (a FIN after
        it), and what the client still sends read and thrown away until it closes, for up to
        :data:`DRAIN_BYTES` or :data:`LINGER_S`. Closed at once with bytes unread, the
        kernel would reset the connection, and a reset can overtake the answer: the client
        would see "connection reset" instead of its 431."""
        transport = self.transport
        assert transport is not None
        self.reader = None
        self.pipeline = self.held = None
        self.lingering = DRAIN_BYTES
        try:
            transport.write_eof()
        except (NotImplementedError, OSError, RuntimeError):  # pragma: no cover - TLS, gone
            self._close_transport()
            return
        self._time(LINGER_S, "linger")
        self.resume_reading()

    # -- what the reader found ----------------------------------------------------------------

    def _head(self, head: RequestHead) -> None:
        scope: dict[str, Any] = {
            "type": "http",
            "asgi": _ASGI,
            "http_version": head.http_version,
            "server": self.sockname,
            "client": self.client,
            "scheme": "http",
            "method": head.method,
            "root_path": "",
            "path": head.path,
            "raw_path": head.raw_path,
            "query_string": head.query_string,
            "headers": head.headers,
            RECEIVED_AT: head.received_at,
        }
        exchange = _Exchange(self, scope, head.expect_continue, head.keep_alive)
        scope[ON_DISCONNECT] = exchange.watch
        self.parsing = exchange
        if self.current is None:
            self._start(exchange)
        else:  # pipelined behind the one being answered: it waits its turn, what follows it
            # in later reads is held unparsed (data_received)
            if self.pipeline is None:
                self.pipeline = deque()
            self.pipeline.append(exchange)

    def _body(self, body: bytes) -> None:
        if self.draining is not None:  # after an early answer: thrown away, up to a bound
            self.draining -= len(body)
            if self.draining < 0:
                self.close()
            return
        exchange = self.parsing
        if exchange is None or exchange.body is None or exchange.done:
            return
        exchange.body += body
        if len(exchange.body) > BODY_HIGH_WATER:
            self.pause_reading()
        exchange.wake()

    def _end(self, end: MessageEnd, reader: RequestReader) -> None:
        if end.trailers:
            log_dropped_trailers(self.client, end.trailers)
        if self.draining is not None:  # the early-answered request's body was read whole
            self.close()
            return
        exchange, self.parsing = self.parsing, None
        if exchange is not None:
            exchange.body_done = True
            if not exchange.keep_alive:
                # The connection's last request (or one answered before its body came):
                # whatever the client sends after it is read and ignored, never parsed.
                reader.stop()
            exchange.wake()

    # -- exchanges ----------------------------------------------------------------------------

    def _start(self, exchange: _Exchange) -> None:
        self.current = exchange
        server = self.server
        # The app's coroutine is the task (no wrapper: a frame less per open stream).
        scope, exchange.scope = exchange.scope, None
        assert scope is not None  # an exchange starts once
        task = server.loop.create_task(server.app(scope, exchange.receive, exchange.send))
        server.tasks.add(task)
        task.add_done_callback(exchange.finished)

    def answered(self, exchange: _Exchange) -> None:
        """``exchange``'s response was written whole: the next request's turn."""
        if not exchange.keep_alive:
            if exchange.drains and self.parsing is exchange and not self.closed:
                # The client is still sending the body: read and dropped, then closed.
                self.draining = DRAIN_BYTES
                exchange.body = None
                self.pipeline = self.held = None
                self._time(self.server.limits.body_timeout_s, "drain")
                self.resume_reading()
                return
            self.close()
            return
        self.current = None
        if self.pipeline:
            self._start(self.pipeline.popleft())
        if not self.pipeline:
            self.pipeline = None
            self.resume_reading()
            held, self.held = self.held, None
            if held:  # what came while the request that just started waited its turn
                self._feed(bytes(held))
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
    end_now: Callable[[], object] | None = None,
    limits: Limits | None = None,
) -> bool:
    """Serve ``app`` until SIGTERM/SIGINT: the first stops it gracefully (:func:`run`), a
    second at once, after ``end_now()`` (the app ending its open streams without waiting, so
    that each still gets its answer). True when a second signal stopped it."""
    loop = asyncio.get_running_loop()
    stopping = asyncio.Event()
    forced = asyncio.Event()

    def on_signal() -> None:
        if stopping.is_set() and not forced.is_set():
            if end_now is not None:
                end_now()
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
            limits=limits,
        )
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
    return forced.is_set()


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
    limits: Limits | None = None,
) -> None:
    """Run the lifespan's startup, then serve ``app`` on ``sock`` (else ``host``:``port``;
    ``listening`` is told the port) until ``stopping`` is set. Then: stop accepting, await
    ``drain()`` (the app ending its open streams), close idle connections, give the other
    exchanges :data:`GRACEFUL_S` to end and cancel what is left, run the lifespan's shutdown.
    ``forced`` cuts the graceful part short."""
    loop = asyncio.get_running_loop()
    lifespan = _Lifespan(app, loop)
    await lifespan.started
    state = _Server(app, loop, limits)
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
            if now.done() and state.tasks:
                # The streams were just ended: a moment to write their last frames (bounded:
                # a client not reading is cut).
                await asyncio.wait(set(state.tasks), timeout=FORCED_S)
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
