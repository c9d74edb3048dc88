"""Responses response side: minimal mode and full fidelity through the openai SDK."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from typing import Any, cast

import httpx
import openai
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiostream_synth import synthesize_responses_sse
from aiostream_synth._wire.usage import wire_responses_usage
from aiostream_synth.errors import InvalidResultError
from aiostream_synth.sse import (
    Fidelity,
    is_responses_lifecycle_chunk,
    synthesize_responses_failure_sse,
    synthesize_responses_keepalive_sse,
)

from .support import sdk_features
from .support.sse_parser import parse

MSG = {
    "type": "message",
    "id": "msg_1",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "hello", "annotations": []}],
}
USAGE = {"input_tokens": 7, "output_tokens": 3, "total_tokens": 10}
WIRE_USAGE = {
    **USAGE,
    "input_tokens_details": sdk_features.ZERO_INPUT_DETAILS,
    "output_tokens_details": {"reasoning_tokens": 0},
}
#: The fields the SDK's Response requires that a bare result may lack, as the library fills them.
DEFAULTS = {"model": "", "parallel_tool_calls": True, "tool_choice": "auto", "tools": []}


def _resp(**kw: Any) -> dict[str, Any]:
    """A complete Responses result (every field the SDK's Response requires)."""
    return {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "model": "m",
        "status": "completed",
        "output": [MSG],
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        "usage": USAGE,
        **kw,
    }


def _events(blocks: Any) -> list[tuple[str, dict[str, Any]]]:
    raw = "".join(blocks)
    out = []
    for event in parse(raw):
        payload = event.json()
        assert event.event == payload["type"]
        out.append((event.event, payload))
    return out


# -- usage --------------------------------------------------------------------------------------


def test_wire_usage_fills_missing_and_null_detail_counters() -> None:
    """Decisions P5 and P10: every counter the SDK's usage model requires is present and an
    integer (cache_write_tokens included); present nulls become 0; input untouched."""
    assert wire_responses_usage(None) is None
    assert wire_responses_usage("x") == "x"
    usage = {
        "input_tokens": 1,
        "input_tokens_details": {"cached_tokens": None, "cache_write_tokens": None, "other": 5},
        "output_tokens_details": None,
        "total_tokens": 2,
    }
    before = copy.deepcopy(usage)
    assert wire_responses_usage(usage) == {
        "input_tokens": 1,
        "input_tokens_details": {"cached_tokens": 0, "cache_write_tokens": 0, "other": 5},
        "output_tokens": 0,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 2,
    }
    assert usage == before
    assert wire_responses_usage({"input_tokens_details": {"cached_tokens": 3}})[
        "input_tokens_details"
    ] == {**sdk_features.ZERO_INPUT_DETAILS, "cached_tokens": 3}
    assert wire_responses_usage({"input_tokens": 4, "output_tokens": 5}) == {
        "input_tokens": 4,
        "output_tokens": 5,
        "total_tokens": 9,
        "input_tokens_details": sdk_features.ZERO_INPUT_DETAILS,
        "output_tokens_details": {"reasoning_tokens": 0},
    }
    complete = {**WIRE_USAGE}
    assert wire_responses_usage(complete) is complete


def test_wire_usage_counters_come_from_the_installed_sdk() -> None:
    """The required counters are read from the SDK's ResponseUsage, not a hand list: whatever
    it requires is filled, and the result validates against it."""
    from openai.types.responses import ResponseUsage

    from aiostream_synth._wire.usage import required_counters

    tree = required_counters(ResponseUsage)
    # Read from the SDK's model here, not through our code: cache_write_tokens came in openai 3.57.
    assert tree["input_tokens_details"] == dict.fromkeys(sdk_features.ZERO_INPUT_DETAILS)
    ResponseUsage.model_validate(wire_responses_usage({}), strict=True)


# -- minimal ------------------------------------------------------------------------------------


def test_minimal_reference_vector() -> None:
    """The reference vector: created (usage copied), one item done, completed,
    numbered from 0 as the SDK's event types require (P10)."""
    created = {**_resp(), "status": "in_progress", "output": [], "usage": WIRE_USAGE}
    assert _events(synthesize_responses_sse(_resp())) == [
        (
            "response.created",
            {"type": "response.created", "response": created, "sequence_number": 0},
        ),
        (
            "response.output_item.done",
            {
                "type": "response.output_item.done",
                "output_index": 0,
                "item": MSG,
                "sequence_number": 1,
            },
        ),
        (
            "response.completed",
            {
                "type": "response.completed",
                "response": {**_resp(), "usage": WIRE_USAGE},
                "sequence_number": 2,
            },
        ),
    ]


def test_a_bare_result_gets_the_fields_the_sdk_requires() -> None:
    """A result with only id/status/output gets created_at, model, tools, tool_choice and
    parallel_tool_calls in every envelope, and its items what their types require."""
    bare = {
        "id": "resp_b",
        "status": "completed",
        "output": [
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "x"}],
            }
        ],
    }
    fidelities: list[Fidelity] = ["minimal", "full"]
    for fidelity in fidelities:
        events = _events(synthesize_responses_sse(bare, fidelity=fidelity))
        final = events[-1][1]["response"]
        assert {k: final[k] for k in DEFAULTS} == DEFAULTS
        assert isinstance(final["created_at"], int)
        assert final["object"] == "response"
        (item,) = final["output"]
        assert item["status"] == "completed"
        assert item["id"] == "msg_b_0"
        assert item["content"] == [{"type": "output_text", "text": "x", "annotations": []}]


