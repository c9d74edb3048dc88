"""``previous_response_id`` on a stateless backend (issue 30, decision P12): the stored
conversation is put in front of the new input before the backend, or a bridge, sees it."""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest

from aiostream_synth._proxy.app import ProxyApp, ProxyConfig

from .support.fake_chat_upstream import ANSWER, FakeChatUpstream
from .support.redis_server import redis_server
from .support.servers import serve


@pytest.fixture(params=["uvicorn", "hypercorn-trio"])
def bridged(request: pytest.FixtureRequest) -> Iterator[tuple[openai.OpenAI, FakeChatUpstream]]:
    """A proxy bridging Responses clients to a chat-only upstream that records every request."""
    upstream = FakeChatUpstream()
    with (
        serve(upstream, "uvicorn") as upstream_url,
        serve(
            ProxyApp(ProxyConfig(upstream=upstream_url, upstream_api="chat", keepalive_s=0.1)),
            request.param,
            lifespan=True,
        ) as url,
        openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0, timeout=60) as client,
    ):
        yield client, upstream


def _conversation(messages: list[dict[str, Any]]) -> list[tuple[str, str]]:
    def text(content: Any) -> str:
        if isinstance(content, str):
            return content
        return "".join(part.get("text", "") for part in content or ())

    return [(m["role"], text(m.get("content"))) for m in messages if m["role"] != "system"]


def test_a_three_turn_chain_reaches_a_chat_upstream_as_one_history(
    bridged: tuple[openai.OpenAI, FakeChatUpstream],
) -> None:
    client, upstream = bridged
    first = client.responses.create(model="m", input="first", instructions="Be brief.")
    with client.responses.stream(
        model="m", input="second", previous_response_id=first.id
    ) as stream:
        second = stream.get_final_response()
    third = client.responses.create(
        model="m",
        input=[{"role": "user", "content": "third"}],
        previous_response_id=second.id,
        background=True,
    )
    with client.responses.stream(response_id=third.id) as stream:
        final = stream.get_final_response()
    assert final.output_text == ANSWER
    assert _conversation(upstream.bodies[-1]["messages"]) == [
        ("user", "first"),
        ("assistant", ANSWER),
        ("user", "second"),
        ("assistant", ANSWER),
        ("user", "third"),
    ]
    # Instructions are not carried over a chain (as upstream): only the first turn had them.
    assert upstream.bodies[0]["messages"][0] == {"role": "system", "content": "Be brief."}
    assert upstream.bodies[-1]["messages"][0]["role"] == "user"


def test_an_unknown_previous_response_on_a_bridge_is_a_400_naming_it(
    bridged: tuple[openai.OpenAI, FakeChatUpstream],
) -> None:
    client, upstream = bridged
    with pytest.raises(openai.BadRequestError, match="resp_unknown") as refused:
        client.responses.create(model="m", input="x", previous_response_id="resp_unknown")
    assert refused.value.param == "previous_response_id"
    assert upstream.bodies == []


def test_another_key_cannot_continue_a_response(
    bridged: tuple[openai.OpenAI, FakeChatUpstream],
) -> None:
    client, _ = bridged
    first = client.responses.create(model="m", input="mine")
    other = client.with_options(api_key="someone else")
    with pytest.raises(openai.BadRequestError, match="not found"):
        other.responses.create(model="m", input="x", previous_response_id=first.id)


def test_a_response_stored_false_cannot_be_continued(
    bridged: tuple[openai.OpenAI, FakeChatUpstream],
) -> None:
    client, _ = bridged
    first = client.responses.create(model="m", input="forget me", store=False)
    with pytest.raises(openai.BadRequestError, match="not found"):
        client.responses.create(model="m", input="x", previous_response_id=first.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(first.id)


def test_an_unfinished_response_cannot_be_continued() -> None:
    with (
        serve(ProxyApp(ProxyConfig(keepalive_s=0.1)), "uvicorn", lifespan=True) as url,
        openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0) as client,
    ):
        running = client.responses.create(model="m", input="slow [delay:600]", background=True)
        with pytest.raises(openai.BadRequestError, match="in_progress"):
            client.responses.create(model="m", input="x", previous_response_id=running.id)
        client.responses.cancel(running.id)


def test_an_id_unknown_here_is_forwarded_to_an_upstream_of_the_same_api() -> None:
    """It may be the upstream's own (a stateful Responses server): not ours to refuse."""
    seen: list[dict[str, Any]] = []

    async def upstream(scope: Any, receive: Any, send: Any) -> None:
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        import json

        seen.append(json.loads(body))
        answer = {
            "id": "resp_up",
            "object": "response",
            "created_at": 0,
            "model": "m",
            "status": "completed",
            "output": [],
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
        }
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": json.dumps(answer).encode()})

    with (
        serve(upstream, "uvicorn") as upstream_url,
        serve(ProxyApp(ProxyConfig(upstream=upstream_url)), "uvicorn", lifespan=True) as url,
    ):
        answer = httpx.post(
            f"{url}/v1/responses",
            json={"model": "m", "input": "x", "previous_response_id": "resp_theirs"},
        )
    assert answer.status_code == 200
    assert seen[0]["previous_response_id"] == "resp_theirs"
    assert "previous_response_id" not in answer.headers["x-aiostream-synth-dropped"]


