"""The proxy: ProxyApp in front of the embedded model and of a fake non-streaming upstream."""

from __future__ import annotations

import asyncio
import contextlib
import copy
import gc
import json
import logging
import resource
import sys
import threading
import tracemalloc
from collections.abc import MutableMapping
from typing import Any, cast

import anyio
import anyio.lowlevel
import httpx
import openai
import pytest

from aiostream_synth import BackendCall, prepare_request
from aiostream_synth._proxy.app import ProxyApp, ProxyConfig
from aiostream_synth._proxy.upstream import SHARD_SIZE, UpstreamBackend
from aiostream_synth._wire.json import dumps_exact

from .support import sdk_features
from .support.asgi_client import Lifespan, OneRequest
from .support.fake_upstream import FakeUpstream
from .support.proxy_cases import CHAT_TOOLS
from .support.request_fixtures import fixture
from .support.servers import serve
from .support.sse_parser import comments, parse

pytestmark = pytest.mark.anyio

K = 0.05


def _proxy(**config: Any) -> ProxyApp:
    return ProxyApp(ProxyConfig(keepalive_s=K, **config))


def _http(app: Any, **headers: str) -> httpx.AsyncClient:
    return httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://proxy", headers=headers
    )


def _sdk(http: httpx.AsyncClient) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        api_key="k", base_url="http://proxy/v1", http_client=cast(Any, http), max_retries=0
    )


def _responses(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "input": [{"role": "user", "content": text}], "stream": True, **extra}


def _chat(text: str, **extra: Any) -> dict[str, Any]:
    return {"model": "m", "messages": [{"role": "user", "content": text}], "stream": True, **extra}


NS_TOOLS = [
    {
        "type": "namespace",
        "name": "weather",
        "description": "d",
        "tools": [
            {
                "type": "function",
                "name": "get",
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
                "strict": False,
            }
        ],
    },
    {"type": "custom", "name": "exec"},
]


# -- embedded model, every directive -------------------------------------------------------------


async def test_embedded_echo_in_both_dialects() -> None:
    """The embedded model echoes the last user message, streaming and not."""
    async with _http(_proxy()) as http:
        async with _sdk(http).responses.stream(model="m", input="hello there") as stream:
            final = await stream.get_final_response()
        assert final.output_text == "hello there"
        plain = (await http.post("/v1/responses", json={"model": "m", "input": "hi"})).json()
        assert plain["output"][0]["content"][0]["text"] == "hi"
        chunks = await _sdk(http).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "yo"}], stream=True
        )
        text = "".join([c.choices[0].delta.content or "" async for c in chunks if c.choices])
        assert text == "yo"
        plain = (
            await http.post(
                "/v1/chat/completions",
                json={"model": "m", "messages": [{"role": "user", "content": "x"}]},
            )
        ).json()
        assert plain["choices"][0]["message"]["content"] == "x"


async def test_delay_directive_gets_keepalives(exact_timing: bool) -> None:
    """[delay:N]: keepalive events (Responses) and comments (chat) before the answer."""
    async with _http(_proxy()) as http:
        raw = (await http.post("/v1/responses", json=_responses(f"slow [delay:{K * 3.5}]"))).content
        types = [e.json()["type"] for e in parse(raw)]
        assert types[:2] == ["response.created", "response.in_progress"]
        ticks = types.index("response.output_item.added") - 1
        assert ticks == 3 if exact_timing else ticks >= 1
        assert types[-1] == "response.completed"
        raw = (
            await http.post("/v1/chat/completions", json=_chat(f"slow [delay:{K * 3.5}]"))
        ).content
        keepalives = comments(raw)
        assert len(keepalives) == 3 if exact_timing else len(keepalives) >= 1


async def test_a_delay_that_is_not_seconds_is_a_400() -> None:
    """[delay:N] takes a finite, non-negative number; anything else is the client's error."""
    async with _http(_proxy()) as http:
        for bad in ("soon", "nan", "inf", "-1"):
            response = await http.post("/v1/responses", json=_responses(f"x [delay:{bad}]"))
            assert response.status_code == 400, bad
            assert f"[delay:{bad}]" in response.json()["error"]["message"]


async def test_embedded_directives_are_bounded() -> None:
    """A day of [delay] at most (1e308 overflowed the timer: a 500), an error status from 400 to
    599 (a 1xx would be sent as the final status), and a [tool] example of bounded size (a
    2000 x 2000 schema built on the event loop stalled the whole server for seconds)."""
    huge = {"type": "array", "minItems": 2000, "items": {"type": "array", "minItems": 2000}}
    tool = {
        "type": "function",
        "name": "t",
        "parameters": {"type": "object", "properties": {"grid": huge}, "required": ["grid"]},
    }
    async with _http(_proxy()) as http:
        for text in (
            "x [delay:1e308]",
            "x [delay:86401]",
            "[error:100]",
            "[error:302]",
            "[error:x]",
        ):
            response = await http.post("/v1/responses", json=_responses(text))
            assert response.status_code == 400, text
            assert text.split()[-1] in response.json()["error"]["message"]
        response = await http.post("/v1/responses", json=_responses("[tool:t]", tools=[tool]))
        assert response.status_code == 400
        assert "more than 10000 values" in response.json()["error"]["message"]
        small = {
            **tool,
            "parameters": {"type": "array", "minItems": 3, "items": {"type": "integer"}},
        }
        raw = (await http.post("/v1/responses", json=_responses("[tool:t]", tools=[small]))).content
        call = parse(raw)[-1].json()["response"]["output"][0]
        assert json.loads(call["arguments"]) == [0, 0, 0]


