"""The stores (issue 30): what each one does (replay from any sequence number, waiters woken by
new events, delete), on the memory store and on a real Redis, on asyncio and trio; and the
memory store's bounds (oldest evicted first, logged and counted; a TTL after the last event)."""

from __future__ import annotations

import logging
import tracemalloc
import uuid
from collections.abc import AsyncIterator
from typing import Any

import anyio
import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiostream_synth._store.base import (
    Creation,
    ResponseStore,
    StoreUnavailable,
    UnknownCursor,
    Write,
    with_keepalives,
)
from aiostream_synth._store.memory import MemoryStore
from aiostream_synth._store.redis import RedisStore
from aiostream_synth._wire.json import dumps_exact

from .support.properties import property_settings

pytestmark = pytest.mark.anyio

#: Event frames as the dialects make them: one SSE event each, ending with a blank line.
A, B, C = (b'event: e\ndata: {"n":"%b"}\n\n' % name for name in (b"a", b"b", b"c"))
#: A keepalive frame cut around its number, and the keepalive numbered ``n``.
TEMPLATE = (b'event: k\ndata: {"sequence_number":', b"}\n\n")


def keepalive(n: int) -> bytes:
    return TEMPLATE[0] + str(n).encode() + TEMPLATE[1]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Both loops on real clocks: a Redis server answers in real time (trio's autojumping
    MockClock would expire every network deadline at once)."""
    return str(request.param)


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
    await store.append("r1", [(0, A), (1, B)], {"id": "r1", "status": "in_progress"})
    await store.append("r1", [(2, C)], {"id": "r1", "status": "completed"}, done=True)
    stored = await store.get("r1")
    assert stored is not None
    assert (stored.owner, stored.done, stored.last_sequence) == ("owner", True, 2)
    assert stored.object["status"] == "completed"
    assert await store.events("r1", -1) == [(0, A), (1, B), (2, C)]
    assert await store.events("r1", 0) == [(1, B), (2, C)]
    assert await store.events("r1", 1) == [(2, C)]
    assert await store.events("r1", 2) == []
    assert stored.input == [{"role": "user", "content": "x"}]
    assert await store.delete("r1")
    assert await store.get("r1") is None
    assert not await store.delete("r1")
    assert await store.events("r1", -1) == []


async def test_a_creation_may_come_serialized(store: ResponseStore) -> None:
    """A creation through the writer may carry its object and input as JSON already (what the
    server queues, so that a wave holds compact strings rather than trees of objects): it reads
    back as the same creation made of objects does, its input included (what a request
    continuing it is given)."""
    items = [{"role": "user", "content": "x \u00e9 \U0001f600"}, {"type": "reasoning", "n": 2**40}]
    obj = {"id": "?", "object": "response", "status": "in_progress"}
    await store.append_many(
        {
            "as-objects": Write(Creation("o", {**obj, "id": "as-objects"}, items), [(0, A)]),
            "as-json": Write(
                Creation(
                    "o",
                    dumps_exact({**obj, "id": "as-json"}),
                    dumps_exact(items),
                    background=True,
                ),
                [(0, A)],
            ),
            "no-input": Write(Creation("o", dumps_exact({**obj, "id": "no-input"})), []),
        }
    )
    made = {name: await store.get(name) for name in ("as-objects", "as-json", "no-input")}
    for name, stored in made.items():
        assert stored is not None, name
        assert stored.object == {**obj, "id": name}
        assert not stored.done
    inputs = {name: None if stored is None else stored.input for name, stored in made.items()}
    assert inputs == {"as-objects": items, "as-json": items, "no-input": None}
    assert await store.events("as-json", -1) == [(0, A)]


async def test_many_responses_written_in_one_call_read_back_byte_for_byte(
    store: ResponseStore,
) -> None:
    """One call carrying many responses' writes (on Redis each response's part is one string
    the script takes apart): every frame, field and object reads back exactly, whatever its
    bytes (NUL, bytes that are not UTF-8, a frame of 200 KB), in one run or in runs broken by
    numbers kept elsewhere (keepalives), and a response's end: its object given apart from
    its events, or carried by its terminal event (on Redis then sent once, in the frames)."""
    odd = b'event: e\ndata: {"x":"\x00\xff\xfe\x80"}\n\n'
    big = b'event: e\ndata: {"x":"' + b"\x01y" * 100_000 + b'"}\n\n'
    writes = {}
    last = {k: 3 if k % 3 == 0 else 5 for k in range(30)}  # C's number: one run, or two
    ends = {}  # each response's last frame
    for k in range(30):
        obj: dict[str, Any] | bytes = {
            "id": f"r{k}",
            "status": "completed",
            "text": "\u00e9\U0001f600\x00",
        }
        ends[k] = C
        if k % 4 == 1:  # a terminal event carrying the object, given as bytes (as the writer)
            obj = orjson.dumps(obj)
            ends[k] = b'event: done\ndata: {"response":%b,"sequence_number":%d}\n\n' % (
                obj,
                last[k],
            )
        events = [(0, A), (1, odd), (2, big if k % 7 == 0 else B), (last[k], ends[k])]
        creation = Creation(f"owner {k}", {"id": f"r{k}"}, [{"content": "\x00"}], background=True)
        writes[f"r{k}"] = Write(
            creation, events, obj, done=k % 2 == 0, keepalive=TEMPLATE, last=last[k]
        )
    await store.append_many(writes)
    for k in range(30):
        read = await store.read(f"r{k}", -1)
        assert read is not None
        stored, events = read
        assert (stored.owner, stored.done, stored.last_sequence) == (
            f"owner {k}",
            k % 2 == 0,
            last[k],
        )
        written = writes[f"r{k}"].object
        assert stored.object == (orjson.loads(written) if isinstance(written, bytes) else written)
        kept = [(n, keepalive(n)) for n in range(3, last[k])]  # between the two runs
        middle = big if k % 7 == 0 else B
        assert events == [(0, A), (1, odd), (2, middle), *kept, (last[k], ends[k])]
        got = await store.get(f"r{k}")
        assert got is not None
        assert got.input == [{"content": "\x00"}]


async def test_an_owners_list_holds_its_answers_by_their_place_while_they_are_kept(
    store: ResponseStore,
) -> None:
    """A list of an owner's answers (stored chat completions): by the place each was given
    (not by when its creation was written), each owner's own, without those deleted, and
    an answer's object replaced in place."""
    await store.create("c2", "ann", {"id": "c2"}, listed_in="chat", listed_at=2.0)
    await store.create("c1", "ann", {"id": "c1"}, listed_in="chat", listed_at=1.0)
    await store.append_many(
        {"c3": Write(Creation("ann", {"id": "c3"}, listed_in="chat", listed_at=3.0), [])}
    )
    await store.create("b1", "bob", {"id": "b1"}, listed_in="chat", listed_at=1.5)
    await store.create("r1", "ann", {"id": "r1"})  # in no list
    await store.create("o1", "ann", {"id": "o1"}, listed_in="other", listed_at=0.5)
    assert await store.listed("chat", "ann", 10) == ["c1", "c2", "c3"]
    assert await store.listed("chat", "bob", 10) == ["b1"]
    assert await store.listed("other", "ann", 10) == ["o1"]
    assert await store.listed("chat", "nobody", 10) == []
    assert await store.delete("c2")
    assert await store.listed("chat", "ann", 10) == ["c1", "c3"]
    assert await store.replace_object("c3", {"id": "c3", "metadata": {"k": "v"}})
    got = await store.get("c3")
    assert got is not None
    assert got.object == {"id": "c3", "metadata": {"k": "v"}}
    assert not await store.replace_object("c2", {"id": "c2"})
    for gone in ("c1", "c3", "b1", "o1"):
        await store.delete(gone)
    assert await store.listed("chat", "ann", 10) == []
    if isinstance(store, MemoryStore):
        assert store._lists == {}  # a list holds nothing of what left the store
    else:  # what a walk found gone is taken out of the list
        assert isinstance(store, RedisStore)
        client: Any = store._client
        assert await client.zcard(store._list_key("chat", "ann")) == 0


