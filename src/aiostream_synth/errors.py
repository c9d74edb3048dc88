"""The exceptions the library raises: each derives from :class:`AiostreamSynthError`.

Every name is imported on first use.
"""

import typing as _typing

from aiostream_synth._lazy import public_module as _public_module

if _typing.TYPE_CHECKING:
    from aiostream_synth._wire.errors import AiostreamSynthError as AiostreamSynthError
    from aiostream_synth._wire.errors import BackendError as BackendError
    from aiostream_synth._wire.errors import BridgeError as BridgeError
    from aiostream_synth._wire.errors import InvalidInputError as InvalidInputError
    from aiostream_synth._wire.errors import InvalidRequestError as InvalidRequestError
    from aiostream_synth._wire.errors import InvalidResultError as InvalidResultError
    from aiostream_synth._wire.errors import InvalidSSEFieldError as InvalidSSEFieldError
    from aiostream_synth._wire.errors import RequestError as RequestError
    from aiostream_synth._wire.errors import StreamAborted as StreamAborted

_EXPORTS: dict[str, str] = {
    "AiostreamSynthError": "aiostream_synth._wire.errors",
    "BackendError": "aiostream_synth._wire.errors",
    "BridgeError": "aiostream_synth._wire.errors",
    "InvalidInputError": "aiostream_synth._wire.errors",
    "InvalidRequestError": "aiostream_synth._wire.errors",
    "InvalidResultError": "aiostream_synth._wire.errors",
    "InvalidSSEFieldError": "aiostream_synth._wire.errors",
    "RequestError": "aiostream_synth._wire.errors",
    "StreamAborted": "aiostream_synth._wire.errors",
}

if not _typing.TYPE_CHECKING:  # hidden from type checkers: a misspelt name stays an error for them
    __getattr__, __dir__ = _public_module(__name__, globals(), _EXPORTS)

__all__ = [
    "AiostreamSynthError",
    "BackendError",
    "BridgeError",
    "InvalidInputError",
    "InvalidRequestError",
    "InvalidResultError",
    "InvalidSSEFieldError",
    "RequestError",
    "StreamAborted",
]
