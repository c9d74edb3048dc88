"""``aiostream-synth serve`` as a real process: graceful SIGTERM, several workers, trio."""

from __future__ import annotations

import json
import os
import pathlib
import select
import signal
import socket
import subprocess
import sys
import time
from contextlib import suppress
from typing import Any, Literal

import httpx
import pytest

from .support.cli_server import serve_cli as serve
from .support.cli_server import wait_until_healthy
from .support.servers import free_port
from .support.sse_parser import parse

SERVERS = {
    "lean": (),  # the default
    "uvicorn": ("--server", "uvicorn", "--loop", "asyncio"),
    "hypercorn-trio": ("--loop", "trio"),
    "granian": ("--server", "granian"),
}


@pytest.mark.parametrize("server", list(SERVERS))
def test_sigterm_ends_a_live_stream_with_its_terminal_event(server: str) -> None:
    """SIGTERM mid-wait: the open stream ends with error + response.failed, then the server exits."""
    options = SERVERS[server]
    with serve("--keepalive-s", "0.1", "--drain-timeout", "0.3", *options) as (process, url):
        body = {"model": "m", "input": "wait [delay:60]", "stream": True}
        with (
            httpx.Client(timeout=30) as client,
            client.stream("POST", f"{url}/v1/responses", json=body) as response,
        ):
            lines = response.iter_lines()
            assert next(lines) == "event: response.created"
            process.send_signal(signal.SIGTERM)
            rest = "\n".join(lines)
        assert process.wait() == 0  # the test's timeout ends a hang
    events = [e.json() for e in parse(rest + "\n\n")]
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    assert events[-1]["response"]["error"]["message"] == "server shutting down"


@pytest.mark.parametrize("server", list(SERVERS))
def test_sigterm_does_not_wait_for_an_idle_keep_alive_connection(server: str) -> None:
    """A client's pooled connection, idle after its request, does not hold the server up."""
    with serve(*SERVERS[server]) as (process, url), httpx.Client(timeout=30) as client:
        assert client.get(f"{url}/healthz").status_code == 200  # the connection stays open
        process.send_signal(signal.SIGTERM)
        assert process.wait() == 0  # the test's timeout ends a hang


@pytest.mark.parametrize("server", ["lean", "uvicorn"])
def test_max_connections_answers_503_beyond_the_cap(server: str) -> None:
    """--max-connections 1: a second connection gets a 503 while the first, kept alive, is
    served."""
    with serve("--max-connections", "1", *SERVERS[server]) as (_, url), httpx.Client() as first:
        # Until the server saw the start-up probe's connection close (it counted against the cap).
        while first.get(f"{url}/healthz").status_code == 503:
            pass
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as second:
            second.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\n\r\n")
            answer = _status_line(second)
            assert answer.startswith(b"HTTP/1.1 503 "), answer
        assert first.get(f"{url}/healthz").status_code == 200


def test_http_timeouts_are_serve_options() -> None:
    """--http-head-timeout-s: a head that never ends gets its 408 at the given deadline."""
    with serve("--http-head-timeout-s", "0.2") as (_, url):
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port))) as sock:
            sock.sendall(b"GET /healthz HTTP/1.1\r\nHost: t\r\nX-Par")
            answer = _status_line(sock)
            assert answer.startswith(b"HTTP/1.1 408 "), answer


@pytest.mark.parametrize("server", list(SERVERS))
def test_a_client_that_leaves_cancels_its_backend_call(server: str) -> None:
    """Disconnect detection on every server: the client closes mid-wait; the request is logged
    as client_gone (the backend call cancelled, not left running)."""
    with serve("--keepalive-s", "0.1", *SERVERS[server]) as (_, url):
        body = {"model": "m", "input": "wait [delay:60]", "stream": True}
        with (
            httpx.Client(timeout=30) as client,
            client.stream("POST", f"{url}/v1/responses", json=body) as response,
        ):
            assert next(response.iter_lines()) == "event: response.created"
        metric = 'outcome="client_gone"} 1'
        while metric not in httpx.get(f"{url}/metrics").text:  # the test's timeout ends a hang
            time.sleep(0.05)


def _post(body: dict[str, Any]) -> bytes:
    raw = json.dumps(body).encode()
    head = f"POST /v1/responses HTTP/1.1\r\nHost: t\r\nContent-Type: application/json\r\nContent-Length: {len(raw)}\r\n\r\n"
    return head.encode() + raw


def _recv(sock: socket.socket, so_far: bytes) -> bytes:
    chunk = sock.recv(65536)
    assert chunk, f"the server closed the connection after {so_far!r}"
    return chunk


