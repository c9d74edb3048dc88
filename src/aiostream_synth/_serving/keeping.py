"""A request's answer kept in the response store (decision P12), on the native path: a stored
conversation continued before preparation (:class:`Chain`), the answer stored under an id of
ours (:class:`Keep`: from its start, or once it ended, as its dialect keeps it), a
``background`` request started in the store (:func:`start_background`), and the paths of
stored answers (:func:`stored_route`). The store's own protocol is
:mod:`aiostream_synth._serving.background` and :mod:`aiostream_synth._serving.chains`."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Mapping
from dataclasses import replace
from typing import Any

from aiostream_synth._dialects.base import DialectSpec, ErrorResponse, Storage, StreamDialect
from aiostream_synth._dialects.prepared import PreparedRequest, parse_json_body
from aiostream_synth._engine.tasks import TaskStarter
from aiostream_synth._serving.answers import header_pairs, send_answer
from aiostream_synth._serving.asgi_types import Message, Receive, Send
from aiostream_synth._serving.background import BackgroundResponses, owner_of
from aiostream_synth._serving.chains import continue_chain, finish_kept, keep_finished, start_kept
from aiostream_synth._serving.pipeline import (
    CompletionBackend,
    DisconnectHook,
    Served,
    StreamSettings,
    backend_call,
    background_refused,
)
from aiostream_synth._store.base import Creation
from aiostream_synth._wire.json import dumps_exact

__all__ = ["Chain", "Keep", "start_background", "stored_route"]


class Keep:
    """A request whose answer is to be stored (decision P12): its body with its chain put in
    front (until prepared), the whole input (until stored), the id it is stored under, the
    stream's dialect and its final write (from which the dialect says what to keep)."""

    __slots__ = (
        "background",
        "body",
        "created",
        "dialect",
        "fields",
        "input_items",
        "input_json",
        "last_write",
        "owner",
        "response_id",
        "send",
        "served",
        "storage",
        "stored",
    )

    def __init__(
        self,
        background: BackgroundResponses,
        storage: Storage,
        body: dict[str, Any],
        input_items: list[Any] | None,
        owner: str,
        served: bool = False,
    ) -> None:
        self.background = background
        self.storage = storage
        self.body: dict[str, Any] | None = body
        #: What the store served of the body, reported with its preparation (P10).
        self.served = (storage.served_previous(),) if served else ()
        self.input_items = input_items
        self.owner = owner
        self.stored = storage.stores(body)
        #: What of the request the kept object carries besides the answer (its metadata).
        self.fields = storage.kept_fields(body) if self.stored else {}
        self.last_write: bytes | None = None
        self.response_id: str | None = None
        #: The stream's dialect (its final object is asked of it), and when the response was
        #: kept from its start (monotonic seconds; None: kept only once it ended, if it did).
        self.dialect: StreamDialect | None = None
        self.created: float | None = None
        #: Its input, serialized (a waiting stream holds no tree of its request's objects):
        #: written with its end when it was not kept from its start, or its record may have
        #: expired meanwhile (the store's bytes themselves when it keeps them).
        self.input_json: bytes | None = None
        self.send: Send | None = None  # the server's, once watched

    def take_body(self) -> dict[str, Any]:
        """The body, once (none is held while the stream waits)."""
        body, self.body = self.body, None
        if body is None:
            raise RuntimeError("the body of a kept request was taken already")
        return body

    def own_id(self, answer: ErrorResponse) -> ErrorResponse:
        """A non-streaming answer to keep, under an id of ours, which its client gets as
        well: a backend's ids may repeat (a local server may draw them from a few hundred),
        and a kept answer must never replace another one, another key's least of all."""
        if answer.status_code != 200 or "id" not in answer.body:
            return answer
        return replace(answer, body={**answer.body, "id": self.storage.new_id()})

    async def result(self, result: dict[str, Any]) -> None:
        """A non-streaming answer (its id ours, :meth:`own_id`): stored under that id."""
        background = self.background
        kept = {**result, **self.fields}
        listed_in = self.storage.answers_list
        if not await keep_finished(background.store, kept, self.owner, self.input_items, listed_in):
            background.store_failures += 1

    async def start(self, prepared: PreparedRequest, settings: StreamSettings) -> StreamDialect:
        """The stream's dialect, its id fixed; the response kept from now on when its dialect
        keeps it while it streams."""
        storage = self.storage
        response_id = self.response_id = storage.new_id()
        background = self.background
        record = storage.in_progress(response_id)
        if self.input_items is not None:
            self.input_json = dumps_exact(self.input_items)
        if record is not None:
            self.created = background.now_mark()  # (up to a second early: lapses sooner)
            if background.writes_behind:  # no round trip before the stream starts
                # Serialized now: a wave queues compact strings for the writer (see Creation).
                creation = Creation(self.owner, dumps_exact(record), self.input_json)
                background.keep_later(response_id, creation)
            elif not await start_kept(
                background.store, response_id, self.owner, record, self.input_json
            ):
                background.store_failures += 1
        self.input_items = None
        dialect = storage.stored_dialect(
            prepared, settings, response_id, background=False, fields=self.fields
        )
        self.dialect = dialect
        return dialect

    def watching(self, send: Send) -> Send:
        """``send``, keeping the final write (``more_body`` false: the terminal frames): this
        object itself, callable as a ``send`` (not a closure or a bound method: no object
        more per waiting stream)."""
        self.send = send
        return self

    def __call__(self, message: Message) -> Awaitable[None]:
        """The watched ``send``: hands back the server's own awaitable (no frame of this
        object in the chain every write of the stream resumes)."""
        if message["type"] == "http.response.body" and not message.get("more_body", False):
            self.last_write = message.get("body")
        send = self.send
        assert send is not None  # watching() set it
        return send(message)

    async def finish(self) -> None:
        """The stream is over: its final object stored, or, when it never got there (its
        client left), its record dropped."""
        response_id, dialect = self.response_id, self.dialect
        if response_id is None or dialect is None:
            return
        background = self.background
        # The object as the stream's end carries it (with self.fields): stored without a parse.
        obj = self.storage.final_object_json(dialect, self.last_write)
        self.dialect = None
        creation, created = None, self.created
        # A record kept from the start expires one TTL after its creation (a stream that is
        # not background writes nothing while it waits): after half of one, the end writes
        # it whole again, so that a long wait never loses the answer.
        lapsing = created is not None and time.monotonic() - created >= background.store.ttl_s / 2
        if (created is None or lapsing) and obj is not None:
            listed_in = self.storage.answers_list
            # Listed as of now: its creation may reach the store after later answers'.
            creation = Creation(
                self.owner, obj, self.input_json, listed_in=listed_in, listed_at=time.time()
            )
        if background.writes_behind:
            if obj is not None:
                background.finish_later(response_id, obj, creation)
            elif created is not None:
                await background.forget(response_id)
            return
        if obj is None and created is None:
            return  # nothing of it was kept
        if not await finish_kept(background.store, response_id, obj, creation):
            background.store_failures += 1


