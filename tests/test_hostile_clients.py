"""Clients that are not to be trusted, on both of ``serve``'s own HTTP protocols: the lean server
(``_proxy/lean_http.py``) and uvicorn with our httptools protocol (``_proxy/uvicorn_http.py``).
Each defect of issue #35 is sent as its exact bytes, through the protocol object on a fake
transport (what it wrote, whether it closed or aborted) and, where the socket matters (a FIN
read, a reset, a kernel buffer filling), over loopback.

Plain functions running their own loop: both protocols exist on asyncio only."""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from aiostream_synth._proxy import lean_http
from aiostream_synth._proxy.lean_http import Limits, _Connection, _Server
from aiostream_synth._proxy.uvicorn_http import http_protocol
from aiostream_synth._serving.pipeline import ON_DISCONNECT

from .support.fake_transport import FakeTransport
from .support.servers import read_body

Message = dict[str, Any]
App = Callable[[Any, Any, Any], Coroutine[Any, Any, None]]
KINDS = ["lean", "uvicorn"]
HEAD_LIMIT = lean_http.MAX_HEAD_BYTES


def _run(main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    asyncio.run(main())  # a hang is ended by the test's timeout


async def _until(condition: Callable[[], object]) -> None:
    """Yield to the loop until ``condition()`` holds (state no event announces)."""
    while not condition():  # noqa: ASYNC110 - polled state, not a timed wait
        await asyncio.sleep(0)


def _closing(transport: FakeTransport) -> bool:
    """Read afresh (an assert on the attribute narrows it for the rest of the test)."""
    return transport.closing


def _connect(kind: str, app: App, limits: Limits | None = None) -> tuple[Any, FakeTransport]:
    """A connected protocol of ``kind`` serving ``app``, on a fake transport."""
    limits = limits or Limits()
    transport = FakeTransport()
    protocol: Any
    if kind == "lean":
        protocol = _Connection(_Server(app, asyncio.get_running_loop(), limits))
    else:
        config = uvicorn.Config(
            app,
            lifespan="off",
            http=http_protocol(write_timeout_s=limits.write_timeout_s),
            log_level="critical",
            interface="asgi3",
        )
        config.load()
        protocol = config.http_protocol_class(  # type: ignore[call-arg]
            config=config, server_state=ServerState(), app_state={}
        )
    protocol.connection_made(transport)
    return protocol, transport


class _Echo:
    """Reads the whole body, then answers with the scope's headers (as they stand after the
    body, trailers included if a server let them in) and the body."""

    def __init__(self) -> None:
        self.calls = 0
        self.gone = False  # receive() said the client left
        self.headers: list[tuple[bytes, bytes]] = []

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        self.calls += 1
        body = await read_body(receive)
        if body is None:
            self.gone = True
            return
        self.headers = list(scope["headers"])
        answer = json.dumps(
            {"headers": [[n.decode(), v.decode()] for n, v in self.headers], "body": len(body)}
        ).encode()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-length", str(len(answer)).encode())],
            }
        )
        await send({"type": "http.response.body", "body": answer})


# -- 1. one endless header value -------------------------------------------------------------


@pytest.mark.parametrize("together", [False, True], ids=["head-apart", "head-in-the-read"])
@pytest.mark.parametrize("chunk", [7, 4096, 100_000, 262_144])
@pytest.mark.parametrize("kind", KINDS)
def test_an_endless_header_value_gets_a_431_once_the_head_limit_came(
    kind: str, chunk: int, together: bool
) -> None:
    """``X-Big: `` then ``a`` for ever, no CRLF: refused within 16 KiB of the limit, however
    the bytes are cut (httptools keeps the value until its line ends, so a limit checked only
    when a header completes never fires), also when the head's start shares the first read."""

    async def main() -> None:
        app = _Echo()
        protocol, transport = _connect(kind, app)
        start = b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: "
        if together:
            protocol.data_received(start + b"a" * (chunk - len(start)))
        else:
            protocol.data_received(start)
        fed = 0
        while not transport.ended:
            # Refused within 16 KiB of the limit: a large read is parsed in steps of that.
            assert fed <= HEAD_LIMIT + min(chunk, 16 * 1024), "fed past the limit and a step"
            protocol.data_received(b"a" * chunk)
            fed += chunk
        assert transport.written.startswith(b"HTTP/1.1 431 "), transport.written[:80]
        assert b"connection: close" in transport.written
        assert app.calls == 0

    _run(main)


