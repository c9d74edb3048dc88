"""Anthropic Messages: synthesis, the request side, and the native app through the anthropic SDK.

Mirrors ``_dialects/anthropic``. The oracle is the anthropic SDK's own stream accumulator
(``messages.stream().get_final_message()``) reading what the real app emits, on asyncio and
trio.
"""

from __future__ import annotations

import json
from typing import Any, cast

import anthropic
import anyio
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiostream_synth import (
    AnthropicDialect,
    BackendCall,
    RequestError,
    StreamSettings,
    SynthesizedStream,
    SynthesizingApp,
    prepare_request,
    synthesize_anthropic_sse,
)
from aiostream_synth._dialects.anthropic.spec import estimate_input_tokens
from aiostream_synth._params.removals import Removals

from .support.anthropic_mock import MOCK_FRAMES, MOCK_SDK, REQUEST, sdk_http
from .support.sse_parser import parse

K = 0.05  # keepalive interval (instant on trio's MockClock)

TOOL_USE = {"type": "tool_use", "id": "toolu_01", "name": "Bash", "input": {"command": "echo OK"}}
THINKING = {"type": "thinking", "thinking": "Let me run it.", "signature": "sig-abc"}
TEXT = {"type": "text", "text": "Running the command."}


def message(*blocks: dict[str, Any], stop_reason: str = "tool_use", **usage: Any) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": list(blocks),
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": {"input_tokens": 42, "output_tokens": 7, **usage},
    }


def events(frames: Any) -> list[dict[str, Any]]:
    out = []
    for event in parse("".join(frames) if not isinstance(frames, (str, bytes)) else frames):
        payload = event.json()
        assert event.event == payload["type"]  # every block's event line names its type
        out.append(payload)
    return out


# -- synthesis ------------------------------------------------------------------------------------


