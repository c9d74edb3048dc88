"""The dialect interface (decision P11): what the engine and the HTTP layers ask of a dialect.

Three small protocols:

* :class:`StreamDialect` — a dialect's output options (``ChatDialect``, ``ResponsesDialect``,
  ``AnthropicDialect``), passed to the engine. :meth:`StreamDialect.open_stream` gives the
  :class:`StreamFrames` of one stream: its keepalive frames, its result frames, its failure
  frames after commit, and its error response before commit. The engine drives that and
  nothing else; it never learns which dialect it streams.
* :class:`Bridge` — a client dialect served from an upstream of another dialect: the request
  converted on the way in, the complete result converted back; the client dialect's own
  :class:`StreamFrames` then streams it, keepalives and failures unchanged.
* :class:`DialectSpec` — a dialect as an HTTP API (one instance per dialect, found through
  :mod:`aiostream_synth._dialects.registry`): its routes (literal or templates, and what the
  URL carries), which requests stream, request preparation, the output options for a prepared
  request, its error shape, how a finished response names its outcome, the headers of an
  upstream that speaks it, its own options, and how ``serve``'s embedded model answers it.

Adding a dialect adds a folder implementing :class:`DialectSpec` and :class:`StreamDialect`, and
one call of :func:`~aiostream_synth._dialects.registry.register_dialect`; its options (a
dataclass on the spec) become ``serve`` options, and ``serve --dialect MODULE:ATTR`` loads it.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol

import orjson

from aiostream_synth._wire.failures import Failure

if TYPE_CHECKING:
    from pydantic import BaseModel

    from aiostream_synth._dialects.bridges.options import BridgeOptions
    from aiostream_synth._dialects.prepared import BridgedRequest, PreparedRequest

__all__ = [
    "TOOL_KINDS",
    "Bridge",
    "DialectSettings",
    "DialectSpec",
    "EmbeddedAnswer",
    "EmbeddedCall",
    "EmbeddedReplies",
    "EmbeddedTool",
    "ErrorResponse",
    "LocalRoute",
    "Outcome",
    "RequestTarget",
    "Storage",
    "StoredEvent",
    "StreamDialect",
    "StreamFrames",
]

#: How a finished response ended, as the proxy's metrics name it.
Outcome = Literal["completed", "incomplete", "failed"]
#: A dialect-local endpoint: the parsed JSON body in, the JSON answer out (pure).
LocalRoute = Callable[[dict[str, Any]], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class ErrorResponse:
    """An HTTP error in a dialect's own shape: status, JSON body, extra headers."""

    status_code: int
    body: dict[str, Any]
    headers: Mapping[str, str] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class RequestTarget:
    """Where a request was sent: its path, what the route template's ``{name}`` parts matched,
    and its query string."""

    path: str
    params: Mapping[str, str] = field(default_factory=dict)
    #: The query string as the request carried it (``alt=sse``).
    query_string: str = ""

    @property
    def query(self) -> dict[str, str]:
        """The query, each name's last value; parsed when read (most dialects never read it,
        so a request does not pay for parsing it)."""
        if not self.query_string:
            return {}
        return dict(urllib.parse.parse_qsl(self.query_string, keep_blank_values=True))


class StreamFrames(Protocol):
    """One stream's frames in one dialect (created per stream; it may keep state, such as the
    sequence numbers and response id of a Responses stream)."""

    @property
    def response_id(self) -> str | None:
        """The id this stream's events carry, once known (None where the dialect has none)."""
        ...

    def keepalive_frames(self, now: float) -> list[bytes]:
        """The frames of one keepalive tick at ``now`` (the engine's clock); ``[]`` sends
        nothing (and so does not commit the stream)."""
        ...

    def result_frames(self, result: Any) -> list[bytes]:
        """The whole stream (or its continuation) for the complete result; raises
        :class:`~aiostream_synth.errors.InvalidResultError` before producing any on a bad result."""
        ...

    def failure_frames(self, failure: Failure) -> list[bytes]:
        """The terminal failure frames once the stream is committed."""
        ...

    def error_response(self, failure: Failure) -> ErrorResponse:
        """The HTTP error for a failure before the stream is committed."""
        ...


