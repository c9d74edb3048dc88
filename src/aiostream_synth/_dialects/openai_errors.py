"""What the two OpenAI dialects (Chat Completions, Responses) share as HTTP APIs: the error
shape, and the spec methods that do not depend on the dialect."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from aiostream_synth._dialects.base import ErrorResponse, LocalRoute, RequestTarget
from aiostream_synth._wire.usage import warm_usage

__all__ = ["OpenAISpecBase", "openai_error"]


def openai_error(
    status_code: int,
    message: str,
    *,
    code: str | None = None,
    param: str | None = None,
    type: str | None = None,
) -> ErrorResponse:
    """``{"error": {"message", "type", "param", "code"}}``; ``type`` defaults by status class."""
    kind = type or ("server_error" if status_code >= 500 else "invalid_request_error")
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return ErrorResponse(status_code, body)


class OpenAISpecBase:
    """The parts of :class:`~aiostream_synth._dialects.base.DialectSpec` both OpenAI dialects
    implement alike; a subclass names the body fields that do not identify a generation."""

    #: Body fields a retry may change and still want the same answer (``stream``, the limit).
    not_identifying: ClassVar[tuple[str, ...]] = ()
    local_routes: Mapping[str, LocalRoute] = {}

    def from_target(self, body: dict[str, Any], target: RequestTarget) -> dict[str, Any]:
        return body

    def upstream_headers(
        self,
        client_headers: Mapping[str, str],
        api_key: str,
        *,
        forward_authorization: bool,
    ) -> Mapping[str, str | None]:
        """The HTTP client's bearer ``api_key``, or the client's own ``Authorization``."""
        if forward_authorization and "authorization" in client_headers:
            return {"Authorization": client_headers["authorization"]}
        return {}

    def error_response(
        self,
        status_code: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        type: str | None = None,
    ) -> ErrorResponse:
        return openai_error(status_code, message, code=code, param=param, type=type)

    def coalesce_key(self, body: dict[str, Any]) -> dict[str, Any]:
        return {k: v for k, v in body.items() if k not in self.not_identifying}

    def warm_up(self) -> None:
        """The usage counters the SDK requires (read on first use); the OpenAI params models
        are built at import."""
        warm_usage()

    def response_headers(self) -> Mapping[str, str]:
        return {}
