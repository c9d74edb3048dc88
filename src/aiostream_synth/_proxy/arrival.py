"""When a request arrived, by the kernel's clock rather than the event loop's.

A stream's first keepalive is due one interval after its request arrived (the client has been
silent since it sent it). The loop knows a request only when it reads the socket, and in a burst
a busy loop reads a socket long after the bytes came: with a wave of connections opened
quickly, requests sat in the kernel's receive queues for up to a second and a half while the
loop prepared those before them, and every such stream's first byte came that much later
than the interval (`benchmarks/README.md`, "How a wave opens").

On Linux a TCP socket says how long ago its last data arrived (``TCP_INFO``'s
``tcpi_last_data_recv``, milliseconds): subtracted from the clock now, that is when the
request's last bytes reached the kernel. That is not earlier than the request's own arrival
(the last data is its bytes or later ones, give or take the kernel's tick), so a keepalive is
not due before the client has waited an interval. Elsewhere, or on a socket that is not TCP,
the loop's clock stands in.

Both clocks are the same: asyncio's and uvloop's loop time is the monotonic clock (uvloop's in
whole milliseconds, taken when its poll returns).
"""

from __future__ import annotations

import asyncio
import socket
import struct
import time
from typing import Any

__all__ = ["arrival", "tcp_socket"]

#: ``tcpi_last_data_recv`` (``u32``, milliseconds) in Linux's ``struct tcp_info``: after eight
#: one-byte fields and eleven ``u32`` fields (``include/uapi/linux/tcp.h``), stable since 2.6.
_LAST_DATA_RECV = struct.Struct("=I")
_LAST_DATA_RECV_AT = 52
_TCP_INFO_BYTES = _LAST_DATA_RECV_AT + _LAST_DATA_RECV.size
_TCP_INFO: int | None = getattr(socket, "TCP_INFO", None)  # Linux only


def tcp_socket(transport: asyncio.BaseTransport) -> Any | None:
    """The socket of ``transport`` when it can say when data arrived (TCP on Linux), else None.

    Taken once per connection (``connection_made``)."""
    if _TCP_INFO is None:
        return None
    sock = transport.get_extra_info("socket")
    if sock is None or getattr(sock, "family", None) not in (socket.AF_INET, socket.AF_INET6):
        return None
    return sock


def arrival(sock: Any | None, loop_now: float) -> float:
    """When the last bytes read from ``sock`` reached the kernel, on the loop's clock; never
    later than ``loop_now`` (``loop.time()``, taken when the loop read them), which stands in
    when the kernel cannot say.

    The kernel counts in scheduler ticks (1-10 ms), so its answer can be up to one tick early."""
    if sock is None:
        return loop_now
    try:
        info = sock.getsockopt(socket.IPPROTO_TCP, _TCP_INFO, _TCP_INFO_BYTES)
    except OSError:  # closed meanwhile
        return loop_now
    if len(info) < _TCP_INFO_BYTES:
        return loop_now
    waited_ms: int = _LAST_DATA_RECV.unpack_from(info, _LAST_DATA_RECV_AT)[0]
    return min(loop_now, time.monotonic() - waited_ms / 1000)
