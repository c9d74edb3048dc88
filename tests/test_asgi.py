"""Both adapters (native ASGI and sse-starlette) through httpx's ASGI transport, on asyncio and trio."""

from __future__ import annotations

import json
import math
from collections.abc import MutableMapping
from typing import Any, cast

import anyio
import httpx
import openai
import pytest
import sniffio
from starlette.applications import Starlette

from aiostream_synth import BackendCall, ShutdownSignal, StreamSettings, SynthesizingApp
from aiostream_synth._serving.pipeline import ON_DISCONNECT, RECEIVED_AT
from aiostream_synth._wire.failures import INTERNAL_ERROR_MESSAGE
from aiostream_synth.starlette import synthesizing_routes

from .support.asgi_client import Lifespan, OneRequest, post_scope
from .support.sse_parser import comments, parse

pytestmark = pytest.mark.anyio

K = 0.05  # keepalive interval (instant on trio's MockClock)
LIFECYCLE = ("response.created", "response.in_progress")


def chat_result(model: str = "m") -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": "hello",
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "f", "arguments": "{}"},
                        }
                    ],
                },
                "finish_reason": "tool_calls",
            }
        ],
        "usage": {"prompt_tokens": 1, "completion_tokens": 2, "total_tokens": 3},
    }


def responses_result(model: str = "m") -> dict[str, Any]:
    return {
        "id": "resp_backend",
        "object": "response",
        "created_at": 1,
        "model": model,
        "status": "completed",
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "hello", "annotations": []}],
            },
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "c1",
                "name": "ns__f",
                "arguments": "{}",
                "status": "completed",
            },
        ],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": {"input_tokens": 1, "output_tokens": 2, "total_tokens": 3},
    }


class FakeBackend:
    def __init__(self, *, delay: float = 0.0, error: Exception | None = None) -> None:
        self.delay = delay
        self.error = error
        self.calls: list[BackendCall] = []
        self.cancelled = False
        self.started = anyio.Event()

    async def __call__(self, call: BackendCall) -> Any:
        self.calls.append(call)
        self.started.set()
        try:
            await anyio.sleep(self.delay)
        except anyio.get_cancelled_exc_class():
            self.cancelled = True
            raise
        if self.error is not None:
            raise self.error
        return chat_result() if call.dialect == "chat" else responses_result()


class RateLimited(Exception):
    status_code = 429


@pytest.fixture(params=["native", "sse-starlette"])
def make_app(request: pytest.FixtureRequest) -> Any:
    def build(backend: FakeBackend, shutdown: ShutdownSignal | None = None, **settings: Any) -> Any:
        options = StreamSettings(keepalive_interval=K, **settings)
        signal = shutdown or ShutdownSignal()
        if request.param == "native":
            return SynthesizingApp(backend, options, shutdown=signal)
        return Starlette(routes=synthesizing_routes(backend, options, shutdown=signal))

    return build


