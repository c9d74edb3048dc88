"""The native ASGI path on real servers over loopback: uvicorn (asyncio) and hypercorn (trio)."""

from __future__ import annotations

import json
import socket
import threading
import time
from typing import Any

import anyio
import httpx
import pytest

from aiostream_synth import (
    BackendCall,
    ShutdownSignal,
    StreamSettings,
    SynthesizedStream,
    SynthesizingApp,
)

from .support.servers import serve

SERVERS = ["uvicorn", "hypercorn-trio"]


class BlockingBackend:
    """Never answers; records when it observes its cancellation (from the server's thread)."""

    def __init__(self) -> None:
        self.started = threading.Event()
        self.cancelled = threading.Event()
        self.cancelled_at = 0.0

    async def __call__(self, call: BackendCall) -> Any:
        self.started.set()
        try:
            await anyio.sleep_forever()
        finally:
            self.cancelled_at = time.monotonic()
            self.cancelled.set()


class InFlight:
    """ASGI middleware counting requests still being handled; ``idle`` is set at zero."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.count = 0
        self.idle = threading.Event()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.count += 1
        self.idle.clear()
        try:
            await self.app(scope, receive, send)
        finally:
            self.count -= 1
            if self.count == 0:
                self.idle.set()


@pytest.mark.parametrize("server", SERVERS)
def test_client_disconnect_cancels_the_backend_within_a_second(server: str) -> None:
    """A client that leaves mid-wait: the backend sees its cancellation promptly; nothing is left running."""
    backend = BlockingBackend()
    shutdown = ShutdownSignal()
    app = InFlight(
        SynthesizingApp(backend, StreamSettings(keepalive_interval=0.1), shutdown=shutdown)
    )
    with serve(app, server) as url, httpx.Client(base_url=url, timeout=10) as client:
        body = {"model": "m", "input": "hi", "stream": True}
        with client.stream("POST", "/v1/responses", json=body) as response:
            assert response.status_code == 200
            lines = response.iter_lines()
            assert next(lines) == "event: response.created"
            assert backend.started.wait(5)
            left_at = time.monotonic()
        # leaving the block closed the connection
        assert backend.cancelled.wait(1.0), "backend was not cancelled within 1 s of the disconnect"
        assert backend.cancelled_at - left_at < 1.0
        assert app.idle.wait(1.0), "the request handler is still running"
        assert shutdown.open_streams == 0


def _rss_bytes() -> int:
    import os

    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.parametrize("server", SERVERS)
def test_a_client_that_stops_reading_blocks_the_producer(server: str) -> None:
    """Backpressure end to end: once the socket buffers fill, no more frames are produced and
    the server's memory stays flat while the client reads nothing."""
    backend = BlockingBackend()
    shutdown = ShutdownSignal()
    app = SynthesizingApp(backend, StreamSettings(keepalive_interval=0.002), shutdown=shutdown)
    big = "x" * 20_000  # echoed in every keepalive envelope: ~20 KB per frame
    body = json.dumps(
        {"model": "m", "input": "hi", "stream": True, "prompt_cache_key": big}
    ).encode()
    with serve(app, server) as url:
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 64 * 1024)
            sock.sendall(
                b"POST /v1/responses HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                + f"Content-Length: {len(body)}\r\n\r\n".encode()
                + body
            )
            assert backend.started.wait(5)
            (stream,) = _tracked(shutdown)

            def sample() -> int:
                return stream.keepalives_sent

            # Wait until production stalls (the buffers are full): unchanged for a whole second
            # (500 ticks), at most 20 s, so a busy machine is not mistaken for a stall.
            deadline = time.monotonic() + 20
            history: list[int] = []
            while time.monotonic() < deadline:
                history.append(sample())
                if len(history) >= 5 and history[-1] > 0 and len(set(history[-5:])) == 1:
                    break
                threading.Event().wait(0.25)
            stalled_at, rss_before = sample(), _rss_bytes()
            assert stalled_at > 2, "the stream never got going"
            threading.Event().wait(1.0)  # 500 ticks: ~10 MB if nothing pushed back
            assert sample() == stalled_at, (
                "frames kept being produced for a reader that reads nothing"
            )
            assert _rss_bytes() - rss_before < 4 * 1024 * 1024
        assert backend.cancelled.wait(5)


def _tracked(shutdown: ShutdownSignal) -> list[SynthesizedStream]:
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        streams = list(shutdown._streams)
        if streams:
            return streams
        threading.Event().wait(0.01)
    raise AssertionError("no stream was opened")


class FinishingBackend:
    """Answers after ``delay`` seconds, unless cancelled; records which happened."""

    def __init__(self, delay: float) -> None:
        self.delay = delay
        self.started = threading.Event()
        self.finished = threading.Event()
        self.cancelled = threading.Event()

    async def __call__(self, call: BackendCall) -> Any:
        self.started.set()
        try:
            await anyio.sleep(self.delay)
        except anyio.get_cancelled_exc_class():
            self.cancelled.set()
            raise
        self.finished.set()
        return {"id": "resp_f", "object": "response", "status": "completed", "output": []}


@pytest.mark.parametrize("server", SERVERS)
@pytest.mark.parametrize("adapter", ["native", "sse-starlette"])
def test_finish_policy_survives_a_client_disconnect(server: str, adapter: str) -> None:
    """on_disconnect='finish': the client leaves, the backend still completes and its outcome
    reaches on_abandoned; nothing is cancelled."""
    from starlette.applications import Starlette

    from aiostream_synth import StreamOutcome
    from aiostream_synth.starlette import synthesizing_routes

    backend = FinishingBackend(delay=1.0)
    outcomes: list[StreamOutcome] = []
    reported = threading.Event()

    def on_abandoned(outcome: StreamOutcome) -> None:
        outcomes.append(outcome)
        reported.set()

    settings = StreamSettings(
        keepalive_interval=0.1, on_disconnect="finish", finish_timeout=10, on_abandoned=on_abandoned
    )
    app: Any = (
        SynthesizingApp(backend, settings)
        if adapter == "native"
        else Starlette(routes=synthesizing_routes(backend, settings))
    )
    with serve(app, server) as url, httpx.Client(base_url=url, timeout=10) as client:
        with client.stream(
            "POST", "/v1/responses", json={"model": "m", "input": "x", "stream": True}
        ) as response:
            assert next(response.iter_lines()) == "event: response.created"
        assert reported.wait(5), "the abandoned stream's outcome was never reported"
    assert backend.finished.is_set()
    assert not backend.cancelled.is_set()
    assert outcomes[0].result["id"] == "resp_f"
