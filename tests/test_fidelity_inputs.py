"""The fourteen inputs of issue 38, each with what decision P10 says it must give: forwarded,
removed and reported at the client's own path, or a 400 naming that path.

Requests go through :func:`prepare_request` (and, on both loops, through the proxy over HTTP);
results through the synthesis functions, whose events must validate strictly against the SDK's
models and reassemble in its accumulator.
"""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from aiostream_synth import (
    PreparedRequest,
    RequestError,
    prepare_request,
    synthesize_anthropic_sse,
    synthesize_responses_sse,
)
from aiostream_synth._proxy.app import ProxyApp, ProxyConfig

from .support import sdk_features
from .support.anthropic_mock import MOCK_FRAMES, MOCK_SDK, REQUEST
from .support.sdk_validation import sdk_result, validate_anthropic, validate_responses
from .support.sse_parser import parse

CHAT: dict[str, Any] = {"model": "m", "messages": [{"role": "user", "content": "hi"}]}
RESPONSES: dict[str, Any] = {"model": "m", "input": "hi"}
ANTHROPIC: dict[str, Any] = {
    "model": "m",
    "max_tokens": 10,
    "messages": [{"role": "user", "content": "hi"}],
}
SYSTEM = {"role": "system", "content": "be brief"}
TOOL_USE = {
    "role": "assistant",
    "content": [{"type": "tool_use", "id": "t1", "name": "f", "input": {}}],
}


def _prepare(dialect: str, body: dict[str, Any], upstream: str | None = None) -> PreparedRequest:
    raw = json.dumps({**body, "stream": True}).encode()
    return prepare_request(dialect, raw, upstream=upstream)


def _refusal(dialect: str, body: dict[str, Any]) -> dict[str, Any]:
    with pytest.raises(RequestError) as caught:
        _prepare(dialect, body)
    assert caught.value.status_code == 400
    error: dict[str, Any] = caught.value.body["error"]
    return error


def _sent(prepared: PreparedRequest) -> dict[str, Any]:
    return prepared.bridged.params if prepared.bridged else prepared.params


# -- 1, 14: a 400 names the client's path, never a union arm ------------------------------------

PATHS_OF_WRONG_VALUES = [
    (
        "chat",
        {**CHAT, "tool_choice": {"type": "allowed_tools", "allowed_tools": 0}},
        "tool_choice.allowed_tools",
    ),
    ("responses", {**RESPONSES, "tool_choice": {"type": 0}}, "tool_choice.type"),
    ("responses", {**RESPONSES, "conversation": {"id": 0}}, "conversation.id"),
    (
        "anthropic",
        {**ANTHROPIC, "messages": [{"role": "user", "content": [{"type": None, "text": "x"}]}]},
        "messages[0].content[0].type",
    ),
    (
        "responses",
        {
            **RESPONSES,
            "input": [
                {
                    "type": "message",
                    "role": "assistant",
                    "id": "msg_1",
                    "status": 0,
                    "content": [{"type": "output_text", "text": "a", "annotations": []}],
                }
            ],
        },
        "input[0].status",
    ),
]


@pytest.mark.parametrize(("dialect", "body", "param"), PATHS_OF_WRONG_VALUES)
def test_a_400_names_the_clients_path(dialect: str, body: dict[str, Any], param: str) -> None:
    error = _refusal(dialect, body)
    assert error["param"] == param
    assert "\u27ea" not in error["message"]  # no arm label leaks into the message


# -- 2, 3: a newer key in a union member is pruned at its own path -------------------------------

