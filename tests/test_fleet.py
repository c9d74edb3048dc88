"""Processes sharing a Redis store (issue 31): a client's retry that reaches another process
shares the backend call its first request started there (a Codex-style streaming retry after a
dropped stream, a Claude Code-style non-streaming re-send after a failed stream), and a call
whose process is killed fails the request that joined it instead of leaving it waiting. One
process on asyncio (uvicorn), the other on trio (hypercorn); the upstream counts its calls."""

from __future__ import annotations

import signal
from collections.abc import Iterator

import anyio
import coredis
import httpx
import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai.types.responses import ResponseCompletedEvent, ResponseFailedEvent

from aiostream_synth._proxy.app import ProxyApp, ProxyConfig
from aiostream_synth._serving.fleet import FleetCalls, SharedCallFailed, _outcome, _taken
from aiostream_synth._wire.failures import classify_failure

from .support.cli_server import serve_cli
from .support.fake_upstream import FakeUpstream
from .support.haproxy import haproxy
from .support.properties import property_settings
from .support.servers import serve

pytestmark = pytest.mark.timeout(120)


@pytest.fixture
def upstream() -> Iterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    with serve(fake, "uvicorn") as url:
        yield fake, url


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0, timeout=60)


async def _call_states(redis_url: str) -> list[str]:
    """The states of the calls the store holds."""
    async with coredis.Redis.from_url(redis_url, decode_responses=True) as client:
        keys = [key async for key in client.scan_iter(match="aiostream-synth:call:*")]
        return [str(await client.hget(key, "state")) for key in keys]


def _until_a_call_is(redis_url: str, state: str) -> None:
    """Until the store says a call is in ``state`` (the first process wrote it: the condition
    the retry depends on, awaited rather than slept for)."""

    async def wait() -> None:
        with anyio.fail_after(30):
            # Another process's write: there is nothing here to await but the store itself.
            while state not in await _call_states(redis_url):  # noqa: ASYNC110
                await anyio.sleep(0.01)

    anyio.run(wait)


class Fleet:
    """The upstream (counting its calls), the Redis store, two proxies on it."""

    def __init__(self, upstream: FakeUpstream, redis_url: str, one: str, two: str) -> None:
        self.upstream = upstream
        self.redis_url = redis_url
        self.one = one
        self.two = two


async def _clear(redis_url: str) -> None:
    """No call left in the store by another test."""
    async with coredis.Redis.from_url(redis_url) as client:
        await client.flushdb()


@pytest.fixture
def fleet(redis_url: str, upstream: tuple[FakeUpstream, str]) -> Iterator[Fleet]:
    """Two proxies on one Redis, on asyncio and on trio, in front of the upstream."""
    fake, upstream_url = upstream

    anyio.run(_clear, redis_url)
    config = ProxyConfig(keepalive_s=0.2, store=redis_url, upstream=f"{upstream_url}/v1")
    with (
        serve(ProxyApp(config), "uvicorn", lifespan=True) as one,
        serve(ProxyApp(config), "hypercorn-trio", lifespan=True) as two,
    ):
        yield Fleet(fake, redis_url, one, two)


def _calls(fake: FakeUpstream) -> int:
    return sum(1 for path, _, _ in fake.requests if path.endswith("/responses"))


def test_a_streaming_retry_on_another_process_shares_the_call(fleet: Fleet) -> None:
    """Codex: the stream drops, the retry (the same request, streaming) lands on the other
    process, which waits for the first process's call, with its own keepalives, instead of
    calling the upstream again."""
    with _client(fleet.one) as first, _client(fleet.two) as second:
        dropped = first.responses.create(model="slow-1.5", input="same", stream=True)
        assert next(iter(dropped)).type == "response.created"
        dropped.close()
        _until_a_call_is(fleet.redis_url, "idle")  # the first process saw its client leave
        retried = list(second.responses.create(model="slow-1.5", input="same", stream=True))
    kinds = [event.type for event in retried]
    assert kinds[-1] == "response.completed"
    assert "response.in_progress" in kinds  # the second process's own keepalives
    completed = retried[-1]
    assert isinstance(completed, ResponseCompletedEvent)
    assert completed.response.output_text == "upstream answer"
    assert _calls(fleet.upstream) == 1