def _status_line(sock: socket.socket) -> bytes:
    """What the server sends until the end of its answer's first line."""
    answer = b""
    while b"\r\n" not in answer:
        answer += _recv(sock, answer)
    return answer


@pytest.mark.parametrize("server", ["uvicorn", "lean"])
def test_a_request_queued_behind_another_gets_its_first_byte_from_its_arrival(server: str) -> None:
    """uvicorn (our protocol) and lean stamp each request's arrival for the app: a request
    pipelined behind a stream that lasts longer than the keepalive interval has waited that
    long when its turn comes, so its first byte follows the first response at once, not an
    interval later."""
    interval = 2.0
    with serve("--keepalive-s", str(interval), *SERVERS[server]) as (_, url):
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=30) as sock:
            first = _post({"model": "m", "input": "[delay:2.5]", "stream": True})
            queued = _post({"model": "m", "input": "[delay:60]", "stream": True})
            sock.sendall(first + queued)  # HTTP/1.1 pipelining: the second waits its turn
            end = b"response.completed"  # then the chunked body's last chunk
            received = b""
            while end not in received or b"\r\n0\r\n\r\n" not in received.split(end, 1)[1]:
                received += _recv(sock, received)
            first_done = time.monotonic()
            received = received.split(end, 1)[1].split(b"\r\n0\r\n\r\n", 1)[1]
            while b"response.created" not in received:
                received += _recv(sock, received)
            waited = time.monotonic() - first_done
    assert received.startswith(b"HTTP/1.1 200 OK\r\n"), received
    assert waited < interval / 2, waited  # an interval, without the arrival stamp


def test_granian_serves_http_1_1_only() -> None:
    """granian speaks HTTP/1.1 as uvicorn does: an HTTP/2 connection preface (cleartext, prior
    knowledge) is refused, not answered with HTTP/2 frames (serving HTTP/2 too costs every open
    stream about 9 KiB)."""
    settings = bytes.fromhex("000000040000000000")  # an empty SETTINGS frame
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n" + settings
    with serve("--server", "granian") as (_, url):
        host, port = url.removeprefix("http://").split(":")
        with socket.create_connection((host, int(port)), timeout=10) as sock:
            sock.sendall(preface)
            try:
                reply = sock.recv(1024)
            except ConnectionResetError:  # closed with the preface unread: refused as well
                reply = b""
        assert reply == b"" or reply.startswith(b"HTTP/1.1 4"), reply  # not a SETTINGS frame
        assert httpx.get(f"{url}/healthz").http_version == "HTTP/1.1"


def _children(pid: int) -> list[int]:
    found = []
    for status in pathlib.Path("/proc").glob("[0-9]*/status"):
        with suppress(OSError):
            fields = dict(
                line.split(":\t", 1) for line in status.read_text().splitlines() if ":\t" in line
            )
            if fields.get("PPid", "").strip() == str(pid):
                found.append(int(status.parent.name))
    return found


@pytest.mark.parametrize("server", ["uvicorn", "lean"])
def test_two_workers_share_the_port(server: str) -> None:
    """--workers 2: two processes serve one port; requests succeed; SIGTERM stops them all."""
    with serve("--workers", "2", "--keepalive-s", "0.1", *SERVERS[server]) as (process, url):
        assert len(_children(process.pid)) == 2
        with httpx.Client(timeout=30) as client:
            for i in range(6):
                response = client.post(
                    f"{url}/v1/chat/completions",
                    json={
                        "model": "m",
                        "stream": True,
                        "messages": [{"role": "user", "content": f"n{i}"}],
                    },
                )
                assert parse(response.content)[-1].data == "[DONE]"
        process.send_signal(signal.SIGTERM)
        assert process.wait() == 0  # the test's timeout ends a hang
        assert not any(os.path.exists(f"/proc/{child}") for child in _children(process.pid))


@pytest.mark.parametrize("server", ["uvicorn", "lean"])
def test_workers_stop_when_their_supervisor_is_killed(server: str) -> None:
    """--workers 2 whose supervisor dies without forwarding anything (SIGKILL: an OOM kill, a
    crash): each worker is signalled by the kernel, drains and exits, and the port closes.
    Before, they went on serving it with nobody to stop them."""
    with serve("--workers", "2", "--keepalive-s", "0.1", *SERVERS[server]) as (process, url):
        workers = _children(process.pid)
        assert len(workers) == 2
        handles = [os.pidfd_open(pid) for pid in workers]
        try:
            process.kill()
            process.wait()
            for handle in handles:  # readable once its process has ended
                readable, _, _ = select.select([handle], [], [], 60)
                assert readable == [handle], "a worker outlived its supervisor"
        finally:
            for handle in handles:
                os.close(handle)
        with pytest.raises(httpx.ConnectError):
            httpx.get(f"{url}/healthz")