NEWER_KEYS = [
    (
        "chat",
        {
            **CHAT,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "zz": 1}]}],
        },
        "messages[0].content[0].zz",
    ),
    (
        "chat",
        {
            **CHAT,
            "messages": [
                {
                    "role": "user",
                    "content": [{"type": "image_url", "image_url": {"url": "http://x"}, "zz": 1}],
                }
            ],
        },
        "messages[0].content[0].zz",
    ),
    *[
        (
            "chat",
            {
                **CHAT,
                "messages": [
                    {"role": "user", "content": "hi"},
                    {
                        "role": "assistant",
                        "tool_calls": [{"id": "c", "type": kind, kind: call, "zz": 1}],
                    },
                ],
            },
            "messages[1].tool_calls[0].zz",
        )
        for kind, call in [
            ("function", {"name": "f", "arguments": "{}"}),
            ("custom", {"name": "f", "input": "x"}),
        ]
    ],
    (
        "chat",
        {
            **CHAT,
            "tools": [
                {
                    "type": "custom",
                    "custom": {
                        "name": "g",
                        "format": {
                            "type": "grammar",
                            "grammar": {"definition": "x", "syntax": "lark", "zz": 1},
                        },
                    },
                }
            ],
        },
        "tools[0].custom.format.grammar.zz",
    ),
    (
        "anthropic",
        {
            **ANTHROPIC,
            "messages": [{"role": "user", "content": [{"type": "text", "text": "hi", "zz": 1}]}],
        },
        "messages[0].content[0].zz",
    ),
    (
        "anthropic",
        {
            **ANTHROPIC,
            "messages": [
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": [
                        {"type": "thinking", "thinking": "t", "signature": "s", "zz": 1},
                        {"type": "text", "text": "a"},
                    ],
                },
                {"role": "user", "content": "go on"},
            ],
        },
        "messages[1].content[0].zz",
    ),
    (
        "responses",
        {
            **RESPONSES,
            "input": [
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "refusal", "refusal": "no", "zz": 1}],
                }
            ],
        },
        "input[0].content[0].zz",
    ),
    (
        "responses",
        {**RESPONSES, "tool_choice": {"type": "file_search", "zz": None}},
        "tool_choice.zz",
    ),
    (
        "responses",
        {
            **RESPONSES,
            "tools": [
                {
                    "type": "namespace",
                    "name": "ns",
                    "tools": [{"type": "function", "name": "f", "parameters": {}}],
                    "zz": 1,
                }
            ],
        },
        "tools[0].zz",
    ),
]


@pytest.mark.parametrize(("dialect", "body", "dropped"), NEWER_KEYS)
def test_a_newer_key_is_pruned_and_reported_at_its_path(
    dialect: str, body: dict[str, Any], dropped: str
) -> None:
    prepared = _prepare(dialect, body)
    assert prepared.dropped == (dropped,)
    assert '"zz"' not in json.dumps(_sent(prepared))


# -- 5, 9: what the SDK types accepts is forwarded ---------------------------------------------


def test_an_anthropic_tool_with_a_null_type_is_forwarded() -> None:
    tool = {"type": None, "name": "t", "input_schema": {"type": "object"}}
    prepared = _prepare("anthropic", {**ANTHROPIC, "tools": [tool]})
    assert prepared.params["tools"] == [tool]
    assert prepared.dropped == ()


@pytest.mark.parametrize(("schema", "same"), [(True, {}), (False, {"not": {}})])
def test_a_boolean_sub_tool_schema_is_forwarded_as_the_same_object(
    schema: bool, same: dict[str, Any]
) -> None:
    namespace = {
        "type": "namespace",
        "name": "ns",
        "tools": [{"type": "function", "name": "f", "parameters": schema}],
    }
    prepared = _prepare("responses", {**RESPONSES, "tools": [namespace]})
    assert prepared.params["tools"] == [{"type": "function", "name": "ns__f", "parameters": same}]


def test_a_sub_tool_schema_that_is_no_schema_is_a_400_at_its_path() -> None:
    namespace = {
        "type": "namespace",
        "name": "ns",
        "tools": [{"type": "function", "name": "f", "parameters": [1]}],
    }
    assert _refusal("responses", {**RESPONSES, "tools": [namespace]})["param"] == (
        "tools[0].tools[0].parameters"
    )


# -- 6: wrong JSON types are refused, never coerced --------------------------------------------


@pytest.mark.parametrize(
    ("dialect", "key", "value"),
    [
        ("chat", "max_tokens", False),
        ("chat", "max_tokens", "12"),
        ("chat", "temperature", "0.5"),
        ("chat", "n", True),
        ("chat", "store", "false"),
        ("responses", "background", 0),
        ("responses", "store", "false"),
        ("anthropic", "max_tokens", "12"),
    ],
)
def test_a_wrong_json_type_is_a_400(dialect: str, key: str, value: Any) -> None:
    base = {"chat": CHAT, "responses": RESPONSES, "anthropic": ANTHROPIC}[dialect]
    assert _refusal(dialect, {**base, key: value})["param"] == key


def test_json_numbers_stay_numbers() -> None:
    """An integral float is the integer it is; an integer is a valid float."""
    prepared = _prepare("chat", {**CHAT, "max_tokens": 12.0, "temperature": 1})
    assert prepared.params["max_tokens"] == 12
    assert prepared.params["temperature"] == 1


# -- 7, 8: folded system messages keep their own paths -----------------------------------------


def test_an_error_after_a_folded_system_message_names_the_clients_block() -> None:
    body = {
        **ANTHROPIC,
        "messages": [SYSTEM, {"role": "user", "content": [{"type": "text", "text": 5}]}],
    }
    assert _refusal("anthropic", body)["param"] == "messages[1].content[0].text"


