"""Long-turn load: thousands of concurrent streams, each waiting T seconds for its backend.

Servers, each in its own process (one worker unless said), all answering ``POST /v1/responses``
with ``stream: true`` from a backend that answers after T seconds, keepalive every K seconds:

* ``floor``   — written here on bare asyncio sockets: the same wire bytes (keepalive events,
  then the pre-rendered answer, chunked), nothing else;
* ``floor-uvloop`` — the same on uvloop, the loop the proxy runs on (``floor`` runs asyncio's
  own loop);
* ``floor-uvicorn`` — the floor's wire bytes from a bare ASGI function on uvicorn (the proxy's
  uvicorn settings; no disconnect watcher, no engine): what uvicorn alone costs a stream;
* ``floor-protocol`` — the floor's wire bytes with no task at all: a protocol object per
  connection driven by loop timers (uvloop when installed): what an HTTP layer that is not a
  task per request would cost a stream, before any app;
* ``native``  — :class:`SynthesizingApp` (the engine on the native ASGI path) on uvicorn;
* ``sse-starlette`` — the engine behind the sse-starlette adapter on uvicorn;
* ``proxy``   — ``aiostream-synth serve`` (embedded model, ``[delay:T]``) on its default
  server, ``lean`` (``_proxy/lean_http.py``);
* ``proxy-w2``— the same with ``--workers 2``;
* ``proxy-trio`` — the same on hypercorn's trio worker (``--loop trio``);
* ``proxy-granian`` / ``proxy-hypercorn`` — the same on granian (Rust HTTP, asyncio + uvloop) /
  hypercorn's asyncio worker;
* ``proxy-uvicorn`` — the same on uvicorn (``--server uvicorn``, asyncio + uvloop, httptools,
  with ``serve``'s own protocol subclass), the default before the lean server;
* ``proxy-anthropic`` — ``aiostream-synth serve`` answering ``POST /v1/messages`` (Anthropic
  Messages: ``ping`` keepalives, ``message_stop`` at the end) from the same embedded model;
* ``proxy-upstream`` — ``aiostream-synth serve --upstream`` in front of a non-streaming
  upstream written here (bare asyncio, answers after T seconds, run on the load client's core),
  which it calls in the client's own dialect (``/v1/responses``);
* ``proxy-bridge`` — the same with ``--upstream-api chat``: every Responses stream is bridged to
  the upstream's ``/v1/chat/completions`` (compare it with ``proxy-upstream``).
* ``proxy-nostore`` — ``proxy`` with ``--store off``: nothing is kept (``proxy`` stores each
  finished response, its request not saying ``store: false``, for retrieval and
  ``previous_response_id``);
* ``proxy-background`` / ``proxy-background-redis`` — ``proxy`` with every stream a background
  response (``background: true``): a recorder task generates it into the store (memory, or a
  redis-server started here on the load client's core), the client reads its live log;
* ``proxy-redis`` — ``proxy`` on the Redis store (the same redis-server), plain streams: every
  request is first looked up among the calls of the other processes sharing the store, and its
  call is told to them (coalescing across processes, issue 31), the path a fleet takes when
  nothing coalesces (compare it with ``proxy``).
* ``fleet-1`` / ``fleet-2`` — one / two ``proxy-redis`` replicas behind HAProxy (Debian's
  ``haproxy``, round robin, one thread, on the load client's core): replica one on core 0, replica
  two on core 1 (beside the load client, HAProxy and redis-server: this machine has 2 cores).
  CPU and RSS are the replicas' sum; redis-server's commands per stream per second and its CPU
  per keepalive are reported for every row on Redis.

The load client (this process, its own core) opens N streams at once (``--ramp``: over a
time; ``--open-batch``: B at a time) and parses every frame: by default a task per stream on
asyncio's streams; ``--client protocol``, a protocol object per stream on uvloop, which sends
a wave several times faster (how the independent generator of #32 opened its waves); a stream passes only with its terminal event and every frame parsing.
Reported per run: completed / failed, time to first byte, keepalive gap p50 / p99 / max in
multiples of K, terminal lateness after the backend finished p50 / p99 (the backends stamp ``completed_at``;
also end to end, from the request's send + T), server RSS per open
stream, server CPU µs per keepalive. A second table splits each stream's end-to-end lateness
into its start lag (from the request's send to the stream's start: the time to its response
head, less K for the servers that send it with the first tick; the proxy counts that tick from
the request's arrival in the kernel, so a stream it prepared late within its first interval
shows the delay in its end lag) and the rest, its end lag (how late the stream ended after its
own start + T), and counts the late keepalives (gaps over
1.1 K) with where they fall in their streams (seconds from the request's send, p50), and
gives the server's CPU per request while the wave opened (from before its first request until
every stream had its first byte: accepting, reading, preparing, starting, one tick each) and per
event at the end (from an interval before the first stream may end until the last one closed, its
keepalives taken out at the steady window's rate; with ``--interval`` beyond ``--delay`` there is
no keepalive and no steady window, and the end is timed from three quarters of T). Loopback
only; bounded in count and time.

    python benchmarks/bench_load.py --quick          # N=500, T=5 s: what `nox -s bench` runs
    python benchmarks/bench_load.py -n 1000 5000 10000 --delay 20 --out benchmarks/results
    python benchmarks/bench_load.py -n 1000 --request codex   # each stream sends a 66 KB Codex replay
    python benchmarks/bench_load.py -n 5000 --client protocol --open-batch 256 --warm-up
    python benchmarks/bench_load.py -n 5000 --servers proxy --profile /tmp/prof   # cProfile
    python benchmarks/bench_load.py --interval 200 --servers proxy-nostore proxy-background-redis
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import pathlib
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, cast

SERVERS = (
    "floor",
    "floor-uvloop",
    "floor-uvicorn",
    "floor-protocol",
    "native",
    "sse-starlette",
    "proxy",
    "proxy-w2",
    "proxy-trio",
    "proxy-anthropic",
    "proxy-upstream",
    "proxy-bridge",
    "proxy-granian",
    "proxy-hypercorn",
    "proxy-uvicorn",
    "proxy-nostore",
    "proxy-background",
    "proxy-background-redis",
    "proxy-redis",
    "fleet-1",
    "fleet-2",
)
#: The replicas of the ``fleet-*`` rows, behind HAProxy.
FLEET = {"fleet-1": 1, "fleet-2": 2}
#: The rows on the Redis store: a redis-server is started for them.
ON_REDIS = frozenset({"proxy-background-redis", "proxy-redis", *FLEET})
#: HAProxy's connection limit: a stream holds two descriptors in it (client and replica), and
#: it must fit under the hard limit of open files (20,000 on the benchmark machine).
HAPROXY_MAX_CONNECTIONS = 9_950
#: The port offset of the first replica of a ``fleet-*`` row (the next ones follow it).
REPLICA_OFFSET = 800
#: How the load client reads its streams (``--client``).
CLIENTS = ("streams", "protocol")
#: The rows whose streams are background responses (``background: true``, decision P12): each
#: generated by a recorder task into the store, the client a reader of its live log.
BACKGROUND = frozenset({"proxy-background", "proxy-background-redis"})
#: The port offset of the upstream of the ``proxy-upstream`` / ``proxy-bridge`` rows.
UPSTREAM_OFFSET = 500
#: The port offset of the redis-server of the rows on Redis (from the port the client connects to).
REDIS_OFFSET = 700
#: A keepalive gap longer than this many K counts as late (the split table counts them).
LATE_GAP_K = 1.1
UPSTREAM_CHAT_RESULT: dict[str, Any] = {
    "id": "chatcmpl-bench",
    "object": "chat.completion",
    "created": 1,
    "model": "bench",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "the answer"},
            "finish_reason": "stop",
        }
    ],
    "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
}


class Wire:
    """What the load client sends and reads for one dialect."""

    def __init__(
        self, path: bytes, keepalive: str, completed: str, failed: tuple[str, ...]
    ) -> None:
        self.path = path
        self.keepalive = keepalive
        self.completed = completed
        self.terminals = (completed, *failed)

    def body(self, prompt: str, request: str = "tiny", background: bool = False) -> bytes:
        """The request each stream sends: ``tiny`` (the prompt alone) or ``codex`` (Responses
        only: a 66 KB Codex replay, ``corpus.codex_replay_request``, the prompt its last
        user turn)."""
        if request == "codex":
            if self.path != b"/v1/responses":
                raise ValueError("--request codex is a Responses request")
            from corpus import codex_replay_request

            body = codex_replay_request()
            text = {"type": "input_text", "text": prompt}
            turn = {"type": "message", "role": "user", "content": [text]}
            return json.dumps({**body, "input": [*body["input"], turn], "stream": True}).encode()
        if self.path == b"/v1/messages":
            message = [{"role": "user", "content": prompt}]
            return json.dumps(
                {"model": "bench", "max_tokens": 64, "messages": message, "stream": True}
            ).encode()
        extra = {"background": True} if background else {}
        return json.dumps({"model": "bench", "input": prompt, "stream": True, **extra}).encode()


RESPONSES_WIRE = Wire(
    b"/v1/responses",
    "response.in_progress",
    "response.completed",
    ("response.failed", "response.incomplete"),
)
MESSAGES_WIRE = Wire(b"/v1/messages", "ping", "message_stop", ("error",))


def wire_of(kind: str) -> Wire:
    return MESSAGES_WIRE if kind == "proxy-anthropic" else RESPONSES_WIRE


BACKEND_RESULT: dict[str, Any] = {
    "id": "resp_bench",
    "object": "response",
    "created_at": 1,
    "model": "bench",
    "status": "completed",
    "output": [
        {
            "type": "message",
            "id": "msg_bench",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "the answer", "annotations": []}],
        }
    ],
    "parallel_tool_calls": True,
    "tool_choice": "auto",
    "tools": [],
    "usage": {"input_tokens": 5, "output_tokens": 2, "total_tokens": 7},
}


def _raise_fd_limit() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _pin(cores: set[int]) -> None:
    with contextlib.suppress(AttributeError, OSError):  # not Linux: no pinning
        os.sched_setaffinity(0, cores & os.sched_getaffinity(0) or os.sched_getaffinity(0))


# -- servers ----------------------------------------------------------------------------------------


async def _read_request(reader: asyncio.StreamReader) -> bytes:
    """One HTTP/1.1 request off ``reader``: its head is returned, its body read and dropped."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = next(
        (
            int(line.split(b":")[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length")
        ),
        0,
    )
    await reader.readexactly(length)
    return head


def _serve_forever(handle: Any, port: int, uvloop: bool = False) -> None:
    """A bare asyncio server on loopback calling ``handle`` per connection, until interrupted
    (the bench stops it with SIGINT); on uvloop if asked (and installed)."""

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=16384)
        async with server:
            await server.serve_forever()

    with contextlib.suppress(KeyboardInterrupt):
        _runner("protocol" if uvloop else "streams")(main())


