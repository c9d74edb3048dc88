"""Decision P10 on the library surface: what real clients send reaches the backend, whole.

Each loss listed in the [fidelity] work is a test here, fed the shapes real clients send: tools
without ``strict`` (the openai SDKs' examples, Vercel AI SDK, LangChain), replays without ``id`` or
``status``, Codex's reasoning items with ``"content": null``. A property test then checks the rule
itself: whatever the request, an item or key is either forwarded or recorded as removed.
"""

from __future__ import annotations

import json
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiostream_synth import RequestError, prepare_request
from aiostream_synth.params import (
    sanitize_streaming_responses_body,
    validate_streaming_responses_params,
)

from .support.request_fixtures import fixture

SCHEMA = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def _prepare(body: dict[str, Any]) -> dict[str, Any]:
    return prepare_request("responses", {"model": "m", "stream": True, **body}).params


def test_function_tools_without_strict_reach_the_backend() -> None:
    """(1) A function tool without strict, top level or inside a namespace, is forwarded."""
    params = _prepare(
        {
            "input": "weather?",
            "tools": [
                {"type": "function", "name": "get_weather", "parameters": SCHEMA},
                {
                    "type": "namespace",
                    "name": "mcp__maps",
                    "description": "maps",
                    "tools": [{"type": "function", "name": "route", "parameters": SCHEMA}],
                },
            ],
        }
    )
    assert [t["name"] for t in params["tools"]] == ["get_weather", "mcp__maps__route"]
    assert all("strict" not in t for t in params["tools"])


@pytest.mark.parametrize(
    "replay",
    [
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "4"}]},
        {
            "type": "message",
            "role": "assistant",
            "id": "msg_7",
            "content": [{"type": "output_text", "text": "4"}],
        },
        {"role": "assistant", "content": [{"type": "output_text", "text": "4"}]},
        {"role": "assistant", "content": "4"},
    ],
)
def test_assistant_replays_without_status_are_forwarded(replay: dict[str, Any]) -> None:
    """(2) An assistant replay without status (with or without id or type) reaches the backend,
    normalized so an upstream that requires them gets status, id and annotations."""
    params = _prepare({"input": [{"role": "user", "content": "2+2?"}, replay]})
    assert len(params["input"]) == 2
    forwarded = params["input"][1]
    assert forwarded["role"] == "assistant"
    if isinstance(replay["content"], str):
        assert forwarded == replay
        return
    assert forwarded["type"] == "message"
    assert forwarded["status"] == "completed"
    assert forwarded["id"] == replay.get("id", forwarded["id"])
    assert forwarded["id"].startswith("msg_")
    assert forwarded["content"] == [{"type": "output_text", "text": "4", "annotations": []}]


def test_codex_reasoning_replays_reach_the_backend() -> None:
    """(3) The real three-turn Codex session: every item but the two hoisted developer messages
    reaches the backend, the reasoning item included (its null content removed)."""
    body = fixture("multi-turn-replay")
    params = prepare_request("responses", body).params
    sent = body["input"][2:]  # the two leading developer messages become instructions
    assert [i["type"] for i in params["input"]] == [i["type"] for i in sent]
    (reasoning,) = [i for i in params["input"] if i["type"] == "reasoning"]
    assert reasoning["summary"] == [
        {"type": "summary_text", "text": "Let me think step by step. 2+2=4."}
    ]
    assert "content" not in reasoning
    assert "encrypted_content" not in reasoning
    answers = [i for i in params["input"] if i.get("role") == "assistant"]
    assert [a["content"][0]["text"] for a in answers] == [
        "The answer is 4.",
        "Tool result received. Final answer: done.",
    ]


@pytest.mark.parametrize(
    "reasoning",
    [
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "t"}], "content": None},
        {"type": "reasoning", "summary": [], "content": None, "encrypted_content": None},
        {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "t"}]},
        {"type": "reasoning", "content": [{"type": "reasoning_text", "text": "raw"}]},
    ],
)
def test_reasoning_replays_in_every_shape_are_forwarded(reasoning: dict[str, Any]) -> None:
    """(3) Reasoning with null content, without id, without summary: forwarded."""
    params = _prepare({"input": [{"role": "user", "content": "q"}, reasoning]})
    forwarded = params["input"][1]
    assert forwarded["type"] == "reasoning"
    assert forwarded["id"] == reasoning.get("id", forwarded["id"])
    assert forwarded["id"].startswith("rs_")
    assert forwarded["summary"] == reasoning.get("summary", [])
    if isinstance(reasoning.get("content"), list):
        assert forwarded["content"] == reasoning["content"]


