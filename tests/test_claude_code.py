"""The Claude Code CLI and the anthropic SDKs against the proxy, offline on loopback.

Claude Code runs offline (fresh ``HOME``, an API key, no login, no
network); both come pinned from ``tests/clients``. Without node they are skipped locally with the
reason shown; under CI (``CI`` set) a missing client is an error, never a silent skip.
"""

from __future__ import annotations

import json
import pathlib
import shutil
import subprocess
import threading
from collections.abc import Iterator
from typing import Any

import anthropic
import pytest

from aiostream_synth._proxy.app import ProxyApp, ProxyConfig
from aiostream_synth._proxy.embedded import EmbeddedBackend
from aiostream_synth._serving.pipeline import BackendCall

from .support.claude_code import run_claude
from .support.node_clients import CLIENTS, require
from .support.servers import serve
from .support.sse_parser import parse

NODE = shutil.which("node")
BASH = [
    {
        "name": "Bash",
        "description": "Run a shell command.",
        "input_schema": {
            "type": "object",
            "properties": {"command": {"type": "string"}},
            "required": ["command"],
        },
    }
]


class Counting:
    """The embedded model, counting (and keeping) every backend call."""

    def __init__(self) -> None:
        self.inner = EmbeddedBackend()
        self.calls: list[BackendCall] = []

    async def __call__(self, call: BackendCall) -> Any:
        self.calls.append(call)
        return await self.inner(call)


class Requests:
    """ASGI middleware keeping every request's path, query and JSON body."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.seen: list[tuple[str, str, dict[str, Any]]] = []
        self.lock = threading.Lock()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []

        async def recording() -> Any:
            message = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    with self.lock:
                        body = json.loads(b"".join(chunks) or b"{}")
                        self.seen.append((scope["path"], scope["query_string"].decode(), body))
            return message

        await self.app(scope, recording, send)


@pytest.fixture
def proxy(request: pytest.FixtureRequest) -> Iterator[tuple[str, Counting, Requests]]:
    """The proxy (embedded model) on ``serve``'s own HTTP server (lean, which runs the
    lifespan); options from the test's ``proxy_options`` marker."""
    marker = request.node.get_closest_marker("proxy_options")
    options: dict[str, Any] = {"keepalive_s": 0.3, **(marker.kwargs if marker else {})}
    backend = Counting()
    app = Requests(ProxyApp(ProxyConfig(**options), backend=backend))
    with serve(app, "lean") as url:
        yield url, backend, app


def _message_posts(requests: Requests) -> list[tuple[str, dict[str, Any]]]:
    return [(query, body) for path, query, body in requests.seen if path == "/v1/messages"]


def test_claude_code_text_turn(tmp_path: pathlib.Path, proxy: Any) -> None:
    """one POST /v1/messages?beta=true, streaming, answered; nothing else requested."""
    url, backend, requests = proxy
    code, result, stderr = run_claude(tmp_path, url, "say hello to the proxy")
    assert code == 0, stderr
    assert (result["is_error"], result["subtype"]) == (False, "success")
    assert result["result"] == "say hello to the proxy"
    assert [(path, query) for path, query, _ in requests.seen] == [("/v1/messages", "beta=true")]
    assert requests.seen[0][2]["stream"] is True
    assert len(backend.calls) == 1
    assert all(m["role"] != "system" for m in backend.calls[0].params["messages"])  # A13


def test_claude_code_runs_bash_and_its_result_reaches_the_backend(
    tmp_path: pathlib.Path, proxy: Any
) -> None:
    """the tool input comes from the one input_json_delta, Bash runs, and the next backend
    call carries the tool_result for that tool_use id."""
    url, backend, _ = proxy
    prompt = 'run it [tool:Bash {"command": "echo ACCEPTANCE_BASH_OK"}]'
    code, result, stderr = run_claude(tmp_path, url, prompt)
    assert code == 0, stderr
    assert "ACCEPTANCE_BASH_OK" in result["result"]
    first, second = backend.calls
    tool_id = next(
        block["id"]
        for message in reversed(second.params["messages"])
        if message["role"] == "assistant"
        for block in message["content"]
        if block["type"] == "tool_use"
    )
    (tool_result,) = [
        block
        for block in second.params["messages"][-1]["content"]
        if isinstance(block, dict) and block.get("type") == "tool_result"
    ]
    assert tool_result["tool_use_id"] == tool_id
    assert "ACCEPTANCE_BASH_OK" in json.dumps(tool_result["content"])
    assert first.stream


