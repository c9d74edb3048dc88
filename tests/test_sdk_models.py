"""Every event the library can emit validates against the installed SDKs' own models.

Strict pydantic validation (``strict=True``, never ``construct``) with ``TypeAdapter(
ResponseStreamEvent)`` and ``ChatCompletionChunk``: the next SDK release that adds a required
field fails this test instead of a client (decision P10). Covered: chat chunks (text, reasoning,
tool and custom calls, refusal, several choices, logprobs, the usage chunk), Responses in both
fidelities for every item kind and status, keepalive events, failure streams, and continuations
after keepalives, through the reference functions and through the engine.

Two deliberate divergences, each validated but for the one field concerned:

* a Responses failure may carry ``error.code`` values the Codex CLI reads but the SDK's
  ``ResponseError.code`` literal lacks (``context_length_exceeded``, ``server_is_overloaded``,
  decision P6);
* a chat custom (free-form) tool call streams as ``{"type": "custom", "custom": {"name",
  "input"}}``: the SDK's chunk type admits only function deltas, as chat custom calls have no
  streaming shape of their own; their own shape is checked instead.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from aiostream_synth import (
    AnthropicDialect,
    ChatDialect,
    ResponsesDialect,
    SynthesizedStream,
    synthesize_anthropic_sse,
    synthesize_chat_completion_sse,
    synthesize_responses_sse,
)
from aiostream_synth._dialects.base import StreamDialect
from aiostream_synth.sse import (
    Fidelity,
    synthesize_responses_failure_sse,
    synthesize_responses_keepalive_sse,
)

from .support.sdk_validation import (
    sdk_result,
    validate_anthropic,
    validate_chat,
    validate_responses,
)
from .support.sse_parser import parse

FIDELITIES: list[Fidelity] = ["minimal", "full"]


# -- chat ---------------------------------------------------------------------------------------

TOOL_CALL = {"id": "call_1", "type": "function", "function": {"name": "f", "arguments": '{"a":1}'}}
CUSTOM_CALL = {
    "id": "call_2",
    "type": "custom",
    "custom": {"name": "apply_patch", "input": "*** Begin"},
}
LOGPROBS = {
    "content": [{"token": "hi", "logprob": -0.1, "bytes": [104, 105], "top_logprobs": []}],
    "refusal": None,
}
CHAT_CASES: dict[str, dict[str, Any]] = {
    "text": {"message": {"role": "assistant", "content": "hi"}, "finish_reason": "stop"},
    "reasoning": {
        "message": {"role": "assistant", "content": "hi", "reasoning_content": "think"},
        "finish_reason": "stop",
    },
    "tool calls": {
        "message": {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL, CUSTOM_CALL]},
        "finish_reason": "tool_calls",
    },
    "refusal": {
        "message": {"role": "assistant", "content": None, "refusal": "no"},
        "finish_reason": "content_filter",
    },
    "length": {"message": {"role": "assistant", "content": "cut"}, "finish_reason": "length"},
    "logprobs": {
        "message": {"role": "assistant", "content": "hi"},
        "finish_reason": "stop",
        "logprobs": LOGPROBS,
    },
}
USAGES: list[Any] = [
    None,
    {"prompt_tokens": 3, "completion_tokens": 2, "total_tokens": 5},
    {
        "prompt_tokens": 3,
        "completion_tokens": 2,
        "total_tokens": 5,
        "prompt_tokens_details": {"cached_tokens": None},
        "completion_tokens_details": {"reasoning_tokens": None},
    },
    {"prompt_tokens": 3},
]


@pytest.mark.parametrize("case", list(CHAT_CASES))
@pytest.mark.parametrize("usage", USAGES)
def test_every_chat_chunk_validates(case: str, usage: Any) -> None:
    """Every chunk, the usage chunk included, is a valid ChatCompletionChunk."""
    completion: dict[str, Any] = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, **CHAT_CASES[case]}],
    }
    if usage is not None:
        completion["usage"] = usage
    frames = "".join(
        synthesize_chat_completion_sse(
            completion, include_usage=True, emit_reasoning_alias=True, include_logprobs=True
        )
    )
    assert validate_chat(frames) >= 2


def test_chat_chunks_of_a_bare_completion_and_several_choices_validate() -> None:
    """No id/created/model, two choices: still valid chunks."""
    bare = {
        "choices": [
            {"message": {"content": "a"}},
            {"message": {"content": "b"}, "finish_reason": "stop"},
        ]
    }
    assert validate_chat("".join(synthesize_chat_completion_sse(bare))) == 6


# -- Responses ------------------------------------------------------------------------------------

MESSAGE = {
    "type": "message",
    "id": "msg_1",
    "role": "assistant",
    "status": "completed",
    "content": [{"type": "output_text", "text": "hi", "annotations": []}],
}
ITEMS: dict[str, dict[str, Any]] = {
    "message": MESSAGE,
    "message without status and annotations": {
        "type": "message",
        "role": "assistant",
        "content": [{"type": "output_text", "text": "hi"}],
    },
    "refusal": {
        "type": "message",
        "id": "msg_2",
        "role": "assistant",
        "status": "completed",
        "content": [{"type": "refusal", "refusal": "no"}],
    },
    "citation": {
        **MESSAGE,
        "content": [
            {
                "type": "output_text",
                "text": "see",
                "annotations": [
                    {
                        "type": "url_citation",
                        "start_index": 0,
                        "end_index": 3,
                        "url": "https://e.x",
                        "title": "t",
                    }
                ],
            }
        ],
    },
    "reasoning": {
        "type": "reasoning",
        "id": "rs_1",
        "summary": [{"type": "summary_text", "text": "plan"}],
        "content": [{"type": "reasoning_text", "text": "raw"}],
        "encrypted_content": "enc",
    },
    "reasoning without id": {
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": "plan"}],
    },
    "function call": {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "f",
        "arguments": "{}",
        "status": "completed",
    },
    "namespaced call": {
        "type": "function_call",
        "id": "fc_2",
        "call_id": "call_2",
        "name": "ns__g",
        "arguments": "{}",
        "status": "completed",
    },
    "custom call": {
        "type": "custom_tool_call",
        "id": "ctc_1",
        "call_id": "call_3",
        "name": "apply_patch",
        "input": "*** Begin Patch",
    },
    "web search": {
        "type": "web_search_call",
        "id": "ws_1",
        "status": "completed",
        "action": {"type": "search", "query": "q"},
    },
}
STATUSES: list[tuple[str, dict[str, Any]]] = [
    ("completed", {}),
    ("incomplete", {"incomplete_details": {"reason": "max_output_tokens"}}),
    ("failed", {"error": {"code": "server_error", "message": "x"}}),
]


@pytest.mark.parametrize("fidelity", FIDELITIES)
@pytest.mark.parametrize("item", list(ITEMS))
@pytest.mark.parametrize(("status", "extra"), STATUSES)
def test_every_responses_event_validates(
    fidelity: Fidelity, item: str, status: str, extra: dict[str, Any]
) -> None:
    """Both fidelities, every item kind and status, usage with null counters: all valid."""
    usage = {
        "input_tokens": 3,
        "output_tokens": 2,
        "total_tokens": 5,
        "input_tokens_details": {"cached_tokens": None},
    }
    result = sdk_result([ITEMS[item]], status, extra, usage)
    frames = "".join(
        synthesize_responses_sse(result, {"ns__g": ("ns", "g")}, fidelity=fidelity, delta_chars=2)
    )
    types = validate_responses(frames)
    assert types[0] == "response.created"


@pytest.mark.parametrize("fidelity", FIDELITIES)
def test_a_bare_result_streams_valid_events(fidelity: Fidelity) -> None:
    """A result with nothing but an output list and no usage: still valid."""
    frames = "".join(
        synthesize_responses_sse(
            {"output": [ITEMS["message without status and annotations"]]}, fidelity=fidelity
        )
    )
    assert validate_responses(frames)[-1] == "response.completed"


@pytest.mark.parametrize(
    "base", [None, {"model": "m", "tool_choice": "auto", "reasoning": {"effort": "low"}}]
)
def test_keepalive_events_validate(base: Any) -> None:
    """created + in_progress, then in_progress alone, with or without a skeleton base."""
    frames = "".join(synthesize_responses_keepalive_sse("resp_k", True, base=base))
    frames += "".join(
        synthesize_responses_keepalive_sse("resp_k", False, base=base, sequence_start=2)
    )
    assert validate_responses(frames) == [
        "response.created",
        "response.in_progress",
        "response.in_progress",
    ]


@pytest.mark.parametrize("fidelity", FIDELITIES)
@pytest.mark.parametrize(
    "code",
    [
        "server_error",
        "rate_limit_exceeded",
        "invalid_prompt",
        "context_length_exceeded",
        "server_is_overloaded",
        None,
    ],
)
@pytest.mark.parametrize("include_created", [True, False])
def test_failure_events_validate(
    fidelity: Fidelity, code: str | None, include_created: bool
) -> None:
    """Failure streams in both fidelities, opened or continuing."""
    frames = "".join(
        synthesize_responses_failure_sse(
            "boom", code, "resp_f", include_created, fidelity=fidelity, base={"model": "m"}
        )
    )
    assert validate_responses(frames)[-1] == "response.failed"


@pytest.mark.parametrize("fidelity", FIDELITIES)
def test_a_continuation_after_keepalives_validates(fidelity: Fidelity) -> None:
    """Keepalives, then the result continuing the same response id and numbering."""
    frames = "".join(synthesize_responses_keepalive_sse("resp_k", True, base={"model": "m"}))
    frames += "".join(
        synthesize_responses_keepalive_sse("resp_k", False, base={"model": "m"}, sequence_start=2)
    )
    result = sdk_result(list(ITEMS.values()), "completed", {}, None)
    frames += "".join(
        synthesize_responses_sse(
            result, include_created=False, fidelity=fidelity, response_id="resp_k", sequence_start=3
        )
    )
    types = validate_responses(frames)
    assert types[-1] == "response.completed"
    numbers = [e.json()["sequence_number"] for e in parse(frames)]
    assert numbers == list(range(len(numbers)))


# -- through the engine ---------------------------------------------------------------------------


async def _engine_frames(dialect: StreamDialect, result: Any, ticks: int) -> bytes:
    async def backend() -> Any:
        # Ends after ``ticks`` keepalive deadlines; loop timers fire in deadline order.
        await anyio.sleep((ticks + 0.5) * 0.02)
        if isinstance(result, Exception):
            raise result
        return result

    frames = b""
    async with SynthesizedStream(backend, dialect, keepalive_interval=0.02) as stream:
        async for frame in stream:
            frames += frame
    return frames


@pytest.mark.anyio
@pytest.mark.parametrize("fidelity", FIDELITIES)
@pytest.mark.parametrize("ticks", [0, 2])
async def test_engine_streams_validate(fidelity: Fidelity, ticks: int) -> None:
    """The engine's own streams: before and after keepalives, a result and a failure."""
    base = {"model": "m", "tool_choice": "auto"}
    result = sdk_result(list(ITEMS.values()), "completed", {}, {"input_tokens": 1})
    frames = await _engine_frames(
        ResponsesDialect(fidelity=fidelity, base=base, ns_map={"ns__g": ("ns", "g")}), result, ticks
    )
    types = validate_responses(frames)
    assert types[-1] == "response.completed"
    if ticks:  # a continuation: keepalive events came first
        assert types[:2] == ["response.created", "response.in_progress"]
        assert types.count("response.created") == 1
    if ticks:
        failed = await _engine_frames(
            ResponsesDialect(fidelity=fidelity, base=base), RuntimeError("x"), ticks
        )
        assert validate_responses(failed)[-1] == "response.failed"
    chat = {
        "id": "c",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, **CHAT_CASES["tool calls"]}],
        "usage": USAGES[2],
    }
    frames = await _engine_frames(ChatDialect(include_usage=True), chat, ticks)
    data_only = b"".join(f"data: {e.data}\n\n".encode() for e in parse(frames))
    assert validate_chat(data_only) >= 3


