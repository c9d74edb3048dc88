"""The bridges as pure functions: the checks that need no server.

A Responses request (the Codex fixtures, hand-built histories) is prepared for a chat upstream
with :func:`prepare_request` (``upstream="chat"``), the way the proxy prepares it; chat answers
are converted back with the request's own converter. Every upstream body must validate as the
openai SDK's ``CompletionCreateParamsNonStreaming`` and every converted answer as its
``Response`` (or ``ChatCompletion``, or anthropic's ``Message``).
"""

from __future__ import annotations

import json
import logging
import pathlib
from typing import Any

import openai.types.chat as chat_types
import openai.types.responses as responses_types
import pytest
from anthropic.types import Message
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming
from pydantic import TypeAdapter

from aiostream_synth import BridgeOptions, PreparedRequest, bridge_options, prepare_request
from aiostream_synth._params.removals import Removals
from aiostream_synth.bridges import chat_to_responses_result, responses_to_chat_request
from aiostream_synth.errors import BridgeError

from .support import sdk_features
from .support.bridge_cases import APPLY_PATCH, CHAT_PARAMS, PATCH, SCHEMA, invariants

FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures"
RESPONSES_PARAMS: TypeAdapter[Any] = TypeAdapter(ResponseCreateParamsNonStreaming)
EXEC = {"type": "function", "name": "exec_command", "parameters": SCHEMA, "strict": False}


def fixture(name: str) -> dict[str, Any]:
    data = json.loads((FIXTURES / f"codex-0.171.0-request-{name}.json").read_text())
    body: dict[str, Any] = data["body"]
    return body


def bridged(body: dict[str, Any], options: BridgeOptions | None = None) -> PreparedRequest:
    prepared = prepare_request(
        "responses", {"model": "m", "stream": True, **body}, upstream="chat", bridge=options
    )
    assert prepared.bridged is not None
    return prepared


def upstream_body(body: dict[str, Any], options: BridgeOptions | None = None) -> dict[str, Any]:
    return bridged(body, options).bridged.params  # type: ignore[union-attr]


def completion(
    message: dict[str, Any], finish: str | None = "stop", **extra: Any
) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "upstream",
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        **extra,
    }


def answer(
    body: dict[str, Any], message: dict[str, Any], options: BridgeOptions | None = None, **kw: Any
) -> dict[str, Any]:
    """The Response the client gets for ``body`` when the upstream answers ``message``."""
    prepared = bridged(body, options)
    assert prepared.bridged is not None
    response: dict[str, Any] = prepared.bridged.convert(completion(message, **kw))
    responses_types.Response.model_validate(response)
    return response


# -- the fixtures ------------------------------------------------------------
@pytest.mark.parametrize(
    "name", ["text-turn", "shell-tool-replay", "namespaced-tool-replay", "multi-turn-replay"]
)
def test_fixtures_bridge_to_valid_chat_bodies(name: str) -> None:
    """Checks 1-4: stream false, a valid chat body, one leading system message holding both
    developer texts, 12 function tools (namespaced ones flattened), no web_search, no
    bookkeeping, and the pairing invariant."""
    prepared = bridged(fixture(name))
    body = prepared.bridged.params  # type: ignore[union-attr]
    CHAT_PARAMS.validate_python(body)
    assert body["stream"] is False
    assert "stream_options" not in body
    messages = body["messages"]
    invariants(messages)
    assert messages[0]["role"] == "system"
    assert "<skills_instructions>" in messages[0]["content"]
    assert messages[0]["content"].startswith("You are a codin")
    assert [m["role"] for m in messages[1:3]] == ["user", "user"]
    names = [t["function"]["name"] for t in body["tools"]]
    assert len(names) == 12
    assert "multi_agent_v1__close_agent" in names
    assert all(t["type"] == "function" for t in body["tools"])
    for key in ("include", "store", "prompt_cache_key", "client_metadata", "reasoning", "text"):
        assert key not in body
    assert "metadata" not in body
    notable = {r.path: r for r in prepared.removals.notable}
    assert "web_search" in notable["tools[8]"].reason
    # Nothing else is notable, but for keys an older SDK's web_search tool lacks (pruned and
    # reported before the whole tool is dropped).
    newer = {path for path in notable if path.startswith("tools[8].")}
    assert set(notable) - newer == {"tools[8]"}
    assert bool(newer) == (not sdk_features.WEB_SEARCH_EXTERNAL_ACCESS)


def test_mid_conversation_developer_message() -> None:
    """a developer message after the conversation began is a user message in place;
    with mid_system_policy=system a system one; with hoist it joins the leading one."""
    history = [
        {"role": "developer", "content": "Be brief."},
        {"role": "user", "content": "hi"},
        {"role": "developer", "content": "<approval notice>"},
        {"role": "user", "content": "go"},
    ]
    roles = [(m["role"], m["content"]) for m in upstream_body({"input": history})["messages"]]
    assert roles == [
        ("system", "Be brief."),
        ("user", "hi"),
        ("user", "<approval notice>"),
        ("user", "go"),
    ]
    kept = upstream_body({"input": history}, BridgeOptions(mid_system_policy="system"))
    assert [m["role"] for m in kept["messages"]] == ["system", "user", "system", "user"]
    hoisted = upstream_body({"input": history}, BridgeOptions(mid_system_policy="hoist"))
    assert hoisted["messages"][0]["content"] == "Be brief.\n\n<approval notice>"
    assert [m["role"] for m in hoisted["messages"]] == ["system", "user", "user"]


def test_only_hosted_tools() -> None:
    """with only hosted tools no tools, tool_choice or parallel_tool_calls are sent;
    tool_choice 'required' is a 400 naming tool_choice."""
    tools = [{"type": "web_search"}, {"type": "file_search", "vector_store_ids": ["v"]}]
    body = upstream_body(
        {"input": "hi", "tools": tools, "tool_choice": "auto", "parallel_tool_calls": True}
    )
    assert not {"tools", "tool_choice", "parallel_tool_calls"} & body.keys()
    with pytest.raises(BridgeError) as caught:
        upstream_body({"input": "hi", "tools": tools, "tool_choice": "required"})
    assert caught.value.status_code == 400
    assert caught.value.body["error"]["param"] == "tool_choice"