def test_a_non_streaming_resend_on_another_process_gets_the_streams_failure(
    fleet: Fleet,
) -> None:
    """Claude Code: a stream fails after it started (a transient 503), and its non-streaming re-send, on the
    other process, is answered that failure instead of a second doomed call; a streaming retry
    still reaches the upstream (as on one process)."""
    with _client(fleet.one) as first, _client(fleet.two) as second:
        failed = list(first.responses.create(model="slow-0.5-error-503", input="same", stream=True))
        _until_a_call_is(fleet.redis_url, "done")
        with pytest.raises(openai.InternalServerError) as resent:
            second.responses.create(model="slow-0.5-error-503", input="same")
        calls_after_resend = _calls(fleet.upstream)
        again = list(second.responses.create(model="slow-0.5-error-503", input="same", stream=True))
    assert isinstance(failed[-1], ResponseFailedEvent)
    assert resent.value.status_code == 503
    assert "upstream says no (503)" in str(resent.value)
    assert calls_after_resend == 1
    assert isinstance(again[-1], ResponseFailedEvent)
    assert _calls(fleet.upstream) == 2


def test_live_identical_requests_on_two_processes_are_two_generations(fleet: Fleet) -> None:
    """RL harnesses send identical requests at once on purpose: with a client waiting on the
    first, the second is its own generation, wherever it lands; and a call nobody may share
    costs the store nothing (no record, no look-up)."""
    with _client(fleet.one) as first, _client(fleet.two) as second:
        running = first.responses.create(model="slow-1", input="sample", stream=True)
        assert next(iter(running)).type == "response.created"
        recorded = anyio.run(_call_states, fleet.redis_url)
        other = list(second.responses.create(model="slow-1", input="sample", stream=True))
        rest = list(running)
    assert other[-1].type == rest[-1].type == "response.completed"
    assert _calls(fleet.upstream) == 2
    assert recorded == []


def test_a_joined_call_whose_process_is_killed_fails_the_retry(
    redis_url: str, upstream: tuple[FakeUpstream, str]
) -> None:
    """The process running the call dies (``kill -9``) while a retry on another process waits
    on it: the retry ends with a failure event once the dead process's lease lapses (never a
    hang), and a retry after that starts a fresh call."""
    fake, upstream_url = upstream
    anyio.run(_clear, redis_url)
    with (
        serve_cli(
            "--store",
            redis_url,
            "--upstream",
            f"{upstream_url}/v1",
            "--keepalive-s",
            "0.2",
            "--store-lease-s",
            "1.5",
        ) as (owner, one),
        serve(
            ProxyApp(
                ProxyConfig(
                    keepalive_s=0.2,
                    store=redis_url,
                    upstream=f"{upstream_url}/v1",
                    store_lease_s=1.5,
                )
            ),
            "hypercorn-trio",
            lifespan=True,
        ) as two,
        _client(one) as first,
        _client(two) as second,
    ):
        dropped = first.responses.create(model="slow-30", input="doomed", stream=True)
        assert next(iter(dropped)).type == "response.created"
        dropped.close()
        _until_a_call_is(redis_url, "idle")
        waiting = second.responses.create(model="slow-30", input="doomed", stream=True)
        opening = next(iter(waiting))
        owner.kill()
        owner.wait()
        rest = list(waiting)
        calls_before = _calls(fake)
        fresh = second.responses.create(model="slow-0", input="doomed")
    assert opening.type == "response.created"
    last = rest[-1]
    assert isinstance(last, ResponseFailedEvent)
    assert last.response.error is not None
    assert "stopped before it answered" in last.response.error.message
    assert calls_before == 1
    assert fresh.status == "completed"
    assert _calls(fake) == 2


