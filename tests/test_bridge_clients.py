"""Real clients through the bridge: ``aiostream-synth serve --upstream URL --upstream-api chat``
in front of a chat-only upstream (404 on ``/responses``) that records every request.

openai-python and openai-node stream Responses (``create(stream=True)`` and ``stream()``) for
text, reasoning, tool calls, refusals, truncation and upstream failures; every event the proxy
writes validates against the SDK's own event models. The Codex CLI runs text, shell,
``apply_patch`` and multi-turn sessions, asserting on Codex's output *and* on the chat requests
the upstream received. The reverse bridge serves a Chat client from a Responses
upstream; Anthropic clients (the SDK, Claude Code) are served from the chat upstream.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
from collections.abc import Iterator
from typing import Any

import anthropic
import httpx
import openai
import pytest
from openai.types.responses import ResponseStreamEvent
from pydantic import TypeAdapter

from .support import sdk_features
from .support.bridge_cases import APPLY_PATCH, PATCH, SCHEMA, invariants
from .support.cli_server import serve_cli
from .support.fake_chat_upstream import ANSWER, REASONING, FakeChatUpstream, Reply, tool_call
from .support.fake_upstream import FakeUpstream
from .support.node_clients import CODEX, codex_messages, require, run_codex, run_node
from .support.servers import serve as serve_app
from .support.sse_parser import parse as parse_sse

EVENTS: TypeAdapter[Any] = TypeAdapter(ResponseStreamEvent)
LOOKUP = {"type": "function", "name": "lookup", "description": "Look up.", "parameters": SCHEMA}
NAMESPACE = {
    "type": "namespace",
    "name": "multi_agent_v1",
    "description": "agents",
    "tools": [{"type": "function", "name": "spawn_agent", "parameters": SCHEMA}],
}


@pytest.fixture(scope="module")
def bridge() -> Iterator[tuple[str, FakeChatUpstream]]:
    """The chat-only upstream, and ``serve --upstream-api chat`` in front of it."""
    fake = FakeChatUpstream()
    with (
        serve_app(fake, "uvicorn") as upstream_url,
        serve_cli(
            "--upstream", f"{upstream_url}/v1", "--upstream-api", "chat", "--keepalive-s", "0.2"
        ) as (_, url),
    ):
        yield url, fake


@pytest.fixture(autouse=True)
def _scripted_replies_end_with_their_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """A reply a test queued on the chat upstream never reaches another test: a test that
    queues one and is then skipped (its CLI missing) would hand it to the next request."""
    yield
    if "bridge" in request.fixturenames:
        request.getfixturevalue("bridge")[1].queue.clear()


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0)


def _last(fake: FakeChatUpstream) -> dict[str, Any]:
    path, body, _ = fake.requests[-1]
    assert path.endswith("/chat/completions")
    assert body["stream"] is False
    invariants(body["messages"])
    return body


def test_the_upstream_really_is_chat_only(bridge: tuple[str, FakeChatUpstream]) -> None:
    url, fake = bridge
    upstream = fake  # the fake answers 404 on /responses: the bridge must never call it
    with _client(url) as client:
        client.responses.create(model="m", input="hi", stream=True).close()
    assert all(path.endswith("/chat/completions") for path, _, _ in upstream.requests)


# -- openai-python ---------------------------------------------------------------------------
CASES: dict[str, tuple[str, Any]] = {
    "text": ("m", None),
    "reasoning": ("reasoning", None),
    "tool call": ("tool", [LOOKUP]),
    "namespaced tool call": ("tool", [NAMESPACE]),
    "refusal": ("refusal", None),
    "think tags": ("think", None),
}


def _check_output(case: str, output: list[Any]) -> None:
    kinds = [item.type for item in output]
    if case in ("reasoning", "think tags"):
        assert kinds == ["reasoning", "message"]
        assert output[0].summary[0].text == REASONING
        assert output[1].content[0].text.strip() == ANSWER
    elif case == "tool call":
        assert kinds == ["function_call"]
        assert output[0].name == "lookup"
    elif case == "namespaced tool call":
        assert kinds == ["function_call"]
        assert (output[0].name, output[0].namespace) == ("spawn_agent", "multi_agent_v1")
    elif case == "refusal":
        assert output[0].content[0].type == "refusal"
    else:
        assert output[0].content[0].text == ANSWER


@pytest.mark.parametrize(
    "case",
    [
        pytest.param(case, marks=sdk_features.needs_namespace_tools)
        if case == "namespaced tool call"
        else case
        for case in CASES
    ],
)
def test_python_responses_stream_helper(bridge: tuple[str, FakeChatUpstream], case: str) -> None:
    """responses.stream().get_final_response() reassembles what the bridge synthesized."""
    url, fake = bridge
    model, tools = CASES[case]
    with (
        _client(url) as client,
        client.responses.stream(model=model, input="hi", tools=tools or []) as stream,
    ):
        final = stream.get_final_response()
    _check_output(case, final.output)
    assert final.status == "completed"
    assert final.model == model
    sent = _last(fake)
    if case == "namespaced tool call":
        assert [t["function"]["name"] for t in sent["tools"]] == ["multi_agent_v1__spawn_agent"]


@pytest.mark.parametrize("case", list(CASES))
def test_python_responses_create_stream(bridge: tuple[str, FakeChatUpstream], case: str) -> None:
    """responses.create(stream=True): the terminal event's response is what the helper sees."""
    url, _ = bridge
    model, tools = CASES[case]
    with _client(url) as client:
        events = list(
            client.responses.create(model=model, input="hi", tools=tools or [], stream=True)
        )
    assert events[0].type == "response.created"
    assert events[-1].type == "response.completed"
    _check_output(case, events[-1].response.output)
    assert len({e.response.id for e in events if hasattr(e, "response")}) == 1


