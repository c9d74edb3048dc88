"""Real clients against ``aiostream-synth serve`` on loopback: openai Python (sync and async),
openai-node's stream helpers, and the Codex CLI. All offline, against the embedded model.

Node and Codex come from ``tests/clients`` (``npm ci`` there; the nox session does it). Without
node they are skipped locally with the reason shown; under CI (``CI`` set) a missing client is
an error, never a silent skip.
"""

from __future__ import annotations

import json
import pathlib
import threading
from collections.abc import Iterator
from typing import Any

import openai
import pytest

from aiostream_synth import prepare_request
from aiostream_synth._dialects.responses.namespaces import namespace_map
from aiostream_synth._proxy.app import ProxyApp, ProxyConfig
from aiostream_synth._proxy.embedded import EmbeddedBackend
from aiostream_synth._serving.pipeline import BackendCall
from aiostream_synth._wire.usage import wire_responses_usage

from .support.cli_server import serve_cli
from .support.node_clients import codex_messages, run_codex, run_node
from .support.proxy_cases import CHAT_TOOLS
from .support.servers import serve

NS_TOOLS: list[dict[str, Any]] = [
    {
        "type": "namespace",
        "name": "weather",
        "description": "weather tools",
        "tools": [
            {
                "type": "function",
                "name": "get",
                "strict": False,
                "parameters": {
                    "type": "object",
                    "properties": {"city": {"type": "string"}},
                    "required": ["city"],
                },
            }
        ],
    },
    {
        "type": "function",
        "name": "lookup",
        "strict": False,
        "parameters": {
            "type": "object",
            "properties": {"q": {"type": "integer"}},
            "required": ["q"],
        },
    },
]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Real clocks here: these tests wait on real sockets, which trio's MockClock would skip past."""
    return str(request.param)


@pytest.fixture(scope="module")
def proxy() -> Iterator[str]:
    """``aiostream-synth serve`` (embedded model) as a real process on loopback."""
    with serve_cli("--keepalive-s", "0.2") as (_, url):
        yield url + "/v1"


def _expected_output(dialect: str, body: dict[str, Any]) -> Any:
    """What the embedded backend produces for ``body``, names restored (its ids aside, which
    are random per answer: compare through :func:`_strip`)."""
    prepared = prepare_request(dialect, {**body, "stream": True})
    result = _run_to_completion(EmbeddedBackend()(BackendCall(dialect, prepared.params, True)))
    if dialect == "chat":
        return result["choices"][0]["message"]
    output = []
    for item in result["output"]:
        if item.get("name") in namespace_map(prepared):
            namespace, name = namespace_map(prepared)[item["name"]]
            item = {**item, "namespace": namespace, "name": name}
        output.append(item)
    return output, wire_responses_usage(result["usage"])


def _run_to_completion(coro: Any) -> Any:
    """Drive a coroutine that never suspends (the embedded model without [delay]) to its result."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    coro.close()
    raise AssertionError("the embedded backend suspended")


def _strip(value: Any) -> Any:
    """For comparing: the SDK's parsed extras and nulls gone, and an id kept only as its kind
    (``msg_``, ``fc_``, ``call_``): the embedded model's ids are random per answer, and the
    expected output is a second answer to the same request."""
    if isinstance(value, dict):
        return {
            k: f"{v.partition('_')[0]}_*"
            if k in ("id", "call_id") and isinstance(v, str)
            else _strip(v)
            for k, v in value.items()
            if k not in ("parsed", "parsed_arguments") and v is not None
        }
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


# -- openai Python, sync and async ------------------------------------------------------------------

RESPONSES_CASES = {
    "text": ("hello there", None),
    "reasoning": ("think first [reasoning]", None),
    "tool call": ("[tool:lookup]", NS_TOOLS),
    "namespaced tool call": ("[tool:get]", NS_TOOLS),
}


@pytest.mark.parametrize("case", list(RESPONSES_CASES))
def test_python_sync_responses_stream_helper(proxy: str, case: str) -> None:
    """responses.stream().get_final_response() equals what the backend produced."""
    prompt, tools = RESPONSES_CASES[case]
    client = openai.OpenAI(base_url=proxy, api_key="unused", max_retries=0)
    extra: dict[str, Any] = {"tools": tools} if tools else {}
    with client.responses.stream(model="m", input=prompt, **extra) as stream:
        final = stream.get_final_response()
    output, usage = _expected_output("responses", {"model": "m", "input": prompt, **extra})
    got = final.model_dump(mode="json", exclude_unset=True)
    assert _strip(got["output"]) == _strip(output)
    assert got["usage"] == usage
    events = [
        e.type for e in client.responses.create(model="m", input=prompt, stream=True, **extra)
    ]
    assert events[0] == "response.created"
    assert events[-1] == "response.completed"


@pytest.mark.anyio
@pytest.mark.parametrize("case", list(RESPONSES_CASES))
async def test_python_async_responses_stream_helper(proxy: str, case: str) -> None:
    """The async client's stream helper agrees with the backend too."""
    prompt, tools = RESPONSES_CASES[case]
    client = openai.AsyncOpenAI(base_url=proxy, api_key="unused", max_retries=0)
    extra: dict[str, Any] = {"tools": tools} if tools else {}
    async with client.responses.stream(model="m", input=prompt, **extra) as stream:
        final = await stream.get_final_response()
    output, _ = _expected_output("responses", {"model": "m", "input": prompt, **extra})
    assert _strip(final.model_dump(mode="json", exclude_unset=True)["output"]) == _strip(output)
    await client.close()


