"""What a stored answer was made from, listed a page at a time (issue 30):
``GET /v1/responses/{id}/input_items`` and ``GET /v1/chat/completions/{id}/messages``, through
the openai SDK's paginators on a real server on asyncio (uvicorn) and trio (hypercorn), on the
memory store and on Redis; the paging itself as a property of any list."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from hypothesis import given
from hypothesis import strategies as st
from openai.types.responses import ResponseItem
from pydantic import TypeAdapter

from aiostream_synth._dialects.chat.stored import CHAT_STORAGE
from aiostream_synth._dialects.responses.input_items import listed_input_items
from aiostream_synth._proxy.app import ProxyApp, ProxyConfig
from aiostream_synth._serving.pages import MAX_LIMIT, page
from aiostream_synth._wire.errors import RequestError

from .support.servers import serve

RESPONSE_ITEM: TypeAdapter[Any] = TypeAdapter(ResponseItem)


# -- paging, any list ------------------------------------------------------------------------


def _walk(items: list[dict[str, Any]], limit: int, order: str) -> list[str]:
    """Every id, page after page, as the SDK's paginator follows them (``after`` = the last
    id of the page before, until ``has_more`` is false)."""
    seen: list[str] = []
    query = f"limit={limit}&order={order}"
    for _ in range(len(items) + 2):
        got = page(items, query.encode(), "desc")
        assert got["object"] == "list"
        ids = [item["id"] for item in got["data"]]
        assert len(ids) <= limit
        assert (got["first_id"], got["last_id"]) == ((ids[0], ids[-1]) if ids else (None, None))
        seen += ids
        if not got["has_more"]:
            return seen
        assert ids, "has_more on an empty page"
        query = f"limit={limit}&order={order}&after={ids[-1]}"
    raise AssertionError("the pages never ended")


@given(
    size=st.integers(0, 2 * MAX_LIMIT + 3),
    limit=st.integers(1, MAX_LIMIT),
    order=st.sampled_from(["asc", "desc"]),
)
def test_following_the_pages_lists_every_item_once_in_order(
    size: int, limit: int, order: str
) -> None:
    items = [{"id": f"item_{n}", "n": n} for n in range(size)]
    expected = [item["id"] for item in (items if order == "asc" else items[::-1])]
    assert _walk(items, limit, order) == expected


@given(size=st.integers(1, 60), data=st.data())
def test_after_and_before_bound_the_page(size: int, data: st.DataObject) -> None:
    items = [{"id": f"i{n}"} for n in range(size)]
    after = data.draw(st.integers(0, size - 1))
    before = data.draw(st.integers(0, size - 1))
    got = page(items, f"order=asc&after=i{after}&before=i{before}&limit=100".encode(), "desc")
    assert [item["id"] for item in got["data"]] == [f"i{n}" for n in range(after + 1, before)]
    assert got["has_more"] is False


def test_the_default_order_and_limit() -> None:
    items = [{"id": f"i{n}"} for n in range(25)]
    newest_first = page(items, b"", "desc")
    assert [item["id"] for item in newest_first["data"]] == [f"i{n}" for n in range(24, 4, -1)]
    assert newest_first["has_more"] is True
    assert page(items, b"", "asc")["first_id"] == "i0"


@pytest.mark.parametrize(
    ("query", "param"),
    [
        (b"limit=0", "limit"),
        (b"limit=101", "limit"),
        (b"limit=ten", "limit"),
        (b"order=newest", "order"),
        (b"after=nope", "after"),
        (b"before=nope", "before"),
    ],
)
def test_a_wrong_query_value_is_a_400_naming_it(query: bytes, param: str) -> None:
    with pytest.raises(RequestError) as refused:
        page([{"id": "a"}], query, "desc")
    assert refused.value.status_code == 400
    assert refused.value.body["error"]["param"] == param


# -- what each dialect lists ------------------------------------------------------------------


def test_input_items_are_listed_in_upstreams_shapes_with_stable_ids() -> None:
    """What clients send (a string input, easy messages, a replayed call without id or status)
    is listed as the SDK's item models have it; the ids made are the same on every read."""
    kept: list[Any] = [
        {"type": "message", "role": "user", "content": "hi"},
        {"role": "developer", "content": [{"type": "input_text", "text": "be brief"}]},
        {"role": "assistant", "content": "on it"},
        {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "c1", "output": "ok"},
        {"type": "message", "role": "assistant", "id": "msg_mine", "status": "incomplete",
         "content": [{"type": "output_text", "text": "x", "annotations": []}]},
    ]  # fmt: skip
    listed = listed_input_items(kept, "resp_abc")
    assert listed == listed_input_items(kept, "resp_abc")
    assert len({item["id"] for item in listed}) == len(kept)
    for item in listed:
        RESPONSE_ITEM.validate_python(item)
    assert listed[0]["content"] == [{"type": "input_text", "text": "hi"}]
    assert listed[1]["type"] == "message"
    assert listed[2]["content"] == [{"type": "output_text", "text": "on it", "annotations": []}]
    assert listed[3]["id"].startswith("fc_")
    assert listed[3]["status"] == "completed"
    assert listed[5]["id"] == "msg_mine"
    assert listed[5]["status"] == "incomplete"
    assert kept[0]["content"] == "hi"  # the kept input itself is not changed


