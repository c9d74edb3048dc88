"""Running :class:`ProxyApp` on a real server, with graceful shutdown.

* lean (the default, lean_http.py): an HTTP/1.1 server of our own on httptools, holding less per
  open stream than any other here (bench_load.py; benchmarks/README.md has the figures);
  asyncio (uvloop when installed). SIGTERM/SIGINT: the listening socket closes, open streams
  get ``drain_timeout`` to finish and the rest end with their terminal failure event, idle
  connections close, then the lifespan's shutdown; a second signal stops at once.
* uvicorn (``--server uvicorn``; uvloop and httptools when installed, else asyncio and h11):
  on the first SIGTERM/SIGINT the listening sockets close, open streams get ``drain_timeout``
  to finish and the rest end with their terminal failure event ("server shutting down"); then
  uvicorn exits.
* hypercorn with its trio worker (``--loop trio``) or asyncio: the same drain in the shutdown
  trigger, then hypercorn's own graceful close.
* granian (``--server granian``, the ``granian`` extra): its Rust HTTP server runs the ASGI
  app on this process's asyncio loop (uvloop when installed), HTTP/1.1 only, as uvicorn serves;
  SIGTERM/SIGINT drain open streams the same way, then granian stops.
* ``workers > 1`` (uvicorn, lean): the parent binds the port once and forks that many processes
  serving the shared socket; SIGTERM is forwarded to each, which drains as above.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import gc
import logging
import multiprocessing
import os
import signal
import socket
import sys
import urllib.parse
from types import FrameType
from typing import Any

import anyio

from aiostream_synth._dialects.registry import registered_dialects
from aiostream_synth._proxy.app import ProxyApp, ProxyConfig
from aiostream_synth._proxy.uvicorn_http import http_protocol

__all__ = ["run"]

LOG = logging.getLogger("aiostream_synth.proxy")

# The accept queue of every listening socket (the kernel caps it at net.core.somaxconn). Long-turn
# clients arrive in bursts (a batch of agents starting together); with hypercorn's default of
# 100, 2,000 connections opened at once saw 22% reset or never answered (bench_load proxy-trio).
_BACKLOG = 4096
#: Concurrent requests granian serves per worker (each open stream is one for minutes).
_GRANIAN_CONCURRENCY = 1_000_000


async def _drain_streams(app: ProxyApp, config: ProxyConfig) -> None:
    """The first SIGTERM/SIGINT on any server: open streams get ``drain_timeout`` to finish,
    the rest end with their terminal failure event."""
    open_streams = app.shutdown.open_streams
    LOG.info(
        "shutdown: no new requests; %d open stream(s) get up to %g s to finish "
        "(a second signal ends them at once)",
        open_streams,
        config.drain_timeout,
    )
    aborted = await app.shutdown.shutdown(config.drain_timeout)
    if aborted:
        LOG.warning(
            "shutdown: %d of %d open stream(s) did not finish in %g s and ended with a "
            "terminal failure event",
            aborted,
            open_streams,
            config.drain_timeout,
        )
    else:
        LOG.info("shutdown: drained, every open stream finished")


def _end_streams_now(app: ProxyApp) -> None:
    """The second SIGTERM/SIGINT: every open stream ends now with its terminal failure event
    (a 503 before commit), rather than with its connection cut."""
    ended = app.shutdown.abort_all("server stopped")
    LOG.warning("shutdown: second signal, %d open stream(s) ended at once", ended)


def _bind(config: ProxyConfig) -> socket.socket:
    family = socket.AF_INET6 if ":" in config.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((config.host, config.port))
    sock.listen(_BACKLOG)
    sock.set_inheritable(True)
    return sock


def _uvicorn(app: ProxyApp, config: ProxyConfig, sock: socket.socket | None) -> None:
    import uvicorn

    loop = (
        "asyncio" if config.loop == "asyncio" else "uvloop" if config.loop == "uvloop" else "auto"
    )

    class DrainingServer(uvicorn.Server):
        draining = False
        forced = False

        def handle_exit(self, sig: int, frame: FrameType | None) -> None:
            loop = asyncio.get_running_loop()
            if self.draining:  # a second signal: end the streams, then stop
                self.forced = True
                loop.call_soon_threadsafe(self._stop_now)
                return
            self.draining = True
            loop.call_soon_threadsafe(lambda: loop.create_task(self._drain()))

        def _stop_now(self) -> None:
            _end_streams_now(app)
            self.should_exit = True

        async def _drain(self) -> None:
            for server in getattr(self, "servers", []):
                server.close()  # stop accepting
            await _drain_streams(app, config)
            self.should_exit = True

    server = DrainingServer(
        uvicorn.Config(
            app,
            host=config.host,
            port=config.port,
            loop=loop,
            log_level=config.log_level,
            lifespan="on",
            timeout_graceful_shutdown=5,
            timeout_keep_alive=config.http_keep_alive_s,  # type: ignore[arg-type]
            # uvicorn answers 503 once its open connections (this one included) or running
            # requests reach the limit: one more than the connections allowed.
            limit_concurrency=None
            if config.max_connections is None
            else config.max_connections + 1,
            backlog=_BACKLOG,
            # The proxy writes one line per request itself (with the client and the path);
            # uvicorn's access line would be a second one, about 8 µs each in a burst.
            access_log=False,
            # The client address stays the peer's: uvicorn's X-Forwarded-For rewriting is a
            # middleware frame in every stream's task for a value only the log line reads, and
            # the other servers do not rewrite it either. The line shows the header as sent.
            proxy_headers=False,
            # uvicorn's httptools protocol, telling the app each request's arrival and calling
            # it back when its client leaves (uvicorn_http.py).
            http=http_protocol(write_timeout_s=config.http_write_timeout_s),
        )
    )
    server.run(sockets=[sock] if sock is not None else None)
    if server.forced:
        raise SystemExit(1)


def _hypercorn(app: ProxyApp, config: ProxyConfig) -> None:
    from hypercorn.config import Config

    hc = Config()
    hc.bind = [f"{config.host}:{config.port}"]
    hc.loglevel = config.log_level.upper()
    # Its records through our handler and format (its own handler prints the process id, which
    # serve does not collect, and doubled every line).
    hc.errorlog = logging.getLogger("hypercorn.error")
    hc.graceful_timeout = 5
    hc.keep_alive_timeout = config.http_keep_alive_s
    hc.backlog = _BACKLOG
    if config.loop == "trio":
        import trio
        from hypercorn.trio import serve as trio_serve

        forced = False

        async def trio_trigger() -> None:
            nonlocal forced
            # The receiver stays open through the drain: a second signal ends the streams now.
            with trio.open_signal_receiver(signal.SIGTERM, signal.SIGINT) as signals:
                await signals.__anext__()
                async with trio.open_nursery() as nursery:

                    async def on_second_signal() -> None:
                        nonlocal forced
                        await signals.__anext__()
                        forced = True
                        _end_streams_now(app)

                    nursery.start_soon(on_second_signal)
                    await _drain_streams(app, config)
                    nursery.cancel_scope.cancel()

        trio.run(functools.partial(trio_serve, app, hc, shutdown_trigger=trio_trigger))  # type: ignore[arg-type]
        if forced:
            raise SystemExit(1)
        return
    from hypercorn.asyncio import serve as asyncio_serve

    signals_seen = 0

    async def asyncio_main() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()

        def on_signal() -> None:
            nonlocal signals_seen
            signals_seen += 1
            if signals_seen == 2:
                _end_streams_now(app)
            stop.set()

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)

        async def trigger() -> None:
            await stop.wait()
            await _drain_streams(app, config)

        await asyncio_serve(app, hc, shutdown_trigger=trigger)  # type: ignore[arg-type]

    asyncio.run(asyncio_main())
    if signals_seen > 1:
        raise SystemExit(1)


def _granian(app: ProxyApp, config: ProxyConfig) -> None:
    try:
        from granian.constants import HTTPModes, Interfaces
        from granian.log import LogLevels
        from granian.server.embed import Server
    except ImportError:
        raise SystemExit(
            "--server granian needs granian: pip install 'aiostream-synth[granian]'"
        ) from None

    async def main() -> None:
        server = Server(
            app,
            address=config.host,
            port=config.port,
            interface=Interfaces.ASGI,
            # HTTP/1.1 only, as uvicorn: granian's default also serves HTTP/2 (cleartext, prior
            # knowledge), which costs each open stream about 9 KiB whatever it speaks
            # (bench_load.py, N = 5,000: 36.4 -> 27.6 KiB per open stream).
            http=HTTPModes.http1,
            backlog=_BACKLOG,
            log_level=LogLevels(config.log_level),
            log_access=False,
            websockets=False,
            # Granian's default caps concurrent requests at the backlog (4096): long-lived
            # streams beyond it would wait for a whole turn before being read.
            backpressure=_GRANIAN_CONCURRENCY,
        )
        loop = asyncio.get_running_loop()

        async def drain() -> None:
            await _drain_streams(app, config)
            server.stop()  # type: ignore[no-untyped-call]

        draining: list[asyncio.Task[None]] = []

        def on_signal() -> None:
            if draining:  # a second signal: end the streams, then stop
                forced.append(True)
                _end_streams_now(app)
                server.stop()  # type: ignore[no-untyped-call]
                return
            draining.append(loop.create_task(drain()))

        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, on_signal)
        await server.serve()

    forced: list[bool] = []
    if config.loop in ("auto", "uvloop"):
        with contextlib.suppress(ImportError):
            import uvloop

            uvloop.run(main())
            if forced:
                raise SystemExit(1)
            return
        if config.loop == "uvloop":
            raise SystemExit("--loop uvloop needs uvloop installed")
    asyncio.run(main())
    if forced:
        raise SystemExit(1)


def _lean(app: ProxyApp, config: ProxyConfig, sock: socket.socket | None) -> None:
    try:
        from aiostream_synth._proxy import lean_http
    except ImportError:  # pragma: no cover - httptools comes with the proxy extra
        raise SystemExit(
            "--server lean needs httptools: pip install 'aiostream-synth[proxy]' "
            "(or choose --server uvicorn)"
        ) from None

    main = lean_http.serve(
        app,  # type: ignore[arg-type]
        host=config.host,
        port=config.port,
        sock=sock,
        backlog=_BACKLOG,
        drain=functools.partial(_drain_streams, app, config),
        end_now=functools.partial(_end_streams_now, app),
        limits=lean_http.Limits(
            keep_alive_s=config.http_keep_alive_s,
            head_timeout_s=config.http_head_timeout_s,
            body_timeout_s=config.http_body_timeout_s,
            write_timeout_s=config.http_write_timeout_s,
            max_connections=config.max_connections,
        ),
    )
    if config.loop in ("auto", "uvloop"):
        with contextlib.suppress(ImportError):
            import uvloop

            forced = uvloop.run(main)
            if forced:
                raise SystemExit(1)
            return
        if config.loop == "uvloop":
            main.close()
            raise SystemExit("--loop uvloop needs uvloop installed")
    if asyncio.run(main):
        raise SystemExit(1)


def _warm_up() -> None:
    """Build what a dialect's first request would otherwise build (the Anthropic params model
    takes about a second; it is built on first use, so library users who never serve that
    dialect never pay for it)."""
    for spec in registered_dialects():
        spec.warm_up()


#: A full collection runs at most once per this many second-generation collections (CPython's
#: default is 10); see :func:`_tune_garbage_collector`.
FULL_COLLECTION_EVERY = 100
#: A young collection runs once this many more objects were made than freed (CPython's default
#: is 700); see :func:`_tune_garbage_collector`.
YOUNG_COLLECTION_EVERY = 4000
#: A second-generation collection runs every this many young ones (CPython's default is 10).
MIDDLE_COLLECTION_EVERY = 3


def _tune_garbage_collector() -> None:
    """Three measured changes to CPython's collector for a server of long-lived streams.

    * Everything alive once the app is built (modules, the params models and their validators,
      the app) is frozen beyond the collector's reach: none of it ever becomes garbage, and a
      full collection would otherwise walk all of it whenever one runs, typically in the middle
      of a burst of finishing streams (it about halved the terminal lateness of 5,000 streams
      finishing together).
    * Full collections become ten times rarer. After the freeze the long-lived generation is
      nearly empty, so while a burst of streams opens, CPython's "the old generation grew by a
      quarter" rule lets a full collection run every ten second-generation collections, each
      walking every stream opened so far: requests arriving together by the thousand spent
      half of their whole cost in the collector.
    * Young collections become rarer. Every waiting stream makes a few objects per tick (the
      tick's future, the coroutines awaiting it) and frees the last tick's, so between two
      young collections all of them are young: a young collection walks every waiting stream,
      whatever triggered it. Steady ticking drifts the collector's count up (a free when the
      count is zero is not counted), so at the default threshold one ran about every second
      with thousands of background streams waiting. The second generation is collected more
      often than by default in exchange, so that it stays as small as before while a burst
      opens. The figures: benchmarks/COSTS.md. Garbage cycles are still found, only later.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, MIDDLE_COLLECTION_EVERY, FULL_COLLECTION_EVERY)