@pytest.mark.parametrize("kind", KINDS)
def test_an_endless_trailer_is_refused(kind: str) -> None:
    """The same after a chunked body: a trailer value that never ends gets a 400."""

    async def main() -> None:
        app = _Echo()
        protocol, transport = _connect(kind, app)
        protocol.data_received(
            b"POST / HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"1\r\na\r\n0\r\nX-Trailer: "
        )
        fed = 0
        while not transport.ended:
            assert fed <= HEAD_LIMIT + 4096
            protocol.data_received(b"a" * 4096)
            fed += 4096
        assert transport.written.startswith(b"HTTP/1.1 400 "), transport.written[:80]
        if kind == "lean":
            protocol.connection_lost(None)  # the lingering close ends (a fake transport's)
        await _until(lambda: app.gone)  # the app waiting for the body hears its client left

    _run(main)


@pytest.mark.parametrize("kind", KINDS)
def test_a_large_head_and_body_fed_in_small_reads_are_not_refused(kind: str) -> None:
    """The bound counts bytes that complete nothing, so a head just under the limit arriving a
    kilobyte at a time, and a body of any size, pass."""

    async def main() -> None:
        app = _Echo()
        protocol, transport = _connect(kind, app)
        value = b"v" * (HEAD_LIMIT - 1024)
        body = b"b" * 300_000
        wire = b"POST / HTTP/1.1\r\nHost: x\r\nX-Large: %b\r\nContent-Length: %d\r\n\r\n%b" % (
            value,
            len(body),
            body,
        )
        for start in range(0, len(wire), 1000):
            protocol.data_received(wire[start : start + 1000])
            await asyncio.sleep(0)  # the app takes the body (else reading pauses)
        await _until(lambda: b"\r\n\r\n{" in transport.written)
        assert transport.written.startswith(b"HTTP/1.1 200 ")
        assert json.loads(transport.written.split(b"\r\n\r\n", 1)[1])["body"] == len(body)
        assert (b"x-large", value) in app.headers

    _run(main)


# -- 5 and 9. trailing whitespace, trailers ---------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_trailers_never_join_the_request_headers(
    kind: str, caplog: pytest.LogCaptureFixture
) -> None:
    """``0\\r\\nx-api-key: KEY\\r\\n\\r\\n`` after a chunked body: read and dropped (an
    ``--api-key`` check reading the headers must never see it), and the drop logged (P10)."""
    caplog.set_level(logging.INFO, "aiostream_synth")

    async def main() -> None:
        app = _Echo()
        protocol, transport = _connect(kind, app)
        protocol.data_received(
            b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"2\r\n{}\r\n0\r\nx-api-key: KEY\r\n\r\n"
        )
        await _until(lambda: transport.written)
        assert transport.written.startswith(b"HTTP/1.1 200 ")
        assert [name for name, _ in app.headers] == [b"host", b"transfer-encoding"]

    _run(main)
    dropped = [r.getMessage() for r in caplog.records if "trailer" in r.getMessage()]
    assert len(dropped) == 1
    assert dropped[0].endswith("dropped (not passed on): x-api-key")


