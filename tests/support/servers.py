"""Real ASGI servers on loopback for tests: uvicorn (asyncio), hypercorn (trio) and ``serve``'s
lean server (asyncio), in a thread."""

from __future__ import annotations

import contextlib
import functools
import socket
import threading
from collections.abc import Callable, Iterator
from typing import Any


async def read_body(receive: Callable[[], Any]) -> bytes | None:
    """An ASGI request's whole body, or None when its client left first."""
    body = b""
    while True:
        message = await receive()
        if message["type"] != "http.request":
            return None
        body += bytes(message.get("body", b""))
        if not message.get("more_body"):
            return body


def free_port() -> int:
    """A free port (several that must differ: :func:`free_ports`)."""
    return free_ports(1)[0]


def free_ports(count: int) -> list[int]:
    """``count`` free ports, all different: held together while they are chosen (one after
    the other, a port closed may be the next one given, and two servers then share a port:
    the second's health check answered by the first)."""
    with contextlib.ExitStack() as held:
        sockets = [held.enter_context(socket.socket()) for _ in range(count)]
        for sock in sockets:
            sock.bind(("127.0.0.1", 0))
        return [int(sock.getsockname()[1]) for sock in sockets]


def _wait_listening(port: int, thread: threading.Thread) -> None:
    """Until the server's port takes a connection, or its thread ended (it failed to start).
    No deadline of its own: on a loaded machine a start takes what it takes, and the test's
    timeout ends a server that never comes up."""
    import time

    while thread.is_alive():
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port)):
            return
        time.sleep(0.02)
    raise RuntimeError(f"server on port {port} did not start")


@contextlib.contextmanager
def serve(app: Any, kind: str, *, lifespan: bool = False) -> Iterator[str]:
    """Run ``app`` on ``uvicorn`` (asyncio), ``uvicorn-ours`` (with ``serve``'s protocol),
    ``hypercorn-trio`` or ``lean`` (``serve``'s own HTTP server, which always runs the
    lifespan); yield its base URL. ``lifespan`` runs the
    app's ASGI lifespan (uvicorn), as a production server does."""
    port = free_port()
    stop = threading.Event()
    errors: list[BaseException] = []

    if kind in ("uvicorn", "uvicorn-ours"):
        import uvicorn

        from aiostream_synth._proxy.uvicorn_http import http_protocol

        server = uvicorn.Server(
            uvicorn.Config(
                app,
                host="127.0.0.1",
                port=port,
                lifespan="on" if lifespan else "off",
                log_level="warning",
                # "uvicorn-ours": the protocol ``serve --server uvicorn`` runs.
                http=http_protocol() if kind == "uvicorn-ours" else "auto",
            )
        )

        def run() -> None:
            try:
                server.run()
            except BaseException as exc:  # pragma: no cover - surfaced below
                errors.append(exc)

        def shutdown() -> None:
            server.should_exit = True

    elif kind == "hypercorn-trio":
        import trio
        from hypercorn.config import Config
        from hypercorn.trio import serve as hypercorn_serve

        config = Config()
        config.bind = [f"127.0.0.1:{port}"]
        config.loglevel = "WARNING"

        async def trigger() -> None:
            await trio.to_thread.run_sync(stop.wait, abandon_on_cancel=True)

        def run() -> None:
            try:
                trio.run(functools.partial(hypercorn_serve, app, config, shutdown_trigger=trigger))
            except BaseException as exc:  # pragma: no cover - surfaced below
                errors.append(exc)

        def shutdown() -> None:
            stop.set()

    elif kind == "lean":
        import asyncio

        from aiostream_synth._proxy import lean_http

        stoppers: list[Callable[[], object]] = []

        async def lean_main() -> None:
            loop = asyncio.get_running_loop()
            stopping, forced = asyncio.Event(), asyncio.Event()
            stoppers.append(lambda: loop.call_soon_threadsafe(stopping.set))

            async def drain() -> None:
                pass

            await lean_http.run(app, port=port, drain=drain, stopping=stopping, forced=forced)

        def run() -> None:
            try:
                asyncio.run(lean_main())
            except BaseException as exc:  # pragma: no cover - surfaced below
                errors.append(exc)

        def shutdown() -> None:
            for stopper in stoppers:
                stopper()

    else:  # pragma: no cover
        raise ValueError(kind)

    thread = threading.Thread(target=run, name=f"{kind}-server", daemon=True)
    thread.start()
    try:
        _wait_listening(port, thread)
        yield f"http://127.0.0.1:{port}"
    finally:
        shutdown()
        stop.set()
        thread.join(timeout=10)
    if errors:
        raise errors[0]