# -- Anthropic Messages -------------------------------------------------------------------------

ANTHROPIC_BLOCKS: dict[str, dict[str, Any]] = {
    "text": {"type": "text", "text": "hi"},
    "text with citation": {
        "type": "text",
        "text": "see",
        "citations": [
            {
                "type": "char_location",
                "cited_text": "x",
                "document_index": 0,
                "document_title": None,
                "start_char_index": 0,
                "end_char_index": 1,
            }
        ],
    },
    "thinking": {"type": "thinking", "thinking": "plan", "signature": "sig"},
    "redacted thinking": {"type": "redacted_thinking", "data": "opaque"},
    "tool use": {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}},
    "server tool use": {
        "type": "server_tool_use",
        "id": "srvtoolu_1",
        "name": "web_search",
        "input": {"query": "q"},
    },
    "web search result": {
        "type": "web_search_tool_result",
        "tool_use_id": "srvtoolu_1",
        "content": [],
    },
}


def _anthropic_message(
    block: dict[str, Any], stop_reason: str, usage: dict[str, Any]
) -> dict[str, Any]:
    return {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [block],
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }


@pytest.mark.parametrize("block", list(ANTHROPIC_BLOCKS))
@pytest.mark.parametrize("stop_reason", ["end_turn", "tool_use", "max_tokens", "refusal"])
@pytest.mark.parametrize(
    "usage",
    [
        {"input_tokens": 3, "output_tokens": 2},
        {"input_tokens": None, "cache_read_input_tokens": None},
    ],
)
def test_every_anthropic_event_validates(
    block: str, stop_reason: str, usage: dict[str, Any]
) -> None:
    """Every block kind and stop reason, usage with nulls: all valid Messages events."""
    frames = "".join(
        synthesize_anthropic_sse(_anthropic_message(ANTHROPIC_BLOCKS[block], stop_reason, usage))
    )
    assert validate_anthropic(frames)[-1] == "message_stop"


@pytest.mark.anyio
@pytest.mark.parametrize("ticks", [0, 2])
async def test_anthropic_engine_streams_validate(ticks: int) -> None:
    """Keepalives (message_start, pings, an event keepalive), the continuation, a failure."""
    message = _anthropic_message(
        ANTHROPIC_BLOCKS["tool use"], "tool_use", {"input_tokens": 5, "output_tokens": 1}
    )
    dialect = AnthropicDialect(model="m", event_keepalive_s=0.01)
    types = validate_anthropic(await _engine_frames(dialect, message, ticks))
    assert types[-1] == "message_stop"
    if ticks:
        assert types[:2] == ["message_start", "ping"]
        assert "message_delta" in types[2:-2]  # the event keepalive
        failed = validate_anthropic(await _engine_frames(dialect, RuntimeError("x"), ticks))
        assert failed[-1] == "error"
