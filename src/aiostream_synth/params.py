"""The request side: from a client's streaming request to the params a backend is called with.

:func:`prepare_request` does it all for an HTTP layer (parse, sanitize, validate, report
what was removed); the reference-compatible steps (``sanitize_streaming_chat_body``,
``sanitize_streaming_responses_body``, ``validate_streaming_responses_params``,
``flatten_namespace_tools``, ``restore_namespace_tool_calls``, ``NamespaceMap``) keep NeMo
Gym's names and signatures.

Every name is imported on first use.
"""

import typing as _typing

from aiostream_synth._lazy import public_module as _public_module

if _typing.TYPE_CHECKING:
    from aiostream_synth._dialects.chat.sanitize import (
        sanitize_streaming_chat_body as sanitize_streaming_chat_body,
    )
    from aiostream_synth._dialects.chat.sanitize import (
        validate_streaming_chat_params as validate_streaming_chat_params,
    )
    from aiostream_synth._dialects.prepared import Dialect as Dialect
    from aiostream_synth._dialects.registry import wants_stream as wants_stream
    from aiostream_synth._dialects.requests import PreparedRequest as PreparedRequest
    from aiostream_synth._dialects.requests import SanitizeOptions as SanitizeOptions
    from aiostream_synth._dialects.requests import prepare_request as prepare_request
    from aiostream_synth._dialects.responses.namespaces import NamespaceMap as NamespaceMap
    from aiostream_synth._dialects.responses.namespaces import (
        flatten_namespace_tools as flatten_namespace_tools,
    )
    from aiostream_synth._dialects.responses.namespaces import (
        restore_namespace_tool_calls as restore_namespace_tool_calls,
    )
    from aiostream_synth._dialects.responses.sanitize import (
        sanitize_streaming_responses_body as sanitize_streaming_responses_body,
    )
    from aiostream_synth._dialects.responses.sanitize import (
        validate_streaming_responses_params as validate_streaming_responses_params,
    )
    from aiostream_synth._params.models import ChatCompletionParams as ChatCompletionParams
    from aiostream_synth._params.models import ResponsesParams as ResponsesParams

_EXPORTS: dict[str, str] = {
    "sanitize_streaming_chat_body": "aiostream_synth._dialects.chat.sanitize",
    "validate_streaming_chat_params": "aiostream_synth._dialects.chat.sanitize",
    "Dialect": "aiostream_synth._dialects.prepared",
    "wants_stream": "aiostream_synth._dialects.registry",
    "PreparedRequest": "aiostream_synth._dialects.requests",
    "SanitizeOptions": "aiostream_synth._dialects.requests",
    "prepare_request": "aiostream_synth._dialects.requests",
    "NamespaceMap": "aiostream_synth._dialects.responses.namespaces",
    "flatten_namespace_tools": "aiostream_synth._dialects.responses.namespaces",
    "restore_namespace_tool_calls": "aiostream_synth._dialects.responses.namespaces",
    "sanitize_streaming_responses_body": "aiostream_synth._dialects.responses.sanitize",
    "validate_streaming_responses_params": "aiostream_synth._dialects.responses.sanitize",
    "ChatCompletionParams": "aiostream_synth._params.models",
    "ResponsesParams": "aiostream_synth._params.models",
}

if not _typing.TYPE_CHECKING:  # hidden from type checkers: a misspelt name stays an error for them
    __getattr__, __dir__ = _public_module(__name__, globals(), _EXPORTS)

__all__ = [
    "ChatCompletionParams",
    "Dialect",
    "NamespaceMap",
    "PreparedRequest",
    "ResponsesParams",
    "SanitizeOptions",
    "flatten_namespace_tools",
    "prepare_request",
    "restore_namespace_tool_calls",
    "sanitize_streaming_chat_body",
    "sanitize_streaming_responses_body",
    "validate_streaming_chat_params",
    "validate_streaming_responses_params",
    "wants_stream",
]
