"""The dialects' names and the types of their options: light to import (no SDK types), for the
command line."""

from __future__ import annotations

import importlib
from typing import Any

from typing_extensions import TypeAliasType

__all__ = ["BUILTIN_DIALECTS", "Dialect", "builtin_options"]

#: A dialect's name, as backends see it in ``BackendCall.dialect``: one of
#: :data:`BUILTIN_DIALECTS` or the name of a dialect registered with ``register_dialect``.
Dialect = TypeAliasType("Dialect", str)
#: The dialects this library brings: Chat Completions, Responses, Anthropic Messages.
BUILTIN_DIALECTS: tuple[str, ...] = ("chat", "responses", "anthropic")
#: Where each built-in dialect's options dataclass lives (a module that imports no SDK types).
_OPTIONS = {
    "chat": "aiostream_synth._dialects.chat.options:ChatOptions",
    "responses": "aiostream_synth._dialects.responses.options:ResponsesOptions",
    "anthropic": "aiostream_synth._dialects.anthropic.options:AnthropicOptions",
}


def builtin_options() -> dict[str, type[Any]]:
    """``{dialect name: its options dataclass}`` for the built-in dialects, without importing
    the dialects themselves (their specs load the SDK types; ``serve --help`` must not)."""
    found: dict[str, type[Any]] = {}
    for name, where in _OPTIONS.items():
        module, _, attribute = where.partition(":")
        found[name] = getattr(importlib.import_module(module), attribute)
    return found
