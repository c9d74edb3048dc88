"""Classifying a backend exception into an HTTP status and an OpenAI-shaped error (decision
P6). The upstream's own message is kept in every case.

* a context-window overflow → ``context_length_exceeded`` (400; it must not look retryable);
* HTTP 429 → ``rate_limit_exceeded``, the upstream message kept ("try again in 20s");
* any other 4xx but 408 / 409 (a template error, a bad tool schema, a misconfigured upstream's
  401 / 403 / 404) → ``invalid_prompt``: the Codex CLI does not retry it, where
  ``server_error`` would make it re-send the same doomed request up to five times;
* HTTP 503 saying "overloaded" or "loading" → ``server_is_overloaded``;
* a timeout → ``server_error`` with a timeout message (504); a connection error → 502;
* anything else → ``server_error``; the upstream HTTP status is kept when it has one (else 500).

An exception that is no report at all — no error status, no timeout, no context overflow in
its text, not raised by the
transport or an SDK (``OSError``, ``httpx``, ``openai``, ``anthropic``...), not ours — is a bug in
the backend function (a ``KeyError``, a ``ZeroDivisionError``): its text never reaches the
client (it may hold anything), which is told of an internal error; :func:`log_internal` logs it
with its traceback. A backend that means to tell the client something raises an exception with a
``status_code`` (or :class:`~aiostream_synth.BackendError`).

The status is read from ``status_code`` (openai's ``APIStatusError``), ``status``, or
``response.status_code`` (httpx's ``HTTPStatusError``); only an error status (400-599) counts:
a failure carrying a 1xx, 2xx or 3xx is a 500, never an answer's final status. Cancellation is never classified: the
engine lets it propagate. Messages are made safe for the wire (lone surrogates become U+FFFD),
so a failure always becomes a terminal event.

Whether a retry could do better is :func:`is_transient` (:attr:`Failure.transient`): the one
taxonomy that coalescing, the bridges and the dialects' error types read.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

__all__ = [
    "DETERMINISTIC_CODES",
    "INTERNAL_ERROR_MESSAGE",
    "Failure",
    "classify_failure",
    "is_transient",
    "log_internal",
]

LOG = logging.getLogger("aiostream_synth.backend")

#: What the client is told of a bug in the backend function (its text stays in the log).
INTERNAL_ERROR_MESSAGE = "The backend failed with an internal error; the server logged it."
#: Packages whose exceptions report a failure of the transport or the upstream (their text is
#: meant to be read): the HTTP clients, the SDKs, ours.
_REPORTING_PACKAGES = frozenset(
    {
        "openai",
        "anthropic",
        "httpx",
        "httpx2",
        "httpcore",
        "h11",
        "h2",
        "aiohttp",
        "aiostream_synth",
    }
)

_CONTEXT_MARKERS = (
    "context_length_exceeded",
    "context length",
    "context window",
    "maximum context",
    "too many tokens",
    "prompt is too long",
    "available context",  # llama.cpp: "the request exceeds the available context size"
)


#: Failure codes a retry of the same request would get again: the request itself is at fault
#: (an invalid prompt, a context overflow). Every other failure is transient.
DETERMINISTIC_CODES = frozenset({"invalid_prompt", "context_length_exceeded"})
#: 4xx statuses a client may rightly retry (timeout, conflict); 429 has its own code.
_RETRYABLE_4XX = frozenset({408, 409, 429})
_OVERLOADED_MARKERS = ("overloaded", "loading")


@dataclass(frozen=True, slots=True)
class Failure:
    """A classified backend failure."""

    status_code: int
    code: str
    message: str
    #: A bug in the backend function, not a failure it reported (see the module docstring).
    internal: bool = False

    @property
    def transient(self) -> bool:
        """Whether a retry of the same request could do better (an overload, a rate limit, a
        5xx, a timeout) rather than fail the same way (an invalid prompt, a context overflow)."""
        return self.code not in DETERMINISTIC_CODES

    @property
    def type(self) -> str:
        """OpenAI's error ``type``: ``server_error`` for 5xx; for a rate limit the meter OpenAI
        names (``tokens`` when the message speaks of tokens, else ``requests``); else
        ``invalid_request_error``."""
        if self.status_code >= 500:
            return "server_error"
        if self.code == "rate_limit_exceeded":
            return "tokens" if "token" in self.message.lower() else "requests"
        return "invalid_request_error"

    def body(self) -> dict[str, Any]:
        """``{"error": {"message", "type", "param", "code"}}``."""
        return {
            "error": {"message": self.message, "type": self.type, "param": None, "code": self.code}
        }


def _status(exc: BaseException) -> int | None:
    for candidate in (
        getattr(exc, "status_code", None),
        getattr(exc, "status", None),
        getattr(getattr(exc, "response", None), "status_code", None),
    ):
        if (
            isinstance(candidate, int)
            and not isinstance(candidate, bool)
            and 400 <= candidate <= 599
        ):
            return candidate
    return None


def _error_object(exc: BaseException) -> dict[str, Any]:
    """The upstream's error object: ``body["error"]`` or ``body`` itself (openai SDK errors)."""
    body = getattr(exc, "body", None)
    if not isinstance(body, dict):
        return {}
    inner = body.get("error")
    return inner if isinstance(inner, dict) else body