def test_tool_choice_forcing_a_tool() -> None:
    """A forced function keeps its (flattened) name; one that forces a dropped hosted tool or
    an undeclared name is a 400; allowed_tools narrows the list."""
    namespace = {"type": "namespace", "name": "ns", "description": "", "tools": [EXEC]}
    body = upstream_body(
        {
            "input": "hi",
            "tools": [namespace],
            "tool_choice": {"type": "function", "name": "ns__exec_command"},
        }
    )
    assert body["tool_choice"] == {"type": "function", "function": {"name": "ns__exec_command"}}
    for choice in ({"type": "web_search_preview"}, {"type": "function", "name": "nope"}):
        with pytest.raises(BridgeError):
            upstream_body({"input": "hi", "tools": [EXEC], "tool_choice": choice})
    other = {**EXEC, "name": "other"}
    narrowed = upstream_body(
        {
            "input": "hi",
            "tools": [EXEC, other],
            "tool_choice": {
                "type": "allowed_tools",
                "mode": "required",
                "tools": [{"type": "function", "name": "other"}],
            },
        }
    )
    assert [t["function"]["name"] for t in narrowed["tools"]] == ["other"]
    assert narrowed["tool_choice"] == "required"


# -- history -----------------------------------------------------------------
def test_codex_replays_keep_assistant_answers_and_reasoning() -> None:
    """Codex's replay shapes (assistant messages without status, reasoning with
    ``content: null`` and no id) reach the upstream as assistant text and reasoning_content."""
    history = [
        {"role": "user", "content": [{"type": "input_text", "text": "one"}]},
        {
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "R1"}],
            "content": None,
            "encrypted_content": None,
        },
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "A1"}],
        },
        {"role": "user", "content": [{"type": "input_text", "text": "two"}]},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "R2"}], "content": None},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "A2"}],
        },
        {"role": "user", "content": [{"type": "input_text", "text": "three"}]},
    ]
    messages = upstream_body({"input": history})["messages"]
    assert messages == [
        {"role": "user", "content": "one"},
        {"role": "assistant", "content": "A1", "reasoning_content": "R1"},
        {"role": "user", "content": "two"},
        {"role": "assistant", "content": "A2", "reasoning_content": "R2"},
        {"role": "user", "content": "three"},
    ]


def test_parallel_calls_make_one_assistant_message_with_outputs_pulled_forward() -> None:
    """calls of one turn (interleaved with text) are one
    assistant message; their outputs follow in call order; a notice between them is deferred."""
    namespace = {
        "type": "namespace",
        "name": "multi_agent_v1",
        "description": "",
        "tools": [{"type": "function", "name": "spawn_agent", "parameters": SCHEMA}],
    }
    history = [
        {"role": "developer", "content": "system prompt"},
        {"role": "user", "content": "go"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "R"}]},
        {
            "type": "message",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "Editing now."}],
        },
        {"type": "custom_tool_call", "call_id": "call_A", "name": "apply_patch", "input": PATCH},
        {
            "type": "function_call",
            "call_id": "call_B",
            "name": "spawn_agent",
            "namespace": "multi_agent_v1",
            "arguments": "{}",
        },
        {
            "type": "function_call",
            "call_id": "call_C",
            "name": "exec_command",
            "arguments": '{"cmd": "ls"}',
        },
        {"type": "custom_tool_call_output", "call_id": "call_A", "output": "Success."},
        {"type": "function_call_output", "call_id": "call_B", "output": "spawned"},
        {"role": "developer", "content": "<approval notice>"},
        {
            "type": "function_call_output",
            "call_id": "call_C",
            "output": [{"type": "input_text", "text": "a.txt"}],
        },
    ]
    body = upstream_body({"input": history, "tools": [EXEC, APPLY_PATCH, namespace]})
    messages = body["messages"]
    invariants(messages)
    assert [m["role"] for m in messages] == [
        "system",
        "user",
        "assistant",
        "tool",
        "tool",
        "tool",
        "user",
    ]
    assistant = messages[2]
    assert assistant["content"] == "Editing now."
    assert assistant["reasoning_content"] == "R"
    calls = assistant["tool_calls"]
    assert [c["id"] for c in calls] == ["call_A", "call_B", "call_C"]
    assert [c["function"]["name"] for c in calls] == [
        "apply_patch",
        "multi_agent_v1__spawn_agent",
        "exec_command",
    ]
    assert json.loads(calls[0]["function"]["arguments"]) == {"input": PATCH}
    assert [m["content"] for m in messages[3:6]] == ["Success.", "spawned", "a.txt"]
    assert messages[6] == {"role": "user", "content": "<approval notice>"}


def test_tool_only_turn_has_empty_string_content() -> None:
    """a tool-call-only assistant message has content "" (not null)."""
    history = [
        {"role": "user", "content": "go"},
        {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call", "call_id": "c2", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {"type": "function_call_output", "call_id": "c2", "output": "two"},
    ]
    messages = upstream_body({"input": history, "tools": [EXEC]})["messages"]
    assert messages[1]["content"] == ""
    assert len(messages[1]["tool_calls"]) == 2
    assert "reasoning_content" not in messages[1]
    assert (
        upstream_body({"input": history}, BridgeOptions(assistant_empty_content=None))["messages"][
            1
        ]["content"]
        is None
    )


def test_deepseek_profile_replays_reasoning_or_a_placeholder() -> None:
    """with the deepseek profile every tool-call assistant message carries a non-empty
    reasoning_content (the original, or " "); encrypted reasoning never goes upstream."""
    history = [
        {"role": "user", "content": "go"},
        {"type": "reasoning", "summary": [], "encrypted_content": "gAAAA-opaque"},
        {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "think"}]},
        {"type": "function_call", "call_id": "c2", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c2", "output": "two"},
    ]
    body = upstream_body({"input": history}, bridge_options("deepseek"))
    calls = [m for m in body["messages"] if m.get("tool_calls")]
    assert [m["reasoning_content"] for m in calls] == [" ", "think"]
    assert "encrypted" not in json.dumps(body)
    generic = upstream_body({"input": history})
    assert "reasoning_content" not in next(m for m in generic["messages"] if m.get("tool_calls"))


