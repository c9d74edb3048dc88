"""Stored responses that later requests continue (decision P12): ``previous_response_id`` on a
backend that keeps no state, and the storing of each finished response that may be continued.

A request naming a stored response gets that response's conversation (its whole input, its
chain's included, then its output) put in front of its own input before it is prepared, so a
bridge converts the full history and a stateless upstream sees it all. An id the store does
not hold (or holds for other credentials) is forwarded untouched to an upstream of the same
API, which may hold it; a bridged request naming one is a 400 naming ``previous_response_id``.
Each finished response whose request allows it (``store`` not false) is kept with that input,
so the next turn is one store read whatever the chain's length.
"""

from __future__ import annotations

import logging
from typing import Any

from aiostream_synth._dialects.base import Storage
from aiostream_synth._store.base import Creation, ResponseStore, StoreUnavailable
from aiostream_synth._wire.errors import RequestError

__all__ = ["continue_chain", "finish_kept", "keep_finished", "start_kept"]

LOG = logging.getLogger("aiostream_synth.background")


async def continue_chain(
    store: ResponseStore,
    storage: Storage,
    body: dict[str, Any],
    owner: str,
    *,
    bridged: bool,
) -> tuple[dict[str, Any], list[Any] | None, bool]:
    """``body`` with its chain put in front, the whole input this response is made from (None
    when part of it is known only to the upstream), and whether the store served the chain
    (the reference to it then gone from the body, to be reported: ``served_previous``)."""
    previous = storage.previous(body)
    if previous is None:
        return body, storage.input_items(body), False
    try:
        stored = await store.get(previous)
    except StoreUnavailable as exc:
        raise RequestError(
            503,
            f"The response store is unavailable, so previous response '{previous}' cannot be "
            f"read: {exc}",
            code="store_unavailable",
        ) from None
    if stored is None or stored.owner != owner or stored.input is None:
        if not bridged:
            return body, None, False  # the upstream speaks this API and may hold it
        raise RequestError(
            400,
            f"Previous response with id '{previous}' not found (it was never stored here, has "
            "expired or was deleted).",
            param="previous_response_id",
            code="previous_response_not_found",
        )
    if not storage.continuable(stored.object):
        status = stored.object.get("status", "unfinished")
        raise RequestError(
            400,
            f"Previous response with id '{previous}' cannot be continued: it is {status}.",
            param="previous_response_id",
            code="invalid_value",
        )
    history = storage.history(stored.input, stored.object)
    continued = storage.continued(body, history)
    return continued, storage.input_items(continued), True


async def keep_finished(
    store: ResponseStore,
    result: dict[str, Any],
    owner: str,
    input_items: list[Any] | None,
    listed_in: str | None = None,
) -> bool:
    """Store a finished non-streaming answer under the id it carries (one of ours), for
    retrieval and continuation (``listed_in``: the list of its owner's answers it joins); a
    store failure is logged (False), the answer already sent."""
    response_id = result.get("id")
    if not isinstance(response_id, str):
        return True
    try:
        await store.create(response_id, owner, result, input_items=input_items, listed_in=listed_in)
        await store.append(response_id, (), result, done=True)
    except (StoreUnavailable, OSError) as exc:
        return _write_failed(response_id, exc)
    return True


async def start_kept(
    store: ResponseStore,
    response_id: str,
    owner: str,
    obj: dict[str, Any],
    input_items: list[Any] | bytes | None,
) -> bool:
    """A streamed response's record, from its start (``obj``: as it stands then, with its
    whole input); False when the store failed (logged)."""
    try:
        await store.create(response_id, owner, obj, input_items=input_items)
    except (StoreUnavailable, OSError) as exc:
        return _write_failed(response_id, exc)
    return True


async def finish_kept(
    store: ResponseStore,
    response_id: str,
    obj_json: bytes | None,
    creation: Creation | None = None,
) -> bool:
    """A streamed response's end: its final object (serialized), or None when the stream
    ended without one (its client left), which leaves no record. ``creation``: that of a
    response kept only once it ended (nothing was created at its start). False when the
    store failed (logged)."""
    try:
        if obj_json is None:
            if creation is None:
                await store.delete(response_id)
        else:
            if creation is not None:
                await store.create(
                    response_id,
                    creation.owner,
                    obj_json,
                    input_items=creation.input_items,
                    listed_in=creation.listed_in,
                    listed_at=creation.listed_at,
                )
            await store.append(response_id, (), obj_json, done=True)
    except (StoreUnavailable, OSError) as exc:
        return _write_failed(response_id, exc)
    return True


def _write_failed(response_id: str, exc: BaseException) -> bool:
    LOG.warning(
        "store write failed for %s (it cannot be retrieved or continued): %s", response_id, exc
    )
    return False
