"""The upstream backend: any server that answers non-streaming, in each call's API.

Each call goes to its dialect's ``upstream_path`` under the base URL given (``/v1`` included)
with the headers its dialect asks for (``upstream_headers``): a bearer token for Chat
Completions (``{base}/chat/completions``) and Responses (``{base}/responses``); for Messages
(``{base}/messages``) Anthropic's ``x-api-key`` and ``anthropic-version`` (and the client's
``anthropic-beta``, which names the features its body uses).

Called through the openai SDK's ``AsyncOpenAI`` at its JSON level (``post(path, body=...)``):
the body is sent exactly as prepared, so provider extension fields on the non-streaming path
and parameters newer than the SDK survive. No retries by default — a client's own retries
must not be multiplied — and no read timeout unless given: a non-streaming upstream sends
nothing until its answer is complete, so the caller's deadline is what bounds a call.

No cap on concurrent upstream connections by default: every open stream holds one upstream
call for minutes, so the SDK's own pool of 1000 connections would silently queue the 1001st
stream behind the others (its keepalives flowing, its call not even sent). ``max_connections``
sets a deliberate cap; calls beyond it wait for a free connection (as long as a read may take).

The calls are spread over *shards*, clients of at most :data:`SHARD_SIZE` concurrent calls each,
added as concurrency grows: the HTTP client's pool walks all its requests and connections on
every request event, so one pool holding 2,000 waiting calls spent 12 s of CPU assigning them
and stalled the event loop (keepalive gaps of 10 K, measured with ``bench_load.py``); 64 per
pool keeps each walk short. A client passed in (``http_client``) is used alone.
"""

from __future__ import annotations

import importlib
import inspect
from types import ModuleType
from typing import Any

import openai

from aiostream_synth._dialects.registry import spec_for
from aiostream_synth._dialects.routes import fill_template
from aiostream_synth._serving.pipeline import BackendCall
from aiostream_synth._wire.json import dumps_exact

__all__ = ["UpstreamBackend", "sdk_http_module"]


def sdk_http_module(client_class: type) -> ModuleType:
    """The HTTP library an SDK's default client is built on: ``httpx2`` for openai 3.x and
    anthropic 2.x, ``httpx`` for the releases before (its pool limits and TLS context must come
    from the same library, or the SDK refuses the client)."""
    for base in client_class.__mro__:
        root = base.__module__.partition(".")[0]
        if root in ("httpx", "httpx2"):
            return importlib.import_module(root)
    raise RuntimeError(f"{client_class.__qualname__} is built on neither httpx nor httpx2")


#: The openai SDK's HTTP library (see :func:`sdk_http_module`).
_http = sdk_http_module(openai.DefaultAsyncHttpxClient)
#: The ``post`` keyword that carries a body already serialized: ``content`` on openai 3.x; the
#: releases before take bytes as ``body`` and send them as they are (openai 2.x's request
#: builder posts a ``bytes`` body as the request content).
_BYTES_KEYWORD = (
    "content" if "content" in inspect.signature(openai.AsyncOpenAI.post).parameters else "body"
)

#: Idle connections kept for reuse between bursts, per shard.
_IDLE_CONNECTIONS = 16
#: Concurrent calls per shard (see the module docstring).
SHARD_SIZE = 64


class _Shard:
    """One client, how many calls it may carry at once and how many it carries now."""

    __slots__ = ("capacity", "client", "in_flight")

    def __init__(self, client: openai.AsyncOpenAI, capacity: int) -> None:
        self.client = client
        self.capacity = capacity
        self.in_flight = 0

    @property
    def room(self) -> int:
        return self.capacity - self.in_flight


