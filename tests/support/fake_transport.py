"""An asyncio transport that keeps what is written, for tests that drive a server's protocol
object by hand (``serve``'s uvicorn protocol, the lean server); and a TCP socket that says
when its last data came (``_proxy/arrival.py``)."""

from __future__ import annotations

import asyncio
import socket
import struct
from typing import Any


class FakeTransport(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.writes: list[bytes] = []  # each write() call's data
        self.closing = False
        self.paused = False  # reading paused by the protocol
        self.aborted = False
        self.eof = False  # write_eof() called: the sending side shut
        self.buffered = 0  # what get_write_buffer_size() reports

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return ("127.0.0.1", 8000) if name in ("sockname", "peername") else default

    def write(self, data: Any) -> None:
        self.writes.append(bytes(data))

    @property
    def written(self) -> bytes:
        """Everything written, in order."""
        return b"".join(self.writes)

    def is_closing(self) -> bool:
        return self.closing

    def close(self) -> None:
        self.closing = True

    @property
    def ended(self) -> bool:
        """Closed, or its sending side shut (a lingering close)."""
        return self.closing or self.eof

    def can_write_eof(self) -> bool:
        return True

    def write_eof(self) -> None:
        self.eof = True

    def abort(self) -> None:
        self.aborted = self.closing = True

    def get_write_buffer_size(self) -> int:
        return self.buffered

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False


class FakeTcpSocket:
    """Says its last data came ``waited_ms`` ago, as Linux's ``struct tcp_info`` does."""

    family = socket.AF_INET

    def __init__(self, waited_ms: int = 0, *, size: int = 104, error: bool = False) -> None:
        self.info = bytearray(size)
        if size >= 56:
            struct.pack_into("=I", self.info, 52, waited_ms)
        self.error = error

    def getsockname(self) -> tuple[str, int]:
        return ("127.0.0.1", 8000)

    def getpeername(self) -> tuple[str, int]:
        return ("127.0.0.1", 40000)

    def getsockopt(self, level: int, option: int, length: int) -> bytes:
        assert (level, option) == (socket.IPPROTO_TCP, getattr(socket, "TCP_INFO", None))
        if self.error:
            raise OSError(9, "Bad file descriptor")
        return bytes(self.info[:length])


class SocketTransport(FakeTransport):
    def __init__(self, sock: Any) -> None:
        super().__init__()
        self.sock = sock

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return self.sock if name == "socket" else super().get_extra_info(name, default)
