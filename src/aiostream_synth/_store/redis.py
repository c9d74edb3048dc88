"""The Redis (or Valkey) store: a real server, shared by every process that names it.

Per response, a hash ``<prefix>r:<id>`` (owner, object, done, input, the keepalives' template)
and a Redis Stream ``<prefix>e:<id>`` of its events other than keepalives, one entry per run of
consecutive numbers written together (its id ``0-<last number + 1>``, its fields the first
number and the frames), so that a reader resumes with ``XRANGE``/``XREAD BLOCK`` from any
sequence number; both expire ``ttl_s`` after the last write. The number of each waiting
response's latest keepalive is a field of one hash, ``<prefix>progress``, written for every
response at once by one script call per flush (:data:`_PROGRESS_SCRIPT`: a tick costs a
stream no command of its own) and removed when the response ends. Every response's write of a
flush is one script call (:data:`_WRITE_SCRIPT`); cancels go through the channel
``<prefix>cancel``. A read (a response's fields, its runs after a number, its latest keepalive
number, whether it is abandoned) is one script call too (:data:`_READ_SCRIPT`), and the reads
of concurrent requests share a round trip (:meth:`RedisStore._call_batched`).

A process that names the settings its fleet must share (``fleet``: coalescing's, the TTL, the
lease) claims them in ``<prefix>fleet`` when it starts, and a process with other settings is
refused at its start; the claim is renewed with the lease and lapses two leases after the
fleet's last process stops.

Each store object is one *holder* (a random id; a process has one): the responses it creates
name it in their hash, and it keeps the key ``<prefix>lease:<holder>`` alive while it runs
(:meth:`RedisStore.hold`: renewed every third of ``lease_s``, deleted at the end). A response
in progress whose holder's key is gone is abandoned; :meth:`RedisStore.end_abandoned` ends it
in one script (:data:`_ABANDON_SCRIPT`), and a write of a response that has ended is skipped,
so a holder that comes back from a pause never writes past an end another process wrote.

The client is coredis (anyio underneath: the same store on asyncio and trio). Every operation
is bounded by ``timeout_s``; a failure or a timeout is
:class:`~aiostream_synth._store.base.StoreUnavailable`.
"""

from __future__ import annotations

import contextlib
import struct
import time
import urllib.parse
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio
import coredis
import coredis.exceptions
import orjson
from anyio.abc import TaskStatus

from aiostream_synth._store.base import (
    Creation,
    KeepaliveTemplate,
    StoredResponse,
    StoreUnavailable,
    UnknownCursor,
    Write,
    with_keepalives,
)
from aiostream_synth._wire.sse import split_frames

if TYPE_CHECKING:
    from aiostream_synth._store.redis_calls import RedisCalls

__all__ = ["RedisStore"]

_FAILURES = (coredis.exceptions.RedisError, OSError, TimeoutError)
#: A waiting response's keys have their TTL renewed by its keepalives once in this fraction of
#: the TTL (any other write renews it every time).
_RENEW_FRACTION = 0.25


def _json(value: object) -> bytes:
    """``value`` as JSON; bytes are taken as serialized already (the writer's creations come
    so)."""
    return value if isinstance(value, bytes) else orjson.dumps(value)


