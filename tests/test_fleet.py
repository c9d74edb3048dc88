"""Processes sharing a Redis store (issue 31): a client's retry that reaches another process
shares the backend call its first request started there (a Codex-style streaming retry after a
dropped stream, a Claude Code-style non-streaming re-send after a failed stream), and a call
whose process is killed fails the request that joined it instead of leaving it waiting. One
process on asyncio (uvicorn), the other on trio (hypercorn); the upstream counts its calls."""

from __future__ import annotations

from collections.abc import Iterator

import anyio
import coredis
import openai
import pytest
from openai.types.responses import ResponseFailedEvent

from aiostream_synth._proxy.app import ProxyApp, ProxyConfig

from .support.cli_server import serve_cli
from .support.fake_upstream import FakeUpstream
from .support.redis_server import redis_server
from .support.servers import serve

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    with redis_server() as (url, _):
        yield url


@pytest.fixture
def upstream() -> Iterator[tuple[FakeUpstream, str]]:
    fake = FakeUpstream()
    with serve(fake, "uvicorn") as url:
        yield fake, url


def _client(url: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0, timeout=60)


def _until_a_call_is(redis_url: str, state: str) -> None:
    """Until the store says a call is in ``state`` (the first process wrote it: the condition
    the retry depends on, awaited rather than slept for)."""

    async def wait() -> None:
        async with coredis.Redis.from_url(redis_url, decode_responses=True) as client:
            with anyio.fail_after(30):
                while True:
                    keys = [key async for key in client.scan_iter(match="aiostream-synth:call:*")]
                    states = [await client.hget(key, "state") for key in keys]
                    if state in states:
                        return
                    await anyio.sleep(0.01)

    anyio.run(wait)


class Fleet:
    """The upstream (counting its calls), the Redis store, two proxies on it."""

    def __init__(self, upstream: FakeUpstream, redis_url: str, one: str, two: str) -> None:
        self.upstream = upstream
        self.redis_url = redis_url
        self.one = one
        self.two = two


@pytest.fixture
def fleet(redis_url: str, upstream: tuple[FakeUpstream, str]) -> Iterator[Fleet]:
    """Two proxies on one Redis, on asyncio and on trio, in front of the upstream."""
    fake, upstream_url = upstream

    async def clear() -> None:  # each test starts with no call in the store
        async with coredis.Redis.from_url(redis_url) as client:
            await client.flushdb()

    anyio.run(clear)
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
    assert retried[-1].response.output_text == "upstream answer"
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
    first, the second is its own generation, wherever it lands."""
    with _client(fleet.one) as first, _client(fleet.two) as second:
        running = first.responses.create(model="slow-1", input="sample", stream=True)
        assert next(iter(running)).type == "response.created"
        _until_a_call_is(fleet.redis_url, "busy")
        other = list(second.responses.create(model="slow-1", input="sample", stream=True))
        rest = list(running)
    assert other[-1].type == rest[-1].type == "response.completed"
    assert _calls(fleet.upstream) == 2


def test_a_joined_call_whose_process_is_killed_fails_the_retry(
    redis_url: str, upstream: tuple[FakeUpstream, str]
) -> None:
    """The process running the call dies (``kill -9``) while a retry on another process waits
    on it: the retry ends with a failure event once the dead process's lease lapses (never a
    hang), and a retry after that starts a fresh call."""
    fake, upstream_url = upstream
    with (
        serve_cli(
            "--store",
            redis_url,
            "--upstream",
            f"{upstream_url}/v1",
            "--keepalive-s",
            "0.2",
            "--store-lease-s",
            "0.6",
        ) as (owner, one),  # fmt: skip
        serve(
            ProxyApp(ProxyConfig(keepalive_s=0.2, store=redis_url, upstream=f"{upstream_url}/v1")),
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