def _serve_one(config: ProxyConfig, sock: socket.socket | None = None) -> None:
    app = ProxyApp(config)
    _warm_up()
    _tune_garbage_collector()
    if effective_server(config) == "hypercorn":
        _hypercorn(app, config)
    elif config.server == "granian":
        _granian(app, config)
    elif config.server == "lean":
        _lean(app, config, sock)
    else:
        _uvicorn(app, config, sock)


def _serve_worker(config: ProxyConfig, sock: socket.socket, parent: int) -> None:
    """One forked worker of ``serve --workers``: it drains and exits (SIGTERM) when its parent
    dies, however it died: a supervisor killed with SIGKILL left its workers serving the port."""
    _terminate_when_orphaned(parent)
    _serve_one(config, sock)


def _terminate_when_orphaned(parent: int) -> None:
    """SIGTERM to this process once ``parent`` is gone: at once if it is gone already, else
    when it ends (Linux's ``PR_SET_PDEATHSIG``; elsewhere nothing is asked)."""
    if sys.platform != "linux":  # pragma: no cover - the workers are Linux's here
        return
    import ctypes

    pr_set_pdeathsig = 1
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(pr_set_pdeathsig, signal.SIGTERM, 0, 0, 0) != 0:  # pragma: no cover
        LOG.warning(
            "worker %d: PR_SET_PDEATHSIG failed (errno %d)", os.getpid(), ctypes.get_errno()
        )
    if os.getppid() != parent:  # the parent died before the request took effect
        os.kill(os.getpid(), signal.SIGTERM)


