"""One request, whichever writer answers it: what the native ASGI writer (``asgi.py``) and the
sse-starlette adapter (``sse_starlette.py``) share.

Dialect-agnostic (decision P11): each route belongs to a dialect spec
(:mod:`aiostream_synth._dialects.registry`), which prepares the request, picks the stream's
output options and shapes every error. One request, in order (nothing is sent before step 4):

1. the body is read with a size limit (:func:`read_body`: 413);
2. it is parsed, sanitized and validated by its dialect (:func:`prepare`: a 400 in the
   dialect's error shape), or converted for an upstream of another dialect (a bridge);
   :func:`admit` is both steps, for every writer;
3. a non-streaming request calls the backend once and answers its JSON or its error status
   (:func:`run_backend_once`);
4. a streaming one opens the engine (:func:`open_stream`); the writer sends the headers with
   the first frame, so a backend failure before it is a real HTTP error, and after it the
   dialect's terminal failure frames end the stream.

The first frame is due one keepalive interval after the request *arrived*: a server that knows
when it began receiving the request says so in the scope (:data:`RECEIVED_AT`; ``aiostream-synth
serve`` does), and a server that can call the app back when the client leaves offers that too
(:data:`ON_DISCONNECT`), so the writer needs no task waiting in ``receive()``.

What the request lost on the way (decision P10) is the ``x-aiostream-synth-dropped`` header
(:func:`dropped_header`) and one log record per request. A client's retry of a request whose
backend call is still running (or just failed) attaches to that call
(:mod:`aiostream_synth._engine.coalesce`) when a coalescer is given.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, TypeAlias

import anyio
import anyio.abc

from aiostream_synth._dialects.base import (
    DialectSpec,
    ErrorResponse,
    LocalRoute,
    RequestTarget,
    StreamDialect,
)
from aiostream_synth._dialects.bridges.options import BridgeOptions
from aiostream_synth._dialects.bridges.registry import bridge_for, prepare_bridged
from aiostream_synth._dialects.legacy_settings import (
    LEGACY_SETTINGS,
    UNSET,
    Unset,
    fold_legacy_settings,
)
from aiostream_synth._dialects.prepared import (
    DEFAULT_MAX_BODY_BYTES,
    Dialect,
    PreparedRequest,
    SanitizeOptions,
    parse_json_body,
)
from aiostream_synth._dialects.registry import route_table, spec_for
from aiostream_synth._engine.coalesce import CoalesceMode, Coalescer, coalesce_key
from aiostream_synth._engine.shutdown import ShutdownSignal
from aiostream_synth._engine.stream import OnDisconnect, StreamOutcome, SynthesizedStream
from aiostream_synth._engine.tasks import TaskStarter
from aiostream_synth._engine.tick import now
from aiostream_synth._params.removals import HEADER as DROPPED_HEADER
from aiostream_synth._params.removals import Removals
from aiostream_synth._serving.asgi_types import (
    Receive,
    Scope,
)
from aiostream_synth._wire.coerce import as_json_dict
from aiostream_synth._wire.errors import InvalidResultError, RequestError
from aiostream_synth._wire.failures import Failure, classify_failure, log_internal

__all__ = [
    "DEFAULT_ROUTES",
    "LOG",
    "ON_DISCONNECT",
    "RECEIVED_AT",
    "Admitted",
    "BackendCall",
    "ClientGone",
    "CompletionBackend",
    "DisconnectHook",
    "LoadBody",
    "Served",
    "StreamSettings",
    "admit",
    "answer_locally",
    "backend_call",
    "background_refused",
    "dialect_error",
    "disconnect_hook",
    "dropped_header",
    "open_stream",
    "prepare",
    "read_body",
    "received_at",
    "refuse_when_closing",
    "request_headers",
    "run_backend_once",
]

LOG = logging.getLogger("aiostream_synth.asgi")  # the serving layer's logger, as before the split


#: The scope key a server may set to when it began receiving the request: a float on the event
#: loop's clock (``loop.time()``, which is anyio's), taken before the app is called.
RECEIVED_AT = "aiostream_synth.received_at"


#: The scope key a server may set to a function ``watch(callback)``: the server calls
#: ``callback()`` once, from the event loop (never from within ``watch`` itself), when the
#: client disconnects before the response is complete — soon after the call if it already has;
#: ``watch(None)`` withdraws the callback. The app then needs no task waiting in ``receive()``.
ON_DISCONNECT = "aiostream_synth.on_disconnect"


#: What a server's :data:`ON_DISCONNECT` function is.
DisconnectHook: TypeAlias = Callable[[Callable[[], object] | None], object]


#: What a store served of a client's body: ``(path, reason)`` of each part, reported (P10).
Served: TypeAlias = Sequence[tuple[tuple[str | int, ...], str]]

#: The built-in dialects' routes (:class:`SynthesizingApp` answers every registered dialect's).
DEFAULT_ROUTES: Mapping[str, str] = {path: spec.name for path, spec in route_table().items()}


@dataclass(frozen=True, slots=True)
class BackendCall:
    """What a backend is asked: the dialect, the (sanitized) params, and the request headers."""

    dialect: Dialect
    params: dict[str, Any]
    #: Whether the client asked for a stream (the backend call itself is never streaming).
    stream: bool
    headers: Mapping[str, str] = field(default_factory=dict)


#: The non-streaming backend: one call, one complete result (dict or pydantic model).
CompletionBackend: TypeAlias = Callable[[BackendCall], Awaitable[Any]]


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamSettings:
    """Engine, output and serving options shared by both adapters (and every dialect)."""

    keepalive_interval: float = 10.0
    timeout: float | None = None
    on_disconnect: OnDisconnect = "cancel"
    finish_timeout: float = 60.0
    on_abandoned: Callable[[StreamOutcome], object] | None = None
    #: ``{dialect name: its options}``, each an instance of that dialect's ``options_type``
    #: (``{"responses": ResponsesOptions(keepalive="comment")}``, the classes in
    #: :mod:`aiostream_synth.dialects`); a dialect missing here streams with its defaults.
    dialect_options: Mapping[str, Any] = field(default_factory=dict)
    #: Deprecated (for one release): ``dialect_options`` holds each dialect's own options.
    responses_events: Literal["full", "minimal"] | Unset = UNSET
    #: Deprecated: ``ResponsesOptions.keepalive``.
    responses_keepalive: Literal["events", "comment"] | Unset = UNSET
    #: Deprecated: ``ChatOptions.keepalive``.
    chat_keepalive: Literal["comment", "none"] | Unset = UNSET
    #: Deprecated: ``ChatOptions.emit_reasoning_alias``.
    emit_reasoning_alias: bool | Unset = UNSET
    #: Deprecated: ``AnthropicOptions.event_keepalive_s``.
    anthropic_event_keepalive_s: float | Unset | None = UNSET
    #: Deprecated: ``AnthropicOptions.unknown_blocks``.
    anthropic_unknown_blocks: Literal["drop", "passthrough"] | Unset = UNSET
    #: Deprecated (for one release): the request-preparation switches are the Responses and
    #: Anthropic dialects' own options (``ResponsesOptions.drop_hosted_tools``...).
    sanitize: SanitizeOptions | Unset = UNSET
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    #: Called with every request that passed preparation (for logging and metrics).
    on_prepared: Callable[[PreparedRequest], object] | None = None
    #: Called with every engine stream as it is made, before its first frame (for logging and
    #: metrics: ``keepalive_frames_sent`` and the like, read when the response is over).
    on_stream: Callable[[SynthesizedStream], object] | None = None
    #: Log one record per request that lost something (WARNING, or DEBUG when all of it was
    #: benign). The proxy turns it off: its own request line carries the removals.
    log_removals: bool = True
    #: Which identical requests share one backend call (see :mod:`aiostream_synth._engine.coalesce`).
    coalesce: CoalesceMode = "retries"
    #: Seconds a call whose clients all left waits for a retry before it is cancelled.
    coalesce_linger: float = 0.9
    #: Seconds a failed or abandoned call's outcome stays available to a retry.
    coalesce_window: float = 10.0
    #: The dialect the backend speaks; None: each client's own. Otherwise requests in another
    #: dialect are converted for it and its answers converted back (a bridge).
    upstream_api: Dialect | None = None
    #: How the bridge converts (``bridge_options("deepseek")``...).
    bridge: BridgeOptions = field(default_factory=BridgeOptions)

    def __post_init__(self) -> None:
        legacy = {name: getattr(self, name) for name in (*LEGACY_SETTINGS, "sanitize")}
        if any(value is not UNSET for value in legacy.values()):
            folded = fold_legacy_settings(self.dialect_options, legacy)
            object.__setattr__(self, "dialect_options", folded)
        if self.upstream_api is not None:
            for spec in route_table().values():
                bridge_for(spec.name, self.upstream_api)  # ValueError for a pair with no bridge
        for name, options in self.dialect_options.items():
            kind = spec_for(name).options_type  # ValueError for a dialect nobody registered
            if kind is None or not isinstance(options, kind):
                wanted = "none (it has no options)" if kind is None else kind.__qualname__
                raise ValueError(
                    f"dialect_options[{name!r}] must be {wanted}, not {type(options).__qualname__}"
                )


def received_at(scope: Scope) -> float:
    """When the client began waiting (anyio's clock): the server's :data:`RECEIVED_AT` stamp,
    taken out of the scope (nothing else reads it, and a waiting stream's scope lives as long
    as the stream), else now."""
    stamp = scope.pop(RECEIVED_AT, None)
    return stamp if isinstance(stamp, float) and math.isfinite(stamp) else now()


def disconnect_hook(scope: Scope) -> DisconnectHook | None:
    """The server's :data:`ON_DISCONNECT` function, taken out of the scope; None without one."""
    hook = scope.pop(ON_DISCONNECT, None)
    return hook if callable(hook) else None


def dropped_header(removals: Removals) -> tuple[bytes, bytes]:
    """The ``x-aiostream-synth-dropped`` header: the paths removed from the request."""
    return (DROPPED_HEADER.encode(), removals.header_value().encode("ascii"))


def request_headers(scope: Scope) -> dict[str, str]:
    return {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", ())}


def dialect_error(spec: DialectSpec, exc: RequestError) -> ErrorResponse:
    """A refused request (:class:`RequestError`, OpenAI-shaped) in the dialect's own shape."""
    error = exc.body["error"]
    return spec.error_response(
        exc.status_code,
        error["message"],
        code=error.get("code"),
        param=error.get("param"),
        type=error.get("type"),
    )


def _backend_for(
    call: Callable[[], Awaitable[Any]],
    spec: DialectSpec,
    prepared: PreparedRequest,
    headers: Mapping[str, str],
    coalescer: Coalescer | None,
) -> Callable[[], Awaitable[Any]]:
    if coalescer is None:
        return call
    key = coalesce_key(spec.name, spec.coalesce_key(dict(prepared.body)), headers)
    return coalescer.backend(key, call, stream=prepared.stream)


class _CallOnce:
    """A backend call to make once, holding its :class:`BackendCall` only until it is made: from
    then on the backend alone decides what of the request a waiting stream keeps (the upstream
    backend keeps the bytes it sent, not the parsed params: several times the request's JSON
    size)."""

    __slots__ = ("_backend", "_call")

    def __init__(self, backend: CompletionBackend, call: BackendCall) -> None:
        self._backend = backend
        self._call: BackendCall | None = call

    def __call__(self) -> Awaitable[Any]:
        call, self._call = self._call, None
        if call is None:
            raise RuntimeError("this backend call has been made already")
        return self._backend(call)


def backend_call(
    backend: CompletionBackend, prepared: PreparedRequest, headers: Mapping[str, str]
) -> Callable[[], Awaitable[Any]]:
    """The one backend call a prepared request makes: in its own dialect, or (bridged) in the
    upstream's, with the answer converted back to the client's dialect."""
    bridged = prepared.bridged
    if bridged is None:
        return _CallOnce(
            backend, BackendCall(prepared.dialect, prepared.params, prepared.stream, headers)
        )
    convert, local_result = bridged.convert, bridged.local_result
    upstream_call = _CallOnce(
        backend, BackendCall(bridged.dialect, bridged.params, prepared.stream, headers)
    )

    async def call() -> Any:
        if local_result is not None:
            return local_result
        return convert(await upstream_call())

    return call


def open_stream(
    spec: DialectSpec,
    prepared: PreparedRequest,
    backend: CompletionBackend,
    settings: StreamSettings,
    headers: Mapping[str, str],
    task_group: TaskStarter | None = None,
    coalescer: Coalescer | None = None,
    waiting_since: float | None = None,
    dialect: StreamDialect | None = None,
) -> SynthesizedStream:
    """The engine for a prepared streaming request (not yet entered); ``task_group``, when
    given, hosts its backend task (see :class:`SynthesizedStream`); ``coalescer`` lets a retry
    of it share its backend call; ``waiting_since`` is when the request arrived
    (:func:`received_at`)."""
    call = backend_call(backend, prepared, headers)
    stream = SynthesizedStream(
        _backend_for(call, spec, prepared, headers, coalescer),
        dialect or spec.stream_dialect(prepared, settings),
        keepalive_interval=settings.keepalive_interval,
        timeout=settings.timeout,
        on_disconnect=settings.on_disconnect,
        finish_timeout=settings.finish_timeout,
        on_abandoned=settings.on_abandoned,
        task_group=task_group,
        waiting_since=waiting_since,
    )
    if settings.on_stream is not None:
        settings.on_stream(stream)
    return stream


async def run_backend_once(
    spec: DialectSpec,
    prepared: PreparedRequest,
    backend: CompletionBackend,
    settings: StreamSettings,
    headers: Mapping[str, str],
    coalescer: Coalescer | None = None,
) -> ErrorResponse:
    """A non-streaming request: the backend's answer (status 200) or its failure, in the
    dialect's shape (the status, body and headers to answer with)."""
    call = backend_call(backend, prepared, headers)
    try:
        with anyio.fail_after(settings.timeout):
            result = await _backend_for(call, spec, prepared, headers, coalescer)()
        return ErrorResponse(200, as_json_dict(result, InvalidResultError, "backend result"))
    except Exception as exc:  # any backend failure becomes an HTTP error
        failure = (
            Failure(502, "server_error", f"the backend returned an invalid result: {exc}")
            if isinstance(exc, InvalidResultError)
            else log_internal(classify_failure(exc), exc)
        )
        return spec.error_response(
            failure.status_code, failure.message, code=failure.code, type=failure.type
        )


class ClientGone(Exception):
    """The client disconnected before its request body was read."""


async def read_body(receive: Receive, limit: int = DEFAULT_MAX_BODY_BYTES) -> bytes:
    """The whole request body, or a 413 :class:`RequestError` past ``limit`` bytes."""
    chunks: list[bytes] = []
    size = 0
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            raise ClientGone
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            raise RequestError(
                413,
                f"The request body is larger than the limit of {limit} bytes.",
                code="request_too_large",
            )
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


def refuse_when_closing(shutdown: ShutdownSignal | None) -> None:
    """A 503 :class:`RequestError` once shutdown has begun: no new stream is opened."""
    if shutdown is not None and shutdown.closing:
        raise RequestError(
            503, "The server is shutting down.", type="server_error", code="server_shutting_down"
        )


def prepare(
    spec: DialectSpec,
    raw: bytes | dict[str, Any],
    settings: StreamSettings,
    served: Served = (),
    target: RequestTarget | None = None,
) -> PreparedRequest:
    """The dialect's request preparation (of the raw body, or of one already parsed) with the
    settings' sanitizer options, one log record for what it removed (``log_removals``; with
    what the proxy's store ``served`` of the client's body, benign), then the ``on_prepared``
    hook. ``target`` (where the request was sent) goes to the dialect's ``from_target``."""
    body = raw if isinstance(raw, dict) else parse_json_body(raw)
    if target is not None:
        body = spec.from_target(body, target)
    options = settings.dialect_options.get(spec.name)
    if settings.upstream_api is None:
        prepared = spec.prepare(body, options=options, params_model=None)
    else:
        prepared = prepare_bridged(
            spec, body, settings.upstream_api, dialect_options=options, options=settings.bridge
        )
    for path, reason in served:
        prepared.removals.add(path, reason, benign=True)
    if settings.log_removals:
        prepared.removals.log(LOG, f"{spec.name} request")
    if settings.on_prepared is not None:
        settings.on_prepared(prepared)
    return prepared


#: What a stored conversation's writer does between reading and preparing a request: the body
#: with what the store holds of it put in front, and what the store served of it.
LoadBody: TypeAlias = Callable[[bytes], Awaitable[tuple[dict[str, Any], Served]]]


@dataclass(slots=True)
class Admitted:
    """A request read and prepared (steps 1 and 2): what every writer's answer starts from."""

    prepared: PreparedRequest
    #: The response's own headers: the dialect's, and what the request lost on the way (P10).
    headers: dict[str, str]


async def admit(
    spec: DialectSpec,
    receive: Receive,
    settings: StreamSettings,
    target: RequestTarget,
    shutdown: ShutdownSignal | None = None,
    load: LoadBody | None = None,
) -> Admitted | ErrorResponse | None:
    """Steps 1 and 2 for any writer: refused while shutting down (503), the body read within
    the limit (413), ``load``-ed when given, prepared by its dialect (400...). Returns the
    admitted request, or the error to answer in the dialect's shape (its headers included),
    or None when the client left before its body was in."""
    headers = dict(spec.response_headers())
    try:
        refuse_when_closing(shutdown)
        raw = await read_body(receive, settings.max_body_bytes)
        if load is None:
            prepared = prepare(spec, raw, settings, target=target)
        else:
            body, served = await load(raw)
            del raw
            prepared = prepare(spec, body, settings, served, target)
    except RequestError as exc:
        error = dialect_error(spec, exc)
        return ErrorResponse(error.status_code, error.body, {**headers, **error.headers})
    except ClientGone:
        return None
    name, value = dropped_header(prepared.removals)
    headers[name.decode()] = value.decode()
    return Admitted(prepared, headers)


def background_refused(spec: DialectSpec, headers: Mapping[str, str], why: str) -> ErrorResponse:
    """A ``background`` request no store can keep: a 400 naming the parameter (P10: never
    served as an ordinary request instead), ``why`` saying what to do."""
    error = spec.error_response(
        400,
        f"background mode needs a response store: {why}",
        param="background",
        code="unsupported_parameter",
    )
    return ErrorResponse(error.status_code, error.body, {**headers, **error.headers})


async def answer_locally(
    spec: DialectSpec, route: LocalRoute, receive: Receive, settings: StreamSettings
) -> ErrorResponse | None:
    """A dialect-local endpoint's answer (``count_tokens``): the body in, the dialect's JSON
    out (or its error); None when the client left before its body was in."""
    headers = dict(spec.response_headers())
    try:
        body = parse_json_body(await read_body(receive, settings.max_body_bytes))
    except RequestError as exc:
        error = dialect_error(spec, exc)
        return ErrorResponse(error.status_code, error.body, {**headers, **error.headers})
    except ClientGone:
        return None
    return ErrorResponse(200, route(body), headers)