@pytest.mark.parametrize("include_usage", [False, True])
def test_python_sync_chat(proxy: str, include_usage: bool) -> None:
    """create(stream=True) reassembles; the stream helper parses tool calls; usage only when asked."""
    client = openai.OpenAI(base_url=proxy, api_key="unused", max_retries=0)
    options: dict[str, Any] = {"stream_options": {"include_usage": True}} if include_usage else {}
    chunks = list(
        client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "hi you"}], stream=True, **options
        )
    )
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == "hi you"
    assert (chunks[-1].usage is not None) is include_usage
    body = {
        "model": "m",
        "messages": [{"role": "user", "content": "[tool:lookup] [reasoning]"}],
        "tools": CHAT_TOOLS,
    }
    with client.chat.completions.stream(**body, **options) as stream:  # type: ignore[arg-type]
        final = stream.get_final_completion()
    expected = _expected_output("chat", body)
    (call,) = final.choices[0].message.tool_calls or []
    assert call.function.name == expected["tool_calls"][0]["function"]["name"]
    assert json.loads(call.function.arguments) == {"q": 0}
    assert (final.usage is not None) is include_usage


@pytest.mark.anyio
async def test_python_async_chat_and_failures(proxy: str) -> None:
    """The async client: chat reassembled; an upstream failure surfaces as the SDK's own error."""
    client = openai.AsyncOpenAI(base_url=proxy, api_key="unused", max_retries=0)
    async with client.chat.completions.stream(
        model="m", messages=[{"role": "user", "content": "async hi"}]
    ) as stream:
        final = await stream.get_final_completion()
    assert final.choices[0].message.content == "async hi"
    with pytest.raises(openai.RateLimitError, match="simulated HTTP 429"):
        await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "[error:429]"}], stream=True
        )
    with pytest.raises(openai.InternalServerError):
        await client.responses.create(model="m", input="[error:500]", stream=True)
    await client.close()


def test_python_late_failure_raises_from_the_stream(proxy: str) -> None:
    """A failure after keepalives: the stream helper raises instead of returning a partial answer."""
    client = openai.OpenAI(base_url=proxy, api_key="unused", max_retries=0)
    late = [{"role": "user", "content": "[delay:0.5] [error:500]"}]
    with (
        pytest.raises(openai.APIError, match="simulated HTTP 500"),
        client.chat.completions.stream(model="m", messages=late) as stream,  # type: ignore[arg-type]
    ):
        stream.get_final_completion()
    with client.responses.stream(model="m", input="[delay:0.5] [error:500]") as responses_stream:
        events = [e.type for e in responses_stream]
    assert events[-2:] == ["error", "response.failed"]


# -- openai-node ------------------------------------------------------------------------------------


@pytest.mark.parametrize("case", list(RESPONSES_CASES))
def test_node_responses_final_response(proxy: str, case: str) -> None:
    """openai-node's responses.stream().finalResponse() (needs the full lifecycle) equals the backend's output."""
    prompt, tools = RESPONSES_CASES[case]
    result = run_node(proxy, "responses", prompt, tools)
    assert result["ok"], result
    output, usage = _expected_output(
        "responses", {"model": "m", "input": prompt, **({"tools": tools} if tools else {})}
    )
    assert _strip(result["final"]["output"]) == _strip(output)
    assert result["final"]["usage"] == usage


@pytest.mark.parametrize("usage", [False, True])
def test_node_chat_final_completion(proxy: str, usage: bool) -> None:
    """openai-node's chat.completions.stream().finalChatCompletion() with text and with a tool call."""
    result = run_node(proxy, "chat", "node says hi [reasoning]", usage=usage)
    assert result["ok"], result
    assert result["final"]["choices"][0]["message"]["content"] == "node says hi"
    assert ("usage" in result["final"] and result["final"]["usage"] is not None) is usage
    result = run_node(proxy, "chat", "[tool:lookup]", CHAT_TOOLS, usage=usage)
    (call,) = result["final"]["choices"][0]["message"]["tool_calls"]
    assert call["function"]["name"] == "lookup"
    assert json.loads(call["function"]["arguments"]) == {"q": 0}


def test_node_upstream_failure(proxy: str) -> None:
    """A failing backend rejects the node stream with the upstream's status and message."""
    result = run_node(proxy, "responses", "[error:429]")
    assert not result["ok"]
    assert result["status"] == 429
    assert "simulated HTTP 429" in result["error"]


# -- the Codex CLI -----------------------------------------------------------------------------------


