"""Responses request side: sanitize (as decision P10 has it), validate with
pruning, dispatch."""

from __future__ import annotations

import copy
import json
import logging
import pathlib
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from aiostream_synth._params.pruning import delete_path
from aiostream_synth._params.removals import Removals
from aiostream_synth.errors import InvalidRequestError
from aiostream_synth.params import (
    restore_namespace_tool_calls,
    sanitize_streaming_responses_body,
    validate_streaming_responses_params,
    wants_stream,
)

from .support import sdk_features

# Real Codex CLI 0.171.0 captures (personal paths replaced), copied from shared/fixtures.
FIXTURES = pathlib.Path(__file__).resolve().parent / "fixtures"

FN = {"type": "function", "name": "f", "parameters": {"type": "object"}, "strict": False}


def _sanitize(body: dict[str, Any], **kw: Any) -> dict[str, Any]:
    return sanitize_streaming_responses_body(body, **kw)[0]


def _fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"codex-0.171.0-request-{name}.json").read_text())
    return data["body"]  # type: ignore[no-any-return]


# -- fixtures: real Codex traffic -----------------------------------------------------------------


@pytest.mark.parametrize("name", ["text-turn", "shell-tool-replay", "namespaced-tool-replay"])
def test_real_codex_requests_sanitize_and_validate(name: str) -> None:
    """Each capture sanitizes and validates; client_metadata gone; instructions hoisted; tools flat."""
    body = _fixture(name)
    before = copy.deepcopy(body)
    cleaned, ns_map = sanitize_streaming_responses_body(body)
    params = validate_streaming_responses_params(cleaned)
    assert body == before
    assert "client_metadata" not in cleaned
    assert "stream" not in cleaned
    assert cleaned["instructions"].startswith("You are a coding agent")
    assert all(item.get("role") != "developer" for item in cleaned["input"])
    names = [t.get("name") for t in cleaned["tools"]]
    assert "multi_agent_v1__close_agent" in names
    assert ns_map["multi_agent_v1__close_agent"] == ("multi_agent_v1", "close_agent")
    assert {"type": "web_search", "external_web_access": True} in cleaned["tools"]
    dumped = params.model_dump(exclude_unset=True)
    assert dumped["prompt_cache_key"] == body["prompt_cache_key"]
    assert [i.get("type") for i in dumped["input"]] == [i.get("type") for i in cleaned["input"]]


def test_replayed_namespaced_call_is_flattened_and_restored() -> None:
    """The replayed call reaches the backend flat; a backend call with the flat name goes back namespaced."""
    cleaned, ns_map = sanitize_streaming_responses_body(_fixture("namespaced-tool-replay"))
    (call,) = [i for i in cleaned["input"] if i.get("type") == "function_call"]
    assert call["name"] == "multi_agent_v1__close_agent"
    assert "namespace" not in call
    answer = [
        {
            "type": "function_call",
            "name": "multi_agent_v1__close_agent",
            "call_id": "c",
            "arguments": "{}",
        }
    ]
    (restored,) = restore_namespace_tool_calls(answer, ns_map)
    assert (restored["namespace"], restored["name"]) == ("multi_agent_v1", "close_agent")


