"""Chat Completions dialect: request sanitizing and synthesis."""

from __future__ import annotations

import copy
import json
import logging
from typing import Any, cast

import httpx
import openai
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletion, ChatCompletionChunk

from aiostream_synth import synthesize_chat_completion_sse
from aiostream_synth._dialects.chat.sanitize import chat_param_fields, wants_usage
from aiostream_synth.errors import InvalidRequestError, InvalidResultError
from aiostream_synth.params import ChatCompletionParams, sanitize_streaming_chat_body
from aiostream_synth.sse import chat_error_frame

from .support.sse_parser import parse

# -- sanitize -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        (None, False),
        ({}, False),
        ({"include_usage": False}, False),
        ({"include_usage": 0}, False),
        ([("include_usage", True)], False),
        ("include_usage", False),
        ({"include_usage": True}, True),
        ({"include_usage": 1}, True),
        ({"include_usage": "yes"}, True),
    ],
)
def test_usage_is_wanted_only_for_a_dict_with_truthy_include_usage(
    options: Any, expected: bool
) -> None:
    """include_usage is read with truthiness, only from a dict, and always as a real bool."""
    assert wants_usage(options) is expected


def test_usage_attribute_on_an_object_does_not_count() -> None:
    """An object with an include_usage attribute is not a dict."""

    class Options:
        include_usage = True

    assert wants_usage(Options()) is False


def test_sanitize_drops_stream_fields_and_reports_usage() -> None:
    """The reference example: stream fields gone, include_usage from stream_options."""
    assert sanitize_streaming_chat_body(
        {"messages": [], "stream": True, "stream_options": {"include_usage": True}}
    ) == ({"messages": []}, True)


def test_sanitize_drops_unknown_keys_and_keeps_known_ones(caplog: pytest.LogCaptureFixture) -> None:
    """Harness bookkeeping is removed, named in one WARNING record; known values are not inspected."""
    caplog.set_level(logging.DEBUG, "aiostream_synth")
    cleaned, usage = sanitize_streaming_chat_body(
        {
            "messages": [],
            "stream": True,
            "client_bookkeeping": {"a": 1},
            "temperature": "hot",
            "zz": 1,
        }
    )
    assert cleaned == {"messages": [], "temperature": "hot"}
    assert usage is False
    (record,) = caplog.records
    assert record.levelno == logging.WARNING
    assert record.getMessage() == (
        "chat request: removed client_bookkeeping (not a request parameter), "
        "zz (not a request parameter)"
    )