class Recorder:
    """ASGI middleware keeping every JSON request body the proxy received."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.bodies: list[dict[str, Any]] = []
        self.lock = threading.Lock()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        chunks: list[bytes] = []

        async def recording_receive() -> Any:
            message = await receive()
            if message["type"] == "http.request":
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    with self.lock:
                        self.bodies.append(json.loads(b"".join(chunks) or b"{}"))
            return message

        await self.app(scope, recording_receive, send)


@pytest.fixture
def codex_proxy() -> Iterator[tuple[str, Recorder, list[float]]]:
    settings: list[float] = [0.3]
    recorder = Recorder(ProxyApp(ProxyConfig(keepalive_s=settings[0])))
    with serve(recorder, "lean") as url:  # `serve`'s own HTTP server, as the CLI runs it
        yield url, recorder, settings


def test_codex_plain_text_turn(tmp_path: pathlib.Path, codex_proxy: Any) -> None:
    """(1) A plain text turn completes with the echoed answer."""
    url, _, _ = codex_proxy
    code, events, stderr = run_codex(tmp_path, url, "say hello to the proxy")
    assert code == 0, stderr
    assert codex_messages(events) == ["say hello to the proxy"]
    assert events[-1]["type"] == "turn.completed"


def test_codex_turn_with_reasoning(tmp_path: pathlib.Path, codex_proxy: Any) -> None:
    """(2) A reasoning item reaches Codex."""
    url, _, _ = codex_proxy
    code, events, stderr = run_codex(tmp_path, url, "think about it [reasoning]")
    assert code == 0, stderr
    kinds = [e["item"]["type"] for e in events if e.get("type") == "item.completed"]
    assert "reasoning" in kinds
    assert events[-1]["type"] == "turn.completed"


def test_codex_executes_a_shell_tool_call_and_replays_it(
    tmp_path: pathlib.Path, codex_proxy: Any
) -> None:
    """(3) Codex runs the shell call it was given and replays its output."""
    url, recorder, _ = codex_proxy
    code, events, stderr = run_codex(
        tmp_path, url, 'run it [tool:exec_command {"cmd": "echo ACCEPTANCE_SHELL_OK"}]'
    )
    assert code == 0, stderr
    assert any("ACCEPTANCE_SHELL_OK" in text for text in codex_messages(events))
    replay = recorder.bodies[-1]["input"]
    assert [i["type"] for i in replay[-2:]] == ["function_call", "function_call_output"]
    assert "ACCEPTANCE_SHELL_OK" in replay[-1]["output"]


def test_codex_routes_a_namespaced_tool_call(tmp_path: pathlib.Path, codex_proxy: Any) -> None:
    """(4) A call to the multi_agent_v1 namespace tool is routed by Codex and replayed with its namespace."""
    url, recorder, _ = codex_proxy
    code, events, stderr = run_codex(
        tmp_path, url, 'close it [tool:close_agent {"target": "local"}]'
    )
    assert code == 0, stderr
    assert any(
        t.get("type") == "namespace" and t.get("name") == "multi_agent_v1"
        for t in recorder.bodies[0]["tools"]
    )
    call = recorder.bodies[-1]["input"][-2]
    assert (call["type"], call["namespace"], call["name"]) == (
        "function_call",
        "multi_agent_v1",
        "close_agent",
    )
    assert codex_messages(events)[-1].startswith("The tool returned: invalid agent id")


@pytest.mark.parametrize("keepalive", ["events", "comment"])
def test_codex_slow_turn_survives_only_thanks_to_keepalive_events(
    tmp_path: pathlib.Path, keepalive: str
) -> None:
    """(5) A backend slower than stream_idle_timeout_ms: passes with keepalive events; with the
    events disabled (SSE comments only, what a generic SSE proxy sends) Codex's idle timer fires."""
    config = ProxyConfig(keepalive_s=0.3, dialect_options={"responses": {"keepalive": keepalive}})
    with serve(ProxyApp(config), "uvicorn") as url:
        code, events, stderr = run_codex(tmp_path, url, "slow one [delay:3]", idle_ms=1500)
    if keepalive == "events":
        assert code == 0, stderr
        assert codex_messages(events) == ["slow one"]
    else:
        assert code != 0
        assert "idle timeout" in (json.dumps(events) + stderr).lower()


@pytest.mark.parametrize("prompt", ["[error:400]", "[delay:0.8] [error:500]"])
def test_codex_upstream_failure_fails_the_turn_with_its_message(
    tmp_path: pathlib.Path, codex_proxy: Any, prompt: str
) -> None:
    """(6) An upstream failure fails the turn with the upstream's message, before commit (an
    HTTP error) and after it (error + response.failed)."""
    url, _, _ = codex_proxy
    code, events, stderr = run_codex(tmp_path, url, prompt)
    assert code != 0
    failed = [e for e in events if e.get("type") == "turn.failed"]
    assert failed, (events, stderr)
    assert "embedded backend: simulated HTTP" in json.dumps(failed)