def _client(app: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test")


def _sdk(http: httpx.AsyncClient) -> openai.AsyncOpenAI:
    return openai.AsyncOpenAI(
        api_key="k", base_url="http://test/v1", http_client=cast(Any, http), max_retries=0
    )


RESPONSES_BODY = {
    "model": "m",
    "input": "hi",
    "stream": True,
    "client_metadata": {"x": 1},
    "tools": [
        {
            "type": "namespace",
            "name": "ns",
            "description": "",
            "tools": [{"type": "function", "name": "f", "parameters": {}, "strict": False}],
        }
    ],
}
CHAT_BODY = {
    "model": "m",
    "messages": [{"role": "user", "content": "hi"}],
    "stream": True,
    "stream_options": {"include_usage": True},
    "bookkeeping": 1,
}


async def test_responses_stream_through_the_sdk(make_app: Any) -> None:
    """A fast backend: the SDK's responses.stream() gets the result, names restored, backend got flat params."""
    backend = FakeBackend()
    async with (
        _client(make_app(backend)) as http,
        _sdk(http).responses.stream(
            model="m", input="hi", tools=cast(Any, RESPONSES_BODY["tools"])
        ) as stream,
    ):
        final = await stream.get_final_response()
    assert final.output_text == "hello"
    call = final.output[1]
    assert (getattr(call, "namespace", None), getattr(call, "name", None)) == ("ns", "f")
    (sent,) = backend.calls
    assert sent.stream is True
    assert "stream" not in sent.params
    assert sent.params["tools"][0]["name"] == "ns__f"


async def test_chat_stream_through_the_sdk(make_app: Any) -> None:
    """The SDK's chat stream helper reassembles content, tool calls and usage; bookkeeping dropped."""
    backend = FakeBackend()
    async with (
        _client(make_app(backend)) as http,
        _sdk(http).chat.completions.stream(
            model="m",
            messages=[{"role": "user", "content": "hi"}],
            stream_options={"include_usage": True},
        ) as stream,
    ):
        final = await stream.get_final_completion()
    assert final.choices[0].message.content == "hello"
    assert final.choices[0].message.tool_calls[0].function.name == "f"  # type: ignore[index]
    assert final.usage is not None
    assert "stream_options" not in backend.calls[0].params


async def test_keepalive_then_result(make_app: Any, exact_timing: bool) -> None:
    """A slow backend: keepalive frames first (events for Responses, comments for chat), then the stream."""
    async with _client(make_app(FakeBackend(delay=K * 3.5))) as http:
        raw = (await http.post("/v1/responses", json=RESPONSES_BODY)).content
        events = [e.json() for e in parse(raw)]
        assert [e["type"] for e in events[:2]] == ["response.created", "response.in_progress"]
        ticks = next(i for i, e in enumerate(events) if e["type"] not in LIFECYCLE) - 1
        assert ticks == 3 if exact_timing else ticks >= 1
        assert events[-1]["type"] == "response.completed"
        assert [e["sequence_number"] for e in events] == list(range(len(events)))
        assert events[0]["response"]["model"] == "m"
        response = await http.post("/v1/chat/completions", json=CHAT_BODY)
        assert response.headers["content-type"].startswith("text/event-stream")
        assert response.headers["cache-control"] == "no-cache"
        assert response.headers["x-accel-buffering"] == "no"
        keepalives = comments(response.content)
        assert set(keepalives) == {"keep-alive"}
        assert len(keepalives) == 3 if exact_timing else len(keepalives) >= 1
        assert parse(response.content)[-1].data == "[DONE]"


async def test_failure_before_commit_is_a_real_http_error(make_app: Any) -> None:
    """A fast failure: its HTTP status and OpenAI's error shape; the SDK raises its own error."""
    backend = FakeBackend(error=RateLimited("slow down, try again in 20s"))
    async with _client(make_app(backend)) as http:
        response = await http.post("/v1/responses", json=RESPONSES_BODY)
        assert response.status_code == 429
        assert response.json()["error"]["code"] == "rate_limit_exceeded"
        with pytest.raises(openai.RateLimitError, match="try again in 20s"):
            await _sdk(http).chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}], stream=True
            )


async def test_failure_after_commit_is_a_terminal_event(
    make_app: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """A late failure: error + response.failed for Responses; an error frame the SDK raises on
    for chat. A bug in the backend (an exception that reports nothing) is logged with its
    traceback and its text never reaches the client (issue 37)."""
    backend = FakeBackend(delay=K * 2.5, error=RuntimeError("backend exploded: secret=abc"))
    async with _client(make_app(backend)) as http:
        response = await http.post("/v1/responses", json=RESPONSES_BODY)
        assert response.status_code == 200
        events = [e.json() for e in parse(response.content)]
        assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
        assert events[-1]["response"]["error"]["message"] == INTERNAL_ERROR_MESSAGE
        assert b"secret" not in response.content
        stream = await _sdk(http).chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], stream=True
        )
        async with stream:
            with pytest.raises(openai.APIError, match="internal error"):
                async for _ in stream:
                    pass
    logged = [r for r in caplog.records if r.name == "aiostream_synth.backend"]
    assert logged
    assert all(r.levelname == "ERROR" and r.exc_info for r in logged)
    assert "backend exploded: secret=abc" in caplog.text


