"""The Redis (or Valkey) store: a real server, shared by every process that names it.

Per response, a hash ``<prefix>r:<id>`` (owner, object, done, input) and a
Redis Stream ``<prefix>e:<id>`` of its events, entry ids ``0-<sequence + 1>`` so that a reader
resumes with ``XRANGE``/``XREAD BLOCK`` from any sequence number; both expire ``ttl_s`` after
the last write. The client is coredis (anyio underneath: the same store on asyncio and trio).
Every operation is bounded by ``timeout_s``; a failure or a timeout is
:class:`~aiostream_synth._store.base.StoreUnavailable`.
"""

from __future__ import annotations

import urllib.parse
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Any

import anyio
import coredis
import coredis.exceptions
import orjson

from aiostream_synth._store.base import Creation, StoredResponse, StoreUnavailable, Write

__all__ = ["RedisStore"]

_FAILURES = (coredis.exceptions.RedisError, OSError, TimeoutError)
#: A keepalive's append renews the keys' TTL once in this many events (each other one is a
#: single XADD); an object, the end, or several events at once renew it every time.
_RENEW_EVERY = 32


def _entry_id(sequence: int) -> str:
    return f"0-{sequence + 1}"


def _bytes(value: bytes | str) -> bytes:
    return value if isinstance(value, bytes) else value.encode()


def _sequence(entry_id: bytes | str) -> int:
    text = entry_id.decode() if isinstance(entry_id, bytes) else entry_id
    return int(text.partition("-")[2]) - 1


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
    ) -> None:
        parsed = urllib.parse.urlsplit(url)
        if parsed.scheme not in ("redis", "rediss") or not parsed.hostname:
            raise ValueError(f"a Redis store URL is redis://host:port/db, not {url!r}")
        if not ttl_s > 0:
            raise ValueError(f"ttl_s must be a positive number of seconds, not {ttl_s}")
        self.url = url
        self.ttl_s = ttl_s
        self.timeout_s = timeout_s
        self.prefix = prefix
        self._ttl = max(1, round(ttl_s))
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
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self._client.__aexit__(exc_type, exc, tb)

    @staticmethod
    def _fields(creation: Creation) -> dict[str, bytes]:
        fields = {
            "owner": creation.owner.encode(),
            "object": orjson.dumps(creation.object),
            "done": b"0",
            "background": b"1" if creation.background else b"0",
        }
        if creation.input_items is not None:
            fields["input"] = orjson.dumps(creation.input_items)
        return fields

    def _keys(self, response_id: str) -> tuple[str, str]:
        return f"{self.prefix}r:{response_id}", f"{self.prefix}e:{response_id}"

    async def create(
        self,
        response_id: str,
        owner: str,
        obj: dict[str, Any],
        *,
        input_items: list[Any] | None = None,
        background: bool = False,
    ) -> None:
        record, events = self._keys(response_id)
        fields = self._fields(Creation(owner, obj, input_items, background))
        try:
            with anyio.fail_after(self.timeout_s):
                async with self._client.pipeline(transaction=True) as pipe:
                    pipe.delete([record, events])
                    pipe.hset(record, fields)
                    pipe.expire(record, self._ttl)
        except _FAILURES as exc:
            raise StoreUnavailable(f"{self!r}: {exc}") from None

    async def get(self, response_id: str) -> StoredResponse | None:
        record, stream = self._keys(response_id)
        try:
            with anyio.fail_after(self.timeout_s):
                fields = await self._client.hgetall(record)
                last = await self._client.xrevrange(stream, "+", "-", count=1)
        except _FAILURES as exc:
            raise StoreUnavailable(f"{self!r}: {exc}") from None
        if b"owner" not in fields:
            return None
        raw_input = fields.get(b"input")
        return StoredResponse(
            owner=fields[b"owner"].decode(),
            object=orjson.loads(fields[b"object"]),
            done=fields.get(b"done") == b"1",
            last_sequence=_sequence(last[0].identifier) if last else -1,
            input=None if raw_input is None else orjson.loads(raw_input),
            background=fields.get(b"background") == b"1",
        )

    async def append(
        self,
        response_id: str,
        events: Sequence[tuple[int, bytes]],
        obj: dict[str, Any] | None = None,
        *,
        done: bool = False,
    ) -> None:
        if obj is None and not done and len(events) == 1 and events[0][0] % _RENEW_EVERY:
            # A keepalive's event: one XADD (the keys' TTL is renewed once in a while, below).
            _, stream = self._keys(response_id)
            sequence, frame = events[0]
            try:
                with anyio.fail_after(self.timeout_s):
                    await self._client.xadd(stream, {"f": frame}, identifier=_entry_id(sequence))
            except _FAILURES as exc:
                raise StoreUnavailable(f"{self!r}: {exc}") from None
            return
        await self.append_many({response_id: (None, events, obj, done)})

    async def append_many(self, writes: Mapping[str, Write]) -> None:
        try:
            with anyio.fail_after(self.timeout_s):
                async with self._client.pipeline(transaction=False) as pipe:
                    for response_id, (creation, events, obj, done) in writes.items():
                        record, stream = self._keys(response_id)
                        if creation is not None:
                            pipe.delete([record, stream])
                            pipe.hset(record, self._fields(creation))
                            pipe.expire(record, self._ttl)
                        for sequence, frame in events:
                            pipe.xadd(stream, {"f": frame}, identifier=_entry_id(sequence))
                        fields: dict[str, bytes] = {}
                        if obj is not None:
                            fields["object"] = orjson.dumps(obj)
                        if done:
                            fields["done"] = b"1"
                        if fields:
                            pipe.hset(record, fields)
                        if fields or any(seq % _RENEW_EVERY == 0 for seq, _ in events):
                            pipe.expire(record, self._ttl)
                            pipe.expire(stream, self._ttl)
        except _FAILURES as exc:
            raise StoreUnavailable(f"{self!r}: {exc}") from None

    async def events(self, response_id: str, after: int) -> list[tuple[int, bytes]]:
        _, stream = self._keys(response_id)
        try:
            with anyio.fail_after(self.timeout_s):
                entries = await self._client.xrange(stream, f"({_entry_id(after)}", "+")
        except _FAILURES as exc:
            raise StoreUnavailable(f"{self!r}: {exc}") from None
        return [(_sequence(e.identifier), _bytes(e.field_values[b"f"])) for e in entries]

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
                removed = await self._client.delete(list(self._keys(response_id)))
        except _FAILURES as exc:
            raise StoreUnavailable(f"{self!r}: {exc}") from None
        return bool(removed > 0)
