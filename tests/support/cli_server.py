"""``aiostream-synth serve`` as a real process on a free port, up once ``/healthz`` answers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager, suppress

import httpx

from .servers import free_port


def wait_until_healthy(process: subprocess.Popen[bytes], url: str) -> None:
    """Poll ``/healthz`` until the server answers or its process ends (a separate process has
    nothing to wait on but its port). No deadline of its own: on a loaded machine a start
    takes what it takes, and the test's timeout ends a server that never comes up (#36)."""
    while True:
        with suppress(httpx.TransportError):
            if httpx.get(f"{url}/healthz", timeout=None).status_code == 200:
                return
        if process.poll() is not None:
            raise RuntimeError(
                f"server did not start: {process.stderr.read() if process.stderr else ''!r}"
            )
        time.sleep(0.05)


@contextmanager
def serve_cli(
    *options: str, env: Mapping[str, str] | None = None
) -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``serve`` with ``options`` (``env``: its whole environment; this one's by default).

    It runs in a process group of its own, killed whole at the end: a ``--workers`` server's
    workers go with it (killing the supervisor alone left them running, each spending a
    fifth of a core, through the rest of the test run)."""
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aiostream_synth",
            "serve",
            "--port",
            str(port),
            "--log-level",
            "warning",
            *options,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=env,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(process, url)
        yield process, url
    finally:
        with suppress(ProcessLookupError):  # the group's processes have all ended
            os.killpg(process.pid, signal.SIGKILL)
        process.wait(timeout=10)
        if process.stderr is not None:
            process.stderr.close()
