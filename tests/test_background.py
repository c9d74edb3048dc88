"""Responses that outlive their connection (issue 30, decision P12): background mode, retrieve,
resume from a sequence number, several readers, cancel, delete — through the openai SDK, on a
real server on asyncio (uvicorn) and on trio (hypercorn), with the embedded memory store."""

from __future__ import annotations

import json
import logging
import os
import pathlib
import shutil
import subprocess
import threading
import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import coredis
import httpx
import openai
import pytest
from openai.types.responses import ResponseFailedEvent, ResponseStreamEvent
from pydantic import TypeAdapter

from aiostream_synth._proxy.app import ProxyApp, ProxyConfig, open_store
from aiostream_synth._proxy.cli import _parser, config_from_args
from aiostream_synth._serving import background as background_module
from aiostream_synth._serving.background import owner_of
from aiostream_synth._store.base import StoreUnavailable
from aiostream_synth._store.memory import MemoryStore
from aiostream_synth._store.redis import RedisStore

from .support.cli_server import serve_cli
from .support.redis_server import redis_server
from .support.servers import free_port, serve

CLIENTS = pathlib.Path(__file__).parent / "clients"
EVENTS: TypeAdapter[ResponseStreamEvent] = TypeAdapter(ResponseStreamEvent)


@pytest.fixture(
    params=[
        ("uvicorn", "memory"),
        ("hypercorn-trio", "memory"),
        ("uvicorn", "redis"),
        ("hypercorn-trio", "redis"),
    ],
    ids="-".join,
)
def proxy(request: pytest.FixtureRequest) -> Iterator[tuple[str, ProxyApp]]:
    """The proxy on asyncio (uvicorn) and trio (hypercorn), on each store."""
    server, store = request.param
    url = request.getfixturevalue("redis_url") if store == "redis" else "memory"
    app = ProxyApp(ProxyConfig(keepalive_s=0.1, store=url))
    with serve(app, server, lifespan=True) as base:
        yield base, app


def _client(url: str, key: str = "k") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=60)


def _read_until(stream: Any, sequence: int) -> tuple[str, int]:
    """Events of ``stream`` up to ``sequence`` (then the connection is dropped): the response
    id and the last sequence number seen."""
    response_id = ""
    for event in stream:
        response_id = getattr(getattr(event, "response", None), "id", None) or response_id
        if event.sequence_number >= sequence:
            stream.close()  # the client goes away mid-stream
            return response_id, event.sequence_number
    raise AssertionError("the stream ended before the sequence number")


def test_a_dropped_stream_resumes_from_its_last_sequence_number(
    proxy: tuple[str, ProxyApp],
) -> None:
    url, _ = proxy
    with _client(url) as client:
        created = client.responses.create(
            model="m", input="resume me [delay:1]", background=True, stream=True
        )
        response_id, last = _read_until(created, 2)
        # The SDK's own stream helper, resuming (it asks for every event, and skips to `last`).
        with client.responses.stream(response_id=response_id, starting_after=last) as stream:
            resumed = [event.sequence_number for event in stream]
            final = stream.get_final_response()
        # The server-side filter: only the events after `last`.
        replayed = [
            event.sequence_number
            for event in client.responses.retrieve(response_id, stream=True, starting_after=last)
        ]
        retrieved = client.responses.retrieve(response_id)
    assert resumed[0] == replayed[0] == last + 1
    assert resumed == replayed == list(range(last + 1, resumed[-1] + 1))  # none lost, none twice
    assert final.output_text == "resume me"
    assert final.id == response_id
    assert retrieved.status == "completed"
    # A background response from its first event to its stored final object (the backend was
    # asked for one complete answer, so its own object said false).
    assert final.background is True
    assert retrieved.background is True
    # The stored object is what the stream built (the stream helper adds its `parsed` fields).
    assert _unparsed(retrieved.model_dump(mode="json")) == _unparsed(final.model_dump(mode="json"))


def _unparsed(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _unparsed(v) for k, v in value.items() if k not in ("parsed", "parsed_arguments")
        }
    if isinstance(value, list):
        return [_unparsed(v) for v in value]
    return value


