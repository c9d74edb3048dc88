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
import hmac
import json
import logging
import math
import time
import urllib.parse
from collections.abc import Awaitable
from dataclasses import dataclass, field
from typing import Any, Literal

from aiostream_synth._dialects.base import DialectSpec
from aiostream_synth._dialects.bridges.options import BridgeOptions, parse_bridge_options
from aiostream_synth._dialects.prepared import Dialect
from aiostream_synth._dialects.requests import (
    DEFAULT_MAX_BODY_BYTES,
    PreparedRequest,
    SanitizeOptions,
)
from aiostream_synth._engine.stream import OnDisconnect, SynthesizedStream
from aiostream_synth._params.removals import Removals
from aiostream_synth._proxy.embedded import EMBEDDED_MODEL, EmbeddedBackend
from aiostream_synth._proxy.http_defences import (
    BODY_TIMEOUT_S,
    HEAD_TIMEOUT_S,
    KEEP_ALIVE_S,
    WRITE_TIMEOUT_S,
)
from aiostream_synth._proxy.metrics import Metrics
from aiostream_synth._proxy.upstream import UpstreamBackend
from aiostream_synth._serving.asgi import (
    BackendCall,
    CompletionBackend,
    Message,
    Receive,
    Scope,
    Send,
    StreamSettings,
    SynthesizingApp,
    request_headers,
    send_answer,
    send_json,
)
from aiostream_synth._wire.errors import RequestError
from aiostream_synth._wire.failures import classify_failure, log_internal

__all__ = ["ProxyApp", "ProxyConfig"]


def _check_seconds(name: str, value: object, *, positive: bool, none: str = "") -> None:
    if (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (value > 0 if positive else value >= 0)
    ):
        return
    allowed = "a positive number of seconds" if positive else "a number of seconds, 0 or more"
    raise ValueError(f"{name} must be {allowed}{f' or {none}' if none else ''}, not {value!r}")


LOG = logging.getLogger("aiostream_synth.proxy")
#: The proxy's own GET endpoints (another method on them is a 405 naming GET).
_GET_ONLY = frozenset({"/healthz", "/metrics", "/v1/models", "/models"})


@dataclass(frozen=True, slots=True, kw_only=True)
class ProxyConfig:
    """Everything ``aiostream-synth serve`` can be told (each also from the environment)."""

    host: str = "127.0.0.1"
    port: int = 8000
    #: Base URL of an OpenAI-compatible server answering non-streaming; None = embedded model.
    upstream: str | None = None
    #: The API the upstream speaks; None: each client's own. Another one bridges (bridge.md).
    upstream_api: Dialect | None = None
    #: Bridge presets for a backend family (``deepseek``, ``vllm``, ...; bridge.md §1.7).
    bridge_profile: str = "generic"
    #: Bridge options on top of the profile, as a JSON object (bridge.md §0.3).
    bridge_config: str | None = None
    upstream_api_key: str | None = None
    forward_authorization: bool = False
    connect_timeout: float = 10.0
    #: Upstream read timeout, seconds. None: none of its own, the call is bounded by ``timeout``
    #: (a non-streaming upstream sends nothing until it is done, so a shorter read timeout
    #: would silently cut every turn below the deadline).
    read_timeout: float | None = None
    upstream_retries: int = 0
    #: Cap on concurrent upstream calls; None: no cap (one connection per open stream).
    upstream_max_connections: int | None = None
    #: Inbound bearer token; None accepts every request.
    api_key: str | None = None
    keepalive_s: float = 10.0
    responses_events: Literal["full", "minimal"] = "full"
    #: "comment" sends SSE comments instead of keepalive events (Codex's idle timer ignores them).
    responses_keepalive: Literal["events", "comment"] = "events"
    chat_keepalive: Literal["comment", "none"] = "comment"
    #: Total deadline per backend call, seconds; None for no deadline.
    timeout: float | None = 1800.0
    on_disconnect: OnDisconnect = "cancel"
    drop_custom_tools: bool = False
    drop_hosted_tools: bool = False
    hoist_carrier_custom_tools: bool = False
    #: Anthropic: an intermediate ``message_delta`` at least this often, seconds (None: pings only).
    anthropic_event_keepalive_s: float | None = 240.0
    anthropic_unknown_blocks: Literal["drop", "passthrough"] = "drop"
    anthropic_system_messages: Literal["translate", "forward", "reject"] = "translate"
    allow_unchecked_auto_mode: bool = False
    #: Which identical requests share one backend call (a retry after a drop, by default).
    coalesce: Literal["retries", "all", "off"] = "retries"
    coalesce_linger: float = 0.9
    coalesce_window: float = 10.0
    drain_timeout: float = 30.0
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    workers: int = 1
    #: Open client connections per worker at most (a 503 beyond); None: no cap.
    max_connections: int | None = None
    #: Seconds an idle keep-alive client connection stays open.
    http_keep_alive_s: float = KEEP_ALIVE_S
    #: lean only: seconds a request head gets to arrive whole.
    http_head_timeout_s: float = HEAD_TIMEOUT_S
    #: lean only: seconds a request body may stay silent while it is awaited.
    http_body_timeout_s: float = BODY_TIMEOUT_S
    #: lean and uvicorn: seconds a client may read nothing while its answer waits for it.
    http_write_timeout_s: float = WRITE_TIMEOUT_S
    #: The HTTP server: ``lean`` (_proxy/lean_http.py, the least memory per open stream),
    #: ``uvicorn``, ``hypercorn`` or ``granian``.
    server: Literal["lean", "uvicorn", "hypercorn", "granian"] = "lean"
    #: "auto": uvloop when installed, else asyncio.
    loop: Literal["auto", "asyncio", "uvloop", "trio"] = "auto"
    log_level: str = "info"
    #: The embedded model's name.
    model: str = EMBEDDED_MODEL

    def __post_init__(self) -> None:
        # An empty key would be a key nobody can be refused with: ``AIOSTREAM_SYNTH_API_KEY=``
        # (a variable set to nothing) must not turn authentication off without a word.
        if self.api_key is not None and not self.api_key.strip():
            raise ValueError(
                "api_key is empty: give the inbound bearer token, or leave it unset "
                "to accept every request"
            )
        for name in (
            "http_keep_alive_s",
            "http_head_timeout_s",
            "http_body_timeout_s",
            "http_write_timeout_s",
        ):
            value = getattr(self, name)
            if not 0 < value < float("inf"):
                raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")
        if self.max_connections is not None and self.max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, not {self.max_connections}")
        self._check_ranges()

    def _check_ranges(self) -> None:
        """Refuse values no server can run with (issue 37): each error names the option and
        the range it takes."""
        if not (isinstance(self.port, int) and 0 <= self.port <= 65535):
            raise ValueError(f"port must be from 0 (any free port) to 65535, not {self.port!r}")
        for name in ("keepalive_s", "connect_timeout"):
            _check_seconds(name, getattr(self, name), positive=True)
        for name in ("timeout", "read_timeout", "anthropic_event_keepalive_s"):
            value = getattr(self, name)
            if value is not None:
                _check_seconds(
                    name, value, positive=True, none="None (no limit; 0 on the command line)"
                )
        for name in ("coalesce_linger", "coalesce_window", "drain_timeout"):
            _check_seconds(name, getattr(self, name), positive=False)
        for name, least in (("upstream_retries", 0), ("max_body_bytes", 1), ("workers", 1)):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= least):
                raise ValueError(f"{name} must be an integer of at least {least}, not {value!r}")
        if self.upstream_max_connections is not None and self.upstream_max_connections < 1:
            raise ValueError(
                "upstream_max_connections must be at least 1 (or None: no cap), "
                f"not {self.upstream_max_connections}"
            )
        if self.upstream is not None:
            parsed = urllib.parse.urlsplit(self.upstream)
            if parsed.scheme not in ("http", "https") or not parsed.hostname:
                raise ValueError(
                    f"upstream must be an http:// or https:// URL with a host "
                    f"(http://127.0.0.1:8001/v1), not {self.upstream!r}"
                )

    def bridge_options(self) -> BridgeOptions:
        """The bridge options ``bridge_profile`` and ``bridge_config`` describe (``ValueError``
        naming what is wrong)."""
        overrides: Any = {}
        if self.bridge_config:
            try:
                overrides = json.loads(self.bridge_config)
            except json.JSONDecodeError as exc:
                raise ValueError(f"bridge config is not JSON: {exc}") from None
            if not isinstance(overrides, dict):
                raise ValueError("bridge config must be a JSON object of bridge options")
        return parse_bridge_options(self.bridge_profile, overrides)


