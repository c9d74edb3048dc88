"""The library's exceptions, rooted in one class.

::

    AiostreamSynthError
     ├── InvalidInputError (ValueError)      an argument is not the shape a function needs
     │    ├── InvalidResultError             a completion / Responses result cannot be synthesized
     │    ├── InvalidRequestError            a request body cannot be sanitized
     │    └── InvalidSSEFieldError           an SSE event name or id contains CR or LF
     ├── BackendError                        the backend failed before anything was sent
     └── RequestError                        an HTTP request is refused before anything is sent
          └── BridgeError                    a request cannot be converted for the upstream's API

Every leaf that reports bad input is also a :class:`ValueError`, so callers that already catch
``ValueError`` keep working. :class:`BackendError` carries an HTTP status and an OpenAI-shaped
error body so that an HTTP adapter can answer with a real status before the stream is committed;
the backend's own exception is its ``__cause__``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "AiostreamSynthError",
    "BackendError",
    "BridgeError",
    "InvalidInputError",
    "InvalidRequestError",
    "InvalidResultError",
    "InvalidSSEFieldError",
    "RequestError",
    "StreamAborted",
]


def _dotted(path: Sequence[str | int]) -> str:
    return ".".join(str(part) for part in path) or "<root>"


class AiostreamSynthError(Exception):
    """Root of every exception this library raises on purpose."""


class InvalidInputError(AiostreamSynthError, ValueError):
    """An argument is not the shape the function needs.

    ``path`` locates the offending value inside the argument (``("choices", 0, "message")``);
    the message names it in dotted form.
    """

    def __init__(self, what: str, path: Sequence[str | int], problem: str) -> None:
        self.what = what
        self.path: tuple[str | int, ...] = tuple(path)
        self.problem = problem
        super().__init__(f"{what}: {_dotted(self.path)}: {problem}")


class InvalidResultError(InvalidInputError):
    """A backend result (chat completion or Responses object) cannot be turned into a stream."""


class InvalidRequestError(InvalidInputError):
    """A request body cannot be sanitized (it is not a JSON object)."""


class InvalidSSEFieldError(InvalidInputError):
    """An SSE field value (event name, id) would break the framing: it contains CR or LF."""


class BackendError(AiostreamSynthError):
    """The backend failed before the stream was committed.

    ``status_code`` is the HTTP status an adapter should answer with, ``body`` the error body in
    the stream's dialect (OpenAI's ``{"error": {"message", "type", "param", "code"}}``,
    Anthropic's ``{"type": "error", "error": {...}}``) and ``headers`` any headers the dialect
    sends with it (``x-should-retry``...).
    """

    def __init__(
        self, status_code: int, body: dict[str, Any], *, headers: Mapping[str, str] | None = None
    ) -> None:
        self.status_code = status_code
        self.body = body
        self.headers: Mapping[str, str] = headers or {}
        error = body.get("error") or {}
        message = error.get("message", "") if isinstance(error, dict) else ""
        super().__init__(f"HTTP {status_code}: {message}")


class RequestError(AiostreamSynthError):
    """An HTTP request is refused before the stream is committed (4xx / 503).

    ``body`` is OpenAI's error shape ``{"error": {"message", "type", "param", "code"}}``.
    """

    def __init__(
        self,
        status_code: int,
        message: str,
        *,
        param: str | None = None,
        code: str | None = None,
        type: str = "invalid_request_error",
    ) -> None:
        self.status_code = status_code
        self.body: dict[str, Any] = {
            "error": {"message": message, "type": type, "param": param, "code": code}
        }
        super().__init__(f"HTTP {status_code}: {message}")


class BridgeError(RequestError):
    """A request a bridge cannot convert without changing its meaning (a 400 naming the
    parameter): server-side state on a stateless bridge, a forced tool the upstream cannot
    run, a file known only by its id."""

    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(400, message, param=param, code="unsupported_parameter")


class StreamAborted(AiostreamSynthError):
    """The stream was ended on purpose (server shutdown); ``status_code`` is 503."""

    status_code = 503