class Chain:
    """Continues a stored conversation between reading a request and preparing it (the
    pipeline's ``load``): the body with its chain put in front, and the request's
    :class:`Keep`, made then."""

    __slots__ = ("background", "headers", "keep", "settings", "spec", "storage")

    def __init__(
        self,
        spec: DialectSpec,
        storage: Storage,
        settings: StreamSettings,
        headers: Mapping[str, str],
        background: BackgroundResponses,
    ) -> None:
        self.spec = spec
        self.storage = storage
        self.settings = settings
        self.headers = headers
        self.background = background
        self.keep: Keep | None = None

    async def __call__(self, raw: bytes) -> tuple[dict[str, Any], Served]:
        owner = owner_of(self.headers)
        upstream_api = self.settings.upstream_api
        bridged = upstream_api is not None and upstream_api != self.spec.name
        parsed = parse_json_body(raw)
        previous = self.storage.previous(parsed)
        if previous is not None:  # this process's last writes of it first
            await self.background.until_written(previous)
        body, input_items, served = await continue_chain(
            self.background.store, self.storage, parsed, owner, bridged=bridged
        )
        keep = self.keep = Keep(self.background, self.storage, body, input_items, owner, served)
        return keep.take_body(), keep.served


def start_background(
    spec: DialectSpec,
    prepared: PreparedRequest,
    backend: CompletionBackend,
    settings: StreamSettings,
    headers: Mapping[str, str],
    task_group: TaskStarter | None,
    background: BackgroundResponses | None,
    receive: Receive,
    send: Send,
    extra: dict[str, str],
    input_items: list[Any] | None,
    hook: DisconnectHook | None = None,
    arrived: float | None = None,
) -> Awaitable[None]:
    """A background request (decision P12): refused without a store, else started there
    (``hook``: the server's disconnect callback, for its stream; ``arrived``: when the request
    arrived, which its keepalives count from). Await the result: the request's own coroutine,
    with no frame of this function in the chain every tick of the stream resumes."""
    storage = spec.storage
    if background is None or storage is None:
        return send_answer(send, background_refused(spec, extra, "this server has none."))
    call = backend_call(backend, prepared, headers)
    return background.create(
        spec,
        storage,
        prepared,
        call,
        settings,
        headers,
        task_group,
        receive,
        send,
        header_pairs(extra),
        input_items,
        hook,
        arrived=arrived,
    )


def stored_route(
    routes: Mapping[str, DialectSpec], path: str
) -> tuple[DialectSpec, Storage, str, str] | None:
    """``{dialect path}/{id}[/{action}]`` of a dialect that stores its answers: the dialect,
    its storage, the id and the action (``""``, or the segment after the id: ``"cancel"``,
    ``"input_items"``); None for any other path."""
    head, _, tail = path.rpartition("/")
    for prefix, action in ((head, tail), (path, "")):
        base, _, response_id = prefix.rpartition("/")
        spec = routes.get(base)
        if spec is not None and spec.storage is not None and response_id:
            return spec, spec.storage, response_id, action if prefix == head else ""
    return None
