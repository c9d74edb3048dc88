"""Anthropic's error shapes, and which failures a client should retry.

Before the stream is committed an error is an HTTP answer::

    {"type": "error", "error": {"type": "invalid_request_error", "message": "..."},
     "request_id": "req_..."}

with a ``request-id`` header and ``x-should-retry: false`` whenever retrying cannot help: Claude
Code otherwise retries an HTTP error up to ten times, each retry a full backend call. Only a
genuine rate limit (429) or overload (529) leaves retries allowed. After commit, a failure is one
``event: error`` whose ``error.type`` says invalid request, overload or API error.
"""

from __future__ import annotations

from typing import Any

from aiostream_synth._dialects.base import ErrorResponse
from aiostream_synth._wire.failures import Failure
from aiostream_synth._wire.ids import random_hex

__all__ = ["anthropic_error", "error_event_type", "error_type", "new_request_id"]

#: HTTP status -> Anthropic's ``error.type`` (docs.claude.com/en/api/errors).
_BY_STATUS = {
    400: "invalid_request_error",
    401: "authentication_error",
    402: "billing_error",
    403: "permission_error",
    404: "not_found_error",
    408: "timeout_error",
    409: "conflict_error",
    413: "request_too_large",
    422: "invalid_request_error",
    429: "rate_limit_error",
    500: "api_error",
    504: "timeout_error",
    529: "overloaded_error",
}
#: Statuses a client may usefully retry: a rate limit, an overload, an upstream that could not
#: be reached or was unavailable for a moment (502, 503).
_RETRYABLE = frozenset({429, 502, 503, 529})


def new_request_id() -> str:
    return "req_" + random_hex()


def error_type(status_code: int, code: str | None = None) -> str:
    """Anthropic's ``error.type`` for an HTTP status (and our failure code, if any)."""
    if code == "server_is_overloaded":
        return "overloaded_error"
    if status_code in _BY_STATUS:
        return _BY_STATUS[status_code]
    return "invalid_request_error" if 400 <= status_code < 500 else "api_error"


def error_event_type(failure: Failure) -> str:
    """``error.type`` of the ``event: error`` that ends a committed stream: deterministic
    failures are invalid requests, capacity is an overload, the rest an API error."""
    if failure.code == "server_is_overloaded" or failure.status_code in (503, 529):
        return "overloaded_error"
    if failure.code == "rate_limit_exceeded":
        return "rate_limit_error"
    if not failure.transient:
        return "invalid_request_error"
    return "api_error"


def anthropic_error(
    status_code: int, message: str, *, code: str | None = None, type: str | None = None
) -> ErrorResponse:
    """The HTTP answer for an error: Anthropic's body, ``request-id`` and ``x-should-retry``.

    ``type`` is taken when it is already one of Anthropic's (else derived from the status)."""
    kind = type if type in _BY_STATUS.values() or type == "overloaded_error" else None
    if kind == "invalid_request_error" and status_code in _BY_STATUS:
        kind = None  # OpenAI's catch-all: the status says more (413 request_too_large, 404...)
    request_id = new_request_id()
    body: dict[str, Any] = {
        "type": "error",
        "error": {"type": kind or error_type(status_code, code), "message": message},
        "request_id": request_id,
    }
    headers = {
        "request-id": request_id,
        "x-should-retry": "true" if status_code in _RETRYABLE else "false",
    }
    return ErrorResponse(status_code, body, headers)


def failure_response(failure: Failure) -> ErrorResponse:
    """A backend failure before commit, as an HTTP answer (the upstream's status kept)."""
    return anthropic_error(failure.status_code, failure.message, code=failure.code)
