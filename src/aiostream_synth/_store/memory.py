"""The embedded store: in this process, bounded in bytes, each response kept for a TTL.

The least recently written response is evicted first when the bytes held pass ``max_bytes``
(a long generation, written to at every event, stays), and a response expires ``ttl_s`` after
its last event; both are logged and counted (:attr:`MemoryStore.evicted`,
:attr:`MemoryStore.expired`). A waiting response's keepalives count as events once their
numbers reach the store: every ``progress_every_s`` (2 s, or a quarter of a shorter TTL), all
of them in one call. Waiters are woken through anyio events, so it serves the readers of the
process's own event loop (asyncio or trio).
"""

from __future__ import annotations

import bisect
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import anyio
import orjson
from anyio.abc import TaskStatus

from aiostream_synth._store.base import (
    KeepaliveTemplate,
    StoredResponse,
    UnknownCursor,
    Write,
    with_keepalives,
)
from aiostream_synth._wire.json import dumps_exact

__all__ = ["MemoryStore"]

LOG = logging.getLogger("aiostream_synth.store")

#: Bytes counted per response besides its frames and object (the entry and its bookkeeping).
_OVERHEAD = 512
#: Seconds between two eviction log lines (each eviction is counted).
_EVICTION_LOG_S = 60.0
#: Seconds a waiting response's keepalive numbers may take to reach the store (at most).
_PROGRESS_EVERY_S = 2.0


def _exact_json(value: object) -> bytes:
    """``value`` serialized at exactly its size (:func:`~aiostream_synth._wire.json.dumps_exact`);
    bytes are taken as serialized already (the writer's creations come so)."""
    return value if isinstance(value, bytes) else dumps_exact(value)


@dataclass(slots=True)
class _Entry:
    owner: str
    #: The object, serialized: a kept response holds no tree of objects for the garbage
    #: collector to walk at every collection (thousands of them, for an hour each).
    object: bytes
    touched: float
    #: The input, serialized (a third of its parsed size, and none of the request's objects).
    input: bytes | None
    background: bool
    events: list[tuple[int, bytes]] = field(default_factory=list)
    event_bytes: int = 0
    #: The number of its latest event (a keepalive's included) and its keepalives' template.
    last: int = -1
    keepalive: KeepaliveTemplate | None = None
    done: bool = False
    changed: anyio.Event | None = None
    #: The list of its owner's answers it is in, if any.
    listed_in: str | None = None

    @property
    def size(self) -> int:
        return _OVERHEAD + len(self.object) + self.event_bytes

    def notify(self) -> None:
        changed, self.changed = self.changed, None
        if changed is not None:
            changed.set()


