"""Background responses driven in process through the ASGI app, on asyncio and trio: what the
servers' tests cannot see. One lets go of everything once it ends (issue 30's benchmark found
the cost): no reference cycle keeps its engine stream, its call or its request alive until a
full collection, whether its client stayed to the end, left mid-wait, or it was cancelled.
And what is queued for the store when the lifespan ends is still written."""

from __future__ import annotations

import gc
import json
import logging
from collections.abc import Iterator
from typing import Any

import anyio
import pytest

from aiostream_synth._engine.stream import SynthesizedStream
from aiostream_synth._proxy.app import ProxyApp, ProxyConfig
from aiostream_synth._serving.pipeline import ON_DISCONNECT, RECEIVED_AT

from .support.asgi_client import Lifespan, OneRequest, post_scope

pytestmark = pytest.mark.anyio

K = 0.05  # the keepalive interval (trio's clock jumps; asyncio's is real)


@pytest.fixture
def no_collector() -> Iterator[list[Any]]:
    """The collector off, and what a collection then finds in cycles (saved, not freed)."""
    gc.collect()
    gc.disable()
    gc.set_debug(gc.DEBUG_SAVEALL)
    found: list[Any] = []
    try:
        yield found
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


class _Client(OneRequest):
    """A request whose first and second bodies are events to wait for."""

    def __init__(self, body: bytes) -> None:
        super().__init__(body)
        self.first_body = anyio.Event()
        self.second_body = anyio.Event()

    async def send(self, message: Any) -> None:
        await super().send(message)
        if message["type"] == "http.response.body":
            (self.second_body if self.first_body.is_set() else self.first_body).set()


def _with_key(scope: dict[str, Any]) -> dict[str, Any]:
    scope["headers"] = [*scope["headers"], (b"authorization", b"Bearer k")]
    return scope


def _streaming_background(delay: float) -> tuple[_Client, dict[str, Any]]:
    """A streaming background request answered after ``delay``, and its scope (the
    disconnect heard by a callback, as the proxy's servers do)."""
    body = {"model": "m", "input": f"x [delay:{delay}]", "background": True, "stream": True}
    scope = _with_key(post_scope("/v1/responses"))
    scope[ON_DISCONNECT] = lambda callback: None
    return _Client(json.dumps(body).encode()), scope


@pytest.mark.parametrize("how", ["stays", "leaves", "cancelled"])
async def test_an_ended_background_response_is_in_no_reference_cycle(
    how: str, no_collector: list[Any]
) -> None:
    app = ProxyApp(ProxyConfig(keepalive_s=K, store="memory"))
    lifespan = Lifespan(app)
    delay = 600 if how == "cancelled" else 4 * K
    body = {"model": "m", "input": f"x [delay:{delay}]", "background": True, "stream": True}
    creator = _Client(json.dumps(body).encode())
    scope = _with_key(post_scope("/v1/responses"))
    if how != "leaves":  # as the proxy's servers do: the disconnect heard by a callback
        scope[ON_DISCONNECT] = lambda callback: None
    async with lifespan.to_app, lifespan.from_app, anyio.create_task_group() as group:
        group.start_soon(lifespan.run)
        await lifespan.say("startup")
        async with anyio.create_task_group() as client:
            client.start_soon(app, scope, creator.receive, creator.send)
            await creator.first_body.wait()
            first = creator.bodies[0]["body"].split(b"\n\n")[0].partition(b"data: ")[2]
            path = f"/v1/responses/{json.loads(first)['response']['id']}"
            if how == "leaves":
                creator.gone.set()  # the recorder goes on where the client's task stopped
            elif how == "cancelled":
                cancel = OneRequest(b"")
                await app(_with_key(post_scope(f"{path}/cancel")), cancel.receive, cancel.send)
                assert cancel.sent[0]["status"] == 200
        # A reader to the end: the response has ended when it returns.
        reader = OneRequest(b"")
        get = {**_with_key(post_scope(path, b"stream=true")), "method": "GET"}
        await app(get, reader.receive, reader.send)
        assert reader.bodies[-1]["more_body"] is False
        await lifespan.say("shutdown")
    assert app.synth.background is not None
    assert app.synth.background.generating == 0
    del creator, reader, app, lifespan
    gc.collect()
    cycles = [type(o).__name__ for o in gc.garbage if _ours(o)]
    assert cycles == []


#: The objects each background response has of its own.
_PER_RESPONSE = (
    "_Live",
    "_Generation",
    "_Following",
    "_Recorded",
    "_RecordingFrames",
    "_Continuing",
    "_Write",
)


def _ours(value: Any) -> bool:
    return isinstance(value, SynthesizedStream) or type(value).__name__ in _PER_RESPONSE