def test_the_fields_a_bare_result_gets_come_in_one_order_whatever_the_hash_seed() -> None:
    """The same result gives the same bytes in every process: the fields filled in for it
    do not follow the iteration order of a set of strings, which the hash seed decides (a
    fleet's replicas, or two runs of a test, would each send their own bytes)."""
    code = (
        "import sys\n"
        "from aiostream_synth import synthesize_responses_sse\n"
        "bare = {'id': 'resp_b', 'created_at': 1, 'status': 'completed', 'output': []}\n"
        "sys.stdout.write(''.join(synthesize_responses_sse(bare, fidelity='full')))\n"
    )
    streams = {
        subprocess.run(
            [sys.executable, "-c", code],
            env={**os.environ, "PYTHONHASHSEED": str(seed)},
            capture_output=True,
            check=True,
            text=True,
        ).stdout
        for seed in range(1, 5)
    }
    (stream,) = streams
    first = _events([stream])[0][1]["response"]  # response.created
    assert list(first)[:5] == ["object", "model", "parallel_tool_calls", "tool_choice", "tools"]


@pytest.mark.parametrize(
    ("status", "terminal"),
    [
        ("completed", "response.completed"),
        ("incomplete", "response.incomplete"),
        ("failed", "response.failed"),
        (None, "response.completed"),
        ("cancelled", "response.completed"),
        ("queued", "response.completed"),
    ],
)
def test_terminal_follows_status_verbatim(status: Any, terminal: str) -> None:
    """one terminal chosen by status; status itself never rewritten."""
    events = _events(
        synthesize_responses_sse(
            _resp(status=status, incomplete_details={"reason": "max_output_tokens"})
        )
    )
    assert [t for t, _ in events].count(terminal) == 1
    assert events[-1][0] == terminal
    assert events[-1][1]["response"]["status"] == status
    assert events[-1][1]["response"]["incomplete_details"] == {"reason": "max_output_tokens"}


def test_include_created_false_and_empty_output() -> None:
    """No created event when keepalive opened the stream; empty output → terminal only."""
    assert [
        t for t, _ in _events(synthesize_responses_sse(_resp(output=[]), include_created=False))
    ] == ["response.completed"]


def test_namespaced_calls_are_restored_in_items_and_terminal() -> None:
    """the same restored object in output_item.done and in response.output."""
    call = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "c",
        "name": "ns__f",
        "arguments": "{}",
    }
    events = _events(synthesize_responses_sse(_resp(output=[call]), {"ns__f": ("ns", "f")}))
    done = events[1][1]["item"]
    assert (done["namespace"], done["name"]) == ("ns", "f")
    assert events[-1][1]["response"]["output"] == [done]


def test_minimal_mode_keeps_ids_and_does_not_mutate() -> None:
    """an id the result holds is kept; one it lacks is generated only because the SDK's
    item types require it (P10); the input is untouched."""
    resp = _resp(output=[{"type": "message", "role": "assistant", "content": []}, MSG])
    before = copy.deepcopy(resp)
    events = _events(synthesize_responses_sse(resp))
    assert [events[i][1]["item"]["id"] for i in (1, 2)] == ["msg_1_0", "msg_1"]
    assert resp == before