@pytest.mark.parametrize("loop", ["asyncio", "trio"])
@given(
    places=st.lists(st.integers(0, 6), max_size=40),
    data=st.data(),
)
@property_settings(100)
def test_a_list_is_walked_from_its_cursors_as_the_whole_list_would_be_cut(
    loop: str, redis_url: str, places: list[int], data: st.DataObject
) -> None:
    """``listed``: any count, order and cursors give what cutting the whole list (ids by
    place, then id, as a Redis sorted set orders ties) would give, with what is gone left out
    wherever it lies; a cursor naming no kept answer of the list is refused by name. On both
    stores, each walk a step of its own (at most ``count`` ids walked)."""
    ids = [f"a{n:02d}" for n in range(len(places))]
    gone = data.draw(st.sets(st.sampled_from(ids)) if ids else st.just(set[str]()))
    count = data.draw(st.integers(0, 45))
    descending = data.draw(st.booleans())
    cursor = st.none() | st.sampled_from([*ids, "other-owners"])
    after, before = data.draw(cursor), data.draw(cursor)
    order = [kept for _, kept in sorted(zip(places, ids, strict=True)) if kept not in gone]
    if descending:
        order.reverse()
    expected: list[str] | str
    if after is not None and after not in order:
        expected = "after"
    elif before is not None and before not in order:
        expected = "before"
    else:
        start = 0 if after is None else order.index(after) + 1
        stop = len(order) if before is None else order.index(before)
        expected = order[start:stop][:count]

    async def walk(store: ResponseStore) -> list[str] | str:
        async with store:
            for kept, place in zip(ids, places, strict=True):
                await store.create(kept, "ann", {"id": kept}, listed_in="chat", listed_at=place)
            await store.create("other-owners", "bob", {}, listed_in="chat", listed_at=1)
            for left in gone:
                await store.delete(left)
            try:
                return await store.listed(
                    "chat", "ann", count, descending=descending, after=after, before=before
                )
            except UnknownCursor as exc:
                return exc.param if exc.cursor == (after, before)[exc.param == "before"] else "?"

    redis = RedisStore(redis_url, prefix=f"t{uuid.uuid4().hex}:")
    assert anyio.run(walk, MemoryStore(), backend=loop) == expected
    assert anyio.run(walk, redis, backend=loop) == expected


