"""Coalescing across processes on the Redis store: which backend calls run where, and their
outcomes, for a retry that reaches another process (issue 31).

Per coalescing key (hex) of a call that may be shared now or soon (with ``--coalesce
retries``, once its client left or its outcome is kept for a retry; with ``all``, from its
start), a hash ``<prefix>call:<key>``: the process running the call (its
``holder``, whose lease says it lives), the call's ``gen`` (a random id per call), whether its
first request streamed, its ``state`` — ``busy`` (a client waits on it), ``idle`` (none does:
it lingers for a retry) or ``done`` — and, once done, which retries may take its outcome
(``share``: ``any``, ``nonstream``, or the record is gone). A call's outcome goes to a Redis
Stream ``<prefix>callx:<gen>`` (one entry) when a process joined it or a retry may take it.
A process that joins a running call tells its holder on the channel ``<prefix>calls:<holder>``
(``+<key> <gen>``, and ``-<key> <gen>`` when its client leaves), so that the call is not
cancelled for want of clients while a client elsewhere waits.

The writes of the process running calls are queued and sent in one script call per flush
(:data:`_CALLS_SCRIPT`), which also announces on ``<prefix>calls`` which keys may be shared; a
process looks a request up in the store only when its key was announced (a call that nobody
may share costs the store nothing). A join is one script call (:data:`_JOIN_SCRIPT`), atomic,
so two retries never both join an idle call.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, Literal

import anyio
import coredis.exceptions

from aiostream_synth._store.base import StoreUnavailable

if TYPE_CHECKING:
    from aiostream_synth._store.redis import RedisStore

__all__ = ["CallOp", "Joined", "RedisCalls"]

_FAILURES = (coredis.exceptions.RedisError, OSError, TimeoutError)

#: One queued write: ("r", key, gen, stream "1"/"0", "busy"/"idle") the call's record (once it
#: may be shared); ("w", key, gen, "busy"/"idle", "") whether a client waits on it; ("e", key,
#: gen, share, outcome JSON or "") its end. Each is announced on ``<prefix>calls`` (``s <holder>
#: <key>``: it may be shared now; ``u ...``: no longer), so that the other processes look up
#: only the calls they may share.
CallOp = tuple[str, str, str, str, bytes | str]

#: A call joined: ("joined", gen, holder) running elsewhere, or ("done", gen, holder) whose
#: outcome a retry takes.
Joined = tuple[Literal["joined", "done"], str, str]

_CALLS_SCRIPT = """
local prefix, holder = ARGV[1], ARGV[2]
local running_ttl, window_ttl, outcome_ttl = ARGV[3], ARGV[4], ARGV[5]
local channel = prefix .. 'calls'
local i = 6
while i <= #ARGV do
  local op, key, gen, a, b = ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]
  i = i + 5
  local call = prefix .. 'call:' .. key
  local mine = redis.call('HGET', call, 'gen')
  if op == 'r' then
    redis.call('HSET', call, 'holder', holder, 'gen', gen, 'stream', a, 'state', b,
               'share', '', 'joined', '0')
    redis.call('EXPIRE', call, running_ttl)
    redis.call('PUBLISH', channel, 's ' .. holder .. ' ' .. key)
  elseif op == 'w' then
    if mine == gen then
      redis.call('HSET', call, 'state', a)
      redis.call('PUBLISH', channel, (a == 'idle' and 's ' or 'u ') .. holder .. ' ' .. key)
    end
  else
    local joined = false
    if mine == gen then joined = redis.call('HGET', call, 'joined') == '1' end
    if a ~= '' and (not mine or mine == gen) then
      redis.call('HSET', call, 'holder', holder, 'gen', gen, 'state', 'done', 'share', a)
      redis.call('EXPIRE', call, window_ttl)
      redis.call('PUBLISH', channel, 's ' .. holder .. ' ' .. key)
    elseif mine == gen then
      redis.call('DEL', call)
      redis.call('PUBLISH', channel, 'u ' .. holder .. ' ' .. key)
    end
    if b ~= '' or joined then
      local out = prefix .. 'callx:' .. gen
      if b == '' then b = '{"retry":true}' end
      redis.call('XADD', out, '*', 'o', b)
      redis.call('EXPIRE', out, outcome_ttl)
    end
  end
end
return 0
"""

#: KEYS: the call's hash; ARGV: the lease keys' prefix, the mode, whether the request streams.
_JOIN_SCRIPT = """
local h = redis.call('HMGET', KEYS[1], 'holder', 'gen', 'state', 'share')
if not h[1] or not h[2] then return false end
if h[3] == 'done' then
  if h[4] == 'any' or (h[4] == 'nonstream' and ARGV[3] == '0') then
    return {'done', h[2], h[1]}
  end
  return false
end
if redis.call('EXISTS', ARGV[1] .. h[1]) == 0 then
  redis.call('DEL', KEYS[1])
  return false
end
if ARGV[2] == 'all' or h[3] == 'idle' then
  redis.call('HSET', KEYS[1], 'state', 'busy', 'joined', '1')
  return {'joined', h[2], h[1]}