async def test_what_is_queued_for_the_store_when_the_lifespan_ends_is_written() -> None:
    """The writer lets writes gather a moment before it sends them: a shutdown meanwhile
    still sends them (the response's end is not lost from the store)."""
    app = ProxyApp(ProxyConfig(keepalive_s=K, store="memory"))
    lifespan = Lifespan(app)
    body = {"model": "m", "input": "x", "background": True, "stream": True}
    creator = _Client(json.dumps(body).encode())
    scope = _with_key(post_scope("/v1/responses"))
    scope[ON_DISCONNECT] = lambda callback: None
    background = app.synth.background
    assert background is not None
    async with lifespan.to_app, lifespan.from_app, anyio.create_task_group() as group:
        group.start_soon(lifespan.run)
        await lifespan.say("startup")
        await app(scope, creator.receive, creator.send)  # to its terminal event
        assert background._pending  # its last write still gathering
        await lifespan.say("shutdown")
    first = creator.bodies[0]["body"].split(b"\n\n")[0].partition(b"data: ")[2]
    response_id = json.loads(first)["response"]["id"]
    stored = await background.store.get(response_id)
    assert stored is not None
    assert stored.done
    assert stored.object["status"] == "completed"
    sent = b"".join(message["body"] for message in creator.bodies)
    assert b"".join(frame for _, frame in await background.store.events(response_id, -1)) == sent


async def test_a_background_stream_counts_its_keepalives_from_the_request_arrival() -> None:
    """The first events at once, then keepalives a whole number of intervals after the request
    arrived (the server's stamp), as a stream that is not kept: one that arrived an interval
    less a moment before it was read gets its next keepalive that moment later, not an
    interval (an hour: the 60 s limit) after its first events."""
    hour, moment = 3600.0, 0.2
    app = ProxyApp(ProxyConfig(keepalive_s=hour, store="memory"))
    lifespan = Lifespan(app)
    body = {"model": "m", "input": "x [delay:7200]", "background": True, "stream": True}
    client = _Client(json.dumps(body).encode())
    scope = _with_key(post_scope("/v1/responses"))
    arrived = anyio.current_time() - hour + moment
    scope[RECEIVED_AT] = arrived
    with anyio.fail_after(60):
        async with lifespan.to_app, lifespan.from_app, anyio.create_task_group() as group:
            group.start_soon(lifespan.run)
            await lifespan.say("startup")
            async with anyio.create_task_group() as requests:
                requests.start_soon(app, scope, client.receive, client.send)
                await client.first_body.wait()
                first = client.bodies[0]["body"].split(b"\n\n")
                assert [e.partition(b"\n")[0] for e in first[:2]] == [
                    b"event: response.created",
                    b"event: response.in_progress",
                ]
                await client.second_body.wait()
                assert arrived + hour - 1e-6 <= anyio.current_time() < arrived + 1.5 * hour
                assert client.bodies[1]["body"].startswith(b"event: response.in_progress\n")
                client.gone.set()  # the client leaves; the response goes on in the store
            response_id = json.loads(first[0].partition(b"data: ")[2])["response"]["id"]
            cancel = OneRequest(b"")
            path = f"/v1/responses/{response_id}/cancel"
            await app(_with_key(post_scope(path)), cancel.receive, cancel.send)
            assert cancel.sent[0]["status"] == 200
            await lifespan.say("shutdown")


class _StuckClient(_Client):
    """A client whose second body's write never completes (a full socket) until it leaves."""

    def __init__(self, body: bytes) -> None:
        super().__init__(body)
        self.stuck = anyio.Event()

    async def send(self, message: Any) -> None:
        await super().send(message)
        if self.second_body.is_set():
            self.stuck.set()
            await anyio.sleep_forever()