class StreamDialect(Protocol):
    """A dialect's output options, as the engine takes them."""

    def open_stream(self) -> StreamFrames:
        """A fresh :class:`StreamFrames` for one stream."""
        ...


class StoredFrames(StreamFrames, Protocol):
    """One stored stream's frames (:meth:`Storage.stored_dialect`): every event numbered.

    Once its opening events are out, each of its keepalive ticks is exactly one keepalive,
    the one its template renders (:attr:`StoredEvent.keepalive`) with the next number: a
    background stream's recorder renders those itself, as a replay does, and tells the
    frames where their numbering goes on (:meth:`skip_to`)."""

    def skip_to(self, sequence: int) -> None:
        """Number the next event ``sequence`` (not below the next number it would have
        given): the events before it were rendered from its keepalive template elsewhere."""
        ...

    def run_start(self) -> int | None:
        """The number of the first of the frames it handed out last, when it knows those
        frames are a run a recorder need not read one by one: one event each, numbered on
        from it, none a keepalive, none but the last carrying the response or ending it.
        None when each frame is to be read (:meth:`Storage.event`)."""
        ...


class StoredDialect(Protocol):
    """A stored stream's output options (:meth:`Storage.stored_dialect`)."""

    def open_stream(self) -> StoredFrames:
        """A fresh :class:`StoredFrames` for one stream."""
        ...


class DialectSettings(Protocol):
    """What a :class:`DialectSpec` reads when it opens a stream (the serving layer's
    ``StreamSettings`` provides it)."""

    @property
    def dialect_options(self) -> Mapping[str, Any]:
        """``{dialect name: its options}`` (instances of each spec's ``options_type``); a
        dialect missing here uses its options' defaults."""
        ...


#: A tool's ``type`` -> the kind of call the embedded model makes of it.
TOOL_KINDS: Mapping[Any, Literal["function", "custom"]] = {
    "function": "function",
    "custom": "custom",
}


@dataclass(frozen=True, slots=True)
class EmbeddedTool:
    """A tool of a request, as the embedded model looks one up."""

    #: Its name as the request gives it (a flattened ``<namespace>__<name>`` included).
    name: str
    #: ``function`` (JSON arguments) or ``custom`` (free-form text input).
    kind: Literal["function", "custom"]
    #: Its arguments' JSON schema (a function tool's), or None.
    schema: Any = None


@dataclass(frozen=True, slots=True)
class EmbeddedCall:
    """A tool call the embedded model makes."""

    #: An id part unique to the answer (``call_<key>``...).
    id: str
    name: str
    kind: Literal["function", "custom"]
    #: A function call's arguments (JSON text), or a custom call's input text.
    arguments: str


@dataclass(frozen=True, slots=True, kw_only=True)
class EmbeddedAnswer:
    """What the embedded model answers, for a dialect to shape as its complete result."""

    model: str
    #: An id part unique to the answer (``chatcmpl-<key>``, ``msg_<key>``...).
    key: str
    #: The answer's text (when it makes no tool call).
    text: str
    #: The user's text, directives removed (what ``[reasoning]`` repeats).
    prompt: str
    #: The tool call to make instead of a text answer, if any.
    call: EmbeddedCall | None = None
    #: ``[reasoning]``: add a reasoning item / content / block saying the prompt.
    reasoning: bool = False
    #: ``[incomplete]``: the answer stops at the output limit.
    incomplete: bool = False
    #: ``[usage-nulls]``: the usage detail counters are null.
    usage_nulls: bool = False
    prompt_tokens: int = 1
    completion_tokens: int = 1