@dataclass(slots=True)
class _Record:
    """What one request did, for its log line and the metrics; its :meth:`send` is the one the
    request's handler writes through."""

    spec: DialectSpec
    #: The server's ``send``.
    server_send: Send
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
            responses_events=config.responses_events,
            responses_keepalive=config.responses_keepalive,
            chat_keepalive=config.chat_keepalive,
            anthropic_event_keepalive_s=config.anthropic_event_keepalive_s,
            anthropic_unknown_blocks=config.anthropic_unknown_blocks,
            sanitize=SanitizeOptions(
                drop_custom_tools=config.drop_custom_tools,
                drop_hosted_tools=config.drop_hosted_tools,
                hoist_carrier_custom_tools=config.hoist_carrier_custom_tools,
                anthropic_system_messages=config.anthropic_system_messages,
                allow_unchecked_auto_mode=config.allow_unchecked_auto_mode,
            ),
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
        self.synth = SynthesizingApp(
            self._timed_backend, settings, drain_timeout=config.drain_timeout
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
            await self._answer(scope, receive, send)
            return
        # A dialect's POST, served and recorded in this frame: a waiting stream's task resumes
        # every coroutine frame above the engine on each tick.
        record = _Record(spec, send)
        token = _current.set(record)
        returned = False
        try:
            await self.synth.handle(spec, scope, receive, record.send)
            returned = True
        finally:
            # The handler returns with its response unfinished only when the client left (the
            # disconnect ends the writing); an exception or a cancellation is something else.
            record.client_gone = returned and not record.finished
            _current.reset(token)
            self._report(record, scope)

    def _dialect_post(self, scope: Scope) -> DialectSpec | None:
        """The dialect of an authorized ``POST`` to one of its paths (None for anything else)."""
        if scope["type"] != "http" or scope["method"] != "POST":
            return None
        spec = self.synth.routes.get(scope["path"].rstrip("/") or "/")
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
            body = self.metrics.render().encode()
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
            spec = self.synth.routes.get(path)
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
        await self.synth(scope, receive, send)

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

    def _report(self, record: _Record, scope: Scope) -> None:
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
            client = scope.get("client")
            LOG.log(
                level,
                "request dialect=%s path=%s client=%s forwarded_for=%s stream=%s outcome=%s "
                "status=%s duration_s=%.3f upstream_s=%s keepalives=%d bytes=%d removed=%s "
                "quietly_removed=%d%s",
                dialect,
                scope["path"],
                f"{client[0]}:{client[1]}" if client else "-",
                _forwarded_for(scope),
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
