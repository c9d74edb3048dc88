"""The proxy: a streaming front for any non-streaming OpenAI-compatible backend.

:class:`ProxyApp` is the ASGI application behind ``aiostream-synth serve``; it is importable and
testable without a server. Routes:

* ``POST /v1/chat/completions``, ``POST /v1/responses`` — the native ASGI path
  (:class:`SynthesizingApp`) in front of the upstream, or of the embedded model;
* ``GET /v1/models`` — the upstream's list, or the embedded model;
* ``GET /healthz``, ``GET /metrics`` (Prometheus text; process-local).

With ``api_key`` set, ``/v1/*`` requires ``Authorization: Bearer <api_key>`` or
``x-api-key: <api_key>`` (401 in OpenAI's shape otherwise). Every request logs one line on
``aiostream_synth.proxy``: dialect, path, the client's address and ``X-Forwarded-For``, streaming
or not, outcome (completed / incomplete / failed / cancelled / client_gone / rejected: refused
before any backend call), status, upstream latency (``-`` for a request that made no upstream
call of its own: refused, or served by the shared call of an identical request), keepalives,
bytes, and what the request lost on the way (at WARNING when that is more than client
bookkeeping and replay ids, decision P10).
"""

from __future__ import annotations

import contextvars
import dataclasses
import hmac
import json
import logging
import time
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any

from aiostream_synth._dialects.base import DialectSpec
from aiostream_synth._dialects.registry import registered_dialects
from aiostream_synth._dialects.requests import (
    PreparedRequest,
)
from aiostream_synth._engine.stream import SynthesizedStream
from aiostream_synth._params.removals import Removals
from aiostream_synth._proxy.config import ProxyConfig
from aiostream_synth._proxy.dialect_plugins import build_dialect_options, load_dialects
from aiostream_synth._proxy.embedded import EmbeddedBackend
from aiostream_synth._proxy.metrics import Metrics, StoreFigures
from aiostream_synth._proxy.upstream import UpstreamBackend
from aiostream_synth._serving.answers import send_answer, send_json
from aiostream_synth._serving.asgi import SynthesizingApp
from aiostream_synth._serving.asgi_types import Message, Receive, Scope, Send
from aiostream_synth._serving.pipeline import (
    BackendCall,
    CompletionBackend,
    StreamSettings,
    request_headers,
)
from aiostream_synth._store.base import ResponseStore
from aiostream_synth._store.memory import MemoryStore
from aiostream_synth._wire.errors import RequestError
from aiostream_synth._wire.failures import classify_failure, log_internal

__all__ = ["ProxyApp", "ProxyConfig"]


LOG = logging.getLogger("aiostream_synth.proxy")
#: The proxy's own GET endpoints (another method on them is a 405 naming GET).
_GET_ONLY = frozenset({"/healthz", "/metrics", "/v1/models", "/models"})


@dataclass(slots=True)
class _Record:
    """What one request did, for its log line and the metrics; its :meth:`send` is the one the
    request's handler writes through."""

    spec: DialectSpec
    #: The server's ``send``.
    server_send: Send
    #: The request's path, client address and ``X-Forwarded-For``, for the log line (taken
    #: from the scope at the start: a waiting stream does not hold its scope and headers).
    path: str = ""
    client: tuple[str, int] | None = None
    forwarded_for: str = "-"
    start: float = field(default_factory=time.monotonic)
    stream: bool = False
    status: int = 0
    outcome: str = ""
    #: The engine stream (streaming requests): its keepalive count is read at the end.
    engine: SynthesizedStream | None = None
    bytes_sent: int = 0
    #: The final write's body (its frames name the outcome; the engine's writer puts the
    #: terminal frames there). Earlier writes are not kept: a waiting stream would hold its
    #: last keepalive's bytes for nothing.
    last_frame: bytes = b""
    upstream_latency: float | None = None
    client_gone: bool = False
    finished: bool = False
    #: What preparation removed; set when the request passed it.
    removals: Removals | None = None

    @property
    def prepared(self) -> bool:
        """The request passed preparation: from then on it is served by a backend call (its
        own, or a coalesced one another request started), so an error status is a failure."""
        return self.removals is not None

    def send(self, message: Message) -> Awaitable[None]:
        """The server's ``send``, counting what goes out. A plain method handing back the
        server's own awaitable: no coroutine of its own per write, and nothing parsed (this
        runs on every keepalive tick; the engine counts its keepalive frames itself)."""
        if message["type"] == "http.response.body":
            body = message.get("body", b"")
            self.bytes_sent += len(body)
            if not message.get("more_body", False):
                self.last_frame = body
                self.finished = True
        elif message["type"] == "http.response.start":
            self.status = int(message["status"])
        return self.server_send(message)


