"""The store interface: a response object and its numbered event frames, per response id.

A background response's events are written here as they are made (``append``), with the
response object as it stands; a reader replays them from any sequence number, read with the
response in one step (``read``), and, on another replica, waits for more (``wait``).

Keepalive events are not written one by one: they differ only in their number, so a store
keeps one *template* (the frame cut around its number) and the number of the latest event,
and renders each missing number as a keepalive when it replays (:func:`with_keepalives`).
A waiting response then costs the store one small update per flush, not a write per tick.

An implementation may fail (:class:`StoreUnavailable`): serving then keeps the live stream
going and says resume is unavailable, never truncating what a connected client receives.

A store shared by several processes knows which one generates each response: the process
*holds* a lease in the store, renewed while it lives (:meth:`ResponseStore.hold`). A response
still in progress whose process holds no lease any more is *abandoned*
(:attr:`StoredResponse.abandoned`): nothing will end it, so the first reader to see it ends it
with a failure (:meth:`ResponseStore.end_abandoned`), once for every reader.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

from anyio import TASK_STATUS_IGNORED
from anyio.abc import TaskStatus

from aiostream_synth._wire.json import dumps_exact

__all__ = [
    "Creation",
    "KeepaliveTemplate",
    "ResponseStore",
    "StoreUnavailable",
    "StoredResponse",
    "UnknownCursor",
    "Write",
    "with_keepalives",
]

#: A keepalive frame cut around its sequence number: ``prefix + b"%d" % n + suffix`` is the
#: keepalive numbered ``n``.
KeepaliveTemplate = tuple[bytes, bytes]


class StoreUnavailable(Exception):
    """The store could not be reached or refused the operation."""


class UnknownCursor(LookupError):
    """A list's cursor (:meth:`ResponseStore.listed`) names no response kept in that list."""

    def __init__(self, param: str, cursor: str) -> None:
        super().__init__(f"{param}={cursor!r} names no response of the list")
        #: Which cursor it is (``after``, ``before``), and the id it named.
        self.param = param
        self.cursor = cursor


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """One stored response, as it stands."""

    #: Whose it is (a digest of the credentials that created it): nobody else sees it.
    owner: str
    #: The response object as its latest event carried it.
    object: dict[str, Any]
    #: Its terminal event is stored: no event will follow.
    done: bool
    #: The sequence number of its latest event, a keepalive's included (-1 before any).
    last_sequence: int
    #: The whole input it was made from (its chain's included), for a request continuing it;
    #: None when it was not kept.
    input: list[Any] | None = None
    #: Created in background mode: its events are kept (it can be streamed again).
    background: bool = False
    #: Still in progress, but the process generating it holds no lease in the store any more
    #: (it died, or lost the store for longer than the lease): nothing will end it.
    abandoned: bool = False


@dataclass(frozen=True, slots=True)
class Creation:
    """A response to start keeping before the events of the same write (see ``append_many``),
    under an id never used before, or again under its own when its record may have expired
    (a stream's end after a long wait: every field is written again, so a store may write
    them over what it still keeps rather than delete it first)."""

    owner: str
    #: Its object so far, or that object serialized as JSON.
    object: dict[str, Any] | bytes
    #: The input it is made from, or that input serialized as JSON (what a wave of requests
    #: queues for the writer is then a few compact strings each, not trees of objects freed
    #: between long-lived ones, whose holes the heap keeps).
    input_items: list[Any] | bytes | None = None
    background: bool = False
    #: The list of its owner's answers it joins (see :meth:`ResponseStore.listed`), if any,
    #: and its place there: when it was answered (``time.time()``; None: when it is kept).
    listed_in: str | None = None
    listed_at: float | None = None

    @classmethod
    def serialized(
        cls,
        owner: str,
        obj: dict[str, Any],
        input_items: list[Any] | None,
        *,
        background: bool = False,
    ) -> Creation:
        """A creation whose object and input are serialized now, each at its size: what a
        request queues for a store's writer."""
        items = None if input_items is None else dumps_exact(input_items)
        return cls(owner, dumps_exact(obj), items, background)


@dataclass(frozen=True, slots=True)
class Write:
    """One response's part of :meth:`ResponseStore.append_many`."""

    #: Start keeping it first (or None: it is kept already).
    creation: Creation | None
    #: Its new events other than keepalives, numbered, in order.
    events: Sequence[tuple[int, bytes]]
    #: Its new object, when an event carried one (or that object serialized as JSON).
    object: dict[str, Any] | bytes | None = None
    #: Its terminal event is among ``events``.
    done: bool = False
    #: Its keepalives' template, when it is new.
    keepalive: KeepaliveTemplate | None = None
    #: The number of its latest event, keepalives included (-1: ``events`` say it).
    last: int = -1


def with_keepalives(
    events: Sequence[tuple[int, bytes]],
    after: int,
    last: int,
    keepalive: KeepaliveTemplate | None,
) -> list[tuple[int, bytes]]:
    """The events numbered above ``after``: the stored ``events`` (in order) and, for each
    number missing among them up to ``last``, the keepalive made from its template (without
    one, the missing numbers stay missing)."""
    if keepalive is None:
        return [event for event in events if event[0] > after]
    prefix, suffix = keepalive
    out: list[tuple[int, bytes]] = []
    number = max(after, -1) + 1  # none numbered below 0
    for sequence, frame in events:
        if sequence < number:
            continue
        while number < sequence:
            out.append((number, b"%b%d%b" % (prefix, number, suffix)))
            number += 1
        out.append((sequence, frame))
        number = sequence + 1
    while number <= last:
        out.append((number, b"%b%d%b" % (prefix, number, suffix)))
        number += 1
    return out