def test_a_background_request_without_stream_gets_its_object_at_once(
    proxy: tuple[str, ProxyApp],
) -> None:
    url, app = proxy
    with _client(url) as client:
        created = client.responses.create(model="m", input="later [delay:30]", background=True)
        assert created.status == "in_progress"
        assert created.background is True
        assert client.responses.retrieve(created.id).status == "in_progress"
        assert app.synth.background is not None
        assert app.synth.background.generating == 1
        cancelled = client.responses.cancel(created.id)
    assert cancelled.status == "cancelled"


def _metric(url: str, name: str) -> int | None:
    """A series of ``/metrics`` (None when it is not there)."""
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith(f"{name} "):
            return int(line.split()[1])
    return None


def test_the_store_is_in_the_metrics(proxy: tuple[str, ProxyApp]) -> None:
    """Generating now, store failures, and the memory store's own figures (only there)."""
    url, app = proxy
    memory = isinstance(app.store, MemoryStore)
    with _client(url) as client:
        created = client.responses.create(model="m", input="later [delay:30]", background=True)
        assert _metric(url, "aiostream_synth_background_generating") == 1
        assert _metric(url, "aiostream_synth_store_failures_total") == 0
        held = _metric(url, "aiostream_synth_store_responses")
        assert held == (1 if memory else None)
        if memory:
            assert (_metric(url, "aiostream_synth_store_bytes") or 0) > 0
        assert _metric(url, "aiostream_synth_store_evicted_total") == (0 if memory else None)
        assert _metric(url, "aiostream_synth_store_expired_total") == (0 if memory else None)
        client.responses.cancel(created.id)
        # Back to 0 once the generation's task has ended (just after the cancel's answer; the
        # test's timeout bounds the polling).
        while _metric(url, "aiostream_synth_background_generating") != 0:
            pass


def test_each_generation_ends_with_a_log_line(
    proxy: tuple[str, ProxyApp], caplog: pytest.LogCaptureFixture
) -> None:
    """Its request's line covers only the client's connection: the generation says how it
    ended, on the logger ``aiostream_synth.background``."""
    url, _ = proxy
    with caplog.at_level(logging.INFO, logger="aiostream_synth.background"), _client(url) as client:
        done = client.responses.create(model="m", input="quick", background=True)
        with client.responses.stream(response_id=done.id) as stream:
            stream.get_final_response()
        cancelled = client.responses.create(model="m", input="long [delay:30]", background=True)
        client.responses.cancel(cancelled.id)
        while _metric(url, "aiostream_synth_background_generating"):
            pass  # polled state (each line is logged before its generation stops counting)
    lines = {
        r.getMessage().split()[1]: r.getMessage()
        for r in caplog.records
        if r.name == "aiostream_synth.background" and r.getMessage().startswith("background ")
    }
    assert "status=completed" in lines[done.id]
    assert "status=cancelled" in lines[cancelled.id]
    assert all(r.levelno == logging.INFO for r in caplog.records if "ended:" in r.getMessage())


def test_without_a_store_there_are_no_store_series() -> None:
    with serve(ProxyApp(ProxyConfig(store="off")), "uvicorn", lifespan=True) as url:
        text = httpx.get(f"{url}/metrics").text
    assert "aiostream_synth_open_streams 0" in text
    assert "store" not in text
    assert "background" not in text


def test_three_readers_at_once_see_the_same_events(proxy: tuple[str, ProxyApp]) -> None:
    url, _ = proxy
    with _client(url) as client:
        created = client.responses.create(model="m", input="for all [delay:1]", background=True)
        seen: list[list[dict[str, Any]]] = [[], [], []]

        def read(into: list[dict[str, Any]]) -> None:
            with _client(url) as reader:
                for event in reader.responses.retrieve(created.id, stream=True):
                    into.append(event.model_dump(mode="json"))

        readers = [threading.Thread(target=read, args=(into,)) for into in seen]
        for reader in readers:
            reader.start()
        for reader in readers:
            reader.join(timeout=60)
        late = [
            e.model_dump(mode="json") for e in client.responses.retrieve(created.id, stream=True)
        ]
    assert seen[0] == seen[1] == seen[2] == late  # a reader after the end replays them all
    assert [e["sequence_number"] for e in late] == list(range(len(late)))
    assert late[-1]["type"] == "response.completed"
    for event in late:
        EVENTS.validate_python(event, strict=True)