@pytest.mark.parametrize(
    ("result", "path"),
    [
        ("x", "<root>"),
        ({"output": {"a": 1}}, "output"),
        ({"output": [1]}, "output.0"),
        # values JSON cannot carry: orjson refuses them, the error still names the path
        ({"model": object(), "output": []}, "model"),
        ({"output": [{"type": "message", "content": [], "role": {1}}]}, "output.0.role"),
        ({"output": [{"type": "function_call", "arguments": "\ud800"}]}, "output.0.arguments"),
    ],
)
def test_bad_results_raise_before_any_block(result: Any, path: str) -> None:
    """A non-dict result, a non-list output, non-object items or values JSON cannot carry
    raise InvalidResultError naming the path."""
    for fidelity in ("minimal", "full"):
        with pytest.raises(InvalidResultError, match=f": {path}: "):
            next(synthesize_responses_sse(result, fidelity=fidelity))


def test_failure_stream_reference_shape() -> None:
    """created (same id, error included) then failed; generated ids differ."""
    events = _events(synthesize_responses_failure_sse("boom", code="server_error"))
    assert [t for t, _ in events] == ["response.created", "response.failed"]
    failed = events[1][1]["response"]
    assert failed["status"] == "failed"
    assert failed["error"] == {"code": "server_error", "message": "boom"}
    assert failed["output"] == []
    assert events[0][1]["response"] == {**failed, "status": "in_progress"}
    assert failed["id"].startswith("resp_")
    assert len(failed["id"]) == 37
    other = _events(synthesize_responses_failure_sse("boom"))[1][1]["response"]["id"]
    assert other != failed["id"]


def test_failure_code_is_never_null_and_id_is_kept() -> None:
    """P6: code None → server_error; response_id + include_created=False → just failed."""
    events = _events(
        synthesize_responses_failure_sse(
            "m", code=None, response_id="resp_x", include_created=False
        )
    )
    ((kind, payload),) = events
    assert kind == "response.failed"
    assert payload["sequence_number"] == 0
    response = payload["response"]
    assert {k: response[k] for k in ("id", "object", "status", "output", "error")} == {
        "id": "resp_x",
        "object": "response",
        "status": "failed",
        "output": [],
        "error": {"code": "server_error", "message": "m"},
    }
    assert {k: response[k] for k in DEFAULTS} == DEFAULTS


def test_full_failure_is_error_then_failed() -> None:
    """P6 full mode: error event then response.failed, both numbered."""
    events = _events(
        synthesize_responses_failure_sse(
            "slow",
            "rate_limit_exceeded",
            "resp_r",
            False,
            fidelity="full",
            base={"model": "m"},
            sequence_start=4,
        )
    )
    assert [(t, p["sequence_number"]) for t, p in events] == [("error", 4), ("response.failed", 5)]
    assert events[0][1]["code"] == "rate_limit_exceeded"
    assert events[1][1]["response"]["model"] == "m"
    assert events[1][1]["response"]["id"] == "resp_r"


def test_keepalive_events() -> None:
    """created + in_progress as separate blocks, then in_progress alone."""
    first = list(synthesize_responses_keepalive_sse("resp_k", True))
    assert len(first) == 2
    assert [t for t, _ in _events(first)] == ["response.created", "response.in_progress"]
    envelope = _events(first)[0][1]["response"]
    assert {k: envelope[k] for k in ("id", "object", "status", "output", "usage")} == {
        "id": "resp_k",
        "object": "response",
        "status": "in_progress",
        "output": [],
        "usage": None,
    }
    assert {k: envelope[k] for k in DEFAULTS} == DEFAULTS
    assert [p["sequence_number"] for _, p in _events(first)] == [0, 1]
    later = list(synthesize_responses_keepalive_sse("resp_k", False))
    assert [t for t, _ in _events(later)] == ["response.in_progress"]
    assert all(is_responses_lifecycle_chunk(b.encode()) for b in first + later)