@pytest.mark.parametrize(
    ("path", "content", "status", "param"),
    [
        ("/v1/responses", b"{not json", 400, None),
        ("/v1/responses", b"[1, 2]", 400, None),
        (
            "/v1/responses",
            json.dumps({"input": "x", "stream": True, "temperature": "hot"}).encode(),
            400,
            "temperature",
        ),
        (
            "/v1/chat/completions",
            json.dumps(
                {"messages": [{"role": "user", "content": 5}], "model": "m", "stream": True}
            ).encode(),
            400,
            "messages[0].content",
        ),
        (
            "/v1/chat/completions",
            json.dumps({"messages": [], "model": "m", "stream": "true"}).encode(),
            400,
            "stream",
        ),
        ("/v1/responses", json.dumps({"input": "x" * 5000, "stream": True}).encode(), 413, None),
        # Background mode without a store: refused, never served as an ordinary request (P10).
        (
            "/v1/responses",
            json.dumps({"model": "m", "input": "x", "background": True}).encode(),
            400,
            "background",
        ),
    ],
)
async def test_bad_requests_get_openai_shaped_4xx(
    make_app: Any, path: str, content: bytes, status: int, param: str | None
) -> None:
    """Malformed JSON, non-objects, validation errors (naming the parameter) and oversize bodies."""
    backend = FakeBackend()
    async with _client(make_app(backend, max_body_bytes=4096)) as http:
        response = await http.post(
            path, content=content, headers={"content-type": "application/json"}
        )
    assert response.status_code == status
    error = response.json()["error"]
    assert error["type"] == "invalid_request_error"
    assert error["param"] == param
    assert error["message"]
    if param == "background":  # says what is missing and how to get it, on both writers
        assert error["message"].startswith("background mode needs a response store: ")
        assert "serve" in error["message"]
    assert not backend.calls


async def test_non_streaming_requests_return_the_backend_json(make_app: Any) -> None:
    """stream absent/false: one backend call, its JSON as is; a failure keeps its status."""
    backend = FakeBackend()
    async with _client(make_app(backend)) as http:
        response = await http.post(
            "/v1/responses", json={"model": "m", "input": "hi", "extra_field": 1}
        )
        assert response.json() == responses_result()
        assert backend.calls[0].params == {"model": "m", "input": "hi", "extra_field": 1}
        assert backend.calls[0].stream is False
    async with _client(make_app(FakeBackend(error=RateLimited("later")))) as http:
        response = await http.post("/v1/chat/completions", json={"model": "m", "messages": []})
        assert response.status_code == 429


async def test_shutdown_ends_open_streams_with_a_terminal_event(make_app: Any) -> None:
    """Our own shutdown signal reaches a waiting stream: it ends with error + response.failed."""
    shutdown = ShutdownSignal()
    backend = FakeBackend(delay=3600)
    results: list[httpx.Response] = []
    async with _client(make_app(backend, shutdown)) as http:
        async with anyio.create_task_group() as tg:

            async def request(http: httpx.AsyncClient = http) -> None:
                results.append(await http.post("/v1/responses", json=RESPONSES_BODY))

            tg.start_soon(request)
            await backend.started.wait()
            await anyio.sleep(K * 5)  # time passes: the stream commits with keepalives
            assert await shutdown.shutdown(drain_timeout=0) == 1
        refused = await http.post("/v1/responses", json=RESPONSES_BODY)
    events = [e.json() for e in parse(results[0].content)]
    assert [e["type"] for e in events[-2:]] == ["error", "response.failed"]
    assert events[-1]["response"]["error"]["message"] == "server shutting down"
    assert backend.cancelled
    assert refused.status_code == 503


