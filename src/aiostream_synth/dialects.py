"""Dialects as plug-ins: what a fourth API implements, and how it is registered.

A dialect is a :class:`DialectSpec` (the API over HTTP: its paths, which requests stream, how a
request is prepared, its error shape, the headers of an upstream that speaks it, its options) and
a :class:`StreamDialect` (one stream's frames: keepalives, the answer, a terminal failure).
:func:`register_dialect` makes every app of this library serve it; ``aiostream-synth serve
--dialect MODULE:ATTR`` loads and registers one, and takes its options as ``serve`` options.
The engine and the HTTP layers know no dialect by name: the three built-in ones (Chat
Completions, Responses, Anthropic Messages) plug in the same way; their options are
:class:`ChatOptions`, :class:`ResponsesOptions` and :class:`AnthropicOptions`, given to
``StreamSettings(dialect_options={"responses": ResponsesOptions(keepalive="comment")})``.

Every name is imported on first use.
"""

import typing as _typing

from aiostream_synth._lazy import public_module as _public_module

if _typing.TYPE_CHECKING:
    from aiostream_synth._dialects.anthropic.options import AnthropicOptions as AnthropicOptions
    from aiostream_synth._dialects.base import DialectSettings as DialectSettings
    from aiostream_synth._dialects.base import DialectSpec as DialectSpec
    from aiostream_synth._dialects.base import EmbeddedAnswer as EmbeddedAnswer
    from aiostream_synth._dialects.base import EmbeddedCall as EmbeddedCall
    from aiostream_synth._dialects.base import EmbeddedReplies as EmbeddedReplies
    from aiostream_synth._dialects.base import EmbeddedTool as EmbeddedTool
    from aiostream_synth._dialects.base import ErrorResponse as ErrorResponse
    from aiostream_synth._dialects.base import LocalRoute as LocalRoute
    from aiostream_synth._dialects.base import Outcome as Outcome
    from aiostream_synth._dialects.base import RequestTarget as RequestTarget
    from aiostream_synth._dialects.base import StreamDialect as StreamDialect
    from aiostream_synth._dialects.base import StreamFrames as StreamFrames
    from aiostream_synth._dialects.chat.options import ChatOptions as ChatOptions
    from aiostream_synth._dialects.registry import register_dialect as register_dialect
    from aiostream_synth._dialects.registry import registered_dialects as registered_dialects
    from aiostream_synth._dialects.registry import unregister_dialect as unregister_dialect
    from aiostream_synth._dialects.responses.options import ResponsesOptions as ResponsesOptions

_EXPORTS: dict[str, str] = {
    "AnthropicOptions": "aiostream_synth._dialects.anthropic.options",
    "ChatOptions": "aiostream_synth._dialects.chat.options",
    "ResponsesOptions": "aiostream_synth._dialects.responses.options",
    "DialectSettings": "aiostream_synth._dialects.base",
    "DialectSpec": "aiostream_synth._dialects.base",
    "StreamFrames": "aiostream_synth._dialects.base",
    "EmbeddedAnswer": "aiostream_synth._dialects.base",
    "EmbeddedCall": "aiostream_synth._dialects.base",
    "EmbeddedReplies": "aiostream_synth._dialects.base",
    "EmbeddedTool": "aiostream_synth._dialects.base",
    "ErrorResponse": "aiostream_synth._dialects.base",
    "LocalRoute": "aiostream_synth._dialects.base",
    "Outcome": "aiostream_synth._dialects.base",
    "RequestTarget": "aiostream_synth._dialects.base",
    "StreamDialect": "aiostream_synth._dialects.base",
    "register_dialect": "aiostream_synth._dialects.registry",
    "registered_dialects": "aiostream_synth._dialects.registry",
    "unregister_dialect": "aiostream_synth._dialects.registry",
}

if not _typing.TYPE_CHECKING:  # hidden from type checkers: a misspelt name stays an error for them
    __getattr__, __dir__ = _public_module(__name__, globals(), _EXPORTS)

__all__ = [
    "AnthropicOptions",
    "ChatOptions",
    "DialectSettings",
    "DialectSpec",
    "EmbeddedAnswer",
    "EmbeddedCall",
    "EmbeddedReplies",
    "EmbeddedTool",
    "ErrorResponse",
    "LocalRoute",
    "Outcome",
    "RequestTarget",
    "ResponsesOptions",
    "StreamDialect",
    "StreamFrames",
    "register_dialect",
    "registered_dialects",
    "unregister_dialect",
]