def test_the_minimal_vector_of_the_spec() -> None:
    """text + tool_use; tool input only in one input_json_delta."""
    got = events(synthesize_anthropic_sse(message(TEXT, TOOL_USE)))
    assert [e["type"] for e in got] == [
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
    ]
    assert got[0]["message"]["content"] == []
    assert got[0]["message"]["usage"] == {
        "input_tokens": 42,
        "output_tokens": 0,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    assert got[4]["content_block"] == {**TOOL_USE, "input": {}}
    assert json.loads(got[5]["delta"]["partial_json"]) == TOOL_USE["input"]
    assert got[7] == {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use", "stop_sequence": None},
        "usage": {
            "input_tokens": 42,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": 7,
        },
    }


def test_thinking_streams_its_signature() -> None:
    """thinking_delta then signature_delta; an empty thinking (display: omitted) still
    gets its signature."""
    got = events(synthesize_anthropic_sse(message(THINKING, {**THINKING, "thinking": ""})))
    deltas = [e["delta"] for e in got if e["type"] == "content_block_delta"]
    assert deltas == [
        {"type": "thinking_delta", "thinking": "Let me run it."},
        {"type": "signature_delta", "signature": "sig-abc"},
        {"type": "signature_delta", "signature": "sig-abc"},
    ]


def test_blocks_that_do_not_stream_start_complete() -> None:
    """redacted_thinking and server-tool results start whole; unknown types are dropped by
    default (Claude Code fails a turn ending in one) and passed through on request."""
    redacted = {"type": "redacted_thinking", "data": "opaque"}
    result = {
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_1",
        "content": [
            {
                "type": "web_search_result",
                "url": "https://e.x",
                "title": "t",
                "encrypted_content": "e",
            }
        ],
    }
    server = {
        "type": "server_tool_use",
        "id": "srvtoolu_1",
        "name": "web_search",
        "input": {"query": "q"},
    }
    future = {"type": "future_block_2030", "x": 1}
    got = events(synthesize_anthropic_sse(message(redacted, server, result, TEXT, future)))
    starts = [e["content_block"] for e in got if e["type"] == "content_block_start"]
    assert starts == [redacted, {**server, "input": {}}, result, {"type": "text", "text": ""}]
    kept = events(synthesize_anthropic_sse(message(TEXT, future), unknown_blocks="passthrough"))
    assert [e["content_block"] for e in kept if e["type"] == "content_block_start"][-1] == future


def test_empty_text_blocks_are_dropped_unless_alone() -> None:
    """An empty text block cannot be replayed to Anthropic; a message of only that keeps it."""
    empty = {"type": "text", "text": ""}
    got = events(synthesize_anthropic_sse(message(empty, TOOL_USE)))
    assert [e["content_block"]["type"] for e in got if e["type"] == "content_block_start"] == [
        "tool_use"
    ]
    alone = events(synthesize_anthropic_sse(message(empty, stop_reason="end_turn")))
    assert [e["type"] for e in alone if e["type"].startswith("content_block")] == [
        "content_block_start",
        "content_block_stop",
    ]


def test_citations_travel_as_deltas_and_usage_is_never_null() -> None:
    """citations_delta per citation; a null counter is 0; a missing stop_reason ends the turn."""
    citation = {
        "type": "char_location",
        "cited_text": "x",
        "document_index": 0,
        "document_title": None,
        "start_char_index": 0,
        "end_char_index": 1,
    }
    msg = message({**TEXT, "citations": [citation]}, stop_reason="", cache_read_input_tokens=None)
    got = events(synthesize_anthropic_sse(msg))
    assert got[2]["delta"] == {"type": "citations_delta", "citation": citation}
    assert got[-2]["delta"]["stop_reason"] == "end_turn"
    assert got[-2]["usage"]["cache_read_input_tokens"] == 0


_block = st.one_of(
    st.builds(lambda t: {"type": "text", "text": t}, st.text(max_size=20)),
    st.builds(
        lambda t, s: {"type": "thinking", "thinking": t, "signature": s},
        st.text(max_size=20),
        st.text(min_size=1, max_size=8),
    ),
    st.builds(
        lambda n, i: {"type": "tool_use", "id": f"toolu_{n}", "name": f"t{n}", "input": i},
        st.integers(0, 9),
        st.dictionaries(
            st.text(min_size=1, max_size=4),
            st.integers(-(2**63), 2**63 - 1) | st.text(max_size=4),  # the numbers orjson carries
            max_size=3,
        ),
    ),
    st.just({"type": "redacted_thinking", "data": "d"}),
)


def _sdk_final(frames: bytes) -> Any:
    """What the anthropic SDK's own stream helper makes of ``frames``."""
    MOCK_FRAMES.append(frames)
    with MOCK_SDK.messages.stream(**REQUEST) as stream:
        return stream.get_final_message()


@settings(max_examples=200, deadline=None)
@given(blocks=st.lists(_block, max_size=6))
def test_any_message_streams_as_the_sdk_reassembles_it(blocks: list[dict[str, Any]]) -> None:
    """For any message: contiguous indices with one start and one stop each, one
    input_json_delta per tool, and the SDK's own stream helper rebuilds the same content."""
    msg = message(*blocks, stop_reason="end_turn")
    frames = "".join(synthesize_anthropic_sse(msg))
    got = events(frames)
    starts = [e["index"] for e in got if e["type"] == "content_block_start"]
    assert starts == list(range(len(starts)))
    assert [e["index"] for e in got if e["type"] == "content_block_stop"] == starts
    tools = [e for e in got if e.get("delta", {}).get("type") == "input_json_delta"]
    assert len(tools) == sum(b["type"] == "tool_use" for b in blocks)
    final = _sdk_final(frames.encode())
    kept = [b for b in blocks if b["type"] != "text" or b["text"] or len(blocks) == 1]
    assert [b.model_dump(exclude_none=True) for b in final.content] == kept
    assert final.stop_reason == "end_turn"


# -- the native app, through the anthropic SDK ------------------------------------------------------


class MessagesBackend:
    """Answers Messages after ``delay``, or fails; records every call."""

    def __init__(
        self,
        answer: dict[str, Any] | None = None,
        *,
        delay: float = 0.0,
        error: Exception | None = None,
    ) -> None:
        self.answer = answer or message(THINKING, TEXT, TOOL_USE)
        self.delay = delay
        self.error = error
        self.calls: list[BackendCall] = []

    async def __call__(self, call: BackendCall) -> Any:
        self.calls.append(call)
        await anyio.sleep(self.delay)
        if self.error is not None:
            raise self.error
        return self.answer


def _app(backend: MessagesBackend, **options: Any) -> SynthesizingApp:
    return SynthesizingApp(backend, StreamSettings(keepalive_interval=K, **options))


def _sdk(app: Any) -> anthropic.AsyncAnthropic:
    http = sdk_http.AsyncClient(transport=sdk_http.ASGITransport(app=app), base_url="http://test")
    return anthropic.AsyncAnthropic(
        api_key="k", base_url="http://test", http_client=cast(Any, http), max_retries=0
    )


@pytest.mark.anyio
@pytest.mark.parametrize("delay", [0, K * 2.5])
async def test_the_sdk_reassembles_the_backend_message(delay: float) -> None:
    """get_final_message() equals the backend Message (content, stop reason, usage),
    before and after keepalives committed the stream with a minted id."""
    backend = MessagesBackend(delay=delay)
    async with _sdk(_app(backend)) as client, client.messages.stream(**REQUEST) as stream:
        final = await stream.get_final_message()
    want = backend.answer
    got = final.model_dump(exclude_none=True)
    assert got["content"] == want["content"]
    assert (got["stop_reason"], final.stop_sequence) == ("tool_use", None)
    assert got["usage"] == {
        **want["usage"],
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    assert final.id == want["id"] if not delay else final.id.startswith("msg_")


@pytest.mark.anyio
async def test_keepalive_is_message_start_then_pings_then_event_keepalives(
    anyio_backend: Any,
) -> None:
    """On the engine: the first tick commits with message_start + ping; each tick
    pings; an intermediate message_delta (stop_reason null) every event_keepalive_s; none after
    the end. On trio's MockClock the spacing is exact."""
    if not isinstance(anyio_backend, tuple):
        pytest.skip("exact spacing is checked on trio's MockClock")

    async def backend() -> Any:
        await anyio.sleep(10.5)
        return message(TEXT, stop_reason="end_turn")

    frames = []
    dialect = AnthropicDialect(model="claude-test", event_keepalive_s=4)
    async with SynthesizedStream(backend, dialect, keepalive_interval=1) as stream:
        async for frame in stream:
            frames.append((anyio.current_time(), frame))
    kinds = [
        (round(t), e["type"], e.get("delta", {}).get("stop_reason", "-"))
        for t, f in frames
        for e in events(f)
    ]
    assert kinds[:2] == [(1, "message_start", "-"), (1, "ping", "-")]
    assert [t for t, kind, _ in kinds if kind == "ping"] == list(range(1, 11))
    assert [t for t, kind, reason in kinds if kind == "message_delta" and reason is None] == [5, 9]
    assert kinds[-1][1] == "message_stop"
    assert events(b"".join(f for _, f in frames))[0]["message"]["model"] == "claude-test"


@pytest.mark.anyio
async def test_a_failure_after_commit_is_one_error_event() -> None:
    """one event: error with the mapped type, then the stream closes (no message_stop);
    the SDK raises."""

    class Overloaded(Exception):
        status_code = 529

    backend = MessagesBackend(delay=K * 2.5, error=Overloaded("busy"))
    async with _sdk(_app(backend)) as client:
        with pytest.raises(anthropic.APIStatusError) as info:
            async with client.messages.stream(**REQUEST) as stream:
                await stream.get_final_message()
    assert info.value.body == {
        "type": "error",
        "error": {"type": "overloaded_error", "message": "busy"},
    }


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("status", "kind", "retry"),
    [
        (400, "invalid_request_error", "false"),
        (404, "not_found_error", "false"),
        (429, "rate_limit_error", "true"),
        (500, "api_error", "false"),
        (502, "api_error", "true"),  # an upstream that could not be reached: transient (#37)
        (503, "api_error", "true"),
        (529, "overloaded_error", "true"),
    ],
)
async def test_a_failure_before_commit_is_an_anthropic_http_error(
    status: int, kind: str, retry: str
) -> None:
    """Anthropic's error shape with request_id in body and header; x-should-retry false
    unless retrying can help."""

    class Failed(Exception):
        status_code = status

    app = _app(MessagesBackend(error=Failed("nope")))
    async with sdk_http.AsyncClient(
        transport=sdk_http.ASGITransport(app=app), base_url="http://test"
    ) as http:
        response = await http.post("/v1/messages?beta=true", json={**REQUEST, "stream": True})
    assert response.status_code == status
    body = response.json()
    assert body["error"] == {"type": kind, "message": "nope"}
    assert body["request_id"] == response.headers["request-id"]
    assert response.headers["x-should-retry"] == retry


# -- the request side ---------------------------------------------------------------------------


def _prepare(body: dict[str, Any], **options: Any) -> Any:
    from aiostream_synth.dialects import AnthropicOptions

    return prepare_request(
        "anthropic", {**REQUEST, "stream": True, **body}, options=AnthropicOptions(**options)
    )


CLAUDE_CODE_MESSAGES = [
    {
        "role": "user",
        "content": [
            {"type": "text", "text": "<system-reminder>\nctx\n</system-reminder>"},
            {"type": "text", "text": "run echo OK"},
        ],
    },
    {
        "role": "system",
        "content": [
            {"type": "text", "text": "env: linux"},
            {"type": "text", "text": "deferred tools"},
        ],
    },
]


def test_system_messages_fold_into_the_user_turn() -> None:
    """Claude Code's role-system entries become leading <system-reminder> blocks of the user
    message they follow; nothing reaches the backend as a mid-conversation system role."""
    params = _prepare({"messages": CLAUDE_CODE_MESSAGES}).params
    (user,) = params["messages"]
    assert [b["text"] for b in user["content"]] == [
        "<system-reminder>\nenv: linux\n</system-reminder>",
        "<system-reminder>\ndeferred tools\n</system-reminder>",
        "<system-reminder>\nctx\n</system-reminder>",
        "run echo OK",
    ]
    leading = _prepare(
        {"messages": [{"role": "system", "content": "first"}, {"role": "user", "content": "hi"}]}
    ).params
    assert leading["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "<system-reminder>\nfirst\n</system-reminder>"},
                {"type": "text", "text": "hi"},
            ],
        }
    ]
    forwarded = _prepare({"messages": CLAUDE_CODE_MESSAGES}, system_messages="forward").params
    assert [m["role"] for m in forwarded["messages"]] == ["user", "system"]