def test_cancel_ends_every_reader_with_a_terminal_event(proxy: tuple[str, ProxyApp]) -> None:
    url, _ = proxy
    with _client(url) as client:
        created = client.responses.create(model="m", input="never [delay:600]", background=True)
        stream = client.responses.retrieve(created.id, stream=True)
        events = iter(stream)
        assert next(events).type == "response.created"
        cancelled = client.responses.cancel(created.id)
        rest = list(events)
        again = client.responses.retrieve(created.id)
        with pytest.raises(openai.BadRequestError, match="already cancelled"):
            client.responses.cancel(created.id)
    assert cancelled.status == again.status == "cancelled"
    terminal = rest[-1]
    assert isinstance(terminal, ResponseFailedEvent)
    assert terminal.response.status == "cancelled"
    assert terminal.response.error is None
    EVENTS.validate_python(terminal.model_dump(mode="json"), strict=True)


def test_cancel_ends_the_creating_clients_own_stream_as_cancelled(
    proxy: tuple[str, ProxyApp],
) -> None:
    """The creating client's task renders its events while it stays: a cancel from elsewhere
    ends that stream with the cancelled response, not with the engine's failure."""
    url, _ = proxy
    with _client(url) as client, _client(url) as other:
        stream = client.responses.create(
            model="m", input="never [delay:600]", background=True, stream=True
        )
        events = iter(stream)
        first = next(events)
        assert first.type == "response.created"
        assert next(events).type == "response.in_progress"
        cancelled = other.responses.cancel(first.response.id)
        rest = list(events)
    assert cancelled.status == "cancelled"
    terminal = rest[-1]
    assert isinstance(terminal, ResponseFailedEvent)
    assert terminal.response.status == "cancelled"
    assert terminal.response.error is None
    numbers = [first.sequence_number, 1, *(event.sequence_number for event in rest)]
    assert numbers == list(range(len(numbers)))


def _frames(body: bytes) -> list[bytes]:
    return [frame + b"\n\n" for frame in body.split(b"\n\n") if frame]


def test_a_replay_is_the_creating_clients_stream_byte_for_byte(
    proxy: tuple[str, ProxyApp],
) -> None:
    """Keepalives are kept as one template and a number (not a frame per tick, in the live
    log or the store), yet a replay gives back each of them as it was sent."""
    url, app = proxy
    body = {"model": "m", "input": "keep [delay:0.6]", "background": True, "stream": True}
    with httpx.Client(base_url=url, timeout=60, headers={"authorization": "Bearer k"}) as http:
        sent = _frames(http.post("/v1/responses", json=body).content)
        response_id = json.loads(sent[0].partition(b"data: ")[2])["response"]["id"]
        replayed = _frames(http.get(f"/v1/responses/{response_id}?stream=true").content)
        tail = _frames(
            http.get(f"/v1/responses/{response_id}?stream=true&starting_after=3").content
        )
    keepalives = [f for f in sent if f.startswith(b"event: response.in_progress")]
    assert len(keepalives) >= 4  # the wait was several keepalive intervals long
    assert replayed == sent
    assert tail == sent[4:]
    store = app.synth.background.store if app.synth.background is not None else None
    if isinstance(store, MemoryStore):
        kept = store._entries[response_id]
        assert len(kept.events) == len(sent) - len(keepalives)  # no frame per keepalive
        assert kept.keepalive is not None