def test_options_come_from_the_environment() -> None:
    """AIOSTREAM_SYNTH_* variables set options (here the inbound API key)."""
    os.environ["AIOSTREAM_SYNTH_API_KEY"] = "from-env"
    try:
        with serve() as (_, url):
            assert (
                httpx.post(f"{url}/v1/responses", json={"model": "m", "input": "x"}).status_code
                == 401
            )
            ok = httpx.post(
                f"{url}/v1/responses",
                json={"model": "m", "input": "x"},
                headers={"authorization": "Bearer from-env"},
            )
            assert ok.status_code == 200
    finally:
        del os.environ["AIOSTREAM_SYNTH_API_KEY"]


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_serve_in_front_of_a_real_non_streaming_upstream(loop: str) -> None:
    """``serve --upstream`` over loopback, on either loop: both dialects stream from a
    non-streaming upstream; upstream errors keep their status before commit and become
    terminal events after it."""
    from .support.fake_upstream import FakeUpstream
    from .support.servers import serve as serve_app

    fake = FakeUpstream()
    with (
        serve_app(fake, "uvicorn") as upstream,
        serve(
            "--upstream",
            f"{upstream}/v1",
            "--keepalive-s",
            "0.2",
            "--upstream-api-key",
            "up-key",
            "--loop",
            loop,
        ) as (_, url),
        httpx.Client(timeout=30) as client,
    ):
        chat = client.post(
            f"{url}/v1/chat/completions",
            json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "x"}]},
        )
        chunks = parse(chat.content)
        assert chunks[-1].data == "[DONE]"
        assert "upstream answer" in chat.text
        slow = client.post(
            f"{url}/v1/responses",
            json={
                "model": "slow-0.7",
                "stream": True,
                "input": "x",
                "tools": [
                    {
                        "type": "namespace",
                        "name": "ns",
                        "description": "",
                        "tools": [
                            {"type": "function", "name": "f", "parameters": {}, "strict": False}
                        ],
                    }
                ],
            },
        )
        events = [e.json() for e in parse(slow.content)]
        assert events[0]["type"] == "response.created"
        assert events[-1]["type"] == "response.completed"
        call = events[-1]["response"]["output"][0]
        assert (call["namespace"], call["name"]) == ("ns", "f")
        assert (
            client.post(
                f"{url}/v1/responses", json={"model": "error-404", "stream": True, "input": "x"}
            ).status_code
            == 404
        )
        late = client.post(
            f"{url}/v1/responses",
            json={"model": "slow-0.7-error-503", "stream": True, "input": "x"},
        )
        assert [e.json()["type"] for e in parse(late.content)][-2:] == [
            "error",
            "response.failed",
        ]
        plain = client.post(
            f"{url}/v1/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
        )
        assert plain.json()["choices"][0]["message"]["content"] == "upstream answer"
    sent = [body for path, body, headers in fake.requests]
    assert all("stream" not in body or body["stream"] is False for body in sent)
    assert all(headers["authorization"] == "Bearer up-key" for _, _, headers in fake.requests)
    assert sent[1]["tools"][0]["name"] == "ns__f"