async def test_deep_json_is_a_400_naming_the_limit_and_one_log_line(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """800 nested arrays: a 400 (it was a 500 and 141 KB of RecursionError traceback)."""
    raw = (
        b'{"model":"m","stream":true,"messages":[{"role":"user","content":'
        + b"[" * 800
        + b"]" * 800
        + b"}]}"
    )
    caplog.set_level(logging.INFO, logger="aiostream_synth")
    async with _http(_proxy()) as http:
        response = await http.post(
            "/v1/chat/completions", content=raw, headers={"content-type": "application/json"}
        )
    assert response.status_code == 400
    assert "more than 254 arrays or objects deep" in response.json()["error"]["message"]
    records = [r for r in caplog.records if r.name.startswith("aiostream_synth")]
    assert len(records) == 1, [r.getMessage() for r in records]
    assert records[0].exc_info is None
    nested_254 = b'{"model":"m","input":"x","metadata":' + b"[" * 253 + b"]" * 253 + b"}"
    async with _http(_proxy()) as http:  # at the limit: past the depth check, refused later
        response = await http.post(
            "/v1/responses", content=nested_254, headers={"content-type": "application/json"}
        )
    assert "deep" not in response.text


async def _chat_completion_streamed(client: openai.AsyncOpenAI, **params: Any) -> Any:
    """A streamed chat completion as the SDK's accumulator rebuilds it: through the stream
    helper where the SDK takes tools without ``strict`` there (3.x), else through the same
    accumulator fed by ``create(stream=True)``."""
    if sdk_features.CHAT_STREAM_HELPER_TAKES_LOOSE_TOOLS:
        async with client.chat.completions.stream(model="m", **params) as chat:
            return await chat.get_final_completion()
    from openai.lib.streaming.chat import ChatCompletionStreamState

    state: Any = ChatCompletionStreamState()
    async for chunk in await client.chat.completions.create(model="m", stream=True, **params):
        state.handle_chunk(chunk)
    return state.get_final_completion()


async def test_tool_directive_calls_namespaced_and_custom_tools() -> None:
    """[tool:NAME] calls the request's tool with schema-valid arguments; namespaces come back."""
    async with _http(_proxy()) as http:
        async with _sdk(http).responses.stream(
            model="m", input="weather? [tool:get]", tools=cast(Any, NS_TOOLS)
        ) as stream:
            final = await stream.get_final_response()
        call = cast(Any, final.output[0])
        assert (call.type, call.namespace, call.name) == ("function_call", "weather", "get")
        assert json.loads(call.arguments) == {"city": "example"}
        async with _sdk(http).responses.stream(
            model="m", input="run [tool:exec]", tools=cast(Any, NS_TOOLS)
        ) as stream:
            final = await stream.get_final_response()
        assert cast(Any, final.output[0]).type == "custom_tool_call"
        completion = await _chat_completion_streamed(
            _sdk(http), messages=[{"role": "user", "content": "[tool:lookup]"}], tools=CHAT_TOOLS
        )
        (tool_call,) = completion.choices[0].message.tool_calls or []
        assert json.loads(cast(Any, tool_call).function.arguments) == {"q": 0}


async def test_replayed_tool_output_gets_a_final_answer() -> None:
    """A request ending in a tool result gets text, so agent loops end."""
    body = {
        "model": "m",
        "stream": True,
        "input": [
            {"role": "user", "content": "[tool:get]"},
            {
                "type": "function_call",
                "call_id": "c",
                "name": "get",
                "namespace": "weather",
                "arguments": "{}",
            },
            {"type": "function_call_output", "call_id": "c", "output": "sunny"},
        ],
        "tools": NS_TOOLS,
    }
    async with _http(_proxy()) as http:
        events = [e.json() for e in parse((await http.post("/v1/responses", json=body)).content)]
    assert "sunny" in events[-1]["response"]["output"][0]["content"][0]["text"]


async def test_reasoning_incomplete_and_usage_null_directives() -> None:
    """[reasoning] adds reasoning, [incomplete] ends incomplete, [usage-nulls] never reaches the wire as null."""
    async with _http(_proxy()) as http:
        events = [
            e.json()
            for e in parse(
                (
                    await http.post(
                        "/v1/responses", json=_responses("x [reasoning] [incomplete] [usage-nulls]")
                    )
                ).content
            )
        ]
        assert events[-1]["type"] == "response.incomplete"
        assert events[-1]["response"]["output"][0]["type"] == "reasoning"
        usage = events[-1]["response"]["usage"]
        assert usage["input_tokens_details"] == sdk_features.ZERO_INPUT_DETAILS
        chunks = [
            e.json()
            for e in parse(
                (
                    await http.post(
                        "/v1/chat/completions",
                        json=_chat(
                            "x [reasoning] [incomplete] [usage-nulls]",
                            stream_options={"include_usage": True},
                        ),
                    )
                ).content
            )[:-1]
        ]
        assert any("reasoning_content" in c["choices"][0]["delta"] for c in chunks if c["choices"])
        assert any(c["choices"] and c["choices"][0]["finish_reason"] == "length" for c in chunks)
        assert chunks[-1]["usage"]["prompt_tokens_details"] == {"cached_tokens": 0}


async def test_error_directive_before_and_after_commit() -> None:
    """[error:429] fast → HTTP 429 the SDK raises; slow → a terminal failure event."""
    async with _http(_proxy()) as http:
        with pytest.raises(openai.RateLimitError):
            await _sdk(http).responses.create(model="m", input="[error:429]", stream=True)
        response = await http.post("/v1/chat/completions", json=_chat("[error:503]"))
        assert response.status_code == 503
        events = [
            e.json()
            for e in parse(
                (
                    await http.post(
                        "/v1/responses", json=_responses(f"[error:500] [delay:{K * 2.5}]")
                    )
                ).content
            )
        ]
        assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]


