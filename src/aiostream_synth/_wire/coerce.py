"""Turning caller-supplied results (dicts or pydantic models) into plain JSON-shaped dicts."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiostream_synth._wire.errors import InvalidInputError

__all__ = ["as_json_dict"]


def as_json_dict(value: Any, error: type[InvalidInputError], what: str) -> dict[str, Any]:
    """Return ``value`` as a plain dict: dicts as they are, pydantic models dumped to JSON mode.

    Models are dumped with ``exclude_unset`` so an openai SDK object parsed from the wire gives
    back the keys the wire had. Nothing is copied for a dict; callers never mutate it.
    """
    if isinstance(value, dict):
        return value
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        dumped = dump(mode="json", exclude_unset=True, by_alias=True)
        if isinstance(dumped, dict):
            return dumped
    if isinstance(value, Mapping):
        return dict(value)
    raise error(
        what, (), f"expected a JSON object (dict or pydantic model), got {type(value).__name__}"
    )
