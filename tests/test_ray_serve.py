"""The Ray Serve deployment (issue 31, ``deploy/ray/``), run as its users run it: ``serve run``
of its config on a local Ray cluster, two replicas of the proxy on a real Redis, in front of an
upstream that counts its calls. Through Ray's own HTTP proxy: a stream keeps its keepalives, a
Codex-style retry after a dropped stream shares the first request's backend call (whichever
replica Ray's router picks for it), and a background response is resumed and cancelled.

Ray is big (about 500 MB installed), so it is not in the test group: the ``ray`` nox session
installs it and sets ``AIOSTREAM_SYNTH_REQUIRE_RAY``, which turns a missing Ray into a failure
instead of a skip."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import anyio
import coredis
import httpx
import openai
import pytest
import yaml
from openai.types.responses import ResponseCompletedEvent, ResponseFailedEvent

from .support.fake_upstream import FakeUpstream
from .support.redis_server import redis_server
from .support.servers import free_port, serve

RAY_APP = Path(__file__).parent.parent / "deploy" / "ray"

if not os.environ.get("AIOSTREAM_SYNTH_REQUIRE_RAY"):
    pytest.importorskip("ray.serve", reason="Ray Serve is installed by the ray nox session")

# Ray's start and its replicas' import take seconds; a loaded machine may take a minute.
pytestmark = pytest.mark.timeout(300)


def _serve_command() -> str:
    """The ``serve`` command of the Ray beside this interpreter."""
    found = Path(sys.executable).parent / "serve"
    assert found.exists(), f"no Ray Serve CLI beside {sys.executable}"
    return str(found)


def _config(port: int, upstream: str, store: str) -> dict[str, Any]:
    """``deploy/ray/serve.yaml`` as a user edits it: the upstream, the store, the port; and, for
    this 2-core machine, half a CPU per replica and short keepalives."""
    config: dict[str, Any] = yaml.safe_load((RAY_APP / "serve.yaml").read_text())
    config["http_options"] = {**config["http_options"], "host": "127.0.0.1", "port": port}
    (app,) = config["applications"]
    app["runtime_env"]["env_vars"].update(
        {
            "AIOSTREAM_SYNTH_UPSTREAM": upstream,
            "AIOSTREAM_SYNTH_STORE": store,
            "AIOSTREAM_SYNTH_KEEPALIVE_S": "0.2",
        }
    )
    (deployment,) = app["deployments"]
    deployment["ray_actor_options"] = {"num_cpus": 0.5}
    return config


@contextmanager
def _ray_serve(config: dict[str, Any], folder: Path) -> Iterator[str]:
    """``serve run`` of ``config`` (its app copied into ``folder``), until ``/healthz`` answers
    through Ray's proxy; a SIGINT (the documented Ctrl-C) ends the app and the local cluster."""
    shutil.copy(RAY_APP / "serve_app.py", folder / "serve_app.py")
    (folder / "serve.yaml").write_text(yaml.safe_dump(config))
    env = {
        **os.environ,
        "RAY_USAGE_STATS_ENABLED": "0",  # no report home from a test
        "PYTHONPATH": str(folder),  # the replicas import serve_app from here
    }
    process = subprocess.Popen(
        [_serve_command(), "run", "serve.yaml"],
        cwd=folder,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{config['http_options']['port']}"
    try:
        while True:  # the test's timeout ends a cluster that never comes up
            with suppress(httpx.TransportError):
                if httpx.get(f"{url}/healthz", timeout=None).status_code == 200:
                    break
            if process.poll() is not None:
                assert process.stderr is not None
                raise RuntimeError(f"serve run ended: {process.stderr.read()[-4000:]!r}")
            time.sleep(0.2)
        yield url
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(process.pid, signal.SIGKILL)
                process.wait(timeout=10)
        if process.stderr is not None:
            process.stderr.close()


async def _call_states(redis_url: str) -> list[str]:
    async with coredis.Redis.from_url(redis_url, decode_responses=True) as client:
        keys = [key async for key in client.scan_iter(match="aiostream-synth:call:*")]
        return [str(await client.hget(key, "state")) for key in keys]


def _until_a_call_is(redis_url: str, state: str) -> None:
    """Until the store says a call is in ``state`` (a replica's write, awaited in the store)."""

    async def wait() -> None:
        with anyio.fail_after(60):
            while state not in await _call_states(redis_url):  # noqa: ASYNC110
                await anyio.sleep(0.02)

    anyio.run(wait)


def _until_leases(redis_url: str, count: int) -> None:
    """Until ``count`` processes hold a lease in the store: each replica joined the fleet
    (``/healthz`` answers through Ray's proxy as soon as the first replica is up)."""

    async def wait() -> None:
        async with coredis.Redis.from_url(redis_url) as client:
            with anyio.fail_after(120):
                while True:
                    leases = [
                        key async for key in client.scan_iter(match="aiostream-synth:lease:*")
                    ]
                    if len(leases) >= count:
                        return
                    await anyio.sleep(0.1)

    anyio.run(wait)


def _upstream_inputs(fake: FakeUpstream) -> list[object]:
    return [body.get("input") for path, body, _ in fake.requests if path.endswith("/responses")]


def test_the_ray_serve_deployment_streams_shares_retries_and_resumes(tmp_path: Path) -> None:
    fake = FakeUpstream()
    with (
        redis_server() as (redis_url, _),
        serve(fake, "uvicorn") as upstream,
        _ray_serve(_config(free_port(), f"{upstream}/v1", redis_url), tmp_path) as url,
        openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0, timeout=60) as client,
    ):
        # Both replicas joined the fleet: each holds its lease in the store.
        _until_leases(redis_url, 2)

        # Keepalives pass Ray's proxy as they are sent, and the stream ends complete.
        events = list(client.responses.create(model="slow-1", input="first", stream=True))
        kinds = [event.type for event in events]
        assert kinds[0] == "response.created"
        assert kinds.count("response.in_progress") >= 3
        assert isinstance(events[-1], ResponseCompletedEvent)
        assert events[-1].response.output_text == "upstream answer"

        # Codex: the stream drops (Ray's proxy tells the replica its client left), the retry
        # shares the call, on whichever replica it lands.
        dropped = client.responses.create(model="slow-1.5", input="codex", stream=True)
        assert next(iter(dropped)).type == "response.created"
        dropped.close()
        _until_a_call_is(redis_url, "idle")
        retried = list(client.responses.create(model="slow-1.5", input="codex", stream=True))
        assert isinstance(retried[-1], ResponseCompletedEvent)

        # Background: followed, then cancelled, through any replica.
        created = client.responses.create(model="slow-30", input="long", background=True)
        followed = iter(client.responses.retrieve(created.id, stream=True))
        assert next(followed).type == "response.created"
        with client.responses.retrieve(created.id, stream=True, starting_after=0) as resumed:
            assert next(iter(resumed)).sequence_number == 1
        cancelled = client.responses.cancel(created.id)
        rest = list(followed)
        assert client.responses.retrieve(created.id).status == "cancelled"
    assert cancelled.status == "cancelled"
    assert isinstance(rest[-1], ResponseFailedEvent)
    assert rest[-1].response.status == "cancelled"
    assert _upstream_inputs(fake).count("codex") == 1