def test_delete_forgets_and_other_credentials_never_see_it(proxy: tuple[str, ProxyApp]) -> None:
    url, _ = proxy
    with _client(url) as client, _client(url, key="someone else") as other:
        created = client.responses.create(model="m", input="mine", background=True)
        with pytest.raises(openai.NotFoundError):
            other.responses.retrieve(created.id)
        with pytest.raises(openai.NotFoundError):
            other.responses.cancel(created.id)
        with pytest.raises(openai.NotFoundError):
            other.responses.delete(created.id)
        assert client.responses.retrieve(created.id).id == created.id
        client.responses.delete(created.id)
        with pytest.raises(openai.NotFoundError, match=f"'{created.id}' not found"):
            client.responses.retrieve(created.id)


def test_a_failed_background_response_is_stored_as_failed(proxy: tuple[str, ProxyApp]) -> None:
    url, _ = proxy
    with _client(url) as client:
        created = client.responses.create(model="m", input="[error:400]", background=True)
        events = list(client.responses.retrieve(created.id, stream=True))
        retrieved = client.responses.retrieve(created.id)
    assert events[-1].type == "response.failed"
    assert retrieved.status == "failed"
    assert retrieved.error is not None
    assert "simulated HTTP 400" in retrieved.error.message


@pytest.mark.parametrize(
    ("method", "path", "body", "status", "param"),
    [
        ("GET", "/v1/responses/resp_nope", None, 404, None),
        ("POST", "/v1/responses/resp_nope/cancel", None, 404, None),
        ("DELETE", "/v1/responses/resp_nope", None, 404, None),
        ("GET", "/v1/responses/resp_nope/input_items", None, 404, None),
        ("POST", "/v1/responses/resp_nope", None, 405, None),
        (
            "POST",
            "/v1/responses",
            {"model": "m", "input": "x", "background": True, "store": False},
            400,
            "background",
        ),
    ],
)
def test_refusals_say_why(
    proxy: tuple[str, ProxyApp],
    method: str,
    path: str,
    body: dict[str, Any] | None,
    status: int,
    param: str | None,
) -> None:
    url, _ = proxy
    answer = httpx.request(method, url + path, json=body, timeout=30)
    assert answer.status_code == status, answer.text
    error = answer.json()["error"]
    assert error["message"]
    assert error["param"] == param


def test_a_starting_after_that_is_no_number_is_a_400(proxy: tuple[str, ProxyApp]) -> None:
    url, _ = proxy
    with _client(url) as client:
        created = client.responses.create(model="m", input="x", background=True)
    answer = httpx.get(
        f"{url}/v1/responses/{created.id}",
        params={"stream": "true", "starting_after": "three"},
        headers={"authorization": "Bearer k"},
    )
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "starting_after"


def test_without_a_store_background_mode_is_a_400_naming_it() -> None:
    with serve(ProxyApp(ProxyConfig(store="off")), "uvicorn", lifespan=True) as url:
        answer = httpx.post(
            f"{url}/v1/responses", json={"model": "m", "input": "x", "background": True}
        )
    assert answer.status_code == 400
    assert answer.json()["error"]["param"] == "background"


def test_background_through_a_bridge_to_a_chat_upstream() -> None:
    """The proxy serves background mode itself: a chat-only upstream never sees it."""
    with (
        serve(ProxyApp(ProxyConfig()), "uvicorn", lifespan=True) as upstream,
        serve(
            ProxyApp(ProxyConfig(upstream=f"{upstream}/v1", upstream_api="chat", keepalive_s=0.1)),
            "uvicorn",
            lifespan=True,
        ) as url,
        _client(url) as client,
    ):
        created = client.responses.create(model="m", input="bridged", background=True)
        with client.responses.stream(response_id=created.id) as stream:
            final = stream.get_final_response()
    assert final.output_text == "bridged"


class FailingStore(MemoryStore):
    """A store that stops taking writes after ``good`` of them."""

    def __init__(self, good: int) -> None:
        super().__init__()
        self.good = good

    async def append(self, *args: Any, **kwargs: Any) -> None:
        self.good -= 1
        if self.good < 0:
            raise StoreUnavailable("the store went away")
        await super().append(*args, **kwargs)


