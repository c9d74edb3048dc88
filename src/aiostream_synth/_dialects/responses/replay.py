"""Replay normalization: history items as clients replay them, made what the API types expect.

Clients serialize their own history with their own structs, and those omit fields the SDK's
input types require (decision P10). Codex, for one, sends every earlier reasoning item with
``"content": null`` (and some releases without ``id``), and people and several clients write
assistant history without ``status``. A reference-style sanitizer drops such items; a proxy must
forward them (decision P10). Before validation, on every Responses path:

* N1 an assistant ``message`` whose list content is output parts (``output_text``,
  ``refusal``: the SDK's output message) gets ``status: "completed"`` and a deterministic ``id``
  when missing (and ``type: "message"``); each of its ``output_text`` parts gets
  ``annotations: []`` when missing. Input parts (``input_text``...) make it the SDK's easy input
  message, which has neither key: it is left as it is;
* N2 a ``reasoning`` item loses a ``null`` ``content`` / ``encrypted_content``, and gets
  ``summary: []`` and a deterministic ``id`` when missing;
* N3 the ids are digests of the item's own content, so the same history gives the same upstream
  prompt on every turn (prefix caches keep hitting).

Only items that change are copied; the input is never mutated.
"""

from __future__ import annotations

import functools
import hashlib
import typing
from typing import Any

import orjson
import typing_extensions

__all__ = ["normalize_replay_item", "normalize_replay_items", "with_annotations"]

_ID_HEX = 32


def _digest_id(prefix: str, value: Any) -> str:
    """``prefix_`` + the first 32 hex digits of the SHA-1 of ``value`` as canonical JSON."""
    try:
        canonical = orjson.dumps(value, option=orjson.OPT_SORT_KEYS)
    except (orjson.JSONEncodeError, TypeError):
        canonical = repr(value).encode("utf-8", "replace")
    return f"{prefix}_{hashlib.sha1(canonical, usedforsecurity=False).hexdigest()[:_ID_HEX]}"


def with_annotations(parts: list[Any]) -> list[Any]:
    """``parts`` with ``annotations: []`` on output text that lacks it (the SDK's types require
    the key, in a replayed input item and in an output item alike); ``parts`` itself when no
    part lacks it."""
    out = parts
    for c, part in enumerate(parts):
        if (
            isinstance(part, dict)
            and part.get("type") == "output_text"
            and "annotations" not in part
        ):
            if out is parts:
                out = list(parts)
            out[c] = {**part, "annotations": []}
    return out


@functools.cache
def _output_part_types() -> frozenset[str]:
    """The part types of the installed openai SDK's output message (``output_text``...)."""
    from openai.types.responses.response_output_message_param import Content

    found: set[str] = set()
    for arm in typing.get_args(Content) or (Content,):
        hint = typing_extensions.get_type_hints(arm).get("type")
        hint = typing.get_args(hint)[0] if typing.get_origin(hint) is not typing.Literal else hint
        found.update(value for value in typing.get_args(hint) if isinstance(value, str))
    return frozenset(found)


def _assistant_message(item: dict[str, Any]) -> dict[str, Any]:
    content = item.get("content")
    if not isinstance(content, list):
        return item  # string content is an EasyInputMessage: nothing is missing
    kinds = {part.get("type") for part in content if isinstance(part, dict)}
    if not kinds <= _output_part_types():
        return item  # input parts (or unknown ones): an EasyInputMessage, or validation's call
    parts = with_annotations(content)
    if parts is content and "status" in item and "id" in item and "type" in item:
        return item
    fixed = dict(item)
    fixed["content"] = parts
    fixed.setdefault("type", "message")  # list content from the assistant: an output message
    fixed.setdefault("status", "completed")
    if "id" not in fixed:
        fixed["id"] = _digest_id("msg", content)
    return fixed


def _reasoning(item: dict[str, Any]) -> dict[str, Any]:
    nulls = [key for key in ("content", "encrypted_content") if key in item and item[key] is None]
    if not nulls and "summary" in item and "id" in item:
        return item
    fixed = {key: value for key, value in item.items() if key not in nulls}
    fixed.setdefault("summary", [])
    if "id" not in fixed:
        fixed["id"] = _digest_id("rs", fixed["summary"])
    return fixed


def normalize_replay_item(item: Any) -> Any:
    """``item`` itself, or a normalized copy when N1 or N2 applies (see the module docstring)."""
    if not isinstance(item, dict):
        return item
    kind = item.get("type")
    if kind == "reasoning":
        return _reasoning(item)
    if item.get("role") == "assistant" and kind in ("message", None):
        return _assistant_message(item)
    return item


def normalize_replay_items(items: list[Any]) -> list[Any]:
    """A new list with every item passed through :func:`normalize_replay_item`."""
    return [normalize_replay_item(item) for item in items]
