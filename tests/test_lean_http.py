"""``serve --server lean`` (``_proxy/lean_http.py``): the HTTP/1.1 server of our own, on real
loopback sockets with h11 (a strict HTTP parser) reading its answers, on asyncio and uvloop.

Plain functions running their own loop: the server exists on asyncio loops only."""

from __future__ import annotations

import asyncio
import gc
import itertools
import json
import socket
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine
from contextlib import asynccontextmanager
from typing import Any

import h11
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiostream_synth._proxy import lean_http
from aiostream_synth._proxy.lean_http import _Connection, _Server
from aiostream_synth._serving.pipeline import ON_DISCONNECT, RECEIVED_AT

from .support.fake_transport import FakeTransport
from .support.servers import read_body

LOOPS = ["asyncio", "uvloop"]
#: How early the kernel's arrival time can be: one scheduler tick (HZ is 100 at the least).
KERNEL_TICK_S = 0.011
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]


def _run(loop_kind: str, main: Callable[[], Coroutine[Any, Any, None]]) -> None:
    if loop_kind == "uvloop":
        uvloop = pytest.importorskip("uvloop")
        loop: asyncio.AbstractEventLoop = uvloop.new_event_loop()
    else:
        loop = asyncio.new_event_loop()
    try:
        loop.run_until_complete(asyncio.wait_for(main(), 10))
    finally:
        loop.close()


@asynccontextmanager
async def _listening(
    app: Any, limits: lean_http.Limits | None = None
) -> AsyncIterator[tuple[int, _Server]]:
    loop = asyncio.get_running_loop()
    state = _Server(app, loop, limits)
    server = await loop.create_server(lambda: _Connection(state), "127.0.0.1", 0)
    try:
        yield server.sockets[0].getsockname()[1], state
    finally:
        server.close()
        for conn in list(state.connections):
            conn.close()
        for task in list(state.tasks):
            task.cancel()
        await asyncio.gather(*state.tasks, return_exceptions=True)