def test_a_hand_written_history_reaches_the_backend_whole() -> None:
    """The six-item history people write by hand: nothing is lost, in order."""
    history = [
        {"role": "user", "content": "What is in /tmp?"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "list it"}]},
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "ls",
            "arguments": '{"path": "/tmp"}',
        },
        {"type": "function_call_output", "call_id": "call_1", "output": "a.txt"},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "a.txt"}],
        },
        {"role": "user", "content": "Thanks"},
    ]
    params = _prepare({"input": history})
    assert [(i.get("type"), i.get("role")) for i in params["input"]] == [
        (None, "user"),
        ("reasoning", None),
        ("function_call", None),
        ("function_call_output", None),
        ("message", "assistant"),
        (None, "user"),
    ]
    assert params["input"][2] == history[2]
    assert params["input"][3] == history[3]


def test_a_wrongly_typed_value_is_a_400_naming_its_path() -> None:
    """(4) A tool whose name is a number is refused with OpenAI's error shape, never dropped."""
    with pytest.raises(RequestError) as info:
        _prepare({"input": "x", "tools": [{"type": "function", "name": 5, "parameters": {}}]})
    assert info.value.status_code == 400
    assert info.value.body["error"]["param"] == "tools[0].name"
    assert info.value.body["error"]["type"] == "invalid_request_error"


def test_normalized_ids_are_deterministic() -> None:
    """Determinism: the same history gives byte-identical backend params on every turn (prefix caches)."""
    body: dict[str, Any] = {
        "input": [
            {"role": "user", "content": "q"},
            {
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": "s"}],
                "content": None,
            },
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "a"}],
            },
        ]
    }
    first, second = _prepare(body), _prepare(json.loads(json.dumps(body)))
    assert orjson.dumps(first) == orjson.dumps(second)
    other = _prepare(
        {
            **body,
            "input": [
                *body["input"][:2],
                {**body["input"][2], "content": [{"type": "output_text", "text": "b"}]},
            ],
        }
    )
    assert other["input"][2]["id"] != first["input"][2]["id"]


def test_validated_params_give_typed_access_to_items() -> None:
    """(6) As with the reference's item models: attributes for every field, defaults for the
    omitted ones the type declares, AttributeError for the rest; still plain JSON underneath."""
    params: Any = validate_streaming_responses_params(
        {
            "input": [
                {"role": "user", "content": "hi"},
                {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
            ],
            "tools": [{"type": "function", "name": "f", "parameters": SCHEMA}],
            "reasoning": {"effort": "low"},
        }
    )
    user, call = params.input
    assert (user.type, user.role, user.content) == ("message", "user", "hi")
    assert (call.type, call.name, call.status) == ("function_call", "f", None)
    assert params.tools[0].parameters["required"] == ["city"]
    assert params.reasoning.effort == "low"
    with pytest.raises(AttributeError):
        _ = user.not_a_field
    assert orjson.loads(orjson.dumps(params.input)) == [
        {"role": "user", "content": "hi"},
        {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}"},
    ]


# -- the rule itself --------------------------------------------------------------------------

_TEMPLATES: list[dict[str, Any]] = [
    {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "u"}]},
    {"role": "user", "content": "plain"},
    {
        "type": "message",
        "role": "assistant",
        "id": "msg_1",
        "status": "completed",
        "content": [{"type": "output_text", "text": "a", "annotations": []}],
    },
    {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "r"}],
        "content": None,
    },
    {
        "type": "function_call",
        "id": "fc_1",
        "status": "completed",
        "call_id": "c1",
        "name": "f",
        "arguments": "{}",
    },
    {"type": "function_call_output", "call_id": "c1", "output": "o"},
    {
        "type": "custom_tool_call",
        "call_id": "c2",
        "name": "apply_patch",
        "input": "*** Begin Patch",
    },
    {"type": "custom_tool_call_output", "call_id": "c2", "output": "done"},
]
_KIND_KEYS = ("type", "role")