def test_a_draining_process_finishes_a_call_a_client_elsewhere_waits_on(
    redis_url: str, upstream: tuple[FakeUpstream, str]
) -> None:
    """SIGTERM on the process running a call that a retry on another process joined: its
    drain waits for the call and for its outcome to reach the store, so the retry's stream
    ends with the answer, not cut (the process has no stream of its own left to wait for)."""
    fake, upstream_url = upstream
    anyio.run(_clear, redis_url)
    config = ProxyConfig(keepalive_s=0.2, store=redis_url, upstream=f"{upstream_url}/v1")
    with (
        serve_cli(
            *("--store", redis_url, "--upstream", f"{upstream_url}/v1", "--keepalive-s", "0.2")
        ) as (owner, one),
        serve(ProxyApp(config), "hypercorn-trio", lifespan=True) as two,
        _client(one) as first,
        _client(two) as second,
    ):
        dropped = first.responses.create(model="slow-2", input="drained", stream=True)
        assert next(iter(dropped)).type == "response.created"
        dropped.close()
        _until_a_call_is(redis_url, "idle")
        waiting = second.responses.create(model="slow-2", input="drained", stream=True)
        opening = next(iter(waiting))
        _until_a_call_is(redis_url, "busy")  # joined
        owner.send_signal(signal.SIGTERM)
        rest = list(waiting)
        stopped = owner.wait(timeout=60)
    assert opening.type == "response.created"
    completed = rest[-1]
    assert isinstance(completed, ResponseCompletedEvent)
    assert completed.response.output_text == "upstream answer"
    assert _calls(fake) == 1
    assert stopped == 0


async def _leases(redis_url: str) -> int:
    async with coredis.Redis.from_url(redis_url) as client:
        return len([key async for key in client.scan_iter(match="aiostream-synth:lease:*")])


def test_workers_of_one_serve_are_a_fleet_on_a_shared_store(
    redis_url: str, upstream: tuple[FakeUpstream, str]
) -> None:
    """``--workers 2`` with a Redis store: each worker is a process of the fleet (its own lease),
    so a retry that the kernel hands to either worker shares its first request's call."""
    fake, upstream_url = upstream
    anyio.run(_clear, redis_url)
    options = ("--store", redis_url, "--upstream", f"{upstream_url}/v1", "--keepalive-s", "0.2")
    with serve_cli("--workers", "2", *options) as (_, url), _client(url) as client:

        async def both_hold_a_lease() -> None:
            with anyio.fail_after(30):
                while await _leases(redis_url) < 2:  # noqa: ASYNC110 - other processes' writes
                    await anyio.sleep(0.05)

        anyio.run(both_hold_a_lease)
        for turn in range(4):
            dropped = client.responses.create(model="slow-1.5", input=f"w{turn}", stream=True)
            assert next(iter(dropped)).type == "response.created"
            dropped.close()
            _until_a_call_is(redis_url, "idle")
            retried = list(client.responses.create(model="slow-1.5", input=f"w{turn}", stream=True))
            assert retried[-1].type == "response.completed"
    inputs = [body.get("input") for path, body, _ in fake.requests if path.endswith("/responses")]
    assert [inputs.count(f"w{turn}") for turn in range(4)] == [1, 1, 1, 1]


def _metric(url: str, name: str) -> int:
    for line in httpx.get(f"{url}/metrics").text.splitlines():
        if line.startswith(f"{name} "):
            return int(line.split()[1])
    return 0


def test_behind_haproxy_retries_resume_and_cancel_reach_the_other_replica(
    redis_url: str, upstream: tuple[FakeUpstream, str]
) -> None:
    """Two ``serve`` replicas behind HAProxy (round robin: each request on the other one): a
    Codex-style streaming retry and a Claude Code-style non-streaming re-send each share the
    call their first request started on the other replica; a background response is resumed
    and cancelled through the other replica."""
    fake, upstream_url = upstream
    anyio.run(_clear, redis_url)
    options = ("--store", redis_url, "--upstream", f"{upstream_url}/v1", "--keepalive-s", "0.2")
    with (
        serve_cli(*options) as (_, a),
        serve_cli(*options) as (_, b),
        haproxy([a, b]) as balanced,
        _client(balanced) as client,
    ):
        dropped = client.responses.create(model="slow-1.5", input="codex", stream=True)
        assert next(iter(dropped)).type == "response.created"
        dropped.close()
        _until_a_call_is(redis_url, "idle")
        retried = list(client.responses.create(model="slow-1.5", input="codex", stream=True))
        failed = list(
            client.responses.create(model="slow-0.5-error-503", input="claude", stream=True)
        )
        _until_a_call_is(redis_url, "done")
        with pytest.raises(openai.InternalServerError):
            client.responses.create(model="slow-0.5-error-503", input="claude")
        created = client.responses.create(model="slow-30", input="long", background=True)
        followed = iter(client.responses.retrieve(created.id, stream=True))
        assert next(followed).type == "response.created"
        cancelled = client.responses.cancel(created.id)
        rest = list(followed)
        joined = [_metric(url, "aiostream_synth_coalesced_elsewhere_total") for url in (a, b)]
    inputs = [body.get("input") for path, body, _ in fake.requests if path.endswith("/responses")]
    assert retried[-1].type == "response.completed"
    assert isinstance(failed[-1], ResponseFailedEvent)
    assert inputs.count("codex") == inputs.count("claude") == 1
    assert sum(joined) == 2  # both retries joined a call of the other replica
    assert cancelled.status == "cancelled"
    assert isinstance(rest[-1], ResponseFailedEvent)
    assert rest[-1].response.status == "cancelled"