@pytest.mark.parametrize(
    ("chunk", "expected"),
    [
        (b"event: response.created\ndata: {}\n\n", True),
        (b"event: response.in_progress\ndata: {}\n\n", True),
        (b"event: response.output_item.done\ndata: {}\n\n", False),
        (b"event: response.completed\ndata: {}\n\n", False),
        (b"event: response.created\ndata: {}\n\nevent: response.in_progress\ndata: {}\n\n", False),
        (
            b"event: response.created\ndata: {}\n\nevent: response.output_item.done\ndata: {}\n\n",
            False,
        ),
        (b": keep-alive\n\n", False),
        (b"", False),
        (b"id: 1\nevent: response.created\ndata: {}\n\n", False),
        (b"data: {}\n\n", False),
    ],
)
def test_lifecycle_chunk_detection(chunk: bytes, expected: bool) -> None:
    """exactly one created/in_progress event is liveness, anything else is output."""
    assert is_responses_lifecycle_chunk(chunk) is expected


# -- full fidelity ------------------------------------------------------------------------------

REASONING = {
    "type": "reasoning",
    "id": "rs_1",
    "summary": [{"type": "summary_text", "text": "plan"}],
    "content": [{"type": "reasoning_text", "text": "raw"}],
    "encrypted_content": "enc",
}
CALL = {
    "type": "function_call",
    "id": "fc_1",
    "call_id": "call_1",
    "name": "ns__f",
    "arguments": '{"a":1}',
    "status": "completed",
}
CUSTOM = {
    "type": "custom_tool_call",
    "id": "ctc_1",
    "call_id": "call_2",
    "name": "exec",
    "input": "ls",
}
SEARCH = {
    "type": "web_search_call",
    "id": "ws_1",
    "status": "completed",
    "action": {"type": "search", "query": "q"},
}
REFUSING = {
    "type": "message",
    "id": "msg_2",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "refusal", "refusal": "no"}],
}


def test_full_golden_transcript() -> None:
    """OpenAI's per-item lifecycle, with sequence numbers from 0."""
    result = _resp(output=[REASONING, MSG, REFUSING, CALL, CUSTOM, SEARCH], model="m", created_at=1)
    events = _events(synthesize_responses_sse(result, {"ns__f": ("ns", "f")}, fidelity="full"))
    assert [t for t, _ in events] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.reasoning_summary_part.added",
        "response.reasoning_summary_text.delta",
        "response.reasoning_summary_text.done",
        "response.reasoning_summary_part.done",
        "response.content_part.added",
        "response.reasoning_text.delta",
        "response.reasoning_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.content_part.added",
        "response.refusal.delta",
        "response.refusal.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.custom_tool_call_input.delta",
        "response.custom_tool_call_input.done",
        "response.output_item.done",
        "response.output_item.added",
        "response.output_item.done",
        "response.completed",
    ]
    assert [p["sequence_number"] for _, p in events] == list(range(len(events)))
    created = events[0][1]["response"]
    assert created == {**result, "status": "in_progress", "output": [], "usage": None}
    added = {p["output_index"]: p["item"] for t, p in events if t == "response.output_item.added"}
    assert "encrypted_content" not in added[0]
    assert added[0]["summary"] == []
    assert added[3]["arguments"] == ""
    assert (added[3]["namespace"], added[3]["name"]) == ("ns", "f")
    done = [p["item"] for t, p in events if t == "response.output_item.done"]
    assert done[0]["encrypted_content"] == "enc"
    assert events[-1][1]["response"]["output"] == done
    assert events[-1][1]["response"]["usage"] == WIRE_USAGE


def test_full_mode_splits_long_text_into_deltas() -> None:
    """delta_chars splits text and arguments; the pieces concatenate to the whole."""
    long_msg = {
        **MSG,
        "content": [{"type": "output_text", "text": "abcdefghij", "annotations": []}],
    }
    events = _events(
        synthesize_responses_sse(_resp(output=[long_msg, CALL]), fidelity="full", delta_chars=3)
    )
    deltas = [p["delta"] for t, p in events if t == "response.output_text.delta"]
    assert deltas == ["abc", "def", "ghi", "j"]
    args = "".join(p["delta"] for t, p in events if t == "response.function_call_arguments.delta")
    assert args == CALL["arguments"]