class _Client:
    """One connection; h11 reads the server's answers."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer
        self.h11 = h11.Connection(h11.CLIENT)

    @classmethod
    async def open(cls, port: int) -> _Client:
        return cls(*await asyncio.open_connection("127.0.0.1", port))

    def send(self, data: bytes) -> None:
        self.writer.write(data)

    async def event(self) -> Any:
        while True:
            event = self.h11.next_event()
            if event is not h11.NEED_DATA:
                return event
            self.h11.receive_data(await self.reader.read(65536))

    async def response(self) -> tuple[h11.Response, bytes]:
        """The next whole response (the request bytes were written raw, so h11 is told of a
        request first)."""
        if self.h11.our_state is h11.DONE and self.h11.their_state is h11.DONE:
            self.h11.start_next_cycle()
        self.h11.send(h11.Request(method="GET", target="/", headers=[("host", "t")]))
        self.h11.send(h11.EndOfMessage())
        head = await self.event()
        while isinstance(head, h11.InformationalResponse):
            head = await self.event()
        assert isinstance(head, h11.Response), head
        body = b""
        while not isinstance(event := await self.event(), h11.EndOfMessage):
            assert isinstance(event, h11.Data), event
            body += event.data
        return head, body

    def close(self) -> None:
        self.writer.close()


async def _until(condition: Callable[[], object]) -> None:
    """Yield to the loop until ``condition()`` holds: for the server's state that no event
    announces (no timing involved; the test's overall timeout bounds it)."""
    while not condition():  # noqa: ASYNC110 - polled state, not a timed wait
        await asyncio.sleep(0)


def _post(path: str, body: bytes, *headers: str, version: str = "1.1") -> bytes:
    head = [f"POST {path} HTTP/{version}", "Host: t", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def _headers(response: h11.Response) -> dict[bytes, bytes]:
    return dict(response.headers)


async def _read_body(receive: Receive) -> bytes:
    body = await read_body(receive)
    assert body is not None, "the client left before its body was whole"
    return body


async def _echo(scope: Any, receive: Receive, send: Send) -> None:
    """Answers with what it was sent; ``?chunked`` streams the answer in two parts."""
    body = await _read_body(receive)
    answer = json.dumps(
        {
            "method": scope["method"],
            "path": scope["path"],
            "raw_path": scope["raw_path"].decode(),
            "query": scope["query_string"].decode(),
            "version": scope["http_version"],
            "body": body.decode("latin-1"),
        }
    ).encode()
    if scope["query_string"] == b"chunked":
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": answer[:5], "more_body": True})
        await send({"type": "http.response.body", "body": answer[5:]})
    else:
        headers = [(b"content-length", str(len(answer)).encode())]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": answer})


@pytest.mark.parametrize("loop", LOOPS)
def test_a_connection_answers_its_requests_in_turn(loop: str) -> None:
    """Keep-alive: requests one after another on one connection, each answered whole, framed
    by its content-length or chunked."""

    async def main() -> None:
        async with _listening(_echo) as (port, _):
            client = await _Client.open(port)
            client.send(_post("/a", b"one"))
            head, body = await client.response()
            assert head.status_code == 200
            assert _headers(head)[b"content-length"] == str(len(body)).encode()
            assert json.loads(body)["body"] == "one"
            client.send(_post("/b?chunked", b"two"))
            head, body = await client.response()
            assert _headers(head)[b"transfer-encoding"] == b"chunked"
            assert json.loads(body)["body"] == "two"
            assert b"date" in _headers(head)
            client.close()

    _run(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_pipelined_requests_wait_their_turn(loop: str) -> None:
    """A request parsed while another is answered is started only once that answer is
    complete; what comes after it meanwhile is read (so a client leaving is seen) and held
    unparsed; the answers come in the order asked."""
    release = asyncio.Event()
    entered: list[str] = []

    async def app(scope: Any, receive: Receive, send: Send) -> None:
        entered.append(scope["path"])
        if scope["path"] == "/first":
            await release.wait()
        await _echo(scope, receive, send)

    async def main() -> None:
        async with _listening(app) as (port, state):
            client = await _Client.open(port)
            client.send(_post("/first", b"1") + _post("/second", b"2"))
            # until the server has parsed the second request and started the first
            await _until(lambda: entered and any(conn.pipeline for conn in state.connections))
            (conn,) = state.connections
            assert not conn.reading_paused
            client.send(_post("/third", b"3"))
            await _until(lambda: conn.held)
            assert bytes(conn.held or b"") == _post("/third", b"3")
            assert entered == ["/first"]
            release.set()
            first = json.loads((await client.response())[1])
            second = json.loads((await client.response())[1])
            third = json.loads((await client.response())[1])
            assert (first["path"], second["path"], third["path"]) == ("/first", "/second", "/third")
            assert third["body"] == "3"
            assert entered == ["/first", "/second", "/third"]
            assert not conn.held
            assert not conn.reading_paused
            client.close()

    _run(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_the_scope(loop: str) -> None:
    """The scope an ASGI app expects, plus the request's arrival (when its bytes reached the
    kernel: up to one kernel tick early, ``KERNEL_TICK_S``) and the disconnect hook; no
    lifespan state."""
    scopes: list[Any] = []
    entered: list[float] = []

    async def app(scope: Any, receive: Receive, send: Send) -> None:
        entered.append(asyncio.get_running_loop().time())
        scopes.append(dict(scope))
        await _echo(scope, receive, send)

    async def main() -> None:
        async with _listening(app) as (port, _):
            client = await _Client.open(port)
            before = asyncio.get_running_loop().time()
            client.send(_post("/v1/a%20b?x=1", b"{}", "X-Custom: Value"))
            await client.response()
            (scope,) = scopes
            assert scope["type"] == "http"
            assert scope["asgi"] == {"version": "3.0", "spec_version": "2.3"}
            assert (scope["method"], scope["path"], scope["raw_path"]) == (
                "POST",
                "/v1/a b",
                b"/v1/a%20b",
            )
            assert scope["query_string"] == b"x=1"
            assert scope["http_version"] == "1.1"
            assert scope["scheme"] == "http"
            assert scope["root_path"] == ""
            assert (b"x-custom", b"Value") in scope["headers"]
            assert (b"host", b"t") in scope["headers"]
            assert scope["client"] == client.writer.get_extra_info("sockname")[:2]
            assert scope["server"] == ("127.0.0.1", port)
            assert before - KERNEL_TICK_S <= scope[RECEIVED_AT] <= entered[0]
            assert callable(scope[ON_DISCONNECT])
            assert "state" not in scope
            client.close()

    _run(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_the_server_lets_go_of_the_scope_once_the_app_has_it(loop: str) -> None:
    """The app owns the scope: while it streams, the server holds nothing of it (a waiting
    stream would otherwise keep its scope and header list, 0.8 KiB, for minutes; #32 §1)."""
    held: list[Any] = []
    streaming = asyncio.Event()
    release = asyncio.Event()

    async def app(scope: Any, receive: Receive, send: Send) -> None:
        held.append(scope)
        del scope
        await _read_body(receive)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"waiting", "more_body": True})
        streaming.set()
        await release.wait()
        await send({"type": "http.response.body", "body": b""})

    async def main() -> None:
        async with _listening(app) as (port, _):
            client = await _Client.open(port)
            client.send(_post("/", b""))
            await streaming.wait()
            referrers = [type(r).__name__ for r in gc.get_referrers(held[0]) if r is not held]
            release.set()
            assert (await client.response())[1] == b"waiting"
            client.close()
            assert referrers == []

    _run(loop, main)


@pytest.mark.skipif(not hasattr(socket, "TCP_INFO"), reason="TCP_INFO is Linux's")
@pytest.mark.parametrize("loop", LOOPS)
def test_a_request_read_late_is_stamped_when_it_arrived(loop: str) -> None:
    """A request whose bytes sat in the kernel while the loop was busy carries its arrival, not
    the time the loop got to it (the first keepalive is due one interval after the client sent
    it, #32 §1): the loop is held busy, without yielding, right after the request is sent."""
    scopes: list[Any] = []
    busy_s = 0.3

    async def app(scope: Any, receive: Receive, send: Send) -> None:
        scopes.append(dict(scope))
        await _echo(scope, receive, send)

    async def main() -> None:
        loop_ = asyncio.get_running_loop()
        async with _listening(app) as (port, _):
            # A plain blocking socket: its bytes are in the kernel when sendall returns (a
            # transport of this loop may hold them until the loop turns: uvloop 0.19 does).
            raw = socket.create_connection(("127.0.0.1", port))
            sent = loop_.time()
            raw.sendall(_post("/v1/responses", b"{}"))
            # Busy, as a loop preparing a burst of requests is: nothing is read meanwhile.
            while time.monotonic() < sent + busy_s:
                pass
            client = _Client(*await asyncio.open_connection(sock=raw))
            await client.response()
            (scope,) = scopes
            # Read at sent + busy_s at the earliest: the loop's own time would say so.
            assert sent - KERNEL_TICK_S <= scope[RECEIVED_AT] < sent + busy_s / 3
            client.close()

    _run(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_client_leaving_mid_response_calls_back_once_and_ends_receive(loop: str) -> None:
    """The callback handed to the scope's hook is called once when the client leaves; a
    pending ``receive()`` returns ``http.disconnect``; later sends are dropped quietly."""
    calls: list[str] = []
    ended = asyncio.Event()
    streaming = asyncio.Event()

    async def app(scope: Any, receive: Receive, send: Send) -> None:
        scope[ON_DISCONNECT](lambda: calls.append("left"))
        await _read_body(receive)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"x", "more_body": True})
        streaming.set()
        assert await receive() == {"type": "http.disconnect"}
        await send({"type": "http.response.body", "body": b"y", "more_body": True})
        await send({"type": "http.response.body", "body": b""})
        ended.set()

    async def main() -> None:
        async with _listening(app) as (port, state):
            client = await _Client.open(port)
            client.send(_post("/", b""))
            await streaming.wait()
            (conn,) = state.connections
            client.close()
            await ended.wait()
            assert calls == ["left"]
            # nothing left for the collector: the connection lets its exchange and reader go
            assert (conn.current, conn.parsing, conn.reader) == (None, None, None)

    _run(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_withdrawn_callback_is_not_called_and_a_late_one_runs_soon(loop: str) -> None:
    """``watch(None)`` withdraws the callback; one handed over after the client left runs on
    a later loop iteration, never inside ``watch``."""
    calls: list[str] = []
    ended = asyncio.Event()

    async def app(scope: Any, receive: Receive, send: Send) -> None:
        watch = scope[ON_DISCONNECT]
        watch(lambda: calls.append("withdrawn"))
        watch(None)
        await _read_body(receive)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        assert await receive() == {"type": "http.disconnect"}  # after the client left
        watch(lambda: calls.append("late"))
        assert calls == []
        await asyncio.sleep(0)
        assert calls == ["late"]
        ended.set()

    async def main() -> None:
        async with _listening(app) as (port, _):
            client = await _Client.open(port)
            client.send(_post("/", b""))
            client.close()
            await ended.wait()

    _run(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_chunked_request_body_arrives_whole(loop: str) -> None:
    async def main() -> None:
        async with _listening(_echo) as (port, _):
            client = await _Client.open(port)
            client.send(b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n")
            client.send(b"3\r\nabc\r\n")
            await client.writer.drain()
            client.send(b"2\r\nde\r\n0\r\n\r\n")
            assert json.loads((await client.response())[1])["body"] == "abcde"
            client.close()

    _run(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_reading_pauses_while_the_app_has_not_taken_the_body(loop: str) -> None:
    """More than BODY_HIGH_WATER bytes waiting for the app pause reading from the client;
    the app's ``receive()`` resumes it, and the body arrives intact."""
    take = asyncio.Event()
    body = bytes(range(256)) * (lean_http.BODY_HIGH_WATER // 256 * 4)

    async def app(scope: Any, receive: Receive, send: Send) -> None:
        await take.wait()
        received = await _read_body(receive)
        assert received == body
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})

    async def main() -> None:
        async with _listening(app) as (port, state):
            client = await _Client.open(port)
            client.send(_post("/", body))
            await _until(
                lambda: any(conn.reading_paused for conn in state.connections)
            )  # until the server has buffered past its mark
            take.set()
            head, _ = await client.response()
            assert head.status_code == 204
            client.close()

    _run(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_expect_100_continue(loop: str) -> None:
    """A client that waits for ``100 Continue`` before its body gets it when the app reads."""

    async def main() -> None:
        async with _listening(_echo) as (port, _):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(
                b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\nExpect: 100-continue\r\n\r\n"
            )
            assert await reader.readuntil(b"\r\n\r\n") == b"HTTP/1.1 100 Continue\r\n\r\n"
            writer.write(b"ok")
            status = await reader.readline()
            assert status.startswith(b"HTTP/1.1 200"), status
            writer.close()

    _run(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_http_1_0_answers_end_with_the_connection(loop: str) -> None:
    """HTTP/1.0: no keep-alive, no chunked coding; a body without a length ends with the
    connection."""

    async def main() -> None:
        async with _listening(_echo) as (port, _):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(_post("/?chunked", b"old", version="1.0"))
            answer = await reader.read()  # to the end: the server closes
            head, body = answer.split(b"\r\n\r\n", 1)
            assert head.startswith(b"HTTP/1.1 200 OK\r\n")
            assert b"connection: close" in head
            assert b"transfer-encoding" not in head
            assert json.loads(body)["version"] == "1.0"
            writer.close()

    _run(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_bodyless_answers_write_no_body(loop: str) -> None:
    """HEAD and 204 answers carry no body whatever the app sends, and the connection goes on
    to the next request cleanly."""

    async def app(scope: Any, receive: Receive, send: Send) -> None:
        await _read_body(receive)
        status = 204 if scope["path"] == "/empty" else 200
        headers = [(b"content-length", b"5")] if status == 200 else []
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send({"type": "http.response.body", "body": b"hello"})

    async def main() -> None:
        async with _listening(app) as (port, _):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(b"HEAD / HTTP/1.1\r\nHost: t\r\n\r\n")
            writer.write(_post("/empty", b""))
            writer.write(_post("/", b""))
            answers = b""
            while answers.count(b"HTTP/1.1 ") < 3 or not answers.endswith(b"hello"):
                chunk = await reader.read(65536)
                assert chunk, answers
                answers += chunk
            head, empty, last = answers.split(b"HTTP/1.1 ")[1:]
            assert head.startswith(b"200")
            assert head.endswith(b"content-length: 5\r\n\r\n")
            assert empty.startswith(b"204")
            assert empty.endswith(b"\r\n\r\n")
            assert last.startswith(b"200")
            assert last.endswith(b"\r\n\r\nhello")
            writer.close()

    _run(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [
        (b"NOT HTTP AT ALL\r\n\r\n", 400),
        (
            b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nTransfer-Encoding: chunked\r\n\r\n",
            400,
        ),
        (
            b"GET / HTTP/1.1\r\nHost: t\r\nX-Big: "
            + b"a" * (lean_http.MAX_HEAD_BYTES + 1)
            + b"\r\n\r\n",
            431,
        ),
    ],
    ids=["garbage", "smuggling", "huge-head"],
)
def test_bad_requests_are_refused_and_closed(loop: str, request_bytes: bytes, status: int) -> None:
    entered: list[object] = []

    async def app(scope: Any, receive: Receive, send: Send) -> None:
        entered.append(scope)

    async def main() -> None:
        async with _listening(app) as (port, _):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(request_bytes)
            answer = await reader.read()
            assert answer.startswith(b"HTTP/1.1 %d " % status), answer[:100]
            assert b"connection: close" in answer
            writer.close()
        assert entered == []

    _run(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_an_upgrade_request_is_answered_plainly_then_the_connection_closes(loop: str) -> None:
    """Switching protocols is not supported: the request is answered as HTTP/1.1, its body
    read whole (httptools stops at the head), the connection closed after it; nothing the
    client sends after the body is read as HTTP."""

    async def main() -> None:
        async with _listening(_echo) as (port, _):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(
                b"POST /up HTTP/1.1\r\nHost: t\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n"
                b"Content-Length: 2\r\n\r\nh"
            )
            await writer.drain()
            writer.write(b"i\x81\x05hello")  # the body's end, then what is not HTTP
            answer = await reader.read()
            head, body = answer.split(b"\r\n\r\n", 1)
            assert head.startswith(b"HTTP/1.1 200 OK\r\n")
            assert b"connection: close" in head
            assert json.loads(body)["body"] == "hi"
            writer.close()

    _run(loop, main)


async def _fails_before_answering(scope: Any, receive: Receive, send: Send) -> None:
    raise ValueError("broken app")


async def _returns_without_answering(scope: Any, receive: Receive, send: Send) -> None:
    return None


async def _sends_a_bad_header(scope: Any, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": [(b"x", b"a\r\nb")]})


async def _sends_its_body_first(scope: Any, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.body", "body": b"too early"})


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize(
    "app",
    [
        _fails_before_answering,
        _returns_without_answering,
        _sends_a_bad_header,
        _sends_its_body_first,
    ],
)
def test_an_app_that_fails_before_answering_gives_a_500(
    loop: str, app: Any, caplog: pytest.LogCaptureFixture
) -> None:
    async def main() -> None:
        async with _listening(app) as (port, _):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(_post("/", b""))
            answer = await reader.read()
            assert answer.startswith(b"HTTP/1.1 500 Internal Server Error\r\n"), answer
            writer.close()

    _run(loop, main)
    assert "the ASGI app" in caplog.text
    assert "(POST /)" in caplog.text  # the request named, after the scope was handed over


async def _fails_mid_answer(scope: Any, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"partial", "more_body": True})
    raise ValueError("broken mid-stream")


async def _returns_mid_answer(scope: Any, receive: Receive, send: Send) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b"partial", "more_body": True})


async def _overruns_its_length(scope: Any, receive: Receive, send: Send) -> None:
    await send(
        {"type": "http.response.start", "status": 200, "headers": [(b"content-length", b"3")]}
    )
    await send({"type": "http.response.body", "body": b"four"})


@pytest.mark.parametrize("loop", LOOPS)
@pytest.mark.parametrize("app", [_fails_mid_answer, _returns_mid_answer, _overruns_its_length])
def test_an_app_that_fails_mid_answer_closes_the_connection(loop: str, app: Any) -> None:
    """The client sees an answer cut short (an error to its parser), never a complete one."""

    async def main() -> None:
        async with _listening(app) as (port, _):
            client = await _Client.open(port)
            client.send(_post("/", b""))
            with pytest.raises(h11.RemoteProtocolError):
                await client.response()
            client.close()

    _run(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_an_idle_keep_alive_connection_is_closed(loop: str) -> None:
    async def main() -> None:
        async with _listening(_echo, lean_http.Limits(keep_alive_s=0.05)) as (port, state):
            client = await _Client.open(port)
            client.send(_post("/", b""))
            await client.response()
            assert await client.reader.read() == b""  # the server closed it
            client.close()
            await _until(lambda: not state.connections)

    _run(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_a_connection_that_sends_nothing_is_closed(loop: str) -> None:
    async def main() -> None:
        async with _listening(_echo, lean_http.Limits(head_timeout_s=0.05)) as (port, state):
            client = await _Client.open(port)
            assert await client.reader.read() == b""  # closed, nothing written
            client.close()
            await _until(lambda: not state.connections)

    _run(loop, main)


@pytest.mark.parametrize("fresh", [True, False], ids=["fresh", "after-a-response"])
@pytest.mark.parametrize("loop", LOOPS)
def test_a_request_head_that_never_ends_gets_a_408(loop: str, fresh: bool) -> None:
    # An idle period alone never closes it.
    limits = lean_http.Limits(head_timeout_s=0.05, keep_alive_s=60.0)

    async def main() -> None:
        async with _listening(_echo, limits) as (port, state):
            client = await _Client.open(port)
            if not fresh:
                client.send(_post("/", b""))
                await client.response()
            client.send(b"POST /v1/responses HTTP/1.1\r\nHost: t\r\nContent-Le")
            response, body = await client.response()
            assert response.status_code == 408
            assert body == b"Request Timeout"
            assert _headers(response)[b"connection"] == b"close"
            assert await client.reader.read() == b""
            client.close()
            await _until(lambda: not state.connections)

    _run(loop, main)


def test_the_head_deadline_runs_from_the_start_and_only_while_nothing_is_answered() -> None:
    """Bytes trickling in do not push the deadline back; a request being answered stops it
    (a long stream is never cut by it), and it starts again when that answer is done: as the
    idle keep-alive period, or as a head's deadline if part of the next head already came."""
    go = asyncio.Event()

    async def app(scope: Any, receive: Receive, send: Send) -> None:
        await go.wait()
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    async def main() -> None:
        loop = asyncio.get_running_loop()
        conn = _Connection(_Server(app, loop))
        conn.connection_made(FakeTransport())

        def timer() -> tuple[asyncio.TimerHandle | None, str]:  # read afresh (no narrowing)
            return conn.timer, conn.timing

        first, timing = timer()
        assert first is not None
        assert timing == "head"
        request = _post("/", b"")
        conn.data_received(request[:10])
        conn.data_received(request[10:20])
        assert timer() == (first, "head")  # still the first deadline
        assert not first.cancelled()
        conn.data_received(request[20:] + request[:10])  # whole; the next one begins
        assert timer() == (None, "")  # answering
        assert first.cancelled()
        go.set()
        await _until(lambda: conn.current is None)
        assert timer()[0] is not None
        assert timer()[1] == "head"  # the next head's deadline
        conn.data_received(request[10:])
        assert timer() == (None, "")
        await _until(lambda: conn.current is None)
        idle, timing = timer()
        assert idle is not None
        assert timing == "idle"
        conn.data_received(b"\r\n")  # no request begun: still idle
        assert timer() == (idle, "idle")
        conn.data_received(request[:5])
        assert idle.cancelled()
        assert timer()[0] not in (None, idle)
        assert timer()[1] == "head"
        conn.connection_lost(None)
        assert timer() == (None, "")

        # A refused request leaves no request deadline behind (it would answer a second time),
        # only the lingering close's.
        conn = _Connection(_Server(app, loop))
        transport = FakeTransport()
        conn.connection_made(transport)
        conn.data_received(b"POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n")
        assert transport.eof
        assert transport.written.startswith(b"HTTP/1.1 400 ")
        assert timer()[1] == "linger"
        conn.data_received(b"more of the same")  # read and thrown away
        conn.deadline()
        assert timer()[1] == "linger"
        assert transport.written.count(b"HTTP/1.1 ") == 1
        conn.connection_lost(None)
        assert timer() == (None, "")

    asyncio.run(asyncio.wait_for(main(), 10))


@pytest.mark.parametrize("loop", LOOPS)
def test_a_head_sent_with_its_first_body_goes_out_in_one_write(loop: str) -> None:
    """The engine's writer sends the response head and its first frame in one step: one
    write (one segment, a system call less per stream). A head whose body comes later goes
    out on the loop's next turn, before the app's next step; a failure after it still
    sends it before the connection closes."""
    go = {"/together": asyncio.Event(), "/apart": asyncio.Event(), "/fails": asyncio.Event()}

    async def app(scope: Any, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        if scope["path"] == "/together":
            await send({"type": "http.response.body", "body": b"first", "more_body": True})
        elif scope["path"] == "/fails":
            raise ValueError("broken after its head")
        await go[scope["path"]].wait()
        await send({"type": "http.response.body", "body": b"last"})

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for path, released in go.items():
            conn = _Connection(_Server(app, loop))
            transport = FakeTransport()
            conn.connection_made(transport)
            conn.data_received(_post(path, b""))
            await _until(lambda: transport.writes)  # noqa: B023 - awaited in this iteration
            (head,) = transport.writes[:1]
            assert head.startswith(b"HTTP/1.1 200 OK\r\n")
            if path == "/together":
                assert head.endswith(b"\r\n\r\n5\r\nfirst\r\n")
            elif path == "/apart":
                assert head.endswith(b"transfer-encoding: chunked\r\n\r\n")
            else:
                await _until(lambda: transport.closing)  # noqa: B023
                assert transport.writes == [head]
                continue
            released.set()
            await _until(lambda: len(transport.writes) == 2)  # noqa: B023
            assert transport.writes[1] == b"4\r\nlast\r\n0\r\n\r\n"
            conn.connection_lost(None)

    _run(loop, main)


@pytest.mark.parametrize("expect_continue", [False, True], ids=["plain", "expect-100"])
@pytest.mark.parametrize("loop", LOOPS)
def test_a_request_body_that_stops_coming_gets_a_408(loop: str, expect_continue: bool) -> None:
    """The app waiting for the rest of a body hears a disconnect; the client gets a 408."""
    heard: list[Message] = []

    async def app(scope: Any, receive: Receive, send: Send) -> None:
        while not heard or heard[-1]["type"] == "http.request":
            heard.append(await receive())

    async def main() -> None:
        async with _listening(app, lean_http.Limits(body_timeout_s=0.05)) as (port, state):
            client = await _Client.open(port)
            expect = b"Expect: 100-continue\r\n" if expect_continue else b""
            client.send(b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n%b\r\n" % expect)
            if expect_continue:
                go_ahead = await client.reader.readuntil(b"\r\n\r\n")
                assert go_ahead == b"HTTP/1.1 100 Continue\r\n\r\n"
            client.send(b"012")  # 3 of its 10 bytes
            response, body = await client.response()
            assert response.status_code == 408
            assert body == b"Request Timeout"
            assert await client.reader.read() == b""
            client.close()
            await _until(lambda: not state.connections and not state.tasks)
        assert heard[-1] == {"type": "http.disconnect"}
        assert b"".join(m.get("body", b"") for m in heard) == b"012"

    _run(loop, main)


def test_the_body_deadline_counts_only_the_clients_silence() -> None:
    """Reads push the body's deadline back lazily (one timer, checked when it fires); it does
    not run while reading is paused for the app, before a 100-continue is sent, or once the app
    has begun its answer."""
    release = asyncio.Event()

    async def app(scope: Any, receive: Receive, send: Send) -> None:
        await release.wait()
        if scope["path"] == "/answers-first":
            await send({"type": "http.response.start", "status": 200, "headers": []})
            await asyncio.Event().wait()  # the response stays open
        else:
            await receive()
            await asyncio.Event().wait()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        conn = _Connection(_Server(app, loop))
        transport = FakeTransport()
        conn.connection_made(transport)

        def timer() -> tuple[asyncio.TimerHandle | None, str]:
            return conn.timer, conn.timing

        request = _post("/", b"0123456789")
        conn.data_received(request[:-7])  # the head and 3 bytes
        first, timing = timer()
        assert first is not None
        assert timing == "body"
        conn.body_seen -= 100  # as if silent for long
        conn.data_received(b"3")
        assert timer() == (first, "body")  # the same timer...
        assert loop.time() - conn.body_seen < 50  # ...counting from this read
        conn.body_seen = loop.time()
        conn._timed_out()  # fired early (bytes came since): pushed back, nothing sent
        assert timer()[1] == "body"
        assert timer()[0] not in (None, first)
        assert transport.written == b""
        conn.pause_reading()  # as when the app lags behind the client
        assert timer() == (None, "")
        conn.resume_reading()
        assert timer()[1] == "body"
        conn.data_received(b"456789")
        assert timer() == (None, "")  # the body is whole
        conn.connection_lost(None)

        # An Expect: 100-continue client waits for its go-ahead: no deadline until it is sent.
        conn = _Connection(_Server(app, loop))
        conn.connection_made(FakeTransport())
        conn.data_received(_post("/", b"0123456789", "Expect: 100-continue")[:-10])
        assert timer() == (None, "")
        release.set()
        await _until(lambda: conn.timing == "body")  # the app's receive() sent the 100
        conn.connection_lost(None)

        # The app answered without waiting for the body: the deadline, when it fires, is let go.
        release.clear()
        conn = _Connection(_Server(app, loop))
        transport = FakeTransport()
        conn.connection_made(transport)
        conn.data_received(_post("/answers-first", b"0123456789")[:-4])
        assert timer()[1] == "body"
        release.set()
        await _until(lambda: transport.written)
        conn._timed_out()
        assert timer() == (None, "")
        assert not transport.closing
        assert transport.written.startswith(b"HTTP/1.1 200 OK")
        conn.connection_lost(None)

    asyncio.run(asyncio.wait_for(main(), 10))


def test_send_waits_while_the_transport_is_full() -> None:
    """While the transport asks to pause writing, the app's ``send`` waits; it resumes when
    the transport drains, and a client leaving meanwhile ends the wait too."""
    sent: list[str] = []
    go = asyncio.Event()

    async def app(scope: Any, receive: Receive, send: Send) -> None:
        await send({"type": "http.response.start", "status": 200, "headers": []})
        sent.append("start")
        await send({"type": "http.response.body", "body": b"x", "more_body": True})
        sent.append("body")
        await go.wait()
        await send({"type": "http.response.body", "body": b"y", "more_body": True})
        sent.append("after the client left")

    async def main() -> None:
        loop = asyncio.get_running_loop()
        conn = _Connection(_Server(app, loop))
        transport = FakeTransport()
        conn.connection_made(transport)
        conn.pause_writing()
        conn.data_received(_post("/", b""))
        for _ in range(5):
            await asyncio.sleep(0)
        assert sent == []
        assert transport.written == b""
        conn.resume_writing()
        await _until(lambda: sent == ["start", "body"])
        conn.pause_writing()
        go.set()
        for _ in range(5):
            await asyncio.sleep(0)
        assert sent == ["start", "body"]
        conn.connection_lost(None)
        await _until(lambda: len(sent) == 3)
        assert transport.written.endswith(b"1\r\nx\r\n")  # nothing written after the pause

    asyncio.run(asyncio.wait_for(main(), 10))


_REQUESTS = st.lists(
    st.tuples(
        st.sampled_from(["/a", "/b/c", "/v1/responses"]),
        st.binary(max_size=300),
        st.booleans(),  # chunked request body
    ),
    min_size=1,
    max_size=4,
)


def _encode(path: str, body: bytes, chunked: bool) -> bytes:
    if not chunked:
        return _post(path, body)
    head = f"POST {path} HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n".encode()
    chunks = b"".join(b"%x\r\n%b\r\n" % (len(part), part) for part in (body[:7], body[7:]) if part)
    return head + chunks + b"0\r\n\r\n"


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(requests=_REQUESTS, cuts=st.lists(st.integers(min_value=0, max_value=2000), max_size=8))
def test_pipelined_requests_cut_anywhere_reach_the_app_as_sent(
    requests: list[tuple[str, bytes, bool]], cuts: list[int]
) -> None:
    """However the bytes of pipelined requests are cut into reads, the app sees each request's
    path and body as sent, in order, and the answers are written in the same order."""
    wire = b"".join(_encode(*request) for request in requests)
    points = sorted({0, len(wire), *(cut % (len(wire) + 1) for cut in cuts)})
    pieces = [wire[a:b] for a, b in itertools.pairwise(points)]

    async def main() -> None:
        loop = asyncio.get_running_loop()
        state = _Server(_echo, loop)
        conn = _Connection(state)
        transport = FakeTransport()
        conn.connection_made(transport)
        for piece in pieces:
            await _until(
                lambda: not (transport.paused)
            )  # the server paused reading: let it answer first
            conn.data_received(piece)
            await asyncio.sleep(0)
        await _until(
            lambda: (
                not (transport.written.count(b"HTTP/1.1 200 OK") < len(requests) or conn.current)
            )
        )
        client = h11.Connection(h11.CLIENT)
        client.receive_data(transport.written)
        for path, body, _ in requests:
            if client.our_state is h11.DONE:
                client.start_next_cycle()
            client.send(h11.Request(method="POST", target=path, headers=[("host", "t")]))
            client.send(h11.EndOfMessage())
            assert isinstance(client.next_event(), h11.Response)
            data = client.next_event()
            assert isinstance(data, h11.Data)
            answer = json.loads(data.data)
            assert (answer["path"], answer["body"]) == (path, body.decode("latin-1"))
            assert isinstance(client.next_event(), h11.EndOfMessage)
        await asyncio.gather(*state.tasks)

    asyncio.run(asyncio.wait_for(main(), 10))


async def _start_running(
    app: Any, drain: Callable[[], Awaitable[None]]
) -> tuple[int, asyncio.Event, asyncio.Event, asyncio.Future[None]]:
    """``lean_http.run`` in a task: its port, its ``stopping`` and ``forced`` events, the task."""
    ports: asyncio.Queue[int] = asyncio.Queue()
    stopping, forced = asyncio.Event(), asyncio.Event()
    server = asyncio.ensure_future(
        lean_http.run(
            app, drain=drain, stopping=stopping, forced=forced, listening=ports.put_nowait
        )
    )
    return await ports.get(), stopping, forced, server


@pytest.mark.parametrize("loop", LOOPS)
def test_run_starts_the_lifespan_and_stops_gracefully(loop: str) -> None:
    """``run``: the lifespan's startup before the first request; on stop, the app's drain,
    an idle connection closed at once, a request in flight answered (its connection then
    closed), the lifespan's shutdown last."""
    events: list[str] = []
    release = asyncio.Event()

    async def app(scope: Any, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            assert (await receive())["type"] == "lifespan.startup"
            events.append("startup")
            await send({"type": "lifespan.startup.complete"})
            assert (await receive())["type"] == "lifespan.shutdown"
            events.append("shutdown")
            await send({"type": "lifespan.shutdown.complete"})
            return
        events.append(scope["path"])
        if scope["path"] == "/slow":
            await release.wait()
        await _echo(scope, receive, send)

    async def drain() -> None:
        events.append("drain")
        release.set()

    async def main() -> None:
        port, stopping, _, server = await _start_running(app, drain)
        idle = await _Client.open(port)
        idle.send(_post("/idle", b""))
        await idle.response()
        busy = await _Client.open(port)
        busy.send(_post("/slow", b""))
        await _until(lambda: "/slow" in events)
        stopping.set()
        head, _ = await busy.response()
        assert _headers(head)[b"connection"] == b"close"
        assert await busy.reader.read() == b""
        assert await idle.reader.read() == b""
        await server
        idle.close()
        busy.close()
        assert events == ["startup", "/idle", "/slow", "drain", "shutdown"]

    _run(loop, main)


@pytest.mark.parametrize("loop", LOOPS)
def test_run_forced_cancels_what_is_still_running(loop: str) -> None:
    cancelled = asyncio.Event()
    entered = asyncio.Event()

    async def app(scope: Any, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            await receive()
            await send({"type": "lifespan.startup.complete"})
            await receive()
            await send({"type": "lifespan.shutdown.complete"})
            return
        entered.set()
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    async def drain() -> None:
        await asyncio.Event().wait()  # never drains: only the forced stop ends it

    async def main() -> None:
        port, stopping, forced, server = await _start_running(app, drain)
        client = await _Client.open(port)
        client.send(_post("/", b""))
        await entered.wait()
        stopping.set()
        forced.set()
        await server
        assert cancelled.is_set()
        assert await client.reader.read() == b""
        client.close()

    _run(loop, main)
