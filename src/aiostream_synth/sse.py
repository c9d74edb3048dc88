"""Synthesis: a complete result in, the SSE stream a streaming server would have sent out.

Pure functions, no I/O, and the frames they are made of. The reference-compatible ones
(``synthesize_chat_completion_sse``, ``synthesize_responses_sse``,
``synthesize_responses_failure_sse``, ``synthesize_responses_keepalive_sse``,
``is_responses_lifecycle_chunk``) keep NeMo Gym's names and signatures. Importing this module
loads no SDK: the usage counters the SDKs require are read from them on first use.

Every name is imported on first use.
"""

import typing as _typing

from aiostream_synth._lazy import public_module as _public_module

if _typing.TYPE_CHECKING:
    from aiostream_synth._dialects.anthropic.synthesis import (
        synthesize_anthropic_sse as synthesize_anthropic_sse,
    )
    from aiostream_synth._dialects.chat.synthesis import (
        CHAT_KEEPALIVE_FRAME as CHAT_KEEPALIVE_FRAME,
    )
    from aiostream_synth._dialects.chat.synthesis import chat_error_frame as chat_error_frame
    from aiostream_synth._dialects.chat.synthesis import (
        synthesize_chat_completion_sse as synthesize_chat_completion_sse,
    )
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
    from aiostream_synth._wire.sse import DONE_FRAME as DONE_FRAME
    from aiostream_synth._wire.sse import comment_frame as comment_frame
    from aiostream_synth._wire.sse import data_frame as data_frame
    from aiostream_synth._wire.sse import event_frame as event_frame

_EXPORTS: dict[str, str] = {
    "synthesize_anthropic_sse": "aiostream_synth._dialects.anthropic.synthesis",
    "CHAT_KEEPALIVE_FRAME": "aiostream_synth._dialects.chat.synthesis",
    "chat_error_frame": "aiostream_synth._dialects.chat.synthesis",
    "synthesize_chat_completion_sse": "aiostream_synth._dialects.chat.synthesis",
    "Fidelity": "aiostream_synth._dialects.responses.synthesis",
    "is_responses_lifecycle_chunk": "aiostream_synth._dialects.responses.synthesis",
    "synthesize_responses_failure_sse": "aiostream_synth._dialects.responses.synthesis",
    "synthesize_responses_keepalive_sse": "aiostream_synth._dialects.responses.synthesis",
    "synthesize_responses_sse": "aiostream_synth._dialects.responses.synthesis",
    "DONE_FRAME": "aiostream_synth._wire.sse",
    "comment_frame": "aiostream_synth._wire.sse",
    "data_frame": "aiostream_synth._wire.sse",
    "event_frame": "aiostream_synth._wire.sse",
}

if not _typing.TYPE_CHECKING:  # hidden from type checkers: a misspelt name stays an error for them
    __getattr__, __dir__ = _public_module(__name__, globals(), _EXPORTS)

__all__ = [
    "CHAT_KEEPALIVE_FRAME",
    "DONE_FRAME",
    "Fidelity",
    "chat_error_frame",
    "comment_frame",
    "data_frame",
    "event_frame",
    "is_responses_lifecycle_chunk",
    "synthesize_anthropic_sse",
    "synthesize_chat_completion_sse",
    "synthesize_responses_failure_sse",
    "synthesize_responses_keepalive_sse",
    "synthesize_responses_sse",
]