#: Several responses' writes in one call. KEYS: the keepalive numbers' hash; ARGV: the TTL, the
#: prefixes of a response's hash and stream keys, then every response's part in one string
#: (:func:`_packed`: the client pays per argument, a key included, benchmarks/COSTS.md): its id,
#: its field count, run count, whether to renew both keys' TTL and whether it ended (its
#: keepalive number then removed), then its fields (one HSET) and its runs (first number, entry
#: id, frames: one XADD each), each string preceded by its length. Its keys are made here from
#: the id (so a Redis Cluster, whose scripts must declare their keys, cannot hold this store; a
#: flush's responses lie in many slots anyway).
_WRITE_SCRIPT = """
local ttl, records, streams, parts = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
local at = 1
while at <= #parts do
  local id, fields, runs, renew, ended
  id, fields, runs, renew, ended, at = struct.unpack('>I4c0I4I4BB', parts, at)
  local record, stream = records .. id, streams .. id
  -- A response another process ended (abandoned) takes no more writes.
  local open = redis.call('HGET', record, 'done') ~= '1'
  if ended == 1 then redis.call('HDEL', KEYS[1], id) end
  if fields > 0 then
    local hash = {}
    for i = 1, 2 * fields do
      hash[i], at = struct.unpack('>I4c0', parts, at)
    end
    if open then redis.call('HSET', record, unpack(hash)) end
  end
  for r = 1, runs do
    local first, entry, frames
    first, entry, frames, at = struct.unpack('>I4c0I4c0I4c0', parts, at)
    if open then redis.call('XADD', stream, entry, 'a', first, 'f', frames) end
  end
  if renew == 1 then
    redis.call('EXPIRE', record, ttl)
    redis.call('EXPIRE', stream, ttl)
  end
end
return 0
"""

_COUNTS = struct.Struct(">IIBB").pack
_LENGTH = struct.Struct(">I").pack
#: What follows a response's id in a part that only renews its TTL (no fields, no runs).
_RENEWAL = _COUNTS(0, 0, 1, 0)


def _packed(
    parts: list[bytes],
    response_id: bytes,
    fields: Mapping[str, bytes],
    runs: Sequence[tuple[int, int, list[bytes]]],
    renew: bool,
    ended: bool,
) -> None:
    """One response's part of :data:`_WRITE_SCRIPT`'s call, onto ``parts`` (joined once for
    the whole call; a run's frames joined there, not before)."""
    parts += (_LENGTH(len(response_id)), response_id)
    parts.append(_COUNTS(len(fields), len(runs), renew, ended))
    for name, value in fields.items():
        key = name.encode()
        parts += (_LENGTH(len(key)), key, _LENGTH(len(value)), value)
    for first, last, frames in runs:
        number, entry = b"%d" % first, _entry_id(last).encode()
        parts += (_LENGTH(len(number)), number, _LENGTH(len(entry)), entry)
        parts.append(_LENGTH(sum(map(len, frames))))
        parts += frames


#: The latest keepalive numbers of waiting responses, into one hash. KEYS: the hash; ARGV: the
#: TTL, then "id number id number ..." in one argument: the client pays per argument, and a
#: wave's thousands of numbers a flush are one (benchmarks/COSTS.md).
_PROGRESS_SCRIPT = """
local t = {}
for word in string.gmatch(ARGV[2], '[^ ]+') do t[#t + 1] = word end
for i = 1, #t, 7000 do
  redis.call('HSET', KEYS[1], unpack(t, i, math.min(i + 6999, #t)))
end
redis.call('EXPIRE', KEYS[1], ARGV[1])
return 0
"""


#: A response as a reader needs it, in one call. KEYS: its hash, its stream, the keepalive
#: numbers' hash; ARGV: the lease keys' prefix, this process's holder, the response id, the
#: entry id after which its runs are read ('': none), '1' for its input too. False when it is
#: not kept, else: its fields (owner, object, done, background, the keepalives' template,
#: holder), its last run's entry id, its latest keepalive number, whether it is abandoned (in
#: progress, another process's, that process's lease key gone: 1), its runs, its input.
_READ_SCRIPT = """
local f = redis.call('HMGET', KEYS[1], 'owner', 'object', 'done', 'background', 'kp', 'ks', 'holder')
if not f[1] then return false end
local abandoned = 0
if f[3] == '0' and f[7] and f[7] ~= ARGV[2] then
  abandoned = 1 - redis.call('EXISTS', ARGV[1] .. f[7])
end
local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
local runs = {}
if ARGV[4] ~= '' then runs = redis.call('XRANGE', KEYS[2], '(' .. ARGV[4], '+') end
local input = false
if ARGV[5] == '1' then input = redis.call('HGET', KEYS[1], 'input') end
local progress = redis.call('HGET', KEYS[3], ARGV[3])
return {f, last[1] and last[1][1] or false, progress, abandoned, runs, input}
"""

#: Reads sent in one pipeline at most (the ones queued beyond wait for the next).
_READS_PER_CALL = 256