end
return false
"""

#: KEYS: the call's hash; ARGV: its gen. Forget a call whose process died.
_FORGET_SCRIPT = """
if redis.call('HGET', KEYS[1], 'gen') == ARGV[1] then redis.call('DEL', KEYS[1]) end
return 0
"""


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


class RedisCalls:
    """The calls of one :class:`~aiostream_synth._store.redis.RedisStore` (its client, key
    prefix, holder and lease); every operation may raise :class:`StoreUnavailable`."""

    def __init__(self, store: RedisStore, *, window_s: float) -> None:
        self._store = store
        self._client = store._client
        self.holder = store.holder
        self.lease_s = store.lease_s
        self._prefix = store.prefix
        self._lease_prefix = f"{store.prefix}lease:"
        self._window_ttl = max(1, math.ceil(window_s))
        self._outcome_ttl = max(60, self._window_ttl)

    def _fail(self, exc: BaseException) -> StoreUnavailable:
        return StoreUnavailable(f"{self._store!r}: {exc}")

    async def write(self, ops: Sequence[CallOp]) -> None:
        """The queued writes of this process's calls, in order, in one script call."""
        args: list[str | bytes | int] = [
            self._prefix,
            self.holder,
            self._store._ttl,
            self._window_ttl,
            self._outcome_ttl,
        ]
        for op in ops:
            args.extend(op)
        try:
            with anyio.fail_after(self._store.timeout_s):
                await self._client.eval(_CALLS_SCRIPT, [], args)
        except _FAILURES as exc:
            raise self._fail(exc) from None

    async def join(self, key: str, mode: str, stream: bool) -> Joined | None:
        """Join the call under ``key`` run by another process when ``mode`` lets a request
        (``stream``: whether it streams) share it; None when there is none to share."""
        try:
            with anyio.fail_after(self._store.timeout_s):
                found = await self._client.eval(
                    _JOIN_SCRIPT,
                    [f"{self._prefix}call:{key}"],
                    [self._lease_prefix, mode, "1" if stream else "0"],
                )
        except _FAILURES as exc:
            raise self._fail(exc) from None
        if not isinstance(found, list | tuple) or len(found) != 3:
            return None
        kind, gen, holder = (_text(part) for part in found)
        if holder == self.holder or kind not in ("joined", "done"):
            return None  # this process's own call: its coalescer answers for it
        return ("joined" if kind == "joined" else "done", gen, holder)

    async def tell(self, holder: str, message: str) -> int:
        """Publish ``message`` to ``holder``; how many processes heard it."""
        try:
            with anyio.fail_after(self._store.timeout_s):
                heard = await self._client.publish(f"{self._prefix}calls:{holder}", message)
        except _FAILURES as exc:
            raise self._fail(exc) from None
        return int(heard)

    async def outcome(self, gen: str, wait_s: float) -> bytes | None:
        """The outcome of call ``gen`` (JSON), waiting up to ``wait_s`` seconds for it
        (0: not at all); None when there is none yet."""
        out = f"{self._prefix}callx:{gen}"
        try:
            with anyio.fail_after(self._store.timeout_s + wait_s):
                if wait_s > 0:
                    found: Any = await self._client.xread(
                        {out: "0-0"}, count=1, block=max(1, round(wait_s * 1000))
                    )
                    entries = next(iter(found.values()), ()) if found else ()
                else:
                    entries = await self._client.xrange(out, "-", "+", count=1)
        except _FAILURES as exc:
            raise self._fail(exc) from None
        for entry in entries:
            value = entry.field_values.get(b"o")
            if value is not None:
                return value if isinstance(value, bytes) else value.encode()
        return None

    async def alive(self, holder: str, key: str, gen: str) -> bool:
        """Whether ``holder`` holds its lease; when it does not, its call ``gen`` under ``key``
        is forgotten (a retry then starts a fresh one)."""
        try:
            with anyio.fail_after(self._store.timeout_s):
                if await self._client.exists([self._lease_prefix + holder]):
                    return True
                await self._client.eval(_FORGET_SCRIPT, [f"{self._prefix}call:{key}"], [gen])
        except _FAILURES as exc:
            raise self._fail(exc) from None
        return False

    async def listen(
        self, on_message: Callable[[str], object], on_announced: Callable[[str], object]
    ) -> None:
        """Call ``on_message`` with each message told to this process, and ``on_announced``
        with each announcement of the calls that may be shared, until cancelled."""

        def heard(message: Any) -> None:
            data = message.get("data")
            if isinstance(data, bytes | str):
                on_message(_text(data))

        def announced(message: Any) -> None:
            data = message.get("data")
            if isinstance(data, bytes | str):
                on_announced(_text(data))

        try:
            async with self._client.pubsub(
                channel_handlers={
                    f"{self._prefix}calls:{self.holder}": heard,
                    f"{self._prefix}calls": announced,
                },
                ignore_subscribe_messages=True,
            ):
                await anyio.sleep_forever()
        except _FAILURES as exc:
            raise self._fail(exc) from None