async def test_sse_starlettes_own_exit_state_never_cuts_a_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """sse-starlette cancels its responses when its process-global exit flag is set (uvicorn's
    exit): ours ignore it through its public grace period, and a stream runs to its end (our
    ShutdownSignal, not that flag, ends streams on shutdown)."""
    from sse_starlette.sse import AppStatus

    monkeypatch.setattr(AppStatus, "should_exit", True)
    backend = FakeBackend(delay=K * 4)
    app = Starlette(routes=synthesizing_routes(backend, StreamSettings(keepalive_interval=K)))
    async with _client(app) as http:
        response = await http.post("/v1/responses", json=RESPONSES_BODY)
    events = [e.json() for e in parse(response.content)]
    assert events[-1]["type"] == "response.completed"
    assert any(e["type"] == "response.in_progress" for e in events[1:-1])  # it did wait


async def test_unknown_paths_and_methods(make_app: Any) -> None:
    """404 for an unknown path, 405 for a GET on a dialect route."""
    async with _client(make_app(FakeBackend())) as http:
        assert (await http.post("/v1/nope", json={})).status_code == 404
        assert (await http.get("/v1/responses")).status_code == 405


async def test_fastapi_endpoint() -> None:
    """The sse-starlette endpoint works as a FastAPI route."""
    from fastapi import FastAPI

    from aiostream_synth.starlette import synthesizing_endpoint

    api = FastAPI()
    backend = FakeBackend(delay=K * 1.5)
    api.add_api_route(
        "/v1/responses",
        synthesizing_endpoint("responses", backend, StreamSettings(keepalive_interval=K)),
        methods=["POST"],
    )
    async with _client(api) as http:
        response = await http.post("/v1/responses", json=RESPONSES_BODY)
    events = [e.json()["type"] for e in parse(response.content)]
    assert events[0] == "response.created"
    assert events[-1] == "response.completed"


async def test_lifespan_task_group_hosts_the_backend_calls() -> None:
    """With a lifespan, every stream's backend task runs in the lifespan's background tasks (an
    anyio task group on trio; tasks started straight on the loop on asyncio, never children of
    the request's task); the lifespan shutdown ends a still-waiting stream cleanly (here before
    commit: a 503) and waits for its backend to end, never a hang."""
    parents: list[int | None] = []
    order: list[str] = []

    class Recording(FakeBackend):
        async def __call__(self, call: BackendCall) -> Any:
            parents.append(anyio.get_current_task().parent_id)
            try:
                return await super().__call__(call)
            finally:
                if self.cancelled:  # a slow cleanup the lifespan must wait for
                    with anyio.CancelScope(shield=True):
                        await anyio.sleep(K)
                    order.append("backend ended")

    fast, slow = Recording(), Recording(delay=3600)
    app = SynthesizingApp(
        lambda call: (fast if call.params.get("model") == "fast" else slow)(call),
        StreamSettings(keepalive_interval=3600),  # nothing commits: the abort is a 503
        drain_timeout=0,
    )
    lifespan = Lifespan(app)
    results: list[httpx.Response] = []
    async with (
        _client(app) as http,
        lifespan.to_app,
        lifespan.from_app,
        anyio.create_task_group() as tg,
    ):
        tg.start_soon(lifespan.run)
        await lifespan.say("startup")
        done = await http.post("/v1/responses", json={**RESPONSES_BODY, "model": "fast"})

        async def waiting() -> None:
            results.append(await http.post("/v1/responses", json=RESPONSES_BODY))

        tg.start_soon(waiting)
        await slow.started.wait()
        await lifespan.say("shutdown")
        order.append("shutdown complete")
    assert order == ["backend ended", "shutdown complete"]  # no task outlives the lifespan
    on_asyncio = sniffio.current_async_library() == "asyncio"
    assert parents == [None, None] if on_asyncio else [lifespan.task_id, lifespan.task_id]
    assert parse(done.content)[-1].json()["type"] == "response.completed"
    assert results[0].status_code == 503
    assert results[0].json()["error"]["message"] == "server shutting down"
    assert slow.cancelled


