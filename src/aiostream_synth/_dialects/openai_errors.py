"""OpenAI's error shape, shared by the two OpenAI dialects (Chat Completions, Responses)."""

from __future__ import annotations

from aiostream_synth._dialects.base import ErrorResponse

__all__ = ["openai_error"]


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
