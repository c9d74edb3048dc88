"""aiostream_synth: serve streaming LLM clients from backends that answer non-streaming.

The names a program needs most are here; the rest live in public submodules, by layer:

* :mod:`aiostream_synth.sse` -- synthesis (pure, no I/O): a complete result in, SSE frames out;
* :mod:`aiostream_synth.params` -- the request side: sanitizing, validating, preparing;
* :mod:`aiostream_synth.bridges` -- a client on a backend of another API: pure conversions;
* :mod:`aiostream_synth.engine` -- keepalive and backend call merged (anyio; asyncio and trio);
* :mod:`aiostream_synth.asgi` -- the ASGI app around one backend function;
* :mod:`aiostream_synth.starlette` -- the same as Starlette / FastAPI routes (``starlette`` extra);
* :mod:`aiostream_synth.proxy` -- the app of ``aiostream-synth serve``, for a platform of yours;
* :mod:`aiostream_synth.errors` -- every exception the library raises.

``import aiostream_synth`` loads none of them: each name is imported on first use (PEP 562).
Names that lived here before this layout still resolve, with a ``DeprecationWarning`` naming
their new home, until the next release.
"""

import typing as _typing

from aiostream_synth._lazy import public_module as _public_module

if _typing.TYPE_CHECKING:
    #: The installed version of the package (read from its metadata on first use).
    __version__: str
    from aiostream_synth.asgi import BackendCall as BackendCall
    from aiostream_synth.asgi import CompletionBackend as CompletionBackend
    from aiostream_synth.asgi import StreamSettings as StreamSettings
    from aiostream_synth.asgi import SynthesizingApp as SynthesizingApp
    from aiostream_synth.bridges import BridgeOptions as BridgeOptions
    from aiostream_synth.bridges import bridge_options as bridge_options
    from aiostream_synth.engine import AnthropicDialect as AnthropicDialect
    from aiostream_synth.engine import ChatDialect as ChatDialect
    from aiostream_synth.engine import ResponsesDialect as ResponsesDialect
    from aiostream_synth.engine import ShutdownSignal as ShutdownSignal
    from aiostream_synth.engine import StreamOutcome as StreamOutcome
    from aiostream_synth.engine import SynthesizedStream as SynthesizedStream
    from aiostream_synth.errors import AiostreamSynthError as AiostreamSynthError
    from aiostream_synth.errors import BackendError as BackendError
    from aiostream_synth.errors import RequestError as RequestError
    from aiostream_synth.params import PreparedRequest as PreparedRequest
    from aiostream_synth.params import prepare_request as prepare_request
    from aiostream_synth.sse import synthesize_anthropic_sse as synthesize_anthropic_sse
    from aiostream_synth.sse import synthesize_chat_completion_sse as synthesize_chat_completion_sse
    from aiostream_synth.sse import synthesize_responses_sse as synthesize_responses_sse

