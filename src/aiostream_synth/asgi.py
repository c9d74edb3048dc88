"""The ASGI app: all three APIs served around one non-streaming backend function.

:class:`SynthesizingApp` answers ``POST /v1/chat/completions``, ``/v1/responses`` and
``/v1/messages`` (and, with a store, retrieval, resume and cancel of stored responses) on any
ASGI server, asyncio or trio; :class:`StreamSettings` holds its options; the backend is one
async function taking a :class:`BackendCall` and returning the complete result.

Every name is imported on first use.
"""

import typing as _typing

from aiostream_synth._lazy import public_module as _public_module

if _typing.TYPE_CHECKING:
    from aiostream_synth._serving.asgi import SynthesizingApp as SynthesizingApp
    from aiostream_synth._serving.pipeline import BackendCall as BackendCall
    from aiostream_synth._serving.pipeline import CompletionBackend as CompletionBackend
    from aiostream_synth._serving.pipeline import StreamSettings as StreamSettings

_EXPORTS: dict[str, str] = {
    "BackendCall": "aiostream_synth._serving.pipeline",
    "CompletionBackend": "aiostream_synth._serving.pipeline",
    "StreamSettings": "aiostream_synth._serving.pipeline",
    "SynthesizingApp": "aiostream_synth._serving.asgi",
}

if not _typing.TYPE_CHECKING:  # hidden from type checkers: a misspelt name stays an error for them
    __getattr__, __dir__ = _public_module(__name__, globals(), _EXPORTS)

__all__ = [
    "BackendCall",
    "CompletionBackend",
    "StreamSettings",
    "SynthesizingApp",
]