def _floor_server(port: int, delay: float, interval: float, uvloop: bool = False) -> None:
    """Bare asyncio: read the request, chunked SSE, keepalive events every K, then the answer
    (``floor-uvloop``: the same on uvloop, the loop ``serve`` runs on)."""
    from aiostream_synth._dialects.responses.synthesis import ResponsesKeepalive, responses_frames

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await _read_request(reader)
            start = time.monotonic()
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
                b"transfer-encoding: chunked\r\n\r\n"
            )
            keepalive = ResponsesKeepalive("resp_bench", base={"model": "bench", "created_at": 1})
            seq, tick = 0, 1
            while (due := start + tick * interval) < start + delay:
                await asyncio.sleep(due - time.monotonic())
                frames = keepalive.frames(include_created=seq == 0, sequence_start=seq)
                seq += len(frames)
                for frame in frames:
                    writer.write(b"%x\r\n%s\r\n" % (len(frame), frame))
                await writer.drain()
                tick += 1
            await asyncio.sleep(max(start + delay - time.monotonic(), 0))
            result = {**BACKEND_RESULT, "completed_at": time.time()}
            for frame in responses_frames(
                result, include_created=False, response_id="resp_bench", sequence_start=seq
            ):
                writer.write(b"%x\r\n%s\r\n" % (len(frame), frame))
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    _serve_forever(handle, port, uvloop)