async def test_an_update_leaves_a_responses_ttl_as_it_was(redis_url: str) -> None:
    """``replace_object`` changes what a response carries, not how long it is kept: on both
    stores it expires when it would have, so it never outlives its place in its owner's list
    (which lives as long as the latest answer added to it)."""
    now = [0.0]
    memory = MemoryStore(ttl_s=10, clock=lambda: now[0])
    await memory.create("c", "ann", {"id": "c"}, listed_in="chat", listed_at=1.0)
    now[0] = 9.0
    assert await memory.replace_object("c", {"id": "c", "metadata": {"k": "v"}})
    now[0] = 10.5
    assert await memory.get("c") is None
    assert await memory.listed("chat", "ann", 10) == []
    prefix = f"t{uuid.uuid4().hex}:"
    async with RedisStore(redis_url, prefix=prefix, ttl_s=400) as redis:
        await redis.create("c", "ann", {"id": "c"}, listed_in="chat", listed_at=1.0)
        client: Any = redis._client
        await client.expire(f"{prefix}r:c", 50)  # as if time had passed on the server
        assert await redis.replace_object("c", {"id": "c", "metadata": {"k": "v"}})
        assert 0 < await client.ttl(f"{prefix}r:c") <= 50
        assert await client.ttl(redis._list_key("chat", "ann")) > 350
        got = await redis.get("c")
        assert got is not None
        assert got.object["metadata"] == {"k": "v"}