def test_length_is_an_incomplete_response(bridge: tuple[str, FakeChatUpstream]) -> None:
    """``finish_reason: length`` → ``response.incomplete`` with ``max_output_tokens``; the SDK's
    helper raises as documented for a stream without ``response.completed``."""
    url, _ = bridge
    with _client(url) as client:
        events = list(client.responses.create(model="length", input="hi", stream=True))
        assert events[-1].type == "response.incomplete"
        assert events[-1].response.incomplete_details.reason == "max_output_tokens"  # type: ignore[union-attr]
        with (
            pytest.raises(RuntimeError, match=r"response\.completed"),
            client.responses.stream(model="length", input="hi") as stream,
        ):
            stream.get_final_response()


@pytest.mark.parametrize(
    ("model", "code", "words"),
    [
        ("slow-0.6-error-400", "invalid_prompt", "Unexpected message role"),
        ("slow-0.6-error-400-context", "context_length_exceeded", "maximum context length"),
        ("slow-0.6-error-500", "server_error", "Unexpected message role"),
    ],
)
def test_upstream_failure_after_commit(
    bridge: tuple[str, FakeChatUpstream], model: str, code: str, words: str
) -> None:
    """Checks 20-21: an upstream error after the stream committed is ``response.failed`` with
    the classified code and the upstream's own message."""
    url, _ = bridge
    with _client(url) as client:
        events = list(client.responses.create(model=model, input="hi", stream=True))
    assert events[0].type == "response.created"
    failed = events[-1]
    assert failed.type == "response.failed"
    assert failed.response.error.code == code  # type: ignore[union-attr]
    assert words in failed.response.error.message  # type: ignore[union-attr]


def test_upstream_failure_before_commit_is_an_http_error(
    bridge: tuple[str, FakeChatUpstream],
) -> None:
    url, _ = bridge
    with _client(url) as client, pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="error-400", input="hi", stream=True)
    assert caught.value.code == "invalid_prompt"


def test_stateful_requests_are_refused_before_the_stream(
    bridge: tuple[str, FakeChatUpstream],
) -> None:
    """Through the server: a 400 naming the parameter, no upstream call."""
    url, fake = bridge
    since = len(fake.requests)
    with _client(url) as client, pytest.raises(openai.BadRequestError) as caught:
        client.responses.create(model="m", input="hi", previous_response_id="resp_1", stream=True)
    assert caught.value.param == "previous_response_id"
    assert len(fake.requests) == since


