"""Raw HTTP/1.1 requests the servers' tests share: the conformance corpus (after uvicorn's own
``tests/protocols/test_http.py`` and issue #35's review), sent to both of ``serve``'s servers
over sockets (``test_server_conformance.py``) and fed to the lean server's request reader
without one (``test_http1_reader.py``)."""

from __future__ import annotations


def get(path: str = "/", *headers: str, version: str = "1.1") -> bytes:
    return ("\r\n".join([f"GET {path} HTTP/{version}", "Host: t", *headers]) + "\r\n\r\n").encode()


def post(body: bytes, *headers: str, path: str = "/") -> bytes:
    head = [f"POST {path} HTTP/1.1", "Host: t", f"Content-Length: {len(body)}", *headers]
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


#: (id, bytes sent, answers expected, whether the server then closes).
CASES: list[tuple[str, bytes, int, bool]] = [
    ("get", get("/a/b?x=1&y=2"), 1, False),
    ("percent-path", get("/one%2Ftwo"), 1, False),
    ("post", post(b'{"hello": "world"}', "Content-Type: application/json"), 1, False),
    ("large-post", post(b"x" * 100_000), 1, False),
    ("empty-post", post(b""), 1, False),
    (
        "chunked",
        b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
        1,
        False,
    ),
    (
        "chunked-with-a-trailer",
        b"POST / HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"2\r\n{}\r\n0\r\nx-api-key: KEY\r\n\r\n",
        1,
        False,
    ),
    ("trailing-whitespace", get("/", "x-api-key: KEY \t", "X-Other:  v  "), 1, False),
    ("chunked-answer", get("/chunked"), 1, False),
    ("head", b"HEAD / HTTP/1.1\r\nHost: t\r\n\r\n", 1, False),
    ("expect-100", post(b"{}", "Expect: 100-continue "), 2, False),  # the 100, then the 200
    ("pipelined", get("/1") + post(b"two", path="/2") + get("/3"), 3, False),
    ("http-1.0", get("/", version="1.0"), 1, True),
    ("connection-close", get("/", "Connection: close"), 1, True),
    ("data-after-close", get("/", "Connection: close") + get("/after"), 1, True),
    (
        "post-after-close",
        post(b"{'hello': 'world'}", "Connection: close") + get("/after"),
        1,
        True,
    ),
    ("pipelined-then-close", get("/1") + get("/2", "Connection: close") + get("/3"), 2, True),
    # A header value that never ends: a 431 once the head limit came (not memory without end).
    ("endless-header", b"GET / HTTP/1.1\r\nHost: t\r\nX-Big: " + b"a" * 300_000, 1, True),
    ("garbage", b"NOT HTTP AT ALL\r\n\r\n", 1, True),
    (
        "length-and-chunked",
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n",
        1,
        True,
    ),
    (
        "two-lengths",
        b"POST / HTTP/1.1\r\nHost: t\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\nab",
        1,
        True,
    ),
    ("bad-header-name", b"GET / HTTP/1.1\r\nHost: t\r\nBad Name: v\r\n\r\n", 1, True),
]
