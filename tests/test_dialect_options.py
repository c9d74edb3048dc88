"""Each built-in dialect owns its options (``ChatOptions``, ``ResponsesOptions``,
``AnthropicOptions``): given to ``StreamSettings(dialect_options=...)`` and to ``serve`` as
``--<dialect>-<option>``; the flat ``StreamSettings`` fields they replace still work for one
release, each with a ``DeprecationWarning`` naming its replacement."""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest
from pydantic import BaseModel, create_model

from aiostream_synth import prepare_request
from aiostream_synth.asgi import BackendCall, StreamSettings, SynthesizingApp
from aiostream_synth.dialects import AnthropicOptions, ChatOptions, ResponsesOptions
from aiostream_synth.params import ChatCompletionParams, ResponsesParams

from .support.asgi_client import OneRequest, post_scope

OLD_AND_NEW = [
    ("responses_events", "minimal", "responses", ResponsesOptions(events="minimal")),
    ("responses_keepalive", "comment", "responses", ResponsesOptions(keepalive="comment")),
    ("chat_keepalive", "none", "chat", ChatOptions(keepalive="none")),
    ("emit_reasoning_alias", True, "chat", ChatOptions(emit_reasoning_alias=True)),
    (
        "anthropic_event_keepalive_s",
        None,
        "anthropic",
        AnthropicOptions(event_keepalive_s=None),
    ),
    (
        "anthropic_unknown_blocks",
        "passthrough",
        "anthropic",
        AnthropicOptions(unknown_blocks="passthrough"),
    ),
]


@pytest.mark.parametrize(("old", "value", "dialect", "new"), OLD_AND_NEW)
def test_a_flat_setting_still_works_with_a_warning_naming_its_replacement(
    old: str, value: Any, dialect: str, new: Any
) -> None:
    with pytest.warns(DeprecationWarning, match=rf"StreamSettings\({old}=\.\.\.\) is deprecated"):
        settings = StreamSettings(**{old: value})
    assert settings.dialect_options[dialect] == new


def test_a_flat_setting_is_applied_over_the_dialects_own_options() -> None:
    given = {"responses": ResponsesOptions(keepalive="comment")}
    with pytest.warns(DeprecationWarning, match="ResponsesOptions"):
        settings = StreamSettings(dialect_options=given, responses_events="minimal")
    assert settings.dialect_options["responses"] == ResponsesOptions(
        events="minimal", keepalive="comment"
    )
    assert given == {"responses": ResponsesOptions(keepalive="comment")}  # not changed


def test_sanitize_options_still_work_with_a_warning() -> None:
    """``SanitizeOptions`` (deprecated): what it sets lands in the dialects' own options."""
    from aiostream_synth.params import SanitizeOptions

    old = SanitizeOptions(drop_hosted_tools=True, anthropic_system_messages="reject")
    with pytest.warns(DeprecationWarning, match=r"StreamSettings\(sanitize=SanitizeOptions"):
        settings = StreamSettings(sanitize=old)
    assert settings.dialect_options == {
        "responses": ResponsesOptions(drop_hosted_tools=True),
        "anthropic": AnthropicOptions(system_messages="reject"),
    }
    body = {"model": "m", "input": "x", "tools": [{"type": "web_search"}], "stream": True}
    with pytest.warns(DeprecationWarning, match=r"prepare_request\(sanitize=SanitizeOptions"):
        prepared = prepare_request("responses", body, sanitize=old)
    assert prepared.dropped == ("tools[0]",)
    assert prepare_request("responses", body).dropped == ()  # the default keeps it
    new = prepare_request("responses", body, options=ResponsesOptions(drop_hosted_tools=True))
    assert new.dropped == ("tools[0]",)


def test_no_warning_without_a_flat_setting(recwarn: pytest.WarningsRecorder) -> None:
    StreamSettings(dialect_options={"chat": ChatOptions(keepalive="none")})
    assert not [w for w in recwarn if issubclass(w.category, DeprecationWarning)]


def test_anthropic_refuses_a_keepalive_no_timer_can_keep() -> None:
    for wrong in (0, -1.0, float("inf"), True):
        with pytest.raises(ValueError, match="event_keepalive_s must be a positive number"):
            AnthropicOptions(event_keepalive_s=wrong)


