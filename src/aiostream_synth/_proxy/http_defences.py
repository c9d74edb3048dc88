"""What both of ``serve``'s own HTTP protocols (``lean_http.py`` and ``uvicorn_http.py``) apply
to clients that are not to be trusted, written once: the limits and deadlines (:class:`Limits`),
the plain-text answer a refusal sends, the check that a response starts with a final status,
and how a large read is cut so that bytes completing nothing are counted as they are fed.

No I/O and no third-party import here: ``ProxyConfig`` takes its defaults from this module.
"""

from __future__ import annotations

import http
import logging
from collections.abc import Callable, Iterator
from dataclasses import dataclass

__all__ = [
    "BODY_TIMEOUT_S",
    "DRAIN_BYTES",
    "HEAD_STEP",
    "HEAD_TIMEOUT_S",
    "KEEP_ALIVE_S",
    "LINGER_S",
    "MAX_HEAD_BYTES",
    "WRITE_TIMEOUT_S",
    "Limits",
    "check_final_status",
    "error_response",
    "head_steps",
    "log_dropped_trailers",
    "show",
    "status_line",
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
#: Seconds a client may read nothing while its answer waits for it (nginx's ``send_timeout``
#: is 60): counted while the transport's buffer is over its high-water mark (and, on lean,
#: while a closing connection still has bytes to send); a client that reads, however slowly,
#: gets a new deadline each time.
WRITE_TIMEOUT_S = 60.0
#: Bytes of a request line and headers taken before the request is refused (431).
MAX_HEAD_BYTES = 64 * 1024
#: Bytes read and thrown away after a refusal (or an answer that came before its request's
#: body was read) before the connection closes anyway.
DRAIN_BYTES = 1024 * 1024
#: Seconds a refused connection is read (and what comes thrown away) before it closes, when
#: the client does not close it first (nginx's ``lingering_timeout``).
LINGER_S = 5.0
#: Bytes of a read parsed at once while it may hold a request head (see :func:`head_steps`).
HEAD_STEP = 16 * 1024

_STATUS_LINES: dict[int, bytes] = {}
#: Trailer names a request's log line shows at most.
TRAILERS_SHOWN = 8

LOG = logging.getLogger("aiostream_synth.proxy")


@dataclass(frozen=True, slots=True)
class Limits:
    """The deadlines and the connection cap one server applies (``serve``'s options)."""

    #: An idle keep-alive connection's life after its last response, seconds.
    keep_alive_s: float = KEEP_ALIVE_S
    #: A request head's deadline (see :data:`HEAD_TIMEOUT_S`), seconds.
    head_timeout_s: float = HEAD_TIMEOUT_S
    #: How long a request body may stay silent (see :data:`BODY_TIMEOUT_S`), seconds.
    body_timeout_s: float = BODY_TIMEOUT_S
    #: How long a client may read nothing of its answer (see :data:`WRITE_TIMEOUT_S`), seconds.
    write_timeout_s: float = WRITE_TIMEOUT_S
    #: Open connections at most; one more gets a 503 and is closed. None: no cap.
    max_connections: int | None = None

    def __post_init__(self) -> None:
        for name in ("keep_alive_s", "head_timeout_s", "body_timeout_s", "write_timeout_s"):
            value = getattr(self, name)
            if not 0 < value < float("inf"):
                raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")
        if self.max_connections is not None and self.max_connections < 1:
            raise ValueError(
                f"max_connections must be at least 1 or None, not {self.max_connections}"
            )


def status_line(status: int) -> bytes:
    """``HTTP/1.1 <status> <phrase>\\r\\n``, made once per status."""
    line = _STATUS_LINES.get(status)
    if line is None:
        try:
            phrase = http.HTTPStatus(status).phrase
        except ValueError:
            phrase = ""
        line = _STATUS_LINES[status] = f"HTTP/1.1 {status} {phrase}\r\n".encode("latin-1")
    return line


def error_response(status: int, text: str) -> bytes:
    """A whole plain-text answer that closes its connection (a refusal)."""
    body = text.encode("latin-1")
    return b"".join(
        (
            status_line(status),
            b"content-type: text/plain; charset=utf-8\r\n",
            b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body),
            body,
        )
    )


def check_final_status(status: object) -> None:
    """A ``RuntimeError`` (the app's failure: a 500 instead) unless ``status`` is a final one:
    a 1xx is not, and a client sent one as the answer waits for the real one for ever."""
    if not isinstance(status, int) or not 200 <= status <= 999:
        raise RuntimeError(f"invalid response status {status!r}: a final status is 200-999")


def head_steps(data: bytes, reading_head: Callable[[], bool]) -> Iterator[bytes]:
    """``data`` cut for the parser: :data:`HEAD_STEP` bytes at a time while
    ``reading_head()`` (asked before each piece, after the one before was parsed), the rest at
    once when it stops. The bytes completing nothing are then counted every step, not once a
    read (a read is up to 256 KiB), so an endless header is refused within a step of the
    limit; a body's bytes, or a small read, go to the parser whole."""
    if len(data) <= HEAD_STEP or not reading_head():
        yield data
        return
    view = memoryview(data)
    start = 0
    while start < len(data):
        end = start + HEAD_STEP if reading_head() else len(data)
        yield bytes(view[start:end])
        start = end


def log_dropped_trailers(client: tuple[str, int] | None, names: list[bytes]) -> None:
    """One line per request for the trailer fields read and dropped after its chunked body
    (never passed on: nothing a client sends vanishes without a trace, decision P10)."""
    LOG.info(
        "request from %s: trailer field(s) dropped (not passed on): %s",
        show(client),
        ", ".join(name.decode("latin-1") for name in names[:TRAILERS_SHOWN]),
    )


def show(address: tuple[str, int] | None) -> str:
    """A peer's address for a log line."""
    return f"{address[0]}:{address[1]}" if address is not None else "?"
