"""Which requests take the streaming path (B-D1, D5)."""

from __future__ import annotations

from typing import Any, Literal

__all__ = ["Dialect", "wants_stream"]

Dialect = Literal["chat", "responses"]


def wants_stream(body: Any, dialect: Dialect) -> bool:
    """Whether ``body`` asks for a streamed answer in ``dialect``.

    Chat: only ``stream is True`` (``"true"`` or ``1`` stay on the strict path, where
    validation rejects them). Responses: any truthy ``stream``, as the reference dispatch does.
    """
    if not isinstance(body, dict):
        return False
    stream = body.get("stream")
    if dialect == "chat":
        return stream is True
    if dialect == "responses":
        return bool(stream)
    raise ValueError(f"unknown dialect {dialect!r}; expected 'chat' or 'responses'")