@pytest.mark.proxy_options(keepalive_s=1.0)
def test_a_slow_turn_is_one_request_kept_alive_by_pings(tmp_path: pathlib.Path, proxy: Any) -> None:
    """API_TIMEOUT_MS=10000 covers the wait for headers; a backend answering after 12 s
    still completes in one request, one backend call (headers and message_start at the first
    tick, then a ping a second)."""
    url, backend, requests = proxy
    code, result, stderr = run_claude(tmp_path, url, "slow one [delay:12]", API_TIMEOUT_MS="10000")
    assert code == 0, stderr
    assert result["result"] == "slow one"
    assert len(_message_posts(requests)) == 1
    assert len(backend.calls) == 1


# The linger default (0.9 s) covers Claude Code's first retry, about 0.6 s after it gives up;
# a roomier one here keeps a loaded CI machine from turning the test into a race.
@pytest.mark.proxy_options(keepalive_s=3600.0, coalesce_linger=3.0)
def test_without_keepalive_the_timeout_retry_attaches_to_the_running_call(
    tmp_path: pathlib.Path, proxy: Any
) -> None:
    """The same turn with no keepalive: Claude Code times out waiting for headers and retries;
    the retry attaches to the backend call still running for it (its client left), so the
    backend is called once and the turn still completes."""
    url, backend, requests = proxy
    code, result, stderr = run_claude(tmp_path, url, "slow one [delay:12]", API_TIMEOUT_MS="10000")
    assert code == 0, stderr
    assert result["result"] == "slow one"
    assert len(_message_posts(requests)) == 2
    assert len(backend.calls) == 1


def test_a_failure_after_commit_is_retried_from_the_same_backend_call(
    tmp_path: pathlib.Path, proxy: Any
) -> None:
    """A failure after commit, and coalescing: the stream ends with event: error, Claude Code re-sends the body
    without streaming, that retry gets the same (deterministic) failure from the same call as an
    HTTP error with x-should-retry: false, and the turn fails."""
    url, backend, requests = proxy
    code, result, _ = run_claude(tmp_path, url, "[delay:1] [error:400]")
    assert code != 0
    assert result["is_error"] is True
    assert "simulated HTTP 400" in result["result"]
    streams = [body.get("stream", False) for _, body in _message_posts(requests)]
    assert streams[0] is True
    assert streams[1:]
    assert not any(streams[1:])
    # The fallback repeating the failed body gets the failure without a backend call (Claude
    # Code's later retries of a 400 change the body: those are new requests).
    assert len(backend.calls) < len(streams)


def test_a_transient_failure_after_commit_is_served_to_the_fallback(
    tmp_path: pathlib.Path, proxy: Any
) -> None:
    """A 500 after commit: the stream ends with event: error and Claude Code re-sends the turn
    without streaming; that re-send gets the same failure from the same call (the backend is
    called once; a streaming retry, Codex's, would reach the backend again)."""
    url, backend, requests = proxy
    code, result, _ = run_claude(tmp_path, url, "[delay:1] [error:500] transient")
    assert code != 0
    assert "simulated HTTP 500" in result["result"]
    posts = _message_posts(requests)
    assert [body.get("stream", False) for _, body in posts] == [True, False]
    assert len(backend.calls) == 1


