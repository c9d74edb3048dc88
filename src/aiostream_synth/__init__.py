"""aiostream_synth: serve streaming OpenAI-style clients from backends that answer non-streaming.

Layers, each importing only those below it:

* synthesis, sanitizing and bridging (pure, no I/O): :func:`synthesize_chat_completion_sse`,
  :func:`synthesize_responses_sse`, :func:`sanitize_streaming_chat_body`,
  :func:`sanitize_streaming_responses_body`, :func:`responses_to_chat` /
  :func:`chat_to_response` (a Responses client on a chat upstream), ...;
* the engine (anyio; asyncio and trio): :class:`SynthesizedStream`, :class:`ShutdownSignal`;
* adapters: the native ASGI app :class:`SynthesizingApp`, and the sse-starlette adapter in the
  public submodule :mod:`aiostream_synth.starlette` (``starlette`` extra).
"""

import importlib as _importlib
import typing as _typing

if _typing.TYPE_CHECKING:
    #: The installed version of the package (read from its metadata on first use).
    __version__: str
    from aiostream_synth._dialects.anthropic.stream import AnthropicDialect as AnthropicDialect
    from aiostream_synth._dialects.anthropic.synthesis import (
        synthesize_anthropic_sse as synthesize_anthropic_sse,
    )
    from aiostream_synth._dialects.bridges.anthropic_chat.request import (
        anthropic_to_chat as anthropic_to_chat,
    )
    from aiostream_synth._dialects.bridges.anthropic_chat.result import (
        chat_to_anthropic_message as chat_to_anthropic_message,
    )
    from aiostream_synth._dialects.bridges.chat_anthropic.request import (
        chat_to_anthropic_request as chat_to_anthropic_request,
    )
    from aiostream_synth._dialects.bridges.chat_anthropic.result import (
        anthropic_message_to_chat_completion as anthropic_message_to_chat_completion,
    )
    from aiostream_synth._dialects.bridges.chat_responses.request import (
        chat_to_responses_request as chat_to_responses_request,
    )
    from aiostream_synth._dialects.bridges.chat_responses.result import (
        response_to_chat_completion as response_to_chat_completion,
    )
    from aiostream_synth._dialects.bridges.options import BRIDGE_PROFILES as BRIDGE_PROFILES
    from aiostream_synth._dialects.bridges.options import BridgeOptions as BridgeOptions
    from aiostream_synth._dialects.bridges.options import bridge_options as bridge_options
    from aiostream_synth._dialects.bridges.registry import bridge_for as bridge_for
    from aiostream_synth._dialects.bridges.responses_chat.context import (
        ResponsesChatContext as ResponsesChatContext,
    )
    from aiostream_synth._dialects.bridges.responses_chat.request import (
        responses_to_chat as responses_to_chat,
    )
    from aiostream_synth._dialects.bridges.responses_chat.result import (
        chat_to_response as chat_to_response,
    )
    from aiostream_synth._dialects.chat.sanitize import (
        sanitize_streaming_chat_body as sanitize_streaming_chat_body,
    )
    from aiostream_synth._dialects.chat.sanitize import (
        validate_streaming_chat_params as validate_streaming_chat_params,
    )
    from aiostream_synth._dialects.chat.stream import ChatDialect as ChatDialect
    from aiostream_synth._dialects.chat.synthesis import (
        CHAT_KEEPALIVE_FRAME as CHAT_KEEPALIVE_FRAME,
    )
    from aiostream_synth._dialects.chat.synthesis import chat_error_frame as chat_error_frame
    from aiostream_synth._dialects.chat.synthesis import (
        synthesize_chat_completion_sse as synthesize_chat_completion_sse,
    )
    from aiostream_synth._dialects.prepared import BridgedRequest as BridgedRequest
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
    from aiostream_synth._dialects.responses.stream import ResponsesDialect as ResponsesDialect
    from aiostream_synth._dialects.responses.synthesis import Fidelity as Fidelity
    from aiostream_synth._dialects.responses.synthesis import (
        is_responses_lifecycle_chunk as is_responses_lifecycle_chunk,
    )
    from aiostream_synth._dialects.responses.synthesis import (
        synthesize_responses_failure_sse as synthesize_responses_failure_sse,
    )
    from aiostream_synth._dialects.responses.synthesis import (
        synthesize_responses_keepalive_sse as synthesize_responses_keepalive_sse,
    )
    from aiostream_synth._dialects.responses.synthesis import (
        synthesize_responses_sse as synthesize_responses_sse,
    )
    from aiostream_synth._engine.shutdown import ShutdownSignal as ShutdownSignal
    from aiostream_synth._engine.stream import Backend as Backend
    from aiostream_synth._engine.stream import OnDisconnect as OnDisconnect
    from aiostream_synth._engine.stream import StreamOutcome as StreamOutcome
    from aiostream_synth._engine.stream import SynthesizedStream as SynthesizedStream
    from aiostream_synth._params.models import ChatCompletionParams as ChatCompletionParams
    from aiostream_synth._params.models import ResponsesParams as ResponsesParams
    from aiostream_synth._serving.asgi import BackendCall as BackendCall
    from aiostream_synth._serving.asgi import CompletionBackend as CompletionBackend
    from aiostream_synth._serving.asgi import StreamSettings as StreamSettings
    from aiostream_synth._serving.asgi import SynthesizingApp as SynthesizingApp
    from aiostream_synth._wire.errors import AiostreamSynthError as AiostreamSynthError
    from aiostream_synth._wire.errors import BackendError as BackendError
    from aiostream_synth._wire.errors import BridgeError as BridgeError
    from aiostream_synth._wire.errors import InvalidInputError as InvalidInputError
    from aiostream_synth._wire.errors import InvalidRequestError as InvalidRequestError
    from aiostream_synth._wire.errors import InvalidResultError as InvalidResultError
    from aiostream_synth._wire.errors import InvalidSSEFieldError as InvalidSSEFieldError
    from aiostream_synth._wire.errors import RequestError as RequestError
    from aiostream_synth._wire.errors import StreamAborted as StreamAborted
    from aiostream_synth._wire.failures import Failure as Failure
    from aiostream_synth._wire.failures import classify_failure as classify_failure
    from aiostream_synth._wire.sse import DONE_FRAME as DONE_FRAME
    from aiostream_synth._wire.sse import comment_frame as comment_frame
    from aiostream_synth._wire.sse import data_frame as data_frame
    from aiostream_synth._wire.sse import event_frame as event_frame

