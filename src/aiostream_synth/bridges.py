"""Bridges: a client served from a backend that speaks another API.

One pair of pure conversions per direction, named ``<from>_to_<to>_<what>``: the client's
request converted for the upstream (``..._request``), and the upstream's complete answer
converted back for the client (``..._result``). :func:`bridge_options` presets the choices a
backend family needs (:data:`BRIDGE_PROFILES`).

Every name is imported on first use.
"""

import typing as _typing

from aiostream_synth._lazy import public_module as _public_module

if _typing.TYPE_CHECKING:
    from aiostream_synth._dialects.bridges.anthropic_chat.request import (
        anthropic_to_chat_request as anthropic_to_chat_request,
    )
    from aiostream_synth._dialects.bridges.anthropic_chat.result import (
        chat_to_anthropic_result as chat_to_anthropic_result,
    )
    from aiostream_synth._dialects.bridges.chat_anthropic.request import (
        chat_to_anthropic_request as chat_to_anthropic_request,
    )
    from aiostream_synth._dialects.bridges.chat_anthropic.result import (
        anthropic_to_chat_result as anthropic_to_chat_result,
    )
    from aiostream_synth._dialects.bridges.chat_responses.request import (
        chat_to_responses_request as chat_to_responses_request,
    )
    from aiostream_synth._dialects.bridges.chat_responses.result import (
        responses_to_chat_result as responses_to_chat_result,
    )
    from aiostream_synth._dialects.bridges.options import BRIDGE_PROFILES as BRIDGE_PROFILES
    from aiostream_synth._dialects.bridges.options import BridgeOptions as BridgeOptions
    from aiostream_synth._dialects.bridges.options import bridge_options as bridge_options
    from aiostream_synth._dialects.bridges.registry import bridge_for as bridge_for
    from aiostream_synth._dialects.bridges.responses_chat.context import (
        ResponsesChatContext as ResponsesChatContext,
    )
    from aiostream_synth._dialects.bridges.responses_chat.request import (
        responses_to_chat_request as responses_to_chat_request,
    )
    from aiostream_synth._dialects.bridges.responses_chat.result import (
        chat_to_responses_result as chat_to_responses_result,
    )
    from aiostream_synth._dialects.prepared import BridgedRequest as BridgedRequest

_EXPORTS: dict[str, str] = {
    "anthropic_to_chat_request": "aiostream_synth._dialects.bridges.anthropic_chat.request",
    "chat_to_anthropic_result": "aiostream_synth._dialects.bridges.anthropic_chat.result",
    "chat_to_anthropic_request": "aiostream_synth._dialects.bridges.chat_anthropic.request",
    "anthropic_to_chat_result": "aiostream_synth._dialects.bridges.chat_anthropic.result",
    "chat_to_responses_request": "aiostream_synth._dialects.bridges.chat_responses.request",
    "responses_to_chat_result": "aiostream_synth._dialects.bridges.chat_responses.result",
    "BRIDGE_PROFILES": "aiostream_synth._dialects.bridges.options",
    "BridgeOptions": "aiostream_synth._dialects.bridges.options",
    "bridge_options": "aiostream_synth._dialects.bridges.options",
    "bridge_for": "aiostream_synth._dialects.bridges.registry",
    "ResponsesChatContext": "aiostream_synth._dialects.bridges.responses_chat.context",
    "responses_to_chat_request": "aiostream_synth._dialects.bridges.responses_chat.request",
    "chat_to_responses_result": "aiostream_synth._dialects.bridges.responses_chat.result",
    "BridgedRequest": "aiostream_synth._dialects.prepared",
}

if not _typing.TYPE_CHECKING:  # hidden from type checkers: a misspelt name stays an error for them
    __getattr__, __dir__ = _public_module(__name__, globals(), _EXPORTS)

__all__ = [
    "BRIDGE_PROFILES",
    "BridgeOptions",
    "BridgedRequest",
    "ResponsesChatContext",
    "anthropic_to_chat_request",
    "anthropic_to_chat_result",
    "bridge_for",
    "bridge_options",
    "chat_to_anthropic_request",
    "chat_to_anthropic_result",
    "chat_to_responses_request",
    "chat_to_responses_result",
    "responses_to_chat_request",
    "responses_to_chat_result",
]