# -- operations: auth, models, health, metrics, logs ---------------------------------------------


async def test_inbound_api_key() -> None:
    """With --api-key, /v1/* needs the bearer token (401 in OpenAI's shape); health stays open."""
    app = _proxy(api_key="s3cret")
    async with _http(app) as http:
        denied = await http.post("/v1/responses", json=_responses("x"))
        assert denied.status_code == 401
        assert denied.json()["error"]["code"] == "invalid_api_key"
        assert (await http.get("/healthz")).status_code == 200
    async with _http(app, authorization="Bearer s3cret") as http:
        assert (await http.post("/v1/responses", json=_responses("x"))).status_code == 200
        assert (await http.get("/v1/models")).json()["data"][0]["id"] == "aiostream-synth-echo"


async def test_metrics_and_one_log_line_per_request(caplog: pytest.LogCaptureFixture) -> None:
    """Counters by outcome at /metrics; one structured line per request with what it lost."""
    caplog.set_level(logging.INFO, "aiostream_synth")
    async with _http(_proxy()) as http:
        first = await http.post("/v1/responses", json=_responses("x", client_metadata={"a": 1}))
        await http.post("/v1/responses", json=_responses("[incomplete]"))
        await http.post("/v1/chat/completions", json=_chat("[error:429]"))
        await http.post("/v1/responses", content=b"{nope")
        metrics = (await http.get("/metrics")).text
    assert (
        'aiostream_synth_requests_total{dialect="responses",stream="true",outcome="completed"} 1'
        in metrics
    )
    assert 'outcome="incomplete"} 1' in metrics
    assert (
        'aiostream_synth_requests_total{dialect="chat",stream="true",outcome="failed"} 1' in metrics
    )
    assert 'outcome="rejected"} 1' in metrics
    assert "aiostream_synth_upstream_latency_seconds_count 3" in metrics
    records = [r for r in caplog.records if r.getMessage().startswith("request ")]
    assert len(records) == len(caplog.records) == 4  # nothing but the request lines
    lines = [r.getMessage() for r in records]
    assert "removed=- quietly_removed=1" in lines[0]  # client bookkeeping
    assert records[0].levelno == logging.INFO
    assert first.headers["x-aiostream-synth-dropped"] == "client_metadata"
    assert "outcome=completed" in lines[0]
    assert "keepalives=0" in lines[0]  # a fast answer's own created/in_progress are not keepalives


