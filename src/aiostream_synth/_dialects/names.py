"""The dialects' names: light to import (no SDK types), for the command line's choices."""

from __future__ import annotations

from typing import Literal, get_args

__all__ = ["DIALECT_NAMES", "Dialect"]

#: The dialects' names, as backends see them in ``BackendCall.dialect``.
Dialect = Literal["chat", "responses", "anthropic"]
DIALECT_NAMES: tuple[Dialect, ...] = get_args(Dialect)