def test_every_event_validates_and_custom_calls_stream_as_custom(
    bridge: tuple[str, FakeChatUpstream],
) -> None:
    """The raw SSE of a bridged apply_patch call: every event validates against the SDK's
    models; the call is a custom_tool_call with input delta/done events; the terminal response
    echoes the client's tools and the keepalive id."""
    url, fake = bridge
    fake.queue.append(tool_call("apply_patch", {"input": PATCH}))
    fake.queue[-1].delay = 0.5  # keepalive events open the stream first
    body = {"model": "m", "input": "patch", "stream": True, "tools": [APPLY_PATCH, LOOKUP]}
    with httpx.stream("POST", f"{url}/v1/responses", json=body, timeout=30) as response:
        assert response.status_code == 200
        raw = b"".join(response.iter_bytes())
    events = [json.loads(event.data) for event in parse_sse(raw)]
    for event in events:
        EVENTS.validate_python(event, strict=False)
    types = [e["type"] for e in events]
    assert "response.in_progress" in types
    assert "response.custom_tool_call_input.delta" in types
    done = next(e for e in events if e["type"] == "response.custom_tool_call_input.done")
    assert done["input"] == PATCH
    final = events[-1]["response"]
    assert final["id"] == events[0]["response"]["id"]
    assert final["created_at"] == events[0]["response"]["created_at"]
    assert final["tools"] == [APPLY_PATCH, LOOKUP]
    (item,) = final["output"]
    assert item["type"] == "custom_tool_call"
    sent = _last(fake)
    assert sent["tools"][0]["function"]["parameters"]["required"] == ["input"]


# -- openai-node -------------------------------------------------------------------------------
@pytest.mark.parametrize("mode", ["responses", "responses-create"])
@pytest.mark.parametrize("case", list(CASES))
def test_node_through_the_bridge(
    bridge: tuple[str, FakeChatUpstream], mode: str, case: str
) -> None:
    """openai-node's responses.stream().finalResponse() and responses.create({stream: true})."""
    url, _ = bridge
    model, tools = CASES[case]
    result = run_node(f"{url}/v1", mode, "hi", tools, model=model)
    assert result["ok"], result
    output = result["final"]["output"]
    kinds = [item["type"] for item in output]
    if case in ("reasoning", "think tags"):
        assert kinds == ["reasoning", "message"]
        assert output[0]["summary"][0]["text"] == REASONING
    elif case == "tool call":
        assert [(i["type"], i["name"]) for i in output] == [("function_call", "lookup")]
    elif case == "namespaced tool call":
        assert (output[0]["name"], output[0]["namespace"]) == ("spawn_agent", "multi_agent_v1")
    elif case == "refusal":
        assert output[0]["content"][0]["type"] == "refusal"
    else:
        assert output[0]["content"][0]["text"] == ANSWER
    if mode == "responses-create":
        assert result["final"]["eventTypes"][-1] == "response.completed"