#: Where each public name lives. ``import aiostream_synth`` loads none of them: each is imported
#: on first use (PEP 562), so that ``aiostream-synth --help`` and a program that needs only the
#: synthesis functions do not pay for the SDK types they never touch.
_EXPORTS: dict[str, str] = {
    "AnthropicDialect": "aiostream_synth._dialects.anthropic.stream",
    "synthesize_anthropic_sse": "aiostream_synth._dialects.anthropic.synthesis",
    "anthropic_to_chat": "aiostream_synth._dialects.bridges.anthropic_chat.request",
    "chat_to_anthropic_message": "aiostream_synth._dialects.bridges.anthropic_chat.result",
    "chat_to_anthropic_request": "aiostream_synth._dialects.bridges.chat_anthropic.request",
    "anthropic_message_to_chat_completion": "aiostream_synth._dialects.bridges.chat_anthropic.result",
    "chat_to_responses_request": "aiostream_synth._dialects.bridges.chat_responses.request",
    "response_to_chat_completion": "aiostream_synth._dialects.bridges.chat_responses.result",
    "BRIDGE_PROFILES": "aiostream_synth._dialects.bridges.options",
    "BridgeOptions": "aiostream_synth._dialects.bridges.options",
    "bridge_options": "aiostream_synth._dialects.bridges.options",
    "bridge_for": "aiostream_synth._dialects.bridges.registry",
    "ResponsesChatContext": "aiostream_synth._dialects.bridges.responses_chat.context",
    "responses_to_chat": "aiostream_synth._dialects.bridges.responses_chat.request",
    "chat_to_response": "aiostream_synth._dialects.bridges.responses_chat.result",
    "sanitize_streaming_chat_body": "aiostream_synth._dialects.chat.sanitize",
    "validate_streaming_chat_params": "aiostream_synth._dialects.chat.sanitize",
    "ChatDialect": "aiostream_synth._dialects.chat.stream",
    "CHAT_KEEPALIVE_FRAME": "aiostream_synth._dialects.chat.synthesis",
    "chat_error_frame": "aiostream_synth._dialects.chat.synthesis",
    "synthesize_chat_completion_sse": "aiostream_synth._dialects.chat.synthesis",
    "BridgedRequest": "aiostream_synth._dialects.prepared",
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
    "ResponsesDialect": "aiostream_synth._dialects.responses.stream",
    "Fidelity": "aiostream_synth._dialects.responses.synthesis",
    "is_responses_lifecycle_chunk": "aiostream_synth._dialects.responses.synthesis",
    "synthesize_responses_failure_sse": "aiostream_synth._dialects.responses.synthesis",
    "synthesize_responses_keepalive_sse": "aiostream_synth._dialects.responses.synthesis",
    "synthesize_responses_sse": "aiostream_synth._dialects.responses.synthesis",
    "ShutdownSignal": "aiostream_synth._engine.shutdown",
    "Backend": "aiostream_synth._engine.stream",
    "OnDisconnect": "aiostream_synth._engine.stream",
    "StreamOutcome": "aiostream_synth._engine.stream",
    "SynthesizedStream": "aiostream_synth._engine.stream",
    "ChatCompletionParams": "aiostream_synth._params.models",
    "ResponsesParams": "aiostream_synth._params.models",
    "BackendCall": "aiostream_synth._serving.asgi",
    "CompletionBackend": "aiostream_synth._serving.asgi",
    "StreamSettings": "aiostream_synth._serving.asgi",
    "SynthesizingApp": "aiostream_synth._serving.asgi",
    "AiostreamSynthError": "aiostream_synth._wire.errors",
    "BackendError": "aiostream_synth._wire.errors",
    "BridgeError": "aiostream_synth._wire.errors",
    "InvalidInputError": "aiostream_synth._wire.errors",
    "InvalidRequestError": "aiostream_synth._wire.errors",
    "InvalidResultError": "aiostream_synth._wire.errors",
    "InvalidSSEFieldError": "aiostream_synth._wire.errors",
    "RequestError": "aiostream_synth._wire.errors",
    "StreamAborted": "aiostream_synth._wire.errors",
    "Failure": "aiostream_synth._wire.failures",
    "classify_failure": "aiostream_synth._wire.failures",
    "DONE_FRAME": "aiostream_synth._wire.sse",
    "comment_frame": "aiostream_synth._wire.sse",
    "data_frame": "aiostream_synth._wire.sse",
    "event_frame": "aiostream_synth._wire.sse",
}