@pytest.mark.parametrize("field", ["reasoning", "both", "none"])
def test_reasoning_out_field(field: str) -> None:
    history = [
        {"role": "user", "content": "go"},
        {"type": "reasoning", "summary": [{"type": "summary_text", "text": "R"}]},
        {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "A"}]},
        {"role": "user", "content": "again"},
    ]
    assistant = upstream_body({"input": history}, BridgeOptions(reasoning_out_field=field))[  # type: ignore[arg-type]
        "messages"
    ][1]
    expected = {"reasoning": ["reasoning"], "both": ["reasoning_content", "reasoning"], "none": []}
    assert [k for k in assistant if k.startswith("reasoning")] == expected[field]


def test_dangling_calls_and_orphan_outputs_keep_the_pairing_rule() -> None:
    """a call with no output gets the synthesized one; an output with no call before it
    becomes user text (or is dropped, by option)."""
    history = [
        {"type": "function_call_output", "call_id": "gone", "output": "old output"},
        {"role": "user", "content": "go"},
        {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
        {"role": "user", "content": "interrupted"},
    ]
    messages = upstream_body({"input": history})["messages"]
    invariants(messages)
    assert messages[0] == {
        "role": "user",
        "content": "Output of an earlier tool call gone:\nold output",
    }
    assert messages[3] == {
        "role": "tool",
        "tool_call_id": "c1",
        "content": BridgeOptions().dangling_call_output,
    }
    prepared = bridged({"input": history}, BridgeOptions(orphan_output_policy="drop"))
    assert prepared.bridged.params["messages"][0] == {"role": "user", "content": "go"}  # type: ignore[union-attr]
    assert "input[0]" in prepared.removals.paths


def test_a_duplicate_call_id_in_one_turn_gets_its_own_output() -> None:
    """the second call with an id gets a synthesized output."""
    history = [
        {"role": "user", "content": "go"},
        {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "one"},
    ]
    messages = upstream_body({"input": history})["messages"]
    invariants(messages)
    assert [m["content"] for m in messages[2:]] == ["one", BridgeOptions().dangling_call_output]


@pytest.mark.parametrize(
    ("arguments", "policy", "expected"),
    [
        ('{"cmd": "ls"}', "wrap", '{"cmd": "ls"}'),
        ('{"cmd": "l', "wrap", '{"_raw":"{\\"cmd\\": \\"l"}'),
        ('{"cmd": "l', "verbatim", '{"cmd": "l'),
        ('{"cmd": "l', "empty", "{}"),
        ("", "wrap", "{}"),
    ],
)
def test_replayed_arguments_that_are_not_an_object(
    arguments: str, policy: str, expected: str
) -> None:
    """a truncated call of an earlier turn must not fail every later request."""
    history = [
        {"role": "user", "content": "go"},
        {"type": "function_call", "call_id": "c1", "name": "exec_command", "arguments": arguments},
        {"type": "function_call_output", "call_id": "c1", "output": "x"},
    ]
    options = BridgeOptions(invalid_arguments=policy)  # type: ignore[arg-type]
    call = upstream_body({"input": history}, options)["messages"][1]["tool_calls"][0]
    assert call["function"]["arguments"] == expected


def test_reasoning_only_tail_is_dropped() -> None:
    """a trailing reasoning-only assistant block would be a prefill; it is not sent."""
    history = [{"role": "user", "content": "go"}, {"type": "reasoning", "summary": []}]
    assert upstream_body({"input": history})["messages"] == [{"role": "user", "content": "go"}]


def test_user_content_parts() -> None:
    """Text parts join into a string; images keep their URL and a known detail; a file with
    data is a file part; media in tool outputs become placeholders (or a user message)."""
    history = [
        {
            "role": "user",
            "content": [
                {"type": "input_text", "text": "look"},
                {
                    "type": "input_image",
                    "image_url": "data:image/png;base64,AA",
                    "detail": "original",
                },
                {
                    "type": "input_file",
                    "file_data": "data:application/pdf;base64,AA",
                    "filename": "a.pdf",
                },
            ],
        },
        {"type": "function_call", "call_id": "c1", "name": "view_image", "arguments": "{}"},
        {
            "type": "function_call_output",
            "call_id": "c1",
            "output": [
                {"type": "input_text", "text": "here"},
                {"type": "input_image", "image_url": "data:image/png;base64,BB"},
            ],
        },
    ]
    messages = upstream_body({"input": history})["messages"]
    assert messages[0]["content"] == [
        {"type": "text", "text": "look"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,AA"}},
        {
            "type": "file",
            "file": {"file_data": "data:application/pdf;base64,AA", "filename": "a.pdf"},
        },
    ]
    assert messages[2]["content"] == "here\n[input_image omitted]"
    moved = upstream_body({"input": history}, BridgeOptions(tool_output_media="user_message"))
    invariants(moved["messages"])
    assert moved["messages"][3]["content"][1] == {
        "type": "image_url",
        "image_url": {"url": "data:image/png;base64,BB"},
    }


# -- stateless refusals -----------------------------------------------------------
@pytest.mark.parametrize(
    ("extra", "param"),
    [
        ({"previous_response_id": "resp_1"}, "previous_response_id"),
        ({"conversation": "conv_1"}, "conversation"),
        ({"prompt": {"id": "pmpt_1"}}, "prompt"),
        ({"input": [{"type": "item_reference", "id": "msg_1"}]}, "input[0]"),
        (
            {
                "input": [
                    {
                        "role": "user",
                        "content": [{"type": "input_image", "file_id": "file_1", "detail": "auto"}],
                    }
                ]
            },
            "input[0].content[0]",
        ),
        (
            {"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "file_1"}]}]},
            "input[0].content[0]",
        ),
    ],
)
def test_stateful_requests_are_a_400_naming_the_parameter(
    extra: dict[str, Any], param: str
) -> None:
    with pytest.raises(BridgeError) as caught:
        bridged({"input": "hi", **extra})
    assert caught.value.status_code == 400
    assert caught.value.body["error"]["param"] == param


def test_background_mode_is_the_servers_to_serve_not_the_upstreams() -> None:
    """Decision P12: ``background`` is prepared (flagged, removed from what the upstream gets,
    reported) for the serving layer, which serves it from its store or refuses it (400)."""
    prepared = bridged({"input": "hi", "background": True})
    assert prepared.background is True
    assert "background" not in prepared.params
    assert "background" not in upstream_body({"input": "hi", "background": True})
    assert [r.path for r in prepared.removals] == ["background"]


# -- top-level fields -------------------------------------------------------------
def test_top_level_fields() -> None:
    schema = {"name": "out", "schema": {"type": "object"}, "strict": True}
    request = {
        "input": "hi",
        "text": {"format": {"type": "json_schema", **schema}, "verbosity": "low"},
        "max_output_tokens": 50,
        "temperature": 0.2,
        "reasoning": {"effort": "low", "summary": "auto"},
        "include": ["reasoning.encrypted_content"],
        "store": False,
        "prompt_cache_key": "k",
        "metadata": {"a": "b"},
        "instructions": "Be kind.",
    }
    body = upstream_body(request)
    assert body["response_format"] == {"type": "json_schema", "json_schema": schema}
    assert body["max_tokens"] == 50
    assert body["temperature"] == 0.2
    assert body["reasoning_effort"] == "low"
    assert body["messages"][0] == {"role": "system", "content": "Be kind."}
    assert (
        not {"verbosity", "store", "prompt_cache_key", "metadata", "include", "text"} & body.keys()
    )
    other = upstream_body(
        request,
        bridge_options(
            "deepseek",
            max_tokens_field="max_completion_tokens",
            forward_fields=frozenset({"prompt_cache_key", "verbosity"}),
            upstream_extra_body={"thinking": {"type": "enabled"}},
        ),
    )
    assert other["max_completion_tokens"] == 50
    assert other["reasoning_effort"] == "high"  # DeepSeek takes high or max
    assert other["prompt_cache_key"] == "k"
    assert other["verbosity"] == "low"
    assert other["thinking"] == {"type": "enabled"}


def test_codex_request_bridges_byte_identically_twice() -> None:
    """determinism (the upstream's prefix cache depends on it)."""
    body = fixture("multi-turn-replay")
    first = json.dumps(upstream_body(body))
    assert json.dumps(upstream_body(body)) == first


# -- custom and namespaced tools, both ways (checks 12-16) -----------------------------------
def test_custom_tool_is_a_function_with_the_grammar_and_comes_back_custom() -> None:
    """Checks 12-13: apply_patch becomes a one-string-parameter function whose description has
    the Lark grammar; the model's call comes back as custom_tool_call with the raw patch,
    whatever wrapper the model chose."""
    request = {"input": "patch it", "tools": [APPLY_PATCH, EXEC]}
    (tool, _) = upstream_body(request)["tools"]
    function = tool["function"]
    assert function["name"] == "apply_patch"
    assert function["parameters"]["required"] == ["input"]
    assert function["parameters"]["properties"]["input"]["type"] == "string"
    assert "```lark\nstart: begin_patch hunk+ end_patch\n```" in function["description"]
    for arguments in (
        json.dumps({"input": PATCH}),
        json.dumps({"patch": PATCH}),
        PATCH,
        json.dumps(PATCH),
    ):
        call = {
            "id": "call_A",
            "type": "function",
            "function": {"name": "apply_patch", "arguments": arguments},
        }
        response = answer(
            request,
            {"role": "assistant", "content": None, "tool_calls": [call]},
            finish="tool_calls",
        )
        (item,) = response["output"]
        assert item["type"] == "custom_tool_call"
        assert item["input"] == PATCH
        assert item["call_id"] == "call_A"
        assert item["id"].startswith("ctc_")


def test_passthrough_custom_tools_for_openai_upstreams() -> None:
    body = upstream_body({"input": "x", "tools": [APPLY_PATCH]}, bridge_options("openai"))
    assert body["tools"] == [
        {
            "type": "custom",
            "custom": {
                "name": "apply_patch",
                "description": APPLY_PATCH["description"],
                "format": {
                    "type": "grammar",
                    "grammar": {
                        "definition": "start: begin_patch hunk+ end_patch",
                        "syntax": "lark",
                    },
                },
            },
        }
    ]
    assert body["messages"] == [{"role": "user", "content": "x"}]


@sdk_features.needs_namespace_tools  # the echoed tools hold the client's namespace tools
def test_namespaced_call_is_restored_and_replayed_flat() -> None:
    """A namespaced tool call comes back to the client with its namespace, and is replayed flat."""
    namespace = {
        "type": "namespace",
        "name": "multi_agent_v1",
        "description": "agents",
        "tools": [{"type": "function", "name": "spawn_agent", "parameters": SCHEMA}],
    }
    request = {"input": "spawn", "tools": [namespace]}
    call = {
        "id": "call_B",
        "type": "function",
        "function": {"name": "multi_agent_v1__spawn_agent", "arguments": "{}"},
    }
    response = answer(
        request, {"role": "assistant", "content": "", "tool_calls": [call]}, finish="tool_calls"
    )
    (item,) = response["output"]
    assert (item["name"], item["namespace"], item["type"]) == (
        "spawn_agent",
        "multi_agent_v1",
        "function_call",
    )
    assert response["tools"] == [namespace]  # the client's tools, unflattened
    replay = [
        {"role": "user", "content": "spawn"},
        {
            **{
                k: item[k]
                for k in ("type", "call_id", "name", "namespace", "arguments", "id", "status")
            }
        },
        {"type": "function_call_output", "call_id": "call_B", "output": "ok"},
    ]
    messages = upstream_body({"input": replay, "tools": [namespace]})["messages"]
    assert messages[1]["tool_calls"][0]["function"]["name"] == "multi_agent_v1__spawn_agent"


@pytest.mark.parametrize(
    "hallucinated",
    ["functions__exec_command", "functions.exec_command", "default_api__exec_command"],
)
def test_hallucinated_prefixes_are_repaired(hallucinated: str) -> None:
    """A function name the model prefixed on its own (``functions.``...) is repaired."""
    call = {"id": "c", "type": "function", "function": {"name": hallucinated, "arguments": "{}"}}
    response = answer(
        {"input": "x", "tools": [EXEC]},
        {"role": "assistant", "tool_calls": [call]},
        finish="tool_calls",
    )
    assert response["output"][0]["name"] == "exec_command"


def test_undeclared_names_stay_as_they_are() -> None:
    call = {"id": "c", "type": "function", "function": {"name": "mystery", "arguments": "{}"}}
    response = answer(
        {"input": "x", "tools": [EXEC]},
        {"role": "assistant", "tool_calls": [call]},
        finish="tool_calls",
    )
    assert response["output"][0]["name"] == "mystery"


def test_long_or_dotted_names_are_aliased_and_restored() -> None:
    long_name = "mcp__" + "x" * 70
    tools = [{**EXEC, "name": "mcp__node_repl.js"}, {**EXEC, "name": long_name}]
    body = upstream_body({"input": "x", "tools": tools})
    aliases = [t["function"]["name"] for t in body["tools"]]
    assert aliases[0] == "mcp__node_repl_js"
    assert len(aliases[1]) == 64
    calls = [
        {"id": f"c{k}", "type": "function", "function": {"name": alias, "arguments": "{}"}}
        for k, alias in enumerate(aliases)
    ]
    response = answer(
        {"input": "x", "tools": tools},
        {"role": "assistant", "tool_calls": calls},
        finish="tool_calls",
    )
    assert [i["name"] for i in response["output"]] == ["mcp__node_repl.js", long_name]


def test_call_ids_are_unique_and_fresh() -> None:
    """an empty id, an id used twice in one answer, an id already in the history."""
    history = [
        {"role": "user", "content": "go"},
        {"type": "function_call", "call_id": "call_0", "name": "exec_command", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_0", "output": "x"},
    ]
    calls = [
        {"id": "", "type": "function", "function": {"name": "exec_command", "arguments": "{}"}},
        {
            "id": "call_0",
            "type": "function",
            "function": {"name": "exec_command", "arguments": "{}"},
        },
        {
            "id": "call_9",
            "type": "function",
            "function": {"name": "exec_command", "arguments": "{}"},
        },
        {
            "id": "call_9",
            "type": "function",
            "function": {"name": "exec_command", "arguments": "{}"},
        },
    ]
    response = answer(
        {"input": history, "tools": [EXEC]},
        {"role": "assistant", "tool_calls": calls},
        finish="tool_calls",
    )
    ids = [item["call_id"] for item in response["output"]]
    assert len(set(ids)) == 4
    assert "call_0" not in ids
    assert "" not in ids
    assert ids[2] == "call_9"


def test_local_shell_both_ways() -> None:
    request = {"input": "ls", "tools": [{"type": "local_shell"}]}
    (tool,) = upstream_body(request)["tools"]
    assert tool["function"]["name"] == "local_shell"
    arguments = json.dumps({"command": ["ls", "-l"], "workdir": "/tmp"})
    call = {
        "id": "c",
        "type": "function",
        "function": {"name": "local_shell", "arguments": arguments},
    }
    response = answer(request, {"role": "assistant", "tool_calls": [call]}, finish="tool_calls")
    (item,) = response["output"]
    assert item["type"] == "local_shell_call"
    assert item["action"]["command"] == ["ls", "-l"]
    assert item["action"]["working_directory"] == "/tmp"


# -- the answer: reasoning, status, usage, echo (checks 10, 17-19, 25, 26) ----------------------
@pytest.mark.parametrize(
    "message",
    [
        {"content": "A", "reasoning_content": "R"},
        {"content": "A", "reasoning": "R"},
        {"content": "A", "reasoning": {"text": "R"}},
        {
            "content": "A",
            "reasoning_details": [
                {"type": "reasoning.text", "text": "R"},
                {"type": "reasoning.encrypted", "data": "x"},
            ],
        },
        {"content": "A", "thinking": "R"},
        {"content": "<think>R</think>\n\nA"},
    ],
)
def test_every_reasoning_spelling_gives_the_same_items(message: dict[str, Any]) -> None:
    """Checks 10 and 18: a reasoning item with one summary_text, then clean output_text."""
    response = answer({"input": "x"}, {"role": "assistant", **message})
    reasoning, text = response["output"]
    assert reasoning["summary"] == [{"type": "summary_text", "text": "R"}]
    assert "content" not in reasoning
    assert text["content"][0]["text"] == "A"


def test_openless_think_tag_by_option() -> None:
    message = {"role": "assistant", "content": "R</think>A"}
    plain = answer({"input": "x"}, message)
    assert [i["type"] for i in plain["output"]] == ["message"]
    parsed = answer({"input": "x"}, message, BridgeOptions(think_tags="leading_or_openless"))
    assert [i["type"] for i in parsed["output"]] == ["reasoning", "message"]


def test_reasoning_item_style_and_reasoning_only_answers() -> None:
    message = {"role": "assistant", "content": "", "reasoning_content": "R"}
    (item,) = answer({"input": "x"}, message, BridgeOptions(reasoning_item_style="both"))["output"]
    assert item["content"] == [{"type": "reasoning_text", "text": "R"}]
    assert item["summary"] == [{"type": "summary_text", "text": "R"}]
    promoted = answer({"input": "x"}, message, BridgeOptions(reasoning_only="promote"))
    assert promoted["output"][1]["content"][0]["text"] == "R"


def test_an_empty_answer_still_has_a_message() -> None:
    (item,) = answer({"input": "x"}, {"role": "assistant", "content": None})["output"]
    assert item["type"] == "message"
    assert item["content"][0]["text"] == ""


def test_refusal() -> None:
    (item,) = answer({"input": "x"}, {"role": "assistant", "content": None, "refusal": "No."})[
        "output"
    ]
    assert item["content"] == [{"type": "refusal", "refusal": "No."}]


@pytest.mark.parametrize(
    ("finish", "options", "status", "reason"),
    [
        ("length", None, "incomplete", "max_output_tokens"),
        ("length", BridgeOptions(length_status="completed"), "completed", "max_output_tokens"),
        ("content_filter", None, "incomplete", "content_filter"),
        ("tool_calls", None, "completed", None),
        (None, None, "completed", None),
        ("weird", None, "completed", None),
    ],
)
def test_finish_reason_to_status(
    finish: str | None, options: BridgeOptions | None, status: str, reason: str | None
) -> None:
    """The chat finish reason becomes the Responses status and incomplete reason."""
    response = answer({"input": "x"}, {"role": "assistant", "content": "A"}, options, finish=finish)
    assert response["status"] == status
    assert (response["incomplete_details"] or {}).get("reason") == reason


def test_error_answers_with_status_200_are_failures() -> None:
    """a 200 that carries an error, has no choices, or says finish_reason error."""
    from aiostream_synth import BackendError

    prepared = bridged({"input": "x"})
    convert = prepared.bridged.convert  # type: ignore[union-attr]
    results: list[dict[str, Any]] = [
        {"error": {"message": "boom"}},
        {"choices": []},
        completion({"role": "assistant", "content": "A"}, finish="error"),
    ]
    for result in results:
        with pytest.raises(BackendError) as caught:
            convert(result)
        assert caught.value.status_code == 502


@pytest.mark.parametrize(
    "usage",
    [
        None,
        {
            "prompt_tokens": 5,
            "completion_tokens": 2,
            "total_tokens": 7,
            "prompt_tokens_details": {"cached_tokens": None},
        },
        {
            "prompt_tokens": 5,
            "completion_tokens": 2,
            "prompt_cache_hit_tokens": 3,
            "completion_tokens_details": {"reasoning_tokens": 1},
        },
    ],
)
def test_usage_counters_are_always_integers(usage: dict[str, Any] | None) -> None:
    """cached_tokens, cache_write_tokens and reasoning_tokens are integers, and the
    Response validates (answer() validates it)."""
    extra: dict[str, Any] = {} if usage is None else {"usage": usage}
    response = answer({"input": "x"}, {"role": "assistant", "content": "A"}, None, **extra)
    counters = response["usage"]
    assert isinstance(counters["input_tokens_details"]["cached_tokens"], int)
    assert isinstance(counters["input_tokens_details"]["cache_write_tokens"], int)
    assert isinstance(counters["output_tokens_details"]["reasoning_tokens"], int)
    if usage and "prompt_cache_hit_tokens" in usage:
        assert counters["input_tokens_details"]["cached_tokens"] == 3
        assert counters["total_tokens"] == 7


def test_estimated_usage() -> None:
    response = answer(
        {"input": "x" * 400},
        {"role": "assistant", "content": "A" * 40},
        BridgeOptions(estimate_usage=True),
    )
    assert response["usage"]["input_tokens"] > 100
    assert response["usage"]["output_tokens"] == 10


def test_truncated_prompt_is_warned_about(caplog: pytest.LogCaptureFixture) -> None:
    """A prompt the upstream truncated is logged as a warning."""
    caplog.set_level(logging.WARNING, "aiostream_synth.bridge")
    usage = {"prompt_tokens": 4096, "completion_tokens": 1, "total_tokens": 4097}
    answer({"input": "word " * 15000}, {"role": "assistant", "content": "A"}, usage=usage)
    assert [r.message for r in caplog.records if "truncated" in r.message]


def test_the_response_echoes_the_clients_request() -> None:
    """model, tools, instructions... are the client's, not the upstream's."""
    request = {
        "model": "gpt-client",
        "input": "x",
        "instructions": "Be kind.",
        "tools": [EXEC, {"type": "web_search"}],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
        "temperature": 0.5,
        "reasoning": {"effort": "low", "summary": "auto"},
        "metadata": {"k": "v"},
        "max_output_tokens": 99,
    }
    response = answer(request, {"role": "assistant", "content": "A"})
    assert response["model"] == "gpt-client"
    assert response["tools"] == [EXEC, {"type": "web_search"}]
    assert response["instructions"] == "Be kind."
    assert response["parallel_tool_calls"] is False
    assert response["temperature"] == 0.5
    assert response["reasoning"] == {"effort": "low", "summary": "auto"}
    assert response["metadata"] == {"k": "v"}
    assert response["max_output_tokens"] == 99
    assert response["previous_response_id"] is None


def test_empty_probe_is_answered_locally() -> None:
    """``input: []`` with a tiny token limit needs no upstream call."""
    prepared = bridged({"input": [], "max_output_tokens": 1})
    local = prepared.bridged.local_result  # type: ignore[union-attr]
    responses_types.Response.model_validate(local)
    assert local["status"] == "completed"
    assert bridged({"input": "x", "max_output_tokens": 1}).bridged.local_result is None  # type: ignore[union-attr]


@sdk_features.needs_namespace_tools  # the echoed tools hold the client's namespace tools
def test_pure_functions_work_on_a_raw_client_body() -> None:
    """The library surface without the proxy: the client's own body (namespaces not yet
    flattened, Codex replay shapes) in, a chat body out; the answer back."""
    body = fixture("namespaced-tool-replay")
    chat, ctx = responses_to_chat_request(body)
    CHAT_PARAMS.validate_python(chat)
    invariants(chat["messages"])
    assert any(t["function"]["name"] == "multi_agent_v1__close_agent" for t in chat["tools"])
    response = chat_to_responses_result(completion({"role": "assistant", "content": "done"}), ctx)
    responses_types.Response.model_validate(response)
    assert response["model"] == body["model"]


# -- the reverse direction -----------------------------------------------------------
def chat_bridged(body: dict[str, Any], upstream: str) -> PreparedRequest:
    prepared = prepare_request("chat", {"model": "m", "stream": True, **body}, upstream=upstream)
    assert prepared.bridged is not None
    return prepared


def test_chat_client_on_a_responses_upstream() -> None:
    """strict false for tools without strict, store false, instructions from the
    system message; the answer is a valid ChatCompletion with tool calls."""
    tool = {"type": "function", "function": {"name": "lookup", "parameters": SCHEMA}}
    prepared = chat_bridged(
        {
            "messages": [
                {"role": "system", "content": "Be kind."},
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": "hi"},
                        {"type": "image_url", "image_url": {"url": "https://x/y.png"}},
                    ],
                },
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "lookup", "arguments": "{}"},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "sunny"},
            ],
            "tools": [tool],
            "max_tokens": 30,
            "stop": ["x"],
            "response_format": {"type": "json_object"},
        },
        "responses",
    )
    body = prepared.bridged.params  # type: ignore[union-attr]
    RESPONSES_PARAMS.validate_python(body)
    assert body["instructions"] == "Be kind."
    assert body["store"] is False
    assert body["tools"] == [
        {"type": "function", "name": "lookup", "parameters": SCHEMA, "strict": False}
    ]
    assert body["max_output_tokens"] == 30
    assert body["text"] == {"format": {"type": "json_object"}}
    assert [i["type"] for i in body["input"]] == [
        "message",
        "function_call",
        "function_call_output",
    ]
    assert body["input"][0]["content"][1] == {
        "type": "input_image",
        "image_url": "https://x/y.png",
        "detail": "auto",
    }
    assert "stop" in prepared.removals.paths
    result = {
        "id": "resp_abc",
        "object": "response",
        "created_at": 5,
        "status": "completed",
        "model": "up",
        "output": [
            {"type": "reasoning", "id": "rs_1", "summary": [{"type": "summary_text", "text": "R"}]},
            {
                "type": "function_call",
                "id": "fc_1",
                "call_id": "call_9",
                "name": "lookup",
                "arguments": "{}",
                "status": "completed",
            },
        ],
        "usage": {
            "input_tokens": 3,
            "output_tokens": 2,
            "total_tokens": 5,
            "input_tokens_details": {"cached_tokens": 1},
            "output_tokens_details": {"reasoning_tokens": 1},
        },
    }
    converted = prepared.bridged.convert(result)  # type: ignore[union-attr]
    chat_types.ChatCompletion.model_validate(converted)
    choice = converted["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"][0]["id"] == "call_9"
    assert choice["message"]["reasoning_content"] == "R"
    assert converted["id"] == "chatcmpl-abc"
    assert converted["model"] == "m"
    assert converted["usage"]["prompt_tokens_details"]["cached_tokens"] == 1