class EmbeddedReplies(Protocol):
    """How ``serve``'s embedded model (an echo of the last user message, scripted by bracketed
    directives) reads a request in a dialect and shapes its answer. Everything is read before
    the model's simulated wait, and the answer is made from what was read (no request is held
    while a turn waits)."""

    def prompt(self, params: dict[str, Any]) -> tuple[str, str | None]:
        """The text of the request's last user message (directives included), and the output
        of the tool call the request ends with, if it ends with one (None otherwise)."""
        ...

    def tools(self, params: dict[str, Any]) -> list[EmbeddedTool]:
        """The request's tools the embedded model can call."""
        ...

    def reply(self, answer: EmbeddedAnswer) -> Any:
        """The complete result of ``answer``, as an upstream of this dialect returns it."""
        ...


@dataclass(slots=True)
class StoredEvent:
    """What a store needs to know of one event frame (decision P12). Made for every event a
    background response records: not frozen, which would make each construction several
    times dearer (benchmarks/COSTS.md)."""

    #: Its ``sequence_number``.
    sequence: int
    #: It ends the response (no event follows it).
    terminal: bool
    #: The response object it carries, serialized (JSON), when it carries one: kept and
    #: stored as it is, parsed only when read (:attr:`response`).
    response_json: bytes | None
    #: For a keepalive: the frame cut around its number (``prefix + b"%d" % n + suffix`` is
    #: the keepalive numbered ``n``), so that a store keeps one and renders the others.
    keepalive: tuple[bytes, bytes] | None = None

    @property
    def response(self) -> dict[str, Any] | None:
        """The response object it carries, when it carries one."""
        return None if self.response_json is None else orjson.loads(self.response_json)