async def test_a_memory_list_forgets_what_expires_or_is_evicted() -> None:
    now = [0.0]
    store = MemoryStore(max_bytes=4500, ttl_s=10, clock=lambda: now[0])  # two entries
    await store.create("old", "ann", {"id": "old"}, listed_in="chat", listed_at=1.0)
    now[0] = 20.0  # "old" expired
    await store.create("a", "ann", {"id": "a", "pad": "x" * 1500}, listed_in="chat")
    await store.create("b", "ann", {"id": "b", "pad": "x" * 1500}, listed_in="chat")
    await store.create("c", "ann", {"id": "c", "pad": "x" * 1500}, listed_in="chat")  # evicts a
    assert await store.listed("chat", "ann", 10) == ["b", "c"]
    assert store._lists == {("chat", "ann"): store._lists["chat", "ann"]}
    assert set(store._lists["chat", "ann"].places) == {"b", "c"}
    assert [kept for _, kept in store._lists["chat", "ann"].order] == ["b", "c"]


async def test_keepalives_are_kept_as_one_template_and_replayed_numbered(
    store: ResponseStore,
) -> None:
    """A waiting response's keepalives are not written one by one: the store keeps their
    template and the latest number, and replays every number it did not keep as that keepalive,
    between its events and after the last one."""
    await store.create("r1", "o", {"id": "r1"})
    await store.append("r1", [(0, A)], {"id": "r1", "status": "in_progress"})
    await store.append("r1", [], keepalive=TEMPLATE, last=1)
    await store.append("r1", [], last=4)  # three more keepalives: their number only
    stored = await store.get("r1")
    assert stored is not None
    assert stored.last_sequence == 4
    expected = [(0, A), *((n, keepalive(n)) for n in range(1, 5))]
    assert await store.events("r1", -1) == expected
    assert await store.events("r1", 2) == expected[3:]
    await store.append("r1", [(5, B), (6, C)], {"id": "r1", "status": "completed"}, done=True)
    stored = await store.get("r1")
    assert stored is not None
    assert (stored.done, stored.last_sequence) == (True, 6)
    assert await store.events("r1", 3) == [(4, keepalive(4)), (5, B), (6, C)]
    assert await store.events("r1", 6) == []


async def test_a_read_gives_the_response_and_its_events_in_one_step(store: ResponseStore) -> None:
    """What a reader needs (``read``): the response as ``get`` gives it but for its input
    (only a request continuing it needs that, and it may be large), with its events above a
    number, keepalives rendered, or none when no number is given."""
    items = [{"role": "user", "content": "x" * 1000}]
    await store.create("r1", "o", {"id": "r1"}, input_items=items, background=True)
    await store.append("r1", [(0, A)], {"id": "r1", "status": "in_progress"})
    await store.append("r1", [], keepalive=TEMPLATE, last=2)
    read = await store.read("r1", -1)
    assert read is not None
    stored, events = read
    got = await store.get("r1")
    assert got is not None
    assert got.input == items
    assert stored.input is None
    assert (stored.owner, stored.object, stored.done, stored.last_sequence) == (
        got.owner,
        got.object,
        got.done,
        got.last_sequence,
    )
    assert (stored.background, stored.abandoned) == (True, False)
    assert events == [(0, A), (1, keepalive(1)), (2, keepalive(2))]
    assert await store.read("r1") == (stored, [])
    await store.append("r1", [(3, B)], {"id": "r1", "status": "completed"}, done=True)
    read = await store.read("r1", 1)
    assert read is not None
    assert read[0].done
    assert read[1] == [(2, keepalive(2)), (3, B)]
    assert await store.read("nope", -1) is None
    assert await store.read("r1", -5) == await store.read("r1", -1)  # from the start