def _floor_uvicorn_server(port: int, delay: float, interval: float) -> None:
    """The floor's stream from a bare ASGI function on uvicorn, configured as ``serve`` runs it
    (uvloop and httptools when installed, no access log, no address rewriting)."""
    import uvicorn

    from aiostream_synth._dialects.responses.synthesis import ResponsesKeepalive, responses_frames

    headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]

    async def app(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        start = time.monotonic()
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        keepalive = ResponsesKeepalive("resp_bench", base={"model": "bench", "created_at": 1})
        seq, tick = 0, 1
        while (due := start + tick * interval) < start + delay:
            await asyncio.sleep(due - time.monotonic())
            frames = keepalive.frames(include_created=seq == 0, sequence_start=seq)
            seq += len(frames)
            await send({"type": "http.response.body", "body": b"".join(frames), "more_body": True})
            tick += 1
        await asyncio.sleep(max(start + delay - time.monotonic(), 0))
        result = {**BACKEND_RESULT, "completed_at": time.time()}
        frames = responses_frames(
            result, include_created=False, response_id="resp_bench", sequence_start=seq
        )
        await send({"type": "http.response.body", "body": b"".join(frames), "more_body": False})

    uvicorn.run(
        app,
        host="127.0.0.1",
        port=port,
        log_level="error",
        backlog=16384,
        access_log=False,
        proxy_headers=False,
        lifespan="off",
    )


def _floor_protocol_server(port: int, delay: float, interval: float) -> None:
    """The floor's stream with no task at all: one protocol object per connection driven by
    loop timers (uvloop when installed, as uvicorn runs), the design of an HTTP layer that is
    not a task per request. What such a layer would cost a stream, before any app."""
    from aiostream_synth._dialects.responses.synthesis import ResponsesKeepalive, responses_frames

    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\n"
        b"transfer-encoding: chunked\r\n\r\n"
    )

    def chunks(frames: list[bytes]) -> bytes:
        return b"".join(b"%x\r\n%s\r\n" % (len(frame), frame) for frame in frames)

    class Stream(asyncio.Protocol):
        __slots__ = (
            "keepalive",
            "length",
            "received",
            "seq",
            "start",
            "tick",
            "timer",
            "transport",
        )
        transport: asyncio.Transport
        keepalive: ResponsesKeepalive

        def __init__(self) -> None:
            self.received = b""
            self.length = -1  # the whole request's length, once its head is in
            self.seq, self.tick = 0, 1
            self.timer: asyncio.TimerHandle | None = None  # none before the request is read

        def connection_made(self, transport: asyncio.BaseTransport) -> None:
            self.transport = cast("asyncio.Transport", transport)  # uvloop's is no subclass

        def data_received(self, data: bytes) -> None:
            if self.length == 0:
                return  # the response has begun; nothing more is read
            self.received += data
            if self.length < 0:
                end = self.received.find(b"\r\n\r\n")
                if end < 0:
                    return
                length = next(
                    (
                        int(line.split(b":")[1])
                        for line in self.received[:end].split(b"\r\n")
                        if line.lower().startswith(b"content-length")
                    ),
                    0,
                )
                self.length = end + 4 + length
            if len(self.received) >= self.length:
                self.received, self.length = b"", 0
                self.start = asyncio.get_running_loop().time()
                self.transport.write(head)
                self.keepalive = ResponsesKeepalive(
                    "resp_bench", base={"model": "bench", "created_at": 1}
                )
                self.schedule()

        def schedule(self) -> None:
            loop, due = asyncio.get_running_loop(), self.start + self.tick * interval
            if due < self.start + delay:
                self.timer = loop.call_at(due, self.fire)
            else:
                self.timer = loop.call_at(self.start + delay, self.finish)

        def fire(self) -> None:
            frames = self.keepalive.frames(include_created=self.seq == 0, sequence_start=self.seq)
            self.seq += len(frames)
            self.transport.write(chunks(frames))
            self.tick += 1
            self.schedule()

        def finish(self) -> None:
            result = {**BACKEND_RESULT, "completed_at": time.time()}
            frames = responses_frames(
                result, include_created=False, response_id="resp_bench", sequence_start=self.seq
            )
            self.transport.write(chunks(frames) + b"0\r\n\r\n")
            self.transport.close()

        def connection_lost(self, exc: Exception | None) -> None:
            if self.timer is not None:
                self.timer.cancel()

    async def main() -> None:
        loop = asyncio.get_running_loop()
        server = await loop.create_server(Stream, "127.0.0.1", port, backlog=16384)
        async with server:
            await server.serve_forever()

    try:
        import uvloop
    except ImportError:
        runner: Any = asyncio.run
    else:
        runner = uvloop.run
    with contextlib.suppress(KeyboardInterrupt):
        runner(main())


def _upstream_server(port: int, delay: float) -> None:
    """A non-streaming upstream on bare asyncio: every request (keep-alive connections) is
    answered after ``delay`` seconds, in the API its path names."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                head = await _read_request(reader)
                await asyncio.sleep(delay)
                chat = b"/chat/completions" in head.split(b"\r\n", 1)[0]
                stamped = {"completed_at": time.time()}
                body = json.dumps(
                    UPSTREAM_CHAT_RESULT if chat else {**BACKEND_RESULT, **stamped}
                ).encode()
                writer.write(
                    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n"
                    b"content-length: %d\r\n\r\n%s" % (len(body), body)
                )
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()

    _serve_forever(handle, port)


def _uvicorn_server(kind: str, port: int, delay: float, interval: float) -> None:
    import anyio
    import uvicorn
    from starlette.applications import Starlette

    from aiostream_synth import BackendCall, StreamSettings, SynthesizingApp
    from aiostream_synth.starlette import synthesizing_routes

    async def backend(call: BackendCall) -> Any:
        await anyio.sleep(delay)
        return {**BACKEND_RESULT, "completed_at": time.time()}

    settings = StreamSettings(keepalive_interval=interval)
    app: Any = (
        SynthesizingApp(backend, settings)
        if kind == "native"
        else Starlette(routes=synthesizing_routes(backend, settings))
    )
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error", backlog=16384)


def start_server(
    kind: str,
    port: int,
    delay: float,
    interval: float,
    python: str = sys.executable,
    profile: str | None = None,
    cores: str | None = None,
    redis_port: int | None = None,
) -> subprocess.Popen[bytes]:
    """Start a server of ``kind`` on ``python`` (the interpreter; this one by default); a
    proxy under ``profile_server.py`` writing to ``profile`` (a path without suffix) if given.
    ``cores``: where it runs (core 0 by default); ``redis_port``: the store of a row on Redis
    (``port`` + REDIS_OFFSET by default)."""
    if kind.startswith(("proxy", "fleet")):
        workers = "2" if kind == "proxy-w2" else "1"
        wrapper = (
            []
            if profile is None
            else [str(pathlib.Path(__file__).with_name("profile_server.py")), profile]
        )
        command = [
            python,
            *wrapper,
            "-m",
            "aiostream_synth",
            "serve",
            "--port",
            str(port),
            "--keepalive-s",
            str(interval),
            "--workers",
            workers,
        ]  # otherwise serve's defaults: INFO logging (to the discarded stderr), 1800 s deadline
        if kind == "proxy-trio":
            command += ["--loop", "trio"]
        if kind == "proxy-granian":
            command += ["--server", "granian"]
        if kind == "proxy-hypercorn":
            command += ["--server", "hypercorn", "--loop", "asyncio"]
        if kind == "proxy-uvicorn":
            command += ["--server", "uvicorn"]
        if kind == "proxy-nostore":
            command += ["--store", "off"]  # the path without a store: nothing kept, ever
        if kind in ON_REDIS:
            command += ["--store", f"redis://127.0.0.1:{redis_port or port + REDIS_OFFSET}/0"]
        if kind in ("proxy-upstream", "proxy-bridge"):
            command += ["--upstream", f"http://127.0.0.1:{port + UPSTREAM_OFFSET}/v1"]
        if kind == "proxy-bridge":
            command += ["--upstream-api", "chat"]
    else:
        command = [
            python,
            __file__,
            "--serve",
            kind,
            "--port",
            str(port),
            "--delay",
            str(delay),
            "--interval",
            str(interval),
        ]
    cores = cores or ("0-1" if kind == "proxy-w2" else "0")
    return subprocess.Popen(
        ["taskset", "-c", cores, *command],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def start_haproxy(port: int, replicas: list[int], folder: str) -> subprocess.Popen[bytes]:
    """Debian's HAProxy on the load client's core: round robin over ``replicas``, one thread,
    long timeouts (a stream waits T), connection limits above any N here."""
    config = pathlib.Path(folder, "haproxy.cfg")
    servers = "".join(
        f"    server r{i} 127.0.0.1:{replica}\n" for i, replica in enumerate(replicas)
    )
    most = HAPROXY_MAX_CONNECTIONS
    config.write_text(
        f"global\n    maxconn {most}\n    nbthread 1\n"
        f"defaults\n    mode http\n    option http-no-delay\n    maxconn {most}\n"
        "    timeout connect 5s\n"
        "    timeout client 600s\n    timeout server 600s\n"
        f"frontend front\n    bind 127.0.0.1:{port}\n    default_backend replicas\n"
        f"backend replicas\n    balance roundrobin\n{servers}"
    )
    binary = "haproxy" if shutil.which("haproxy") else "/usr/sbin/haproxy"
    return subprocess.Popen(
        ["taskset", "-c", "1", binary, "-db", "-f", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def redis_commands(port: int) -> int:
    """The commands redis-server processed so far (``INFO stats``), over a bare socket."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(b"*2\r\n$4\r\nINFO\r\n$5\r\nstats\r\n")
        data = b""
        while b"total_commands_processed:" not in data or not data.endswith(b"\r\n"):
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
    for line in data.decode().splitlines():
        if line.startswith("total_commands_processed:"):
            return int(line.split(":")[1])
    raise RuntimeError("redis-server did not report its commands")


