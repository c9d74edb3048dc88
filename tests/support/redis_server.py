"""A real ``redis-server`` (Debian's package) for the tests that need one: started on a free
port with its own data directory, stopped after. Without the binary a test is skipped with the
reason, and fails under CI (``.ci/run`` installs it)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator

import pytest

from .servers import free_port

REDIS_SERVER = shutil.which("redis-server") or shutil.which("valkey-server")


def require_redis() -> str:
    if REDIS_SERVER is None:
        reason = "redis-server not found (apt-get install redis-server)"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the Redis store tests: {reason}")
        pytest.skip(reason)
    return REDIS_SERVER


def redis_command(port: int, data: str) -> list[str]:
    """The command of a server on ``port`` keeping its files in ``data``, persisting nothing."""
    binary = require_redis()
    return [
        *(binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", data),
        *("--save", "", "--appendonly", "no", "--protected-mode", "no"),
    ]


def until_redis_answers(process: subprocess.Popen[bytes], port: int) -> None:
    """Until the server on ``port`` takes a PING (the test's timeout bounds it); a
    :class:`RuntimeError` when its process ends first."""
    while process.poll() is None:
        with (
            contextlib.suppress(OSError),
            socket.create_connection(("127.0.0.1", port)) as s,
        ):
            s.sendall(b"PING\r\n")
            if s.recv(16).startswith(b"+PONG"):
                return
        time.sleep(0.02)
    raise RuntimeError("redis-server did not start")


@contextlib.contextmanager
def redis_server() -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """A running server: its ``redis://`` URL and its process (a test may kill it)."""
    port = free_port()
    with tempfile.TemporaryDirectory(prefix="aiostream-synth-redis-") as data:
        process = subprocess.Popen(
            redis_command(port, data), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        try:
            until_redis_answers(process, port)
            yield f"redis://127.0.0.1:{port}/0", process
        finally:
            process.kill()
            process.wait(timeout=10)