async def test_a_request_served_by_another_requests_failed_call_counts_as_failed(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Two identical non-streaming requests share one backend call (``coalesce="all"``), which
    fails: both count as failed. The second made no upstream call of its own (its line shows no
    upstream latency, the histogram counts one call), but it was not refused either: it is not
    "rejected"."""
    caplog.set_level(logging.INFO, "aiostream_synth.proxy")
    app = _proxy(coalesce="all")
    lifespan = Lifespan(app)  # the coalescer lives in the lifespan
    body = _chat("[error:503] [delay:1]", stream=False)
    statuses: list[int] = []

    async def post() -> None:
        statuses.append((await http.post("/v1/chat/completions", json=body)).status_code)

    async with (
        _http(app) as http,
        lifespan.to_app,
        lifespan.from_app,
        anyio.create_task_group() as life,
    ):
        life.start_soon(lifespan.run)
        await lifespan.say("startup")
        async with anyio.create_task_group() as requests:
            requests.start_soon(post)
            await anyio.wait_all_tasks_blocked()  # the first request's call is under way
            requests.start_soon(post)
        assert app.synth.coalescer is not None
        attached = app.synth.coalescer.attached
        metrics = (await http.get("/metrics")).text
        await lifespan.say("shutdown")
    assert (statuses, attached) == ([503, 503], 1)
    assert 'stream="false",outcome="failed"} 2' in metrics
    assert 'outcome="rejected"' not in metrics
    assert "aiostream_synth_upstream_latency_seconds_count 1" in metrics
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("request ")]
    # Both end as the call does, in either order: one line with the latency, one without.
    assert sorted(line.split("upstream_s=")[1].split()[0] == "-" for line in lines) == [False, True]


async def test_the_log_line_names_the_peer_and_x_forwarded_for_as_sent(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "aiostream_synth")
    async with _http(_proxy()) as http:
        await http.post("/v1/responses", json=_responses("x"))
        await http.post(
            "/v1/responses",
            json=_responses("x"),
            headers=[("X-Forwarded-For", "203.0.113.7"), ("x-forwarded-for", "10.0.0.2")],
        )
    first, second = (r.getMessage() for r in caplog.records if r.getMessage().startswith("req"))
    assert " forwarded_for=- " in first
    assert " client=127.0.0.1:123 " in second  # httpx's ASGI transport: the peer, unrewritten
    assert " forwarded_for=203.0.113.7, 10.0.0.2 " in second


async def test_a_request_that_lost_something_is_a_warning_and_says_what(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Decision P10: a tool of unknown type is dropped, named in the request line at WARNING and
    in the x-aiostream-synth-dropped header; a request that lost nothing has an empty header."""
    caplog.set_level(logging.INFO, "aiostream_synth")
    tools = [{"type": "web_search_2031"}, {"type": "function", "name": "f", "parameters": {}}]
    async with _http(_proxy()) as http:
        lossy = await http.post("/v1/responses", json=_responses("x", tools=tools))
        clean = await http.post("/v1/chat/completions", json=_chat("y"))
    assert lossy.headers["x-aiostream-synth-dropped"] == "tools[0]"
    assert clean.headers["x-aiostream-synth-dropped"] == ""
    first, second = caplog.records
    assert first.levelno == logging.WARNING
    assert "removed=tools[0] (unknown tool type 'web_search_2031')" in first.getMessage()
    assert second.levelno == logging.INFO


async def test_keepalives_are_counted_only_while_waiting(
    caplog: pytest.LogCaptureFixture, exact_timing: bool
) -> None:
    """The log line counts keepalive frames sent while the backend worked."""
    caplog.set_level(logging.INFO, "aiostream_synth.proxy")
    async with _http(_proxy()) as http:
        await http.post("/v1/responses", json=_responses(f"x [delay:{K * 2.5}]"))
    (line,) = [r.getMessage() for r in caplog.records if r.getMessage().startswith("request ")]
    counted = int(line.split("keepalives=")[1].split()[0])
    # created + in_progress at the first tick, in_progress at the second
    assert counted == 3 if exact_timing else counted >= 2


async def test_tool_directive_with_explicit_arguments() -> None:
    """[tool:NAME {json}] passes those arguments through."""
    async with _http(_proxy()) as http:
        body = _responses('[tool:get {"city": "Oslo"}]', tools=NS_TOOLS)
        events = [e.json() for e in parse((await http.post("/v1/responses", json=body)).content)]
    call = events[-1]["response"]["output"][0]
    assert json.loads(call["arguments"]) == {"city": "Oslo"}


# -- in front of a non-streaming upstream ---------------------------------------------------------


# The openai SDK waits on a worker thread while calling the upstream; trio's autojumping
# MockClock would count that as idle time and fire every timer, so these run on real clocks.
real_clock = pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])


def _upstream_proxy(fake: FakeUpstream, **config: Any) -> ProxyApp:
    http = httpx.AsyncClient(transport=httpx.ASGITransport(app=fake))
    backend = UpstreamBackend(
        "http://upstream/v1",
        api_key="upstream-key",
        http_client=http,
        forward_authorization=config.pop("forward_authorization", False),
    )
    return ProxyApp(ProxyConfig(**{"keepalive_s": K, **config}), backend=backend)


@real_clock
async def test_upstream_gets_one_non_streaming_call_with_flat_tools() -> None:
    """Streaming clients, non-streaming upstream: sanitized body, names restored on the way back."""
    fake = FakeUpstream()
    async with _http(_upstream_proxy(fake)) as http:
        async with _sdk(http).responses.stream(
            model="m", input="x", tools=cast(Any, NS_TOOLS[:1])
        ) as stream:
            final = await stream.get_final_response()
        call = cast(Any, final.output[0])
        assert (call.namespace, call.name) == ("weather", "get")
        path, body, headers = fake.requests[-1]
        assert path == "/v1/responses"
        assert "stream" not in body
        assert body["tools"][0]["name"] == "weather__get"
        assert headers["authorization"] == "Bearer upstream-key"
        completion = await _sdk(http).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}]
        )
        assert completion.choices[0].message.content == "upstream answer"
        assert (await http.get("/v1/models")).json()["data"][0]["id"] == "upstream-model"


@real_clock
async def test_upstream_errors_before_and_after_commit() -> None:
    """4xx/5xx before the first keepalive keep status and message; after, a terminal event."""
    fake = FakeUpstream()
    async with _http(_upstream_proxy(fake, keepalive_s=3600)) as http:
        response = await http.post(
            "/v1/chat/completions", json={**_chat("x"), "model": "error-400"}
        )
        assert response.status_code == 400
        assert response.json()["error"]["message"] == "upstream says no (400)"
        response = await http.post("/v1/responses", json={**_responses("x"), "model": "error-502"})
        assert response.status_code == 502
    async with _http(_upstream_proxy(fake)) as http:
        raw = (
            await http.post(
                "/v1/responses", json={**_responses("x"), "model": f"slow-{K * 2.5}-error-500"}
            )
        ).content
        events = [e.json() for e in parse(raw)]
        assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
        assert events[-1]["response"]["error"]["message"] == "upstream says no (500)"
        raw = (
            await http.post(
                "/v1/chat/completions", json={**_chat("x"), "model": f"slow-{K * 2.5}-error-429"}
            )
        ).content
        last = parse(raw)[-1].json()
        assert last["error"]["code"] == "rate_limit_exceeded"


@real_clock
async def test_forwarding_the_clients_authorization() -> None:
    """--forward-authorization sends the client's own bearer token upstream."""
    fake = FakeUpstream()
    async with _http(
        _upstream_proxy(fake, forward_authorization=True), authorization="Bearer client-token"
    ) as http:
        await http.post("/v1/responses", json=_responses("x"))
    assert fake.requests[-1][2]["authorization"] == "Bearer client-token"