@pytest.mark.parametrize("stream", [True, False])
def test_a_chain_served_from_the_store_is_reported(
    stream: bool, caplog: pytest.LogCaptureFixture
) -> None:
    """Its ``previous_response_id`` does not reach the backend (the conversation does, in
    input): said in the dropped header and counted on the request's log line, as a benign
    removal (P10), as ``background`` is. (The log is read once the server has stopped: a
    stream's line comes after its last byte.)"""
    with (
        caplog.at_level(logging.INFO, logger="aiostream_synth.proxy"),
        serve(ProxyApp(ProxyConfig(keepalive_s=0.1)), "uvicorn", lifespan=True) as url,
        openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0) as client,
    ):
        first = client.responses.create(model="m", input="first")
        answer = httpx.post(
            f"{url}/v1/responses",
            json={
                "model": "m",
                "input": "second",
                "previous_response_id": first.id,
                "stream": stream,
            },
            headers={"Authorization": "Bearer k"},  # the same owner as the first turn
        )
        assert answer.status_code == 200
        assert answer.headers["x-aiostream-synth-dropped"] == "previous_response_id"
    # Counted on the request's line as a quiet removal (benign ones are not named there).
    lines = [r for r in caplog.records if r.getMessage().startswith("request ")]
    assert [line.getMessage().endswith("quietly_removed=1") for line in lines] == [False, True]
    assert all(line.levelno == logging.INFO for line in lines)


def test_a_streamed_response_is_stored_from_its_start_under_its_own_id() -> None:
    """Retrievable while it streams (in progress) and after (completed), under the id its
    events carry; its events are not kept (only background ones are): stream=true is a 400."""
    with (
        serve(ProxyApp(ProxyConfig(keepalive_s=0.1)), "uvicorn", lifespan=True) as url,
        openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0) as client,
    ):
        with client.responses.stream(model="m", input="streamed [delay:0.5]") as stream:
            events = iter(stream)
            created = next(events)
            response_id = created.response.id  # type: ignore[union-attr]
            during = client.responses.retrieve(response_id)
            final = stream.get_final_response()
        after = client.responses.retrieve(response_id)
        replay = httpx.get(
            f"{url}/v1/responses/{response_id}",
            params={"stream": "true"},
            headers={"authorization": "Bearer k"},
        )
    assert during.status == "in_progress"
    assert final.id == after.id == response_id
    assert after.status == "completed"
    assert after.output_text == "streamed"
    assert replay.status_code == 400
    assert replay.json()["error"]["param"] == "stream"


@pytest.mark.parametrize(("server", "store"), [("uvicorn", "memory"), ("hypercorn-trio", "redis")])
def test_a_stream_that_waits_past_the_stores_ttl_keeps_its_answer(server: str, store: str) -> None:
    """A streamed response writes nothing while it waits, so its record, kept from its start,
    expires one TTL later: its end writes it whole again (its input included), so the answer
    is retrieved, listed and continued as any other. The wait is the TTL's own (real time)."""
    with contextlib.ExitStack() as stack:
        url = stack.enter_context(redis_server())[0] if store == "redis" else "memory"
        app = ProxyApp(ProxyConfig(keepalive_s=0.1, store=url, store_ttl_s=1.0))
        base = stack.enter_context(serve(app, server, lifespan=True))
        client = stack.enter_context(
            openai.OpenAI(base_url=f"{base}/v1", api_key="k", max_retries=0, timeout=60)
        )
        with client.responses.stream(model="m", input="patient [delay:2.5]") as stream:
            final = stream.get_final_response()
        kept = client.responses.retrieve(final.id)
        items = client.responses.input_items.list(final.id)
        follow_up = client.responses.create(
            model="m", input="and then", previous_response_id=final.id
        )
    assert (kept.status, kept.output_text) == ("completed", final.output_text)
    listed = [item.model_dump(mode="json") for item in items.data]
    assert [item["content"][0]["text"] for item in listed] == ["patient [delay:2.5]"]
    assert follow_up.status == "completed"


def test_a_stream_its_client_left_leaves_no_record() -> None:
    with (
        serve(ProxyApp(ProxyConfig(keepalive_s=0.1)), "uvicorn", lifespan=True) as url,
        openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0) as client,
    ):
        stream = client.responses.create(model="m", input="left [delay:600]", stream=True)
        response_id = next(iter(stream)).response.id  # type: ignore[union-attr]
        stream.close()
        while True:  # until the proxy saw the client go (its record is then dropped)
            try:
                client.responses.retrieve(response_id)
            except openai.NotFoundError:
                break
