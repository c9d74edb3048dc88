"""Property tests drawn from the SDKs' own types (issue 38): what P10 promises, for any request.

Members of each list field (chat messages and tools, Responses input items and tools, Anthropic
messages and tools) are drawn from the installed SDKs' param types (:mod:`.sdk_strategies`), so
every key and kind the SDK declares is exercised without a hand-written list. For any of them:

* a valid body is accepted;
* a key newer than the SDK, put on any typed object, is forwarded or removed *and reported at
  the client's own path*, never lost silently or refused;
* an integer where the SDK declares a string is a 400 naming the client's own path (or, when
  another arm of the object's union takes it, forwarded).

Results are drawn too: every Responses output item kind the SDK declares, through the full
fidelity synthesis, gives events that validate strictly against the SDK's event models.
"""

from __future__ import annotations

import copy
import json
from typing import Any, get_args

import pytest
from anthropic.types.beta import BetaMessage, BetaMessageParam, BetaToolUnionParam
from hypothesis import assume, given
from hypothesis import strategies as st
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import (
    ChatCompletion,
    ChatCompletionChunk,
    ChatCompletionMessageParam,
    ChatCompletionToolUnionParam,
)
from openai.types.responses import ResponseInputItemParam, ResponseOutputItem, ToolParam

from aiostream_synth import (
    RequestError,
    prepare_request,
    synthesize_anthropic_sse,
    synthesize_chat_completion_sse,
    synthesize_responses_sse,
)
from aiostream_synth._params.removals import format_path

from .support.anthropic_mock import MOCK_FRAMES, MOCK_SDK, REQUEST
from .support.properties import property_settings
from .support.sdk_strategies import Typed, typed_paths, value_of
from .support.sdk_validation import (
    sdk_result,
    validate_anthropic,
    validate_chat,
    validate_responses,
)
from .support.sse_parser import parse

#: CI's budget: 60 examples per property (see tests/support/properties.py for a longer search).
SETTINGS = property_settings(60)
ANTHROPIC_BASE = {"model": "m", "max_tokens": 5, "stream": True}
CASES: dict[str, tuple[str, str, Any, dict[str, Any]]] = {
    "chat messages": ("chat", "messages", ChatCompletionMessageParam, {"model": "m"}),
    "chat tools": (
        "chat",
        "tools",
        ChatCompletionToolUnionParam,
        {"model": "m", "messages": [{"role": "user", "content": "hi"}]},
    ),
    "responses input": ("responses", "input", ResponseInputItemParam, {"model": "m"}),
    "responses tools": ("responses", "tools", ToolParam, {"model": "m", "input": "hi"}),
    "anthropic messages": ("anthropic", "messages", BetaMessageParam, ANTHROPIC_BASE),
    "anthropic tools": (
        "anthropic",
        "tools",
        BetaToolUnionParam,
        {**ANTHROPIC_BASE, "messages": [{"role": "user", "content": "hi"}]},
    ),
}
NEW_KEY = "zz_newer_than_the_sdk"


def _members(case: str) -> st.SearchStrategy[list[Any]]:
    return st.lists(value_of(CASES[case][2]), min_size=1, max_size=2)


def _body(case: str, members: list[Any]) -> tuple[str, dict[str, Any]]:
    dialect, field, _, base = CASES[case]
    return dialect, {**base, "stream": True, field: members}


def _prepare(dialect: str, body: dict[str, Any]) -> Any:
    return prepare_request(dialect, json.dumps(body).encode())


def _documented_refusal(body: dict[str, Any]) -> bool:
    """What the library refuses by design (documented): a namespace sub-tool whose
    ``parameters`` is no JSON Schema a flat function tool can carry (an array, a string...)."""
    for tool in body.get("tools") or ():
        if isinstance(tool, dict) and tool.get("type") == "namespace":
            for sub in tool.get("tools") or ():
                parameters = sub.get("parameters") if isinstance(sub, dict) else None
                if parameters is not None and not isinstance(parameters, dict | bool):
                    return True
    return False


@pytest.mark.parametrize("case", list(CASES))
def test_a_valid_sdk_body_is_accepted(case: str) -> None:
    @SETTINGS
    @given(_members(case))
    def check(members: list[Any]) -> None:
        dialect, body = _body(case, members)
        assume(not _documented_refusal(body))
        try:
            _prepare(dialect, body)
        except RequestError as exc:  # pragma: no cover - the failure being reported
            pytest.fail(f"valid body refused: {exc.body['error']} for {json.dumps(body)[:2000]}")

    check()


def _field_path(case: str, path: tuple[str | int, ...]) -> tuple[str | int, ...]:
    return (CASES[case][1], *path)


def _reported(expected: str, dropped: tuple[str, ...]) -> bool:
    """Whether ``expected`` was reported removed: itself, or an object containing it (a block
    of a system message that has no place in a user turn goes whole, with its reason)."""
    return any(
        path == expected or expected.startswith((f"{path}.", f"{path}[")) for path in dropped
    )


@pytest.mark.parametrize("case", list(CASES))
def test_a_newer_key_anywhere_is_forwarded_or_reported_at_its_path(case: str) -> None:
    @SETTINGS
    @given(_members(case), st.data())
    def check(members: list[Any], data: st.DataObject) -> None:
        dialect, body = _body(case, members)
        assume(not _documented_refusal(body))
        targets = typed_paths(body[CASES[case][1]])
        assume(targets)
        path, target = data.draw(st.sampled_from(targets))
        target[NEW_KEY] = 1
        try:
            prepared = _prepare(dialect, body)
        except RequestError as exc:  # pragma: no cover - the failure being reported
            pytest.fail(f"refused for a newer key: {exc.body['error']} at {path}")
        sent = json.dumps(prepared.bridged.params if prepared.bridged else prepared.params)
        expected = format_path((*_field_path(case, path), NEW_KEY))
        if NEW_KEY in sent:
            return  # forwarded (a free-form object takes any key)
        assert _reported(expected, prepared.dropped), (expected, prepared.dropped)

    check()