class Storage(Protocol):
    """A dialect whose answers can be stored (retrieval, deletion; with background mode also
    resume and cancel): what serving needs of it, the store and the engine knowing no
    dialect."""

    @property
    def noun(self) -> str:
        """What its stored answers are called in the refusals about them (``"Response"``)."""
        ...

    @property
    def has_background(self) -> bool:
        """Whether it has background mode: ``POST {path}/{id}/cancel`` and a retrieval that
        replays events (``?stream=true``). Without it, a stored answer is only retrieved whole
        and deleted, and the methods about events, cancels and abandoned responses below are
        never called."""
        ...

    def new_id(self) -> str:
        """A fresh id for a stored response."""
        ...

    def in_progress(self, response_id: str) -> dict[str, Any] | None:
        """The object a streamed answer is kept as while it streams (retrievable then); None
        to keep it only once it has ended."""
        ...

    def final_object_json(self, dialect: StreamDialect, last_write: bytes | None) -> bytes | None:
        """The object to keep of a streamed answer once its stream is over, serialized:
        ``dialect`` is what :meth:`stored_dialect` gave for it, ``last_write`` the stream's
        final write (its terminal frames). None when the stream did not end with its answer
        (its client left, the backend failed): nothing is kept then."""
        ...

    def deleted(self, response_id: str) -> dict[str, Any]:
        """The answer to ``DELETE {path}/{id}``."""
        ...

    def holds(self, obj: dict[str, Any]) -> bool:
        """Whether a stored object is one of this dialect's (one store keeps every
        dialect's answers: another's is not found on this dialect's paths)."""
        ...

    @property
    def items_action(self) -> str:
        """The path segment after ``{path}/{id}/`` that lists what a stored answer was made
        from, a page at a time (``"input_items"``)."""
        ...

    @property
    def items_order(self) -> Literal["asc", "desc"]:
        """That list's order when the request names none."""
        ...

    def listed_items(self, stored_input: list[Any], response_id: str) -> list[dict[str, Any]]:
        """A stored answer's kept input as that list's items, in the conversation's order,
        each with an ``id`` (one made from ``response_id`` and its place where it had none,
        the same on every read: the pages' cursors are ids)."""
        ...

    @property
    def answers_list(self) -> str | None:
        """The name under which a key's stored answers are listed (``GET {path}``, oldest
        first unless the request says otherwise); None when the API lists none."""
        ...

    def kept_fields(self, body: dict[str, Any]) -> dict[str, Any]:
        """What of the request the stored object carries besides the answer (its metadata:
        what a listing filters by, and an update changes)."""
        ...

    @property
    def updatable(self) -> bool:
        """Whether ``POST {path}/{id}`` updates a stored answer (:meth:`updated`)."""
        ...

    def updated(self, obj: dict[str, Any], body: object) -> dict[str, Any]:
        """A stored answer's object as an update's ``body`` makes it; a wrong body is a
        :class:`~aiostream_synth._wire.errors.RequestError` naming what is wrong."""
        ...

    def matches(self, obj: dict[str, Any], filters: Mapping[str, list[str]]) -> bool:
        """Whether a stored object is one a listing's query (``{key: values}``, the list's
        own keys among them) asks for; an unknown filter is ignored."""
        ...

    def stored_dialect(
        self,
        prepared: PreparedRequest,
        settings: DialectSettings,
        response_id: str,
        *,
        background: bool,
        fields: Mapping[str, Any] | None = None,
    ) -> StoredDialect:
        """The output options of a stored response: its id fixed (the store keeps it under
        that id from its start); for a background one also every event numbered and the stream
        opened by events at once (its object exists before the backend answers). ``fields``
        are the request's :meth:`kept_fields`: the object :meth:`final_object_json` gives
        carries them."""
        ...

    def event(self, frame: bytes) -> StoredEvent | None:
        """What ``frame`` (one SSE event as the dialect made it) is; None for a comment."""
        ...

    def failure_frames(
        self, prepared: PreparedRequest, response_id: str, failure: Failure, sequence_start: int
    ) -> list[bytes]:
        """The events of a background response whose backend failed before its first event."""
        ...

    def cancelled_frames(self, obj: dict[str, Any], sequence_start: int) -> list[bytes]:
        """The terminal event of a cancelled response (``obj``: the object as it stood)."""
        ...

    def cancelled(self, obj: dict[str, Any]) -> dict[str, Any]:
        """``obj`` with the cancelled status."""
        ...

    def abandoned(self, obj: dict[str, Any], message: str) -> dict[str, Any]:
        """``obj`` failed with ``message``: a response whose generating process stopped."""
        ...

    def abandoned_frames(self, obj: dict[str, Any], sequence_start: int) -> list[bytes]:
        """The terminal event of that response (``obj``: as :meth:`abandoned` made it)."""
        ...

    def stores(self, body: dict[str, Any]) -> bool:
        """Whether the answer to ``body`` is to be stored (retrievable, continuable)."""
        ...

    def previous(self, body: dict[str, Any]) -> str | None:
        """The id of the stored response ``body`` continues, if it names one."""
        ...

    def served_previous(self) -> tuple[tuple[str | int, ...], str]:
        """Where a body names the stored response it continues, and the reason reported for
        that field once the store served it (:meth:`continued` drops it; decision P10)."""
        ...

    def input_items(self, body: dict[str, Any]) -> list[Any]:
        """``body``'s own input, as a list of items."""
        ...

    def continued(self, body: dict[str, Any], history: list[Any]) -> dict[str, Any]:
        """``body`` with ``history`` in front of its input and no reference to it: what a
        stateless backend needs to continue the conversation."""
        ...

    def history(self, stored_input: list[Any], obj: dict[str, Any]) -> list[Any]:
        """The conversation a stored response ended: its input, then its output."""
        ...

    def continuable(self, obj: dict[str, Any]) -> bool:
        """Whether a stored response (as its object stands) can be continued."""
        ...

    def status(self, obj: dict[str, Any]) -> str:
        """A stored response's status as its object says it (for the log)."""
        ...


