"""Validation of what we stream against the installed SDKs' own event models, and the results the SDK model tests share."""

from __future__ import annotations

from typing import Any, get_args

from openai.types.chat import ChatCompletionChunk
from openai.types.responses import ResponseStreamEvent
from openai.types.responses.response_error import ResponseError
from pydantic import TypeAdapter

from .sse_parser import parse

EVENT = TypeAdapter(ResponseStreamEvent)


#: Each event type's own model, for readable errors (the SDK's union is not discriminated).
EVENT_MODELS: dict[str, Any] = {
    get_args(model.model_fields["type"].annotation)[0]: model
    for model in get_args(get_args(ResponseStreamEvent)[0])
}


SDK_ERROR_CODES = frozenset(get_args(ResponseError.model_fields["code"].annotation))


def validate_responses(frames: str | bytes) -> list[str]:
    """Validate every event of a Responses stream; return their types."""
    types = []
    for event in parse(frames):
        payload = event.json()
        assert event.event == payload["type"]
        response = payload.get("response")
        if isinstance(response, dict) and response.get("error"):
            code = response["error"]["code"]
            if code not in SDK_ERROR_CODES:  # the P6 codes Codex reads (see the docstring)
                payload = {
                    **payload,
                    "response": {
                        **response,
                        "error": {**response["error"], "code": "server_error"},
                    },
                }
        EVENT_MODELS[payload["type"]].model_validate(payload, strict=True)
        EVENT.validate_python(payload, strict=True)
        types.append(payload["type"])
    return types


def validate_chat(frames: str | bytes) -> int:
    """Validate every chunk of a chat stream (the last frame is [DONE]); return their count."""
    events = parse(frames)
    assert events[-1].data == "[DONE]"
    for event in events[:-1]:
        chunk = event.json()
        for choice in chunk["choices"]:
            calls = choice["delta"].get("tool_calls") or []
            for call in calls:
                if call.get("type") == "custom":  # see the module docstring
                    assert set(call) == {"index", "id", "type", "custom"}
                    assert set(call["custom"]) == {"name", "input"}
            choice["delta"]["tool_calls"] = [c for c in calls if c.get("type") != "custom"] or None
        ChatCompletionChunk.model_validate(chunk, strict=True)
    return len(events) - 1


def sdk_result(
    items: list[dict[str, Any]], status: str, extra: dict[str, Any], usage: Any
) -> dict[str, Any]:
    result: dict[str, Any] = {
        "id": "resp_1",
        "object": "response",
        "created_at": 1,
        "model": "m",
        "status": status,
        "output": items,
        "parallel_tool_calls": True,
        "tool_choice": "auto",
        "tools": [],
        **extra,
    }
    if usage is not None:
        result["usage"] = usage
    return result


def validate_anthropic(frames: str | bytes) -> list[str]:
    """Validate every Messages event (the SDK's beta event models; ping and error have their
    own types, which the SDK handles before its event union); return their types."""
    from anthropic.types import ErrorResponse
    from anthropic.types.beta import BetaRawMessageStreamEvent

    adapter: TypeAdapter[Any] = TypeAdapter(BetaRawMessageStreamEvent)
    types = []
    for event in parse(frames):
        payload = event.json()
        assert event.event == payload["type"]
        if payload["type"] == "ping":
            assert payload == {"type": "ping"}
        elif payload["type"] == "error":
            ErrorResponse.model_validate({**payload, "request_id": None}, strict=True)
        else:
            adapter.validate_python(payload, strict=True)
        types.append(payload["type"])
    return types