class _HeldUpstream:
    """A non-streaming upstream (ASGI, served on loopback) that holds every call until released
    and records how many calls it held at once."""

    def __init__(self, until: int) -> None:
        self.until = until
        self.held = 0
        self.peak = 0
        self.reached = threading.Event()  # ``until`` calls are held at once
        self._loop: asyncio.AbstractEventLoop | None = None
        self._release: asyncio.Event | None = None

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        if self._release is None:
            self._loop, self._release = asyncio.get_running_loop(), asyncio.Event()
        self.held += 1
        self.peak = max(self.peak, self.held)
        if self.held >= self.until:
            self.reached.set()
        await self._release.wait()
        self.held -= 1
        body = json.dumps({"id": "resp_held", "object": "response", "output": []}).encode()
        headers = [(b"content-type", b"application/json")]
        await send({"type": "http.response.start", "status": 200, "headers": headers})
        await send({"type": "http.response.body", "body": body})

    def release(self) -> None:
        if self._loop is not None and self._release is not None:
            self._loop.call_soon_threadsafe(self._release.set)


@real_clock
@pytest.mark.parametrize(
    ("cap", "calls"), [(None, 1001), (2, 5), (100, 150)], ids=["default", "cap 2", "cap 100"]
)
async def test_upstream_connections_are_capped_only_when_asked(cap: int | None, calls: int) -> None:
    """Every open stream gets its own upstream call at once by default (the openai SDK's own
    pool stops at 1000 and would queue the rest); ``max_connections`` caps them on purpose,
    exactly, across the client shards (64 calls each, so no pool walks thousands)."""
    with contextlib.suppress(ValueError, OSError):  # two sockets per call in this process
        _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    peak = calls if cap is None else cap
    upstream = _HeldUpstream(until=peak)
    call = BackendCall(dialect="responses", params={"model": "m", "input": "x"}, stream=True)
    results: list[Any] = []

    async def one(backend: UpstreamBackend) -> None:
        results.append(await backend(call))

    with serve(upstream, "uvicorn") as url:
        # No connect timeout: a thousand connections opened at once to a server sharing this
        # process's CPU may take longer than any bound a loaded machine keeps (#36); the test
        # is about how many calls are in flight, and waits for that event, not for a time.
        backend = UpstreamBackend(url + "/v1", max_connections=cap, connect_timeout=None)
        try:
            async with anyio.create_task_group() as group:
                for _ in range(calls):
                    group.start_soon(one, backend)
                # In short waits, so a hang is still ended (cancelled) by the test's timeout.
                while not await anyio.to_thread.run_sync(upstream.reached.wait, 0.5):
                    pass
                upstream.release()
        finally:
            await backend.aclose()
    assert upstream.peak == peak
    assert len(results) == calls
    assert len(backend._shards) == -(-peak // SHARD_SIZE)
    assert {result["id"] for result in results} == {"resp_held"}


@real_clock
async def test_upstream_read_timeout_is_the_deadline_unless_given() -> None:
    """No read timeout of its own by default (the upstream answers only when done, so the
    deadline bounds the call); a given one applies."""
    default = ProxyApp(ProxyConfig(upstream="http://upstream/v1", timeout=3600))
    assert default.upstream is not None
    assert default.upstream.client.timeout.read is None  # type: ignore[union-attr]
    upstream = _HeldUpstream(until=1)
    with serve(upstream, "uvicorn") as url:
        backend = UpstreamBackend(url + "/v1", read_timeout=0.2)
        call = BackendCall(dialect="responses", params={"model": "m", "input": "x"}, stream=True)
        try:
            with pytest.raises(openai.APITimeoutError):
                await backend(call)
        finally:
            upstream.release()
            await backend.aclose()
    assert upstream.peak == 1


@real_clock
async def test_a_codex_replay_reaches_the_upstream_as_prepared() -> None:
    """P10 through the upstream call's own serialization: the real Codex multi-turn replay
    (reasoning with ``content: null``, replays without ``id``/``status``, Codex's tools) plus
    non-ASCII text arrives at the upstream as the prepared params, as JSON."""
    body = fixture("multi-turn-replay")
    body["input"].append({"role": "user", "content": "ünïcødé ✓ 日本語"})
    body["stream"] = True
    expected = prepare_request("responses", copy.deepcopy(body)).params
    fake = FakeUpstream()
    async with _http(_upstream_proxy(fake)) as http:
        assert (await http.post("/v1/responses", json=body)).status_code == 200
    _, received, headers = fake.requests[-1]
    assert received == expected
    assert headers["content-type"] == "application/json"


def test_the_upstream_body_is_compact_utf8_json_in_bytes_of_its_own_size() -> None:
    """What an upstream call keeps for minutes: the SDK's own format (compact, UTF-8 unescaped,
    big integers too) in a bytes object of its own size (orjson's keeps its grown capacity)."""
    value = {"text": "ünïcødé ✓", "seed": 2**70, "n": [1.5, None, True]}
    assert (
        dumps_exact(value) == json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    )
    large = {"items": [{"text": "x" * 50_000}]}
    tracemalloc.start()
    try:
        kept = dumps_exact(large)
        traced, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(kept) > 50_000
    assert traced < len(kept) * 1.1


#: Where request bodies are parsed: what is still allocated there is what streams keep of the
#: requests they parsed (the parsed strings stay shared with the validated params).
_PARSED = tracemalloc.Filter(True, "*/aiostream_synth/_dialects/prepared.py")


def _long_turn(last: str) -> bytes:
    """A Responses request replaying 200 turns of 200 characters (~60 KB), ``last`` the last."""
    turns = [{"role": "user", "content": f"turn {k}: " + "x" * 200} for k in range(200)]
    turns.append({"role": "user", "content": last})
    return json.dumps({"model": "m", "input": turns, "stream": True}).encode()


def _parsed_bytes_kept() -> int:
    """The bytes still allocated by the parsing of request bodies since tracing began."""
    gc.collect()
    return sum(trace.size for trace in tracemalloc.take_snapshot().filter_traces([_PARSED]).traces)


@real_clock
@pytest.mark.parametrize("upstream_api", [None, "chat"], ids=["same dialect", "bridged"])
async def test_a_stream_waiting_on_its_upstream_keeps_its_request_only_as_the_bytes_sent(
    upstream_api: Any,
) -> None:
    """While its upstream works, a stream holds its request as the JSON bytes sent, none of the
    parsed params (about 2.3x the JSON's size as Python objects, for minutes per turn)."""
    body = _long_turn("x")
    client = OneRequest(body)
    upstream = _HeldUpstream(until=1)
    tracemalloc.start()
    try:
        with serve(upstream, "uvicorn") as url:
            config = ProxyConfig(keepalive_s=3600, upstream=url + "/v1", upstream_api=upstream_api)
            app = ProxyApp(config)
            try:
                with anyio.fail_after(20):
                    async with anyio.create_task_group() as group:
                        group.start_soon(app, dict(_RESPONSES_SCOPE), client.receive, client.send)
                        assert await anyio.to_thread.run_sync(upstream.reached.wait, 15)
                        kept = _parsed_bytes_kept()
                        group.cancel_scope.cancel()
            finally:
                upstream.release()
                assert app.upstream is not None
                await app.upstream.aclose()
    finally:
        tracemalloc.stop()
    assert kept < len(body) / 4, (kept, len(body))  # the model's name and such, no turns


async def test_a_turn_waiting_on_the_embedded_model_keeps_none_of_its_request() -> None:
    """The embedded model reads what its answer needs before its simulated wait, which then
    holds nothing of the request (as a real upstream call holds only the bytes it sent)."""
    body = _long_turn("x [delay:3600]")
    client = OneRequest(body)
    app = ProxyApp(ProxyConfig(keepalive_s=3600))
    tracemalloc.start()
    try:
        with anyio.fail_after(10):
            async with anyio.create_task_group() as group:
                group.start_soon(app, dict(_RESPONSES_SCOPE), client.receive, client.send)
                await anyio.wait_all_tasks_blocked()
                kept = _parsed_bytes_kept()
                group.cancel_scope.cancel()
    finally:
        tracemalloc.stop()
    assert kept < len(body) / 4, (kept, len(body))


@pytest.mark.parametrize(
    ("store", "extra"),
    [("off", {}), ("memory", {}), ("memory", {"background": True})],
    ids=["not stored", "stored", "background"],
)
async def test_a_waiting_stream_holds_none_of_its_requests_scope(
    store: str, extra: dict[str, Any]
) -> None:
    """The scope (and its header list) serves the request's start: a stream waiting on its
    backend keeps what it needs of it, so the scope is freed once the server lets go of it
    too (0.8 KiB per waiting stream on ``serve``, #32 §1)."""
    app = _proxy(store=store)
    client = OneRequest(json.dumps(_responses("x [delay:3600]", **extra)).encode())
    streaming = anyio.Event()

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.body":
            streaming.set()

    held = [{**_RESPONSES_SCOPE, "headers": [(b"content-type", b"application/json")]}]
    lifespan = Lifespan(app)
    with anyio.fail_after(10):
        async with lifespan.to_app, lifespan.from_app, anyio.create_task_group() as group:
            group.start_soon(lifespan.run)
            await lifespan.say("startup")
            async with anyio.create_task_group() as request:
                request.start_soon(app, held[0], client.receive, send)
                await streaming.wait()  # its first keepalive: the stream waits on its backend
                await anyio.wait_all_tasks_blocked()
                referrers = [type(r).__name__ for r in gc.get_referrers(held[0]) if r is not held]
                request.cancel_scope.cancel()
            group.cancel_scope.cancel()  # the lifespan, and a background response's recorder
    assert referrers == []


async def test_a_resume_reader_holds_none_of_its_requests_scope() -> None:
    """A reader of a stored response's stream (``GET /v1/responses/{id}?stream=true``) may
    wait on it for minutes, as its creator's stream does: it keeps none of its request's scope
    either (nor does the log line written when it ends)."""
    app = _proxy(store="memory")
    creator = OneRequest(json.dumps(_responses("x [delay:3600]", background=True)).encode())
    response_id: list[str] = []
    reading = anyio.Event()

    async def created(message: MutableMapping[str, Any]) -> None:
        body = message.get("body", b"")
        if message["type"] == "http.response.body" and b'"id":"resp_' in body and not response_id:
            response_id.append(body.split(b'"id":"', 1)[1].split(b'"', 1)[0].decode())

    async def read(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.body" and message.get("body"):
            reading.set()

    lifespan = Lifespan(app)
    with anyio.fail_after(10):
        async with lifespan.to_app, lifespan.from_app, anyio.create_task_group() as group:
            group.start_soon(lifespan.run)
            await lifespan.say("startup")
            async with anyio.create_task_group() as requests:
                requests.start_soon(app, dict(_RESPONSES_SCOPE), creator.receive, created)
                await anyio.wait_all_tasks_blocked()
                assert response_id, "the background response's id was not sent"
                held = [
                    {
                        **_RESPONSES_SCOPE,
                        "method": "GET",
                        "path": f"/v1/responses/{response_id[0]}",
                        "query_string": b"stream=true&starting_after=0",
                    }
                ]
                reader = OneRequest(b"")
                requests.start_soon(app, held[0], reader.receive, read)
                await reading.wait()  # its replay is out: it waits for the live events
                await anyio.wait_all_tasks_blocked()
                referrers = [type(r).__name__ for r in gc.get_referrers(held[0]) if r is not held]
                requests.cancel_scope.cancel()
            group.cancel_scope.cancel()  # the lifespan, and the background response's recorder
    assert referrers == []


def test_upstream_max_connections_is_checked_and_reaches_the_upstream_client() -> None:
    with pytest.raises(ValueError, match="max_connections"):
        UpstreamBackend("http://upstream/v1", max_connections=0)
    app = ProxyApp(ProxyConfig(upstream="http://upstream/v1", upstream_max_connections=64))
    assert app.upstream is not None
    assert app.upstream.max_connections == 64


#: A streaming Responses POST as a server hands it to the app (tests that call the app directly).
_RESPONSES_SCOPE: dict[str, Any] = {
    "type": "http",
    "method": "POST",
    "path": "/v1/responses",
    "headers": [(b"content-type", b"application/json")],
    "query_string": b"",
    "client": ("127.0.0.1", 1),
}


@pytest.mark.parametrize("ending", ["client_gone", "cancelled", "completed"])
async def test_the_outcome_tells_a_client_that_left_from_a_request_cancelled(ending: str) -> None:
    """A response left unfinished is ``client_gone`` when the client disconnected and
    ``cancelled`` when the request's task was cancelled (the server stopping it)."""
    app = _proxy()
    delay = 3600 if ending != "completed" else 0
    client = OneRequest(json.dumps(_responses(f"x [delay:{delay}]")).encode())
    committed = anyio.Event()

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.body":
            committed.set()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(app, dict(_RESPONSES_SCOPE), client.receive, send)
            await committed.wait()
            if ending == "client_gone":
                client.gone.set()
            elif ending == "cancelled":
                group.cancel_scope.cancel()
    await anyio.lowlevel.checkpoint()
    assert f'outcome="{ending}"}} 1' in app.metrics.render()


async def test_a_waiting_stream_keeps_none_of_the_bytes_it_sent() -> None:
    """Minutes of waiting hold no copy of the last write: the writer drops its frames once they
    are sent, and the proxy's record keeps only the final write (the one naming the outcome)."""
    app = _proxy()
    client = OneRequest(json.dumps(_responses("x [delay:3600]")).encode())
    bodies: list[bytes] = []
    written = anyio.Event()

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.body":
            bodies.append(message["body"])
            written.set()

    with anyio.fail_after(10):
        async with anyio.create_task_group() as group:
            group.start_soon(app, dict(_RESPONSES_SCOPE), client.receive, send)
            for _ in range(2):  # the first write (created + in_progress), then a keepalive
                await written.wait()
                written = anyio.Event()
                # The writer went on to its next wait without a checkpoint: it is waiting now.
                # Only this list and getrefcount's own argument refer to what it sent (counted
                # outside the assert: pytest's rewriting would hold one more reference).
                refs = sys.getrefcount(bodies[-1])
                assert refs == 2
            group.cancel_scope.cancel()


# -- issue 37: error shapes --------------------------------------------------------------------


async def test_a_401_on_a_dialect_path_is_in_that_dialects_shape() -> None:
    """Claude Code reads Anthropic's error body and its request-id; OpenAI clients OpenAI's."""
    async with _http(_proxy(api_key="k")) as http:
        messages = await http.post("/v1/messages", json={})
        chat = await http.post("/v1/chat/completions", json={})
        other = await http.get("/v1/models")
    assert messages.status_code == chat.status_code == other.status_code == 401
    assert messages.json()["error"]["type"] == "authentication_error"
    assert messages.headers["request-id"] == messages.json()["request_id"]
    assert messages.headers["x-should-retry"] == "false"
    assert chat.json()["error"]["code"] == "invalid_api_key"
    assert other.json()["error"]["code"] == "invalid_api_key"


@pytest.mark.parametrize(
    ("method", "path", "allow"),
    [
        ("POST", "/healthz", "GET"),
        ("POST", "/metrics", "GET"),
        ("DELETE", "/v1/models", "GET"),
        ("GET", "/v1/responses", "POST"),
        ("GET", "/v1/messages", "POST"),
        ("DELETE", "/v1/chat/completions", "GET, POST"),  # GET: the stored completions
    ],
)
async def test_a_405_says_which_method_is_allowed(method: str, path: str, allow: str) -> None:
    async with _http(_proxy()) as http:
        response = await http.request(method, path)
    assert response.status_code == 405
    assert response.headers["allow"] == allow


async def test_refusals_off_the_dialect_paths_are_logged_and_probes_are_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.INFO, "aiostream_synth.proxy")
    async with _http(_proxy()) as http:
        await http.post("/nowhere", headers={"x-forwarded-for": "203.0.113.7"})
        await http.post("/healthz")
        await http.get("/healthz")
        await http.get("/metrics")
    async with _http(_proxy(api_key="k")) as http:
        await http.get("/v1/models")
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 3, lines
    assert lines[0].startswith("request method=POST path=/nowhere client=")
    assert lines[0].endswith(" forwarded_for=203.0.113.7 status=404")
    assert lines[1].endswith("status=405")
    assert lines[2].startswith("request method=GET path=/v1/models")
    assert lines[2].endswith("status=401")


def test_metrics_count_the_streams_open_now() -> None:
    """A gauge of the streams open right now (a sync test: the server runs in its own thread)."""
    with serve(_proxy(), "uvicorn", lifespan=True) as url, httpx.Client(base_url=url) as http:
        assert "\naiostream_synth_open_streams 0\n" in http.get("/metrics").text
        body = _responses("[delay:30]")
        with http.stream("POST", "/v1/responses", json=body, timeout=60) as answer:
            lines = answer.iter_lines()  # held: a dropped generator would close the response
            next(lines)  # committed: it is open
            busy = http.get("/metrics").text
        assert "\naiostream_synth_open_streams 1\n" in busy, busy


async def test_the_embedded_models_ids_are_unique_per_answer() -> None:
    """Issue 37 #10: two identical turns are two answers with their own ids (a client pairing
    tool outputs by call id must not see one id twice)."""
    body = _responses("[tool:shell]", stream=False, tools=[{"type": "function", "name": "shell"}])
    async with _http(_proxy()) as http:
        first, second = [(await http.post("/v1/responses", json=body)).json() for _ in range(2)]
    assert first["id"] != second["id"]
    assert first["output"][0]["call_id"] != second["output"][0]["call_id"]


async def test_a_rate_limit_names_its_meter_not_an_invalid_request() -> None:
    async with _http(_proxy()) as http:
        chat = await http.post("/v1/chat/completions", json=_chat("[error:429]", stream=False))
        streamed = await http.post("/v1/chat/completions", json=_chat("[error:429]"))
        messages = await http.post(
            "/v1/messages",
            json={
                "model": "m",
                "max_tokens": 9,
                "messages": [{"role": "user", "content": "[error:429]"}],
            },
        )
    for answer in (chat, streamed):
        assert answer.status_code == 429
        assert answer.json()["error"]["type"] == "requests"
        assert answer.json()["error"]["code"] == "rate_limit_exceeded"
    assert messages.json()["error"]["type"] == "rate_limit_error"
    assert messages.headers["x-should-retry"] == "true"


async def test_an_oversize_body_is_request_too_large_in_every_dialect() -> None:
    body = _chat("x" * 200)
    async with _http(_proxy(max_body_bytes=100)) as http:
        messages = await http.post("/v1/messages", json={**body, "max_tokens": 9})
        chat = await http.post("/v1/chat/completions", json=body)
    assert messages.status_code == chat.status_code == 413
    assert messages.json()["error"]["type"] == "request_too_large"
    assert chat.json()["error"]["code"] == "request_too_large"


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v1/chat/completions", _chat("hi")),
        ("/v1/responses", _responses("hi")),
        ("/v1/messages", {**_chat("hi"), "max_tokens": 9}),
    ],
)
async def test_a_streaming_request_without_a_model_is_a_400_in_every_dialect(
    path: str, body: dict[str, Any]
) -> None:
    """One rule (issue 37 #6): the model is required, and named, in all three dialects."""
    body = {key: value for key, value in body.items() if key != "model"}
    async with _http(_proxy()) as http:
        answer = await http.post(path, json=body)
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error.get("param", "model") == "model"
    assert error["message"] == "Invalid value for model: Field required"