def test_system_messages_refused_in_the_wording_claude_code_recognizes() -> None:
    """A13 strict: 'not supported' and "role 'system'" in the message (Claude Code then resends
    without system turns)."""
    with pytest.raises(RequestError) as info:
        _prepare({"messages": CLAUDE_CODE_MESSAGES}, system_messages="reject")
    assert "role 'system' is not supported" in info.value.body["error"]["message"]
    assert info.value.body["error"]["param"] == "messages[1]"


def test_what_a_proxy_cannot_honour_is_a_400() -> None:
    """mcp_servers always, safeguards unless allowed (then removed and reported)."""
    with pytest.raises(RequestError, match="mcp_servers"):
        _prepare({"mcp_servers": [{"type": "url", "url": "https://m", "name": "m"}]})
    with pytest.raises(RequestError, match="safeguards"):
        _prepare({"safeguards": [{"type": "dangerous_tool_use"}]})
    prepared = _prepare(
        {"safeguards": [{"type": "dangerous_tool_use"}]}, allow_unchecked_auto_mode=True
    )
    assert "safeguards" not in prepared.params
    assert prepared.dropped == ("safeguards",)


def test_claude_code_fields_are_kept_and_unknown_ones_pruned() -> None:
    """context_management, output_config, thinking variants, cache_control, defer_loading
    are kept; a made-up field is pruned and reported, never a 422."""
    body = {
        "thinking": {"type": "adaptive", "display": "omitted"},
        "context_management": {"edits": [{"type": "clear_thinking_20251015", "keep": "all"}]},
        "output_config": {"effort": "medium"},
        "metadata": {"user_id": '{"device_id": "d"}'},
        "system": [
            {"type": "text", "text": "You are Claude Code.", "cache_control": {"type": "ephemeral"}}
        ],
        "tools": [{"name": "Bash", "input_schema": {"type": "object"}, "defer_loading": True}],
        "foo": 1,
    }
    prepared = _prepare(body)
    for key in ("thinking", "context_management", "output_config", "metadata", "system", "tools"):
        assert prepared.params[key] == body[key]
    assert prepared.dropped == ("foo",)


