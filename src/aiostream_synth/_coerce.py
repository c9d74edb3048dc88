"""Turning caller-supplied results and bodies into plain JSON-shaped dicts, with clear errors."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ._errors import InvalidInputError

__all__ = ["as_json_dict", "expect_dict", "expect_list", "expect_str"]

Path = tuple[str | int, ...]


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


def expect_dict(
    value: Any, error: type[InvalidInputError], what: str, path: Path, *, allow_none: bool = False
) -> dict[str, Any] | None:
    if isinstance(value, dict) or (allow_none and value is None):
        return value
    raise error(what, path, f"expected an object, got {type(value).__name__}")


def expect_list(value: Any, error: type[InvalidInputError], what: str, path: Path) -> list[Any]:
    if isinstance(value, list):
        return value
    raise error(what, path, f"expected a list, got {type(value).__name__}")


def expect_str(
    value: Any, error: type[InvalidInputError], what: str, path: Path, *, allow_none: bool = True
) -> str | None:
    if isinstance(value, str) or (allow_none and value is None):
        return value
    raise error(what, path, f"expected a string, got {type(value).__name__}")
