"""A page of a list, as OpenAI's list endpoints give it (``object: "list"``, ``data``,
``first_id``, ``last_id``, ``has_more``), and the request's query that asks for it:
``limit`` (1 to 100, 20 by default), ``order`` (``asc`` or ``desc``), ``after`` and ``before``
(an item's id: the page starts after it, or ends before it, in that order). A wrong value is
a :class:`~aiostream_synth._wire.errors.RequestError` naming its parameter; a query key of
another kind (``include``) is ignored, as the items are listed as they were kept. A list held
whole (a stored answer's input) is paged by :func:`page`; a store's list is walked from its
cursor by the store instead (:meth:`~aiostream_synth._store.base.ResponseStore.listed`).
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from aiostream_synth._wire.errors import RequestError

__all__ = [
    "DEFAULT_LIMIT",
    "MAX_LIMIT",
    "PageQuery",
    "page",
    "page_of",
    "page_query",
    "unknown_cursor",
]

DEFAULT_LIMIT = 20
MAX_LIMIT = 100


@dataclass(frozen=True, slots=True)
class PageQuery:
    """What a list request asks for, checked: at most ``limit`` items, in ``order``, those
    after the item ``after`` and before the item ``before`` in that order (ids, or None);
    ``params`` is the whole query, parsed (each key's values, for a list's own filters)."""

    limit: int
    order: Literal["asc", "desc"]
    after: str | None
    before: str | None
    params: Mapping[str, list[str]] = field(default_factory=dict, compare=False)


def page_query(query: bytes, default_order: Literal["asc", "desc"]) -> PageQuery:
    """The :class:`PageQuery` of a request's query string; a wrong value is a
    :class:`RequestError` naming its parameter."""
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
    direction: Literal["asc", "desc"] = "asc" if order == "asc" else "desc"
    return PageQuery(limit, direction, last("after"), last("before"), params)


def unknown_cursor(name: str, cursor: str) -> RequestError:
    """The refusal of a cursor (``after``, ``before``) that names no item of the list."""
    return RequestError(
        400,
        f"Invalid '{name}': no item of this list has the id {cursor!r}.",
        param=name,
        code="invalid_value",
    )


def page_of(data: list[dict[str, Any]], has_more: bool) -> dict[str, Any]:
    """A list endpoint's answer: ``data``, its first and last ids, and whether more follow."""
    return {
        "object": "list",
        "data": data,
        "first_id": data[0]["id"] if data else None,
        "last_id": data[-1]["id"] if data else None,
        "has_more": has_more,
    }


def page(
    items: list[dict[str, Any]], query: bytes, default_order: Literal["asc", "desc"]
) -> dict[str, Any]:
    """The page of ``items`` (the whole list, in ascending order, each with an ``id``) that
    ``query`` asks for."""
    asked = page_query(query, default_order)
    ordered = items if asked.order == "asc" else items[::-1]
    ids = [item["id"] for item in ordered]
    start, end = 0, len(ordered)
    for name, cursor in (("after", asked.after), ("before", asked.before)):
        if cursor is None:
            continue
        if cursor not in ids:
            raise unknown_cursor(name, cursor)
        if name == "after":
            start = max(start, ids.index(cursor) + 1)
        else:
            end = min(end, ids.index(cursor))
    data = ordered[start:end][: asked.limit] if start < end else []
    return page_of(data, start + len(data) < end)
