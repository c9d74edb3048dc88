"""aiostream_synth: serve streaming OpenAI-style clients from backends that answer non-streaming.

Layers, each importing only those below it:

* synthesis and sanitizing (pure, no I/O): :func:`synthesize_chat_completion_sse`,
  :func:`synthesize_responses_sse`, :func:`sanitize_streaming_chat_body`,
  :func:`sanitize_streaming_responses_body`, ...;
* the engine (anyio; asyncio and trio): :class:`SynthesizedStream`, :class:`ShutdownSignal`;
* adapters: the native ASGI app :class:`SynthesizingApp`, and the sse-starlette adapter in the
  public submodule :mod:`aiostream_synth.starlette` (``starlette`` extra).
"""

from importlib.metadata import version as _version

from ._asgi import BackendCall as BackendCall
from ._asgi import CompletionBackend as CompletionBackend
from ._asgi import StreamSettings as StreamSettings
from ._asgi import SynthesizingApp as SynthesizingApp
from ._chat_sanitize import sanitize_streaming_chat_body as sanitize_streaming_chat_body
from ._chat_sanitize import validate_streaming_chat_params as validate_streaming_chat_params
from ._chat_synthesis import CHAT_KEEPALIVE_FRAME as CHAT_KEEPALIVE_FRAME
from ._chat_synthesis import chat_error_frame as chat_error_frame
from ._chat_synthesis import synthesize_chat_completion_sse as synthesize_chat_completion_sse
from ._dispatch import Dialect as Dialect
from ._dispatch import wants_stream as wants_stream
from ._engine import Backend as Backend
from ._engine import ChatDialect as ChatDialect
from ._engine import OnDisconnect as OnDisconnect
from ._engine import ResponsesDialect as ResponsesDialect
from ._engine import StreamOutcome as StreamOutcome
from ._engine import SynthesizedStream as SynthesizedStream
from ._errors import AiostreamSynthError as AiostreamSynthError
from ._errors import BackendError as BackendError
from ._errors import InvalidInputError as InvalidInputError
from ._errors import InvalidRequestError as InvalidRequestError
from ._errors import InvalidResultError as InvalidResultError
from ._errors import InvalidSSEFieldError as InvalidSSEFieldError
from ._errors import RequestError as RequestError
from ._errors import StreamAborted as StreamAborted
from ._failures import Failure as Failure
from ._failures import classify_failure as classify_failure
from ._namespaces import NamespaceMap as NamespaceMap
from ._namespaces import flatten_namespace_tools as flatten_namespace_tools
from ._namespaces import restore_namespace_tool_calls as restore_namespace_tool_calls
from ._params import ChatCompletionParams as ChatCompletionParams
from ._params import ResponsesParams as ResponsesParams
from ._requests import PreparedRequest as PreparedRequest
from ._requests import SanitizeOptions as SanitizeOptions
from ._requests import prepare_request as prepare_request
from ._responses_sanitize import (
    sanitize_streaming_responses_body as sanitize_streaming_responses_body,
)
from ._responses_sanitize import (
    validate_streaming_responses_params as validate_streaming_responses_params,
)
from ._responses_synthesis import Fidelity as Fidelity
from ._responses_synthesis import is_responses_lifecycle_chunk as is_responses_lifecycle_chunk
from ._responses_synthesis import (
    synthesize_responses_failure_sse as synthesize_responses_failure_sse,
)
from ._responses_synthesis import (
    synthesize_responses_keepalive_sse as synthesize_responses_keepalive_sse,
)
from ._responses_synthesis import synthesize_responses_sse as synthesize_responses_sse
from ._shutdown import ShutdownSignal as ShutdownSignal
from ._sse import DONE_FRAME as DONE_FRAME
from ._sse import comment_frame as comment_frame
from ._sse import data_frame as data_frame
from ._sse import event_frame as event_frame

__version__ = _version("aiostream-synth")

__all__ = [
    "CHAT_KEEPALIVE_FRAME",
    "DONE_FRAME",
    "AiostreamSynthError",
    "Backend",
    "BackendCall",
    "BackendError",
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
    "chat_error_frame",
    "classify_failure",
    "comment_frame",
    "data_frame",
    "event_frame",
    "flatten_namespace_tools",
    "is_responses_lifecycle_chunk",
    "prepare_request",
    "restore_namespace_tool_calls",
    "sanitize_streaming_chat_body",
    "sanitize_streaming_responses_body",
    "synthesize_chat_completion_sse",
    "synthesize_responses_failure_sse",
    "synthesize_responses_keepalive_sse",
    "synthesize_responses_sse",
    "validate_streaming_chat_params",
    "validate_streaming_responses_params",
    "wants_stream",
]