if not _typing.TYPE_CHECKING:  # hidden from type checkers: a misspelt name stays an error for them

    def __getattr__(name: str) -> _typing.Any:
        if name == "__version__":
            from importlib.metadata import version

            value: _typing.Any = version("aiostream-synth")
        elif name in _EXPORTS:
            value = getattr(_importlib.import_module(_EXPORTS[name]), name)
        else:
            raise AttributeError(f"module 'aiostream_synth' has no attribute {name!r}")
        globals()[name] = value  # the next lookup is an ordinary one
        return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})


__all__ = [
    "BRIDGE_PROFILES",
    "CHAT_KEEPALIVE_FRAME",
    "DONE_FRAME",
    "AiostreamSynthError",
    "AnthropicDialect",
    "Backend",
    "BackendCall",
    "BackendError",
    "BridgeError",
    "BridgeOptions",
    "BridgedRequest",
    "ChatCompletionParams",
    "ChatDialect",
    "CompletionBackend",
    "Dialect",
    "Failure",
    "Fidelity",
    "InvalidInputError",
    "InvalidRequestError",
    "InvalidResultError",
    "InvalidSSEFieldError",
    "NamespaceMap",
    "OnDisconnect",
    "PreparedRequest",
    "RequestError",
    "ResponsesChatContext",
    "ResponsesDialect",
    "ResponsesParams",
    "SanitizeOptions",
    "ShutdownSignal",
    "StreamAborted",
    "StreamOutcome",
    "StreamSettings",
    "SynthesizedStream",
    "SynthesizingApp",
    "__version__",
    "anthropic_message_to_chat_completion",
    "anthropic_to_chat",
    "bridge_for",
    "bridge_options",
    "chat_error_frame",
    "chat_to_anthropic_message",
    "chat_to_anthropic_request",
    "chat_to_response",
    "chat_to_responses_request",
    "classify_failure",
    "comment_frame",
    "data_frame",
    "event_frame",
    "flatten_namespace_tools",
    "is_responses_lifecycle_chunk",
    "prepare_request",
    "response_to_chat_completion",
    "responses_to_chat",
    "restore_namespace_tool_calls",
    "sanitize_streaming_chat_body",
    "sanitize_streaming_responses_body",
    "synthesize_anthropic_sse",
    "synthesize_chat_completion_sse",
    "synthesize_responses_failure_sse",
    "synthesize_responses_keepalive_sse",
    "synthesize_responses_sse",
    "validate_streaming_chat_params",
    "validate_streaming_responses_params",
    "wants_stream",
]