def _raise_open_files_limit() -> int | None:
    """Thousands of open streams need thousands of sockets: lift the soft limit to the hard one.

    Returns the limit now in force (None where there is none, or it cannot be read).
    """
    try:
        import resource
    except ImportError:  # pragma: no cover - not on Windows
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        soft = hard
    return None if soft == resource.RLIM_INFINITY else soft


#: The HTTP options each server applies (the rest it ignores, with a warning at start).
_APPLIED = {
    "lean": {
        "max_connections",
        "http_keep_alive_s",
        "http_head_timeout_s",
        "http_body_timeout_s",
        "http_write_timeout_s",
    },
    "uvicorn": {"max_connections", "http_keep_alive_s", "http_write_timeout_s"},
    "hypercorn": {"http_keep_alive_s"},
    "granian": set(),
}


def effective_server(config: ProxyConfig) -> str:
    """The server that runs: ``config.server``, except that ``--loop trio`` runs hypercorn's
    trio worker (the only one of ours with a trio mode)."""
    return "hypercorn" if config.loop == "trio" else config.server


def unapplied_options(config: ProxyConfig) -> list[str]:
    """The HTTP options set away from their defaults that ``config.server`` does not apply
    (``--loop trio`` runs hypercorn)."""
    server = effective_server(config)
    defaults = ProxyConfig()
    return [
        name
        for name in sorted(_APPLIED["lean"] - _APPLIED[server])
        if getattr(config, name) != getattr(defaults, name)
    ]