@pytest.mark.parametrize(
    ("extra", "param"), [({"n": 2}, "n"), ({"modalities": ["text", "audio"]}, "audio")]
)
def test_chat_requests_responses_cannot_serve(extra: dict[str, Any], param: str) -> None:
    with pytest.raises(BridgeError) as caught:
        chat_bridged({"messages": [{"role": "user", "content": "hi"}], **extra}, "responses")
    assert caught.value.body["error"]["param"] == param


def test_failed_responses_result_is_a_backend_error() -> None:
    from aiostream_synth import BackendError
    from aiostream_synth.engine import classify_failure

    prepared = chat_bridged({"messages": [{"role": "user", "content": "hi"}]}, "responses")
    failed = {
        "id": "resp_1",
        "status": "failed",
        "output": [],
        "error": {"code": "context_length_exceeded", "message": "too long"},
    }
    with pytest.raises(BackendError) as caught:
        prepared.bridged.convert(failed)  # type: ignore[union-attr]
    assert classify_failure(caught.value).code == "context_length_exceeded"


# -- Anthropic clients on chat and Responses upstreams ----------------------------------------
CLAUDE_HISTORY: dict[str, Any] = {
    "model": "claude-x",
    "max_tokens": 1000,
    "stream": True,
    "system": [
        {"type": "text", "text": "x-anthropic-billing-header: cc_version=2.1.328;"},
        {"type": "text", "text": "You are Claude Code."},
    ],
    "tools": [{"name": "Bash", "description": "Run a command", "input_schema": SCHEMA}],
    "messages": [
        {"role": "user", "content": "list files"},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "use ls", "signature": "sig"},
                {"type": "text", "text": "Listing."},
                {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"cmd": "ls"}},
                {"type": "tool_use", "id": "toolu_2", "name": "Bash", "input": {"cmd": "pwd"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_2", "content": "/home"},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": [{"type": "text", "text": "a.txt"}],
                    "is_error": True,
                },
                {"type": "text", "text": "and now?"},
            ],
        },
    ],
    "thinking": {"type": "enabled", "budget_tokens": 2000},
    "tool_choice": {"type": "auto", "disable_parallel_tool_use": True},
}