class _Upstream(Exception):
    """An upstream's error report, as an SDK raises it (a status, a body)."""

    def __init__(self, status: int, message: str, code: str | None = None) -> None:
        super().__init__(message)
        self.status_code = status
        self.body = {"error": {"message": message, "code": code}}


@given(
    status=st.integers(400, 599),
    message=st.text(max_size=40),
    code=st.sampled_from([None, "context_length_exceeded", "rate_limit_exceeded"]),
)
@property_settings(examples_in_ci=200)
def test_a_failure_shared_across_processes_classifies_as_the_original(
    status: int, message: str, code: str | None
) -> None:
    """What a joining request's client is told, and whether a retry may take the failure, are
    those of the original failure (its classification travels, not the exception)."""
    for original in (
        _Upstream(status, message, code),
        TimeoutError(message),
        ConnectionError(message),
        KeyError(message),  # a bug in the backend: told as an internal error
    ):
        taken = _taken(_outcome(None, original))
        assert taken is not None
        with pytest.raises(SharedCallFailed) as rebuilt:
            taken()
        before, after = classify_failure(original), classify_failure(rebuilt.value)
        assert (after.status_code, after.code, after.message, after.transient) == (
            before.status_code,
            before.code,
            before.message,
            before.transient,
        )


def test_a_result_travels_whole_and_one_that_is_no_json_is_not_shared() -> None:
    result = {"id": "resp_1", "output": [{"type": "message", "content": []}], "n": 1.5}
    taken = _taken(_outcome(result, None))
    assert taken is not None
    assert taken() == result
    assert _outcome(object(), None) == b""
    assert _taken(b"") is None
    assert _taken(b'{"retry":true}') is None
    assert _taken(b"not json") is None


class _Registry:
    holder = "me"
    lease_s = 3.0


class _Coalescer:
    def __init__(self, mode: str) -> None:
        self.mode = mode
        self.linger = 0.9
        self.window = 10.0


@pytest.mark.parametrize("mode", ["retries", "all"])
def test_only_a_call_that_may_be_shared_is_written_and_looked_up(mode: str) -> None:
    """With ``retries``, a call is written once its client left (then its changes and its
    end), never while its client waits; with ``all``, from its start. Only the keys another
    process announced are looked up; this process's own announcements are not."""
    fleet = FleetCalls(_Registry())  # type: ignore[arg-type]
    fleet.bind(_Coalescer(mode))  # type: ignore[arg-type]
    quiet = fleet.started(b"\x01", True)
    fleet.ended(b"\x01", quiet, {"answer": 1}, None, "", False)
    left = fleet.started(b"\x02", True)
    fleet.waiting(b"\x02", left, busy=False)
    fleet.waiting(b"\x02", left, busy=True)
    fleet.ended(b"\x02", left, {"answer": 2}, None, "", False)
    ops = [(op, key) for op, key, *_ in fleet._queue]
    if mode == "retries":
        assert ops == [("r", "02"), ("w", "02"), ("e", "02")]
    else:
        assert ops == [("r", "01"), ("e", "01"), ("r", "02"), ("e", "02")]
    fleet._announced_now("s me 03")
    fleet._announced_now("s other 04")
    fleet._announced_now("s other 05")
    fleet._announced_now("u other 05")
    fleet._announced_now("s other not-hex")
    assert [fleet.may_share(bytes([n])) for n in (3, 4, 5)] == [False, True, False]