class ResponseStore(Protocol):
    """What serving needs of a store (every method may raise :class:`StoreUnavailable`).

    It is an async context manager: the app's lifespan enters it (connects, checks the server
    answers; :class:`StoreUnavailable` when it does not) and leaves it at shutdown."""

    #: Seconds the latest keepalive numbers of waiting responses may take to reach it: readers
    #: in other processes see keepalives that much later, and the TTL of a waiting response
    #: is renewed that much later (the numbers of thousands of responses are one call).
    progress_every_s: float
    #: Seconds a response is kept after its last write (a waiting background response's
    #: keepalive numbers renew it).
    ttl_s: float

    async def __aenter__(self) -> Any: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    async def create(
        self,
        response_id: str,
        owner: str,
        obj: dict[str, Any] | bytes,
        *,
        input_items: list[Any] | bytes | None = None,
        background: bool = False,
        listed_in: str | None = None,
        listed_at: float | None = None,
    ) -> None:
        """Start keeping ``response_id``: its object so far (no events), the input it is made
        from (either of them may come serialized as JSON), whether it is a background
        response (whose events are kept), and the list of its owner's answers it joins
        (:meth:`listed`; None: none) with its place there (``time.time()`` when it was
        answered; None: now)."""
        ...

    async def listed(
        self,
        name: str,
        owner: str,
        count: int,
        *,
        descending: bool = False,
        after: str | None = None,
        before: str | None = None,
    ) -> list[str]:
        """Up to ``count`` ids of ``owner``'s responses kept in list ``name``, by their place
        there (oldest first, or newest first when ``descending``): those after the response
        ``after`` and before the response ``before`` in that order, when given. Those gone,
        deleted or expired, are left out (one may go before it is read). The work is that of
        the ids walked, not of the whole list: a page of a long list costs a page.
        :class:`UnknownCursor` when ``after`` or ``before`` is not a response kept in the list."""
        ...

    async def replace_object(self, response_id: str, obj: dict[str, Any]) -> bool:
        """Replace an ended response's object (an update of what it carries); whether it was
        there to replace. Its TTL is not renewed: it expires when it would have (and so never
        outlives its place in its owner's list)."""
        ...

    async def get(self, response_id: str) -> StoredResponse | None:
        """The response as it stands, or None (never created, deleted or expired)."""
        ...

    async def read(
        self, response_id: str, after: int | None = None
    ) -> tuple[StoredResponse, list[tuple[int, bytes]]] | None:
        """What a reader of the response needs, in one step: the response as it stands without
        its input (``input`` None: only a request continuing it needs that) and, when ``after``
        is given, its events above ``after`` as :meth:`events` gives them ([] otherwise).
        The events are those of the response as returned: a done one's are all of them.
        None: never created, deleted or expired."""
        ...

    async def append(
        self,
        response_id: str,
        events: Sequence[tuple[int, bytes]],
        obj: dict[str, Any] | bytes | None = None,
        *,
        done: bool = False,
        keepalive: KeepaliveTemplate | None = None,
        last: int = -1,
    ) -> None:
        """Add numbered event frames other than keepalives (in order), the object when an
        event carried a new one (a dict, or its JSON), whether the last of them was terminal,
        the keepalives' template when it is new, and the number of the latest event when a
        keepalive came after them. Nothing happens for an unknown id."""
        ...

    async def append_many(
        self, writes: Mapping[str, Write], keepalives: Mapping[str, int] | None = None
    ) -> None:
        """:meth:`create` (when a write says so) then :meth:`append` for several responses at
        once, and the latest keepalive numbers of others (``{response id: number}``): one
        round trip to a server."""
        ...

    async def events(self, response_id: str, after: int) -> list[tuple[int, bytes]]:
        """The events numbered above ``after``, in order, keepalives rendered
        (:func:`with_keepalives`)."""
        ...

    async def wait(self, response_id: str, after: int, max_wait_s: float) -> None:
        """Return once an event above ``after`` is stored, the response is done or gone, or
        ``max_wait_s`` seconds have passed."""
        ...

    async def delete(self, response_id: str) -> bool:
        """Forget the response; whether it was there."""
        ...

    async def end_abandoned(
        self, response_id: str, events: Sequence[tuple[int, bytes]], obj: dict[str, Any]
    ) -> bool:
        """End an abandoned response with ``events`` (numbered from its ``last_sequence + 1``)
        and ``obj``, in one step, if it is still abandoned; whether this call ended it (False:
        it ended otherwise, or its process holds the lease again)."""
        ...

    async def hold(self, *, task_status: TaskStatus[None] = TASK_STATUS_IGNORED) -> None:
        """Hold this process's lease on the responses it creates until cancelled (renewed
        well within its length; given back at the end), so that the processes sharing the
        store know they are being generated; started (``task_status``) once the lease is
        taken. A store no other process shares waits for nothing."""
        ...

    async def request_cancel(self, response_id: str) -> int:
        """Ask the processes sharing the store to cancel ``response_id`` (the one generating it
        does); how many processes heard it (0: none listens, so none generates it)."""
        ...

    async def listen_cancels(self, on_cancel: Callable[[str], object]) -> None:
        """Call ``on_cancel(response_id)`` for each cancel another process asks for, until
        cancelled (a store no other process shares waits for nothing)."""
        ...
