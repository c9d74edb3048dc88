"""Real clients through ``aiostream-synth serve --upstream`` to an upstream that records what it got.

Decision P10, end to end: what openai-python, openai-node and the Codex CLI send as they really
send it (tools without ``strict``, hand-written history without ``id`` or ``status``, Codex's
replayed reasoning with ``"content": null``) must reach the upstream, and the upstream's answer
must come back. All offline on loopback; Node and Codex come from ``tests/clients``.
"""

from __future__ import annotations

import pathlib
from collections.abc import Iterator
from typing import Any, cast

import openai
import pytest

from .support.cli_server import serve_cli
from .support.fake_upstream import FakeUpstream
from .support.node_clients import codex_messages, run_codex, run_node
from .support.servers import serve as serve_app

LOOKUP = {
    "type": "function",
    "name": "lookup",
    "description": "Look a city up.",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string"}},
        "required": ["city"],
    },
}


@pytest.fixture(scope="module")
def upstream() -> Iterator[tuple[str, FakeUpstream]]:
    """The recording upstream, and ``serve --upstream`` in front of it (a real process)."""
    fake = FakeUpstream()
    with (
        serve_app(fake, "uvicorn") as upstream_url,
        serve_cli("--upstream", f"{upstream_url}/v1", "--keepalive-s", "0.2") as (_, url),
    ):
        yield url, fake


def _received(fake: FakeUpstream, since: int) -> list[dict[str, Any]]:
    return [body for path, body, _ in fake.requests[since:] if path.endswith("/responses")]


def test_python_tools_without_strict_reach_the_upstream(upstream: tuple[str, FakeUpstream]) -> None:
    """openai-python's responses.stream() with a tool written as its docs write it (no strict):
    the upstream gets the tool, and the model's call comes back through the stream helper."""
    url, fake = upstream
    since = len(fake.requests)
    with (
        openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0) as client,
        client.responses.stream(model="m", input="Weather in Paris?", tools=[LOOKUP]) as stream,  # type: ignore[list-item]
    ):
        final = stream.get_final_response()
    (sent,) = _received(fake, since)
    assert sent["tools"] == [LOOKUP]
    (call,) = final.output
    assert call.type == "function_call"
    assert call.name == "lookup"


def test_node_tools_without_strict_reach_the_upstream(upstream: tuple[str, FakeUpstream]) -> None:
    """openai-node's responses.stream().finalResponse() with the same tool."""
    url, fake = upstream
    since = len(fake.requests)
    result = run_node(f"{url}/v1", "responses", "Weather in Paris?", [LOOKUP])
    assert result["ok"], result
    (sent,) = _received(fake, since)
    assert sent["tools"] == [LOOKUP]
    assert [(i["type"], i["name"]) for i in result["final"]["output"]] == [
        ("function_call", "lookup")
    ]


def test_a_hand_written_history_reaches_the_upstream_whole(
    upstream: tuple[str, FakeUpstream],
) -> None:
    """User, reasoning without id, function_call without id/status, its output, assistant text
    without id/status, user: all six reach the upstream, in order."""
    url, fake = upstream
    history: list[dict[str, Any]] = [
        {"role": "user", "content": "What is in /tmp?"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "list it"}]},
        {"type": "function_call", "call_id": "call_1", "name": "ls", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "a.txt"}],
        },
        {"role": "user", "content": "Thanks"},
    ]
    since = len(fake.requests)
    with openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0) as client:
        stream: Any = client.responses.create(model="m", input=cast(Any, history), stream=True)
        events = list(stream)
    assert events[-1].type == "response.completed"
    (sent,) = _received(fake, since)
    assert [(i.get("type"), i.get("role")) for i in sent["input"]] == [
        (None, "user"),
        ("reasoning", None),
        ("function_call", None),
        ("function_call_output", None),
        ("message", "assistant"),
        (None, "user"),
    ]
    assert sent["input"][1]["summary"] == history[1]["summary"]
    assert sent["input"][4]["content"][0]["text"] == "a.txt"


def test_codex_second_turn_replays_the_first_turns_reasoning_and_answer(
    tmp_path: pathlib.Path, upstream: tuple[str, FakeUpstream]
) -> None:
    """``codex exec``, then ``codex exec resume --last``: the second request reaches the upstream
    with the first turn's reasoning item (which Codex replays with ``content: null``) and its
    answer, between the first prompt and the second."""
    url, fake = upstream
    since = len(fake.requests)
    code, events, stderr = run_codex(
        tmp_path, url, "First question", model="text-reasoning", ephemeral=False
    )
    assert code == 0, stderr
    assert codex_messages(events) == ["upstream answer"]
    code, events, stderr = run_codex(
        tmp_path, url, "Second question", model="text-reasoning", resume=True, ephemeral=False
    )
    assert code == 0, stderr
    assert codex_messages(events) == ["upstream answer"]
    first, second = _received(fake, since)
    tail = [i for i in second["input"] if i.get("role") != "developer"][-4:]
    assert [(i.get("type"), i.get("role")) for i in tail] == [
        ("message", "user"),
        ("reasoning", None),
        ("message", "assistant"),
        ("message", "user"),
    ]
    assert tail[1]["summary"] == [{"type": "summary_text", "text": "upstream reasoning"}]
    assert tail[2]["content"][0]["text"] == "upstream answer"
    assert "Second question" in str(tail[3]["content"])
    assert len(second["input"]) > len(first["input"])