def test_anthropic_client_on_a_chat_upstream() -> None:
    prepared = prepare_request("anthropic", CLAUDE_HISTORY, upstream="chat")
    body = prepared.bridged.params  # type: ignore[union-attr]
    CHAT_PARAMS.validate_python(body)
    messages = body["messages"]
    invariants(messages)
    assert messages[0] == {"role": "system", "content": "You are Claude Code."}
    assistant = messages[2]
    assert assistant["content"] == "Listing."
    assert assistant["reasoning_content"] == "use ls"
    assert [c["id"] for c in assistant["tool_calls"]] == ["toolu_1", "toolu_2"]
    assert messages[3] == {"role": "tool", "tool_call_id": "toolu_1", "content": "Error: a.txt"}
    assert messages[4] == {"role": "tool", "tool_call_id": "toolu_2", "content": "/home"}
    assert messages[5] == {"role": "user", "content": "and now?"}
    assert body["tools"][0]["function"]["parameters"] == SCHEMA
    assert body["reasoning_effort"] == "low"
    assert body["parallel_tool_calls"] is False
    assert body["max_tokens"] == 1000
    result = completion(
        {
            "role": "assistant",
            "content": "Done.",
            "reasoning_content": "R",
            "tool_calls": [
                {
                    "id": "call.1",
                    "type": "function",
                    "function": {"name": "Bash", "arguments": '{"cmd": "ls"}'},
                }
            ],
        },
        finish="tool_calls",
        usage={
            "prompt_tokens": 10,
            "completion_tokens": 3,
            "prompt_tokens_details": {"cached_tokens": 4},
        },
    )
    message = prepared.bridged.convert(result)  # type: ignore[union-attr]
    Message.model_validate(message)
    assert [b["type"] for b in message["content"]] == ["thinking", "text", "tool_use"]
    assert message["content"][2]["id"] == "call_1"
    assert message["content"][2]["input"] == {"cmd": "ls"}
    assert message["stop_reason"] == "tool_use"
    assert message["usage"]["input_tokens"] == 6
    assert message["usage"]["cache_read_input_tokens"] == 4
    assert message["model"] == "claude-x"