def test_full_mode_gives_ids_to_items_without_one() -> None:
    """Delta events must name their item: a missing id is generated and used consistently."""
    msg = {k: v for k, v in MSG.items() if k != "id"}
    events = _events(synthesize_responses_sse(_resp(output=[msg]), fidelity="full"))
    ids = {p.get("item_id") for t, p in events if "item_id" in p}
    (item_id,) = ids
    assert item_id
    assert events[-1][1]["response"]["output"][0]["id"] == item_id


def test_continuation_rewrites_id_and_continues_numbering() -> None:
    """After keepalives (id R, k events) the remainder omits created, continues at k, carries R."""
    events = _events(
        synthesize_responses_sse(
            _resp(), fidelity="full", include_created=False, response_id="resp_R", sequence_start=3
        )
    )
    assert events[0][0] == "response.output_item.added"
    assert [p["sequence_number"] for _, p in events] == list(range(3, 3 + len(events)))
    assert events[-1][1]["response"]["id"] == "resp_R"


# -- through the openai SDK: responses.stream() → get_final_response() ---------------------------

_holder: dict[str, bytes] = {}


def _client() -> openai.OpenAI:
    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, headers={"content-type": "text/event-stream"}, content=_holder["body"]
        )

    return openai.OpenAI(
        api_key="k",
        base_url="http://test/v1",
        max_retries=0,
        http_client=cast(Any, httpx.Client(transport=httpx.MockTransport(handler))),
    )


_CLIENT = _client()
_text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=30)
_nonempty = _text.filter(bool)


@st.composite
def _items(draw: st.DrawFn, k: int) -> dict[str, Any]:
    kind = draw(
        st.sampled_from(
            [
                "message",
                "reasoning",
                "function_call",
                "custom_tool_call",
                "web_search_call",
                "ns_call",
            ]
        )
    )
    if kind == "message":
        parts = draw(
            st.lists(
                st.one_of(
                    st.builds(
                        lambda t: {"type": "output_text", "text": t, "annotations": []}, _text
                    ),
                    st.builds(lambda t: {"type": "refusal", "refusal": t}, _text),
                ),
                max_size=3,
            )
        )
        return {
            "type": "message",
            "id": f"msg_{k}",
            "role": "assistant",
            "status": "completed",
            "content": parts,
        }
    if kind == "reasoning":
        item: dict[str, Any] = {
            "type": "reasoning",
            "id": f"rs_{k}",
            "summary": [
                {"type": "summary_text", "text": t} for t in draw(st.lists(_text, max_size=2))
            ],
        }
        if draw(st.booleans()):
            item["content"] = [{"type": "reasoning_text", "text": draw(_text)}]
        if draw(st.booleans()):
            item["encrypted_content"] = draw(_nonempty)
        return item
    if kind in ("function_call", "ns_call"):
        name = "mcp__weather__get" if kind == "ns_call" else draw(st.sampled_from(["f", "g"]))
        return {
            "type": "function_call",
            "id": f"fc_{k}",
            "call_id": f"call_{k}",
            "name": name,
            "arguments": json.dumps(draw(st.dictionaries(_text, st.integers(), max_size=2))),
            "status": "completed",
        }
    if kind == "custom_tool_call":
        return {
            "type": "custom_tool_call",
            "id": f"ctc_{k}",
            "call_id": f"call_{k}",
            "name": "exec",
            "input": draw(_text),
        }
    return {
        "type": "web_search_call",
        "id": f"ws_{k}",
        "status": "completed",
        "action": {"type": "search", "query": draw(_text)},
    }


@st.composite
def _responses(draw: st.DrawFn) -> dict[str, Any]:
    n = draw(st.integers(0, 4))
    usage = {
        "input_tokens": 5,
        "output_tokens": 6,
        "total_tokens": 11,
        "input_tokens_details": draw(
            st.sampled_from(
                [None, {"cached_tokens": None}, {"cached_tokens": 2, "cache_write_tokens": None}]
            )
        ),
        "output_tokens_details": draw(st.sampled_from([None, {"reasoning_tokens": 1}])),
    }
    return {
        "id": "resp_" + draw(st.text("abc123", min_size=1, max_size=6)),
        "object": "response",
        "created_at": 1,
        "model": "m",
        "status": "completed",
        "output": [draw(_items(k)) for k in range(n)],
        "usage": usage,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
    }


def _strip(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _strip(v) for k, v in value.items() if k not in ("parsed", "parsed_arguments")}
    if isinstance(value, list):
        return [_strip(v) for v in value]
    return value