def test_sanitize_drops_tools_of_unknown_type_and_reports_them() -> None:
    """A chat tool whose type the SDK does not know is dropped and reported; a function tool
    without strict (how SDKs write it) is kept (decision P10)."""
    from aiostream_synth._params.removals import Removals

    removals = Removals()
    fn = {"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}
    cleaned, _ = sanitize_streaming_chat_body(
        {"messages": [], "tools": [{"type": "web_search_2030"}, fn]}, removals=removals
    )
    assert cleaned["tools"] == [fn]
    assert [(r.path, r.reason) for r in removals] == [
        ("tools[0]", "unknown tool type 'web_search_2030'")
    ]


def test_sanitize_logs_nothing_when_nothing_is_dropped(caplog: pytest.LogCaptureFixture) -> None:
    """No removal, no record."""
    caplog.set_level(logging.DEBUG, "aiostream_synth")
    sanitize_streaming_chat_body({"messages": [], "stream": True})
    assert not caplog.records


def test_sanitize_never_mutates_the_body() -> None:
    """stream and stream_options stay in the caller's dict."""
    body = {
        "messages": [{"role": "user", "content": "x"}],
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    before = copy.deepcopy(body)
    sanitize_streaming_chat_body(body)
    assert body == before


def test_sanitize_does_not_look_at_the_stream_value() -> None:
    """A non-True stream is still removed (dispatch decides)."""
    assert sanitize_streaming_chat_body({"messages": [], "stream": "false"})[0] == {"messages": []}


def test_param_fields_mirror_the_sdk_without_provider_extensions() -> None:
    """The kept field set is the strict params model's, minus provider extensions."""
    fields = chat_param_fields()
    assert {"messages", "model", "tools", "temperature", "stream", "stream_options"} <= fields
    assert not fields & {"chat_template_kwargs", "thinking", "output_config"}
    assert fields <= set(ChatCompletionParams.model_fields)


def test_sanitize_rejects_a_non_dict_body() -> None:
    """A body that is not an object gets the library's clear error."""
    with pytest.raises(InvalidRequestError, match="expected a JSON object"):
        sanitize_streaming_chat_body(["messages"])  # type: ignore[arg-type]


# -- synthesis ----------------------------------------------------------------------------------


def _completion(**message: Any) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1700000000,
        "model": "m",
        "choices": [
            {"index": 0, "message": {"role": "assistant", **message}, "finish_reason": "stop"}
        ],
    }


def _chunks(completion: Any, **kwargs: Any) -> list[dict[str, Any]]:
    blocks = list(synthesize_chat_completion_sse(completion, **kwargs))
    assert blocks[-1] == "data: [DONE]\n\n"
    return [json.loads(b.removeprefix("data: ")) for b in blocks[:-1]]


def test_reference_vector_chunks() -> None:
    """The reference byte vector, compared as parsed objects (decision P2)."""
    completion = _completion(
        content="hi",
        reasoning_content="think",
        tool_calls=[
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"SF"}'},
            }
        ],
    )
    completion["choices"][0]["finish_reason"] = "tool_calls"
    completion["usage"] = {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10}
    head = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1700000000,
        "model": "m",
    }
    assert _chunks(completion, include_usage=True) == [
        {**head, "choices": [{"index": 0, "delta": {"role": "assistant"}, "finish_reason": None}]},
        {
            **head,
            "choices": [
                {"index": 0, "delta": {"reasoning_content": "think"}, "finish_reason": None}
            ],
        },
        {**head, "choices": [{"index": 0, "delta": {"content": "hi"}, "finish_reason": None}]},
        {
            **head,
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": "get_weather", "arguments": '{"city":"SF"}'},
                            }
                        ]
                    },
                    "finish_reason": None,
                }
            ],
        },
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
        {
            **head,
            "choices": [],
            "usage": {"prompt_tokens": 7, "completion_tokens": 3, "total_tokens": 10},
        },
    ]


def test_frames_are_data_only_compact_utf8_blocks() -> None:
    """One data line per block, no event line, compact JSON, non-ASCII unescaped (P2)."""
    blocks = list(synthesize_chat_completion_sse(_completion(content="héllo ✓")))
    for block in blocks:
        assert block.startswith("data: ")
        assert block.endswith("\n\n")
        assert block.count("\n") == 2
    assert '"content":"héllo ✓"' in blocks[1]
    assert ", " not in blocks[0]


def test_chunk_keys_are_in_reference_order_with_fingerprint_and_usage_last() -> None:
    """id, object, created, model, choices, then system_fingerprint, then usage."""
    completion = {
        **_completion(content="x"),
        "system_fingerprint": "fp",
        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
    }
    chunks = _chunks(completion, include_usage=True)
    assert [list(c) for c in chunks[:-1]] == [
        ["id", "object", "created", "model", "choices", "system_fingerprint"]
    ] * 3
    assert list(chunks[-1]) == [
        "id",
        "object",
        "created",
        "model",
        "choices",
        "system_fingerprint",
        "usage",
    ]


def test_missing_id_created_model_are_filled() -> None:
    """Missing keys never raise; because every chunk must validate as the SDK's
    ChatCompletionChunk (P10), a missing id, created or model becomes a generated id, the
    current time and "", the same in every chunk."""
    chunks = _chunks({"choices": [{"message": {"content": "x"}}]})
    assert chunks[0]["id"].startswith("chatcmpl-")
    assert isinstance(chunks[0]["created"], int)
    assert chunks[0]["model"] == ""
    assert len({(c["id"], c["created"], c["model"]) for c in chunks}) == 1


def test_completion_keys_are_not_copied_implicitly() -> None:
    """service_tier and usage of the completion stay out of chunks without include_usage."""
    completion = {
        **_completion(content="x"),
        "service_tier": "default",
        "usage": {"prompt_tokens": 1},
    }
    for chunk in _chunks(completion):
        assert "service_tier" not in chunk
        assert "usage" not in chunk


def test_missing_message_and_empty_role_give_assistant_role() -> None:
    """A null message is an empty one; the role delta has exactly one key."""
    chunks = _chunks({"id": "x", "choices": [{"message": None, "finish_reason": "stop"}]})
    assert [c["choices"][0]["delta"] for c in chunks] == [{"role": "assistant"}, {}]
    chunks = _chunks({"id": "x", "choices": [{"message": {"role": ""}}]})
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant"}
    assert chunks[-1]["choices"][0]["finish_reason"] is None


