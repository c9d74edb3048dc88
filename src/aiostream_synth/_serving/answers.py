"""JSON answers on ASGI, for every writer of the native path (the app, background responses,
the proxy): the response head and body in two messages, headers as ASGI's byte pairs."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from aiostream_synth._dialects.base import ErrorResponse
from aiostream_synth._serving.asgi_types import JSON_HEADERS, Send
from aiostream_synth._wire.json import dumps

__all__ = ["header_pairs", "send_answer", "send_json", "shared_header_pairs"]


def header_pairs(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    return [(k.encode("latin-1"), v.encode("latin-1")) for k, v in headers.items()]


#: Response header lists shared by the streams sending the same headers (most send identical
#: ones, and a waiting stream keeps its list for minutes): read only, never extended in place.
_SHARED_HEADERS: dict[tuple[tuple[str, str], ...], list[tuple[bytes, bytes]]] = {}
#: How many distinct header sets are shared before the table starts again.
_SHARED_HEADERS_KEPT = 256


def shared_header_pairs(headers: Mapping[str, str]) -> list[tuple[bytes, bytes]]:
    key = tuple(headers.items())
    pairs = _SHARED_HEADERS.get(key)
    if pairs is None:
        if len(_SHARED_HEADERS) >= _SHARED_HEADERS_KEPT:
            _SHARED_HEADERS.clear()
        pairs = _SHARED_HEADERS[key] = header_pairs(headers)
    return pairs


async def send_json(
    send: Send,
    status: int,
    body: bytes | dict[str, Any],
    headers: list[tuple[bytes, bytes]] | None = None,
) -> None:
    payload = body if isinstance(body, bytes) else dumps(body)
    all_headers = JSON_HEADERS if headers is None else [*JSON_HEADERS, *headers]
    await send({"type": "http.response.start", "status": status, "headers": all_headers})
    await send({"type": "http.response.body", "body": payload, "more_body": False})


async def send_answer(
    send: Send, answer: ErrorResponse, extra: Mapping[str, str] | None = None
) -> None:
    """A JSON answer in a dialect's shape, with ``extra`` headers under its own."""
    await send_json(
        send, answer.status_code, answer.body, header_pairs({**(extra or {}), **answer.headers})
    )