#: Where each name here comes from: its public home, which imports it on first use.
_EXPORTS: dict[str, str] = {
    "BackendCall": "aiostream_synth.asgi",
    "CompletionBackend": "aiostream_synth.asgi",
    "StreamSettings": "aiostream_synth.asgi",
    "SynthesizingApp": "aiostream_synth.asgi",
    "BridgeOptions": "aiostream_synth.bridges",
    "bridge_options": "aiostream_synth.bridges",
    "AnthropicDialect": "aiostream_synth.engine",
    "ChatDialect": "aiostream_synth.engine",
    "ResponsesDialect": "aiostream_synth.engine",
    "ShutdownSignal": "aiostream_synth.engine",
    "StreamOutcome": "aiostream_synth.engine",
    "SynthesizedStream": "aiostream_synth.engine",
    "AiostreamSynthError": "aiostream_synth.errors",
    "BackendError": "aiostream_synth.errors",
    "RequestError": "aiostream_synth.errors",
    "PreparedRequest": "aiostream_synth.params",
    "prepare_request": "aiostream_synth.params",
    "synthesize_anthropic_sse": "aiostream_synth.sse",
    "synthesize_chat_completion_sse": "aiostream_synth.sse",
    "synthesize_responses_sse": "aiostream_synth.sse",
}
#: Names that left this module: each resolves to its new home, with a DeprecationWarning.
_DEPRECATED: dict[str, str] = {
    "BRIDGE_PROFILES": "aiostream_synth.bridges.BRIDGE_PROFILES",
    "Backend": "aiostream_synth.engine.Backend",
    "BridgeError": "aiostream_synth.errors.BridgeError",
    "BridgedRequest": "aiostream_synth.bridges.BridgedRequest",
    "CHAT_KEEPALIVE_FRAME": "aiostream_synth.sse.CHAT_KEEPALIVE_FRAME",
    "ChatCompletionParams": "aiostream_synth.params.ChatCompletionParams",
    "DONE_FRAME": "aiostream_synth.sse.DONE_FRAME",
    "Dialect": "aiostream_synth.params.Dialect",
    "Failure": "aiostream_synth.engine.Failure",
    "Fidelity": "aiostream_synth.sse.Fidelity",
    "InvalidInputError": "aiostream_synth.errors.InvalidInputError",
    "InvalidRequestError": "aiostream_synth.errors.InvalidRequestError",
    "InvalidResultError": "aiostream_synth.errors.InvalidResultError",
    "InvalidSSEFieldError": "aiostream_synth.errors.InvalidSSEFieldError",
    "NamespaceMap": "aiostream_synth.params.NamespaceMap",
    "OnDisconnect": "aiostream_synth.engine.OnDisconnect",
    "ResponsesChatContext": "aiostream_synth.bridges.ResponsesChatContext",
    "ResponsesParams": "aiostream_synth.params.ResponsesParams",
    "SanitizeOptions": "aiostream_synth.params.SanitizeOptions",
    "StreamAborted": "aiostream_synth.errors.StreamAborted",
    "anthropic_message_to_chat_completion": "aiostream_synth.bridges.anthropic_to_chat_result",
    "anthropic_to_chat": "aiostream_synth.bridges.anthropic_to_chat_request",
    "bridge_for": "aiostream_synth.bridges.bridge_for",
    "chat_error_frame": "aiostream_synth.sse.chat_error_frame",
    "chat_to_anthropic_message": "aiostream_synth.bridges.chat_to_anthropic_result",
    "chat_to_anthropic_request": "aiostream_synth.bridges.chat_to_anthropic_request",
    "chat_to_response": "aiostream_synth.bridges.chat_to_responses_result",
    "chat_to_responses_request": "aiostream_synth.bridges.chat_to_responses_request",
    "classify_failure": "aiostream_synth.engine.classify_failure",
    "comment_frame": "aiostream_synth.sse.comment_frame",
    "data_frame": "aiostream_synth.sse.data_frame",
    "event_frame": "aiostream_synth.sse.event_frame",
    "flatten_namespace_tools": "aiostream_synth.params.flatten_namespace_tools",
    "is_responses_lifecycle_chunk": "aiostream_synth.sse.is_responses_lifecycle_chunk",
    "response_to_chat_completion": "aiostream_synth.bridges.responses_to_chat_result",
    "responses_to_chat": "aiostream_synth.bridges.responses_to_chat_request",
    "restore_namespace_tool_calls": "aiostream_synth.params.restore_namespace_tool_calls",
    "sanitize_streaming_chat_body": "aiostream_synth.params.sanitize_streaming_chat_body",
    "sanitize_streaming_responses_body": "aiostream_synth.params.sanitize_streaming_responses_body",
    "synthesize_responses_failure_sse": "aiostream_synth.sse.synthesize_responses_failure_sse",
    "synthesize_responses_keepalive_sse": "aiostream_synth.sse.synthesize_responses_keepalive_sse",
    "validate_streaming_chat_params": "aiostream_synth.params.validate_streaming_chat_params",
    "validate_streaming_responses_params": "aiostream_synth.params.validate_streaming_responses_params",
    "wants_stream": "aiostream_synth.params.wants_stream",
}

if not _typing.TYPE_CHECKING:  # hidden from type checkers: a misspelt name stays an error for them
    _getattr, __dir__ = _public_module(__name__, globals(), _EXPORTS, _DEPRECATED)

    def __getattr__(name: str) -> _typing.Any:
        if name == "__version__":
            from importlib.metadata import version

            globals()[name] = value = version("aiostream-synth")
            return value
        return _getattr(name)


__all__ = [
    "AiostreamSynthError",
    "AnthropicDialect",
    "BackendCall",
    "BackendError",
    "BridgeOptions",
    "ChatDialect",
    "CompletionBackend",
    "PreparedRequest",
    "RequestError",
    "ResponsesDialect",
    "ShutdownSignal",
    "StreamOutcome",
    "StreamSettings",
    "SynthesizedStream",
    "SynthesizingApp",
    "__version__",
    "bridge_options",
    "prepare_request",
    "synthesize_anthropic_sse",
    "synthesize_chat_completion_sse",
    "synthesize_responses_sse",
]