def _tree(pid: int) -> list[int]:
    pids, found = [pid], True
    while found:
        found = False
        for status in pathlib.Path("/proc").glob("[0-9]*/status"):
            try:
                text = status.read_text()
            except OSError:
                continue
            ppid = next(
                (int(line.split()[1]) for line in text.splitlines() if line.startswith("PPid:")), -1
            )
            child = int(status.parent.name)
            if ppid in pids and child not in pids:
                pids.append(child)
                found = True
    return pids


def _signal(server_pids: list[int], signum: int) -> None:
    """Send ``signum`` to each server process (``profile_server.py`` starts or stops on it)."""
    for server_pid in server_pids:
        os.kill(server_pid, signum)


def _usage(pids: list[int]) -> tuple[float, int]:
    """CPU seconds and RSS bytes of a process tree."""
    cpu, rss = 0.0, 0
    ticks, page = os.sysconf("SC_CLK_TCK"), os.sysconf("SC_PAGE_SIZE")
    for pid in pids:
        try:
            fields = pathlib.Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            cpu += (int(fields[11]) + int(fields[12])) / ticks
            rss += int(pathlib.Path(f"/proc/{pid}/statm").read_text().split()[1]) * page
        except (OSError, IndexError):
            pass
    return cpu, rss


# -- the load client ---------------------------------------------------------------------------------


class Batch:
    """``--open-batch``: the streams opened together; the next batch's turn comes when all of
    this one's requests are sent (a client opening its connections B at a time)."""

    def __init__(self, size: int, turn: asyncio.Event) -> None:
        self.left = size
        self.turn = turn  # this batch may open
        self.done = asyncio.Event()  # ...and the next one

    def sent_one(self) -> None:
        self.left -= 1
        if self.left == 0:
            self.done.set()


def batches(n: int, size: int) -> list[Batch | None]:
    """Each stream's batch (None for all at once, ``size`` 0)."""
    if size <= 0:
        return [None] * n
    out: list[Batch | None] = []
    turn = asyncio.Event()
    turn.set()
    for start in range(0, n, size):
        batch = Batch(min(size, n - start), turn)
        out += [batch] * batch.left
        turn = batch.done
    return out


async def warm_up(port: int, wire: Wire, count: int = 64) -> None:
    """A few short requests before the wave (the generator of #32 warmed up too): imports,
    first-call paths and the accept queue are warm when the measured wave arrives."""
    body = wire.body("warm up", "tiny")

    async def one() -> None:
        with contextlib.suppress(OSError, asyncio.IncompleteReadError):
            reader, writer = await asyncio.open_connection("127.0.0.1", port)
            writer.write(
                b"POST %s HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n" % wire.path
                + b"Content-Length: %d\r\nConnection: close\r\n\r\n" % len(body)
                + body
            )
            await reader.read()
            writer.close()

    await asyncio.gather(*(one() for _ in range(count)))


class Stats:
    def __init__(self, n: int) -> None:
        self.n = n
        self.opened = 0
        self.completed = 0
        self.failed = 0
        self.keepalives = 0
        #: The events that are not keepalives (the answer's, a background stream's first).
        self.events = 0
        self.ttfb: list[float] = []
        self.gaps: list[float] = []
        #: When each gap over LATE_GAP_K ended, in seconds from its stream's request.
        self.late_gaps_at: list[float] = []
        self.lateness: list[float] = []
        self.e2e_lateness: list[float] = []
        #: Each stream's end-to-end lateness, split (see the module docstring).
        self.start_lag: list[float] = []
        self.end_lag: list[float] = []
        self.all_open = asyncio.Event()
        self.all_started = asyncio.Event()
        self.errors: dict[str, int] = {}


async def _read_chunked(reader: asyncio.StreamReader) -> Any:
    """Yield the decoded body chunks of a chunked HTTP response."""
    while True:
        size_line = await reader.readline()
        if not size_line:
            return
        size = int(size_line.strip().split(b";")[0] or b"0", 16)
        if size == 0:
            await reader.readline()
            return
        data = await reader.readexactly(size)
        await reader.readexactly(2)
        yield data


def head_after(kind: str, interval: float) -> float:
    """When a server sends a stream's response head, after the stream's start: the floors at
    once, the engine (lazy commit) with the first tick."""
    return 0.0 if kind.startswith("floor") else interval


