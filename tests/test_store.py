"""The stores (issue 30): what each one does (replay from any sequence number, waiters woken by
new events, delete), on the memory store and on a real Redis, on asyncio and trio; and the
memory store's bounds (oldest evicted first, logged and counted; a TTL after the last event)."""

from __future__ import annotations

import logging
import tracemalloc
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import anyio
import pytest

from aiostream_synth._store.base import ResponseStore
from aiostream_synth._store.memory import MemoryStore
from aiostream_synth._store.redis import RedisStore

from .support.redis_server import redis_server

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Both loops on real clocks: a Redis server answers in real time (trio's autojumping
    MockClock would expire every network deadline at once)."""
    return str(request.param)


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as (url, _):
        yield url


@pytest.fixture(params=["memory", "redis"])
async def store(request: pytest.FixtureRequest) -> AsyncIterator[ResponseStore]:
    chosen: Any = (
        MemoryStore()
        if request.param == "memory"
        else RedisStore(request.getfixturevalue("redis_url"), prefix=f"t{uuid.uuid4().hex}:")
    )
    async with chosen:
        yield chosen


async def test_events_are_replayed_from_any_sequence_number(store: ResponseStore) -> None:
    await store.create("r1", "owner", {"id": "r1"}, input_items=[{"role": "user", "content": "x"}])
    await store.append("r1", [(0, b"a"), (1, b"b")], {"id": "r1", "status": "in_progress"})
    await store.append("r1", [(2, b"c")], {"id": "r1", "status": "completed"}, done=True)
    stored = await store.get("r1")
    assert stored is not None
    assert (stored.owner, stored.done, stored.last_sequence) == ("owner", True, 2)
    assert stored.object["status"] == "completed"
    assert await store.events("r1", -1) == [(0, b"a"), (1, b"b"), (2, b"c")]
    assert await store.events("r1", 1) == [(2, b"c")]
    assert await store.events("r1", 2) == []
    assert stored.input == [{"role": "user", "content": "x"}]
    assert await store.delete("r1")
    assert await store.get("r1") is None
    assert not await store.delete("r1")
    assert await store.events("r1", -1) == []


async def test_the_oldest_response_is_evicted_beyond_the_bound(
    caplog: pytest.LogCaptureFixture,
) -> None:
    store = MemoryStore(max_bytes=4000)
    for name in ("old", "mid", "new"):
        await store.create(name, "o", {"id": name})
        await store.append(name, [(0, b"x" * 1000)])
    assert store.bytes <= store.max_bytes
    assert await store.get("old") is None
    assert await store.get("new") is not None
    assert store.evicted == 1
    assert "store: evicted old" in caplog.text
    assert caplog.records[-1].levelno == logging.WARNING


async def test_a_response_expires_its_ttl_after_its_last_event() -> None:
    now = [100.0]
    store = MemoryStore(ttl_s=10, clock=lambda: now[0])
    await store.create("r1", "o", {"id": "r1"})
    now[0] += 9
    await store.append("r1", [(0, b"a")])  # an event: its TTL starts again
    now[0] += 9
    assert await store.get("r1") is not None
    now[0] += 2
    assert await store.get("r1") is None
    assert store.expired == 1
    assert store.bytes == 0


async def test_a_kept_input_holds_its_own_size_only() -> None:
    """A waiting stream of a stored response keeps its input serialized; orjson's own result
    would keep ~4 KiB of capacity behind a one-line input (#32 §1: 16.2 KiB per waiting stream
    instead of 12)."""
    store = MemoryStore()
    items = [{"type": "message", "role": "user", "content": "hello"}]
    count = 200
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for k in range(count):
            await store.create(f"r{k}", "owner", {"id": f"r{k}"}, input_items=items)
        per_response = (tracemalloc.get_traced_memory()[0] - before) / count
    finally:
        tracemalloc.stop()
    assert per_response < 1500, f"{per_response:.0f} bytes per stored response"
    kept = await store.get("r0")
    assert kept is not None
    assert kept.input == items


async def test_a_waiter_wakes_on_the_next_event(store: ResponseStore) -> None:
    await store.create("r1", "o", {"id": "r1"})
    woke: list[int] = []

    async def wait_for_more(after: int) -> None:
        await store.wait("r1", after, max_wait_s=60)
        woke.append(after)

    with anyio.fail_after(30):
        async with anyio.create_task_group() as group:
            group.start_soon(wait_for_more, -1)
            await anyio.wait_all_tasks_blocked()
            assert woke == []
            await store.append("r1", [(0, b"a")])
        assert woke == [-1]
        await store.wait("r1", -1, max_wait_s=60)  # there is one already: at once


async def test_a_wait_on_an_unknown_or_finished_memory_response_returns_at_once() -> None:
    store = MemoryStore()
    with anyio.fail_after(5):
        await store.wait("nope", -1, max_wait_s=60)
        await store.create("r1", "o", {"id": "r1"})
        await store.append("r1", [], done=True)
        await store.wait("r1", -1, max_wait_s=60)


async def test_a_redis_wait_returns_after_its_longest_wait(redis_url: str) -> None:
    async with RedisStore(redis_url, prefix=f"t{uuid.uuid4().hex}:") as store:
        await store.create("r1", "o", {"id": "r1"})
        with anyio.fail_after(10):
            await store.wait("r1", -1, max_wait_s=0.05)


def test_a_redis_url_is_checked() -> None:
    with pytest.raises(ValueError, match="redis://host:port/db"):
        RedisStore("127.0.0.1:6379")


@pytest.mark.parametrize(("max_bytes", "ttl_s"), [(0, 1.0), (10, 0.0), (10, -1.0)])
def test_bounds_are_checked(max_bytes: int, ttl_s: float) -> None:
    with pytest.raises(ValueError, match="must be"):
        MemoryStore(max_bytes=max_bytes, ttl_s=ttl_s)