def test_a_dropped_block_after_a_folded_system_message_is_reported_at_its_path() -> None:
    user = {
        "role": "user",
        "content": [{"type": "brand_new_block"}, {"type": "text", "text": "hi"}],
    }
    prepared = _prepare("anthropic", {**ANTHROPIC, "messages": [SYSTEM, user]})
    assert prepared.dropped == ("messages[1].content[0]",)
    assert prepared.params["messages"][0]["content"][1] == {"type": "text", "text": "hi"}


def test_a_system_message_directive_is_reported_at_its_own_path_and_nothing_invented() -> None:
    system = {"role": "system", "content": "s", "output_config": {"zz": 1}}
    prepared = _prepare(
        "anthropic", {**ANTHROPIC, "messages": [system, {"role": "user", "content": "hi"}]}
    )
    assert prepared.dropped == ("messages[0].output_config.zz",)
    assert "output_config" not in prepared.params


def test_a_system_message_directive_becomes_the_requests_own() -> None:
    system = {"role": "system", "content": "s", "output_config": {"effort": "low"}}
    prepared = _prepare(
        "anthropic", {**ANTHROPIC, "messages": [system, {"role": "user", "content": "hi"}]}
    )
    assert prepared.params["output_config"] == {"effort": "low"}
    wrong = {"role": "system", "content": "s", "output_config": {"effort": 3}}
    body = {**ANTHROPIC, "messages": [wrong, {"role": "user", "content": "hi"}]}
    assert _refusal("anthropic", body)["param"] == "messages[0].output_config.effort"


def test_a_wrong_value_in_a_system_message_text_is_a_400() -> None:
    system = {"role": "system", "content": [{"type": "text", "text": None}]}
    body = {**ANTHROPIC, "messages": [system, {"role": "user", "content": "hi"}]}
    assert _refusal("anthropic", body)["param"] == "messages[0].content[0].text"


def test_a_system_text_blocks_other_keys_are_reported() -> None:
    system = {
        "role": "system",
        "content": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
    }
    prepared = _prepare(
        "anthropic", {**ANTHROPIC, "messages": [system, {"role": "user", "content": "hi"}]}
    )
    assert prepared.dropped == ("messages[0].content[0].cache_control",)


# -- 4 (hoisting), and what the property tests found -------------------------------------------


def test_a_namespace_description_and_an_empty_namespace_are_reported() -> None:
    tools = [
        {
            "type": "namespace",
            "name": "a",
            "description": "d",
            "tools": [{"type": "function", "name": "f"}],
        },
        {"type": "namespace", "name": "b", "tools": []},
    ]
    prepared = _prepare("responses", {**RESPONSES, "tools": tools})
    assert prepared.dropped == ("tools[0].description", "tools[1]")
    assert [entry.benign for entry in prepared.removals] == [True, False]


@sdk_features.needs_namespace_tools  # without them, a malformed one is an unknown tool kind
def test_a_wrong_namespace_description_is_a_400() -> None:
    tools = [{"type": "namespace", "name": "a", "description": 5, "tools": []}]
    assert _refusal("responses", {**RESPONSES, "tools": tools})["param"] == "tools[0].description"


def test_a_hoisted_system_message_keeps_what_it_cannot_carry_in_place() -> None:
    item = {"role": "system", "content": "a", "zz": 1}
    prepared = _prepare(
        "responses", {**RESPONSES, "input": [item, {"role": "user", "content": "hi"}]}
    )
    assert "instructions" not in prepared.params
    assert prepared.dropped == ("input[0].zz",)


def test_a_carrier_items_newer_key_is_reported() -> None:
    carrier = {"type": "additional_tools", "role": "developer", "tools": [], "zz": 1}
    prepared = _prepare(
        "responses", {**RESPONSES, "input": [carrier, {"role": "user", "content": "hi"}]}
    )
    assert prepared.dropped == ("input[0].zz",)


def test_an_easy_assistant_message_with_input_parts_is_forwarded_as_sent() -> None:
    item = {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "input_text", "text": "a"}],
    }
    prepared = _prepare("responses", {**RESPONSES, "input": [item]})
    assert prepared.params["input"] == [item]


# -- 12, 13: the Anthropic -> chat bridge loses no tool result and no thinking ------------------


def test_two_results_of_one_call_both_reach_the_chat_upstream() -> None:
    results = [
        {"type": "tool_result", "tool_use_id": "t1", "content": "first"},
        {"type": "tool_result", "tool_use_id": "t1", "content": "second", "is_error": True},
    ]
    body = {
        **ANTHROPIC,
        "messages": [
            {"role": "user", "content": "hi"},
            TOOL_USE,
            {"role": "user", "content": results},
        ],
    }
    messages = _sent(_prepare("anthropic", body, upstream="chat"))["messages"]
    tool = [message for message in messages if message["role"] == "tool"]
    assert tool == [{"role": "tool", "tool_call_id": "t1", "content": "first\n\nError: second"}]


