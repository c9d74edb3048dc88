"""An installed SDK older than the releases our rules track: open enumerations, said once."""

from __future__ import annotations

import logging
import subprocess
import sys
from typing import Any, Literal, Optional, Required, Union

import httpx
import openai
import pytest
from pydantic import TypeAdapter, ValidationError
from typing_extensions import TypedDict

from aiostream_synth import RequestError, prepare_request
from aiostream_synth._params import sdks
from aiostream_synth._params.strict import strict_type


@pytest.mark.parametrize(
    ("text", "numbers"),
    [
        ("2.7.2", (2, 7, 2)),
        ("3.60.0", (3, 60, 0)),
        ("0.109.2", (0, 109, 2)),
        ("3.1.0rc2", (3, 1, 0)),
    ],
)
def test_version_numbers(text: str, numbers: tuple[int, ...]) -> None:
    assert sdks.version_tuple(text) == numbers


def test_a_version_without_numbers_is_refused() -> None:
    with pytest.raises(ValueError, match="not a version number: 'dev'"):
        sdks.version_tuple("dev")


@pytest.fixture
def fresh_answers() -> Any:
    sdks.sdk_is_older.cache_clear()
    yield
    sdks.sdk_is_older.cache_clear()


@pytest.mark.usefixtures("fresh_answers")
@pytest.mark.parametrize(
    ("installed", "older"), [("2.7.2", True), ("3.49.9", True), ("3.50.0", False), ("4.0.0", False)]
)
def test_an_older_sdk_is_said_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, installed: str, older: bool
) -> None:
    monkeypatch.setattr(openai, "__version__", installed)
    caplog.set_level(logging.WARNING, "aiostream_synth.params")
    assert sdks.sdk_is_older("openai") is older
    assert sdks.sdk_is_older("openai") is older
    messages = [record.getMessage() for record in caplog.records]
    if older:
        assert messages == [
            f"openai {installed} is older than 3.50, the release our request rules track: values "
            "of its enumerations are forwarded unchecked, and keys it does not know are pruned "
            "and reported"
        ]
    else:
        assert messages == []


def test_an_unknown_sdk_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown SDK 'gemini'"):
        sdks.sdk_is_older("gemini")


# -- the mirror's open enumerations (synthetic types: the same on every SDK) ---------------------


class _Image(TypedDict, total=False):
    type: Required[Literal["input_image"]]
    detail: Literal["low", "high", "auto"]
    fit: Optional[Literal["cover", "contain"]]  # noqa: UP045 (the SDKs' spelling)
    flag: Literal[True]


class _Text(TypedDict, total=False):
    type: Required[Literal["input_text"]]
    text: str


class _Tool(TypedDict, total=False):
    type: Optional[Literal["custom"]]  # noqa: UP045 (anthropic's optional kind key)
    name: str


_Part = Union[_Image, _Text]  # noqa: UP007


def _adapter(tp: Any, open_values: bool) -> TypeAdapter[Any]:
    return TypeAdapter(strict_type(tp, relaxed=True, open_values=open_values))


def test_open_values_take_any_string_of_an_enumeration() -> None:
    part = {"type": "input_image", "detail": "original", "fit": "stretch"}
    assert _adapter(_Part, open_values=True).validate_python(part) == part
    with pytest.raises(ValidationError):
        _adapter(_Part, open_values=False).validate_python(part)


@pytest.mark.parametrize(
    ("tp", "value"),
    [
        (_Part, {"type": "input_video"}),  # a kind stays closed: it chooses the arm
        (_Part, {"type": "input_image", "flag": False}),  # not an enumeration of strings
        (_Part, {"type": "input_image", "detail": 5}),  # still a string
        (_Tool, {"type": "tool"}),  # an optional kind stays closed too
    ],
)
def test_open_values_keep_kinds_and_other_literals_closed(tp: Any, value: Any) -> None:
    with pytest.raises(ValidationError):
        _adapter(tp, open_values=True).validate_python(value)


def test_open_values_keep_unknown_keys_unknown() -> None:
    with pytest.raises(ValidationError, match=r"Extra inputs are not permitted"):
        _adapter(_Part, open_values=True).validate_python({"type": "input_text", "new": 1})


# -- the proxy's rule on the installed SDK (each nox session takes one branch) -------------------