@pytest.mark.parametrize("kind", KINDS)
def test_header_values_lose_the_whitespace_that_ends_them(kind: str) -> None:
    """RFC 9110 §5.5: ``x-api-key: KEY \\r\\n`` is the key ``KEY``; ``Expect: 100-continue \\r\\n``
    gets its 100 (else the client waits for a 408)."""

    async def main() -> None:
        app = _Echo()
        protocol, transport = _connect(kind, app)
        protocol.data_received(
            b"POST / HTTP/1.1\r\nHost: x\r\nx-api-key: KEY \t\r\nExpect: 100-continue \r\n"
            b"Content-Length: 2\r\n\r\n"
        )
        await _until(lambda: transport.written)
        assert transport.written == b"HTTP/1.1 100 Continue\r\n\r\n"
        protocol.data_received(b"{}")
        await _until(lambda: b"200 OK" in transport.written)
        assert (b"x-api-key", b"KEY") in app.headers
        assert (b"expect", b"100-continue") in app.headers

    _run(main)


# -- 7. the write deadline --------------------------------------------------------------------


async def _answer_begun(scope: Any, receive: Any, send: Any) -> None:
    """Begins its answer, then holds it open."""
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"x" * 100, "more_body": True})
    await asyncio.Event().wait()


async def _answering(kind: str) -> tuple[Any, FakeTransport, str]:
    """A connection of ``kind`` whose answer has begun, its write deadline 10 ms, and the name
    of its write timer."""
    protocol, transport = _connect(kind, _answer_begun, Limits(write_timeout_s=0.01))
    protocol.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
    await _until(lambda: transport.written)
    return protocol, transport, "write_timer" if kind == "lean" else "_write_timer"


@pytest.mark.parametrize("kind", KINDS)
def test_a_client_reading_nothing_is_aborted_at_the_write_deadline(kind: str) -> None:
    """While the transport's buffer is full the deadline runs; the buffer draining in time
    stops it; a client still reading nothing when it fires is aborted."""

    async def main() -> None:
        protocol, transport, timer = await _answering(kind)
        protocol.pause_writing()
        assert getattr(protocol, timer) is not None
        protocol.resume_writing()  # drained in time
        assert getattr(protocol, timer) is None
        protocol.pause_writing()
        transport.buffered = 5_000_000
        await _until(lambda: transport.aborted)
        protocol.connection_lost(None)

    _run(main)


@pytest.mark.parametrize("kind", KINDS)
def test_a_client_reading_slowly_gets_a_new_write_deadline(kind: str) -> None:
    """Fewer bytes unsent when the deadline fires than when it was set: the client reads, just
    slowly (a large answer on a slow link), and is given another deadline, not aborted."""

    async def main() -> None:
        protocol, transport, timer = await _answering(kind)
        transport.buffered = 5_000_000
        protocol.pause_writing()
        first = getattr(protocol, timer)
        transport.buffered = 4_000_000  # some of it was read
        await _until(lambda: getattr(protocol, timer) is not first)
        assert getattr(protocol, timer) is not None  # a new deadline
        assert not transport.aborted
        await _until(lambda: transport.aborted)  # then nothing more was read: aborted
        protocol.connection_lost(None)

    _run(main)


def test_a_closing_connection_with_bytes_unsent_is_aborted_at_the_write_deadline() -> None:
    """lean closes an idle or refused connection with ``close()``, which waits for the buffer
    to be sent: a client that never reads would hold it open for ever."""

    async def main() -> None:
        protocol, transport = _connect("lean", _Echo(), Limits(write_timeout_s=0.01))
        transport.buffered = 1000
        protocol.close()
        assert transport.closing
        await _until(lambda: transport.aborted)
        protocol.connection_lost(None)
        assert protocol.write_timer is None

    _run(main)


