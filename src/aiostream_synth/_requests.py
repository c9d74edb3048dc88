"""HTTP request handling shared by every adapter, before anything is committed (no I/O).

Bytes in, a :class:`PreparedRequest` out, or a :class:`RequestError` carrying the status and
OpenAI's error shape: malformed JSON, a body that is not an object, a params validation error
(400, ``param`` naming the path in the client's own body, OpenAI style: ``tools[0].name``), a
body over the size limit (413, raised by the adapter that reads it). Streaming vs not follows
B-D1: chat needs ``stream is True``; any other non-false ``stream`` on a chat request is a 400
rather than a silent non-streaming answer. What the sanitizer and the validator removed is in
``PreparedRequest.removals`` (decision P10).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
from pydantic import BaseModel, ValidationError

from ._chat_sanitize import sanitize_streaming_chat_body, validate_streaming_chat_params
from ._dispatch import Dialect, wants_stream
from ._errors import RequestError
from ._namespaces import NamespaceMap
from ._params import params_dict
from ._removals import Removals, format_path
from ._responses_sanitize import (
    sanitize_streaming_responses_body,
    validate_streaming_responses_params,
)

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "PreparedRequest",
    "SanitizeOptions",
    "parse_json_body",
    "prepare_request",
]

DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024

#: Request fields echoed into the Responses skeleton sent with keepalive events.
#: Small fields only: every keepalive repeats them (Codex's tool list alone is ~30 KB).
_RESPONSES_ECHO = (
    "model",
    "tool_choice",
    "parallel_tool_calls",
    "temperature",
    "top_p",
    "max_output_tokens",
    "previous_response_id",
    "reasoning",
    "truncation",
    "store",
    "service_tier",
    "prompt_cache_key",
)


@dataclass(frozen=True, slots=True, kw_only=True)
class SanitizeOptions:
    """The Responses sanitizer switches (see :func:`sanitize_streaming_responses_body`)."""

    drop_custom_tools: bool = False
    drop_hosted_tools: bool = False
    hoist_carrier_custom_tools: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class PreparedRequest:
    """A request ready for the backend.

    ``params`` is what the backend receives: for a streaming request the sanitized, validated
    non-streaming params; otherwise the client's body unchanged.
    """

    dialect: Dialect
    stream: bool
    params: dict[str, Any]
    ns_map: NamespaceMap = field(default_factory=dict)
    include_usage: bool = False
    #: Skeleton fields for Responses keepalive envelopes (``model`` and request echoes).
    echo: dict[str, Any] = field(default_factory=dict)
    #: Everything removed on the way (unknown fields and keys, tools and items of unknown type,
    #: configured drops), with reasons; see :mod:`aiostream_synth._removals`.
    removals: Removals = field(default_factory=Removals)

    @property
    def dropped(self) -> tuple[str, ...]:
        """The paths of everything removed (``client_metadata``, ``tools[8]``, ``input[0].id``)."""
        return tuple(self.removals.paths)


def parse_json_body(raw: bytes) -> dict[str, Any]:
    """The request body as a JSON object, or a 400 :class:`RequestError`."""
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise RequestError(
            400, f"We could not parse the JSON body of your request: {exc}"
        ) from None
    if not isinstance(body, dict):
        raise RequestError(
            400, f"The request body must be a JSON object, not {type(body).__name__}."
        )
    return body


def _literal_path(body: Any, loc: Sequence[str | int]) -> tuple[str | int, ...]:
    """The literal path of an error location in ``body``, union-arm labels left out."""
    parts: list[str | int] = []
    node = body
    last = len(loc) - 1
    for i, part in enumerate(loc):
        in_dict = isinstance(node, dict) and isinstance(part, str) and part in node
        in_list = isinstance(node, list) and isinstance(part, int) and 0 <= part < len(node)
        if in_dict or in_list:
            node = node[part]
        elif isinstance(node, dict) and i == last:
            pass  # a missing field: the location's last part, not in the body
        else:
            continue  # a union-arm label (after a scalar, everything left is a label)
        parts.append(part)
    return tuple(parts)


def _validation_error(
    body: dict[str, Any], exc: ValidationError, removals: Removals
) -> RequestError:
    """A 400 for the most specific error: the one whose location reaches deepest into the
    body (the union arm that matched best), named by its path in the client's body."""
    errors = exc.errors(include_url=False)
    paths = [_literal_path(body, error["loc"]) for error in errors]
    best = max(range(len(errors)), key=lambda i: len(paths[i]))
    param = format_path(removals.original_path(paths[best])) or None
    first = errors[best]
    more = len(errors) - 1
    suffix = f" (and {more} more error{'s' if more > 1 else ''})" if more else ""
    return RequestError(
        400,
        f"Invalid value for {param or 'the request'}: {first['msg']}{suffix}",
        param=param,
        code=first["type"],
    )


def prepare_request(
    dialect: Dialect,
    raw: bytes | dict[str, Any],
    *,
    sanitize: SanitizeOptions | None = None,
    chat_params_model: type[BaseModel] | None = None,
    responses_params_model: type[BaseModel] | None = None,
) -> PreparedRequest:
    """Parse, decide streaming, sanitize and validate one request (raises :class:`RequestError`).

    A Responses body without ``input`` is forwarded (the upstream may answer it from
    ``previous_response_id`` or ``prompt``), unlike the library's
    :func:`validate_streaming_responses_params` default.
    """
    body = parse_json_body(raw) if isinstance(raw, bytes) else raw
    if not wants_stream(body, dialect):
        stream_value = body.get("stream")
        if dialect == "chat" and stream_value not in (None, False):
            raise RequestError(
                400,
                "Invalid value for stream: expected true or false.",
                param="stream",
                code="invalid_type",
            )
        return PreparedRequest(dialect=dialect, stream=False, params=body)
    removals = Removals()
    if dialect == "chat":
        extra: dict[str, Any] = (
            {} if chat_params_model is None else {"params_model": chat_params_model}
        )
        cleaned, include_usage = sanitize_streaming_chat_body(body, removals=removals, **extra)
        try:
            model = validate_streaming_chat_params(cleaned, removals=removals, **extra)
        except ValidationError as exc:
            raise _validation_error(cleaned, exc, removals) from None
        return PreparedRequest(
            dialect="chat",
            stream=True,
            params=params_dict(model),
            include_usage=include_usage,
            removals=removals,
        )
    options = sanitize or SanitizeOptions()
    extra = {} if responses_params_model is None else {"params_model": responses_params_model}
    cleaned, ns_map = sanitize_streaming_responses_body(
        body,
        options.drop_custom_tools,
        options.drop_hosted_tools,
        options.hoist_carrier_custom_tools,
        removals=removals,
        **extra,
    )
    try:
        model = validate_streaming_responses_params(
            cleaned, require_input=False, removals=removals, **extra
        )
    except ValidationError as exc:
        raise _validation_error(cleaned, exc, removals) from None
    params = params_dict(model)
    echo = {key: body[key] for key in _RESPONSES_ECHO if key in body}
    return PreparedRequest(
        dialect="responses",
        stream=True,
        params=params,
        ns_map=ns_map,
        echo=echo,
        removals=removals,
    )