def test_user_messages_keep_their_text_when_ids_are_pruned(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Codex messages carry an id the SDK's input-message types lack: it is pruned, the message
    kept, and the removal reported without a WARNING (Codex sends one on every item)."""
    caplog.set_level(logging.WARNING, "aiostream_synth")
    removals = Removals()
    cleaned, _ = sanitize_streaming_responses_body(_fixture("text-turn"), removals=removals)
    params = validate_streaming_responses_params(cleaned, removals=removals)
    users = [i for i in params.model_dump(exclude_unset=True)["input"] if i.get("role") == "user"]
    assert len(users) == 2
    assert all("id" not in u for u in users)
    assert "Do it SCENARIO:ns_tool" in json.dumps(users)
    assert "input[2].id" in removals.paths
    # Nothing notable but, with an SDK older than Codex's web_search tool, that tool's newer key.
    newer = [] if sdk_features.WEB_SEARCH_EXTERNAL_ACCESS else ["tools[8].external_web_access"]
    assert [removal.path for removal in removals.notable] == newer
    assert not caplog.records


# -- sanitize ---------------------------------------------------------------------------------------


def test_stream_fields_and_unknown_keys_are_removed(caplog: pytest.LogCaptureFixture) -> None:
    """stream/stream_options always go; client bookkeeping too, in one DEBUG record."""
    caplog.set_level(logging.DEBUG, "aiostream_synth")
    cleaned = _sanitize(
        {
            "input": "hi",
            "stream": True,
            "stream_options": {},
            "client_metadata": {},
            "store": False,
            "prompt_cache_key": "k",
        }
    )
    assert cleaned == {"input": "hi", "store": False, "prompt_cache_key": "k"}
    (record,) = caplog.records
    assert record.levelno == logging.DEBUG
    assert "client_metadata" in record.getMessage()


def test_tools_none_becomes_empty_and_absent_stays_absent() -> None:
    """tools: None → []; no tools key → none created."""
    assert _sanitize({"input": "x", "tools": None})["tools"] == []
    assert "tools" not in _sanitize({"input": "x"})


@pytest.mark.parametrize(
    ("tool", "outcome"),
    [
        ({"type": "definitely_not_a_tool"}, "dropped"),
        (
            {"type": "function", "name": "f", "parameters": {}},
            "kept",
        ),  # no strict: as SDKs write it
        ({"type": "function", "name": "f", "strict": True}, "kept"),  # no parameters
        ({"type": "function", "name": "f"}, "kept"),
        ({"type": "custom", "name": "c"}, "kept"),
        ({"type": "web_search"}, "kept"),
        (FN, "kept"),
        ({"type": "custom", "name": "c", "format": {}}, "400"),  # a format without a type
        ({"type": "function", "name": 5}, "400"),
        ("a string", "400"),
    ],
)
def test_tools_are_kept_unless_their_type_is_unknown(
    tool: Any, outcome: str, caplog: pytest.LogCaptureFixture
) -> None:
    """Decision P10: a missing key never removes a tool; an unknown type is dropped with one
    WARNING naming it; a wrong present value is a validation error (a 400), never a drop."""
    caplog.set_level(logging.WARNING, "aiostream_synth")
    tools = _sanitize({"input": "x", "tools": [tool]})["tools"]
    warnings = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    if outcome == "dropped":
        assert tools == []
        (warning,) = warnings
        assert "tools[0]" in warning
        assert "definitely_not_a_tool" in warning
        return
    assert tools == [tool]
    assert warnings == []
    if outcome == "kept":
        params = validate_streaming_responses_params({"input": "x", "tools": tools})
        assert params.model_dump(exclude_unset=True)["tools"] == [tool]
    else:
        with pytest.raises(ValidationError):
            validate_streaming_responses_params({"input": "x", "tools": tools})


def test_drop_options(caplog: pytest.LogCaptureFixture) -> None:
    """drop_custom_tools drops custom; drop_hosted_tools drops all but function/custom; one
    WARNING per call names what went and why."""
    caplog.set_level(logging.WARNING, "aiostream_synth")
    tools = [FN, {"type": "custom", "name": "c"}, {"type": "web_search"}]
    assert _sanitize({"input": "x", "tools": tools})["tools"] == tools
    assert _sanitize({"input": "x", "tools": tools}, drop_custom_tools=True)["tools"] == [
        FN,
        {"type": "web_search"},
    ]
    (record,) = caplog.records
    assert "tools[1] (custom tool, dropped by configuration" in record.getMessage()
    caplog.clear()
    assert _sanitize({"input": "x", "tools": tools}, drop_hosted_tools=True)["tools"] == tools[:2]
    (record,) = caplog.records
    assert "tools[2] (hosted tool 'web_search'" in record.getMessage()


def test_unknown_keys_in_a_tool_are_pruned_not_the_tool(caplog: pytest.LogCaptureFixture) -> None:
    """A tool flag newer than the SDK is pruned (one WARNING with its path) and the tool kept."""
    caplog.set_level(logging.WARNING, "aiostream_synth")
    cleaned = _sanitize({"input": "x", "tools": [FN, {"type": "web_search", "future_flag": True}]})
    tools = validate_streaming_responses_params(cleaned).model_dump(exclude_unset=True)["tools"]
    assert tools == [FN, {"type": "web_search"}]
    assert [r.getMessage() for r in caplog.records] == [
        "responses request: removed tools[1].future_flag (unknown key)"
    ]


def test_input_items_are_rewritten_validated_and_carriers_lifted(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Namespaced calls flattened; unknown item types dropped and reported; carrier tools hoisted
    ."""
    caplog.set_level(logging.WARNING, "aiostream_synth")
    body = {
        "input": [
            {
                "type": "additional_tools",
                "role": "developer",
                "tools": [
                    {
                        "type": "namespace",
                        "name": "ns",
                        "description": "",
                        "tools": [{"name": "g", "parameters": {}, "strict": False}],
                    },
                    {"type": "custom", "name": "exec"},
                    {"type": "web_search"},
                ],
            },
            {"type": "message", "role": "user", "content": "hi"},
            {
                "type": "function_call",
                "namespace": "ns",
                "name": "g",
                "call_id": "c",
                "arguments": "{}",
            },
            {
                "type": "custom_tool_call",
                "namespace": "ns",
                "name": "h",
                "call_id": "d",
                "input": "x",
            },
            {"type": "definitely_not_a_responses_item_type"},
        ],
        "tools": [FN],
    }
    before = copy.deepcopy(body)
    cleaned, ns_map = sanitize_streaming_responses_body(body)
    assert body == before
    assert [i["type"] for i in cleaned["input"]] == ["message", "function_call", "custom_tool_call"]
    assert cleaned["input"][1]["name"] == "ns__g"
    assert "namespace" not in cleaned["input"][1]
    assert cleaned["input"][2]["name"] == "ns__h"
    assert [t["name"] for t in cleaned["tools"]] == ["f", "ns__g"]
    assert ns_map == {"ns__g": ("ns", "g")}
    (record,) = caplog.records
    message = record.getMessage()
    assert "input[4] (unknown input item type 'definitely_not_a_responses_item_type')" in message
    assert "input[0].tools[1] (additional_tools entry type='custom' name='exec'" in message
    assert "input[0].tools[2] (additional_tools entry type='web_search'" in message


def test_carrier_custom_tools_hoisted_on_request_unless_dropped() -> None:
    """hoist_carrier_custom_tools keeps carrier custom tools; drop_custom_tools wins."""
    body = {
        "input": [
            {
                "type": "additional_tools",
                "role": "developer",
                "tools": [{"type": "custom", "name": "exec"}],
            }
        ]
    }
    assert _sanitize(body, hoist_carrier_custom_tools=True)["tools"] == [
        {"type": "custom", "name": "exec"}
    ]
    assert "tools" not in _sanitize(body, hoist_carrier_custom_tools=True, drop_custom_tools=True)
    assert "tools" not in _sanitize(body)


def test_top_level_custom_tools_stay_without_hoisting() -> None:
    """custom entries already in tools are independent of the carrier option."""
    assert _sanitize({"input": "x", "tools": [{"type": "custom", "name": "c"}]})["tools"] == [
        {"type": "custom", "name": "c"}
    ]


def _dev(text: Any) -> dict[str, Any]:
    return {"type": "message", "role": "developer", "content": text}


def test_leading_system_messages_become_instructions() -> None:
    """Leading system/developer texts join existing instructions with blank lines."""
    cleaned = _sanitize(
        {
            "input": [
                _dev("You are Codex."),
                {
                    "role": "system",
                    "content": [
                        {"type": "input_text", "text": "<permissions>"},
                        {"type": "input_text", "text": "</permissions>"},
                    ],
                },
                {"role": "user", "content": "go"},
            ]
        }
    )
    assert cleaned["instructions"] == "You are Codex.\n\n<permissions></permissions>"
    assert cleaned["input"] == [{"role": "user", "content": "go"}]
    cleaned = _sanitize(
        {
            "instructions": "base instructions",
            "input": [_dev("perms"), {"role": "user", "content": "go"}],
        }
    )
    assert cleaned["instructions"] == "base instructions\n\nperms"


def test_system_messages_after_user_are_not_hoisted() -> None:
    """Only a leading run is hoisted; empty texts still removed; a string input untouched."""
    cleaned = _sanitize({"input": [{"role": "user", "content": "go"}, _dev("late")]})
    assert "instructions" not in cleaned
    assert len(cleaned["input"]) == 2
    cleaned = _sanitize({"input": [_dev(""), {"role": "user", "content": "go"}]})
    assert "instructions" not in cleaned
    assert cleaned["input"] == [{"role": "user", "content": "go"}]
    assert _sanitize({"input": "just text"})["input"] == "just text"
    assert "input" not in _sanitize({"model": "m"})


def test_a_system_message_with_an_image_stays_in_the_input() -> None:
    """Hoisting keeps text only, so a message with an image (or a malformed part) ends the
    hoisted run instead of losing its image (decision P10)."""
    image = {
        "role": "system",
        "content": [
            {"type": "input_text", "text": "look"},
            {"type": "input_image", "image_url": "x", "detail": "auto"},
        ],
    }
    cleaned = _sanitize({"input": [_dev("first"), image, _dev("after")]})
    assert cleaned["instructions"] == "first"
    assert cleaned["input"] == [image, _dev("after")]
    cleaned = _sanitize({"input": [_dev([{"type": "input_text", "text": 5}])]})
    assert "instructions" not in cleaned


def test_developer_after_a_leading_carrier_counts_as_leading() -> None:
    """Carriers are removed before hoisting."""
    cleaned = _sanitize(
        {
            "input": [
                {"type": "additional_tools", "role": "developer", "tools": []},
                _dev("d"),
                {"role": "user", "content": "u"},
            ]
        }
    )
    assert cleaned["instructions"] == "d"


def test_non_string_instructions_disable_hoisting() -> None:
    """instructions that are not a string leave the input untouched."""
    cleaned = _sanitize(
        {"instructions": [{"role": "system", "content": "x"}], "input": [_dev("d")]}
    )
    assert cleaned["input"] == [_dev("d")]


def test_non_dict_body_is_a_clear_error() -> None:
    """A body that is not an object: InvalidRequestError."""
    with pytest.raises(InvalidRequestError):
        sanitize_streaming_responses_body("x")  # type: ignore[arg-type]


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=5),
    lambda children: (
        st.lists(children, max_size=4)
        | st.dictionaries(
            st.sampled_from(["type", "name", "tools", "role", "content", "namespace", "x"]),
            children,
            max_size=4,
        )
    ),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(
    body=st.dictionaries(
        st.sampled_from(["input", "tools", "instructions", "stream", "model", "junk"]),
        _json,
        max_size=5,
    ),
    flags=st.tuples(st.booleans(), st.booleans(), st.booleans()),
)
def test_sanitize_never_raises_on_json_inside_a_dict(
    body: dict[str, Any], flags: tuple[bool, bool, bool]
) -> None:
    """Any JSON shape inside a dict body sanitizes without raising and without mutation."""
    logging.disable(logging.WARNING)
    try:
        before = copy.deepcopy(body)
        sanitize_streaming_responses_body(body, *flags)
        assert body == before
    finally:
        logging.disable(logging.NOTSET)