def test_serve_embedded_directives_and_bad_requests_over_loopback() -> None:
    """Against the real process: [incomplete], [usage-nulls], [reasoning] in both dialects, and
    bad requests answered 400 in OpenAI's shape before anything streams."""
    with serve("--keepalive-s", "0.2") as (_, url), httpx.Client(timeout=30) as client:
        body = {"model": "m", "stream": True, "input": "x [incomplete] [usage-nulls] [reasoning]"}
        events = [e.json() for e in parse(client.post(f"{url}/v1/responses", json=body).content)]
        assert events[-1]["type"] == "response.incomplete"
        assert events[-1]["response"]["usage"]["output_tokens_details"] == {"reasoning_tokens": 0}
        assert events[-1]["response"]["output"][0]["type"] == "reasoning"
        chat = {
            "model": "m",
            "stream": True,
            "stream_options": {"include_usage": True},
            "messages": [{"role": "user", "content": "y [incomplete] [usage-nulls]"}],
        }
        chunks = [
            e.json()
            for e in parse(client.post(f"{url}/v1/chat/completions", json=chat).content)[:-1]
        ]
        assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == "length"
        assert chunks[-1]["usage"]["completion_tokens_details"] == {"reasoning_tokens": 0}
        bad = client.post(
            f"{url}/v1/responses",
            content=b'{"stream": true, "input": 5}',
            headers={"content-type": "application/json"},
        )
        assert bad.status_code == 400
        assert bad.json()["error"]["param"] == "input"
        assert client.post(f"{url}/v1/chat/completions", content=b"[]").status_code == 400


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
def test_the_startup_heap_is_frozen_before_serving(
    loop: Literal["asyncio", "trio"], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Everything alive once the app is built is out of the collector's reach when the server
    starts, so a full collection during a burst of finishing streams does not walk it."""
    import gc

    from aiostream_synth._proxy import serve as _serve
    from aiostream_synth._proxy.app import ProxyConfig

    frozen_at_start: list[int] = []
    thresholds_at_start: list[tuple[int, int, int]] = []

    def fake_server(app: object, config: object, *rest: object) -> None:
        frozen_at_start.append(gc.get_freeze_count())
        thresholds_at_start.append(gc.get_threshold())

    monkeypatch.setattr(_serve, "_uvicorn", fake_server)
    monkeypatch.setattr(_serve, "_lean", fake_server)
    monkeypatch.setattr(_serve, "_hypercorn", fake_server)
    gc.unfreeze()
    thresholds = gc.get_threshold()
    try:
        _serve._serve_one(ProxyConfig(loop=loop))
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
    # and full collections are spaced out ten times more than CPython's default (10), young
    # ones about six times more (700), the middle generation collected every 3 young (10)
    assert thresholds_at_start == [(4000, 3, 100)]
    (count,) = frozen_at_start
    assert count > 1000


@pytest.mark.parametrize(
    ("server", "loop"),
    [("uvicorn", "asyncio"), ("hypercorn", "asyncio"), ("hypercorn", "trio"), ("lean", "asyncio")],
)
def test_every_server_listens_with_a_deep_accept_queue(
    server: Literal["uvicorn", "hypercorn", "lean"],
    loop: Literal["asyncio", "trio"],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A burst of clients connecting at once must not overflow the accept queue: each server
    is configured with the same backlog (hypercorn's own default is 100)."""
    import hypercorn.asyncio
    import hypercorn.trio
    import uvicorn

    from aiostream_synth._proxy import lean_http
    from aiostream_synth._proxy import serve as _serve
    from aiostream_synth._proxy.app import ProxyConfig

    backlogs: list[int] = []

    def uvicorn_run(self: uvicorn.Server, *args: object, **kwargs: object) -> None:
        backlogs.append(self.config.backlog)

    async def hypercorn_serve(app: object, config: Any, **kwargs: object) -> None:
        backlogs.append(config.backlog)

    async def lean_serve(app: object, *, backlog: int, **kwargs: object) -> None:
        backlogs.append(backlog)

    monkeypatch.setattr(uvicorn.Server, "run", uvicorn_run)
    monkeypatch.setattr(hypercorn.asyncio, "serve", hypercorn_serve)
    monkeypatch.setattr(hypercorn.trio, "serve", hypercorn_serve)
    monkeypatch.setattr(lean_http, "serve", lean_serve)
    # not under test here, and a frozen heap would hide referrers from the rest of the session
    monkeypatch.setattr(_serve, "_tune_garbage_collector", lambda: None)
    _serve._serve_one(ProxyConfig(server=server, loop=loop))
    assert backlogs == [4096]


def test_serve_lifts_and_reports_the_open_files_limit(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """Thousands of streams need thousands of sockets: ``run`` lifts the soft limit to the hard
    one and, in front of an upstream (two sockets per stream), says how many streams fit."""
    import logging
    import resource

    from aiostream_synth._proxy import serve as _serve
    from aiostream_synth._proxy.app import ProxyConfig

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    monkeypatch.setattr(_serve, "_serve_one", lambda config: None)
    try:
        with caplog.at_level(logging.INFO, logger="aiostream_synth.proxy"):
            _serve.run(ProxyConfig(upstream="http://upstream/v1"))
        assert resource.getrlimit(resource.RLIMIT_NOFILE)[0] == hard
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    if hard != resource.RLIM_INFINITY:
        assert f"open-files limit {hard}: room for about {hard // 2} streams" in caplog.text


def test_serve_writes_one_line_per_request_with_its_client_and_path() -> None:
    """At the default INFO level a request is one log line, the proxy's own, naming the client,
    its ``X-Forwarded-For`` and the path (the server's access line would be a second one)."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "aiostream_synth", "serve", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(process, url)
        body = {"model": "m", "input": "hi", "stream": True}
        with httpx.Client() as client:
            answer = client.post(
                f"{url}/v1/responses", json=body, headers={"X-Forwarded-For": "203.0.113.7"}
            )
        assert answer.status_code == 200
    finally:
        process.send_signal(signal.SIGTERM)
        output, _ = process.communicate(timeout=30)
    lines = output.decode().splitlines()
    about_it = [line for line in lines if "/v1/responses" in line]
    assert len(about_it) == 1, lines
    (line,) = about_it
    assert " request dialect=responses path=/v1/responses client=127.0.0.1:" in line
    assert " forwarded_for=203.0.113.7 " in line  # logged as sent; the client stays the peer
    assert "outcome=completed status=200" in line
    assert not [line for line in lines if "/healthz" in line]  # no access lines at all


def test_trio_logs_in_our_format_says_which_server_and_its_shutdown() -> None:
    """``--loop trio`` (issue 37): no ``--- Logging error ---`` (hypercorn's own handler
    printed a process id serve does not collect), each line once, a word that hypercorn serves
    it, and the proxy's shutdown line."""
    port = free_port()
    process = subprocess.Popen(
        [sys.executable, "-m", "aiostream_synth", "serve", "--port", str(port), "--loop", "trio"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        wait_until_healthy(process, f"http://127.0.0.1:{port}")
        process.send_signal(signal.SIGTERM)
        assert process.wait() == 0
    finally:
        if process.poll() is None:
            process.kill()
        assert process.stderr is not None
        err = process.stderr.read().decode()
        process.stderr.close()
    assert "Logging error" not in err
    assert "served by hypercorn's trio worker" in err
    assert "shutdown: drained" in err
    running = [line for line in err.splitlines() if "Running on" in line]
    assert len(running) == 1
    assert " INFO hypercorn.error Running on" in running[0]


def _read_until(stream: Any, words: str) -> str:
    """Lines of ``stream`` (a process's stderr) up to one holding ``words``."""
    seen = []
    for raw in iter(stream.readline, b""):
        seen.append(raw.decode())
        if words in seen[-1]:
            return "".join(seen)
    raise AssertionError(f"{words!r} never logged: {''.join(seen)}")


@pytest.mark.parametrize("server", list(SERVERS))
def test_a_second_signal_ends_every_open_stream_with_its_answer_and_exits_1(server: str) -> None:
    """Issue 37 #7: the first SIGTERM is logged when it arrives (not when the drain ends); the
    second ends the open streams at once, a committed one with its terminal event and one not
    yet committed with a 503, never an empty reply, and the process exits 1, not 0."""
    port = free_port()
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "aiostream_synth",
            "serve",
            "--port",
            str(port),
            "--keepalive-s",
            "3",
            "--drain-timeout",
            "600",
            *SERVERS[server],
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    url = f"http://127.0.0.1:{port}"
    assert process.stderr is not None
    try:
        started = _read_until(process.stderr, "settings: ")
        assert "upstream the embedded model" in started
        assert "keepalive every 3 s" in started
        assert "body limit 33554432 bytes" in started
        wait_until_healthy(process, url)
        body = {"model": "m", "input": "wait [delay:600]", "stream": True}
        with (
            httpx.Client(timeout=60) as client,
            client.stream("POST", f"{url}/v1/responses", json=body) as committed,
        ):
            lines = committed.iter_lines()
            assert next(lines) == "event: response.created"
            # A second stream, not committed yet (its first keepalive is seconds away): the
            # gauge says when the server holds it.
            late = socket.create_connection(("127.0.0.1", port))
            late.sendall(_post(body))
            while "aiostream_synth_open_streams 2" not in client.get(f"{url}/metrics").text:
                time.sleep(0.02)
            process.send_signal(signal.SIGTERM)
            first = _read_until(process.stderr, "shutdown: no new requests")
            assert "2 open stream(s) get up to 600 s to finish" in first
            process.send_signal(signal.SIGTERM)
            rest = "\n".join(lines)
            answer = b""
            while chunk := late.recv(65536):  # to the end: the server closes it as it exits
                answer += chunk
            late.close()
        assert process.wait() == 1
        err = process.stderr.read().decode()
    finally:
        if process.poll() is None:
            process.kill()
        process.stderr.close()
    events = [e.json() for e in parse(rest + "\n\n")]
    assert events[-1]["type"] == "response.failed"
    assert events[-1]["response"]["error"]["message"] == "server stopped"
    # Not committed when the signal came: a 503 (on a slow machine its first keepalive may
    # have won the race: then its terminal event); never an empty reply.
    assert answer.startswith(b"HTTP/1.1 503 ") or (
        answer.startswith(b"HTTP/1.1 200 ") and b"server stopped" in answer
    ), answer
    assert "shutdown: second signal, 2 open stream(s) ended at once" in err