_current: contextvars.ContextVar[_Record | None] = contextvars.ContextVar(
    "aiostream_synth_record", default=None
)


#: The shortest default lease (``--store-lease-s`` unset), seconds.
MIN_DEFAULT_LEASE_S = 3.0


def open_store(config: ProxyConfig) -> ResponseStore | None:
    """The store ``config.store`` names (not yet connected: the lifespan enters it)."""
    if config.store == "off":
        return None
    if config.store == "memory":
        return MemoryStore(max_bytes=config.store_max_bytes, ttl_s=config.store_ttl_s)
    from aiostream_synth._store.redis import RedisStore  # coredis, the [redis] extra

    lease_s = config.store_lease_s
    if lease_s is None:  # three keepalive intervals, never under a pause a loaded host may take
        lease_s = max(3 * config.keepalive_s, MIN_DEFAULT_LEASE_S)
    # What every process sharing the store must have alike: its rules of sharing calls and
    # keeping responses.
    fleet = {
        "coalesce": config.coalesce,
        "coalesce_linger": float(config.coalesce_linger),
        "coalesce_window": float(config.coalesce_window),
        "store_ttl_s": float(config.store_ttl_s),
        "store_lease_s": float(lease_s),
    }
    return RedisStore(config.store, ttl_s=config.store_ttl_s, lease_s=lease_s, fleet=fleet)


def _client(scope: Scope) -> str:
    return _address(scope.get("client"))


def _address(client: tuple[str, int] | None) -> str:
    return f"{client[0]}:{client[1]}" if client else "-"


def _forwarded_for(scope: Scope) -> str:
    """The request's ``X-Forwarded-For`` as sent (``-`` without one; repeated headers joined
    with commas), for the log line: the server does not rewrite the client address from it
    (see ``serve``), so both are logged."""
    headers: list[tuple[bytes, bytes]] = scope["headers"]
    values = [
        value.decode("latin-1") for name, value in headers if name.lower() == b"x-forwarded-for"
    ]
    return ", ".join(values) or "-"


#: Outcomes that are a failure to serve (logged at WARNING); "rejected" is the client's error.
_FAILED_OUTCOMES = frozenset({"failed", "cancelled"})
_REASON_LIMIT = 300


def _reason(record: _Record) -> str:
    """`` reason=...``: the error message the client was answered with (a refusal or a
    failure), from the final write's JSON or the last SSE frame; empty when there is none."""
    body = record.last_frame
    text = body.decode("utf-8", "replace").strip()
    if text.startswith(("data:", "event:")):
        text = text.rsplit("data:", 1)[-1].strip()
    try:
        payload = json.loads(text)
    except ValueError:
        return ""
    if not isinstance(payload, dict):
        return ""
    error = payload.get("error")
    if not isinstance(error, dict):
        response = payload.get("response")
        error = response.get("error") if isinstance(response, dict) else None
    message = error.get("message") if isinstance(error, dict) else None
    if not isinstance(message, str):
        return ""
    message = " ".join(message.split())
    if len(message) > _REASON_LIMIT:
        message = message[:_REASON_LIMIT] + "..."
    return f" reason={json.dumps(message, ensure_ascii=False)}"


def _outcome(record: _Record) -> str:
    if record.client_gone and not record.finished:
        return "client_gone"
    if not record.finished:
        return "cancelled"
    if not record.stream:
        return "completed" if record.status < 400 else ("failed" if record.prepared else "rejected")
    return record.spec.outcome(record.last_frame)