def test_node_sees_length_as_incomplete(bridge: tuple[str, FakeChatUpstream]) -> None:
    url, _ = bridge
    result = run_node(f"{url}/v1", "responses-create", "hi", model="length")
    assert result["ok"], result
    assert result["final"]["eventTypes"][-1] == "response.incomplete"
    assert result["final"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_node_sees_the_failure(bridge: tuple[str, FakeChatUpstream]) -> None:
    """An upstream 400 after commit: openai-node's stream ends with ``response.failed`` carrying
    ``invalid_prompt`` and the upstream's message (its own model name: an identical request
    that failed moments ago would get the remembered failure before commit instead)."""
    url, _ = bridge
    result = run_node(f"{url}/v1", "responses-create", "hi", model="slow-0.6-error-400-node")
    assert result["ok"], result
    assert result["final"]["eventTypes"][-1] == "response.failed"
    assert result["final"]["error"]["code"] == "invalid_prompt"
    assert "Unexpected message role" in result["final"]["error"]["message"]


# -- the Codex CLI -----------------------------------------------------------------------------
def _catalog(tmp: pathlib.Path) -> str:
    """A model catalog with one test slug whose apply_patch tool is freeform (Codex then sends
    the custom apply_patch tool), cloned from Codex's own bundled catalog (an entry with the
    classic tool set: "Responses Lite" entries call apply_patch from inside code-mode ``exec``)."""
    require(CODEX.exists(), "run `npm ci` in tests/clients (the Codex CLI)")
    home = tmp / "catalog-home"
    home.mkdir(exist_ok=True)
    dumped = subprocess.run(
        [str(CODEX), "debug", "models"],
        env={"HOME": str(home), "CODEX_HOME": str(home), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    models = json.loads(dumped.stdout)["models"]
    entry = next(
        m
        for m in models
        if m.get("apply_patch_tool_type") == "freeform"
        and not m.get("use_responses_lite")
        and m.get("tool_mode") != "code_mode_only"
    )
    entry = {**entry, "slug": "bridge-model", "display_name": "bridge-model"}
    path = tmp / "catalog.json"
    path.write_text(json.dumps({"models": [entry]}))
    return f'model_catalog_json = "{path}"\n'


def test_codex_text_turn(tmp_path: pathlib.Path, bridge: tuple[str, FakeChatUpstream]) -> None:
    """A text turn: the upstream gets one leading system message (Codex's developer texts), no
    developer role, function tools only, no bookkeeping; Codex shows the answer."""
    url, fake = bridge
    fake.queue.append(Reply(message={"role": "assistant", "content": "BRIDGE_TEXT_OK"}))
    code, events, stderr = run_codex(tmp_path, url, "say hi")
    assert code == 0, stderr
    assert codex_messages(events) == ["BRIDGE_TEXT_OK"]
    sent = _last(fake)
    roles = [m["role"] for m in sent["messages"]]
    assert roles[0] == "system"
    assert "developer" not in roles
    assert all(t["type"] == "function" for t in sent["tools"])
    assert (
        not {"include", "store", "prompt_cache_key", "client_metadata", "reasoning"} & sent.keys()
    )


def test_codex_shell_turn(tmp_path: pathlib.Path, bridge: tuple[str, FakeChatUpstream]) -> None:
    """Checks 8 and 28: Codex runs the exec_command call; its replay reaches the upstream as an
    assistant tool_calls message followed by the tool message with the command's output."""
    url, fake = bridge
    fake.queue += [
        tool_call("exec_command", {"cmd": "echo BRIDGE_SHELL_OK"}, "call_shell1"),
        Reply(message={"role": "assistant", "content": "shell done"}),
    ]
    code, events, stderr = run_codex(tmp_path, url, "run it")
    assert code == 0, stderr
    assert codex_messages(events) == ["shell done"]
    replay = _last(fake)["messages"]
    assistant, tool = replay[-2:]
    assert assistant["role"] == "assistant"
    assert assistant["content"] == ""
    assert [c["function"]["name"] for c in assistant["tool_calls"]] == ["exec_command"]
    assert tool["role"] == "tool"
    assert tool["tool_call_id"] == assistant["tool_calls"][0]["id"] == "call_shell1"
    assert "BRIDGE_SHELL_OK" in tool["content"]


def test_codex_apply_patch_turn(
    tmp_path: pathlib.Path, bridge: tuple[str, FakeChatUpstream]
) -> None:
    """Checks 12-13: with a freeform apply_patch model, Codex sends the custom tool; the
    upstream sees a one-string-parameter function with the Lark grammar; the model's call comes
    back as a custom call Codex applies (the file appears); the replay wraps the patch as
    ``{"input": ...}`` and carries Codex's apply_patch output."""
    url, fake = bridge
    config = _catalog(tmp_path)
    since = len(fake.requests)
    fake.queue += [
        tool_call("apply_patch", {"input": PATCH}, "call_patch1"),
        Reply(message={"role": "assistant", "content": "patched"}),
    ]
    code, events, stderr = run_codex(
        tmp_path, url, "add hello.txt", model="bridge-model", config=config
    )
    assert code == 0, stderr
    assert (tmp_path / "work" / "hello.txt").read_text() == "hi\n"
    assert codex_messages(events) == ["patched"]
    first, second = fake.bodies[since:]
    (declared,) = [t["function"] for t in first["tools"] if t["function"]["name"] == "apply_patch"]
    assert declared["parameters"]["required"] == ["input"]
    assert "```lark" in declared["description"]
    assistant, tool = second["messages"][-2:]
    assert json.loads(assistant["tool_calls"][0]["function"]["arguments"]) == {"input": PATCH}
    assert tool["tool_call_id"] == "call_patch1"
    assert "hello.txt" in tool["content"]


def test_codex_second_turn_replays_answer_and_reasoning(
    tmp_path: pathlib.Path, bridge: tuple[str, FakeChatUpstream]
) -> None:
    """``codex exec`` then ``codex exec resume --last``: the second upstream request
    holds the first answer with its reasoning as reasoning_content."""
    url, fake = bridge
    fake.queue.append(
        Reply(
            message={
                "role": "assistant",
                "content": "FIRST_ANSWER",
                "reasoning_content": "FIRST_THOUGHT",
            }
        )
    )
    code, events, stderr = run_codex(tmp_path, url, "First question", ephemeral=False)
    assert code == 0, stderr
    fake.queue.append(Reply(message={"role": "assistant", "content": "SECOND_ANSWER"}))
    code, events, stderr = run_codex(tmp_path, url, "Second question", resume=True, ephemeral=False)
    assert code == 0, stderr
    assert codex_messages(events) == ["SECOND_ANSWER"]
    messages = _last(fake)["messages"]
    replayed = [m for m in messages if m["role"] == "assistant"]
    assert replayed == [
        {"role": "assistant", "content": "FIRST_ANSWER", "reasoning_content": "FIRST_THOUGHT"}
    ]
    assert "Second question" in messages[-1]["content"]


@pytest.mark.parametrize(("status", "requests"), [(400, 1), (500, 3)])
def test_codex_does_not_retry_a_deterministic_upstream_error(
    tmp_path: pathlib.Path, bridge: tuple[str, FakeChatUpstream], status: int, requests: int
) -> None:
    """an upstream 400 after commit is invalid_prompt, which Codex does not retry
    (one upstream request with two retries allowed); a 500 is server_error, which it does."""
    url, fake = bridge
    since = len(fake.requests)
    fake.queue += [
        Reply(status=status, error="Unexpected message role.", delay=0.6) for _ in range(3)
    ]
    code, events, stderr = run_codex(tmp_path, url, "fail please", retries=2)
    fake.queue.clear()
    assert code != 0
    assert "Unexpected message role" in json.dumps(events) + stderr
    assert len(fake.requests) - since == requests


# -- the reverse bridge, and Anthropic clients ---------------------------------------------
@pytest.fixture(scope="module")
def reverse() -> Iterator[tuple[str, FakeUpstream]]:
    """A Responses upstream (the recording fake), and ``serve --upstream-api responses``."""
    fake = FakeUpstream()
    with (
        serve_app(fake, "uvicorn") as upstream_url,
        serve_cli(
            "--upstream",
            f"{upstream_url}/v1",
            "--upstream-api",
            "responses",
            "--keepalive-s",
            "0.2",
        ) as (_, url),
    ):
        yield url, fake


def test_chat_client_on_a_responses_upstream(reverse: tuple[str, FakeUpstream]) -> None:
    """With openai-python: tools without strict reach the upstream with strict false,
    store false and the system message as instructions; the tool call streams back as chat
    chunks with an index and finish_reason tool_calls; n=2 is a 400."""
    url, fake = reverse
    tool = {"type": "function", "function": {"name": "lookup", "parameters": SCHEMA}}
    with _client(url) as client:
        chunks: list[Any] = list(
            client.chat.completions.create(
                model="m",
                messages=[
                    {"role": "system", "content": "Be kind."},
                    {"role": "user", "content": "hi"},
                ],
                tools=[tool],  # type: ignore[list-item]
                stream=True,
            )
        )
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": "x"}], n=2, stream=True
            )
    assert caught.value.param == "n"
    path, sent, _ = fake.requests[-1]
    assert path.endswith("/responses")
    assert sent["tools"] == [
        {"type": "function", "name": "lookup", "parameters": SCHEMA, "strict": False}
    ]
    assert sent["store"] is False
    assert sent["instructions"] == "Be kind."
    calls = [
        c.choices[0].delta.tool_calls for c in chunks if c.choices and c.choices[0].delta.tool_calls
    ]
    assert calls[0][0].index == 0
    assert calls[0][0].function.name == "lookup"
    assert [c.choices[0].finish_reason for c in chunks if c.choices][-1] == "tool_calls"


def test_a_chat_completion_bridged_from_a_responses_upstream_is_stored_here(
    reverse: tuple[str, FakeUpstream],
) -> None:
    """``store: true`` keeps the completion in the proxy's store, as the chat client saw it
    (the id its chunks carried); the upstream is asked to store nothing."""
    url, fake = reverse
    with _client(url) as client:
        with client.chat.completions.stream(
            model="m", messages=[{"role": "user", "content": "hi"}], store=True
        ) as stream:
            final = stream.get_final_completion()
        retrieved = client.chat.completions.retrieve(final.id)
    _, sent, _ = fake.requests[-1]
    assert sent["store"] is False
    assert retrieved.id == final.id
    assert retrieved.choices[0].message.content == final.choices[0].message.content
    assert retrieved.choices[0].message.content


def test_anthropic_sdk_on_a_chat_upstream(bridge: tuple[str, FakeChatUpstream]) -> None:
    """the anthropic SDK's stream helper reassembles a thinking block and text,
    and a tool_use, from a chat upstream's answers."""
    url, fake = bridge
    with anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0) as client:
        with client.messages.stream(
            model="reasoning", max_tokens=100, messages=[{"role": "user", "content": "hi"}]
        ) as stream:
            message = stream.get_final_message()
        assert [b.type for b in message.content] == ["thinking", "text"]
        assert message.content[1].text == ANSWER  # type: ignore[union-attr]
        tools: Any = [{"name": "get", "description": "x", "input_schema": SCHEMA}]
        with client.messages.stream(
            model="tool", max_tokens=100, messages=[{"role": "user", "content": "hi"}], tools=tools
        ) as stream:
            message = stream.get_final_message()
    assert message.stop_reason == "tool_use"
    assert message.content[0].type == "tool_use"
    sent = _last(fake)
    assert sent["tools"][0]["function"]["name"] == "get"
    assert sent["max_tokens"] == 100


def test_claude_code_on_a_chat_upstream(
    tmp_path: pathlib.Path, bridge: tuple[str, FakeChatUpstream]
) -> None:
    """Claude Code through ``--upstream-api chat``: the model calls Bash, Claude Code runs it,
    and its tool_result reaches the chat upstream as a tool message right after the assistant's
    tool_calls; the final text is the upstream's."""
    from .support.claude_code import run_claude

    url, fake = bridge
    since = len(fake.requests)
    fake.queue += [
        tool_call("Bash", {"command": "echo CLAUDE_BRIDGE_OK", "description": "echo"}, "call_cc1"),
        Reply(message={"role": "assistant", "content": "bash said CLAUDE_BRIDGE_OK"}),
    ]
    code, result, stderr = run_claude(tmp_path, url, "run echo", ANTHROPIC_MODEL="chat-model")
    fake.queue.clear()
    assert code == 0, stderr
    assert result["result"] == "bash said CLAUDE_BRIDGE_OK"
    bodies = [b for b in fake.bodies[since:] if any(m.get("role") == "tool" for m in b["messages"])]
    messages = bodies[-1]["messages"]
    invariants(messages)
    assert messages[0]["role"] == "system"
    call_index = next(i for i, m in enumerate(messages) if m.get("tool_calls"))
    assert messages[call_index]["tool_calls"][0]["id"] == "call_cc1"
    tool = messages[call_index + 1]
    assert tool["role"] == "tool"
    assert "CLAUDE_BRIDGE_OK" in tool["content"]


def test_what_the_bridge_drops_is_reported(bridge: tuple[str, FakeChatUpstream]) -> None:
    """a hosted tool is dropped, named in the answer's header and counted by kind and type
    in /metrics."""
    url, _ = bridge
    body = {"model": "m", "input": "hi", "stream": True, "tools": [LOOKUP, {"type": "web_search"}]}
    with httpx.stream("POST", f"{url}/v1/responses", json=body, timeout=30) as response:
        assert response.headers["x-aiostream-synth-dropped"] == "tools[1]"
        response.read()
    metrics = httpx.get(f"{url}/metrics", timeout=10).text
    assert 'aiostream_synth_bridge_dropped_total{kind="tool",type="web_search"}' in metrics


def test_the_readme_two_commands() -> None:
    """README: a second ``serve`` (the embedded model) as the chat upstream of
    ``serve --upstream-api chat``: a Responses client streams reasoning, text and a custom
    tool call through the bridge."""
    with (
        serve_cli() as (_, upstream),
        serve_cli(
            "--upstream", f"{upstream}/v1", "--upstream-api", "chat", "--keepalive-s", "0.2"
        ) as (_, url),
        _client(url) as client,
    ):
        with client.responses.stream(
            model="aiostream-synth-echo", input="Hello bridge [reasoning] [delay:0.5]"
        ) as stream:
            final = stream.get_final_response()
        assert [item.type for item in final.output] == ["reasoning", "message"]
        assert final.output_text == "Hello bridge"
        tools: Any = [APPLY_PATCH]
        answer = client.responses.create(
            model="m", input="patch [tool:apply_patch *** Begin Patch]", tools=tools
        )
        (call,) = answer.output
        assert call.type == "custom_tool_call"
        assert call.input == "*** Begin Patch"