class UpstreamBackend:
    """A :data:`CompletionBackend` calling ``base_url`` once per request."""

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        forward_authorization: bool = False,
        connect_timeout: float | None = 10.0,
        read_timeout: float | None = None,
        max_retries: int = 0,
        max_connections: int | None = None,
        http_client: Any = None,
    ) -> None:
        """``connect_timeout=None`` waits for a connection as long as it takes (the caller's
        deadline still bounds the call); ``max_connections`` applies to the client built here,
        not to a given ``http_client``."""
        if max_connections is not None and max_connections < 1:
            raise ValueError(f"max_connections must be at least 1 or None, not {max_connections}")
        self.forward_authorization = forward_authorization
        self.max_connections = max_connections
        self._options: dict[str, Any] = {
            "base_url": base_url,
            "api_key": api_key or "unused",
            "timeout": openai.Timeout(read_timeout, connect=connect_timeout),
            "max_retries": max_retries,
        }
        self._growable = http_client is None
        # One TLS context for every shard: building one loads the CA bundle (about 17 ms of
        # blocked event loop each time a shard is added in the middle of a burst).
        self._ssl: Any = _http.create_ssl_context() if http_client is None else None
        self._shards: list[_Shard] = []
        self._shard_limits: list[int] = []
        if max_connections is None:
            self._max_shards: int | None = None
        else:  # the cap split over shards of SHARD_SIZE (the last one holds the rest)
            self._max_shards = -(-max_connections // SHARD_SIZE)
            self._shard_limits = [
                min(SHARD_SIZE, max_connections - k * SHARD_SIZE) for k in range(self._max_shards)
            ]
        self._shards.append(_Shard(self._new_client(http_client), self._capacity()))
        #: The first shard's client (``models()`` and headers use it).
        self.client = self._shards[0].client

    def _new_client(self, http_client: Any = None) -> openai.AsyncOpenAI:
        if http_client is None:
            limit = self._shard_limits[len(self._shards)] if self._shard_limits else None
            limits = _http.Limits(
                max_connections=limit,
                max_keepalive_connections=min(_IDLE_CONNECTIONS, limit or _IDLE_CONNECTIONS),
            )
            http_client = openai.DefaultAsyncHttpxClient(limits=limits, verify=self._ssl)
        return openai.AsyncOpenAI(**self._options, http_client=http_client)

    def _capacity(self) -> int:
        """The next shard's share of the cap (SHARD_SIZE without one)."""
        return self._shard_limits[len(self._shards)] if self._shard_limits else SHARD_SIZE

    def _shard(self) -> _Shard:
        """The shard with the most room, or a new one when all are full (and the cap, if any,
        allows another); with every shard full, the least loaded one queues the call."""
        shard = max(self._shards, key=lambda s: s.room)
        if (
            shard.room <= 0
            and self._growable
            and (self._max_shards is None or len(self._shards) < self._max_shards)
        ):
            shard = _Shard(self._new_client(), self._capacity())
            self._shards.append(shard)
        return shard

    def _headers(self, call_headers: Any) -> dict[str, str]:
        if self.forward_authorization and "authorization" in call_headers:
            return {"Authorization": call_headers["authorization"]}
        return {}

    async def __call__(self, call: BackendCall) -> Any:
        spec = spec_for(call.dialect)
        # The dialect's headers (its credentials' shape, its version headers); None removes a
        # header the SDK would send (its bearer token, for an API that takes another).
        headers: dict[str, Any] = {
            name: openai.Omit() if value is None else value
            for name, value in spec.upstream_headers(
                call.headers,
                self.client.api_key,
                forward_authorization=self.forward_authorization,
            ).items()
        }
        path, params = spec.upstream_path, call.params
        if "{" in path:  # a template: parts of the request go in the path instead
            path, params = fill_template(path, params)
        # The SDK's own format, compact UTF-8. A waiting stream keeps its request as the bytes
        # sent, not as the parsed params (about 2.3x the JSON's size in Python objects; 66 KB
        # Codex turns, bench_load.py).
        sent: dict[str, Any] = {_BYTES_KEYWORD: dumps_exact(params)}
        del params
        del call
        shard = self._shard()
        shard.in_flight += 1
        try:
            return await shard.client.post(
                path, cast_to=object, options={"headers": headers}, **sent
            )
        finally:
            shard.in_flight -= 1

    async def models(self, headers: Any = None) -> Any:
        """The upstream's ``GET /models`` answer."""
        return await self.client.get(
            "/models", cast_to=object, options={"headers": self._headers(headers or {})}
        )

    async def aclose(self) -> None:
        for shard in self._shards:
            await shard.client.close()