def test_chat_messages_are_listed_with_their_parts() -> None:
    kept: list[Any] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]},
    ]
    listed = CHAT_STORAGE.listed_items(kept, "chatcmpl-1")
    assert [item["id"] for item in listed] == ["chatcmpl-1-0", "chatcmpl-1-1"]
    assert listed[0]["content"] == "sys"
    assert "content_parts" not in listed[0]
    assert listed[1]["content"] == "ab"
    assert listed[1]["content_parts"] == kept[1]["content"]


# -- over HTTP, through the SDK ---------------------------------------------------------------


@pytest.fixture(
    params=[("uvicorn", "memory"), ("hypercorn-trio", "redis")],
    ids="-".join,
)
def proxy(request: pytest.FixtureRequest) -> Iterator[str]:
    server, store = request.param
    url = request.getfixturevalue("redis_url") if store == "redis" else "memory"
    with serve(ProxyApp(ProxyConfig(keepalive_s=0.1, store=url)), server, lifespan=True) as base:
        yield base


def _client(url: str, key: str = "k") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=60)


def _texts(items: list[Any]) -> list[str]:
    return [part.text for item in items for part in item.content]


def test_a_chains_input_items_are_its_whole_conversation_page_by_page(proxy: str) -> None:
    """Three turns chained by previous_response_id: the third lists every earlier input and
    output (upstream's list), newest first by default; the paginator follows the cursors."""
    with _client(proxy) as client:
        first = client.responses.create(model="m", input="one")
        second = client.responses.create(model="m", input="two", previous_response_id=first.id)
        third = client.responses.create(
            model="m",
            input=[{"role": "user", "content": "three"}],
            previous_response_id=second.id,
        )
        newest_first = list(client.responses.input_items.list(third.id, limit=2))
        oldest_first = list(client.responses.input_items.list(third.id, order="asc"))
        only_first = client.responses.input_items.list(first.id)
    assert [item.id for item in oldest_first] == [item.id for item in newest_first[::-1]]
    assert _texts(oldest_first) == [
        "one",
        first.output_text,
        "two",
        second.output_text,
        "three",
    ]
    assert [getattr(item, "role", None) for item in oldest_first] == ["user", "assistant"] * 2 + [
        "user"
    ]
    assert oldest_first[1].id == first.output[0].id  # an output replayed keeps its id
    assert _texts(only_first.data) == ["one"]
    assert only_first.has_more is False


def test_a_background_responses_input_items_while_it_runs(proxy: str) -> None:
    with _client(proxy) as client:
        running = client.responses.create(
            model="m", input="slow [delay:30]", background=True, store=True
        )
        listed = client.responses.input_items.list(running.id)
        client.responses.cancel(running.id)
    assert _texts(listed.data) == ["slow [delay:30]"]


def test_listing_refuses_what_it_must(proxy: str) -> None:
    with _client(proxy) as client:
        kept = client.responses.create(model="m", input="mine")
        with _client(proxy, key="other") as other, pytest.raises(openai.NotFoundError):
            other.responses.input_items.list(kept.id)
        with pytest.raises(openai.NotFoundError):
            client.responses.input_items.list("resp_unknown")
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.input_items.list(kept.id, limit=500)
        assert refused.value.param == "limit"
        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.input_items.list(kept.id, after="msg_nowhere")
        assert refused.value.param == "after"
        unstored = client.responses.create(model="m", input="not kept", store=False)
        with pytest.raises(openai.NotFoundError):
            client.responses.input_items.list(unstored.id)
    for method in ("DELETE", "POST"):
        answer = httpx.request(
            method,
            f"{proxy}/v1/responses/{kept.id}/input_items",
            headers={"Authorization": "Bearer k"},
        )
        assert answer.status_code == 405
        assert answer.headers["allow"] == "GET"
    # Another dialect's answer is not found on these paths (one store keeps both).
    answer = httpx.get(
        f"{proxy}/v1/chat/completions/{kept.id}/messages", headers={"Authorization": "Bearer k"}
    )
    assert answer.status_code == 404


def test_a_stored_chat_completions_messages(proxy: str) -> None:
    messages: list[Any] = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": [{"type": "text", "text": "hello"}]},
    ]
    with _client(proxy) as client:
        with client.chat.completions.stream(model="m", messages=messages, store=True) as stream:
            completion = stream.get_final_completion()
        listed = list(client.chat.completions.messages.list(completion.id, limit=1))
        newest = client.chat.completions.messages.list(completion.id, order="desc")
        with _client(proxy, key="other") as other, pytest.raises(openai.NotFoundError):
            other.chat.completions.messages.list(completion.id)
    assert [message.id for message in listed] == [f"{completion.id}-0", f"{completion.id}-1"]
    assert [message.content for message in listed] == ["be brief", "hello"]
    assert listed[1].content_parts is not None
    assert listed[1].content_parts[0].model_dump(exclude_none=True) == {
        "type": "text",
        "text": "hello",
    }
    assert [message.id for message in newest.data] == [f"{completion.id}-1", f"{completion.id}-0"]