def test_anthropic_client_on_a_responses_upstream_goes_through_chat() -> None:
    prepared = prepare_request("anthropic", CLAUDE_HISTORY, upstream="responses")
    body = prepared.bridged.params  # type: ignore[union-attr]
    RESPONSES_PARAMS.validate_python(body)
    assert body["instructions"] == "You are Claude Code."
    kinds = [i["type"] for i in body["input"]]
    assert kinds == [
        "message",
        "message",
        "function_call",
        "function_call",
        "function_call_output",
        "function_call_output",
        "message",
    ]
    result = {
        "id": "resp_1",
        "status": "completed",
        "model": "up",
        "created_at": 1,
        "output": [
            {
                "type": "message",
                "id": "m",
                "role": "assistant",
                "status": "completed",
                "content": [{"type": "output_text", "text": "Hi", "annotations": []}],
            }
        ],
        "usage": {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4},
    }
    message = prepared.bridged.convert(result)  # type: ignore[union-attr]
    Message.model_validate(message)
    assert message["content"] == [{"type": "text", "text": "Hi"}]
    assert message["stop_reason"] == "end_turn"


def test_chat_client_on_an_anthropic_upstream() -> None:
    prepared = chat_bridged(
        {
            "messages": [
                {"role": "system", "content": "sys"},
                {"role": "user", "content": "hi"},
                {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": "c1",
                            "type": "function",
                            "function": {"name": "f", "arguments": '{"a": 1}'},
                        }
                    ],
                },
                {"role": "tool", "tool_call_id": "c1", "content": "r"},
                {"role": "user", "content": "more"},
            ],
            "tools": [{"type": "function", "function": {"name": "f", "parameters": SCHEMA}}],
            "tool_choice": "required",
            "stop": "END",
        },
        "anthropic",
    )
    body = prepared.bridged.params  # type: ignore[union-attr]
    assert body["system"] == "sys"
    assert [m["role"] for m in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][2]["content"] == [
        {"type": "tool_result", "tool_use_id": "c1", "content": "r"},
        {"type": "text", "text": "more"},
    ]
    assert body["tool_choice"] == {"type": "any"}
    assert body["stop_sequences"] == ["END"]
    assert body["max_tokens"] > 0
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude",
        "content": [
            {"type": "text", "text": "ok"},
            {"type": "tool_use", "id": "t1", "name": "f", "input": {"a": 2}},
        ],
        "stop_reason": "tool_use",
        "usage": {"input_tokens": 5, "output_tokens": 2, "cache_read_input_tokens": 1},
    }
    converted = prepared.bridged.convert(message)  # type: ignore[union-attr]
    chat_types.ChatCompletion.model_validate(converted)
    choice = converted["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert json.loads(choice["message"]["tool_calls"][0]["function"]["arguments"]) == {"a": 2}
    assert converted["usage"]["prompt_tokens"] == 6


def test_what_the_bridges_cannot_carry_is_reported() -> None:
    """P10 across the bridges: a function tool's output_schema, the opaque part of a replayed
    reasoning item, a non-text part of an assistant message, a chat participant's name: each
    is left out with a removal naming its path in the client's body; an assistant refusal
    replayed to an Anthropic upstream stays as text."""
    prepared = bridged(
        {
            "input": [
                {"role": "user", "content": "go"},
                {
                    "type": "reasoning",
                    "summary": [{"type": "summary_text", "text": "R"}],
                    "encrypted_content": "gAAAA-opaque",
                },
                {
                    "type": "message",
                    "role": "assistant",
                    "content": [{"type": "output_text", "text": "A"}],
                },
                {"role": "user", "content": "again"},
            ],
            "tools": [{**EXEC, "output_schema": {"type": "object"}}],
        }
    )
    removed = {r.path: r for r in prepared.removals}
    assert "tools[0].output_schema" in removed
    assert removed["input[1].encrypted_content"].benign
    messages = prepared.bridged.params["messages"]  # type: ignore[union-attr]
    assert messages[1] == {"role": "assistant", "content": "A", "reasoning_content": "R"}
    # The pure function takes bodies no validator has seen: an image in an assistant message.
    image = {"type": "input_image", "image_url": "https://x/y.png", "detail": "auto"}
    report = Removals()
    responses_to_chat_request(
        {
            "model": "m",
            "input": [{"role": "assistant", "content": [image]}, {"role": "user", "content": "x"}],
        },
        removals=report,
    )
    assert report.paths == ["input[0].content[0]"]
    for upstream in ("responses", "anthropic"):
        chat = chat_bridged(
            {
                "messages": [
                    {"role": "user", "content": "hi", "name": "alice"},
                    {"role": "assistant", "content": None, "refusal": "No."},
                    {"role": "user", "content": "please"},
                ]
            },
            upstream,
        )
        assert "messages[0].name" in chat.removals.paths
        assert "No." in json.dumps(chat.bridged.params)  # type: ignore[union-attr]