def _store_shown(config: ProxyConfig) -> str:
    """The store as the settings line names it (a Redis URL without its credentials)."""
    if config.store == "memory":
        return f"memory ({config.store_max_bytes} bytes, TTL {config.store_ttl_s:g} s)"
    if config.store == "off":
        return "off"
    parsed = urllib.parse.urlsplit(config.store)
    return f"{parsed.scheme}://{parsed.hostname}:{parsed.port or 6379}{parsed.path}"


def settings_line(config: ProxyConfig) -> str:
    """The effective settings, logged once at startup: what serves, in front of what, with
    which keepalive, deadline and limits (no secret: only whether a key is set)."""

    def seconds(value: float | None) -> str:
        return "none" if value is None else f"{value:g} s"

    upstream = config.upstream or f"the embedded model ({config.model})"
    api = config.upstream_api or "each client's own"
    bridge = "" if config.upstream_api is None else f", bridge profile {config.bridge_profile}"
    connections = "no cap" if config.max_connections is None else str(config.max_connections)
    return (
        f"settings: upstream {upstream}, API {api}{bridge}; keepalive every "
        f"{seconds(config.keepalive_s)}, backend deadline {seconds(config.timeout)}, upstream "
        f"read timeout {seconds(config.read_timeout)}; body limit {config.max_body_bytes} bytes, "
        f"client connections per worker {connections}; coalesce {config.coalesce}; server "
        f"{effective_server(config)} (loop {config.loop}), {config.workers} worker(s), drain "
        f"{seconds(config.drain_timeout)}; inbound API key {'required' if config.api_key else 'none'}; "
        f"store {_store_shown(config)}"
    )