def test_reasoning_falls_back_to_the_reasoning_key() -> None:
    """Output key is reasoning_content even when the source key was reasoning."""
    deltas = [c["choices"][0]["delta"] for c in _chunks(_completion(reasoning="r"))]
    assert {"reasoning_content": "r"} in deltas
    deltas = [
        c["choices"][0]["delta"]
        for c in _chunks(_completion(reasoning="r"), emit_reasoning_alias=True)
    ]
    assert {"reasoning_content": "r", "reasoning": "r"} in deltas


def test_empty_content_gives_no_content_chunk() -> None:
    """Empty string or null content: no chunk carries content."""
    for content in ("", None):
        assert all(
            "content" not in c["choices"][0]["delta"] for c in _chunks(_completion(content=content))
        )


def test_list_content_is_joined_from_text_parts() -> None:
    """text parts joined, other parts ignored."""
    parts = [
        {"type": "text", "text": "a"},
        {"type": "image_url", "image_url": {}},
        {"type": "text", "text": "b"},
    ]
    deltas = [c["choices"][0]["delta"] for c in _chunks(_completion(content=parts))]
    assert {"content": "ab"} in deltas


def test_order_is_role_reasoning_content_refusal_tools_finish() -> None:
    """Fixed order, every non-final chunk has finish_reason null."""
    completion = _completion(
        content="c",
        reasoning_content="r",
        refusal="no",
        tool_calls=[{"id": "1", "function": {"name": "f"}}],
    )
    chunks = _chunks(completion)
    keys = [next(iter(c["choices"][0]["delta"]), "finish") for c in chunks]
    assert keys == ["role", "reasoning_content", "content", "refusal", "tool_calls", "finish"]
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 5 + ["stop"]


def test_tool_calls_in_one_delta_with_defaults() -> None:
    """All calls in one delta; missing id/name null, arguments '' and type function."""
    completion = _completion(
        tool_calls=[{"function": {"name": "a", "arguments": None}}, {"id": "c2", "function": None}]
    )
    (delta,) = [
        c["choices"][0]["delta"]
        for c in _chunks(completion)
        if "tool_calls" in c["choices"][0]["delta"]
    ]
    assert delta["tool_calls"] == [
        {"index": 0, "id": None, "type": "function", "function": {"name": "a", "arguments": ""}},
        {"index": 1, "id": "c2", "type": "function", "function": {"name": None, "arguments": ""}},
    ]


def test_custom_tool_calls_keep_their_input() -> None:
    """a custom call streams as type custom with its name and input."""
    completion = _completion(
        tool_calls=[{"id": "c", "type": "custom", "custom": {"name": "exec", "input": "ls -la"}}]
    )
    (delta,) = [
        c["choices"][0]["delta"]
        for c in _chunks(completion)
        if "tool_calls" in c["choices"][0]["delta"]
    ]
    assert delta["tool_calls"] == [
        {"index": 0, "id": "c", "type": "custom", "custom": {"name": "exec", "input": "ls -la"}}
    ]


def test_choices_use_list_position_and_stay_in_order() -> None:
    """Choice index = list position; all chunks of choice 0 first; tool index restarts."""
    completion = {
        "id": "x",
        "choices": [
            {
                "index": 7,
                "message": {"content": "a", "tool_calls": [{"id": "1", "function": {"name": "f"}}]},
            },
            {
                "index": 3,
                "message": {"content": "b", "tool_calls": [{"id": "2", "function": {"name": "g"}}]},
            },
        ],
    }
    chunks = _chunks(completion)
    indexes = [c["choices"][0]["index"] for c in chunks]
    assert indexes == sorted(indexes)
    assert set(indexes) == {0, 1}
    calls = [
        c["choices"][0]["delta"]["tool_calls"][0]["index"]
        for c in chunks
        if "tool_calls" in c["choices"][0]["delta"]
    ]
    assert calls == [0, 0]