class StreamRecord:
    """What one stream's frames say, whichever client reads them: its first byte, each keepalive
    gap, its terminal event and how late it came (the client calls ``sent``, ``first_byte``,
    ``block`` per SSE event block, and ``end``)."""

    __slots__ = (
        "delay",
        "head_delay",
        "interval",
        "last_keepalive",
        "sent_at",
        "stats",
        "terminal",
        "ttfb",
        "wire",
    )

    def __init__(
        self, stats: Stats, wire: Wire, delay: float, interval: float, head_delay: float
    ) -> None:
        self.stats, self.wire = stats, wire
        self.delay, self.interval, self.head_delay = delay, interval, head_delay
        self.sent_at = 0.0
        self.ttfb = 0.0
        self.last_keepalive: float | None = None
        self.terminal = False

    def sent(self) -> None:
        self.sent_at = time.monotonic()
        stats = self.stats
        stats.opened += 1
        if stats.opened == stats.n:
            stats.all_open.set()

    def first_byte(self) -> None:
        self.ttfb = time.monotonic() - self.sent_at
        stats = self.stats
        stats.ttfb.append(self.ttfb)
        if len(stats.ttfb) == stats.n:
            stats.all_started.set()

    def block(self, block: bytes) -> None:
        """One SSE event block (the text between blank lines)."""
        if not block or block.startswith(b":"):
            return
        event = json.loads(block.split(b"data: ", 1)[1])
        kind = event["type"]
        now = time.monotonic()
        stats, wire = self.stats, self.wire
        if kind == wire.keepalive:
            stats.keepalives += 1
            if self.last_keepalive is not None:
                gap = (now - self.last_keepalive) / self.interval
                stats.gaps.append(gap)
                if gap > LATE_GAP_K:
                    stats.late_gaps_at.append(now - self.sent_at)
            self.last_keepalive = now
        else:
            stats.events += 1
        if kind in wire.terminals:
            self.terminal = kind == wire.completed
            # From the moment the backend had its answer (it stamps completed_at) to the
            # terminal event here: what the server added; and end to end.
            finished = event.get("response", {}).get("completed_at")
            if finished:
                stats.lateness.append(time.time() - finished)
            stats.e2e_lateness.append(now - self.sent_at - self.delay)
            stats.start_lag.append(self.ttfb - self.head_delay)
            stats.end_lag.append(now - self.sent_at - self.delay - (self.ttfb - self.head_delay))

    def end(self, error: BaseException | None = None) -> None:
        """The connection is over: the stream passes only with its terminal event."""
        if error is None and not self.terminal:
            error = ValueError("no terminal event")
        if error is None:
            self.stats.completed += 1
        else:
            self.stats.failed += 1
            name = type(error).__name__
            self.stats.errors[name] = self.stats.errors.get(name, 0) + 1


def request_bytes(wire: Wire, body: bytes) -> bytes:
    return (
        b"POST %s HTTP/1.1\r\nHost: bench\r\nContent-Type: application/json\r\n" % wire.path
        + b"Content-Length: %d\r\n\r\n" % len(body)
        + body
    )


async def one_stream(
    port: int,
    wire: Wire,
    body: bytes,
    stats: Stats,
    delay: float,
    interval: float,
    head_delay: float = 0.0,
    after: float = 0.0,
    batch: Batch | None = None,
    client: str = "streams",
) -> None:
    """One stream, opened at its time (``--ramp``) and in its batch's turn (``--open-batch``),
    read by the ``client`` asked for."""
    await asyncio.sleep(after)  # --ramp: this stream's arrival
    if batch is not None:  # --open-batch: after the batch before it has sent its requests
        await batch.turn.wait()
    record = StreamRecord(stats, wire, delay, interval, head_delay)
    read = _read_by_protocol if client == "protocol" else _read_by_streams
    await read(port, record, request_bytes(wire, body), batch)


async def _read_by_streams(
    port: int, record: StreamRecord, request: bytes, batch: Batch | None
) -> None:
    """``--client streams``: the stream's task reads through asyncio's streams."""
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
    except OSError as exc:
        record.end(exc)
        if batch is not None:
            batch.sent_one()
        return
    writer.write(request)
    record.sent()
    if batch is not None:
        batch.sent_one()
    try:
        head = await reader.readuntil(b"\r\n\r\n")
        record.first_byte()
        if b" 200 " not in head.split(b"\r\n", 1)[0] or b"chunked" not in head.lower():
            raise ValueError("unexpected response head")
        buffer = b""
        async for data in _read_chunked(reader):
            buffer += data
            while b"\n\n" in buffer:
                block, buffer = buffer.split(b"\n\n", 1)
                record.block(block)
    except (OSError, ValueError, KeyError, asyncio.IncompleteReadError) as exc:
        record.end(exc)
    else:
        record.end()
    finally:
        writer.close()


class ProtocolStream(asyncio.Protocol):
    """``--client protocol``: one stream as a protocol object, no task while it waits. The
    request is written in ``connection_made``; the first byte is timed on the first
    ``data_received``; the chunked body is decoded incrementally in the callback."""

    __slots__ = ("done", "events", "head", "need", "pending", "record", "request", "transport")
    transport: asyncio.Transport

    def __init__(self, record: StreamRecord, request: bytes) -> None:
        self.record, self.request = record, request
        self.done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.head: bytes | None = None  # the response head, once whole
        self.pending = b""  # bytes not yet decoded (head, then chunk framing)
        self.need = -1  # the current chunk's size still to read; -1 between chunks
        self.events = b""  # decoded SSE text not yet split into blocks

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast("asyncio.Transport", transport)  # uvloop's is no subclass
        self.transport.write(self.request)
        self.record.sent()

    def data_received(self, data: bytes) -> None:
        if self.done.done():
            return
        try:
            self._feed(data)
        except (ValueError, KeyError) as exc:
            self._finish(exc)

    def _feed(self, data: bytes) -> None:
        if self.head is None:
            if not self.pending:
                self.record.first_byte()
            self.pending += data
            end = self.pending.find(b"\r\n\r\n")
            if end < 0:
                return
            self.head, self.pending = self.pending[: end + 4], self.pending[end + 4 :]
            if (
                b" 200 " not in self.head.split(b"\r\n", 1)[0]
                or b"chunked" not in self.head.lower()
            ):
                raise ValueError("unexpected response head")
        else:
            self.pending += data
        while True:
            if self.need < 0:
                line_end = self.pending.find(b"\r\n")
                if line_end < 0:
                    return
                size = int(self.pending[:line_end].split(b";")[0] or b"0", 16)
                self.pending = self.pending[line_end + 2 :]
                if size == 0:
                    self._finish(None)
                    return
                self.need = size
            if len(self.pending) < self.need + 2:
                return
            self.events += self.pending[: self.need]
            self.pending = self.pending[self.need + 2 :]
            self.need = -1
            while b"\n\n" in self.events:
                block, self.events = self.events.split(b"\n\n", 1)
                self.record.block(block)

    def _finish(self, error: BaseException | None) -> None:
        if not self.done.done():
            self.record.end(error)
            self.done.set_result(None)
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self._finish(exc or ConnectionResetError("closed before the last chunk"))


async def _read_by_protocol(
    port: int, record: StreamRecord, request: bytes, batch: Batch | None
) -> None:
    """``--client protocol``: the task lives only until the connection is made and its request
    written; the stream is then a protocol object until it ends."""
    loop = asyncio.get_running_loop()
    try:
        _, stream = await loop.create_connection(
            lambda: ProtocolStream(record, request), "127.0.0.1", port
        )
    except OSError as exc:
        record.end(exc)
        return
    finally:
        if batch is not None:
            batch.sent_one()
    await stream.done


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(int(q * len(ordered)), len(ordered) - 1)]


