"""The same raw requests to ``serve``'s two HTTP/1.1 servers, the lean one and uvicorn with our
protocol, over loopback: the same answers, framed the same way (a differential test, so a fix
made to one server and not the other shows here). Cases after uvicorn's own
``tests/protocols/test_http.py`` and issue #35's review."""

from __future__ import annotations

import contextlib
import json
import socket
from collections.abc import Iterator
from typing import Any

import pytest

from .support.http1_cases import CASES
from .support.servers import read_body, serve

SERVERS = ["lean", "uvicorn-ours"]
#: Response headers that say how an answer is framed (the rest differ by server: date, server).
FRAMING = (b"content-length", b"transfer-encoding", b"connection")


async def _echo(scope: Any, receive: Any, send: Any) -> None:
    """The request as the app saw it, after its whole body (so trailers a server let into the
    headers would show)."""
    if scope["type"] != "http":
        return
    body = await read_body(receive)
    if body is None:
        return
    answer = json.dumps(
        {
            "method": scope["method"],
            "path": scope["path"],
            "raw_path": scope["raw_path"].decode("latin-1"),
            "query": scope["query_string"].decode("latin-1"),
            "version": scope["http_version"],
            "headers": [[n.decode("latin-1"), v.decode("latin-1")] for n, v in scope["headers"]],
            "body": body.decode("latin-1"),
        }
    ).encode()
    if scope["path"] == "/chunked":  # no content-length: chunked (HTTP/1.1)
        headers: list[tuple[bytes, bytes]] = []
    else:
        headers = [(b"content-length", str(len(answer)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": answer})


@pytest.fixture(scope="module")
def servers() -> Iterator[dict[str, str]]:
    with serve(_echo, "lean") as lean, serve(_echo, "uvicorn-ours") as ours:
        yield {"lean": lean, "uvicorn-ours": ours}


class _Reader:
    """Reads HTTP/1.1 answers off a socket, as a strict client would frame them."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.buffer = b""

    def _more(self) -> bool:
        data = self.sock.recv(65536)
        self.buffer += data
        return bool(data)

    def _until(self, marker: bytes) -> bytes:
        while marker not in self.buffer:
            assert self._more(), f"closed before {marker!r}: {self.buffer[:200]!r}"
        part, self.buffer = self.buffer.split(marker, 1)
        return part

    def _exactly(self, size: int) -> bytes:
        while len(self.buffer) < size:
            assert self._more(), "closed mid-body"
        part, self.buffer = self.buffer[:size], self.buffer[size:]
        return part

    def answer(self, method: str) -> tuple[int, dict[bytes, bytes], bytes]:
        head = self._until(b"\r\n\r\n").split(b"\r\n")
        status = int(head[0].split(b" ")[1])
        assert head[0].startswith(b"HTTP/1.1 "), head[0]
        headers = {}
        for line in head[1:]:
            name, _, value = line.partition(b":")
            headers[name.strip().lower()] = value.strip()
        if status < 200 or status in (204, 304) or method == "HEAD":
            return status, headers, b""
        if headers.get(b"transfer-encoding") == b"chunked":
            body = b""
            while size := int(self._until(b"\r\n"), 16):
                body += self._exactly(size)
                assert self._exactly(2) == b"\r\n"
            assert self._until(b"\r\n") == b""  # no trailers from either server
            return status, headers, body
        if b"content-length" in headers:
            return status, headers, self._exactly(int(headers[b"content-length"]))
        while self._more():  # framed by the connection's end
            pass
        body, self.buffer = self.buffer, b""
        return status, headers, body

    def closed(self) -> bool:
        """Whether the server ends the connection once its answers are read."""
        return not self.buffer and not self._more()


def _exchange(base: str, wire: bytes, answers: int, closes: bool) -> list[Any]:
    host, port = base.removeprefix("http://").split(":")
    method = wire.split(b" ", 1)[0].decode()
    version_1_0 = wire.split(b"\r\n", 1)[0].endswith(b"HTTP/1.0")
    with socket.create_connection((host, int(port))) as sock:
        # Refused before it was all read (the endless header): the answer is still there.
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(wire)
        reader = _Reader(sock)
        seen: list[Any] = []
        for _ in range(answers):
            status, headers, body = reader.answer(method)
            framing = {name: headers[name] for name in FRAMING if name in headers}
            if version_1_0 and framing.get(b"connection") == b"close":
                # An HTTP/1.0 exchange without keep-alive closes whether or not the answer says
                # so (whether it says so differs between lean and uvicorn releases): not framing.
                del framing[b"connection"]
            if status == 200 and body:
                content: Any = json.loads(body)
            else:  # error texts differ by server (and so their lengths): the status is the answer
                content = status
                if b"content-length" in framing:
                    framing[b"content-length"] = b"*"
            seen.append((status, framing, content))
        if closes:
            assert reader.closed(), "the server kept the connection open"
    return seen


@pytest.mark.parametrize(
    ("wire", "answers", "closes"), [c[1:] for c in CASES], ids=[c[0] for c in CASES]
)
def test_both_servers_answer_raw_requests_alike(
    servers: dict[str, str], wire: bytes, answers: int, closes: bool
) -> None:
    lean, ours = (_exchange(servers[kind], wire, answers, closes) for kind in SERVERS)
    assert lean == ours


def test_the_corpus_says_what_it_means(servers: dict[str, str]) -> None:
    """A few answers checked outright (the differential test alone would pass two servers
    wrong the same way)."""
    base = servers["lean"]
    ((_, _, trailer),) = _exchange(base, CASES[6][1], 1, False)
    assert [name for name, _ in trailer["headers"]] == ["host", "transfer-encoding"]
    ((_, _, spaces),) = _exchange(base, CASES[7][1], 1, False)
    assert ["x-api-key", "KEY"] in spaces["headers"]
    assert ["x-other", "v"] in spaces["headers"]
    (cont, _, _), (ok, _, _) = _exchange(base, CASES[10][1], 2, False)
    assert (cont, ok) == (100, 200)
    answers = _exchange(base, CASES[11][1], 3, False)
    assert [a[2]["path"] for a in answers] == ["/1", "/2", "/3"]
    ((status, framing, after),) = _exchange(base, CASES[14][1], 1, True)
    assert (status, after["path"], framing[b"connection"]) == (200, "/", b"close")
    for case in CASES[-4:]:
        ((status, _, _),) = _exchange(base, case[1], 1, True)
        assert status == 400, case[0]
    ((status, _, _),) = _exchange(base, CASES[-5][1], 1, True)
    assert status == 431


# -- request-smuggling probes ----------------------------------------------------------------
#
# A desync needs two parsers to disagree on where a request ends; behind a load balancer, lean
# and uvicorn must at least agree with each other. The Transfer-Encoding mutations below are
# the classes of defparam/smuggler's default configuration (a control byte before, inside,
# after or around the header, next to a CR or an LF), generated here; the Content-Length and
# chunk-framing probes are the classes PortSwigger's desync research names.

#: Bytes a mutation places (controls, whitespace, DEL, Latin-1 high bytes).
_ODD_BYTES = [0x01, 0x04, 0x08, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x1F, 0x20, 0x7F, 0xA0, 0xFF]
#: Where a mutation puts the byte ``{c}`` around ``Transfer-Encoding: chunked``.
_TE_SHAPES = {
    "mid": "Transfer-Encoding:{c}chunked",
    "post": "Transfer-Encoding{c}: chunked",
    "pre": "{c}Transfer-Encoding: chunked",
    "end": "Transfer-Encoding: chunked{c}",
    "x-pre": "X: X{c}Transfer-Encoding: chunked",
    "end-x": "Transfer-Encoding: chunked{c}X: X",
    "cr-pre": "X: X\r{c}Transfer-Encoding: chunked",
    "lf-pre": "X: X{c}\nTransfer-Encoding: chunked",
    "cr-end": "Transfer-Encoding: chunked\r{c}X: X",
    "lf-end": "Transfer-Encoding: chunked{c}\nX: X",
}
_FIXED_TE = {
    "plain": "Transfer-Encoding: chunked",
    "name-prefix": " Transfer-Encoding: chunked",
    "tab": "Transfer-Encoding:\tchunked",
    "tab-colon": "Transfer-Encoding\t:\tchunked",
    "space-colon": "Transfer-Encoding : chunked",
}


def _te_probes() -> Iterator[tuple[str, bytes]]:
    """A Content-Length of 5 and a mutated ``Transfer-Encoding: chunked``, with a body that
    means "empty, then a request beginning with X" by TE and "``0\\r\\n\\r\\n``, then X" by CL."""
    gadgets = dict(_FIXED_TE)
    for name, shape in _TE_SHAPES.items():
        for byte in _ODD_BYTES:
            gadgets[f"{name}-{byte:02x}"] = shape.format(c=chr(byte))
    for name, gadget in gadgets.items():
        head = b"POST / HTTP/1.1\r\nHost: t\r\n" + gadget.encode("latin-1") + b"\r\n"
        yield f"te-{name}", head + b"Content-Length: 5\r\n\r\n0\r\n\r\nX"


_H = b"POST / HTTP/1.1\r\nHost: t\r\n"
_CHUNKED = _H + b"Transfer-Encoding: chunked\r\n\r\n"
#: (id, bytes, the first answer's status, the body the app saw when it is a 200).
_FRAMING_PROBES: list[tuple[str, bytes, int, str]] = [
    ("cl-plus-sign", _H + b"Content-Length: +5\r\n\r\n01234", 400, ""),
    ("cl-leading-zero", _H + b"Content-Length: 05\r\n\r\n01234", 200, "01234"),
    ("cl-list", _H + b"Content-Length: 5, 5\r\n\r\n01234", 400, ""),
    ("cl-hex", _H + b"Content-Length: 0x5\r\n\r\n01234", 400, ""),
    ("cl-negative", _H + b"Content-Length: -5\r\n\r\n01234", 400, ""),
    ("cl-overflow", _H + b"Content-Length: 99999999999999999999999\r\n\r\n01234", 400, ""),
    ("cl-inner-space", _H + b"Content-Length: 5 5\r\n\r\n01234", 400, ""),
    ("te-chunked-identity", _H + b"Transfer-Encoding: chunked, identity\r\n\r\n01234", 400, ""),
    (
        "te-identity-chunked",
        _H + b"Transfer-Encoding: identity, chunked\r\n\r\n5\r\n01234\r\n0\r\n\r\n",
        200,
        "01234",
    ),
    (
        "te-twice",
        _H + b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        400,
        "",
    ),
    ("te-gzip-alone", _H + b"Transfer-Encoding: gzip\r\n\r\n01234", 400, ""),
    (
        "te-upper-case",
        _H + b"Transfer-Encoding: CHUNKED\r\n\r\n5\r\n01234\r\n0\r\n\r\n",
        200,
        "01234",
    ),
    (
        "te-on-http-1.0",
        b"POST / HTTP/1.0\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n5\r\n01234\r\n0\r\n\r\n",
        200,
        "01234",
    ),
    ("chunk-leading-zeros", _CHUNKED + b"0005\r\n01234\r\n0\r\n\r\n", 200, "01234"),
    ("chunk-hex-prefix", _CHUNKED + b"0x5\r\n01234\r\n0\r\n\r\n", 400, ""),
    ("chunk-size-overflow", _CHUNKED + b"ffffffffffffffffff5\r\n01234\r\n0\r\n\r\n", 400, ""),
    ("chunk-extension", _CHUNKED + b"5;a=b\r\n01234\r\n0\r\n\r\n", 200, "01234"),
    ("chunk-size-space", _CHUNKED + b"5 \r\n01234\r\n0\r\n\r\n", 400, ""),
    ("chunk-bare-lf", _CHUNKED + b"5\n01234\n0\n\n", 400, ""),
    ("chunk-missing-crlf", _CHUNKED + b"5\r\n012340\r\n\r\n", 400, ""),
    ("bare-lf-head", b"POST / HTTP/1.1\nHost: t\nContent-Length: 5\n\n01234", 400, ""),
    ("bare-cr-head", b"POST / HTTP/1.1\rHost: t\rContent-Length: 5\r\r01234", 400, ""),
    ("obs-fold", _H + b"X-A: a\r\n b\r\nContent-Length: 5\r\n\r\n01234", 400, ""),
    ("nul-in-value", _H + b"X-A: a\x00b\r\nContent-Length: 5\r\n\r\n01234", 400, ""),
    ("lower-case-method", b"post / HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n", 400, ""),
    ("space-in-target", b"GET /a b HTTP/1.1\r\nHost: t\r\n\r\n", 400, ""),
    ("no-host", b"POST / HTTP/1.1\r\nContent-Length: 5\r\n\r\n01234", 200, "01234"),
    ("absolute-form", b"POST http://t/x HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n", 200, ""),
]


def _first_answer(base: str, wire: bytes) -> tuple[int, str]:
    """The status of the first answer, and the body its app saw when it is a 200."""
    host, port = base.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port))) as sock:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            sock.sendall(wire)
        status, _, body = _Reader(sock).answer("POST")
    return status, json.loads(body)["body"] if status == 200 else ""


_PROBES = [*_te_probes(), *((name, wire) for name, wire, _, _ in _FRAMING_PROBES)]


@pytest.mark.parametrize("wire", [wire for _, wire in _PROBES], ids=[name for name, _ in _PROBES])
def test_both_servers_frame_smuggling_probes_alike(servers: dict[str, str], wire: bytes) -> None:
    lean, ours = (_first_answer(servers[kind], wire) for kind in SERVERS)
    assert lean == ours


@pytest.mark.parametrize(
    ("wire", "status", "body"),
    [probe[1:] for probe in _FRAMING_PROBES],
    ids=[probe[0] for probe in _FRAMING_PROBES],
)
def test_framing_probes_get_the_expected_answer(
    servers: dict[str, str], wire: bytes, status: int, body: str
) -> None:
    """Held outright on lean (both servers agree, above): a length it cannot read exactly, or
    two framings at once, is a 400, never a guess."""
    assert _first_answer(servers["lean"], wire) == (status, body)


def test_a_plain_cl_te_request_is_refused_by_both(servers: dict[str, str]) -> None:
    """The classic CL.TE desync: a Content-Length beside Transfer-Encoding is a 400."""
    _, wire = next(_te_probes())
    for kind in SERVERS:
        assert _first_answer(servers[kind], wire) == (400, ""), kind
