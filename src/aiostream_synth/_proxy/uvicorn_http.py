"""The HTTP protocol ``serve`` runs uvicorn with: uvicorn's own (httptools), telling the app when
each request arrived and calling it back when its client leaves.

* **Arrival.** uvicorn starts a request's ASGI task once its headers are parsed, and the task
  runs when the loop gets to it: in a burst of thousands of connections, behind every request
  parsed before it (0.46 s at p99 for 5,000 one-line requests, measured in the server; longer
  with large bodies). The client is silent all that time too, so the stream's first keepalive
  is due one interval after the request arrived, not after the app got to it: the scope
  carries :data:`~aiostream_synth._serving.asgi.RECEIVED_AT`, the loop's time when the
  request's first bytes were parsed.
* **Disconnect.** ASGI tells an app that its client left only through a pending ``receive()``,
  so a streaming app keeps a task waiting there for the whole stream (about 1 KiB). The scope
  carries :data:`~aiostream_synth._serving.asgi.ON_DISCONNECT` instead: a function the app
  hands a callback, which ``connection_lost`` calls (soon after it is handed over when the
  connection is gone already). uvicorn notices a lost connection while it reads from it; it
  stops reading while a second request pipelined behind the first waits its turn, so such a
  client's leaving is noticed when reading resumes (a task in ``receive()`` resumed it).
  HTTP clients do not pipeline.

The app takes both out of the scope (:func:`~aiostream_synth._serving.asgi.received_at`,
:func:`~aiostream_synth._serving.asgi.disconnect_hook`); any other app ignores them. Without
httptools (uvicorn then speaks h11) ``serve`` runs uvicorn's default: the app's first look at a
request stands in for its arrival, and a task watches ``receive()``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

from aiostream_synth._serving.asgi import ON_DISCONNECT, RECEIVED_AT

__all__ = ["http_protocol"]


def http_protocol() -> type[asyncio.Protocol] | str:
    """The ``http`` setting for ``uvicorn.Config``: the protocol above, or ``"auto"`` (h11)
    without httptools."""
    try:
        from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    except ImportError:  # pragma: no cover - httptools comes with the proxy's extra
        return "auto"

    class ProxyHttpToolsProtocol(HttpToolsProtocol):
        """uvicorn's httptools protocol; each request's scope says when it arrived and takes
        a callback for its client leaving."""

        #: The current request's callback for the connection being lost (set by the app).
        _on_lost: Callable[[], object] | None = None

        def on_message_begin(self) -> None:
            super().on_message_begin()
            scope: dict[str, Any] = self.scope  # type: ignore[assignment]
            scope[RECEIVED_AT] = self.loop.time()
            scope[ON_DISCONNECT] = self._watch_disconnect

        def _watch_disconnect(self, callback: Callable[[], object] | None) -> None:
            if callback is not None and self.transport.is_closing():
                self.loop.call_soon(callback)  # gone already (never called from in here)
                return
            self._on_lost = callback

        def connection_lost(self, exc: Exception | None) -> None:
            super().connection_lost(exc)
            callback, self._on_lost = self._on_lost, None
            if callback is not None:
                callback()

    return ProxyHttpToolsProtocol