async def run_load(
    kind: str,
    port: int,
    n: int,
    delay: float,
    interval: float,
    server_pids: list[int],
    quiet: bool,
    ramp: float = 0.0,
    request: str = "tiny",
    open_batch: int = 0,
    warm: bool = False,
    client: str = "streams",
    profiled: str | None = None,
    redis: tuple[int, int] | None = None,
) -> dict[str, Any]:
    """One wave against ``port``; CPU and RSS are those of ``server_pids`` and their children.
    ``profiled``: the window a server under ``profile_server.py`` is profiled over (``wave``,
    ``steady`` or ``end``; None: not profiled). ``redis``: the port and pid of the row's
    redis-server, whose commands and CPU are counted over the same steady window."""
    wire = wire_of(kind)
    body = wire.body(f"bench [delay:{delay:g}]", request, background=kind in BACKGROUND)
    if warm:
        await warm_up(port, wire)
    stats = Stats(n)
    pids = [pid for server_pid in server_pids for pid in _tree(server_pid)]
    cpu0, rss0 = _usage(pids)
    start = time.monotonic()
    if profiled == "wave":  # from the first request to every stream's first byte
        _signal(server_pids, signal.SIGUSR1)

    async def progress() -> None:
        while True:
            await asyncio.sleep(2)
            if not quiet:
                print(
                    f"  {kind} N={n}: t={time.monotonic() - start:5.1f}s opened {stats.opened}/{n} "
                    f"completed {stats.completed} failed {stats.failed} keepalives {stats.keepalives}",
                    file=sys.stderr,
                    flush=True,
                )

    reporter = asyncio.create_task(progress())
    groups = batches(n, open_batch)
    tasks = [
        asyncio.create_task(
            one_stream(
                port,
                wire,
                body,
                stats,
                delay,
                interval,
                head_after(kind, interval),
                k * ramp / n,
                groups[k],
                client,
            )
        )
        for k in range(n)
    ]
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stats.all_open.wait(), timeout=max(delay, 10) + ramp)
    # Measure only once the server holds every stream: each one has had its first byte.
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(stats.all_started.wait(), timeout=delay / 2)
    cpu_wave, _ = _usage(pids)  # the wave prepared, each stream's first byte sent
    if profiled == "wave":
        _signal(server_pids, signal.SIGUSR2)
    end_only = interval >= delay  # no keepalive: no steady window, the end alone is timed
    if end_only:
        await asyncio.sleep(max(delay * 0.75 - (time.monotonic() - start), 0))
    else:
        await asyncio.sleep(min(interval * 1.5, delay / 4))
    cpu1, rss1 = _usage(pids)
    ka1 = stats.keepalives
    t1 = time.monotonic()
    if redis is not None:
        commands1, redis_cpu1 = redis_commands(redis[0]), _usage([redis[1]])[0]
    if profiled == "steady":  # the steady state the CPU per keepalive is taken over
        _signal(server_pids, signal.SIGUSR1)
    if not end_only:
        await asyncio.sleep(max(delay - (time.monotonic() - start) - interval, interval))
    cpu2, _ = _usage(pids)
    ka2, events2 = stats.keepalives, stats.events
    steady_s = time.monotonic() - t1
    redis_figures: dict[str, float | None] = {
        "redis_commands_per_stream_s": None,
        "redis_cpu_us_per_keepalive": None,
    }
    if redis is not None:
        commands2, redis_cpu2 = redis_commands(redis[0]), _usage([redis[1]])[0]
        redis_figures = {
            "redis_commands_per_stream_s": (commands2 - commands1) / n / steady_s,
            "redis_cpu_us_per_keepalive": (redis_cpu2 - redis_cpu1) * 1e6 / max(ka2 - ka1, 1),
        }
    if profiled == "steady":
        _signal(server_pids, signal.SIGUSR2)
    elif profiled == "end":  # from an interval before the first end to the last
        _signal(server_pids, signal.SIGUSR1)
    await asyncio.wait_for(asyncio.gather(*tasks), timeout=delay * 3 + 60)
    cpu3, _ = _usage(pids)
    ka3, events3 = stats.keepalives, stats.events
    if profiled == "end":
        _signal(server_pids, signal.SIGUSR2)
    reporter.cancel()
    # The end: from an interval before the first stream may end to the last one's close, its
    # keepalives taken out at the steady window's rate (none with --interval beyond T).
    per_keepalive = (cpu2 - cpu1) / max(ka2 - ka1, 1)
    end_cpu = cpu3 - cpu2 - (ka3 - ka2) * per_keepalive
    return {
        "server": kind,
        "ramp_s": ramp,
        "open_batch": open_batch,
        "warm_up": warm,
        "client": client,
        "request": request,
        "request_bytes": len(body),
        "n": n,
        "delay_s": delay,
        "interval_s": interval,
        "completed": stats.completed,
        "failed": stats.failed,
        "errors": stats.errors,
        "ttfb_p50_s": _pct(stats.ttfb, 0.5),
        "ttfb_p99_s": _pct(stats.ttfb, 0.99),
        "gap_p50_k": _pct(stats.gaps, 0.5),
        "gap_p99_k": _pct(stats.gaps, 0.99),
        "gap_max_k": max(stats.gaps, default=None),
        "lateness_p50_s": _pct(stats.lateness, 0.5),
        "lateness_p99_s": _pct(stats.lateness, 0.99),
        "e2e_lateness_p50_s": _pct(stats.e2e_lateness, 0.5),
        "e2e_lateness_p99_s": _pct(stats.e2e_lateness, 0.99),
        "start_lag_p50_s": _pct(stats.start_lag, 0.5),
        "start_lag_p99_s": _pct(stats.start_lag, 0.99),
        "end_lag_p50_s": _pct(stats.end_lag, 0.5),
        "end_lag_p99_s": _pct(stats.end_lag, 0.99),
        "late_gaps": len(stats.late_gaps_at),
        "late_gaps_at_p50_s": _pct(stats.late_gaps_at, 0.5),
        "kib_per_stream": (rss1 - rss0) / n / 1024,
        "cpu_us_per_request": (cpu_wave - cpu0) * 1e6 / n,
        "cpu_us_per_keepalive": per_keepalive * 1e6,
        "cpu_us_per_event_at_end": end_cpu * 1e6 / max(events3 - events2, 1),
        "events_at_end": events3 - events2,
        "keepalives_at_end": ka3 - ka2,
        "replicas": len(server_pids),
        **redis_figures,
        "gaps": stats.gaps[:: max(len(stats.gaps) // 20000, 1)],
    }


def _runner(client: str) -> Any:
    """The event loop the load client runs on: uvloop for ``--client protocol`` when installed."""
    if client == "protocol":
        with contextlib.suppress(ImportError):
            import uvloop

            return uvloop.run
    return asyncio.run


def _wait_port(port: int, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"server on {port} did not start")


def _fmt(value: Any, spec: str) -> str:
    return "-" if value is None else format(value, spec)


def _label(row: dict[str, Any]) -> str:
    notes = []
    if row.get("ramp_s"):
        notes.append(f"ramp {row['ramp_s']:g} s")
    if row.get("open_batch"):
        notes.append(f"opened {row['open_batch']} at a time")
    if row.get("warm_up"):
        notes.append("warmed up")
    if row.get("client", "streams") != "streams":
        notes.append(f"{row['client']} client")
    if row.get("request", "tiny") != "tiny":
        notes.append(f"{row['request']} request, {row['request_bytes'] / 1000:.0f} KB")
    return f"{row['server']} ({', '.join(notes)})" if notes else str(row["server"])


def table(rows: list[dict[str, Any]]) -> str:
    lines = [
        "| server | N | completed / failed | TTFB p50 | TTFB p99 | gap p50 / p99 / max (x K) | lateness p50 / p99 | end-to-end lateness p50 / p99 | KiB per stream | CPU µs per keepalive |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        lines.append(
            f"| {_label(r)} | {r['n']} | {r['completed']} / {r['failed']} | {_fmt(r['ttfb_p50_s'], '.3f')} s | {_fmt(r['ttfb_p99_s'], '.3f')} s | "
            f"{_fmt(r['gap_p50_k'], '.2f')} / {_fmt(r['gap_p99_k'], '.2f')} / {_fmt(r['gap_max_k'], '.2f')} | "
            f"{_fmt(r['lateness_p50_s'], '.3f')} / {_fmt(r['lateness_p99_s'], '.3f')} s | "
            f"{_fmt(r['e2e_lateness_p50_s'], '.3f')} / {_fmt(r['e2e_lateness_p99_s'], '.3f')} s | {r['kib_per_stream']:.1f} | "
            f"{r['cpu_us_per_keepalive']:.1f} |"
        )
    return "\n".join(lines)


def split_table(rows: list[dict[str, Any]]) -> str:
    """End-to-end lateness split into start lag and end lag (see the module docstring)."""
    lines = [
        "| server | N | end-to-end lateness p50 / p99 | start lag p50 / p99 | end lag p50 / p99 "
        f"| keepalive gaps > {LATE_GAP_K:g} K (at, p50) | server CPU µs per request, wave "
        "| server CPU µs per event at the end |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cells = [
            f"{_fmt(r.get(f'{name}_p50_s'), '.3f')} / {_fmt(r.get(f'{name}_p99_s'), '.3f')} s"
            for name in ("e2e_lateness", "start_lag", "end_lag")
        ]
        late = r.get("late_gaps")
        if late is not None:
            at = r.get("late_gaps_at_p50_s")
            cells.append(f"{late} (at {at:.1f} s)" if at is not None else str(late))
        else:
            cells.append("-")
        cells.append(_fmt(r.get("cpu_us_per_request"), ".0f"))
        cells.append(_fmt(r.get("cpu_us_per_event_at_end"), ".1f"))
        lines.append(f"| {_label(r)} | {r['n']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def store_table(rows: list[dict[str, Any]]) -> str:
    """What the rows on Redis cost the store, over the steady window (while streams wait)."""
    lines = [
        "| server | N | replicas | Redis commands per stream per s | redis-server CPU µs per "
        "keepalive | replicas' CPU µs per keepalive |",
        "|---|---|---|---|---|---|",
    ]
    for r in rows:
        if r.get("redis_commands_per_stream_s") is None:
            continue
        lines.append(
            f"| {_label(r)} | {r['n']} | {r.get('replicas', 1)} | "
            f"{r['redis_commands_per_stream_s']:.4f} | {r['redis_cpu_us_per_keepalive']:.2f} | "
            f"{r['cpu_us_per_keepalive']:.1f} |"
        )
    return "\n".join(lines)


def plots(rows: list[dict[str, Any]], out: pathlib.Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4.5))
    biggest = max(r["n"] for r in rows)
    for r in rows:
        if r["n"] == biggest and r["gaps"]:
            ax.hist(
                r["gaps"],
                bins=60,
                range=(0.8, 2.0),
                histtype="step",
                label=r["server"],
                density=True,
            )
    ax.set_xlabel("keepalive gap (multiples of K)")
    ax.set_ylabel("density")
    ax.set_title(f"Keepalive gaps at N = {biggest}")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out / "keepalive_gaps.png", dpi=110)
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4))
    for server in dict.fromkeys(r["server"] for r in rows):
        mine = sorted((r for r in rows if r["server"] == server), key=lambda r: r["n"])
        left.plot(
            [r["n"] for r in mine], [r["kib_per_stream"] for r in mine], marker="o", label=server
        )
        right.plot(
            [r["n"] for r in mine],
            [r["cpu_us_per_keepalive"] for r in mine],
            marker="o",
            label=server,
        )
    left.set_xlabel("N streams")
    left.set_ylabel("server RSS per open stream (KiB)")
    right.set_xlabel("N streams")
    right.set_ylabel("server CPU per keepalive (µs)")
    left.legend()
    fig.tight_layout()
    fig.savefig(out / "rss_cpu_vs_n.png", dpi=110)
    fleet = [r for r in rows if r["server"] in FLEET]
    if fleet:
        fleet_plot(fleet, out / "fleet_replicas.png")


