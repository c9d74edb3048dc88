"""The engine: a keepalive timer merged with the awaited backend call.

:class:`SynthesizedStream` runs both in anyio task groups (asyncio and trio) owned by an
async context manager, and yields ready-to-send frames without buffering any for a slow
reader. The dialect classes are its output options per API; :func:`classify_failure` is what
a client is told of a backend exception.

Every name is imported on first use.
"""

import typing as _typing

from aiostream_synth._lazy import public_module as _public_module

if _typing.TYPE_CHECKING:
    from aiostream_synth._dialects.anthropic.stream import AnthropicDialect as AnthropicDialect
    from aiostream_synth._dialects.chat.stream import ChatDialect as ChatDialect
    from aiostream_synth._dialects.responses.stream import ResponsesDialect as ResponsesDialect
    from aiostream_synth._engine.shutdown import ShutdownSignal as ShutdownSignal
    from aiostream_synth._engine.stream import Backend as Backend
    from aiostream_synth._engine.stream import OnDisconnect as OnDisconnect
    from aiostream_synth._engine.stream import StreamOutcome as StreamOutcome
    from aiostream_synth._engine.stream import SynthesizedStream as SynthesizedStream
    from aiostream_synth._wire.failures import Failure as Failure
    from aiostream_synth._wire.failures import classify_failure as classify_failure

_EXPORTS: dict[str, str] = {
    "AnthropicDialect": "aiostream_synth._dialects.anthropic.stream",
    "ChatDialect": "aiostream_synth._dialects.chat.stream",
    "ResponsesDialect": "aiostream_synth._dialects.responses.stream",
    "ShutdownSignal": "aiostream_synth._engine.shutdown",
    "Backend": "aiostream_synth._engine.stream",
    "OnDisconnect": "aiostream_synth._engine.stream",
    "StreamOutcome": "aiostream_synth._engine.stream",
    "SynthesizedStream": "aiostream_synth._engine.stream",
    "Failure": "aiostream_synth._wire.failures",
    "classify_failure": "aiostream_synth._wire.failures",
}

if not _typing.TYPE_CHECKING:  # hidden from type checkers: a misspelt name stays an error for them
    __getattr__, __dir__ = _public_module(__name__, globals(), _EXPORTS)

__all__ = [
    "AnthropicDialect",
    "Backend",
    "ChatDialect",
    "Failure",
    "OnDisconnect",
    "ResponsesDialect",
    "ShutdownSignal",
    "StreamOutcome",
    "SynthesizedStream",
    "classify_failure",
]