def test_a_thinking_only_turn_mid_conversation_reaches_the_chat_upstream() -> None:
    thinking = {
        "role": "assistant",
        "content": [{"type": "thinking", "thinking": "t", "signature": "s"}],
    }
    body = {
        **ANTHROPIC,
        "messages": [
            {"role": "user", "content": "hi"},
            thinking,
            {"role": "user", "content": "again"},
        ],
    }
    prepared = _prepare("anthropic", body, upstream="chat")
    assert _sent(prepared)["messages"][1] == {
        "role": "assistant",
        "content": "",
        "reasoning_content": "t",
    }
    assert prepared.dropped == ()


def test_a_trailing_thinking_only_turn_is_reported() -> None:
    thinking = {
        "role": "assistant",
        "content": [{"type": "thinking", "thinking": "t", "signature": "s"}],
    }
    body = {**ANTHROPIC, "messages": [{"role": "user", "content": "hi"}, thinking]}
    prepared = _prepare("anthropic", body, upstream="chat")
    assert [m["role"] for m in _sent(prepared)["messages"]] == ["user"]
    assert prepared.dropped == ("messages[1]",)


# -- 10, 11: results -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "item",
    [
        pytest.param(item, marks=sdk_features.needs_output_item(item["type"]))
        for item in (
            {"type": "apply_patch_call_output", "id": "o1", "call_id": "c1", "status": "completed"},
            {
                "type": "program_output",
                "id": "p1",
                "call_id": "c1",
                "result": "x",
                "status": "completed",
            },
        )
    ],
)
def test_an_item_whose_status_lacks_in_progress_is_added_with_its_own(item: dict[str, Any]) -> None:
    result = sdk_result([item], "completed", {}, None)
    frames = "".join(synthesize_responses_sse(result, fidelity="full"))
    validate_responses(frames)
    added = next(e.json() for e in parse(frames) if e.event == "response.output_item.added")
    assert added["item"]["status"] == "completed"


def test_every_message_field_reaches_the_accumulated_message() -> None:
    """The anthropic SDK's beta stream helper rebuilds the Message with its ``diagnostics`` and
    ``context_management`` (issue 38 #11: a fixed field list in ``message_start`` lost them)."""
    message: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [{"type": "text", "text": "hello"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": {"input_tokens": 3, "output_tokens": 2},
        "diagnostics": {"cache_miss_reason": None},
        "context_management": {"applied_edits": []},
    }
    frames = "".join(synthesize_anthropic_sse(message))
    validate_anthropic(frames)
    MOCK_FRAMES.append(frames.encode())
    with MOCK_SDK.beta.messages.stream(**REQUEST) as stream:
        final = stream.get_final_message()
    rebuilt = final.model_dump(mode="json")
    assert rebuilt["diagnostics"] == message["diagnostics"]
    assert rebuilt["context_management"] == message["context_management"]


# -- through the proxy, on both loops ------------------------------------------------------------


@pytest.mark.anyio
async def test_the_proxy_answers_the_issues_inputs_as_prepare_does() -> None:
    app = ProxyApp(ProxyConfig(keepalive_s=0.05))
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
        body = {**RESPONSES, "stream": True, "tool_choice": {"type": 0}}
        refused = await http.post("/v1/responses", json=body)
        assert refused.status_code == 400
        assert refused.json()["error"]["param"] == "tool_choice.type"
        body = {**CHAT, "stream": True, "max_tokens": "12"}
        refused = await http.post("/v1/chat/completions", json=body)
        assert refused.status_code == 400
        assert refused.json()["error"]["param"] == "max_tokens"
        part = {"type": "text", "text": "hi", "zz": 1}
        body = {**CHAT, "stream": True, "messages": [{"role": "user", "content": [part]}]}
        async with http.stream("POST", "/v1/chat/completions", json=body) as answer:
            assert answer.status_code == 200
            assert answer.headers["x-aiostream-synth-dropped"] == "messages[0].content[0].zz"
            text = "".join([chunk async for chunk in answer.aiter_text()])
        assert text.rstrip().endswith("data: [DONE]")


def test_a_system_message_directive_that_is_no_object_is_a_400() -> None:
    system = {"role": "system", "content": "s", "output_config": "low"}
    body = {**ANTHROPIC, "messages": [system, {"role": "user", "content": "hi"}]}
    assert _refusal("anthropic", body)["param"] == "messages[0].output_config"