def test_usage_chunk_only_when_asked_and_present() -> None:
    """include_usage without usage gives no usage chunk; usage nulls become 0 (decision P5)."""
    assert all("usage" not in c for c in _chunks(_completion(content="x"), include_usage=True))
    completion = {
        **_completion(),
        "usage": {
            "prompt_tokens": 1,
            "completion_tokens": None,
            "total_tokens": 1,
            "prompt_tokens_details": {"cached_tokens": None},
        },
    }
    usage = _chunks(completion, include_usage=True)[-1]["usage"]
    assert usage == {
        "prompt_tokens": 1,
        "completion_tokens": 0,
        "total_tokens": 1,
        "prompt_tokens_details": {"cached_tokens": 0},
    }


def test_empty_choices_is_just_done() -> None:
    """No choices, no usage: exactly the sentinel."""
    assert "".join(synthesize_chat_completion_sse({"id": "x"})) == "data: [DONE]\n\n"
    assert (
        "".join(synthesize_chat_completion_sse({"id": "x", "choices": None})) == "data: [DONE]\n\n"
    )


def test_synthesis_is_lazy_and_does_not_mutate() -> None:
    """A generator of str; the completion is left as it was."""
    completion = _completion(content="x", tool_calls=[{"id": "1", "function": {"name": "f"}}])
    before = copy.deepcopy(completion)
    stream = synthesize_chat_completion_sse(completion)
    assert iter(stream) is stream
    assert all(isinstance(block, str) for block in stream)
    assert completion == before


def test_logprobs_only_behind_the_option() -> None:
    """logprobs attach to the content chunk only when asked."""
    completion = _completion(content="x")
    completion["choices"][0]["logprobs"] = {
        "content": [{"token": "x", "logprob": -0.1, "bytes": None, "top_logprobs": []}]
    }
    assert all("logprobs" not in c["choices"][0] for c in _chunks(completion))
    with_lp = [
        c for c in _chunks(completion, include_logprobs=True) if "logprobs" in c["choices"][0]
    ]
    assert with_lp[0]["choices"][0]["logprobs"] == completion["choices"][0]["logprobs"]


def test_pydantic_models_are_accepted() -> None:
    """An openai ChatCompletion object synthesizes like its JSON."""
    data = _completion(content="hi")
    model = ChatCompletion.model_validate(data)
    assert _chunks(model) == _chunks(data)


@pytest.mark.parametrize(
    ("completion", "path"),
    [
        ("nope", "<root>"),
        ({"choices": "x"}, "choices"),
        ({"choices": [3]}, "choices.0"),
        ({"choices": [{"message": "hi"}]}, "choices.0.message"),
        ({"choices": [{"message": {"tool_calls": {"a": 1}}}]}, "choices.0.message.tool_calls"),
        ({"choices": [{"message": {"tool_calls": ["x"]}}]}, "choices.0.message.tool_calls.0"),
        ({"choices": [{"message": {"content": 5}}]}, "choices.0.message.content"),
        ({"choices": [{"message": {"content": [1]}}]}, "choices.0.message.content.0"),
        (
            {"choices": [{"message": {"tool_calls": [{"function": {"arguments": {"a": 1}}}]}}]},
            "choices.0.message.tool_calls.0.function.arguments",
        ),
        # values JSON cannot carry: orjson refuses them, the error still names the path
        ({"id": object(), "choices": ["not even a choice"]}, "id"),
        ({"choices": [{"message": {"content": "\ud800"}}]}, "choices.0.message.content"),
        ({"choices": [{"message": {}, "finish_reason": {1, 2}}]}, "choices.0.finish_reason"),
        (
            {"choices": [{"message": {"tool_calls": [{"id": b"raw"}]}}]},
            "choices.0.message.tool_calls",
        ),
    ],
)
def test_bad_completions_raise_one_clear_error_naming_the_path(completion: Any, path: str) -> None:
    """Wrong shapes raise InvalidResultError (a ValueError) naming the path, before any block."""
    with pytest.raises(InvalidResultError, match=f": {path}: ") as info:
        next(synthesize_chat_completion_sse(completion))
    assert isinstance(info.value, ValueError)


# -- through the openai SDK ---------------------------------------------------------------------

_text = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), max_size=40)
_maybe_text = st.one_of(st.none(), _text)


@st.composite
def _tool_call(draw: st.DrawFn, k: int) -> dict[str, Any]:
    if draw(st.booleans()):
        return {
            "id": f"call_{k}",
            "type": "custom",
            "custom": {"name": draw(_text.filter(bool)), "input": draw(_text)},
        }
    args = json.dumps(draw(st.dictionaries(_text, st.integers(), max_size=3)))
    return {
        "id": f"call_{k}",
        "type": "function",
        "function": {"name": draw(_text.filter(bool)), "arguments": args},
    }


