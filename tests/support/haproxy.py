"""A real HAProxy (Debian's package) in front of the given servers, round robin per request, for
the fleet tests: started on a free port with its own configuration file, stopped after. Without
the binary a test is skipped with the reason, and fails under CI (``.ci/run`` installs it)."""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator, Sequence

import pytest

from .servers import free_port

HAPROXY = shutil.which("haproxy") or (
    "/usr/sbin/haproxy" if os.path.exists("/usr/sbin/haproxy") else None
)

_CONFIG = """\
global
    maxconn 2000
defaults
    mode http
    option http-no-delay
    timeout connect 5s
    timeout client 120s
    timeout server 120s
frontend fleet
    bind 127.0.0.1:{port}
    default_backend replicas
backend replicas
    balance roundrobin
{servers}
"""


def require_haproxy() -> str:
    if HAPROXY is None:
        reason = "haproxy not found (apt-get install haproxy)"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run the load balancer tests: {reason}")
        pytest.skip(reason)
    return HAPROXY


@contextlib.contextmanager
def haproxy(backends: Sequence[str]) -> Iterator[str]:
    """HAProxy balancing each request over ``backends`` (``http://127.0.0.1:PORT`` URLs) in
    turn; its base URL."""
    binary = require_haproxy()
    port = free_port()
    servers = "\n".join(
        f"    server r{n} {url.removeprefix('http://')}" for n, url in enumerate(backends)
    )
    with tempfile.TemporaryDirectory(prefix="aiostream-synth-haproxy-") as folder:
        config = os.path.join(folder, "haproxy.cfg")
        with open(config, "w", encoding="utf-8") as file:
            file.write(_CONFIG.format(port=port, servers=servers))
        process = subprocess.Popen(
            [binary, "-db", "-f", config], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE
        )
        try:
            while process.poll() is None:  # until it accepts (the test's timeout bounds it)
                with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
                    break
                time.sleep(0.02)
            else:
                error = process.stderr.read() if process.stderr else b""
                raise RuntimeError(f"haproxy did not start: {error!r}")
            yield f"http://127.0.0.1:{port}"
        finally:
            process.kill()
            process.wait(timeout=10)
            if process.stderr is not None:
                process.stderr.close()
