"""Chat Completions, request side: a streaming body onto the strict non-streaming params shape.

Deliberate differences from the upstream reference module:

* the cleaned body is a new top-level dict whose nested values are shared with the input
  rather than deep-copied; nothing in this library mutates them (copying a 60 KB agent
  transcript was most of the reference's request-preparation time);
* the kept field set is our strict params model's (mirrored from the installed openai SDK),
  minus the provider extensions that belong to the non-streaming path only (B-C02).
"""

from __future__ import annotations

import logging
from typing import Any

from pydantic import BaseModel, ValidationError

from ._errors import InvalidRequestError
from ._json import json_copy
from ._params import CHAT_PROVIDER_EXTENSION_FIELDS, ChatCompletionParams, param_fields
from ._pruning import validate_pruning

__all__ = [
    "chat_param_fields",
    "sanitize_streaming_chat_body",
    "validate_streaming_chat_params",
    "wants_usage",
]

LOG = logging.getLogger("aiostream_synth.chat")

_STREAMING_ONLY = ("stream", "stream_options")


def chat_param_fields(params_model: type[BaseModel] = ChatCompletionParams) -> frozenset[str]:
    """The top-level keys a sanitized streaming chat body may keep (B-C02)."""
    return param_fields(params_model) - CHAT_PROVIDER_EXTENSION_FIELDS


def wants_usage(stream_options: Any) -> bool:
    """Whether ``stream_options`` asks for the trailing usage chunk (B-C03..B-C05).

    True iff it is a dict whose ``include_usage`` value is truthy.
    """
    return isinstance(stream_options, dict) and bool(stream_options.get("include_usage"))


def sanitize_streaming_chat_body(
    body: dict[str, Any], *, params_model: type[BaseModel] = ChatCompletionParams
) -> tuple[dict[str, Any], bool]:
    """Map a streaming chat body onto the strict non-streaming params shape.

    Returns ``(cleaned, include_usage)``: ``stream`` and ``stream_options`` are removed,
    ``include_usage`` comes from the original ``stream_options``, and every other top-level
    key not in the params model is dropped (one DEBUG record lists them). Values are not
    validated here and ``stream``'s value is not inspected (B-C06..B-C12).
    """
    if not isinstance(body, dict):
        raise InvalidRequestError(
            "chat request body", (), f"expected a JSON object, got {type(body).__name__}"
        )
    keep = chat_param_fields(params_model)
    cleaned: dict[str, Any] = {}
    dropped: list[str] = []
    for key, value in body.items():
        if key in _STREAMING_ONLY:
            continue
        if key in keep:
            cleaned[key] = value
        else:
            dropped.append(key)
    if dropped:
        LOG.debug("dropped chat request fields not in the params model: %s", sorted(dropped))
    return cleaned, wants_usage(body.get("stream_options"))


def validate_streaming_chat_params(
    body: dict[str, Any], *, params_model: type[BaseModel] = ChatCompletionParams
) -> BaseModel:
    """Validate a sanitized chat body against the strict params model, pruning unknown keys.

    The chat counterpart of :func:`validate_streaming_responses_params`: unknown keys anywhere
    (also inside a message or tool spec) are removed with one WARNING each; other errors raise
    pydantic's :class:`ValidationError`. The input is never mutated.
    """
    try:
        return params_model.model_validate(body)
    except ValidationError:
        pass
    return validate_pruning(params_model.model_validate, json_copy(body), LOG)