@st.composite
def _completions(draw: st.DrawFn) -> dict[str, Any]:
    choices = []
    for index in range(draw(st.integers(1, 4))):
        message: dict[str, Any] = {"role": "assistant", "content": draw(_maybe_text)}
        if draw(st.booleans()):
            message["reasoning_content"] = draw(_text)
        if draw(st.booleans()):
            message["refusal"] = draw(_text)
        if draw(st.booleans()):
            message["tool_calls"] = [draw(_tool_call(k)) for k in range(draw(st.integers(1, 3)))]
        choices.append(
            {
                "index": index,
                "message": message,
                "finish_reason": draw(
                    st.sampled_from(["stop", "length", "tool_calls", "content_filter"])
                ),
                "logprobs": None,
            }
        )
    completion: dict[str, Any] = {
        "id": "chatcmpl-" + draw(st.text("abc123", min_size=1, max_size=8)),
        "object": "chat.completion",
        "created": draw(st.integers(0, 2**31)),
        "model": draw(_text),
        "choices": choices,
    }
    if draw(st.booleans()):
        completion["usage"] = {"prompt_tokens": 3, "completion_tokens": 4, "total_tokens": 7}
    return completion


@settings(max_examples=150, deadline=None)
@given(completion=_completions(), include_usage=st.booleans())
def test_sdk_accumulator_reassembles_the_completion(
    completion: dict[str, Any], include_usage: bool
) -> None:
    """Our frames → an independent SSE parser → the SDK's ChatCompletionStreamState → the input."""
    raw = "".join(synthesize_chat_completion_sse(completion, include_usage=include_usage))
    events = parse(raw)
    assert events[-1].data == "[DONE]"
    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    for event in events[:-1]:
        state.handle_chunk(ChatCompletionChunk.construct(**event.json()))
    final = state.current_completion_snapshot
    assert final.id == completion["id"]
    assert len(final.choices) == len(completion["choices"])
    for got, want in zip(final.choices, completion["choices"], strict=True):
        message = want["message"]
        assert got.finish_reason == want["finish_reason"]
        assert got.message.content == (message["content"] or None)
        assert getattr(got.message, "reasoning_content", None) == (
            message.get("reasoning_content") or None
        )
        assert got.message.refusal == (message.get("refusal") or None)
        calls = [c.model_dump(exclude_none=True) for c in got.message.tool_calls or []]
        expected: list[dict[str, Any]] = []
        for call in message.get("tool_calls") or []:
            if call["type"] == "custom":
                expected.append(
                    {
                        "id": call["id"],
                        "type": "custom",
                        "custom": call["custom"],
                        "index": len(expected),
                    }
                )
            else:
                expected.append(
                    {
                        "id": call["id"],
                        "type": "function",
                        "function": call["function"],
                        "index": len(expected),
                    }
                )
        assert [
            {k: v for k, v in c.items() if k in ("id", "type", "custom", "function", "index")}
            for c in calls
        ] == expected
    if include_usage and "usage" in completion:
        assert final.usage is not None
        assert final.usage.total_tokens == completion["usage"]["total_tokens"]
    else:
        assert final.usage is None


@pytest.mark.anyio
async def test_sdk_async_stream_raises_api_error_on_our_error_frame() -> None:
    """openai's AsyncStream, reading our bytes over an httpx mock transport, raises APIError."""
    body = b"".join(
        [
            next(iter(synthesize_chat_completion_sse(_completion(content="partial")))).encode(),
            chat_error_frame("backend exploded", code="server_error"),
        ]
    )

    def handler(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, headers={"content-type": "text/event-stream"}, content=body)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as http:
        client = openai.AsyncOpenAI(
            api_key="k", base_url="http://test/v1", http_client=cast(Any, http), max_retries=0
        )
        stream = await client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "x"}], stream=True
        )
        async with stream:
            with pytest.raises(openai.APIError, match="backend exploded"):
                async for _ in stream:
                    pass


def test_error_frame_shape() -> None:
    """One data block with the OpenAI error object, no event line (P6)."""
    (event,) = parse(chat_error_frame("m", code=429, param="p"))
    assert event.event == "message"
    assert event.json() == {
        "error": {"message": "m", "type": "server_error", "code": 429, "param": "p"}
    }