@st.composite
def _item(draw: st.DrawFn) -> tuple[dict[str, Any], set[str]]:
    """A real item shape with optional keys omitted at random and unknown keys added; returns
    it with the unknown keys (which must be pruned, and only those)."""
    template = draw(st.sampled_from(_TEMPLATES))
    keep_type = "type" in template and template.get("role") != "user"
    item = {k: v for k, v in template.items() if k in _KIND_KEYS and (k != "type" or keep_type)}
    for key, value in template.items():
        if key not in item and draw(st.booleans()):
            item[key] = value
    unknown = set(
        draw(st.lists(st.sampled_from(["x_future", "x_client_flag"]), unique=True, max_size=2))
    )
    for key in unknown:
        item[key] = draw(st.integers() | st.text(max_size=3))
    content = item.get("content")
    if isinstance(content, list) and draw(st.booleans()):  # a key newer than our types, nested
        item["content"] = [{**content[0], "x_part_flag": 1}, *content[1:]]
        unknown.add("content[0].x_part_flag")
    return item, unknown


@settings(max_examples=200, deadline=None)
@given(item=_item(), bad=st.sampled_from([7, None, ["t"], {"t": 1}]))
def test_a_wrong_value_is_refused_never_pruned_away(
    item: tuple[dict[str, Any], set[str]], bad: Any
) -> None:
    """The same shapes with one wrong value nested in them: always a 400 naming that value's
    path, never an item emptied into another kind (every key of an item reference is optional,
    so pruning could always "fix" a message into one)."""
    sent, _ = item
    content = sent.get("content")
    if not isinstance(content, list):
        return
    sent = {**sent, "content": [{**content[0], "text": bad}, *content[1:]]}
    body = {"model": "m", "stream": True, "input": [{"role": "user", "content": "start"}, sent]}
    with pytest.raises(RequestError) as info:
        prepare_request("responses", body)
    assert info.value.body["error"]["param"] == "input[1].content[0].text"


@settings(max_examples=300, deadline=None)
@given(items=st.lists(_item(), min_size=1, max_size=8))
def test_nothing_the_client_sent_is_silently_lost(
    items: list[tuple[dict[str, Any], set[str]]],
) -> None:
    """For any history of real item shapes (keys omitted, unknown keys added): every item reaches
    the backend, every key it sent is forwarded unless it is unknown, and every unknown key is
    recorded as removed at its own path."""
    body: dict[str, Any] = {
        "model": "m",
        "stream": True,
        "input": [{"role": "user", "content": "start"}, *(i for i, _ in items)],
    }
    prepared = prepare_request("responses", body)
    forwarded = prepared.params["input"]
    assert len(forwarded) == len(body["input"])
    expected_removed: set[str] = set()
    for index, ((sent, unknown), got) in enumerate(zip(items, forwarded[1:], strict=True)):
        for path in unknown:
            expected_removed.add(f"input[{index + 1}].{path}")
        if "content[0].x_part_flag" in unknown:
            assert "x_part_flag" not in got["content"][0]
            assert got["content"][0]["text"] == sent["content"][0]["text"]
        for key, value in sent.items():
            if key in unknown:
                assert key not in got
            elif key == "id" and sent.get("role") == "user":
                expected_removed.add(f"input[{index + 1}].id")  # input messages have no id
            elif key != "content" or value is not None:
                assert key in got, (key, sent, got)
    assert set(prepared.removals.paths) == expected_removed


def test_sanitize_alone_keeps_every_item_it_cannot_prove_wrong() -> None:
    """The reference-compatible sanitizer no longer drops items that fail validation: it leaves
    them for validation to judge (a wrong value is a 400 there, never a silent drop)."""
    body = {"input": [{"type": "function_call", "name": 5}, {"role": "user", "content": "x"}]}
    cleaned, _ = sanitize_streaming_responses_body(body)
    assert cleaned["input"] == body["input"]