def test_a_value_no_sdk_knows_is_refused_by_a_current_sdk_and_forwarded_by_an_older_one() -> None:
    image = {"type": "input_image", "image_url": "data:image/png;base64,AA", "detail": "ultra"}
    body = {"model": "m", "stream": True, "input": [{"role": "user", "content": [image]}]}
    if sdks.sdk_is_older("openai"):
        prepared = prepare_request("responses", body)
        assert prepared.params["input"][0]["content"][0] == image
        assert not prepared.dropped
    else:
        with pytest.raises(RequestError) as caught:
            prepare_request("responses", body)
        assert caught.value.status_code == 400
        assert caught.value.body["error"]["param"] == "input[0].content[0].detail"


# -- without the anthropic SDK (the [anthropic] extra not installed) -----------------------------

_WITHOUT_ANTHROPIC = """
import logging, sys
sys.modules["anthropic"] = None  # what an environment without the [anthropic] extra imports
logging.basicConfig(level=logging.WARNING, format="%(name)s %(message)s")

from aiostream_synth import RequestError, prepare_request, synthesize_chat_completion_sse
from aiostream_synth._dialects.registry import spec_for

completion = {
    "id": "c", "object": "chat.completion", "created": 1, "model": "m",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "hi"},
                 "finish_reason": "stop"}],
}
print("chat frames", "".join(synthesize_chat_completion_sse(completion)).count("data:"))
prepared = prepare_request("responses", {"model": "m", "stream": True, "input": "x"})
print("responses prepared", prepared.stream)
try:
    prepare_request("anthropic", {"model": "m", "stream": True, "max_tokens": 5, "messages": []})
except RequestError as refused:
    print("anthropic refused", refused.status_code, refused.body["error"]["message"])
try:
    from aiostream_synth import synthesize_anthropic_sse
    list(synthesize_anthropic_sse({"content": [{"type": "text", "text": "x"}]}))
except ModuleNotFoundError as missing:
    print("anthropic synthesis", missing.name, missing)
spec_for("anthropic").warm_up()
"""


def test_every_other_dialect_works_without_the_anthropic_sdk() -> None:
    """The core needs no anthropic SDK; a Messages request is a 501 naming the extra, the
    Messages synthesis an import error naming it, and the proxy's warm-up says so once."""
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_ANTHROPIC], capture_output=True, text=True, check=True
    )
    extra = "pip install 'aiostream-synth[anthropic]'"
    assert done.stdout.splitlines() == [
        "chat frames 4",
        "responses prepared True",
        "anthropic refused 501 the Anthropic Messages dialect is not available here: it needs "
        f"the anthropic SDK ({extra})",
        f"anthropic synthesis anthropic the Anthropic Messages dialect needs the anthropic SDK: {extra}",
    ]
    logged = done.stderr.splitlines()
    assert [line for line in logged if line.startswith("aiostream_synth.dialects")] == [
        "aiostream_synth.dialects the Anthropic Messages dialect is not available here: it needs "
        f"the anthropic SDK ({extra}): /v1/messages answers 501"
    ]
    # Beside it, at most the older openai SDK's line (the tests-lowest session's).
    older = [line for line in logged if not line.startswith("aiostream_synth.dialects")]
    expected = [f"aiostream_synth.params openai {openai.__version__} is older than 3.50"]
    assert [line.partition(",")[0] for line in older] == (
        expected if sdks.sdk_is_older("openai") else []
    )


@pytest.mark.anyio
async def test_the_proxy_answers_messages_with_a_501_in_anthropics_shape_without_the_sdk(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from aiostream_synth._dialects.anthropic import spec
    from aiostream_synth._proxy.app import ProxyApp, ProxyConfig

    monkeypatch.setattr(spec, "sdk_installed", lambda sdk: sdk != "anthropic")
    body = {
        "model": "m",
        "stream": True,
        "max_tokens": 9,
        "messages": [{"role": "user", "content": "hi"}],
    }
    transport = httpx.ASGITransport(app=ProxyApp(ProxyConfig()))
    async with httpx.AsyncClient(transport=transport, base_url="http://proxy") as http:
        answer = await http.post("/v1/messages", json=body)
        chat = await http.post(
            "/v1/chat/completions",
            json={"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]},
        )
    assert answer.status_code == 501
    assert answer.json()["type"] == "error"
    assert answer.json()["error"]["type"] == "api_error"
    assert "aiostream-synth[anthropic]" in answer.json()["error"]["message"]
    assert "request-id" in answer.headers
    assert chat.status_code == 200
    assert chat.text.endswith("data: [DONE]\n\n")