@pytest.mark.proxy_options(
    keepalive_s=0.2, dialect_options={"anthropic": {"event_keepalive_s": 0.5}}
)
def test_event_keepalives_leave_every_result_unchanged(tmp_path: pathlib.Path, proxy: Any) -> None:
    """At test scale: intermediate message_delta events during a 2 s wait; Claude Code's
    result and the SDKs' final messages are what they are without them."""
    url, _, _ = proxy
    code, result, stderr = run_claude(tmp_path, url, "kept alive [delay:2]")
    assert code == 0, stderr
    assert result["result"] == "kept alive"
    with anthropic.Anthropic(base_url=url, api_key="k", max_retries=0) as client:
        raw = client.messages.with_raw_response.create(
            model="claude-test",
            max_tokens=64,
            messages=[{"role": "user", "content": "kept alive [delay:2]"}],
            stream=True,
        )
        frames = b"".join(raw.http_response.iter_bytes())
        with client.messages.stream(
            model="claude-test",
            max_tokens=64,
            messages=[{"role": "user", "content": "kept alive [delay:2] [reasoning]"}],
        ) as stream:
            final = stream.get_final_message()
    deltas = [e.json() for e in parse(frames) if e.event == "message_delta"]
    assert len(deltas) >= 3
    assert [d["delta"]["stop_reason"] for d in deltas][-1] == "end_turn"
    assert all(d["delta"]["stop_reason"] is None for d in deltas[:-1])
    assert [b.type for b in final.content] == ["thinking", "text"]
    assert final.content[0].signature  # type: ignore[union-attr]
    assert final.stop_reason == "end_turn"


def _node_anthropic(url: str, prompt: str, tools: Any = None) -> dict[str, Any]:
    require(NODE is not None, "node is not installed")
    require(
        (CLIENTS / "node_modules" / "@anthropic-ai" / "sdk").exists(),
        "run `npm ci` in tests/clients",
    )
    args = [
        str(NODE),
        str(CLIENTS / "anthropic_client.mjs"),
        url,
        prompt,
        json.dumps(tools) if tools else "",
    ]
    done = subprocess.run(
        args, capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


@pytest.mark.parametrize(
    ("prompt", "kinds", "stop"),
    [
        ("hello node", ["text"], "end_turn"),
        ("think [reasoning] [delay:0.7]", ["thinking", "text"], "end_turn"),
        ('go [tool:Bash {"command": "ls"}]', ["tool_use"], "tool_use"),
        ("cut [incomplete]", ["text"], "max_tokens"),
    ],
)
def test_node_sdk_final_message(proxy: Any, prompt: str, kinds: list[str], stop: str) -> None:
    """@anthropic-ai/sdk's finalMessage() (which needs message_stop) equals the backend's
    message: blocks, signature, tool input, stop reason, usage."""
    url, backend, _ = proxy
    result = _node_anthropic(url, prompt, BASH)
    assert result["ok"], result
    final = result["final"]
    assert [b["type"] for b in final["content"]] == kinds
    assert final["stop_reason"] == stop
    expected = backend.calls[-1]
    assert expected.dialect == "anthropic"
    if "tool_use" in kinds:
        assert final["content"][0]["input"] == {"command": "ls"}
    if "thinking" in kinds:
        assert final["content"][0]["signature"].startswith("sig_")
    assert final["usage"]["input_tokens"] >= 1
    assert final["usage"]["cache_read_input_tokens"] == 0


def test_claude_code_through_an_anthropic_upstream(tmp_path: pathlib.Path) -> None:
    """``serve --upstream`` in front of a non-streaming Messages server: Claude Code's turn
    reaches it as one non-streaming call with Anthropic's headers (its x-api-key replaced by the
    upstream key, its betas kept), and an unknown block type the upstream returns last is
    dropped so the turn still succeeds."""
    from .support.cli_server import serve_cli
    from .support.fake_upstream import FakeUpstream

    fake = FakeUpstream()
    with (
        serve(fake, "uvicorn") as upstream,
        serve_cli(
            "--upstream", f"{upstream}/v1", "--upstream-api-key", "up-key", "--keepalive-s", "0.2"
        ) as (_, url),
    ):
        code, result, stderr = run_claude(
            tmp_path, url, "hello upstream", ANTHROPIC_MODEL="text-future"
        )
    assert code == 0, stderr
    assert result["result"] == "upstream answer"
    ((path, body, headers),) = fake.requests
    assert path == "/v1/messages"
    assert "stream" not in body
    assert headers["x-api-key"] == "up-key"
    assert headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in headers
    assert "claude-code-20250219" in headers["anthropic-beta"]
    assert all(m["role"] != "system" for m in body["messages"])
