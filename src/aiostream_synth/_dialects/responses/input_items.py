"""A stored response's input as ``GET /v1/responses/{id}/input_items`` lists it.

What is kept is the whole input the response was made from (a chained response's earlier
turns included, as upstream lists them), in the shapes the client sent. Listed, each item has
the shape upstream's list gives: a message has its ``type`` and its content as a list of
parts (a string's text an ``input_text`` part, an assistant's an ``output_text`` part); a
message, a function call or its output has a ``status``; and every item has an ``id``, its
own or one made from the response's id and the item's place, the same on every read (the
list's cursors are ids).
"""

from __future__ import annotations

from typing import Any

__all__ = ["listed_input_items"]

#: The prefix of a made id, by item type (upstream's prefixes); ``item`` for the rest.
_PREFIXES = {
    "message": "msg",
    "function_call": "fc",
    "function_call_output": "fco",
    "custom_tool_call": "ctc",
    "custom_tool_call_output": "ctco",
    "reasoning": "rs",
}

#: The item types whose listed shape has a ``status`` (``completed`` when the client sent none:
#: a replayed item often comes without it).
_WITH_STATUS = frozenset({"message", "function_call", "function_call_output"})


def listed_input_items(stored_input: list[Any], response_id: str) -> list[dict[str, Any]]:
    """See :meth:`aiostream_synth._dialects.base.Storage.listed_items`."""
    key = response_id.partition("_")[2] or response_id
    listed: list[dict[str, Any]] = []
    for place, item in enumerate(stored_input):
        if not isinstance(item, dict):  # (validated input holds none)
            continue
        kind = item.get("type")
        if kind is None and "role" in item:
            kind = "message"  # an easy input message
        shown = dict(item) if kind is None else {**item, "type": kind}
        if kind in _WITH_STATUS:
            shown.setdefault("status", "completed")
        if kind == "message":
            content = shown.get("content")
            if isinstance(content, str):
                shown["content"] = [_text_part(content, shown.get("role"))]
        if not isinstance(shown.get("id"), str) or not shown["id"]:
            prefix = _PREFIXES.get(kind, "item") if isinstance(kind, str) else "item"
            shown["id"] = f"{prefix}_{key}{place:04d}"
        listed.append(shown)
    return listed


def _text_part(text: str, role: object) -> dict[str, Any]:
    if role == "assistant":
        return {"type": "output_text", "text": text, "annotations": []}
    return {"type": "input_text", "text": text}