async def test_a_read_the_server_refuses_fails_alone_in_its_batch(redis_url: str) -> None:
    """One read of a batch refused by Redis (its key holds another type) fails with
    :class:`StoreUnavailable`; the reads sent with it get their answers."""
    async with RedisStore(redis_url, prefix=f"t{uuid.uuid4().hex}:") as store:
        await store.create("good", "o", {"id": "good"})
        client: Any = store._client
        await client.set(f"{store.prefix}r:bad", b"not a hash")
        got: dict[str, Any] = {}

        async def reader(response_id: str) -> None:
            try:
                got[response_id] = await store.read(response_id, -1)
            except StoreUnavailable as exc:
                got[response_id] = exc

        pipelines = _CountedPipelines(store)
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                for response_id in ("good", "bad", "good2"):
                    group.start_soon(reader, response_id)
        assert pipelines.count == 1
        assert isinstance(got["bad"], StoreUnavailable)
        assert got["good"] is not None
        assert got["good"][0].object == {"id": "good"}
        assert got["good2"] is None


class _CountedPipelines:
    """A Redis store's client whose pipelines are counted (each is one round trip)."""

    def __init__(self, store: RedisStore) -> None:
        self.count = 0
        client: Any = store._client
        real = client.pipeline

        def pipeline(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            return real(*args, **kwargs)

        client.pipeline = pipeline


async def test_concurrent_redis_reads_share_a_round_trip(redis_url: str) -> None:
    """Reads made at once (resumes, followers on another replica) go to Redis together, one
    pipeline for the batch rather than a round trip each (a round trip costs the client far
    more CPU than a call in it); each reader gets its own answer."""
    async with RedisStore(redis_url, prefix=f"t{uuid.uuid4().hex}:") as store:
        for n in range(30):
            await store.create(f"r{n}", f"o{n}", {"id": f"r{n}"}, background=True)
            await store.append(f"r{n}", [(k, b"e %d %d\n\n" % (n, k)) for k in range(n % 4)])
        pipelines = _CountedPipelines(store)
        got: dict[str, Any] = {}

        async def reader(response_id: str, after: int) -> None:
            got[response_id] = await store.read(response_id, after)

        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                for n in range(30):
                    group.start_soon(reader, f"r{n}", 0)
                for n in range(10):
                    group.start_soon(reader, f"unknown{n}", 0)
        assert pipelines.count == 1
        for n in range(30):
            read = got[f"r{n}"]
            assert read is not None
            assert read[0].owner == f"o{n}"
            assert read[1] == [(k, b"e %d %d\n\n" % (n, k)) for k in range(1, n % 4)]
        assert all(got[f"unknown{n}"] is None for n in range(10))


async def test_a_cancelled_reader_leaves_the_rest_of_its_batch_answered(redis_url: str) -> None:
    """The reader sending a batch is cancelled: the batch still goes (bounded by the store's
    timeout) and every other reader of it gets its answer, none waits forever; a reader
    cancelled while it waits for a batch is taken out of it."""
    async with RedisStore(redis_url, prefix=f"t{uuid.uuid4().hex}:") as store:
        for n in range(10):
            await store.create(f"r{n}", "o", {"id": f"r{n}"})
        got: dict[int, Any] = {}

        async def reader(n: int, cancelled: bool) -> None:
            with anyio.CancelScope() as scope:
                if cancelled:
                    scope.cancel()
                got[n] = await store.read(f"r{n}")

        pipelines = _CountedPipelines(store)
        with anyio.fail_after(30):
            async with anyio.create_task_group() as group:
                for n in range(1, 10):
                    group.start_soon(reader, n, n == 5)
                # This task reads first (the others have not run yet): it sends the batch.
                with anyio.CancelScope() as scope:
                    scope.cancel()
                    got[0] = await store.read("r0")
                assert scope.cancelled_caught
        assert 0 not in got
        assert 5 not in got
        assert sorted(got) == [1, 2, 3, 4, 6, 7, 8, 9]
        assert all(
            read is not None and read[0].object == {"id": f"r{n}"} for n, read in got.items()
        )
        assert 1 <= pipelines.count <= 2  # trio may run some readers after the batch went
        assert store._queued == []


async def test_a_failed_batch_fails_each_of_its_readers(redis_url: str) -> None:
    """Redis does not answer a batch within the store's timeout: every reader of it gets
    :class:`StoreUnavailable` (none waits on), and the next read goes through."""
    async with RedisStore(redis_url, prefix=f"t{uuid.uuid4().hex}:", timeout_s=0.3) as store:
        await store.create("r0", "o", {"id": "r0"})
        failed: list[int] = []

        async def reader(n: int) -> None:
            with pytest.raises(StoreUnavailable):
                await store.read("r0", -1)
            failed.append(n)

        admin: Any = store._client
        with anyio.fail_after(30):
            await admin.client_pause(2000)  # every command held 2 s, beyond the timeout
            try:
                async with anyio.create_task_group() as group:
                    for n in range(5):
                        group.start_soon(reader, n)
            finally:
                await admin.client_unpause()
            assert sorted(failed) == list(range(5))
            assert await store.read("r0", -1) is not None


async def test_a_waiting_response_costs_the_store_no_command_per_keepalive(redis_url: str) -> None:
    """On Redis, the keepalives of any number of waiting responses are one call per flush:
    their streams hold only their other events."""
    prefix = f"t{uuid.uuid4().hex}:"
    async with RedisStore(redis_url, prefix=prefix) as store:
        for name in ("r1", "r2"):
            await store.create(name, "o", {"id": name})
            await store.append(name, [(0, A)], keepalive=TEMPLATE, last=1)
        await store.append_many({}, {"r1": 8, "r2": 9})  # keepalive numbers only
        await store.append_many({"r1": Write(None, [], last=9)})
        client: Any = store._client
        assert await client.xlen(f"{prefix}e:r1") == 1
        assert await client.hgetall(f"{prefix}progress") == {b"r1": b"9", b"r2": b"9"}
        assert [n for n, _ in await store.events("r2", 7)] == [8, 9]
        await store.append("r1", [(10, C)], done=True)
        assert await client.hgetall(f"{prefix}progress") == {b"r2": b"9"}
        assert await store.delete("r2")
        assert await client.hgetall(f"{prefix}progress") == {}


async def test_keepalives_renew_a_waiting_responses_ttl_once_a_quarter_ttl(redis_url: str) -> None:
    """On Redis, a waiting response's keys live ``ttl_s`` after its last write, and its
    keepalives renew them once it has waited a quarter of that since: each response when it
    is due, whichever of them the flush before looked up."""
    prefix = f"t{uuid.uuid4().hex}:"
    now = [1000.0]
    async with RedisStore(redis_url, prefix=prefix, ttl_s=400, clock=lambda: now[0]) as store:
        client: Any = store._client

        async def ttls() -> dict[str, int]:
            return {name: await client.ttl(f"{prefix}r:{name}") for name in ("r1", "r2")}

        async def shorten() -> None:  # as if time had passed on the server
            for name in ("r1", "r2"):
                await client.expire(f"{prefix}r:{name}", 50)
                await client.expire(f"{prefix}e:{name}", 50)

        await store.create("r1", "o", {"id": "r1"})
        await store.append("r1", [(0, A)], keepalive=TEMPLATE)  # due at 1100
        now[0] += 60
        await store.create("r2", "o", {"id": "r2"})
        await store.append("r2", [(0, A)], keepalive=TEMPLATE)  # due at 1160
        await shorten()
        now[0] = 1099.0
        await store.append_many({}, {"r1": 3, "r2": 3})
        assert all(0 < ttl <= 50 for ttl in (await ttls()).values())
        now[0] = 1100.0
        await store.append_many({}, {"r1": 4, "r2": 4})
        ttl = await ttls()
        assert 350 < ttl["r1"] <= 400
        assert 0 < ttl["r2"] <= 50
        assert 350 < await client.ttl(f"{prefix}e:r1") <= 400
        await shorten()
        now[0] = 1160.0
        await store.append_many({}, {"r2": 5})  # r1's keepalive in another flush
        await store.append_many({}, {"r1": 5})
        ttl = await ttls()
        assert 0 < ttl["r1"] <= 50  # renewed at 1100: due again at 1200
        assert 350 < ttl["r2"] <= 400


async def test_only_a_background_response_is_followed_for_renewals(redis_url: str) -> None:
    """A response kept as it streams sends no keepalive numbers, so nothing would ever renew
    it: the Redis store holds no renewal time for it (one fewer entry per waiting stream)."""
    async with RedisStore(redis_url, prefix=f"t{uuid.uuid4().hex}:") as store:
        await store.append_many(
            {
                "kept": Write(Creation("o", {"id": "kept"}), []),
                "bg": Write(Creation("o", {"id": "bg"}, background=True), [(0, A)]),
            }
        )
        assert set(store._renew_at) == {"bg"}
        await store.append_many({"bg": Write(None, [(1, B)], {"id": "bg"}, done=True)})
        assert store._renew_at == {}


@pytest.mark.parametrize("odd_id", [None, "with space"], ids=["ids of ours", "an id with a space"])
async def test_keepalive_numbers_of_many_responses_reach_the_hash(
    redis_url: str, odd_id: str | None
) -> None:
    """A flush's keepalive numbers go to Redis packed in one argument (10,000 of them here, a
    flush's most: the script sets them 3,500 a command), each field then holding its own
    number and the hash its TTL; an id the packing cannot carry (a space in it) sends them
    field by field."""
    prefix = f"t{uuid.uuid4().hex}:"
    names = [f"resp_{n:05d}" for n in range(10_000)] + ([odd_id] if odd_id else [])
    numbers = {name: 3 + n for n, name in enumerate(names)}
    async with RedisStore(redis_url, prefix=prefix, ttl_s=600) as store:
        await store.append_many({}, numbers)
        client: Any = store._client
        stored = await client.hgetall(f"{prefix}progress")
        assert {k.decode(): int(v) for k, v in stored.items()} == numbers
        assert 0 < await client.ttl(f"{prefix}progress") <= 600


@given(
    stored=st.sets(st.integers(0, 40), max_size=12),
    last=st.integers(-1, 45),
    after=st.integers(-1, 45),
)
@property_settings(300)
def test_keepalives_fill_exactly_the_numbers_not_kept(
    stored: set[int], last: int, after: int
) -> None:
    """Every number above ``after`` up to the latest appears once, in order: a kept event
    as it was kept, any other as the keepalive with that number."""
    events = [(n, b"event: e\ndata: %d\n\n" % n) for n in sorted(stored)]
    top = max([last, *stored])
    out = with_keepalives(events, after, last, TEMPLATE)
    assert [n for n, _ in out] == list(range(after + 1, top + 1))
    kept = dict(events)
    for n, frame in out:
        assert frame == kept.get(n, keepalive(n))
    without = with_keepalives(events, after, last, None)
    assert without == [event for event in events if event[0] > after]


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
    await store.append("r1", [(0, A)])  # an event: its TTL starts again
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
            await store.append("r1", [(0, A)])
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


async def test_a_response_is_abandoned_once_its_holders_lease_is_gone(redis_url: str) -> None:
    """Issue 31's liveness: a response in progress is abandoned when the process that created
    it holds no lease any more; another process ends it once, and the first process's later
    writes (it came back from a pause) are skipped instead of writing past that end."""
    prefix = f"t{uuid.uuid4().hex}:"
    async with (
        RedisStore(redis_url, prefix=prefix) as owner,
        RedisStore(redis_url, prefix=prefix) as reader,
    ):
        async with anyio.create_task_group() as group:
            await group.start(owner.hold)
            await owner.create("r1", "o", {"id": "r1"}, background=True)
            await owner.append("r1", [(0, A)], {"id": "r1", "status": "in_progress"})
            await owner.append_many({}, {"r1": 3})  # keepalives 1 to 3
            await owner.append("r1", [], keepalive=TEMPLATE)
            held = await reader.get("r1")
            group.cancel_scope.cancel()  # the lease is given back as the hold ends
        stored = await reader.get("r1")
        assert held is not None
        assert not held.abandoned
        assert stored is not None
        assert stored.abandoned
        assert stored.last_sequence == 3
        failed = {"id": "r1", "status": "failed"}
        assert await reader.end_abandoned("r1", [(4, C)], failed)
        assert not await owner.end_abandoned("r1", [(4, B)], failed)  # ended once
        await owner.append("r1", [(4, B), (5, B)], {"id": "r1", "status": "completed"}, done=True)
        ended = await reader.get("r1")
        assert ended is not None
        assert ended.done
        assert not ended.abandoned
        assert (ended.object, ended.last_sequence) == (failed, 4)
        assert await reader.events("r1", 0) == [(n, keepalive(n)) for n in (1, 2, 3)] + [(4, C)]


async def test_a_response_of_a_process_that_never_held_its_lease_is_abandoned(
    redis_url: str,
) -> None:
    """No lease at all (the process died before taking it, or never ran ``hold``): abandoned
    as soon as another process reads it (never to the process that holds it: without its
    lifespan it has no lease, and its responses are its own); a finished one never is; the
    lease itself is checked."""
    prefix = f"t{uuid.uuid4().hex}:"
    async with (
        RedisStore(redis_url, prefix=prefix) as store,
        RedisStore(redis_url, prefix=prefix) as other,
    ):
        await store.create("r1", "o", {"id": "r1"})
        await store.create("r2", "o", {"id": "r2"})
        await store.append("r2", [], {"id": "r2", "status": "completed"}, done=True)
        r1, r2, own = await other.get("r1"), await other.get("r2"), await store.get("r1")
        assert r1 is not None
        assert r1.abandoned
        assert r2 is not None
        assert not r2.abandoned
        assert own is not None
        assert not own.abandoned
        assert await other.end_abandoned("r1", [], {"id": "r1", "status": "failed"})
        assert await other.events("r1", -1) == []  # no events kept: only the object
    with pytest.raises(ValueError, match="lease_s must be"):
        RedisStore(redis_url, lease_s=0)


async def test_the_memory_store_never_abandons_and_ends_once() -> None:
    async with MemoryStore() as store:
        await store.create("r1", "o", {"id": "r1"})
        stored = await store.get("r1")
        assert stored is not None
        assert not stored.abandoned
        assert await store.end_abandoned("r1", [(0, A)], {"id": "r1", "status": "failed"})
        assert not await store.end_abandoned("r1", [(1, B)], {"id": "r1"})
        assert not await store.end_abandoned("unknown", [], {"id": "unknown"})
        assert await store.events("r1", -1) == [(0, A)]
        with anyio.fail_after(10):  # holds nothing, and starts at once
            async with anyio.create_task_group() as group:
                await group.start(store.hold)
                group.cancel_scope.cancel()


async def test_a_process_with_its_fleets_settings_joins_it_and_one_with_others_is_refused(
    redis_url: str,
) -> None:
    prefix = f"t{uuid.uuid4().hex}:"
    settings = {"coalesce": "retries", "store_lease_s": 30.0}
    async with RedisStore(redis_url, prefix=prefix, fleet=settings):
        async with RedisStore(redis_url, prefix=prefix, fleet=dict(settings)):
            pass  # alike: it joins
        async with RedisStore(redis_url, prefix=prefix):
            pass  # a store used without a fleet (a tool reading it) is not checked
        other = RedisStore(redis_url, prefix=prefix, fleet={**settings, "coalesce": "all"})
        with pytest.raises(StoreUnavailable, match="shared by servers with other settings"):
            await other.__aenter__()


def test_a_redis_url_is_checked() -> None:
    with pytest.raises(ValueError, match="redis://host:port/db"):
        RedisStore("127.0.0.1:6379")


@pytest.mark.parametrize(("max_bytes", "ttl_s"), [(0, 1.0), (10, 0.0), (10, -1.0)])
def test_bounds_are_checked(max_bytes: int, ttl_s: float) -> None:
    with pytest.raises(ValueError, match="must be"):
        MemoryStore(max_bytes=max_bytes, ttl_s=ttl_s)