def test_a_client_that_never_reads_a_long_answer_over_loopback_is_aborted() -> None:
    """The real thing: the kernel's buffers fill, the transport's fills, the deadline fires,
    the connection is aborted and the app hears its client left."""
    left = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        scope[ON_DISCONNECT](left.set)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        chunk = b"x" * 65536
        while not left.is_set():
            await send({"type": "http.response.body", "body": chunk, "more_body": True})

    async def main() -> None:
        loop = asyncio.get_running_loop()
        state = _Server(app, loop, Limits(write_timeout_s=0.05))
        server = await loop.create_server(lambda: _Connection(state), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # and nothing is ever read
        await left.wait()
        await _until(lambda: not state.connections)
        writer.close()
        server.close()
        await asyncio.gather(*state.tasks)

    _run(main)


# -- 8. the connection cap --------------------------------------------------------------------


def test_a_connection_beyond_the_cap_gets_a_503() -> None:
    async def main() -> None:
        loop = asyncio.get_running_loop()
        state = _Server(_Echo(), loop, Limits(max_connections=1))
        server = await loop.create_server(lambda: _Connection(state), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _, first = await asyncio.open_connection("127.0.0.1", port)
        await _until(lambda: len(state.connections) == 1)
        reader, second = await asyncio.open_connection("127.0.0.1", port)
        answer = await reader.read()  # to the end: the server closed it
        assert answer.startswith(b"HTTP/1.1 503 "), answer
        assert answer.endswith(b"too many connections")
        assert len(state.connections) == 1
        first.close()
        second.close()
        await _until(lambda: not state.connections)
        server.close()

    _run(main)


def test_limits_are_checked() -> None:
    with pytest.raises(ValueError, match="write_timeout_s"):
        Limits(write_timeout_s=0)
    with pytest.raises(ValueError, match="max_connections"):
        Limits(max_connections=0)


# -- 6. a pipelining client that leaves -------------------------------------------------------


def test_a_pipelining_client_that_leaves_is_noticed() -> None:
    """Two requests pipelined, then the client closes: the first's app hears of it (its
    backend call cancelled), though the second still waits its turn unparsed."""
    left = asyncio.Event()

    async def app(scope: Any, receive: Any, send: Any) -> None:
        scope[ON_DISCONNECT](left.set)
        await left.wait()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        state = _Server(app, loop)
        server = await loop.create_server(lambda: _Connection(state), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        _, writer = await asyncio.open_connection("127.0.0.1", port)
        request = b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 2\r\n\r\n{}"
        writer.write(request + request)
        await _until(lambda: any(conn.pipeline for conn in state.connections))
        writer.write(request)  # read and held while the second waits
        await _until(lambda: any(conn.held for conn in state.connections))
        writer.close()
        await left.wait()
        await _until(lambda: not state.connections)
        server.close()
        await asyncio.gather(*state.tasks)

    _run(main)


# -- 10. an early answer drains the body ------------------------------------------------------


async def _early_401(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 401, "headers": []})
    await send({"type": "http.response.body", "body": b"no"})


def test_an_early_answer_reads_the_rest_of_the_body_then_closes_cleanly() -> None:
    """A 401 before the body was read: the connection stays open while the body comes (read and
    thrown away), then closes with a FIN, not a reset that could overtake the answer."""

    async def main() -> None:
        loop = asyncio.get_running_loop()
        state = _Server(_early_401, loop)
        server = await loop.create_server(lambda: _Connection(state), "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        body = b"x" * 200_000
        writer.write(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: %d\r\n\r\n" % len(body))
        writer.write(body[:1000])
        head = await reader.readuntil(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 401 ")
        assert b"connection: close" in head
        assert await reader.readexactly(7) == b"2\r\nno\r\n"
        (conn,) = state.connections
        assert conn.draining is not None  # still open, reading what comes
        writer.write(body[1000:])
        assert await reader.read() == b"0\r\n\r\n"  # the last chunk, then a clean end
        writer.close()
        server.close()

    _run(main)


def test_an_early_answer_drains_no_more_than_its_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(lean_http, "DRAIN_BYTES", 5000)

    async def main() -> None:
        protocol, transport = _connect("lean", _early_401)
        protocol.data_received(b"POST / HTTP/1.1\r\nHost: x\r\nContent-Length: 100000\r\n\r\n")
        await _until(lambda: transport.written)
        assert not transport.closing
        protocol.data_received(b"x" * 4000)
        assert not transport.closing
        protocol.data_received(b"x" * 4000)
        assert _closing(transport)
        protocol.connection_lost(None)

    _run(main)


def test_an_early_answer_owed_a_100_continue_closes_at_once() -> None:
    """A client still waiting for its go-ahead may send no body at all: nothing to drain."""

    async def main() -> None:
        protocol, transport = _connect("lean", _early_401)
        protocol.data_received(
            b"POST / HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 9\r\n\r\n"
        )
        await _until(lambda: transport.closing)
        assert b"100 Continue" not in transport.written
        protocol.connection_lost(None)

    _run(main)


# -- 4. statuses below 200 --------------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_an_app_starting_its_answer_with_a_1xx_gets_a_500(kind: str) -> None:
    async def app(scope: Any, receive: Any, send: Any) -> None:
        await send({"type": "http.response.start", "status": 100, "headers": []})

    async def main() -> None:
        protocol, transport = _connect(kind, app)
        protocol.data_received(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")
        await _until(lambda: transport.closing)
        assert transport.written.startswith(b"HTTP/1.1 500 "), transport.written
        protocol.connection_lost(None)

    _run(main)


# -- [hardening] §2: bytes after the last request ---------------------------------------------


@pytest.mark.parametrize("split", [False, True], ids=["one-read", "two-reads"])
@pytest.mark.parametrize(
    "first",
    [
        b"GET / HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n",
        b"GET / HTTP/1.0\r\nHost: x\r\n\r\n",
    ],
    ids=["connection-close", "http-1.0"],
)
@pytest.mark.parametrize("kind", KINDS)
def test_a_last_request_followed_by_more_bytes_is_answered_and_the_rest_ignored(
    kind: str, first: bytes, split: bool
) -> None:
    """uvicorn's ``test_close_connection_with_multiple_requests``: the request is answered
    (not a 400 for the bytes after it), nothing after it is, and the connection closes."""

    async def main() -> None:
        app = _Echo()
        protocol, transport = _connect(kind, app)
        rest = b"GET /second HTTP/1.1\r\nHost: x\r\n\r\n"
        if split:
            protocol.data_received(first)
            protocol.data_received(rest)
        else:
            protocol.data_received(first + rest)
        await _until(lambda: transport.closing)
        assert transport.written.startswith(b"HTTP/1.1 200 "), transport.written[:80]
        assert transport.written.count(b"HTTP/1.1 ") == 1
        assert app.calls == 1

    _run(main)


# -- refusals close lingering -----------------------------------------------------------------


@pytest.mark.parametrize("kind", KINDS)
def test_a_refusal_closes_lingering_within_its_bounds(
    kind: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a 431 the sending side is shut (a FIN follows the answer) and what the client still
    sends is read and dropped: a close with bytes unread would be a reset, which can overtake
    the answer. Bounded: past DRAIN_BYTES, or after LINGER_S, the connection closes."""
    from aiostream_synth._proxy import uvicorn_http

    module: Any = lean_http if kind == "lean" else uvicorn_http
    monkeypatch.setattr(module, "DRAIN_BYTES", 10_000)

    async def main() -> None:
        protocol, transport = _connect(kind, _Echo())
        protocol.data_received(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 300_000)
        assert transport.eof
        assert not transport.closing
        answer = transport.written
        assert answer.startswith(b"HTTP/1.1 431 ")
        protocol.data_received(b"a" * 6000)
        assert not transport.closing
        protocol.data_received(b"a" * 6000)
        assert _closing(transport)
        assert transport.written == answer  # nothing more was answered
        protocol.connection_lost(None)

    _run(main)


@pytest.mark.parametrize("kind", KINDS)
def test_a_lingering_close_ends_at_its_deadline(kind: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from aiostream_synth._proxy import uvicorn_http

    module: Any = lean_http if kind == "lean" else uvicorn_http
    monkeypatch.setattr(module, "LINGER_S", 0.01)

    async def main() -> None:
        protocol, transport = _connect(kind, _Echo())
        protocol.data_received(b"GET / HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 300_000)
        assert transport.eof
        await _until(lambda: transport.closing)
        protocol.connection_lost(None)

    _run(main)