def test_every_request_block_type_is_accepted() -> None:
    """history blocks of every kind the SDK knows are forwarded; an unknown one is dropped
    and reported, never a 500."""
    history = [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "look"},
                {"type": "image", "source": {"type": "url", "url": "https://e.x/i.png"}},
                {
                    "type": "document",
                    "source": {"type": "text", "media_type": "text/plain", "data": "doc"},
                },
                {
                    "type": "search_result",
                    "source": "s",
                    "title": "t",
                    "content": [{"type": "text", "text": "r"}],
                },
            ],
        },
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "t", "signature": "s"},
                {"type": "redacted_thinking", "data": "d"},
                {
                    "type": "server_tool_use",
                    "id": "srvtoolu_1",
                    "name": "web_search",
                    "input": {"query": "q"},
                },
                {"type": "web_search_tool_result", "tool_use_id": "srvtoolu_1", "content": []},
                {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}},
                {"type": "future_block_2030"},
            ],
        },
        {
            "role": "user",
            "content": [
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_1",
                    "content": "a.txt",
                    "is_error": False,
                    "cache_control": {"type": "ephemeral"},
                }
            ],
        },
    ]
    prepared = _prepare({"messages": history})
    assert [len(m["content"]) for m in prepared.params["messages"]] == [4, 5, 1]
    assert [(r.path, r.reason) for r in prepared.removals] == [
        ("messages[1].content[5]", "unknown block type 'future_block_2030'")
    ]