#: End an abandoned response, if it still is. KEYS: its hash, its stream, the keepalive
#: numbers' hash; ARGV: the lease keys' prefix, the TTL, the object, the first number, the
#: entry id and the frames of the closing events, the response id. 1: ended here.
_ABANDON_SCRIPT = """
local f = redis.call('HMGET', KEYS[1], 'done', 'holder')
if f[1] ~= '0' or not f[2] or redis.call('EXISTS', ARGV[1] .. f[2]) == 1 then return 0 end
redis.call('HSET', KEYS[1], 'object', ARGV[3], 'done', '1')
if ARGV[6] ~= '' then
  redis.call('XADD', KEYS[2], ARGV[5], 'a', ARGV[4], 'f', ARGV[6])
  redis.call('EXPIRE', KEYS[2], ARGV[2])
end
redis.call('EXPIRE', KEYS[1], ARGV[2])
redis.call('HDEL', KEYS[3], ARGV[7])
return 1
"""


#: A walk along an owner's list of answers (a sorted set: ids by their place, when they were
#: answered). KEYS: the list; ARGV: the prefix of a response hash's key, how many ids at most,
#: "1" for newest first, the id to start after and the id to stop before ("" for none). The
#: ids still kept after "ok", or the name of a cursor that is not a kept response of the list.
#: Ids whose response is gone (deleted, expired) are skipped, and taken out once walked.
_LISTED_SCRIPT = """
local key, prefix, count, desc = KEYS[1], ARGV[1], tonumber(ARGV[2]), ARGV[3] == '1'
local function rank(id)
  if redis.call('EXISTS', prefix .. id) == 0 then return false end
  if desc then return redis.call('ZREVRANK', key, id) end
  return redis.call('ZRANK', key, id)
end
local at, stop = 0, redis.call('ZCARD', key)
if ARGV[4] ~= '' then
  local place = rank(ARGV[4])
  if not place then return {'after'} end
  at = place + 1
end
if ARGV[5] ~= '' then
  local place = rank(ARGV[5])
  if not place then return {'before'} end
  stop = place
end
local kept, gone = {'ok'}, {}
while at < stop and #kept <= count do
  local last = math.min(stop, at + count + 1 - #kept) - 1
  local ids
  if desc then ids = redis.call('ZREVRANGE', key, at, last)
  else ids = redis.call('ZRANGE', key, at, last) end
  if #ids == 0 then break end
  for _, id in ipairs(ids) do
    if redis.call('EXISTS', prefix .. id) == 1 then kept[#kept + 1] = id
    else gone[#gone + 1] = id end
  end
  at = last + 1
end
for _, id in ipairs(gone) do redis.call('ZREM', key, id) end
return kept
"""