# -- validate with pruning -----------------------------------------------------------------------------


def test_nested_unknown_keys_are_pruned_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    """The reference example: reasoning.not_a_real_field pruned, effort kept, one WARNING naming
    both removals; input untouched."""
    caplog.set_level(logging.WARNING, "aiostream_synth")
    body = {
        "input": [],
        "reasoning": {"effort": "medium", "not_a_real_field": "x"},
        "unknown_top": 1,
    }
    before = copy.deepcopy(body)
    params = validate_streaming_responses_params(body)
    assert params.model_dump(exclude_unset=True) == {"input": [], "reasoning": {"effort": "medium"}}
    assert body == before
    (record,) = caplog.records
    assert record.getMessage().startswith("responses request: removed ")
    assert "reasoning.not_a_real_field (unknown key)" in record.getMessage()
    assert "unknown_top (unknown key)" in record.getMessage()


def test_unknown_keys_inside_union_members_are_pruned(caplog: pytest.LogCaptureFixture) -> None:
    """Keys the SDK does not know inside a tool spec and an input item (union arms) are pruned."""
    caplog.set_level(logging.WARNING, "aiostream_synth")
    removals = Removals()
    body = {
        "input": [
            {"type": "message", "role": "user", "content": "hi", "id": "msg_1", "client_flag": 1},
            {"type": "function_call", "call_id": "c", "name": "f", "arguments": "{}", "future": 2},
        ],
        "tools": [FN, {"type": "web_search", "future_web_option": True}],
    }
    params = validate_streaming_responses_params(body, removals=removals)
    dumped = params.model_dump(exclude_unset=True)
    assert dumped["tools"] == [FN, {"type": "web_search"}]
    assert dumped["input"][0] == {"type": "message", "role": "user", "content": "hi"}
    assert dumped["input"][1] == {
        "type": "function_call",
        "call_id": "c",
        "name": "f",
        "arguments": "{}",
    }
    assert sorted(removals.paths) == [
        "input[0].client_flag",
        "input[0].id",
        "input[1].future",
        "tools[1].future_web_option",
    ]
    assert [r.path for r in removals if r.benign] == ["input[0].id"]


