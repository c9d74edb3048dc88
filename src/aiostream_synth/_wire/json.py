"""JSON on the wire: compact separators, UTF-8, no ASCII escaping (decision P2).

orjson is used because it is an order of magnitude faster than the standard library on these
payloads (benchmarks/COSTS.md) and its default output is exactly the wire form we want.
"""

from __future__ import annotations

import copy
import json
from typing import Any

import orjson

from aiostream_synth._wire.errors import InvalidResultError

__all__ = ["dumps", "dumps_exact", "json_copy", "loads"]

loads = orjson.loads


def dumps(value: Any, what: str = "result", path: tuple[str | int, ...] = ()) -> bytes:
    """Serialize ``value`` to compact UTF-8 JSON bytes; unserializable values are input errors."""
    try:
        return orjson.dumps(value)
    except orjson.JSONEncodeError as exc:
        raise InvalidResultError(what, path, f"not JSON-serializable ({exc})") from None


def dumps_exact(value: Any) -> bytes:
    """The same compact UTF-8 JSON as :func:`dumps`, in a bytes object of exactly its size, for
    bytes kept long (a request body held for a whole upstream call): orjson's result keeps the
    capacity it grew to (several times the JSON's size; benchmarks/COSTS.md).
    What orjson cannot encode (integers beyond 64 bits) goes through the standard library, in
    the same format."""
    try:
        return memoryview(orjson.dumps(value)).tobytes()
    except TypeError:  # orjson.JSONEncodeError is one
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()


def json_copy(value: Any) -> Any:
    """A deep copy of a JSON-shaped value, through orjson (an order of magnitude faster than
    :func:`copy.deepcopy` on request bodies); anything orjson cannot encode falls back to it."""
    try:
        return orjson.loads(orjson.dumps(value))
    except (orjson.JSONEncodeError, TypeError):
        return copy.deepcopy(value)