class DialectSpec(Protocol):
    """A dialect as an HTTP API (see the module docstring)."""

    @property
    def storage(self) -> Storage | None:
        """Its answers can be stored, retrieved, resumed and cancelled; None when they cannot."""
        ...

    @property
    def name(self) -> str:
        """The name backends see in :class:`~aiostream_synth.BackendCall` (``"chat"``...)."""
        ...

    @property
    def paths(self) -> tuple[str, ...]:
        """The paths it answers (``POST``), with and without ``/v1``; a ``{name}`` part matches
        one path segment (``/v1beta/models/{model}:generateContent``), given to
        :meth:`from_target`."""
        ...

    @property
    def upstream_path(self) -> str:
        """Where an upstream that speaks it is called, relative to its base URL. A ``{name}``
        part is filled with the request's ``name`` (a string, percent-encoded), which then
        leaves the body sent: ``/models/{model}:generateContent`` for an API that takes its
        model in the URL."""
        ...

    @property
    def options_type(self) -> type[Any] | None:
        """The dataclass of its own options (a field's ``metadata["help"]`` is its ``serve
        --help`` text; ``serve`` names it ``--<dialect>-<field>``), or None when it has none.
        Streams get an instance through :attr:`DialectSettings.dialect_options`."""
        ...

    @property
    def embedded(self) -> EmbeddedReplies | None:
        """How ``serve``'s embedded model answers in it; None: the embedded model answers it
        only if it knows the dialect itself (the built-in ones), else a 501."""
        ...

    def upstream_headers(
        self,
        client_headers: Mapping[str, str],
        api_key: str,
        *,
        forward_authorization: bool,
    ) -> Mapping[str, str | None]:
        """Headers of a call to an upstream that speaks it, on top of the HTTP client's own
        (which sends ``Authorization: Bearer <api_key>``); a None value removes one of those.
        ``client_headers`` (lower-case names) are the client's; ``forward_authorization``
        says to send its credentials instead of ``api_key``."""
        ...

    def wants_stream(self, body: Any) -> bool:
        """Whether ``body`` asks for a streamed answer."""
        ...

    def from_target(self, body: dict[str, Any], target: RequestTarget) -> dict[str, Any]:
        """The body as this dialect prepares it, given where the request was sent (its path's
        ``{name}`` parts, its query): an API that carries part of a request in its URL (the
        model, whether it streams) folds it in here; it may raise ``RequestError`` (a 404 for a
        path it does not serve). The built-in dialects return ``body`` as it is."""
        ...

    def prepare(
        self,
        body: dict[str, Any],
        *,
        options: Any,
        params_model: type[BaseModel] | None,
        bridged: bool = False,
    ) -> PreparedRequest:
        """A parsed body as the backend is to be called with it (raises ``RequestError``).

        ``options``: this dialect's options (an instance of :attr:`options_type`), or None for
        their defaults. ``bridged``: the request is then converted for an upstream of another
        dialect (a dialect may prepare more of it then: what a bridge can express)."""
        ...

    def stream_dialect(self, prepared: PreparedRequest, settings: DialectSettings) -> StreamDialect:
        """The output options for a prepared streaming request."""
        ...

    def error_response(
        self,
        status_code: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        type: str | None = None,
    ) -> ErrorResponse:
        """An error in this dialect's shape (a refused request, a failed call)."""
        ...

    def coalesce_key(self, body: dict[str, Any]) -> dict[str, Any]:
        """The part of a body that identifies one generation: without ``stream`` and the
        output-length limit (a client's retry may change them and still want the same answer)."""
        ...

    def warm_up(self) -> None:
        """Build now what the first request would otherwise build (a server calls it at start)."""
        ...

    def response_headers(self) -> Mapping[str, str]:
        """Headers every answer in this dialect carries (Anthropic's ``request-id``)."""
        ...

    def outcome(self, last: bytes) -> Outcome:
        """How a streamed response ended, from its last write (one or more frames)."""
        ...

    @property
    def local_routes(self) -> Mapping[str, LocalRoute]:
        """Paths this dialect answers itself, without a backend (``count_tokens``)."""
        ...


class Bridge(Protocol):
    """A client dialect on an upstream of another dialect (found through
    :mod:`aiostream_synth._dialects.bridges.registry`)."""

    @property
    def client(self) -> str:
        """The client's dialect name."""
        ...

    @property
    def upstream(self) -> str:
        """The upstream's dialect name."""
        ...

    def open(self, prepared: PreparedRequest, options: BridgeOptions) -> BridgedRequest:
        """Convert one prepared request (raises ``BridgeError``, a 400, for what the upstream
        cannot be asked without changing the request's meaning); records what it drops in
        ``prepared.removals``."""
        ...