def test_a_function_tools_own_fields_are_never_pruned_by_other_arms() -> None:
    """Pruning picks the arm the spec belongs to: a bad function tool keeps its name and fails."""
    with pytest.raises(ValidationError) as info:
        validate_streaming_responses_params(
            {"input": "x", "tools": [{"type": "function", "name": "f", "parameters": 5}]}
        )
    assert any(e["loc"][-1] == "parameters" for e in info.value.errors())


def test_real_errors_are_raised_unchanged() -> None:
    """Type errors and missing required fields raise pydantic's ValidationError with the parameter path."""
    with pytest.raises(ValidationError) as info:
        validate_streaming_responses_params({"input": "x", "temperature": "not-a-number"})
    assert info.value.errors()[0]["loc"] == ("temperature",)
    with pytest.raises(ValidationError):
        validate_streaming_responses_params({"input": "x", "tools": "no"})


def test_input_is_required_unless_the_caller_forwards_without_it() -> None:
    """Like the reference, a body without input is refused ("input: Field required"); a proxy
    passes require_input=False and forwards it for the upstream to answer."""
    with pytest.raises(ValidationError) as info:
        validate_streaming_responses_params({"model": "m"})
    assert [(e["loc"], e["type"]) for e in info.value.errors()] == [(("input",), "missing")]
    params = validate_streaming_responses_params(
        {"model": "m", "previous_response_id": "resp_1"}, require_input=False
    )
    assert params.model_dump(exclude_unset=True) == {"model": "m", "previous_response_id": "resp_1"}