class ProxyApp:
    """The ASGI application of ``aiostream-synth serve`` (see the module docstring)."""

    def __init__(
        self, config: ProxyConfig | None = None, *, backend: CompletionBackend | None = None
    ) -> None:
        self.config = config = config or ProxyConfig()
        # The dialects --dialect names (the command line loaded them already; a config made in
        # code loads them here, and so does each worker process).
        load_dialects(config.dialects)
        self.upstream: UpstreamBackend | None = None
        if backend is None:
            if config.upstream:
                self.upstream = UpstreamBackend(
                    config.upstream,
                    api_key=config.upstream_api_key,
                    forward_authorization=config.forward_authorization,
                    connect_timeout=config.connect_timeout,
                    read_timeout=config.read_timeout,
                    max_retries=config.upstream_retries,
                    max_connections=config.upstream_max_connections,
                )
                backend = self.upstream
            else:
                backend = EmbeddedBackend(config.model)
        elif isinstance(backend, UpstreamBackend):
            self.upstream = backend
        self.backend: CompletionBackend = backend
        self.metrics = Metrics()
        settings = StreamSettings(
            keepalive_interval=config.keepalive_s,
            timeout=config.timeout,
            on_disconnect=config.on_disconnect,
            dialect_options=build_dialect_options(registered_dialects(), config.dialect_options),
            coalesce=config.coalesce,
            coalesce_linger=config.coalesce_linger,
            coalesce_window=config.coalesce_window,
            upstream_api=config.upstream_api,
            bridge=config.bridge_options(),
            max_body_bytes=config.max_body_bytes,
            on_prepared=self._prepared,
            on_stream=self._opened,
            log_removals=False,  # the request line below carries them
        )
        #: Where responses are kept (``--store``; None: background mode refused).
        self.store: ResponseStore | None = open_store(config)
        self.synth = SynthesizingApp(
            self._timed_backend, settings, drain_timeout=config.drain_timeout, store=self.store
        )
        self.shutdown = self.synth.shutdown

    # -- backend and request hooks -------------------------------------------------------------
    async def _timed_backend(self, call: BackendCall) -> Any:
        record = _current.get()
        start = time.monotonic()
        answer = self.backend(call)
        del call  # not kept across the wait: the backend decides what of the request it keeps
        try:
            return await answer
        finally:
            if record is not None:
                record.upstream_latency = time.monotonic() - start

    @staticmethod
    def _prepared(prepared: PreparedRequest) -> None:
        record = _current.get()
        if record is not None:
            record.stream = prepared.stream
            record.removals = prepared.removals

    @staticmethod
    def _opened(stream: SynthesizedStream) -> None:
        record = _current.get()
        if record is not None:
            record.engine = stream

    # -- ASGI ---------------------------------------------------------------------------------
    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        spec = self._dialect_post(scope)
        if spec is None:
            answering = self._answer(scope, receive, send)
            del scope  # a resume reader streams long: its frames keep none of the scope
            await answering
            return
        # A dialect's POST, served and recorded in this frame: a waiting stream's task resumes
        # every coroutine frame above the engine on each tick.
        record = _Record(spec, send, scope["path"], scope.get("client"), _forwarded_for(scope))
        token = _current.set(record)
        returned = False
        try:
            handling = self.synth.handle(spec, scope, receive, record.send)
            del scope  # the handler keeps what it needs of it, not this frame
            await handling
            returned = True
        finally:
            # The handler returns with its response unfinished only when the client left (the
            # disconnect ends the writing); an exception or a cancellation is something else.
            record.client_gone = returned and not record.finished
            _current.reset(token)
            self._report(record)

    def _dialect_post(self, scope: Scope) -> DialectSpec | None:
        """The dialect of an authorized ``POST`` to one of its paths (None for anything else)."""
        if scope["type"] != "http" or scope["method"] != "POST":
            return None
        spec = self.synth.routes.match(scope["path"].rstrip("/") or "/")
        if spec is None or not self._authorized(scope):
            return None
        return spec

    async def _answer(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Everything but an authorized dialect ``POST``: the lifespan, health, metrics, the
        401, the model list, and the app's own answers (404, 405, ``count_tokens``)."""
        if scope["type"] == "lifespan":
            await self.synth(scope, receive, send)
            if self.upstream is not None:
                await self.upstream.aclose()
            return
        if scope["type"] != "http":
            return
        status = 0

        async def noting_status(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        # What the log line needs of the scope: a resume reader's frames keep none of it.
        method, path = scope["method"], scope["path"]
        client, forwarded_for = _client(scope), _forwarded_for(scope)
        answering = self._answer_http(scope, receive, noting_status)
        del scope
        try:
            await answering
        finally:
            if status >= 400 or not status:  # refusals are logged; probes that succeed are not
                LOG.info(
                    "request method=%s path=%s client=%s forwarded_for=%s status=%s",
                    method,
                    path,
                    client,
                    forwarded_for,
                    status or "-",
                )

    async def _answer_http(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = scope["path"].rstrip("/") or "/"
        method = scope["method"]
        if path in _GET_ONLY and method != "GET":
            error = RequestError(405, "Use GET.", code="method_not_allowed")
            await send_json(send, 405, error.body, [(b"allow", b"GET")])
            return
        if method == "GET" and path == "/healthz":
            await send_json(
                send, 200, {"status": "shutting down" if self.shutdown.closing else "ok"}
            )
            return
        if method == "GET" and path == "/metrics":
            body = self.metrics.render(self.shutdown.open_streams, self._store_figures()).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [(b"content-type", b"text/plain; version=0.0.4; charset=utf-8")],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        if not self._authorized(scope):
            spec = self.synth.routes.match(path)
            if spec is None:
                error = RequestError(401, "Incorrect API key provided.", code="invalid_api_key")
                await send_json(send, 401, error.body)
                return
            # On a dialect's path, in its shape (Anthropic's, with request-id, for Claude Code).
            answer = spec.error_response(401, "Incorrect API key provided.", code="invalid_api_key")
            await send_answer(send, answer)
            return
        if method == "GET" and path in ("/v1/models", "/models"):
            await self._models(scope, send)
            return
        answering = self.synth(scope, receive, send)
        del scope  # the app's frame keeps what it needs of it (a resume reader streams long)
        await answering

    def _store_figures(self) -> StoreFigures | None:
        background = self.synth.background
        if background is None:
            return None
        fleet = self.synth.fleet
        failures = background.store_failures + (fleet.failures if fleet is not None else 0)
        figures = StoreFigures(background.generating, failures, background.abandoned)
        coalescer = self.synth.coalescer
        if coalescer is not None and coalescer.across_processes:
            figures = dataclasses.replace(figures, joined_elsewhere=coalescer.attached_elsewhere)
        store = background.store
        if isinstance(store, MemoryStore):
            return dataclasses.replace(
                figures,
                held=len(store),
                held_bytes=store.bytes,
                evicted=store.evicted,
                expired=store.expired,
            )
        return figures

    def _authorized(self, scope: Scope) -> bool:
        """``Authorization: Bearer <key>`` (OpenAI clients, ``ANTHROPIC_AUTH_TOKEN``) or
        ``x-api-key: <key>`` (the anthropic SDKs, ``ANTHROPIC_API_KEY``)."""
        if self.config.api_key is None:
            return True
        headers = request_headers(scope)
        expected = self.config.api_key.encode()
        bearer = headers.get("authorization", "").removeprefix("Bearer ").encode()
        key = headers.get("x-api-key", "").encode()
        return hmac.compare_digest(bearer, expected) or hmac.compare_digest(key, expected)

    async def _models(self, scope: Scope, send: Send) -> None:
        if self.upstream is None:
            await send_json(
                send,
                200,
                {
                    "object": "list",
                    "data": [
                        {
                            "id": self.config.model,
                            "object": "model",
                            "created": 0,
                            "owned_by": "aiostream-synth",
                        }
                    ],
                },
            )
            return
        try:
            listing = await self.upstream.models(request_headers(scope))
        except Exception as exc:  # upstream failure: its status, OpenAI's shape
            failure = log_internal(classify_failure(exc), exc)
            await send_json(send, failure.status_code, failure.body())
            return
        await send_json(send, 200, listing)

    def _report(self, record: _Record) -> None:
        """A finished dialect request: its metrics and its log line."""
        dialect = record.spec.name
        record.outcome = _outcome(record)
        keepalives = 0 if record.engine is None else record.engine.keepalive_frames_sent
        record.engine = None  # the stream is over: nothing holds it longer
        duration = time.monotonic() - record.start
        self.metrics.record(
            dialect,
            record.stream,
            record.outcome,
            keepalives=keepalives,
            bytes_sent=record.bytes_sent,
            duration=duration,
            upstream_latency=record.upstream_latency,
            dropped=[r.dropped for r in record.removals or () if r.dropped is not None],
        )
        removals = record.removals
        notable = removals.notable if removals is not None else []
        failed = record.outcome in _FAILED_OUTCOMES or record.status >= 500
        level = logging.WARNING if notable or failed else logging.INFO
        if LOG.isEnabledFor(level):
            LOG.log(
                level,
                "request dialect=%s path=%s client=%s forwarded_for=%s stream=%s outcome=%s "
                "status=%s duration_s=%.3f upstream_s=%s keepalives=%d bytes=%d removed=%s "
                "quietly_removed=%d%s",
                dialect,
                record.path,
                _address(record.client),
                record.forwarded_for,
                # Known once the request passed preparation; a refused one may not even be JSON.
                str(record.stream).lower() if record.prepared else "-",
                record.outcome,
                record.status,
                duration,
                "-" if record.upstream_latency is None else f"{record.upstream_latency:.3f}",
                keepalives,
                record.bytes_sent,
                ", ".join(f"{r.path} ({r.reason})" for r in notable) or "-",
                0 if removals is None else len(removals) - len(notable),
                _reason(record) if record.outcome == "rejected" or failed else "",
            )