class MemoryStore:
    """A :class:`~aiostream_synth._store.base.ResponseStore` in this process's memory."""

    def __init__(
        self,
        *,
        max_bytes: int = 256 * 2**20,
        ttl_s: float = 3600.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if max_bytes < 1:
            raise ValueError(f"max_bytes must be at least 1, not {max_bytes}")
        if not ttl_s > 0:
            raise ValueError(f"ttl_s must be a positive number of seconds, not {ttl_s}")
        self.max_bytes = max_bytes
        self.ttl_s = ttl_s
        #: Only this process reads it, from the live log while a response is generated: a
        #: waiting response's keepalive numbers only renew its TTL and its place among the
        #: most recently written, within this many seconds.
        self.progress_every_s = min(_PROGRESS_EVERY_S, ttl_s / 4)
        self._clock = clock
        self._entries: OrderedDict[str, _Entry] = OrderedDict()
        #: Each list of an owner's answers (name, owner): its ids and their places (a
        #: response leaves its list as it leaves the store).
        self._lists: dict[tuple[str, str], _OwnerList] = {}
        self.bytes = 0
        #: Responses evicted to stay within ``max_bytes``, and expired after their TTL.
        self.evicted = 0
        self.expired = 0
        self._logged_eviction = float("-inf")

    def __len__(self) -> int:
        return len(self._entries)

    async def __aenter__(self) -> MemoryStore:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None

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
        self._expire()
        old = self._entries.pop(response_id, None)
        if old is not None:
            self.bytes -= old.size
            self._unlist(response_id, old)
        # Exactly its size: orjson's own result keeps ~4 KiB of capacity behind a short input,
        # which every waiting stream of a stored response held (16.2 -> 12 KiB per stream).
        kept_input = None if input_items is None else _exact_json(input_items)
        entry = _Entry(owner, _exact_json(obj), self._clock(), kept_input, background)
        if kept_input is not None:
            entry.event_bytes += len(kept_input)
        self._entries[response_id] = entry
        self.bytes += entry.size
        if listed_in is not None:
            entry.listed_in = listed_in
            at = time.time() if listed_at is None else listed_at
            self._lists.setdefault((listed_in, owner), _OwnerList()).add(response_id, at)
        self._bound()

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
        self._expire()  # (an entry leaves its list as it goes)
        listed = self._lists.get((name, owner)) or _OwnerList()
        return listed.walk(count, descending, after, before)

    async def replace_object(self, response_id: str, obj: dict[str, Any]) -> bool:
        entry = self._live(response_id)
        if entry is None:
            return False
        before = entry.size
        entry.object = dumps_exact(obj)
        self.bytes += entry.size - before
        self._bound()
        return True

    async def get(self, response_id: str) -> StoredResponse | None:
        entry = self._live(response_id)
        if entry is None:
            return None
        kept_input = None if entry.input is None else orjson.loads(entry.input)
        return StoredResponse(
            entry.owner,
            orjson.loads(entry.object),
            entry.done,
            entry.last,
            kept_input,
            entry.background,
        )

    async def read(
        self, response_id: str, after: int | None = None
    ) -> tuple[StoredResponse, list[tuple[int, bytes]]] | None:
        entry = self._live(response_id)
        if entry is None:
            return None
        stored = StoredResponse(
            entry.owner, orjson.loads(entry.object), entry.done, entry.last, None, entry.background
        )
        if after is None:
            return stored, []
        return stored, with_keepalives(entry.events, after, entry.last, entry.keepalive)

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
        entry = self._live(response_id)
        if entry is None:
            return
        before = entry.size
        if events:
            entry.events.extend(events)
            entry.event_bytes += sum(len(frame) for _, frame in events)
            last = max(last, events[-1][0])
        if keepalive is not None and entry.keepalive is None:
            entry.keepalive = keepalive
            entry.event_bytes += len(keepalive[0]) + len(keepalive[1])
        entry.last = max(entry.last, last)
        if obj is not None:
            entry.object = obj if isinstance(obj, bytes) else dumps_exact(obj)
        entry.done = entry.done or done
        entry.touched = self._clock()
        self._entries.move_to_end(response_id)
        self.bytes += entry.size - before
        entry.notify()
        self._bound()

    async def append_many(
        self, writes: Mapping[str, Write], keepalives: Mapping[str, int] | None = None
    ) -> None:
        if keepalives:  # a number each: no bytes change, no waiter needs a keepalive
            now = self._clock()
            entries = self._entries
            for response_id, number in keepalives.items():
                entry = entries.get(response_id)
                if entry is not None:
                    entry.last = max(entry.last, number)
                    entry.touched = now
                    entries.move_to_end(response_id)
        for response_id, write in writes.items():
            creation = write.creation
            if creation is not None:
                await self.create(
                    response_id,
                    creation.owner,
                    creation.object,
                    input_items=creation.input_items,
                    background=creation.background,
                    listed_in=creation.listed_in,
                    listed_at=creation.listed_at,
                )
            await self.append(
                response_id,
                write.events,
                write.object,
                done=write.done,
                keepalive=write.keepalive,
                last=write.last,
            )

    async def events(self, response_id: str, after: int) -> list[tuple[int, bytes]]:
        entry = self._live(response_id)
        if entry is None:
            return []
        return with_keepalives(entry.events, after, entry.last, entry.keepalive)

    async def wait(self, response_id: str, after: int, max_wait_s: float) -> None:
        entry = self._live(response_id)
        if entry is None or entry.done or entry.last > after:
            return
        if entry.changed is None:
            entry.changed = anyio.Event()
        changed = entry.changed
        with anyio.move_on_after(max_wait_s):
            await changed.wait()

    async def delete(self, response_id: str) -> bool:
        entry = self._entries.pop(response_id, None)
        if entry is None:
            return False
        self.bytes -= entry.size
        self._unlist(response_id, entry)
        entry.notify()
        return True

    def _unlist(self, response_id: str, entry: _Entry) -> None:
        """Take a response that goes out of its owner's list, if it is in one."""
        if entry.listed_in is None:
            return
        key = (entry.listed_in, entry.owner)
        listed = self._lists.get(key)
        if listed is not None:
            listed.remove(response_id)
            if not listed.places:
                del self._lists[key]

    async def end_abandoned(
        self, response_id: str, events: Sequence[tuple[int, bytes]], obj: dict[str, Any]
    ) -> bool:
        # Only this process writes here, and its responses end with it: none is ever
        # abandoned, but the call does what it says.
        entry = self._live(response_id)
        if entry is None or entry.done:
            return False
        await self.append(response_id, events, obj, done=True)
        return True

    async def hold(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        await anyio.sleep_forever()  # no other process reads this store

    async def request_cancel(self, response_id: str) -> int:
        return 0  # no other process shares this store

    async def listen_cancels(self, on_cancel: Callable[[str], object]) -> None:
        await anyio.sleep_forever()

    # -- bounds --------------------------------------------------------------------------------
    def _live(self, response_id: str) -> _Entry | None:
        entry = self._entries.get(response_id)
        if entry is not None and self._clock() - entry.touched > self.ttl_s:
            self._drop(response_id, "expired")
            return None
        return entry

    def _expire(self) -> None:
        """Drop the expired responses: the least recently written come first (each write moves
        its response to the end), so this stops at the first one still fresh."""
        now = self._clock()
        while self._entries:
            response_id, entry = next(iter(self._entries.items()))
            if now - entry.touched <= self.ttl_s:
                return
            self._drop(response_id, "expired")

    def _bound(self) -> None:
        while self.bytes > self.max_bytes and len(self._entries) > 1:
            oldest = next(iter(self._entries))
            self._drop(oldest, "evicted")

    def _drop(self, response_id: str, why: str) -> None:
        entry = self._entries.pop(response_id)
        self.bytes -= entry.size
        self._unlist(response_id, entry)
        entry.notify()
        if why == "evicted":
            self.evicted += 1
            now = self._clock()
            # One line per minute at most under pressure, counting the ones in between.
            if now - self._logged_eviction >= _EVICTION_LOG_S or self.evicted == 1:
                LOG.warning(
                    "store: evicted %s (%d bytes) to stay within %d bytes (%d evicted so far)",
                    response_id,
                    entry.size,
                    self.max_bytes,
                    self.evicted,
                )
                self._logged_eviction = now
        else:
            self.expired += 1
            LOG.debug("store: %s expired after %g s", response_id, self.ttl_s)


class _OwnerList:
    """One owner's list of answers: each id's place, and the ids in order of (place, id), as
    a Redis sorted set orders them (a cursor is found by bisection, not by a scan)."""

    __slots__ = ("order", "places")

    def __init__(self) -> None:
        self.places: dict[str, float] = {}
        self.order: list[tuple[float, str]] = []

    def add(self, response_id: str, place: float) -> None:
        self.remove(response_id)
        self.places[response_id] = place
        bisect.insort(self.order, (place, response_id))

    def remove(self, response_id: str) -> None:
        place = self.places.pop(response_id, None)
        if place is not None:
            del self.order[bisect.bisect_left(self.order, (place, response_id))]

    def walk(
        self, count: int, descending: bool, after: str | None, before: str | None
    ) -> list[str]:
        """See :meth:`MemoryStore.listed`."""
        order, size = self.order, len(self.order)

        def rank(param: str, cursor: str) -> int:
            place = self.places.get(cursor)
            if place is None:
                raise UnknownCursor(param, cursor)
            at = bisect.bisect_left(order, (place, cursor))
            return size - 1 - at if descending else at

        first = 0 if after is None else rank("after", after) + 1
        stop = size if before is None else rank("before", before)
        ranks = range(first, min(stop, first + count))
        if descending:
            return [order[size - 1 - at][1] for at in ranks]
        return [order[at][1] for at in ranks]