def test_validation_succeeds_on_every_sanitized_example() -> None:
    """cleaned bodies validate."""
    for body in (
        {
            "input": [_dev("a"), {"role": "user", "content": "b"}],
            "tools": [
                FN,
                {
                    "type": "namespace",
                    "name": "n",
                    "description": "",
                    "tools": [{"name": "x", "parameters": {}, "strict": False}],
                },
            ],
        },
        {"input": "plain", "stream": True, "client_metadata": {"a": 1}},
    ):
        validate_streaming_responses_params(_sanitize(body))


@pytest.mark.parametrize(
    ("loc", "deleted"),
    [
        ((), False),
        (("a",), True),
        (("missing",), False),
        (("l", 0, "k"), True),
        (("l", -1, "k"), False),
        (("l", True, "k"), False),
        (("l", 5, "k"), False),
        (("l", 0, "function_call", "k"), False),
    ],
)
def test_delete_path_walks_only_literal_locations(loc: tuple[Any, ...], deleted: bool) -> None:
    """labels, empty, negative, bool and out-of-range parts delete nothing."""
    body = {"a": 1, "l": [{"k": 1}]}
    assert delete_path(body, loc) is deleted


@pytest.mark.parametrize(
    ("body", "dialect", "expected"),
    [
        ({"stream": True}, "chat", True),
        ({"stream": "true"}, "chat", False),
        ({"stream": 1}, "chat", False),
        ({}, "chat", False),
        ({"stream": 1}, "responses", True),
        ({"stream": "true"}, "responses", True),
        ({"stream": False}, "responses", False),
        ("x", "responses", False),
    ],
)
def test_wants_stream_per_dialect(body: Any, dialect: Any, expected: bool) -> None:
    """Chat needs stream is True; Responses takes any truthy stream."""
    assert wants_stream(body, dialect) is expected