async def test_a_disconnect_while_waiting_cancels_the_backend_and_ends_the_response() -> None:
    """The native path watches ``receive`` beside the writing: the client leaving mid-wait ends
    the response and cancels the backend call, with no task left behind."""
    backend = FakeBackend(delay=3600)
    app = SynthesizingApp(backend, StreamSettings(keepalive_interval=K))
    first_frame, gone = anyio.Event(), anyio.Event()
    body = json.dumps(RESPONSES_BODY).encode()
    received: list[str] = []
    sent: list[MutableMapping[str, Any]] = []

    async def receive() -> MutableMapping[str, Any]:
        if not received:
            received.append("request")
            return {"type": "http.request", "body": body, "more_body": False}
        await gone.wait()
        received.append("disconnect")
        return {"type": "http.disconnect"}

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)
        if message["type"] == "http.response.body":
            first_frame.set()

    with anyio.fail_after(10):  # a watcher that misses the disconnect fails here, not hangs
        async with anyio.create_task_group() as tg:
            tg.start_soon(app, post_scope("/v1/responses"), receive, send)
            await first_frame.wait()
            gone.set()
    assert backend.cancelled
    assert received == ["request", "disconnect"]
    assert sent[0]["status"] == 200
    assert all(message.get("more_body") for message in sent[1:])  # never a clean end


async def test_a_response_read_by_a_watcher_ends_in_no_reference_cycle() -> None:
    """A server without the disconnect hook: the response's watcher reads ``receive`` and is
    ended with the response. Nothing of it is left in a reference cycle (found under load:
    one per response, freed only by the collector, which then ran again and again at the end
    of a wave)."""
    import gc

    app = SynthesizingApp(FakeBackend(), StreamSettings(keepalive_interval=K))
    client = OneRequest(json.dumps(RESPONSES_BODY).encode())
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        with anyio.fail_after(10):
            await app(post_scope("/v1/responses"), client.receive, client.send)
        assert client.bodies[-1]["more_body"] is False
        assert client.waits == ["cancelled"]  # the watcher was there, and was ended
        gc.collect()
        left = sorted({type(o).__name__ for o in gc.garbage if _of_a_task(o)})
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()
    assert left == []


def _of_a_task(value: Any) -> bool:
    """A task, the exception that ended one, or a frame or traceback of one."""
    import asyncio
    import types

    return isinstance(value, asyncio.Task | BaseException | types.FrameType | types.TracebackType)


async def test_a_failing_receive_propagates_as_itself() -> None:
    """An error from the server's ``receive`` ends the response and reaches the server as the
    exception itself (not an exception group), on asyncio and trio alike."""
    backend = FakeBackend(delay=3600)
    app = SynthesizingApp(backend, StreamSettings(keepalive_interval=K))
    body = json.dumps(RESPONSES_BODY).encode()
    calls = 0

    async def receive() -> MutableMapping[str, Any]:
        nonlocal calls
        calls += 1
        if calls == 1:
            return {"type": "http.request", "body": body, "more_body": False}
        raise RuntimeError("the server lost the connection state")

    async def send(message: MutableMapping[str, Any]) -> None:
        pass

    with pytest.raises(RuntimeError, match="connection state"):
        await app(post_scope("/v1/responses"), receive, send)
    assert backend.cancelled