def test_a_store_that_fails_mid_stream_never_cuts_the_live_stream(
    caplog: pytest.LogCaptureFixture,
) -> None:
    app = ProxyApp(ProxyConfig(keepalive_s=0.1))
    assert app.synth.background is not None
    app.synth.background.store = FailingStore(good=1)  # its creation, then no more
    with (
        serve(app, "uvicorn", lifespan=True) as url,
        _client(url) as client,
        client.responses.stream(
            model="m", input="keep going [delay:0.5]", background=True
        ) as stream,
    ):
        final = stream.get_final_response()
        # Resume then says it is unavailable (a partial record is neither replayed nor "unknown").
        with pytest.raises(openai.InternalServerError, match="store failed") as refused:
            client.responses.retrieve(final.id)
        failures = _metric(url, "aiostream_synth_store_failures_total")
    assert refused.value.status_code == 503
    assert final.output_text == "keep going"
    assert app.synth.background.store_failures >= 1
    assert "store write failed" in caplog.text
    # The series is the counter (which a write still under way may have raised since).
    assert failures is not None
    assert 1 <= failures <= app.synth.background.store_failures


def test_redis_going_away_mid_stream_never_cuts_the_live_stream(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A store server killed while a response is generated: the connected reader gets every
    event to the end; the failure is logged and counted; retrieving it says the store failed."""
    with redis_server() as (url, redis):
        app = ProxyApp(ProxyConfig(keepalive_s=0.1, store=url))
        with (
            serve(app, "uvicorn", lifespan=True) as base,
            _client(base) as client,
            client.responses.stream(
                model="m", input="survive [delay:1]", background=True
            ) as stream,
        ):
            events = iter(stream)
            assert next(events).type == "response.created"
            redis.kill()
            redis.wait()
            rest = [event.type for event in events]
            final = stream.get_final_response()
            with pytest.raises(openai.InternalServerError) as refused:
                client.responses.retrieve(final.id)
    assert rest[-1] == "response.completed"
    assert final.output_text == "survive"
    assert refused.value.status_code == 503
    assert app.synth.background is not None
    assert app.synth.background.store_failures >= 1
    assert "store write failed" in caplog.text


def test_two_proxies_on_one_redis_serve_each_others_responses(redis_url: str) -> None:
    """The shared store: a response made behind one proxy is retrieved and replayed from the
    other (the first step of a fleet)."""
    with (
        serve(
            ProxyApp(ProxyConfig(keepalive_s=0.1, store=redis_url)), "uvicorn", lifespan=True
        ) as one,
        serve(
            ProxyApp(ProxyConfig(keepalive_s=0.1, store=redis_url)), "hypercorn-trio", lifespan=True
        ) as two,
        _client(one) as first,
        _client(two) as second,
    ):
        created = first.responses.create(model="m", input="shared [delay:0.3]", background=True)
        with second.responses.stream(response_id=created.id) as stream:
            final = stream.get_final_response()  # followed live, through Redis
        replayed = [e.sequence_number for e in second.responses.retrieve(created.id, stream=True)]
        continued = second.responses.create(
            model="m", input="and more", previous_response_id=created.id
        )
        running = first.responses.create(model="m", input="long [delay:600]", background=True)
        followed = iter(second.responses.retrieve(running.id, stream=True))
        assert next(followed).type == "response.created"
        # A cancel asked of the other process reaches the one generating it (through Redis).
        cancelled = second.responses.cancel(running.id)
        rest = list(followed)
        with pytest.raises(openai.BadRequestError, match="already cancelled"):
            first.responses.cancel(running.id)
        other_way = second.responses.create(model="m", input="long [delay:600]", background=True)
        assert first.responses.cancel(other_way.id).status == "cancelled"
        assert second.responses.retrieve(other_way.id).status == "cancelled"
    assert cancelled.status == "cancelled"
    assert isinstance(rest[-1], ResponseFailedEvent)
    assert rest[-1].response.status == "cancelled"
    assert final.output_text == "shared"
    assert replayed == list(range(len(replayed)))
    assert continued.status == "completed"


def test_a_cancel_nobody_carries_out_is_a_409_saying_why(
    redis_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A response the store says is in progress, whose process holds its lease but does not
    end it when asked (a process that lost track of it), cannot be cancelled: a 409 says so,
    after a bounded wait."""
    monkeypatch.setattr(background_module, "_REMOTE_CANCEL_S", 0.3)
    orphan = f"resp_{uuid.uuid4().hex}"
    config = ProxyConfig(keepalive_s=0.1, store=redis_url)

    async def hold_and_cancel(url: str) -> None:
        async with (
            RedisStore(redis_url) as store,  # the proxy's own key prefix
            anyio.create_task_group() as group,
        ):
            await group.start(store.hold)
            await store.create(orphan, owner_of({"authorization": "Bearer k"}), {"id": orphan})
            await store.append(orphan, [], {"id": orphan, "status": "in_progress"})
            with pytest.raises(openai.ConflictError, match=r"did not end it within 0\.3 s"):
                await anyio.to_thread.run_sync(_client(url).responses.cancel, orphan)
            group.cancel_scope.cancel()

    with serve(ProxyApp(config), "uvicorn", lifespan=True) as url:
        anyio.run(hold_and_cancel, url)


def test_a_server_holds_its_lease_while_it_serves_and_gives_it_back_when_it_stops(
    redis_url: str,
) -> None:
    """The lease is taken before the server answers its first request (startup waits for it)
    and deleted at a clean stop, so that other servers see at once that it is gone."""
    redis_url = _database(redis_url, 2)  # a fleet of its own: its own settings
    app = ProxyApp(ProxyConfig(keepalive_s=0.1, store=redis_url, store_lease_s=60))
    assert app.synth.background is not None
    store = app.synth.background.store
    assert isinstance(store, RedisStore)
    assert store.lease_s == 60
    key = f"aiostream-synth:lease:{store.holder}"

    async def lease_left_ms() -> int:
        async with coredis.Redis.from_url(redis_url) as client:
            return int(await client.pttl(key))

    with serve(app, "uvicorn", lifespan=True):
        during = anyio.run(lease_left_ms)
    assert 40_000 < during <= 60_000
    assert anyio.run(lease_left_ms) == -2  # no such key
    default = open_store(ProxyConfig(keepalive_s=2, store=redis_url))
    short = open_store(ProxyConfig(keepalive_s=0.1, store=redis_url))
    assert isinstance(default, RedisStore)
    assert isinstance(short, RedisStore)
    assert default.lease_s == 6  # three keepalive intervals
    assert short.lease_s == 3  # at least 3 s
    args = _parser().parse_args(["serve", "--store-lease-s", "0"])
    assert config_from_args(args).store_lease_s is None
    with pytest.raises(ValueError, match="store_lease_s must be a positive number"):
        ProxyConfig(store_lease_s=-1)


def test_a_response_whose_server_was_killed_ends_failed_for_its_readers(redis_url: str) -> None:
    """Issue 31's liveness: a reader following, through another server, a response whose
    server was killed (``kill -9``) gets a terminal failure event once that server's lease
    lapses, numbered on from what it had; retrieving it then says failed, and a cancel says it
    has ended. Counted in the reader's server's metrics."""
    redis_url = _database(redis_url, 1)  # a fleet of its own: a short lease
    config = ProxyConfig(keepalive_s=0.1, store=redis_url, store_lease_s=1)
    with (
        serve_cli("--store", redis_url, "--keepalive-s", "0.1", "--store-lease-s", "1") as (
            owner,
            one,
        ),
        serve(ProxyApp(config), "hypercorn-trio", lifespan=True) as two,
        _client(one) as first,
        _client(two) as second,
    ):
        running = first.responses.create(model="m", input="long [delay:600]", background=True)
        followed = iter(second.responses.retrieve(running.id, stream=True))
        opening = [next(followed), next(followed), next(followed)]  # created, in progress, a tick
        owner.kill()
        owner.wait()
        rest = list(followed)  # ends by itself: the client's own timeout is a minute
        retrieved = second.responses.retrieve(running.id)
        with pytest.raises(openai.BadRequestError, match="already failed"):
            second.responses.cancel(running.id)
        counted = _metric(two, "aiostream_synth_store_abandoned_total")
    last = rest[-1]
    assert isinstance(last, ResponseFailedEvent)
    assert last.response.status == "failed"
    assert last.response.error is not None
    assert last.response.error.code == "server_error"
    assert "stopped before it ended" in last.response.error.message
    numbers = [event.sequence_number for event in [*opening, *rest]]
    assert numbers == list(range(len(numbers)))
    assert [event.type for event in rest[:-1]] == ["response.in_progress"] * (len(rest) - 1)
    assert retrieved.status == "failed"
    assert counted == 1


def test_a_server_with_other_settings_than_its_fleets_is_refused_at_startup(
    redis_url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Two fleets with different settings on one Redis database would share calls and
    responses under different rules: the second one's server says so and exits 1."""
    from aiostream_synth._proxy.cli import main

    redis_url = _database(redis_url, 3)
    with serve(ProxyApp(ProxyConfig(store=redis_url)), "uvicorn", lifespan=True):
        refused = main(["serve", "--port", "0", "--store", redis_url, "--coalesce", "all"])
    err = capsys.readouterr().err
    assert refused == 1
    assert "is shared by servers with other settings" in err
    assert '"coalesce":"all"' in err
    assert '"coalesce":"retries"' in err


def _database(url: str, number: int) -> str:
    """``url`` on another database of the same server."""
    return f"{url.rpartition('/')[0]}/{number}"


def test_a_redis_store_that_does_not_answer_is_one_line_at_startup(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from aiostream_synth._proxy.cli import main

    port = free_port()  # nothing listens there
    assert main(["serve", "--port", "0", "--store", f"redis://127.0.0.1:{port}/0"]) == 1
    err = capsys.readouterr().err
    assert err.startswith("aiostream-synth: the response store cannot be used: RedisStore(")
    assert len(err.strip().splitlines()) == 1


def test_a_store_that_is_no_url_is_an_error_naming_the_option(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from aiostream_synth._proxy.cli import main

    with pytest.raises(SystemExit):
        main(["serve", "--store", "127.0.0.1:6379"])
    assert "store must be memory, off, or a redis://" in capsys.readouterr().err


def test_openai_node_resumes_a_dropped_background_stream(proxy: tuple[str, ProxyApp]) -> None:
    """openai-node: ``responses.create({background, stream})`` aborted mid-stream, then
    ``responses.retrieve(id, {stream, starting_after})`` and ``responses.stream({response_id,
    starting_after})``: the same events after the drop, and the same final response."""
    node = shutil.which("node")
    script = CLIENTS / "node_background.mjs"
    if node is None or not (CLIENTS / "node_modules" / "openai").exists():
        reason = "node and `npm ci` in tests/clients (openai-node)"
        if os.environ.get("CI"):
            pytest.fail(f"CI must run this client test: {reason}")
        pytest.skip(reason)
    url, _ = proxy
    done = subprocess.run(
        [node, str(script), f"{url}/v1", "node resume [delay:1]", "2"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        stdin=subprocess.DEVNULL,
    )
    result = json.loads(done.stdout)
    assert result["ok"], result
    last = result["last"]
    assert last >= 2
    assert (
        result["replayed"] == result["resumed"] == list(range(last + 1, result["resumed"][-1] + 1))
    )
    assert result["final"]["output_text"] == "node resume"
    assert result["stored"]["status"] == "completed"
    assert _unparsed(result["stored"]["output"]) == _unparsed(result["final"]["output"])


def test_an_owner_is_one_string_per_credential_and_never_the_credential() -> None:
    from aiostream_synth._serving import background

    first = background.owner_of({"authorization": "Bearer secret-1"})
    again = background.owner_of({"authorization": "Bearer secret-1"})
    other = background.owner_of({"x-api-key": "secret-2"})
    assert first is again
    assert first != other
    assert background.owner_of({}) != first
    assert not any("secret" in kept for kept in background._OWNERS)
    for n in range(background._OWNERS_KEPT * 2):
        background.owner_of({"x-api-key": f"k{n}"})
    assert len(background._OWNERS) <= background._OWNERS_KEPT
