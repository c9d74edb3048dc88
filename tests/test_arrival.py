"""When a request arrived (``_proxy/arrival.py``): the kernel's time for a TCP socket's last
data, on the loop's clock; the loop's own time wherever the kernel cannot say."""

from __future__ import annotations

import asyncio
import socket
import time
from typing import Any

import pytest

from aiostream_synth._proxy.arrival import arrival, tcp_socket

from .support.fake_transport import FakeTcpSocket, SocketTransport

#: How early the kernel's answer can be: one scheduler tick (HZ is 100 at the least).
KERNEL_TICK_S = 0.011
linux_only = pytest.mark.skipif(not hasattr(socket, "TCP_INFO"), reason="TCP_INFO is Linux's")


@linux_only
def test_the_kernel_says_how_long_ago_the_last_data_came() -> None:
    before = time.monotonic()
    stamp = arrival(FakeTcpSocket(waited_ms=250), loop_now=before + 60)
    after = time.monotonic()
    assert before - 0.25 <= stamp <= after - 0.25


@linux_only
def test_never_later_than_the_loops_own_time() -> None:
    now = time.monotonic()
    assert arrival(FakeTcpSocket(waited_ms=0), loop_now=now - 5) == now - 5


@linux_only
@pytest.mark.parametrize("sock", [None, FakeTcpSocket(error=True), FakeTcpSocket(size=40)], ids=str)
def test_the_loops_time_where_the_kernel_cannot_say(sock: Any) -> None:
    assert arrival(sock, loop_now=12.5) == 12.5


@linux_only
def test_a_real_loopback_socket() -> None:
    """The field read is the right one: data just received is just now, within a tick."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname())
        served, _ = listener.accept()
        with client, served:
            before = time.monotonic()
            client.sendall(b"GET / HTTP/1.1\r\n\r\n")
            assert served.recv(100)
            stamp = arrival(served, loop_now=time.monotonic())
            assert before - KERNEL_TICK_S <= stamp <= time.monotonic()


@linux_only
def test_only_tcp_sockets_are_asked() -> None:
    with socket.create_server(("127.0.0.1", 0)) as tcp:
        assert tcp_socket(SocketTransport(tcp)) is tcp
    left, right = socket.socketpair(socket.AF_UNIX)
    with left, right:
        assert tcp_socket(SocketTransport(left)) is None
    assert tcp_socket(SocketTransport(None)) is None


def test_without_tcp_info_nothing_is_asked(monkeypatch: pytest.MonkeyPatch) -> None:
    from aiostream_synth._proxy import arrival as module

    monkeypatch.setattr(module, "_TCP_INFO", None)
    assert tcp_socket(SocketTransport(FakeTcpSocket())) is None


def test_the_loop_clock_is_the_monotonic_clock() -> None:
    """What the subtraction assumes, on both loops serve runs."""
    uvloop = pytest.importorskip("uvloop")
    for loop in (asyncio.new_event_loop(), uvloop.new_event_loop()):
        try:
            assert abs(loop.time() - time.monotonic()) < 0.05  # the same clock, not another
        finally:
            loop.close()