def check_store(config: ProxyConfig) -> None:
    """Connect to the configured shared store once before serving: a server that does not
    answer is one clear error at startup (:class:`StoreUnavailable`), not a failure on the
    first background request."""
    if config.store in ("memory", "off"):
        return
    from aiostream_synth._proxy.app import open_store

    async def connect() -> None:
        store = open_store(config)
        if store is not None:
            async with store:
                pass

    anyio.run(connect)


def run(config: ProxyConfig) -> None:
    """Serve until SIGTERM/SIGINT (blocking)."""
    LOG.info("%s", settings_line(config))
    check_store(config)
    server = effective_server(config)
    if server != config.server:
        log = LOG.info if config.server == "lean" else LOG.warning  # lean: the default
        log("--loop trio: served by hypercorn's trio worker, not %s (asyncio only)", config.server)
    for name in unapplied_options(config):
        LOG.warning("--%s is not applied by %s (lean applies it)", name.replace("_", "-"), server)
    limit = _raise_open_files_limit()
    if limit is not None and config.upstream:
        # Two sockets per stream: its client's and its upstream call's.
        LOG.info("open-files limit %d: room for about %d streams", limit, limit // 2)
    if config.workers <= 1:
        _serve_one(config)
        return
    if config.server not in ("uvicorn", "lean") or config.loop == "trio":
        raise SystemExit(
            "--workers > 1 is supported with uvicorn and lean (asyncio/uvloop); run one trio, "
            "hypercorn or granian server per port"
        )
    sock = _bind(config)
    context = multiprocessing.get_context("fork")
    children = [
        context.Process(target=_serve_worker, args=(config, sock, os.getpid()), daemon=False)
        for _ in range(config.workers)
    ]
    for child in children:
        child.start()
    LOG.info("serving on %s:%d with %d workers", config.host, config.port, config.workers)

    def forward(sig: int, frame: Any) -> None:
        for child in children:
            if child.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(child.pid, sig)

    signal.signal(signal.SIGTERM, forward)
    signal.signal(signal.SIGINT, forward)
    for child in children:
        child.join()
    sock.close()
    sys.exit(max((child.exitcode or 0) for child in children))