async def test_a_client_leaving_after_the_lifespan_ended_ends_its_response_there(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """The server stopping: its lifespan has ended (no task can be started in it) when a
    background stream's client, stuck in a write, leaves mid-wait. The response is not
    handed to a recorder that nothing would run or wait for: it ends there, without an
    error, as a recorder cancelled with the lifespan ends it."""
    caplog.set_level(logging.INFO)
    app = ProxyApp(ProxyConfig(keepalive_s=K, store="memory", drain_timeout=0))
    background = app.synth.background
    assert background is not None
    lifespan = Lifespan(app)
    body = {"model": "m", "input": "x [delay:600]", "background": True, "stream": True}
    client = _StuckClient(json.dumps(body).encode())
    scope = _with_key(post_scope("/v1/responses"))
    with anyio.fail_after(60):
        async with anyio.create_task_group() as requests:
            async with lifespan.to_app, lifespan.from_app, anyio.create_task_group() as group:
                group.start_soon(lifespan.run)
                await lifespan.say("startup")
                requests.start_soon(app, scope, client.receive, client.send)
                await client.stuck.wait()
                assert background.generating == 1
                await lifespan.say("shutdown")
            client.gone.set()
    assert background.generating == 0
    assert [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR] == []
    assert any("ended: status=" in r.getMessage() for r in caplog.records)


async def test_waiting_responses_keepalive_numbers_reach_the_store_together() -> None:
    """The writer takes waiting responses' latest keepalive numbers to the store every
    ``store.progress_every_s``, every waiting response's in the same call, and the store
    then says each response's last event is the keepalive its client got with that number."""
    app = ProxyApp(ProxyConfig(keepalive_s=K, store="memory"))
    background = app.synth.background
    assert background is not None
    store = background.store
    store.progress_every_s = 4 * K  # the memory store's own: 2 s
    calls: list[dict[str, int]] = []
    numbered = anyio.Event()
    real_append_many = store.append_many

    async def append_many(writes: Any, keepalives: Any = None) -> None:
        await real_append_many(writes, keepalives)
        calls.append(dict(keepalives or {}))
        if len(ids) == 3 and all(keepalives and i in keepalives for i in ids):
            numbered.set()

    store.append_many = append_many  # type: ignore[method-assign]
    lifespan = Lifespan(app)
    body = {"model": "m", "input": "x [delay:600]", "background": True, "stream": True}
    clients = [_Client(json.dumps(body).encode()) for _ in range(3)]
    ids: list[str] = []
    with anyio.fail_after(60):
        async with lifespan.to_app, lifespan.from_app, anyio.create_task_group() as group:
            group.start_soon(lifespan.run)
            await lifespan.say("startup")
            async with anyio.create_task_group() as requests:
                for client in clients:
                    scope = _with_key(post_scope("/v1/responses"))
                    scope[ON_DISCONNECT] = lambda callback: None
                    requests.start_soon(app, scope, client.receive, client.send)
                for client in clients:
                    await client.second_body.wait()  # a keepalive
                    first = client.bodies[0]["body"].split(b"\n\n")[0].partition(b"data: ")[2]
                    ids.append(json.loads(first)["response"]["id"])
                await numbered.wait()
                taken = calls[-1]
                for response_id in ids:
                    stored = await store.get(response_id)
                    assert stored is not None
                    assert stored.last_sequence == taken[response_id] >= 2
                    client = clients[ids.index(response_id)]
                    sent = b"".join(m["body"] for m in client.bodies)
                    assert f'"sequence_number":{taken[response_id]}}}'.encode() in sent
                for client in clients:
                    client.gone.set()
                for response_id in ids:
                    cancel = OneRequest(b"")
                    path = f"/v1/responses/{response_id}/cancel"
                    await app(_with_key(post_scope(path)), cancel.receive, cancel.send)
                    assert cancel.sent[0]["status"] == 200
            await lifespan.say("shutdown")
    assert background.generating == 0


class _CallsStore:
    """A store's ``append_many`` that only records what each call carried."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, int]] = []

    async def append_many(self, writes: Any, keepalives: Any = None) -> None:
        self.calls.append((len(writes), len(keepalives or {})))


async def test_a_flush_sends_thousands_of_keepalive_numbers_in_one_call() -> None:
    """Responses' writes go 500 a call (a call is built without a pause); keepalive numbers,
    a word each, go with the first call: a call costs the store's client far more than a
    number, and a tick's number is what thousands of waiting responses write."""
    from aiostream_synth._serving.background import BackgroundResponses, _Write

    store = _CallsStore()
    background = BackgroundResponses(store, keepalive_interval=K, timeout=None)  # type: ignore[arg-type]
    numbers = {f"resp_{i}": 7 for i in range(12_000)}
    await background._flush({}, numbers)
    assert store.calls == [(0, 10_000), (0, 2_000)]
    store.calls.clear()
    writes = {f"resp_{i}": _Write([], None, False, None) for i in range(1_200)}
    await background._flush(writes, dict(list(numbers.items())[:3_000]))
    assert store.calls == [(500, 3_000), (500, 0), (200, 0)]


async def test_keepalives_keep_a_waiting_response_in_the_memory_store_past_its_ttl() -> None:
    """The memory store takes a waiting response's keepalive numbers every quarter of a short
    TTL (``progress_every_s``), and each renews the response's TTL there: a response that
    waits for five TTLs is still stored, completed, at its end."""
    app = ProxyApp(ProxyConfig(keepalive_s=K, store="memory", store_ttl_s=4 * K))
    background = app.synth.background
    assert background is not None
    store: Any = background.store
    store._clock = anyio.current_time  # the test loop's clock (trio's jumps)
    assert store.progress_every_s == K
    lifespan = Lifespan(app)
    client, scope = _streaming_background(20 * K)
    with anyio.fail_after(60):
        async with lifespan.to_app, lifespan.from_app, anyio.create_task_group() as group:
            group.start_soon(lifespan.run)
            await lifespan.say("startup")
            started = anyio.current_time()
            await app(scope, client.receive, client.send)  # to its terminal event
            assert anyio.current_time() >= started + 5 * store.ttl_s  # (as the sleep adds)
            await lifespan.say("shutdown")  # what is queued is written
    first = client.bodies[0]["body"].split(b"\n\n")[0].partition(b"data: ")[2]
    stored = await store.get(json.loads(first)["response"]["id"])
    assert stored is not None
    assert stored.done
    assert stored.object["status"] == "completed"
    assert store.expired == 0


async def test_a_finished_response_is_replayed_in_one_write_after_one_store_read() -> None:
    """A resume of a response that ended: the store read once, for the response and its
    events together (the request's own read is the stream's first: a done response's events
    read with it are all of them), and what is there sent in one write that ends the body: no
    write per event, and no wait (nor a task watching for the reader to leave)."""
    app = ProxyApp(ProxyConfig(keepalive_s=K, store="memory"))
    background = app.synth.background
    assert background is not None
    store: Any = background.store
    reads: list[tuple[str, int | None]] = []
    real_read = store.read

    async def read(response_id: str, after: int | None = None) -> Any:
        reads.append(("read", after))
        return await real_read(response_id, after)

    async def refused(*args: Any) -> Any:
        raise AssertionError("a reader reads the store with read() alone")

    store.read, store.get, store.events = read, refused, refused
    lifespan = Lifespan(app)
    creator, scope = _streaming_background(4 * K)
    with anyio.fail_after(60):
        async with lifespan.to_app, lifespan.from_app, anyio.create_task_group() as group:
            group.start_soon(lifespan.run)
            await lifespan.say("startup")
            await app(scope, creator.receive, creator.send)  # to its terminal event
            first = creator.bodies[0]["body"].split(b"\n\n")[0].partition(b"data: ")[2]
            path = f"/v1/responses/{json.loads(first)['response']['id']}"
            reads.clear()
            reader = OneRequest(b"")
            get_scope = {
                **_with_key(post_scope(path, b"stream=true&starting_after=0")),
                "method": "GET",
            }
            await app(get_scope, reader.receive, reader.send)
            await lifespan.say("shutdown")
    assert reads == [("read", 0)]
    assert [m["more_body"] for m in reader.bodies] == [False]
    sent = b"".join(m["body"] for m in creator.bodies)
    assert reader.bodies[0]["body"] == sent.split(b"\n\n", 1)[1]  # all but event 0


async def test_a_response_with_no_client_records_its_ticks_as_a_followed_one_does() -> None:
    """``background`` without ``stream``: the recorder alone runs the engine, its frames
    recording themselves. A reader from the start gets every event once, numbered without a
    gap, keepalives each the template with its number, the answer's events after them; the
    store then replays the same bytes."""
    app = ProxyApp(ProxyConfig(keepalive_s=K, store="memory"))
    background = app.synth.background
    assert background is not None
    lifespan = Lifespan(app)
    body = {"model": "m", "input": f"x [delay:{8 * K}]", "background": True}
    creator = OneRequest(json.dumps(body).encode())
    with anyio.fail_after(60):
        async with lifespan.to_app, lifespan.from_app, anyio.create_task_group() as group:
            group.start_soon(lifespan.run)
            await lifespan.say("startup")
            await app(_with_key(post_scope("/v1/responses")), creator.receive, creator.send)
            response_id = json.loads(creator.bodies[0]["body"])["id"]
            reader = OneRequest(b"")
            path = f"/v1/responses/{response_id}"
            await app(
                {**_with_key(post_scope(path, b"stream=true")), "method": "GET"},
                reader.receive,
                reader.send,
            )
            await lifespan.say("shutdown")
    frames = [f + b"\n\n" for f in b"".join(m["body"] for m in reader.bodies).split(b"\n\n") if f]
    payloads = [json.loads(f.partition(b"data: ")[2]) for f in frames]
    assert [p["sequence_number"] for p in payloads] == list(range(len(frames)))
    kinds = [p["type"] for p in payloads]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    ticks = [n for n, kind in enumerate(kinds) if kind == "response.in_progress"]
    assert len(ticks) >= 4  # the opening one, then keepalives
    template = frames[1].replace(b'"sequence_number":1}', b'"sequence_number":%d}')
    for n in ticks:
        assert frames[n] == template % n
    replayed = await background.store.events(response_id, -1)
    assert [frame for _, frame in replayed] == frames