async def test_an_app_that_routes_itself_hands_the_post_to_handle() -> None:
    """``SynthesizingApp.handle``: a wrapper serves a Responses stream on a path of its own."""
    backend = FakeBackend()
    synth = SynthesizingApp(backend, StreamSettings(keepalive_interval=K))

    async def wrapper(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http" and scope["path"] == "/agents/turn":
            await synth.handle("responses", scope, receive, send)
        else:
            await synth(scope, receive, send)

    async with _client(wrapper) as http:
        answer = await http.post("/agents/turn", json={**RESPONSES_BODY, "stream": True})
        missing = await http.post("/agents/other", json={**RESPONSES_BODY, "stream": True})
    assert answer.status_code == 200
    assert parse(answer.content)[-1].json()["type"] == "response.completed"
    assert missing.status_code == 404
    assert len(backend.calls) == 1


async def test_on_stream_sees_each_engine_stream_before_its_first_frame() -> None:
    """``StreamSettings.on_stream``: called once per streaming request with the engine stream,
    before anything is sent (a non-streaming request has none)."""
    seen: list[tuple[bool, int]] = []

    def opened(stream: Any) -> None:
        seen.append((stream.committed, stream.keepalive_frames_sent))

    app = SynthesizingApp(FakeBackend(), StreamSettings(keepalive_interval=K, on_stream=opened))
    async with _client(app) as http:
        streamed = await http.post("/v1/responses", json={**RESPONSES_BODY, "stream": True})
        plain = await http.post("/v1/responses", json={**RESPONSES_BODY, "stream": False})
    assert streamed.status_code == plain.status_code == 200
    assert seen == [(False, 0)]


async def test_the_terminal_frames_end_the_response_in_one_write() -> None:
    """Keepalive writes keep the response open; the write carrying the terminal event ends it
    (no extra empty write per stream)."""
    gate = anyio.Event()

    async def backend(call: Any) -> Any:
        await gate.wait()
        return await FakeBackend()(call)

    app = SynthesizingApp(backend, StreamSettings(keepalive_interval=K))
    client = OneRequest(json.dumps(RESPONSES_BODY).encode())

    async def send(message: MutableMapping[str, Any]) -> None:
        await client.send(message)
        if message["type"] == "http.response.body":
            gate.set()  # answer once a keepalive went out

    with anyio.fail_after(10):
        await app(post_scope("/v1/responses"), client.receive, send)
    bodies = client.bodies
    assert len(bodies) >= 2
    assert all(m["more_body"] for m in bodies[:-1])
    assert bodies[-1]["more_body"] is False
    assert parse(bodies[-1]["body"])[-1].json()["type"] == "response.completed"


@pytest.mark.parametrize("wakes", [True, False], ids=["server-wakes-receive", "receive-waits"])
async def test_the_disconnect_watcher_never_outlives_the_response(wakes: bool) -> None:
    """After the last write the watcher's pending ``receive()`` ends before the app returns:
    by itself when the server answers it with ``http.disconnect`` once the response is complete
    (uvicorn does), else cancelled."""
    app = SynthesizingApp(FakeBackend(), StreamSettings(keepalive_interval=K))
    client = OneRequest(json.dumps(RESPONSES_BODY).encode())

    async def send(message: MutableMapping[str, Any]) -> None:
        if wakes and message["type"] == "http.response.body" and not message["more_body"]:
            client.gone.set()  # as uvicorn: the complete response ends a pending receive()

    with anyio.fail_after(10):
        await app(post_scope("/v1/responses"), client.receive, send)
    assert client.waits == (["woken"] if wakes else ["cancelled"])


async def test_a_cancellation_right_after_the_last_write_still_ends_the_watcher() -> None:
    """The request cancelled from outside just as its response completes: the watcher is still
    ended before the cancellation propagates."""
    app = SynthesizingApp(FakeBackend(), StreamSettings(keepalive_interval=K))
    client = OneRequest(json.dumps(RESPONSES_BODY).encode())
    outer = anyio.CancelScope()

    async def send(message: MutableMapping[str, Any]) -> None:
        if message["type"] == "http.response.body" and not message["more_body"]:
            outer.cancel()  # delivered at the request's next wait, after this write

    with anyio.fail_after(10):
        with outer:
            await app(post_scope("/v1/responses"), client.receive, send)
    assert outer.cancelled_caught
    assert client.waits == ["cancelled"]


@pytest.mark.parametrize("adapter", ["native", "sse-starlette"])
async def test_the_first_frame_is_due_an_interval_after_the_request_arrived(adapter: str) -> None:
    """A server's arrival stamp (``RECEIVED_AT``, on the loop's clock) counts: a request that
    waited an interval in the server's queue before the app saw it gets its first keepalive at
    once, not an interval (here an hour) later. The app takes the stamp out of the scope."""
    hour = 3600.0
    options = StreamSettings(keepalive_interval=hour)
    backend = FakeBackend(delay=hour)
    app: Any = (
        SynthesizingApp(backend, options)
        if adapter == "native"
        else Starlette(routes=synthesizing_routes(backend, options))
    )
    client = OneRequest(json.dumps(RESPONSES_BODY).encode())

    async def send(message: MutableMapping[str, Any]) -> None:
        await client.send(message)
        if message["type"] == "http.response.body":
            client.gone.set()  # the first keepalive came: leave

    scope = post_scope("/v1/responses")
    scope[RECEIVED_AT] = anyio.current_time() - hour
    with anyio.fail_after(60):
        await app(scope, client.receive, send)
    assert client.sent[0]["status"] == 200
    events = [event.event for body in client.bodies for event in parse(body["body"])]
    assert events[0] == "response.created"  # (sse-starlette may send the tick's two apart)
    assert set(events) <= set(LIFECYCLE)
    assert backend.cancelled
    assert RECEIVED_AT not in scope


@pytest.mark.parametrize("stamp", [math.nan, math.inf, "12.5", None], ids=repr)
async def test_an_arrival_stamp_that_is_not_a_time_is_ignored(stamp: Any) -> None:
    """A stamp that is not a finite float counts as the app's first look at the request: the
    stream runs as without one."""
    app = SynthesizingApp(FakeBackend(delay=2 * K), StreamSettings(keepalive_interval=K))
    client = OneRequest(json.dumps(RESPONSES_BODY).encode())
    scope = post_scope("/v1/responses")
    scope[RECEIVED_AT] = stamp
    with anyio.fail_after(10):
        await app(scope, client.receive, client.send)
    assert client.sent[0]["status"] == 200
    events = [event.event for body in client.bodies for event in parse(body["body"])]
    assert events[0] == "response.created"
    assert events[-1] == "response.completed"
    assert RECEIVED_AT not in scope


async def test_a_server_disconnect_callback_replaces_the_watcher_task() -> None:
    """A server offering ``ON_DISCONNECT``: on asyncio the app hands it a callback instead of
    keeping a task in ``receive()``; the callback ends the response and cancels the backend,
    and is withdrawn at the end. On trio the watcher task stays and the server's
    ``http.disconnect`` does the same."""
    backend = FakeBackend(delay=3600)
    app = SynthesizingApp(backend, StreamSettings(keepalive_interval=K))
    client = OneRequest(json.dumps(RESPONSES_BODY).encode())
    handed: list[Any] = []

    async def send(message: MutableMapping[str, Any]) -> None:
        await client.send(message)
        if message["type"] == "http.response.body":  # the client leaves: the server's two signals
            for callback in [c for c in handed if c is not None][:1]:
                callback()
            client.gone.set()

    scope = post_scope("/v1/responses")
    scope[ON_DISCONNECT] = handed.append
    with anyio.fail_after(10):
        await app(scope, client.receive, send)
    assert backend.cancelled
    assert ON_DISCONNECT not in scope
    if sniffio.current_async_library() == "asyncio":
        assert len(handed) == 2
        assert callable(handed[0])
        assert handed[1] is None
        assert client.waits == []  # nothing waited in receive() after the body
    else:
        assert handed == []
        assert client.waits == ["woken"]


def test_streams_sending_the_same_headers_share_one_list() -> None:
    """A waiting stream keeps its response headers for minutes: identical ones are one list
    (never extended in place), and the table of them is bounded."""
    from aiostream_synth._serving import answers

    one = answers.shared_header_pairs({"x-aiostream-synth-dropped": ""})
    two = answers.shared_header_pairs({"x-aiostream-synth-dropped": ""})
    other = answers.shared_header_pairs({"x-aiostream-synth-dropped": "input[0].id"})
    assert one is two
    assert one == [(b"x-aiostream-synth-dropped", b"")]
    assert other == [(b"x-aiostream-synth-dropped", b"input[0].id")]
    for n in range(answers._SHARED_HEADERS_KEPT * 2):
        answers.shared_header_pairs({"x-n": str(n)})
    assert len(answers._SHARED_HEADERS) <= answers._SHARED_HEADERS_KEPT
