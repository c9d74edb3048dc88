"""Property tests of the Responses -> chat bridge's message assembly.

Histories are generated from every item kind a client replays, in any order: messages of every
role, reasoning (with and without text), function / custom / local-shell calls and their
outputs, with call ids drawn from a small pool so that outputs before their call, twice, or with
no call at all all occur. Whatever the history, the upstream body obeys chat's pairing rule and
every call in the history is answered exactly once.
"""

from __future__ import annotations

from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from aiostream_synth import BridgeOptions
from aiostream_synth.bridges import responses_to_chat_request

from .support.bridge_cases import CHAT_PARAMS, invariants

CALL_IDS = ["c1", "c2", "c3", "c4"]
TEXT = st.text(alphabet="ab \n", max_size=6)


def _message(role: str, text: str, parts: bool) -> dict[str, Any]:
    kind = "output_text" if role == "assistant" else "input_text"
    content: Any = [{"type": kind, "text": text}] if parts else text
    return {"type": "message", "role": role, "content": content}


messages = st.builds(
    _message, st.sampled_from(["user", "assistant", "system", "developer"]), TEXT, st.booleans()
)
reasoning = st.builds(
    lambda text: {"type": "reasoning", "summary": [{"type": "summary_text", "text": text}]}, TEXT
)
calls = st.builds(
    lambda kind, call_id: {
        "function_call": {
            "type": "function_call",
            "call_id": call_id,
            "name": "f",
            "arguments": "{}",
        },
        "custom_tool_call": {
            "type": "custom_tool_call",
            "call_id": call_id,
            "name": "p",
            "input": "x",
        },
        "local_shell_call": {
            "type": "local_shell_call",
            "call_id": call_id,
            "id": call_id,
            "status": "completed",
            "action": {"type": "exec", "command": ["ls"], "env": {}},
        },
    }[kind],
    st.sampled_from(["function_call", "custom_tool_call", "local_shell_call"]),
    st.sampled_from(CALL_IDS),
)
outputs = st.builds(
    lambda kind, call_id, text: {"type": kind, "call_id": call_id, "output": text},
    st.sampled_from(["function_call_output", "custom_tool_call_output"]),
    st.sampled_from([*CALL_IDS, "stray"]),
    TEXT,
)
hosted = st.just({"type": "web_search_call", "id": "ws_1", "status": "completed"})
histories = st.lists(st.one_of(messages, reasoning, calls, outputs, hosted), max_size=14)
options = st.builds(
    BridgeOptions,
    mid_system_policy=st.sampled_from(["user", "hoist"]),
    orphan_output_policy=st.sampled_from(["user_text", "drop"]),
    reasoning_placeholder=st.sampled_from([None, " "]),
    tool_output_media=st.sampled_from(["placeholder", "user_message"]),
)
TOOLS = [
    {"type": "function", "name": "f", "parameters": {"type": "object", "properties": {}}},
    {"type": "custom", "name": "p"},
    {"type": "local_shell"},
]


@settings(max_examples=400, deadline=None)
@given(histories, options)
def test_any_history_obeys_the_pairing_rule(
    history: list[dict[str, Any]], opts: BridgeOptions
) -> None:
    """The message invariants for any history; and each call answered by exactly one tool message."""
    chat, _ = responses_to_chat_request({"model": "m", "input": history, "tools": TOOLS}, opts)
    messages = chat["messages"]
    invariants(messages)
    CHAT_PARAMS.validate_python(chat)
    emitted = [c["id"] for m in messages for c in m.get("tool_calls") or ()]
    answered = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert answered == emitted
    assert all(m.get("content") is not None for m in messages)
    if opts.orphan_output_policy == "user_text":  # each output upstream exactly once
        dangling = opts.dangling_call_output
        placed = sum(1 for m in messages if m["role"] == "tool" and m["content"] != dangling)
        quoted = sum(
            1
            for m in messages
            if m["role"] == "user" and str(m["content"]).startswith("Output of an earlier")
        )
        assert placed + quoted == sum(1 for i in history if i["type"].endswith("_output"))


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(messages, reasoning, calls, outputs), max_size=14))
def test_unique_calls_each_get_their_own_output(history: list[dict[str, Any]]) -> None:
    """With call ids unique in the history, every call's own output (when the history has one
    after it) is what follows it upstream: nothing is paired with the wrong call."""
    seen: set[str] = set()
    unique = []
    for item in history:
        if item["type"].endswith("_call"):
            if item["call_id"] in seen:
                continue
            seen.add(item["call_id"])
        unique.append(item)
    chat, _ = responses_to_chat_request({"model": "m", "input": unique, "tools": TOOLS})
    messages = chat["messages"]
    invariants(messages)
    for k, item in enumerate(unique):
        if not item["type"].endswith("_call"):
            continue
        later = [
            o
            for o in unique[k + 1 :]
            if o["type"].endswith("_output") and o["call_id"] == item["call_id"]
        ]
        tool = [m for m in messages if m["role"] == "tool" and m["tool_call_id"] == item["call_id"]]
        assert len(tool) == 1
        expected = later[0]["output"] if later else BridgeOptions().dangling_call_output
        assert tool[0]["content"] == expected


@settings(max_examples=200, deadline=None)
@given(histories)
def test_bridging_is_deterministic(history: list[dict[str, Any]]) -> None:
    """Determinism: the same request always gives the same upstream body."""
    body = {"model": "m", "input": history, "tools": TOOLS}
    assert responses_to_chat_request(body)[0] == responses_to_chat_request(body)[0]
