"""A page of a list, as OpenAI's list endpoints give it (``object: "list"``, ``data``,
``first_id``, ``last_id``, ``has_more``), from the whole list and the request's query:
``limit`` (1 to 100, 20 by default), ``order`` (``asc`` or ``desc``), ``after`` and ``before``
(an item's id: the page starts after it, or ends before it, in that order). A wrong value is
a :class:`~aiostream_synth._wire.errors.RequestError` naming its parameter; a query key of
another kind (``include``) is ignored, as the items are listed as they were kept.
"""

from __future__ import annotations

import urllib.parse
from typing import Any, Literal

from aiostream_synth._wire.errors import RequestError

__all__ = ["DEFAULT_LIMIT", "MAX_LIMIT", "page"]

DEFAULT_LIMIT = 20
MAX_LIMIT = 100


def page(
    items: list[dict[str, Any]], query: bytes, default_order: Literal["asc", "desc"]
) -> dict[str, Any]:
    """The page of ``items`` (in ascending order, each with an ``id``) that ``query`` asks
    for."""
    params = urllib.parse.parse_qs(query.decode("latin-1"))

    def last(name: str) -> str | None:
        values = params.get(name)
        return values[-1] if values else None

    raw_limit = last("limit")
    try:
        limit = DEFAULT_LIMIT if raw_limit is None else int(raw_limit)
    except ValueError:
        limit = 0
    if not 1 <= limit <= MAX_LIMIT:
        raise RequestError(
            400,
            f"Invalid 'limit': {raw_limit!r}; expected an integer from 1 to {MAX_LIMIT}.",
            param="limit",
            code="invalid_value",
        )
    order = last("order") or default_order
    if order not in ("asc", "desc"):
        raise RequestError(
            400,
            f"Invalid 'order': {order!r}; expected 'asc' or 'desc'.",
            param="order",
            code="invalid_value",
        )
    ordered = items if order == "asc" else items[::-1]
    ids = [item["id"] for item in ordered]
    start, end = 0, len(ordered)
    for name in ("after", "before"):
        cursor = last(name)
        if cursor is None:
            continue
        if cursor not in ids:
            raise RequestError(
                400,
                f"Invalid '{name}': no item of this list has the id {cursor!r}.",
                param=name,
                code="invalid_value",
            )
        if name == "after":
            start = max(start, ids.index(cursor) + 1)
        else:
            end = min(end, ids.index(cursor))
    data = ordered[start:end][:limit] if start < end else []
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": start + len(data) < end,
    }