def test_non_streaming_requests_get_the_same_preparation() -> None:
    """Claude Code's fallback is the same body without streaming: same translation."""
    prepared = prepare_request("anthropic", {**REQUEST, "messages": CLAUDE_CODE_MESSAGES})
    assert not prepared.stream
    assert [m["role"] for m in prepared.params["messages"]] == ["user"]


def test_a_wrong_value_is_an_anthropic_400_naming_its_path() -> None:
    """P10 in this dialect too: the path in the client's own body."""
    with pytest.raises(RequestError) as info:
        _prepare({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]})
    assert info.value.body["error"]["param"] == "messages[0].content[0].text"


@pytest.mark.anyio
async def test_routes_auth_count_tokens_and_non_streaming() -> None:
    """?beta=true, count_tokens, a non-streaming request answered with the same
    Message the stream accumulates to."""
    backend = MessagesBackend()
    app = _app(backend)
    async with sdk_http.AsyncClient(
        transport=sdk_http.ASGITransport(app=app), base_url="http://test"
    ) as http:
        plain = await http.post("/v1/messages?beta=true", json=REQUEST)
        counted = await http.post("/v1/messages/count_tokens?beta=true", json=REQUEST)
    assert plain.status_code == 200
    assert plain.json() == backend.answer
    assert plain.headers["request-id"].startswith("req_")
    assert counted.json() == estimate_input_tokens(REQUEST)
    assert counted.json()["input_tokens"] > 0
    assert [call.stream for call in backend.calls] == [False]


def test_removals_record_the_client_paths() -> None:
    """Folding system messages shifts indices; a removal still names the client's message."""
    removals = Removals()
    from aiostream_synth._dialects.anthropic.sanitize import sanitize_anthropic_body

    sanitize_anthropic_body(
        {
            **REQUEST,
            "messages": [
                *CLAUDE_CODE_MESSAGES,
                {"role": "user", "content": [{"type": "brand_new"}]},
            ],
        },
        removals=removals,
    )
    assert removals.paths == ["messages[2].content[0]"]


def test_replayed_assistant_blocks_stay_plain_json() -> None:
    """The SDK's request union also admits its response block models; validated params are
    still the JSON the client sent (a model instance inside would not serialize)."""
    history = [
        {"role": "user", "content": "run it"},
        {"role": "assistant", "content": [THINKING, TEXT, TOOL_USE]},
        {
            "role": "user",
            "content": [{"type": "tool_result", "tool_use_id": "toolu_01", "content": "OK"}],
        },
    ]
    params = _prepare({"messages": history}).params
    assert orjson.loads(orjson.dumps(params["messages"])) == history


def test_a_per_turn_output_config_becomes_the_requests_own() -> None:
    """Claude Code's system message may carry the turn's effort (per-turn-control): applied,
    not dropped; what cannot be applied (clear_at) is reported quietly."""
    system = {
        "role": "system",
        "content": "env",
        "output_config": {"effort": "high"},
        "clear_at": "next_user_message",
    }
    prepared = _prepare(
        {"messages": [CLAUDE_CODE_MESSAGES[0], system], "output_config": {"format": None}}
    )
    assert prepared.params["output_config"] == {"format": None, "effort": "high"}
    assert [(r.path, r.benign) for r in prepared.removals] == [("messages[1].clear_at", True)]


@pytest.mark.anyio
async def test_the_sse_starlette_adapter_serves_messages_and_count_tokens() -> None:
    """The Starlette routes serve the dialect the same way: the SDK's stream helper, a
    pre-commit error in Anthropic's shape, count_tokens."""
    from starlette.applications import Starlette

    from aiostream_synth.starlette import synthesizing_routes

    backend = MessagesBackend(delay=K * 2.5)
    app = Starlette(routes=synthesizing_routes(backend, StreamSettings(keepalive_interval=K)))
    async with _sdk(app) as client:
        async with client.messages.stream(**REQUEST) as stream:
            final = await stream.get_final_message()
        counted = await client.messages.count_tokens(model="m", messages=REQUEST["messages"])
    assert final.model_dump(exclude_none=True)["content"] == backend.answer["content"]
    assert counted.input_tokens == estimate_input_tokens(REQUEST)["input_tokens"]

    class Failed(Exception):
        status_code = 500

    failing = Starlette(routes=synthesizing_routes(MessagesBackend(error=Failed("bad"))))
    async with sdk_http.AsyncClient(
        transport=sdk_http.ASGITransport(app=failing), base_url="http://t"
    ) as http:
        response = await http.post("/v1/messages", json={**REQUEST, "stream": True})
    assert response.status_code == 500
    assert response.json()["error"] == {"type": "api_error", "message": "bad"}
    assert response.headers["x-should-retry"] == "false"
