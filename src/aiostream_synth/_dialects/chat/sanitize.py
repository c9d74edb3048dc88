"""Chat Completions, request side: a streaming body onto the strict non-streaming params shape.

Deliberate differences from the upstream reference module:

* the cleaned body is a new top-level dict whose nested values are shared with the input
  rather than deep-copied; nothing in this library mutates them (copying a 60 KB agent
  transcript was most of the reference's request-preparation time);
* the kept field set is our strict params model's (mirrored from the installed openai SDK),
  minus the provider extensions that belong to the non-streaming path only;
* decision P10 applies as on the Responses side: a missing key below the top level is no error
  (a replayed tool call without ``type`` is forwarded), unknown keys are pruned, a tool of an
  unknown ``type`` is dropped, and every removal is recorded and reported.
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel

from aiostream_synth._params.models import (
    CHAT_PROVIDER_EXTENSION_FIELDS,
    ChatCompletionParams,
    is_mirror,
    param_fields,
)
from aiostream_synth._params.removals import Removals
from aiostream_synth._params.validation import drop_unknown_kinds, validate_params
from aiostream_synth._params.view import attach_views
from aiostream_synth._wire.errors import InvalidRequestError

__all__ = [
    "chat_param_fields",
    "sanitize_streaming_chat_body",
    "validate_streaming_chat_params",
    "wants_usage",
]

LOG = logging.getLogger("aiostream_synth.chat")

_STREAMING_ONLY = ("stream", "stream_options")


def chat_param_fields(params_model: type[BaseModel] = ChatCompletionParams) -> frozenset[str]:
    """The top-level keys a sanitized streaming chat body may keep."""
    return param_fields(params_model) - CHAT_PROVIDER_EXTENSION_FIELDS


def wants_usage(stream_options: Any) -> bool:
    """Whether ``stream_options`` asks for the trailing usage chunk.

    True iff it is a dict whose ``include_usage`` value is truthy.
    """
    return isinstance(stream_options, dict) and bool(stream_options.get("include_usage"))


def sanitize_streaming_chat_body(
    body: dict[str, Any],
    *,
    params_model: type[BaseModel] = ChatCompletionParams,
    removals: Removals | None = None,
) -> tuple[dict[str, Any], bool]:
    """Map a streaming chat body onto the strict non-streaming params shape.

    Returns ``(cleaned, include_usage)``: ``stream`` and ``stream_options`` are removed,
    ``include_usage`` comes from the original ``stream_options``, every other top-level key not
    in the params model is removed, and so is a tool of a ``type`` the model does not know.
    Removals are recorded in ``removals`` when given, else logged in one record. Values are not
    validated here and ``stream``'s value is not inspected.
    """
    if not isinstance(body, dict):
        raise InvalidRequestError(
            "chat request body", (), f"expected a JSON object, got {type(body).__name__}"
        )
    report = Removals() if removals is None else removals
    keep = chat_param_fields(params_model)
    cleaned: dict[str, Any] = {}
    for key, value in body.items():
        if key in _STREAMING_ONLY:
            continue
        if key in keep:
            cleaned[key] = value
        else:
            report.add((key,), "not a request parameter")
    tools = cleaned.get("tools")
    if isinstance(tools, list):
        located: list[tuple[Any, tuple[str | int, ...]]] = [
            (tool, ("tools", i)) for i, tool in enumerate(tools)
        ]
        kept = drop_unknown_kinds(params_model, "tools", located, report, "tool")
        if len(kept) != len(tools):
            cleaned["tools"] = [tool for tool, _ in kept]
            report.origins["tools"] = [path for _, path in kept]
    if removals is None:
        report.log(LOG, "chat request")
    return cleaned, wants_usage(body.get("stream_options"))


def validate_streaming_chat_params(
    body: dict[str, Any],
    *,
    params_model: type[BaseModel] = ChatCompletionParams,
    removals: Removals | None = None,
) -> BaseModel:
    """Validate a sanitized chat body against the strict params model (decision P10).

    The chat counterpart of :func:`validate_streaming_responses_params`: unknown keys anywhere
    (also inside a message or tool spec) are pruned and recorded; a missing key below the top
    level is no error; other errors raise pydantic's :class:`ValidationError`. With our params
    model, object fields give typed attribute access. The input is never mutated.
    """
    report = Removals() if removals is None else removals
    model = validate_params(params_model, body, report, member_fields=("messages", "tools"))
    if removals is None:
        report.log(LOG, "chat request")
    if is_mirror(type(model)):
        attach_views(model)
    return model