@pytest.mark.parametrize(
    ("body", "param"),
    [
        ({"stream": True, "input": 5}, "input"),
        ({"stream": True, "input": "x", "temperature": "hot"}, "temperature"),
        pytest.param(
            {"stream": True, "input": "x", "reasoning": {"effort": "extreme"}},
            "reasoning.effort",
            marks=sdk_features.judges_enumerations,
        ),
        ({"stream": True, "input": "x", "tool_choice": 5}, "tool_choice"),
        (
            {"stream": True, "input": "x", "tools": [{"type": "function", "name": 5}]},
            "tools[0].name",
        ),
        (
            {
                "stream": True,
                "input": [
                    {"role": "developer", "content": "hoisted"},
                    {"role": "user", "content": [{"type": "input_text", "text": 7}]},
                ],
            },
            "input[1].content[0].text",
        ),
        (
            {
                "stream": True,
                "input": "x",
                "tools": [
                    {
                        "type": "namespace",
                        "name": "ns",
                        "description": "",
                        "tools": [{"name": "a"}],
                    },
                    {"type": "web_search_2031"},
                    {"type": "function", "name": "f", "parameters": []},
                ],
            },
            "tools[2].parameters",
        ),
    ],
)
def test_request_errors_name_the_parameter_path(body: dict[str, Any], param: str) -> None:
    """400s name the parameter by its path in the client's own body, OpenAI style
    (``tools[0].name``): union-arm labels left out, indices before namespaces were flattened,
    leading messages hoisted or members dropped."""
    from aiostream_synth import RequestError, prepare_request

    with pytest.raises(RequestError) as info:
        prepare_request("responses", body)
    assert info.value.status_code == 400
    assert info.value.body["error"]["param"] == param


def test_params_dict_equals_model_dump_for_our_models() -> None:
    """The shallow read of a generated params model gives exactly model_dump(exclude_unset)."""
    from aiostream_synth._params.models import params_dict

    cleaned, _ = sanitize_streaming_responses_body(_fixture("namespaced-tool-replay"))
    model = validate_streaming_responses_params(cleaned)
    assert params_dict(model) == model.model_dump(exclude_unset=True)
