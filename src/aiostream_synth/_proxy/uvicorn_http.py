"""The HTTP protocol ``serve`` runs uvicorn with: uvicorn's own (httptools), telling the app when
each request arrived.

uvicorn starts a request's ASGI task once its headers are parsed, and the task runs when the
loop gets to it: in a burst of thousands of connections, behind every request parsed before it
(0.46 s at p99 for 5,000 one-line requests, measured in the server; longer with large bodies).
The client is silent all that time too, so the stream's first keepalive is due one interval
after the request arrived, not after the app got to it: this protocol stamps the scope with
:data:`~aiostream_synth._serving.asgi.RECEIVED_AT` (the loop's time) when a request's first
bytes are parsed, and the app takes the stamp out (see :func:`~aiostream_synth._serving.asgi.received_at`).

Without httptools (uvicorn then speaks h11) nothing is stamped and the app's first look at the
request stands in for the arrival.
"""

from __future__ import annotations

import asyncio
from typing import Any

from aiostream_synth._serving.asgi import RECEIVED_AT

__all__ = ["http_protocol"]


def http_protocol() -> type[asyncio.Protocol] | str:
    """The ``http`` setting for ``uvicorn.Config``: the stamping protocol, or ``"auto"`` (h11)
    without httptools."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # pragma: no cover - httptools comes with the proxy's extra
        return "auto"

    class StampingHttpToolsProtocol(HttpToolsProtocol):
        """uvicorn's httptools protocol; each request's scope says when it arrived."""

        def on_message_begin(self) -> None:
            super().on_message_begin()
            scope: dict[str, Any] = self.scope  # type: ignore[assignment]
            scope[RECEIVED_AT] = self.loop.time()

    return StampingHttpToolsProtocol