NS_MAP = {"mcp__weather__get": ("mcp__weather", "get")}


def _expected(result: dict[str, Any]) -> dict[str, Any]:
    output = [
        {**i, "namespace": "mcp__weather", "name": "get"}
        if i.get("name") == "mcp__weather__get"
        else i
        for i in result["output"]
    ]
    return {**result, "output": output, "usage": wire_responses_usage(result["usage"])}


def _check_stream(raw: bytes, result: dict[str, Any], first_seq: int = 0) -> None:
    events = [e.json() for e in parse(raw)]
    seqs = [e["sequence_number"] for e in events]
    assert seqs == list(range(first_seq, first_seq + len(events)))
    added = {e["output_index"] for e in events if e["type"] == "response.output_item.added"}
    done_items = [e["item"] for e in events if e["type"] == "response.output_item.done"]
    assert added == set(range(len(done_items)))
    assert events[-1]["response"]["output"] == done_items
    _holder["body"] = raw
    with _CLIENT.responses.stream(model="m", input="x") as stream:
        final = stream.get_final_response()
    got = _strip(final.model_dump(mode="json", exclude_unset=True))
    assert got["output"] == _expected(result)["output"]
    assert got["usage"] == _expected(result)["usage"]


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(result=_responses())
def test_sdk_stream_helper_reassembles_full_mode(result: dict[str, Any]) -> None:
    """Full-mode frames → openai's responses.stream() → get_final_response() equals the input
    (namespaces restored, usage normalized); numbering from 0; every added item gets its done."""
    before = copy.deepcopy(result)
    raw = "".join(synthesize_responses_sse(result, NS_MAP, fidelity="full")).encode()
    _check_stream(raw, result)
    assert result == before


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(result=_responses(), ticks=st.integers(0, 3))
def test_sdk_stream_helper_accepts_keepalive_then_continuation(
    result: dict[str, Any], ticks: int
) -> None:
    """Keepalive events first (created, in_progress x ticks), then the continuation: same id throughout."""
    frames = "".join(
        synthesize_responses_keepalive_sse(
            "resp_keep", True, base={"model": "m", "created_at": 1}, sequence_start=0
        )
    )
    seq = 2
    for _ in range(ticks):
        frames += "".join(
            synthesize_responses_keepalive_sse(
                "resp_keep", False, base={"model": "m"}, sequence_start=seq
            )
        )
        seq += 1
    frames += "".join(
        synthesize_responses_sse(
            result,
            NS_MAP,
            include_created=False,
            fidelity="full",
            response_id="resp_keep",
            sequence_start=seq,
        )
    )
    _check_stream(frames.encode(), {**result, "id": "resp_keep"})


@pytest.mark.parametrize("base", [None, {"model": "m", "created_at": 5, "id": "ignored"}])
@pytest.mark.parametrize("include_created", [True, False])
def test_cached_keepalive_matches_the_reference_builder(base: Any, include_created: bool) -> None:
    """The engine's pre-serialized keepalive frames equal responses_keepalive_frames'."""
    from aiostream_synth._dialects.responses.synthesis import (
        ResponsesKeepalive,
        responses_keepalive_frames,
    )

    cached = ResponsesKeepalive("resp_k", base=base).frames(
        include_created=include_created, sequence_start=7
    )
    plain = responses_keepalive_frames("resp_k", include_created, base=base, sequence_start=7)
    assert [parse(f)[0].json() for f in cached] == [parse(f)[0].json() for f in plain]
    assert [parse(f)[0].event for f in cached] == [parse(f)[0].event for f in plain]


@pytest.mark.parametrize("fidelity", ["minimal", "full"])
def test_failure_frames_refuse_what_json_cannot_carry(fidelity: Fidelity) -> None:
    """A failure the wire cannot carry is the library's input error, never orjson's TypeError
    (the engine passes only wire-safe messages, see classify_failure)."""
    with pytest.raises(InvalidResultError, match="not JSON-serializable"):
        list(synthesize_responses_failure_sse("bad \ud800", fidelity=fidelity))
    with pytest.raises(InvalidResultError, match="not JSON-serializable"):
        list(synthesize_responses_failure_sse("m", fidelity="full", base={"model": object()}))
