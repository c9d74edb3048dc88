"""JSON on the wire: compact separators, UTF-8, no ASCII escaping (decision P2).

orjson is used because it is 10-50x faster than the standard library on these payloads and its
default output is exactly the wire form we want.
"""

from __future__ import annotations

import copy
from typing import Any

import orjson

from aiostream_synth._wire.errors import InvalidResultError

__all__ = ["dumps", "json_copy", "loads"]

loads = orjson.loads


def dumps(value: Any, what: str = "result", path: tuple[str | int, ...] = ()) -> bytes:
    """Serialize ``value`` to compact UTF-8 JSON bytes; unserializable values are input errors."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError as exc:
        raise InvalidResultError(what, path, f"not JSON-serializable ({exc})") from None


def json_copy(value: Any) -> Any:
    """A deep copy of a JSON-shaped value, through orjson (an order of magnitude faster than
    :func:`copy.deepcopy` on request bodies); anything orjson cannot encode falls back to it."""
    try:
        return orjson.loads(orjson.dumps(value))
    except (orjson.JSONEncodeError, TypeError):
        return copy.deepcopy(value)