def _wire_text(text: str) -> str:
    """``text`` as JSON on the wire can carry it: lone surrogates (an exception message built
    from undecodable bytes has them) become U+FFFD instead of failing the terminal event."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "".join("\ufffd" if "\ud800" <= c <= "\udfff" else c for c in text)
    return text


def _message(exc: BaseException) -> str:
    message = _error_object(exc).get("message")
    if isinstance(message, str) and message:
        return message
    text = getattr(exc, "message", None)
    if isinstance(text, str) and text:
        return text
    return str(exc) or type(exc).__name__


def _upstream_code(exc: BaseException) -> str | None:
    code = getattr(exc, "code", None)
    if isinstance(code, str):
        return code
    upstream = _error_object(exc).get("code")
    return upstream if isinstance(upstream, str) else None


def _is_timeout(exc: BaseException) -> bool:
    return isinstance(exc, TimeoutError) or "Timeout" in type(exc).__name__


def _is_report(exc: BaseException) -> bool:
    if isinstance(exc, OSError | TimeoutError) or _is_timeout(exc):
        return True
    return type(exc).__module__.partition(".")[0] in _REPORTING_PACKAGES


def log_internal(failure: Failure, exc: BaseException) -> Failure:
    """Log ``exc`` with its traceback when ``failure`` says it was a bug; return ``failure``."""
    if failure.internal:
        LOG.error(
            "the backend raised %s: a bug in it (a failure to report to the client is an "
            "exception with a status_code)",
            type(exc).__name__,
            exc_info=exc,
        )
    return failure


def classify_failure(exc: BaseException) -> Failure:
    """Map a backend exception to the status, code and message clients should see."""
    status = _status(exc)
    message = _wire_text(_message(exc))
    lowered = message.lower()
    if _upstream_code(exc) == "context_length_exceeded" or any(
        m in lowered for m in _CONTEXT_MARKERS
    ):  # also from an in-process engine (vLLM raises a ValueError for a prompt too long)
        return Failure(
            status if status and 400 <= status < 500 else 400, "context_length_exceeded", message
        )
    if status is None and not _is_report(exc) and not _error_object(exc):
        return Failure(500, "server_error", INTERNAL_ERROR_MESSAGE, internal=True)
    if status == 429:
        return Failure(429, "rate_limit_exceeded", message)
    if status is not None and 400 <= status < 500 and status not in _RETRYABLE_4XX:
        return Failure(status, "invalid_prompt", message)
    if status == 503 and any(marker in lowered for marker in _OVERLOADED_MARKERS):
        return Failure(503, "server_is_overloaded", message)
    if _is_timeout(exc) and status is None:
        detail = _wire_text(str(exc)) or "no answer within the deadline"
        return Failure(504, "server_error", f"backend timed out: {detail}")
    if status is None and "Connection" in type(exc).__name__:
        return Failure(502, "server_error", f"backend unreachable: {message}")
    return Failure(status or 500, "server_error", message)


def is_transient(exc: BaseException) -> bool:
    """Whether a retry of the request that failed with ``exc`` could do better (see
    :attr:`Failure.transient`); a bug in the backend function is transient too (a retry may
    not meet it)."""
    return classify_failure(exc).transient