#: An ended response's object replaced, if it is still kept, its TTL left as it is (a
#: response never outlives its place in its owner's list). KEYS: its hash; ARGV: the object.
#: 1: replaced.
_REPLACE_SCRIPT = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
redis.call('HSET', KEYS[1], 'object', ARGV[1])
return 1
"""

#: A fleet's settings, claimed. KEYS: the claim; ARGV: these settings, its length in ms. The
#: settings claimed by others when they differ, else nothing (claimed).
_CLAIM_SCRIPT = """
local theirs = redis.call('GET', KEYS[1])
if theirs and theirs ~= ARGV[1] then return theirs end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return false
"""


def _entry_id(sequence: int) -> str:
    return f"0-{sequence + 1}"


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


def _sequence(entry_id: bytes | str) -> int:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.partition("-")[2]) - 1


def _runs(events: Sequence[tuple[int, bytes]]) -> list[tuple[int, int, list[bytes]]]:
    """``events`` (their numbers rising, as :meth:`RedisStore.append` takes them) as runs of
    consecutive numbers: (first, last, their frames)."""
    if not events:
        return []
    first, last = events[0][0], events[-1][0]
    if last - first == len(events) - 1:  # one run (an answer's events, a keepalive's)
        return [(first, last, [frame for _, frame in events])]
    runs: list[tuple[int, int, list[bytes]]] = []
    for sequence, frame in events:
        if runs and runs[-1][1] == sequence - 1:
            first, _, frames = runs[-1]
            frames.append(frame)
            runs[-1] = (first, sequence, frames)
        else:
            runs.append((sequence, sequence, [frame]))
    return runs


def _number(value: bytes | str | None) -> int:
    return -1 if value is None else int(value)


@dataclass(slots=True, eq=False)
class _Read:
    """One read script call, queued for a batch (see :meth:`RedisStore._call_batched`)."""

    keys: list[str]
    args: list[str]
    reply: Any = None
    error: StoreUnavailable | None = None
    done: bool = False


class RedisStore:
    """A :class:`~aiostream_synth._store.base.ResponseStore` on a Redis or Valkey server.

    ``url`` is ``redis://[user:password@]host:port/db`` (``rediss://`` for TLS). Use it as an
    async context manager (the app's lifespan does): entering connects and checks the server
    answers, leaving closes the connections."""

    def __init__(
        self,
        url: str,
        *,
        ttl_s: float = 3600.0,
        timeout_s: float = 2.0,
        prefix: str = "aiostream-synth:",
        lease_s: float = 30.0,
        fleet: Mapping[str, object] | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("redis", "rediss") or not parsed.hostname:
            raise ValueError(f"a Redis store URL is redis://host:port/db, not {url!r}")
        if not ttl_s > 0:
            raise ValueError(f"ttl_s must be a positive number of seconds, not {ttl_s}")
        if not lease_s > 0:
            raise ValueError(f"lease_s must be a positive number of seconds, not {lease_s}")
        self.url = url
        self.lease_s = lease_s
        #: This store object's name as the holder of the responses it creates.
        self.holder = uuid.uuid4().hex
        self._lease_prefix = f"{prefix}lease:"
        #: The settings every process sharing this store must have alike (None: unchecked).
        self._fleet = (
            None if fleet is None else orjson.dumps(dict(fleet), option=orjson.OPT_SORT_KEYS)
        )
        self._fleet_key = f"{prefix}fleet"
        self.ttl_s = ttl_s
        self.timeout_s = timeout_s
        self.prefix = prefix
        self._ttl = max(1, round(ttl_s))
        self._progress_key = f"{prefix}progress"
        #: The prefixes of a response's keys, to which the write script adds its id (no key
        #: argument per response: the client pays per argument).
        self._key_prefixes = self._keys("")
        self._cancel_channel = f"{prefix}cancel"
        #: When each waiting response of this process next has its TTL renewed by a keepalive.
        self._renew_at: dict[str, float] = {}
        #: None of them is due before this: a flush of keepalive numbers looks up none of
        #: them until then (most flushes renew nothing).
        self._renew_from = float("-inf")
        #: Reads waiting to be sent, and the batch of reads out (set once it is answered).
        self._queued: list[_Read] = []
        self._batch_out: anyio.Event | None = None
        #: What the renewals are timed by (seconds, rising).
        self._clock = clock
        #: Readers on other replicas render keepalives from these numbers: a quarter of a
        #: second late at most (thousands of waiting responses: four calls a second).
        self.progress_every_s = 0.25
        self._client: coredis.Redis[bytes] = coredis.Redis.from_url(
            url, decode_responses=False, connect_timeout=timeout_s
        )

    def __repr__(self) -> str:
        parsed = urllib.parse.urlsplit(self.url)
        return f"RedisStore({parsed.scheme}://{parsed.hostname}:{parsed.port or 6379}{parsed.path})"

    async def __aenter__(self) -> RedisStore:
        await self._client.__aenter__()
        try:
            with anyio.fail_after(self.timeout_s):
                await self._client.ping()
        except _FAILURES as exc:
            await self._client.__aexit__(None, None, None)
            raise StoreUnavailable(f"{self!r} does not answer: {exc}") from None
        try:
            await self._claim_fleet()
        except BaseException:
            await self._client.__aexit__(None, None, None)
            raise
        return self

    async def _claim_fleet(self) -> None:
        """Check that the processes already sharing this store have this one's settings
        (:class:`StoreUnavailable` naming both when they do not), and say they do."""
        if self._fleet is None:
            return
        try:
            with anyio.fail_after(self.timeout_s):
                theirs = await self._client.eval(
                    _CLAIM_SCRIPT, [self._fleet_key], [self._fleet, self._claim_ms]
                )
        except _FAILURES as exc:
            raise StoreUnavailable(f"{self!r}: {exc}") from None
        if isinstance(theirs, bytes | str) and theirs:
            raise StoreUnavailable(
                f"{self!r} is shared by servers with other settings ({_bytes(theirs).decode()}; "
                f"this one: {self._fleet.decode()}): give each fleet its own database, or stop "
                f"the other servers (their claim lapses {self._claim_ms / 1000:g} s after they stop)"
            )

    @property
    def _claim_ms(self) -> int:
        return max(1, round(self.lease_s * 2000))

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._client.__aexit__(exc_type, exc, tb)

    def _fields(self, creation: Creation) -> dict[str, bytes]:
        fields = {
            "owner": creation.owner.encode(),
            "holder": self.holder.encode(),
            "object": _json(creation.object),
            "done": b"0",
            "background": b"1" if creation.background else b"0",
        }
        if creation.input_items is not None:
            fields["input"] = _json(creation.input_items)
        return fields

    def _keys(self, response_id: str) -> tuple[str, str]:
        return f"{self.prefix}r:{response_id}", f"{self.prefix}e:{response_id}"

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
        record, events = self._keys(response_id)
        fields = self._fields(Creation(owner, obj, input_items, background))
        try:
            with anyio.fail_after(self.timeout_s):
                async with self._client.pipeline(transaction=True) as pipe:
                    pipe.delete([record, events])
                    pipe.hset(record, fields)
                    pipe.expire(record, self._ttl)
                    if listed_in is not None:
                        self._list(pipe, listed_in, owner, response_id, listed_at)
        except _FAILURES as exc:
            raise StoreUnavailable(f"{self!r}: {exc}") from None

    def _list_key(self, name: str, owner: str) -> str:
        return f"{self.prefix}list:{name}:{owner}"

    def _list(self, pipe: Any, name: str, owner: str, response_id: str, at: float | None) -> None:
        """Add a response to its owner's list ``name`` at its place (``at``; None: now), in
        ``pipe``; the list lives as long as its latest response."""
        key = self._list_key(name, owner)
        pipe.zadd(key, {response_id: time.time() if at is None else at})
        pipe.expire(key, self._ttl)

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
        arguments = [
            self._key_prefixes[0],
            str(count),
            "1" if descending else "0",
            after or "",
            before or "",
        ]
        try:
            with anyio.fail_after(self.timeout_s):
                reply = await self._client.eval(
                    _LISTED_SCRIPT, [self._list_key(name, owner)], arguments
                )
        except _FAILURES as exc:
            raise StoreUnavailable(f"{self!r}: {exc}") from None
        if not isinstance(reply, list) or not reply:
            raise StoreUnavailable(f"{self!r}: a list's walk answered {reply!r}")
        status, *ids = [_bytes(part).decode() for part in reply]
        if status == "after":
            raise UnknownCursor("after", after or "")
        if status == "before":
            raise UnknownCursor("before", before or "")
        return ids

    async def replace_object(self, response_id: str, obj: dict[str, Any]) -> bool:
        try:
            with anyio.fail_after(self.timeout_s):
                replaced = await self._client.eval(
                    _REPLACE_SCRIPT, [self._keys(response_id)[0]], [orjson.dumps(obj)]
                )
        except _FAILURES as exc:
            raise StoreUnavailable(f"{self!r}: {exc}") from None
        return replaced == 1

    async def get(self, response_id: str) -> StoredResponse | None:
        reply = await self._read(response_id, None, with_input=True)
        return None if reply is None else reply[0]

    async def read(
        self, response_id: str, after: int | None = None
    ) -> tuple[StoredResponse, list[tuple[int, bytes]]] | None:
        return await self._read(response_id, after, with_input=False)

    async def events(self, response_id: str, after: int) -> list[tuple[int, bytes]]:
        reply = await self._read(response_id, after, with_input=False)
        return [] if reply is None else reply[1]

    async def _read(
        self, response_id: str, after: int | None, *, with_input: bool
    ) -> tuple[StoredResponse, list[tuple[int, bytes]]] | None:
        """One :data:`_READ_SCRIPT` call, sent with the reads of other requests queued meanwhile
        (:meth:`_call_batched`), its reply made a response and its events."""
        record, stream = self._keys(response_id)
        reply = await self._call_batched(
            [record, stream, self._progress_key],
            [
                self._lease_prefix,
                self.holder,
                response_id,
                "" if after is None else _entry_id(max(after, -1)),
                "1" if with_input else "0",
            ],
        )
        if not reply:
            return None
        fields, last_id, progress, abandoned, runs, raw_input = reply
        owner, obj, done, background, prefix, suffix, _holder = fields
        last = max(-1 if last_id is None else _sequence(last_id), _number(progress))
        stored = StoredResponse(
            owner=_bytes(owner).decode(),
            object=orjson.loads(obj),
            done=done == b"1",
            last_sequence=last,
            input=None if raw_input is None else orjson.loads(raw_input),
            background=background == b"1",
            abandoned=abandoned == 1,
        )
        if after is None:
            return stored, []
        events: list[tuple[int, bytes]] = []
        for _, values in runs:
            run = dict(zip(values[::2], values[1::2], strict=True))
            first = int(run[b"a"])
            frames = split_frames(_bytes(run[b"f"]))
            events.extend(zip(range(first, first + len(frames)), frames, strict=True))
        template = None if prefix is None or suffix is None else (_bytes(prefix), _bytes(suffix))
        return stored, with_keepalives(events, after, last, template)

    async def _call_batched(self, keys: list[str], args: list[str]) -> Any:
        """The reply of one read script call. Reads are sent together: the first of a batch
        sends every read queued until its loop's next turn in one pipeline, and reads queued
        while a batch is out wait for it and then go together in the next, so that many
        readers at once (resumes, followers on another replica) cost a round trip per batch,
        not one each (a round trip costs this client far more CPU than a script call in a
        pipeline: benchmarks/COSTS.md)."""
        read = _Read(keys, args)
        self._queued.append(read)
        try:
            while not read.done:
                if self._batch_out is None:
                    await self._send_batch()
                else:
                    await self._batch_out.wait()
        finally:
            if not read.done:  # cancelled while waiting: not sent for nothing
                with contextlib.suppress(ValueError):
                    self._queued.remove(read)
        if read.error is not None:
            raise read.error
        return read.reply

    async def _send_batch(self) -> None:
        """Send the queued reads (up to :data:`_READS_PER_CALL`), shielded from this task's
        cancellation (bounded by ``timeout_s``), so that the readers waiting for the batch are
        answered whatever happens to the one sending it."""
        sent = self._batch_out = anyio.Event()
        batch: list[_Read] = []
        error: StoreUnavailable | None = None
        try:
            with anyio.CancelScope(shield=True):
                await anyio.lowlevel.checkpoint()  # the reads of this turn of the loop join
                batch = self._queued[:_READS_PER_CALL]
                del self._queued[:_READS_PER_CALL]
                try:
                    with anyio.fail_after(self.timeout_s):
                        # A read the server refuses fails alone, not its whole batch.
                        async with self._client.pipeline(
                            transaction=False, raise_on_error=False
                        ) as pipe:
                            asked = [pipe.eval(_READ_SCRIPT, r.keys, r.args) for r in batch]
                        for read, reply in zip(batch, asked, strict=True):
                            try:
                                read.reply = await reply
                            except _FAILURES as exc:
                                read.error = StoreUnavailable(f"{self!r}: {exc}")
                            read.done = True
                except _FAILURES as exc:
                    error = StoreUnavailable(f"{self!r}: {exc}")
        finally:
            for read in batch:
                if not read.done:  # failed (or this task raised): no reader waits forever
                    read.error = error or StoreUnavailable(f"{self!r}: the read failed")
                    read.done = True
            self._batch_out = None
            sent.set()
        await anyio.lowlevel.checkpoint_if_cancelled()

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
        await self.append_many({response_id: Write(None, events, obj, done, keepalive, last)})

    async def append_many(
        self, writes: Mapping[str, Write], keepalives: Mapping[str, int] | None = None
    ) -> None:
        # Every response's write is one part of a single script call (a command costs the
        # client ~20 µs of CPU, an argument ~1 µs), beside one call for the keepalive numbers.
        parts: list[bytes] = []  # each response's part (_packed), joined into one argument
        progress: dict[str, int] = dict(keepalives) if keepalives else {}
        now = self._clock()
        if progress and now >= self._renew_from:
            self._renewals(parts, progress, now)
        # Creations joining their owner's list: (id, owner, list, place).
        listings: list[tuple[str, str, str, float | None]] = []
        for response_id, write in writes.items():
            self._write(parts, response_id, write, progress, now)
            creation = write.creation
            if creation is not None and creation.listed_in is not None:
                listed = (response_id, creation.owner, creation.listed_in, creation.listed_at)
                listings.append(listed)
        try:
            with anyio.fail_after(self.timeout_s):
                async with self._client.pipeline(transaction=False) as pipe:
                    if parts:
                        records, streams = self._key_prefixes
                        args: list[bytes | str | int] = [
                            self._ttl,
                            records,
                            streams,
                            b"".join(parts),
                        ]
                        pipe.eval(_WRITE_SCRIPT, [self._progress_key], args)
                    # Listed once written (a listing leaves out an id whose hash is not there).
                    for response_id, owner, name, at in listings:
                        self._list(pipe, name, owner, response_id, at)
                    if progress:
                        packed = " ".join(f"{key} {number}" for key, number in progress.items())
                        if packed.count(" ") == 2 * len(progress) - 1:
                            pipe.eval(_PROGRESS_SCRIPT, [self._progress_key], [self._ttl, packed])
                        else:  # an id with a space in it (not one of ours): field by field
                            pipe.hset(self._progress_key, progress)
                            pipe.expire(self._progress_key, self._ttl)
        except _FAILURES as exc:
            raise StoreUnavailable(f"{self!r}: {exc}") from None

    def _renewals(self, parts: list[bytes], numbers: Mapping[str, int], now: float) -> None:
        """The parts of the script call renewing the TTL of the waiting responses among
        ``numbers`` that are due (no fields, no runs: only both keys' TTL)."""
        renew_at = self._renew_at
        later = now + self._ttl * _RENEW_FRACTION
        for response_id in numbers:
            if now >= renew_at.get(response_id, now):
                key = response_id.encode()
                parts += (_LENGTH(len(key)), key, _RENEWAL)
                renew_at[response_id] = later
        self._renew_from = min(renew_at.values(), default=later)

    def _write(
        self,
        parts: list[bytes],
        response_id: str,
        write: Write,
        progress: dict[str, int],
        now: float,
    ) -> None:
        """One response's part of the script call (see :data:`_WRITE_SCRIPT`); its latest
        keepalive number into ``progress`` (out of it when it ended: the script removes it)."""
        # The creation and what the write changes in one HSET: a creation's id is new (the
        # dialect's random id), so nothing is there to delete first.
        creation = write.creation
        fields = {} if creation is None else self._fields(creation)
        if write.object is not None:
            obj = write.object
            fields["object"] = obj if isinstance(obj, bytes) else orjson.dumps(obj)
        if write.done:
            fields["done"] = b"1"
        if write.keepalive is not None:
            fields["kp"], fields["ks"] = write.keepalive
        runs = _runs(write.events)
        if write.done:
            progress.pop(response_id, None)
            self._renew_at.pop(response_id, None)
        elif write.last > (write.events[-1][0] if write.events else -1):
            progress[response_id] = write.last
        renew = bool(fields or runs) or now >= self._renew_at.get(response_id, now)
        _packed(parts, response_id.encode(), fields, runs, renew, write.done)
        # Renewed later by its keepalive numbers, which only a background response sends (a
        # response kept as it streams writes nothing more until its end).
        waits = creation is None or creation.background
        if renew and waits and not write.done:
            later = self._renew_at[response_id] = now + self._ttl * _RENEW_FRACTION
            self._renew_from = min(self._renew_from, later)

    async def wait(self, response_id: str, after: int, max_wait_s: float) -> None:
        _, stream = self._keys(response_id)
        try:
            with anyio.fail_after(self.timeout_s + max_wait_s):
                await self._client.xread(
                    {stream: _entry_id(after)}, count=1, block=max(1, round(max_wait_s * 1000))
                )
        except _FAILURES as exc:
            raise StoreUnavailable(f"{self!r}: {exc}") from None

    async def delete(self, response_id: str) -> bool:
        try:
            with anyio.fail_after(self.timeout_s):
                async with self._client.pipeline(transaction=False) as pipe:
                    asked = pipe.delete(list(self._keys(response_id)))
                    pipe.hdel(self._progress_key, [response_id])
                removed = await asked
        except _FAILURES as exc:
            raise StoreUnavailable(f"{self!r}: {exc}") from None
        self._renew_at.pop(response_id, None)
        return bool(removed > 0)

    async def end_abandoned(
        self, response_id: str, events: Sequence[tuple[int, bytes]], obj: dict[str, Any]
    ) -> bool:
        record, stream = self._keys(response_id)
        first = events[0][0] if events else 0
        last = events[-1][0] if events else 0
        args: list[str | bytes | int] = [
            self._lease_prefix,
            self._ttl,
            orjson.dumps(obj),
            first,
            _entry_id(last),
            b"".join(frame for _, frame in events),
            response_id,
        ]
        try:
            with anyio.fail_after(self.timeout_s):
                ended = await self._client.eval(
                    _ABANDON_SCRIPT, [record, stream, self._progress_key], args
                )
        except _FAILURES as exc:
            raise StoreUnavailable(f"{self!r}: {exc}") from None
        return ended == 1

    async def hold(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        key = self._lease_prefix + self.holder
        lease_ms = max(1, round(self.lease_s * 1000))
        try:
            while True:
                with anyio.fail_after(self.timeout_s):
                    async with self._client.pipeline(transaction=False) as pipe:
                        pipe.set(key, b"1", px=lease_ms)
                        if self._fleet is not None:
                            pipe.set(self._fleet_key, self._fleet, px=self._claim_ms)
                task_status.started()
                task_status = anyio.TASK_STATUS_IGNORED
                await anyio.sleep(self.lease_s / 3)
        except _FAILURES as exc:
            raise StoreUnavailable(f"{self!r}: {exc}") from None
        finally:
            # Given back at once: readers elsewhere end what is left without waiting for it.
            with (
                anyio.CancelScope(shield=True),
                anyio.move_on_after(self.timeout_s),
                contextlib.suppress(*_FAILURES),
            ):
                await self._client.delete([key])

    def calls(self, *, window_s: float) -> RedisCalls:
        """Coalescing across the processes sharing this store (see
        :mod:`aiostream_synth._store.redis_calls`); ``window_s``: how long a finished call's
        outcome is kept for a retry."""
        from aiostream_synth._store.redis_calls import RedisCalls

        return RedisCalls(self, window_s=window_s)

    async def request_cancel(self, response_id: str) -> int:
        try:
            with anyio.fail_after(self.timeout_s):
                heard = await self._client.publish(self._cancel_channel, response_id)
        except _FAILURES as exc:
            raise StoreUnavailable(f"{self!r}: {exc}") from None
        return int(heard)

    async def listen_cancels(self, on_cancel: Callable[[str], object]) -> None:
        def heard(message: Any) -> None:
            data = message.get("data")
            if isinstance(data, bytes | str):
                on_cancel(_bytes(data).decode())

        try:
            async with self._client.pubsub(
                channel_handlers={self._cancel_channel: heard}, ignore_subscribe_messages=True
            ):
                await anyio.sleep_forever()
        except _FAILURES as exc:
            raise StoreUnavailable(f"{self!r}: {exc}") from None