@pytest.mark.anyio
async def test_the_chat_options_reach_the_stream() -> None:
    """``ChatOptions(keepalive="none")``: a slow backend's stream sends nothing before the
    answer (its first frame is the first chunk)."""
    body = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
    request = OneRequest(json.dumps(body).encode())
    ticks = 0
    answered = anyio.Event()

    async def backend(call: BackendCall) -> Any:
        nonlocal ticks
        while ticks < 3:  # three keepalive intervals pass while the backend works
            await anyio.sleep(0.01)
            ticks += 1
        answered.set()
        return {
            "id": "c",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [
                {
                    "index": 0,
                    "finish_reason": "stop",
                    "message": {"role": "assistant", "content": "ok"},
                }
            ],
        }

    settings = StreamSettings(
        keepalive_interval=0.01, dialect_options={"chat": ChatOptions(keepalive="none")}
    )
    app = SynthesizingApp(backend, settings)
    scope = post_scope("/v1/chat/completions")
    with anyio.fail_after(60):
        await app(scope, request.receive, request.send)
    assert answered.is_set()
    text = b"".join(m.get("body", b"") for m in request.bodies).decode()
    assert ": keep-alive" not in text
    assert text.startswith("data: {")
    assert text.endswith("data: [DONE]\n\n")


#: A user's params models: ours, plus a field the library does not know.
_ChatWithField = create_model("_ChatWithField", __base__=ChatCompletionParams, my_field=(int, 0))
_ResponsesWithField = create_model(
    "_ResponsesWithField", __base__=ResponsesParams, my_field=(int, 0)
)


_CHAT_BODY = {
    "model": "m",
    "messages": [{"role": "user", "content": "x"}],
    "stream": True,
    "my_field": 3,
}
_RESPONSES_BODY = {"model": "m", "input": "x", "stream": True, "my_field": 3}


def test_params_model_replaces_the_request_dialects_model(
    recwarn: pytest.WarningsRecorder,
) -> None:
    """``params_model`` applies to whichever dialect the request is in; without it an unknown
    field is pruned and reported."""
    assert prepare_request("chat", _CHAT_BODY).dropped == ("my_field",)
    chat = prepare_request("chat", _CHAT_BODY, params_model=_ChatWithField)
    assert (chat.dropped, chat.params["my_field"]) == ((), 3)
    responses = prepare_request("responses", _RESPONSES_BODY, params_model=_ResponsesWithField)
    assert (responses.dropped, responses.params["my_field"]) == ((), 3)
    assert not recwarn.list


def test_params_model_validates_a_bridged_request_in_its_own_dialect() -> None:
    """Bridged, the client's dialect keeps the field; the bridge, which has nowhere to put it,
    reports it."""
    bridged = prepare_request("chat", _CHAT_BODY, params_model=_ChatWithField, upstream="responses")
    assert bridged.params["my_field"] == 3
    assert bridged.dropped == ("my_field",)
    assert bridged.bridged is not None
    assert "my_field" not in bridged.bridged.params


@pytest.mark.parametrize(
    ("keyword", "dialect", "body", "model"),
    [
        ("chat_params_model", "chat", _CHAT_BODY, _ChatWithField),
        ("responses_params_model", "responses", _RESPONSES_BODY, _ResponsesWithField),
    ],
)
def test_the_per_dialect_params_model_keywords_are_deprecated(
    keyword: str, dialect: str, body: dict[str, object], model: type[BaseModel]
) -> None:
    """Each still applies to its own dialect (with a warning naming ``params_model``), and
    to no other."""
    with pytest.warns(DeprecationWarning, match=rf"prepare_request\({keyword}=.*params_model"):
        prepared = prepare_request(dialect, body, **{keyword: model})  # type: ignore[arg-type]
    assert (prepared.dropped, prepared.params["my_field"]) == ((), 3)
    other = "responses" if dialect == "chat" else "chat"
    other_body = _RESPONSES_BODY if other == "responses" else _CHAT_BODY
    with pytest.warns(DeprecationWarning, match=rf"prepare_request\({keyword}="):
        ignored = prepare_request(other, other_body, **{keyword: model})  # type: ignore[arg-type]
    assert ignored.dropped == ("my_field",)