async def test_a_responses_request_naming_a_stored_prompt_may_leave_the_model_to_it() -> None:
    body = _responses("hi", prompt={"id": "pmpt_1"})
    del body["model"]
    async with _http(_proxy()) as http, http.stream("POST", "/v1/responses", json=body) as answer:
        assert answer.status_code == 200
        assert b"response.completed" in b"".join([chunk async for chunk in answer.aiter_bytes()])


async def test_a_refused_or_failed_request_logs_why(caplog: pytest.LogCaptureFixture) -> None:
    """Issue 37: a refused request's line does not claim stream=false (preparation never read
    it) and says why; a failure is a WARNING with the message the client got."""
    caplog.set_level(logging.INFO, "aiostream_synth")
    async with _http(_proxy()) as http:
        await http.post("/v1/responses", json=_responses("x", temperature="hot"))
        await http.post("/v1/chat/completions", json=_chat("[error:502]"))
        await http.post("/v1/responses", json=_responses("[delay:0.1] [error:503]"))
    records = [r for r in caplog.records if r.getMessage().startswith("request ")]
    refused, failed, late = (r.getMessage() for r in records)
    assert "stream=- outcome=rejected status=400" in refused
    assert 'reason="Invalid value for temperature: Input should be a valid number"' in refused
    assert records[0].levelno == logging.INFO
    assert "stream=true outcome=failed status=502" in failed
    assert "reason=" in failed
    assert "simulated HTTP 502" in failed
    assert [r.levelno for r in records[1:]] == [logging.WARNING, logging.WARNING]
    assert "outcome=failed status=200" in late
    assert "simulated HTTP 503" in late