def fleet_plot(rows: list[dict[str, Any]], path: pathlib.Path) -> None:
    """Streams against replicas: per replica count, the replicas' CPU per keepalive, memory per
    stream and TTFB p99 as N grows (one line per replica count and arrival pattern)."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(13, 4))
    for (server, pattern), mine in _series(rows).items():
        label = f"{FLEET[server]} replica{'s' * (FLEET[server] > 1)}, {pattern}"
        ns = [r["n"] for r in mine]
        for ax, key in zip(
            axes, ("cpu_us_per_keepalive", "kib_per_stream", "ttfb_p99_s"), strict=True
        ):
            ax.plot(ns, [r[key] for r in mine], marker="o", label=label)
    for ax, what in zip(
        axes,
        ("replicas' CPU per keepalive (µs)", "replicas' RSS per stream (KiB)", "TTFB p99 (s)"),
        strict=True,
    ):
        ax.set_xlabel("N streams (behind HAProxy)")
        ax.set_ylabel(what)
        ax.set_ylim(bottom=0)
    axes[0].legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def _series(rows: list[dict[str, Any]]) -> dict[tuple[str, str], list[dict[str, Any]]]:
    """Rows by server and arrival pattern, each series by N."""
    found: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        pattern = f"{r['open_batch']} at a time" if r["open_batch"] else "at once"
        found.setdefault((r["server"], pattern), []).append(r)
    return {key: sorted(mine, key=lambda r: r["n"]) for key, mine in found.items()}


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", type=int, nargs="+", default=[1000, 5000])
    parser.add_argument("--delay", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument(
        "--ramp",
        type=float,
        default=0.0,
        help="open the N streams one by one over this many seconds (agents arriving over time, "
        "their keepalive phases spread) instead of all at once; at most T / 4",
    )
    parser.add_argument(
        "--request",
        choices=("tiny", "codex"),
        default="tiny",
        help="what each stream sends: a one-line prompt, or a 66 KB Codex replay (Responses "
        "servers only; what a waiting stream holds grows with its request)",
    )
    parser.add_argument(
        "--open-batch",
        type=int,
        default=0,
        metavar="B",
        help="open the connections B at a time, each batch once the one before has sent its "
        "requests (as a generator of raw protocol clients does); 0: all N at once",
    )
    parser.add_argument(
        "--warm-up",
        action="store_true",
        help="64 short requests before the measured wave",
    )
    parser.add_argument(
        "--client",
        choices=CLIENTS,
        default="streams",
        help="how the load client reads: streams (a task per stream on asyncio's reader and "
        "writer, the default loop) or protocol (a protocol object per stream, no task while it "
        "waits, on uvloop when installed: a faster client, as the generator of #32 was)",
    )
    parser.add_argument(
        "--profile",
        metavar="DIR",
        help="run each proxy under profile_server.py, profiled over the window CPU per "
        "keepalive is measured in: DIR/<server>-<N>.pstats and .txt (CPU split, collector); "
        "the profiler about doubles the CPU, so the run's own figures are not comparable",
    )
    parser.add_argument(
        "--profile-window",
        choices=("steady", "wave", "end"),
        default="steady",
        help="with --profile: the steady window (the default); the wave, from its first "
        "request to every stream's first byte (where a request's own CPU goes); or the end, "
        "from an interval before the first stream's end to the last's",
    )
    parser.add_argument("--servers", nargs="+", default=list(SERVERS), choices=SERVERS)
    parser.add_argument("--quick", action="store_true", help="N=500, T=5 s")
    parser.add_argument("--out", default="benchmarks/results")
    parser.add_argument("--port", type=int, default=18800)
    parser.add_argument("--quiet", action="store_true")
    parser.add_argument(
        "--server-python",
        default=sys.executable,
        help="the interpreter that runs the servers (with aiostream_synth and the servers' "
        "dependencies importable; e.g. another CPython's venv and PYTHONPATH=src)",
    )
    parser.add_argument("--serve", help=argparse.SUPPRESS)  # floor, upstream, native...
    args = parser.parse_args()
    if args.serve:
        _raise_fd_limit()
        if args.serve in ("floor", "floor-uvloop"):
            _floor_server(args.port, args.delay, args.interval, args.serve == "floor-uvloop")
        elif args.serve == "floor-uvicorn":
            _floor_uvicorn_server(args.port, args.delay, args.interval)
        elif args.serve == "floor-protocol":
            _floor_protocol_server(args.port, args.delay, args.interval)
        elif args.serve == "upstream":
            _upstream_server(args.port, args.delay)
        else:
            _uvicorn_server(args.serve, args.port, args.delay, args.interval)
        return
    if args.quick:
        args.n, args.delay = [500], 5.0
    if not 0 <= args.ramp <= args.delay / 4:
        parser.error(
            "--ramp must lie between 0 and T / 4 (the measurement needs every stream open)"
        )
    if FLEET.keys() & set(args.servers) and max(args.n) > HAPROXY_MAX_CONNECTIONS:
        parser.error(f"the fleet rows take N up to {HAPROXY_MAX_CONNECTIONS} (HAProxy's limit)")
    _raise_fd_limit()
    _pin({1})
    out = pathlib.Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    port = args.port
    for n in args.n:
        for kind in args.servers:
            port += 1
            print(
                f"running {kind} with N={n}, T={args.delay:g}s, K={args.interval:g}s",
                file=sys.stderr,
                flush=True,
            )
            helpers: list[subprocess.Popen[bytes]] = []
            redis: tuple[int, int] | None = None
            if kind in ("proxy-upstream", "proxy-bridge"):
                helpers.append(
                    subprocess.Popen(
                        [
                            *("taskset", "-c", "1", sys.executable, __file__),
                            *("--serve", "upstream", "--port", str(port + UPSTREAM_OFFSET)),
                            *("--delay", str(args.delay)),
                        ],
                        stdout=subprocess.DEVNULL,
                        stderr=subprocess.DEVNULL,
                    )
                )
                _wait_port(port + UPSTREAM_OFFSET)
            if kind in ON_REDIS:
                # Debian's redis-server on the load client's core, its own data directory.
                store = subprocess.Popen(
                    [
                        *("taskset", "-c", "1", "redis-server", "--port"),
                        *(str(port + REDIS_OFFSET), "--save", "", "--appendonly", "no"),
                        *("--dir", tempfile.mkdtemp(prefix="bench-redis-")),
                    ],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                helpers.append(store)
                _wait_port(port + REDIS_OFFSET)
                redis = (port + REDIS_OFFSET, store.pid)
            profile = None
            if args.profile and kind.startswith(("proxy", "fleet")):
                pathlib.Path(args.profile).mkdir(parents=True, exist_ok=True)
                profile = str(pathlib.Path(args.profile, f"{kind}-{n}").resolve())
            if kind in FLEET:
                # Replica i on core i: one core each (the second shares the load client's).
                replica_ports = [port + REPLICA_OFFSET + i for i in range(FLEET[kind])]
                servers = [
                    start_server(
                        kind,
                        replica_port,
                        args.delay,
                        args.interval,
                        args.server_python,
                        None if profile is None else f"{profile}-r{i}",
                        cores=str(i % 2),
                        redis_port=port + REDIS_OFFSET,
                    )
                    for i, replica_port in enumerate(replica_ports)
                ]
                for replica_port in replica_ports:
                    _wait_port(replica_port)
                helpers.append(
                    start_haproxy(port, replica_ports, tempfile.mkdtemp(prefix="bench-haproxy-"))
                )
            else:
                servers = [
                    start_server(kind, port, args.delay, args.interval, args.server_python, profile)
                ]
            try:
                _wait_port(port)
                time.sleep(0.5)
                rows.append(
                    _runner(args.client)(
                        run_load(
                            kind,
                            port,
                            n,
                            args.delay,
                            args.interval,
                            [server.pid for server in servers],
                            args.quiet,
                            args.ramp,
                            args.request,
                            args.open_batch,
                            args.warm_up,
                            args.client,
                            None if profile is None else args.profile_window,
                            redis,
                        )
                    )
                )
            finally:
                for server in servers:
                    server.send_signal(signal.SIGINT)
                for server in servers:
                    try:
                        server.wait(timeout=30)
                    except subprocess.TimeoutExpired:
                        server.kill()
                for helper in helpers:
                    helper.kill()
                    helper.wait()
            print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    (out / "load.json").write_text(json.dumps(rows, indent=2))
    markdown = table(rows) + "\n\n" + split_table(rows)
    if any(r.get("redis_commands_per_stream_s") is not None for r in rows):
        markdown += "\n\n" + store_table(rows)
    (out / "load.md").write_text(markdown + "\n")
    plots(rows, out)
    print(markdown)
    print(f"\nresults: {out}/load.json, load.md and the plots (*.png)")


if __name__ == "__main__":
    main()