def _string_slots(
    body: dict[str, Any], field: str
) -> list[tuple[tuple[str | int, ...], Typed, str]]:
    return [
        (path, target, key)
        for path, target in typed_paths(body[field])
        for key in sorted(target.strings)
        if key in target and key not in ("type", "role")
    ]


@pytest.mark.parametrize("case", list(CASES))
def test_a_wrong_value_is_a_400_at_its_path(case: str) -> None:
    @SETTINGS
    @given(_members(case), st.data())
    def check(members: list[Any], data: st.DataObject) -> None:
        dialect, body = _body(case, members)
        assume(not _documented_refusal(body))
        slots = _string_slots(body, CASES[case][1])
        assume(slots)
        path, target, key = data.draw(st.sampled_from(slots))
        original = copy.deepcopy(body)
        target[key] = 424242
        expected = format_path((*_field_path(case, path), key))
        refused: RequestError | None = None
        try:
            prepared = _prepare(dialect, body)
        except RequestError as exc:
            refused = exc
        if refused is not None:
            assert refused.status_code == 400
            assert refused.body["error"]["param"] == expected, (refused.body["error"], original)
            return
        # Accepted: another arm of the object's union takes an integer there, and it is sent;
        # or the object holding it was removed for a reason of its own, reported.
        sent = json.dumps(prepared.bridged.params if prepared.bridged else prepared.params)
        assert "424242" in sent or _reported(expected, prepared.dropped), (
            expected,
            prepared.dropped,
        )

    check()


_OUTPUT_ITEMS = get_args(get_args(ResponseOutputItem)[0])


@pytest.mark.parametrize(
    "item_model",
    _OUTPUT_ITEMS,
    ids=[get_args(m.model_fields["type"].annotation)[0] for m in _OUTPUT_ITEMS],
)
def test_every_output_item_kind_streams_valid_full_fidelity_events(item_model: Any) -> None:
    """Any item the SDK's result type declares, with any of its optional fields: every event
    of the full-fidelity stream validates strictly (issue 38 #10: an ``added`` item's status
    must be one its type takes)."""

    @property_settings(15, share=0.25)
    @given(value_of(item_model))
    def check(item: dict[str, Any]) -> None:
        item_model.model_validate(item)  # the strategy draws what the SDK accepts
        result = sdk_result([item], "completed", {}, None)
        frames = "".join(synthesize_responses_sse(result, fidelity="full", delta_chars=3))
        assert validate_responses(frames)[-1] == "response.completed"

    check()


def _same_citations(blocks: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """No citations is no citations: ``[]`` (what a message may say) and ``null`` (what the
    SDK's stream helper keeps when no ``citations_delta`` came) alike. The helper of anthropic
    releases before 1.x also adds ``parsed_output: null`` to every text block it rebuilds (its
    parsed block type): the SDK's, not the stream's."""
    return [
        {
            **{k: v for k, v in b.items() if not (k == "parsed_output" and v is None)},
            "citations": b.get("citations") or None,
        }
        if b["type"] == "text"
        else b
        for b in blocks
    ]


@SETTINGS
@given(value_of(BetaMessage))
def test_any_sdk_message_streams_valid_events_the_sdk_rebuilds(message: dict[str, Any]) -> None:
    """Any Message the anthropic SDK's (beta) type declares: every event validates strictly, and
    the SDK's own stream helper rebuilds every field the message has (issue 38 #11)."""
    BetaMessage.model_validate(message)
    frames = "".join(synthesize_anthropic_sse(message, unknown_blocks="passthrough"))
    validate_anthropic(frames)
    MOCK_FRAMES.append(frames.encode())
    with MOCK_SDK.beta.messages.stream(**REQUEST) as stream:
        final = stream.get_final_message().model_dump(mode="json")
    expected = BetaMessage.model_validate(message).model_dump(mode="json")
    for key in ("diagnostics", "context_management", "container", "stop_details"):
        assert final[key] == expected[key], key
    blocks = [b for b in expected["content"] if b["type"] != "text" or b["text"]]
    assert _same_citations(final["content"]) == _same_citations(blocks or expected["content"][:1])
    assert final["stop_reason"] == (expected["stop_reason"] or "end_turn")


@SETTINGS
@given(value_of(ChatCompletion), st.booleans())
def test_any_sdk_completion_streams_valid_chunks_the_sdk_rebuilds(
    completion: dict[str, Any], include_usage: bool
) -> None:
    """Any ChatCompletion the openai SDK's type declares: every chunk validates strictly and the
    SDK's stream state rebuilds each choice's content, refusal, finish reason and calls."""
    ChatCompletion.model_validate(completion)
    frames = "".join(synthesize_chat_completion_sse(completion, include_usage=include_usage))
    validate_chat(frames)
    if not completion["choices"] and not (include_usage and completion.get("usage")):
        assert frames == "data: [DONE]\n\n"  # the SDK's state has nothing to build
        return
    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    for event in parse(frames)[:-1]:
        state.handle_chunk(ChatCompletionChunk.construct(**event.json()))
    final = state.current_completion_snapshot
    assert len(final.choices) == len(completion["choices"])
    for got, want in zip(final.choices, completion["choices"], strict=True):
        message = want["message"]
        assert got.finish_reason == want["finish_reason"]
        assert (got.message.content or None) == (message.get("content") or None)
        assert (got.message.refusal or None) == (message.get("refusal") or None)
        assert len(got.message.tool_calls or ()) == len(message.get("tool_calls") or ())
