"""The HTTP protocol ``serve`` runs uvicorn with: uvicorn's own (httptools), telling the app when
each request arrived and calling it back when its client leaves.

* **Arrival.** uvicorn starts a request's ASGI task once its headers are parsed, and the task
  runs when the loop gets to it: in a burst of thousands of connections, behind every request
  parsed before it (in a wave of thousands, a good part of a second, longer with large bodies;
  benchmarks/COSTS.md). The client is silent all that time too, so the stream's first keepalive
  is due one interval after the request arrived, not after the app got to it: the scope
  carries :data:`~aiostream_synth._serving.pipeline.RECEIVED_AT`, when the request's bytes reached
  the kernel (``arrival.py``; else the loop's time when its first bytes were parsed).
* **Disconnect.** ASGI tells an app that its client left only through a pending ``receive()``,
  so a streaming app keeps a task waiting there for the whole stream (a task's memory). The scope
  carries :data:`~aiostream_synth._serving.pipeline.ON_DISCONNECT` instead: a function the app
  hands a callback, which ``connection_lost`` calls (soon after it is handed over when the
  connection is gone already). uvicorn notices a lost connection while it reads from it; it
  stops reading while a second request pipelined behind the first waits its turn, so such a
  client's leaving is noticed when reading resumes (a task in ``receive()`` resumed it).
  HTTP clients do not pipeline.

And four defences uvicorn lacks against clients that are not to be trusted (as the lean
server has them):

* **No trailers in the headers.** uvicorn's scope holds the very list its header callback
  appends to, so the fields after a chunked body (``0\r\nx-api-key: KEY\r\n\r\n``) would join
  the request's headers after the app read them; they are dropped.
* **Head bytes counted as fed.** httptools keeps a header value until its line ends, so one
  value that never ends (``X-Big: aaaa...``) grew without bound; bytes that complete nothing
  are counted across reads, and past :data:`~aiostream_synth._proxy.http_defences.MAX_HEAD_BYTES`
  the request gets a 431 (in its head) or a 400 (a trailer or chunk line) and the connection
  closes.
* **Final statuses only.** An app starting its response with a status below 200 gets a 500
  instead (uvicorn would send the 1xx as the answer).
* **A write deadline.** A client that reads nothing for ``write_timeout_s`` while the
  transport's buffer is full is aborted, so the answer it never reads is not held for ever
  (one that reads, however slowly, gets a new deadline each time).

The app takes both out of the scope (:func:`~aiostream_synth._serving.pipeline.received_at`,
:func:`~aiostream_synth._serving.pipeline.disconnect_hook`); any other app ignores them. Without
httptools (uvicorn then speaks h11) ``serve`` runs uvicorn's default: the app's first look at a
request stands in for its arrival, and a task watches ``receive()``.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

from aiostream_synth._proxy.arrival import arrival, tcp_socket
from aiostream_synth._proxy.http_defences import (
    DRAIN_BYTES,
    LINGER_S,
    MAX_HEAD_BYTES,
    TRAILERS_SHOWN,
    WRITE_TIMEOUT_S,
    check_final_status,
    error_response,
    head_steps,
    log_dropped_trailers,
    show,
)
from aiostream_synth._serving.pipeline import ON_DISCONNECT, RECEIVED_AT

__all__ = ["http_protocol"]

LOG = logging.getLogger("aiostream_synth.proxy")


def http_protocol(write_timeout_s: float = WRITE_TIMEOUT_S) -> type[asyncio.Protocol] | str:
    """The ``http`` setting for ``uvicorn.Config``: the protocol above, or ``"auto"`` (h11)
    without httptools."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol, RequestResponseCycle
    except ImportError:  # pragma: no cover - httptools comes with the proxy's extra
        return "auto"

    class CheckedCycle(RequestResponseCycle):
        """uvicorn's request cycle, refusing a response that starts with a status below 200
        (a 1xx is not a final status: the client would wait for the real one for ever).
        Each cycle becomes one by a change of class, so it costs a request no memory."""

        async def send(self, message: Any) -> None:
            if message["type"] == "http.response.start" and not self.response_started:
                check_final_status(message.get("status"))
            await super().send(message)

    class ProxyHttpToolsProtocol(HttpToolsProtocol):
        """uvicorn's httptools protocol; each request's scope says when it arrived and takes
        a callback for its client leaving; trailers dropped, head bytes bounded as fed, and
        a write deadline."""

        #: The current request's callback for the connection being lost (set by the app).
        _on_lost: Callable[[], object] | None = None
        _in_message = False  # the parser is inside a request
        _in_head = False  # ... and inside its head
        _head_bytes = 0  # bytes of the head's completed parts
        _stalled = 0  # bytes fed since a callback last completed something
        _progressed = False
        _write_timer: asyncio.TimerHandle | None = None
        _write_unsent = 0  # bytes unsent when the write deadline was set
        _lingering: int | None = None  # after a refusal: bytes still to throw away
        _trailers: list[bytes] | None = None  # the current request's dropped trailers' names
        _linger_timer: asyncio.TimerHandle | None = None
        _tcp: Any | None = None  # the TCP socket, which says when data arrived (arrival.py)

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            super().connection_made(transport)  # type: ignore[arg-type]
            self._tcp = tcp_socket(transport)

        def data_received(self, data: bytes) -> None:
            if self._lingering is not None:  # refused: read and thrown away, up to a bound
                self._lingering -= len(data)
                if self._lingering < 0:
                    self.transport.close()
                return
            for piece in head_steps(data, self._reading_head):
                self._parse(piece)
                if self.transport.is_closing() or self._lingering is not None:
                    return

        def _reading_head(self) -> bool:
            return self._in_head or not self._in_message

        def _parse(self, data: bytes) -> None:
            self._progressed = False
            super().data_received(data)
            if not self._in_message or self.transport.is_closing():
                self._stalled = 0
            elif self._progressed:
                self._stalled = 0  # counted from the last callback: never refused early
            else:
                self._stalled += len(data)
                if self._head_bytes + self._stalled > MAX_HEAD_BYTES:
                    self._refuse_stalled()

        def _refuse_stalled(self) -> None:
            cycle = self.cycle
            if cycle is not None and cycle.response_started and not cycle.response_complete:
                self.transport.close()  # an answer is under way: the connection just ends
                return
            status, text = (
                (431, "Request Header Fields Too Large")
                if self._in_head
                else (400, "Invalid HTTP request")
            )
            LOG.warning(
                "request from %s: %d bytes that complete nothing: refused (%d)",
                show(self.client),
                self._head_bytes + self._stalled,
                status,
            )
            self.transport.write(error_response(status, text))
            # A lingering close, as lean's: the sending side shut, what still comes read and
            # dropped until the client closes (a close with bytes unread is a reset, which can
            # overtake the answer).
            if cycle is not None and not cycle.response_complete:
                # A request still being read (a trailer that never ends): its app hears that
                # its client is gone, and sends nothing after the refusal.
                cycle.disconnected = True
                cycle.message_event.set()
            try:
                self.transport.write_eof()
            except (NotImplementedError, OSError, RuntimeError):  # pragma: no cover - TLS
                self.transport.close()
                return
            self._lingering = DRAIN_BYTES
            self._linger_timer = self.loop.call_later(LINGER_S, self.transport.close)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._in_message = self._in_head = self._progressed = True
            self._head_bytes = self._stalled = 0
            scope: dict[str, Any] = self.scope  # type: ignore[assignment]
            scope[RECEIVED_AT] = arrival(self._tcp, self.loop.time())
            scope[ON_DISCONNECT] = self._watch_disconnect

        def on_url(self, url: bytes) -> None:
            self._progressed = True
            self._head_bytes += len(url)
            super().on_url(url)

        def on_header(self, name: bytes, value: bytes) -> None:
            self._progressed = True
            self._head_bytes += len(name) + len(value) + 4
            if self._in_head:
                # RFC 9110 §5.5: whitespace ending a field is not part of its value (llhttp
                # keeps it; uvicorn strips it only since 0.55). Checked first: no new bytes
                # object for the usual value.
                if value[-1:] in (b" ", b"\t"):
                    value = value.rstrip(b" \t")
                super().on_header(name, value)
                return
            # A trailer, after a chunked body: read and dropped (uvicorn would append it to
            # the scope's headers, which the app has read already); logged with the request.
            if self._trailers is None:
                self._trailers = []
            if len(self._trailers) < TRAILERS_SHOWN:
                self._trailers.append(name)

        def on_headers_complete(self) -> None:
            self._in_head = False
            self._progressed = True
            super().on_headers_complete()
            cycle = self.cycle
            if type(cycle) is RequestResponseCycle:  # before its task first runs
                cycle.__class__ = CheckedCycle

        def on_body(self, body: bytes) -> None:
            self._progressed = True
            super().on_body(body)

        def on_message_complete(self) -> None:
            self._in_message = self._in_head = False
            self._progressed = True
            if self._trailers is not None:
                log_dropped_trailers(self.client, self._trailers)
                self._trailers = None
            super().on_message_complete()

        def pause_writing(self) -> None:
            super().pause_writing()
            self._write_deadline()

        def _write_deadline(self) -> None:
            if self._write_timer is None:
                self._write_unsent = self.transport.get_write_buffer_size()
                self._write_timer = self.loop.call_later(write_timeout_s, self._write_timed_out)

        def resume_writing(self) -> None:
            super().resume_writing()
            if self._write_timer is not None:
                self._write_timer.cancel()
                self._write_timer = None

        def _write_timed_out(self) -> None:
            self._write_timer = None
            if self.transport.get_write_buffer_size() < self._write_unsent:
                self._write_deadline()  # it reads, slowly: another deadline
                return
            LOG.warning(
                "%s read nothing for %g s (%d bytes unsent): aborted",
                show(self.client),
                write_timeout_s,
                self.transport.get_write_buffer_size(),
            )
            self.transport.abort()

        def _watch_disconnect(self, callback: Callable[[], object] | None) -> None:
            if callback is not None and self.transport.is_closing():
                self.loop.call_soon(callback)  # gone already (never called from in here)
                return
            self._on_lost = callback

        def connection_lost(self, exc: Exception | None) -> None:
            for timer in (self._write_timer, self._linger_timer):
                if timer is not None:
                    timer.cancel()
            self._write_timer = self._linger_timer = None
            super().connection_lost(exc)
            callback, self._on_lost = self._on_lost, None
            if callback is not None:
                callback()

    return ProxyHttpToolsProtocol
