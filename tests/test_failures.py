"""Classifying backend failures (decision P6), from the exceptions real clients raise."""

from __future__ import annotations

from typing import Any

import openai
import pytest

from aiostream_synth._proxy.upstream import sdk_http_module
from aiostream_synth._wire.failures import (
    DETERMINISTIC_CODES,
    INTERNAL_ERROR_MESSAGE,
    is_transient,
    log_internal,
)
from aiostream_synth.engine import Failure, classify_failure

#: The HTTP library the installed openai SDK is built on (httpx2, or httpx before it).
sdk_http = sdk_http_module(openai.DefaultAsyncHttpxClient)


def _api_error(status: int, message: str, code: str | None = None) -> openai.APIStatusError:
    """The openai SDK's own exception for an upstream's HTTP error answer."""
    body = {"error": {"message": message, "type": "x", "param": None, "code": code}}
    request = sdk_http.Request("POST", "http://upstream/v1/chat/completions")
    response = sdk_http.Response(status, json=body, request=request)
    with openai.OpenAI(api_key="k", base_url="http://upstream/v1") as client:
        return client._make_status_error_from_response(response)  # the SDK's own mapping


@pytest.mark.parametrize(
    ("status", "message", "code", "expected"),
    [
        (
            400,
            "This model's maximum context length is 8192 tokens",
            None,
            ("context_length_exceeded", 400),
        ),
        (
            400,
            "request (9000 tokens) exceeds the available context size",
            None,
            ("context_length_exceeded", 400),
        ),
        (400, "x", "context_length_exceeded", ("context_length_exceeded", 400)),
        (413, "prompt is too long: 300000 tokens", None, ("context_length_exceeded", 413)),
        (400, "Unexpected message role.", None, ("invalid_prompt", 400)),
        (422, "reasoning_content must be passed back", None, ("invalid_prompt", 422)),
        (401, "Incorrect API key", None, ("invalid_prompt", 401)),
        (404, "model not found", None, ("invalid_prompt", 404)),
        (408, "request timeout", None, ("server_error", 408)),
        (409, "conflict", None, ("server_error", 409)),
        (429, "Rate limit reached. Please try again in 20s.", None, ("rate_limit_exceeded", 429)),
        (503, "The server is overloaded", None, ("server_is_overloaded", 503)),
        (503, "Loading model, please wait", None, ("server_is_overloaded", 503)),
        (503, "maintenance", None, ("server_error", 503)),
        (500, "boom", None, ("server_error", 500)),
        (502, "bad gateway", None, ("server_error", 502)),
    ],
)
def test_upstream_http_errors(
    status: int, message: str, code: str | None, expected: tuple[str, int]
) -> None:
    """Each upstream outcome gets its code and keeps its status and its own message."""
    failure = classify_failure(_api_error(status, message, code))
    assert (failure.code, failure.status_code) == expected
    assert failure.message == message


@pytest.mark.parametrize(
    ("exc", "code", "status"),
    [
        (TimeoutError("slow"), "server_error", 504),
        (openai.APITimeoutError(sdk_http.Request("POST", "http://u")), "server_error", 504),
        (
            openai.APIConnectionError(request=sdk_http.Request("POST", "http://u")),
            "server_error",
            502,
        ),
        (ValueError("odd"), "server_error", 500),
    ],
)
def test_transport_failures(exc: Exception, code: str, status: int) -> None:
    """Timeouts are 504, unreachable upstreams 502, anything else 500; all server_error."""
    failure = classify_failure(exc)
    assert (failure.code, failure.status_code) == (code, status)


def test_the_error_body_is_openai_shaped() -> None:
    """The body carries type by status class, the code, and no param."""
    body: dict[str, Any] = Failure(400, "invalid_prompt", "bad role").body()
    assert body == {
        "error": {
            "message": "bad role",
            "type": "invalid_request_error",
            "param": None,
            "code": "invalid_prompt",
        }
    }
    assert Failure(503, "server_is_overloaded", "busy").type == "server_error"


def test_a_message_json_cannot_carry_is_made_wire_safe() -> None:
    """A lone surrogate (undecodable upstream bytes) becomes U+FFFD, so a terminal event exists."""

    class Reported(Exception):
        status_code = 502

    assert classify_failure(Reported("bad \ud800 byte")).message == "bad \ufffd byte"


@pytest.mark.parametrize(
    "exc", [KeyError("k"), ZeroDivisionError("division by zero"), RuntimeError("secret=abc")]
)
def test_a_bug_in_the_backend_is_an_internal_error_whose_text_stays_in_the_log(
    exc: Exception, caplog: pytest.LogCaptureFixture
) -> None:
    failure = classify_failure(exc)
    assert (failure.status_code, failure.code, failure.internal) == (500, "server_error", True)
    assert failure.message == INTERNAL_ERROR_MESSAGE
    assert log_internal(failure, exc) is failure
    assert caplog.records[-1].exc_info is not None
    assert caplog.records[-1].exc_info[1] is exc


@pytest.mark.parametrize(
    "exc",
    [
        TimeoutError("read timed out"),
        ConnectionRefusedError("refused"),
        ValueError("This model's maximum context length is 8192 tokens"),
    ],
)
def test_a_report_keeps_its_text(exc: Exception, caplog: pytest.LogCaptureFixture) -> None:
    failure = classify_failure(exc)
    assert not failure.internal
    assert str(exc) in failure.message
    log_internal(failure, exc)
    assert not caplog.records


@pytest.mark.parametrize(
    ("exc", "transient"),
    [
        (_api_error(400, "bad template"), False),  # invalid_prompt: the same request fails again
        (_api_error(400, "maximum context length is 8192 tokens"), False),
        (_api_error(404, "no such model"), False),
        (_api_error(429, "try again in 20s"), True),
        (_api_error(408, "request timeout"), True),
        (_api_error(500, "boom"), True),
        (_api_error(503, "model loading"), True),
        (TimeoutError(), True),
        (KeyError("a bug"), True),  # a bug in the backend function: a retry may not meet it
    ],
)
def test_one_taxonomy_says_whether_a_retry_could_do_better(
    exc: BaseException, transient: bool
) -> None:
    """``is_transient`` is what coalescing shares a failure by and what the bridges' and the
    dialects' error types follow: the failure's own ``transient``."""
    assert is_transient(exc) is transient
    assert classify_failure(exc).transient is transient
    assert (classify_failure(exc).code in DETERMINISTIC_CODES) is not transient
