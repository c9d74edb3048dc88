"""Stored chat completions (issue 30): ``store: true`` on ``/v1/chat/completions``, then
``GET`` and ``DELETE /v1/chat/completions/{id}`` — through the openai SDK, on a real server on
asyncio (uvicorn) and on trio (hypercorn), on the memory store and on Redis."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator
from typing import Any

import anyio
import coredis
import httpx
import openai
import pytest
from openai.types.chat import ChatCompletion, ChatCompletionDeleted

from aiostream_synth._dialects.chat.stored import CHAT_STORAGE, KeptChatDialect
from aiostream_synth._dialects.chat.stream import ChatDialect
from aiostream_synth._proxy.app import ProxyApp, ProxyConfig
from aiostream_synth._proxy.embedded import EmbeddedBackend
from aiostream_synth._serving.background import owner_of
from aiostream_synth._serving.pipeline import BackendCall
from aiostream_synth._store.base import StoreUnavailable
from aiostream_synth._store.memory import MemoryStore
from aiostream_synth._store.redis import RedisStore
from aiostream_synth._wire.failures import Failure

from .support.servers import serve

TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "shell",
            "parameters": {"type": "object", "properties": {"cmd": {"type": "string"}}},
        },
    }
]


@pytest.fixture(
    params=[
        ("uvicorn", "memory"),
        ("hypercorn-trio", "memory"),
        ("uvicorn", "redis"),
        ("hypercorn-trio", "redis"),
    ],
    ids="-".join,
)
def served(request: pytest.FixtureRequest) -> Iterator[tuple[str, ProxyApp]]:
    """The proxy on asyncio (uvicorn) and trio (hypercorn), on each store."""
    server, store = request.param
    url = request.getfixturevalue("redis_url") if store == "redis" else "memory"
    app = ProxyApp(ProxyConfig(keepalive_s=0.1, store=url))
    with serve(app, server, lifespan=True) as base:
        yield base, app


@pytest.fixture
def proxy(served: tuple[str, ProxyApp]) -> str:
    return served[0]


def _kept(app: ProxyApp) -> set[str]:
    """The ids of the chat completions the app's store holds."""
    store = app.synth.background.store if app.synth.background is not None else None
    if isinstance(store, MemoryStore):
        return {key for key in store._entries if key.startswith("chatcmpl-")}
    assert isinstance(store, RedisStore)
    record = store._keys("")[0]

    async def keys() -> set[str]:
        async with coredis.Redis.from_url(store.url) as client:
            found = await client.keys(f"{record}chatcmpl-*")
        return {key.decode().removeprefix(record) for key in found}

    return anyio.run(keys)


def _client(url: str, key: str = "k") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{url}/v1", api_key=key, max_retries=0, timeout=60)


def _retrieved(url: str, completion_id: str, key: str = "k") -> dict[str, Any]:
    """The stored completion as the wire has it, validated strictly by the SDK's model."""
    answer = httpx.get(
        f"{url}/v1/chat/completions/{completion_id}", headers={"Authorization": f"Bearer {key}"}
    )
    assert answer.status_code == 200, answer.text
    body: dict[str, Any] = answer.json()
    ChatCompletion.model_validate(body, strict=True)
    return body


def _wire(value: Any) -> Any:
    """An SDK object as plain JSON, without the stream helper's own ``parsed`` fields."""
    if hasattr(value, "model_dump"):
        value = value.model_dump(mode="json", exclude_none=True)
    if isinstance(value, dict):
        return {k: _wire(v) for k, v in value.items() if k not in ("parsed", "parsed_arguments")}
    if isinstance(value, list):
        return [_wire(v) for v in value]
    return value


@pytest.mark.parametrize("usage", [False, True])
def test_a_streamed_completion_is_stored_as_its_chunks_built_it(proxy: str, usage: bool) -> None:
    """The SDK's accumulator rebuilds the same completion from the chunks as the one retrieved:
    the same id (every chunk carries the stored one), text and tool call; its usage complete
    whether or not the stream carried it."""
    extra: dict[str, Any] = {"stream_options": {"include_usage": True}} if usage else {}
    with _client(proxy) as client:
        with client.chat.completions.stream(
            model="m",
            messages=[{"role": "user", "content": 'keep me [delay:0.3] [tool:shell {"cmd":"ls"}]'}],
            tools=TOOLS,
            store=True,
            **extra,
        ) as stream:
            final = stream.get_final_completion()
        retrieved = client.chat.completions.retrieve(final.id)
    body = _retrieved(proxy, final.id)
    assert final.id.startswith("chatcmpl-")
    assert retrieved.id == body["id"] == final.id
    assert body["object"] == "chat.completion"
    call = final.choices[0].message.tool_calls
    assert call is not None
    assert call[0].function.arguments == '{"cmd":"ls"}'
    assert final.choices[0].finish_reason == "tool_calls"
    expected = _wire(final)
    # The accumulator's own traces: the chunks' object type, each call's delta index.
    del expected["object"]
    for call in expected["choices"][0]["message"]["tool_calls"]:
        del call["index"]
    got = _wire(retrieved)
    assert got.pop("object") == "chat.completion"
    assert got.pop("metadata") == {}  # the request's, kept beside the answer
    assert got.pop("usage")["total_tokens"] > 0
    expected.pop("usage", None)
    assert got == expected


def test_a_completion_that_is_not_streamed_is_stored_under_the_id_it_answers_with(
    proxy: str,
) -> None:
    with _client(proxy) as client:
        created = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "whole"}], store=True
        )
        retrieved = client.chat.completions.retrieve(created.id)
    kept = _wire(retrieved)
    assert kept.pop("metadata") == {}  # the request's, kept beside the answer
    assert kept == _wire(created)
    assert _retrieved(proxy, created.id)["choices"][0]["message"]["content"] == "whole"


async def _repeating(call: BackendCall) -> Any:
    """The embedded model with one id for every answer, as some local servers (a few hundred
    ids drawn at random, or a constant one)."""
    result = await EmbeddedBackend()(call)
    result["id"] = "resp_same" if call.dialect == "responses" else "chatcmpl-same"
    return result


@pytest.fixture(params=[("uvicorn", "memory"), ("hypercorn-trio", "redis")], ids="-".join)
def repeating(request: pytest.FixtureRequest) -> Iterator[str]:
    server, store = request.param
    url = request.getfixturevalue("redis_url") if store == "redis" else "memory"
    app = ProxyApp(ProxyConfig(keepalive_s=0.1, store=url), backend=_repeating)
    with serve(app, server, lifespan=True) as base:
        yield base


def test_a_backend_repeating_its_ids_never_replaces_a_kept_answer(repeating: str) -> None:
    """Two keys, two answers each, every answer with the backend's one id: each is kept under
    an id of ours, which it answers with, and is its creator's alone to read."""
    answers: dict[str, list[tuple[str, str]]] = {}
    for key in ("a", "b"):
        with _client(repeating, key) as client:
            kept = []
            for text in ("first", "second"):
                chat = client.chat.completions.create(
                    model="m", messages=[{"role": "user", "content": f"{key} {text}"}], store=True
                )
                response = client.responses.create(model="m", input=f"{key} {text}")
                kept += [(chat.id, f"{key} {text}"), (response.id, f"{key} {text}")]
            answers[key] = kept
    ids = [answer_id for kept in answers.values() for answer_id, _ in kept]
    assert len(set(ids)) == 8
    assert "chatcmpl-same" not in ids
    assert "resp_same" not in ids
    for key, kept in answers.items():
        with _client(repeating, key) as client:
            for answer_id, text in kept:
                if answer_id.startswith("resp_"):
                    assert client.responses.retrieve(answer_id).output_text == text
                else:
                    completion = client.chat.completions.retrieve(answer_id)
                    assert completion.choices[0].message.content == text
        other = "b" if key == "a" else "a"
        with _client(repeating, other) as client, pytest.raises(openai.NotFoundError):
            client.chat.completions.retrieve(kept[0][0])
    # A continuation finds the right conversation under the id it was answered with.
    with _client(repeating, "a") as client:
        follow = client.responses.create(
            model="m", input="again", previous_response_id=answers["a"][1][0]
        )
        listed = client.responses.input_items.list(follow.id, order="asc")
    texts = [part.text for item in listed.data for part in getattr(item, "content", [])]
    assert texts == ["a first", "a first", "again"]


@pytest.mark.parametrize("store", [None, False])
def test_a_completion_is_not_stored_unless_its_request_says_so(
    proxy: str, store: bool | None
) -> None:
    """Upstream's default: ``store`` false."""
    extra: dict[str, Any] = {} if store is None else {"store": store}
    with _client(proxy) as client:
        with client.chat.completions.stream(
            model="m", messages=[{"role": "user", "content": "not kept"}], **extra
        ) as stream:
            final = stream.get_final_completion()
        created = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "nor this"}], **extra
        )
        for completion_id in (final.id, created.id):
            with pytest.raises(openai.NotFoundError) as refused:
                client.chat.completions.retrieve(completion_id)
            assert f"Chat completion with id '{completion_id}' not found" in str(refused.value)


def test_a_stream_that_fails_after_its_start_is_not_stored(
    served: tuple[str, ProxyApp],
) -> None:
    """The error comes in band after the first keepalives: no completion, nothing kept (the
    next stored one is all the store gains)."""
    url, app = served
    before = _kept(app)
    with _client(url) as client:
        stream = client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "[delay:0.3] [error:500]"}],
            stream=True,
            store=True,
        )
        with pytest.raises(openai.APIError, match="embedded backend"):
            for _ in stream:
                pass
        with client.chat.completions.stream(
            model="m", messages=[{"role": "user", "content": "kept"}], store=True
        ) as kept:
            completion_id = kept.get_final_completion().id
        client.chat.completions.retrieve(completion_id)  # written by now
    assert _kept(app) == before | {completion_id}


def test_a_stored_completion_is_the_creators_and_is_deleted(proxy: str) -> None:
    with _client(proxy) as client:
        created = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "mine"}], store=True
        )
        with _client(proxy, key="someone else") as other:
            with pytest.raises(openai.NotFoundError):
                other.chat.completions.retrieve(created.id)
            with pytest.raises(openai.NotFoundError):
                other.chat.completions.delete(created.id)
        deleted = client.chat.completions.delete(created.id)
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.retrieve(created.id)
    assert deleted == ChatCompletionDeleted(
        id=created.id, object="chat.completion.deleted", deleted=True
    )


def test_what_chat_completions_does_not_have_is_refused_by_name(proxy: str) -> None:
    """No cancel, no replayed events (a ``stream`` query is not one of the API's), no writing
    to its messages: each a clear 4xx in OpenAI's error shape."""
    with _client(proxy) as client:
        created = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "as is"}], store=True
        )
    base = f"{proxy}/v1/chat/completions/{created.id}"
    headers = {"Authorization": "Bearer k"}
    streamed = httpx.get(f"{base}?stream=true&starting_after=0", headers=headers)
    assert streamed.status_code == 200
    assert streamed.json()["id"] == created.id  # the object, not events
    for method, path, status in (
        ("POST", f"{base}/cancel", 404),
        ("POST", f"{base}/messages", 405),
        ("GET", f"{base}/choices", 404),
        ("PUT", base, 405),
    ):
        answer = httpx.request(method, path, headers=headers, json={})
        assert answer.status_code == status, (method, path, answer.text)
        error = answer.json()["error"]
        assert error["message"], error
    assert "chat completion" in json.dumps(httpx.post(f"{base}/cancel", headers=headers).json())


def test_only_a_stream_that_ended_with_its_answer_leaves_an_object_to_keep() -> None:
    """The last write ends with ``[DONE]`` (an in-band error ends without it; a client that
    left got no last write): only then is the completion the chunks carried kept."""
    kept = KeptChatDialect(ChatDialect(), "chatcmpl-mine")
    stream = kept.open_stream()
    frames = stream.result_frames(
        {"id": "theirs", "model": "m", "created": 7, "choices": [{"message": {"content": "hi"}}]}
    )
    assert all(b'"id":"chatcmpl-mine"' in frame for frame in frames[:-1])
    done = b"".join(frames)
    final = CHAT_STORAGE.final_object_json(kept, done)
    assert final is not None
    assert json.loads(final) == {
        "id": "chatcmpl-mine",
        "object": "chat.completion",
        "model": "m",
        "created": 7,
        "choices": [{"message": {"content": "hi"}}],
    }
    error = stream.failure_frames(Failure(500, "server_error", "no"))[0]
    assert CHAT_STORAGE.final_object_json(kept, done[: -len(frames[-1])] + error) is None
    assert CHAT_STORAGE.final_object_json(kept, None) is None
    assert CHAT_STORAGE.final_object_json(ChatDialect(), done) is None  # not a kept stream


def test_one_dialects_stored_answer_is_not_found_on_the_others_paths(proxy: str) -> None:
    """One store keeps every dialect's answers: a response is no chat completion, and the
    other way round, for retrieval and deletion alike."""
    with _client(proxy) as client:
        completion = client.chat.completions.create(
            model="m", messages=[{"role": "user", "content": "a completion"}], store=True
        )
        response = client.responses.create(model="m", input="a response")  # stored by default
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.retrieve(response.id)
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.delete(response.id)
        with pytest.raises(openai.NotFoundError):
            client.responses.retrieve(completion.id)
        with pytest.raises(openai.NotFoundError):
            client.responses.delete(completion.id)
        assert client.chat.completions.retrieve(completion.id).id == completion.id
        assert client.responses.retrieve(response.id).id == response.id


def _streamed(client: openai.OpenAI, text: str, **extra: Any) -> str:
    with client.chat.completions.stream(
        model=extra.pop("model", "m"),
        messages=[{"role": "user", "content": text}],
        store=True,
        **extra,
    ) as stream:
        return stream.get_final_completion().id


def test_a_keys_stored_completions_are_listed_page_by_page(proxy: str) -> None:
    """``GET /v1/chat/completions``: the key's own stored completions, streamed or not, oldest
    first, by model and by metadata, as the SDK's paginator reads them; nothing unstored, no
    other dialect's answer and no other key's."""
    key = f"lister-{uuid.uuid4().hex}"
    with _client(proxy, key) as client:
        first = _streamed(client, "one", metadata={"run": "a"})
        second = client.chat.completions.create(
            model="m",
            messages=[{"role": "user", "content": "two"}],
            store=True,
            metadata={"run": "b"},
        ).id
        third = _streamed(client, "three", model="other")
        client.chat.completions.create(model="m", messages=[{"role": "user", "content": "no"}])
        client.responses.create(model="m", input="a response is not listed here")
        everything = list(client.chat.completions.list(limit=1))
        newest_first = client.chat.completions.list(order="desc")
        by_run = client.chat.completions.list(metadata={"run": "a"})
        by_model = client.chat.completions.list(model="other")
        client.chat.completions.delete(second)
        after_delete = client.chat.completions.list()
    assert [completion.id for completion in everything] == [first, second, third]
    assert [completion.choices[0].message.content for completion in everything] == [
        "one",
        "two",
        "three",
    ]
    for completion in everything:
        ChatCompletion.model_validate(completion.model_dump(mode="json"), strict=True)
    assert [completion.id for completion in newest_first.data] == [third, second, first]
    assert [completion.id for completion in by_run.data] == [first]
    assert [completion.id for completion in by_model.data] == [third]
    assert [completion.id for completion in after_delete.data] == [first, third]
    with _client(proxy, f"other-{key}") as other:
        assert other.chat.completions.list().data == []


def test_a_stored_completions_metadata_is_kept_and_updated(proxy: str) -> None:
    key = f"updater-{uuid.uuid4().hex}"
    with _client(proxy, key) as client:
        completion_id = _streamed(client, "tag me", metadata={"stage": "draft"})
        kept = _retrieved(proxy, completion_id, key)
        updated = client.chat.completions.update(completion_id, metadata={"stage": "final"})
        retrieved = _retrieved(proxy, completion_id, key)
        found = client.chat.completions.list(metadata={"stage": "final"})
        cleared = client.chat.completions.update(completion_id, metadata=None)
        for wrong, param in (
            ({"metadata": {f"k{n}": "v" for n in range(17)}}, "metadata"),
            ({"metadata": {"k": 1}}, "metadata"),
            ({"metadata": {"k" * 65: "v"}}, f"metadata.{'k' * 65}"),
            ({"metadata": {}, "model": "x"}, "model"),
            ({}, "metadata"),
        ):
            with pytest.raises(openai.BadRequestError) as refused:
                client.post(
                    f"/chat/completions/{completion_id}", body=wrong, cast_to=ChatCompletion
                )
            assert refused.value.param == param, wrong
        with _client(proxy, f"other-{key}") as other, pytest.raises(openai.NotFoundError):
            other.chat.completions.update(completion_id, metadata={"stage": "theirs"})
        with pytest.raises(openai.NotFoundError):
            client.chat.completions.update("chatcmpl-unknown", metadata={})
        response = client.responses.create(model="m", input="kept")
    assert kept["metadata"] == {"stage": "draft"}
    assert updated.id == completion_id
    assert retrieved["metadata"] == {"stage": "final"}
    assert retrieved["choices"] == kept["choices"]
    assert [completion.id for completion in found.data] == [completion_id]
    assert _retrieved(proxy, completion_id, key)["metadata"] == {}
    assert cleared.id == completion_id
    # A stored response is not updated (upstream has no such call).
    answer = httpx.post(
        f"{proxy}/v1/responses/{response.id}",
        headers={"Authorization": "Bearer k"},
        json={"metadata": {}},
    )
    assert answer.status_code == 405
    assert answer.headers["allow"] == "GET, DELETE"


def test_a_long_listing_is_read_a_page_at_a_time_whatever_its_filter_leaves(
    served: tuple[str, ProxyApp], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A key with many stored completions: a page reads about a page of them, not all; a
    filter that keeps few is followed across the store's list to fill each page, in either
    order; a cursor that names none of the key's completions is a 400 naming it."""
    url, app = served
    key = f"long-{uuid.uuid4().hex}"
    with _client(url, key) as client:
        made = [
            client.chat.completions.create(
                model="m",
                messages=[{"role": "user", "content": str(n)}],
                store=True,
                metadata={"pick": "yes"} if n % 9 == 4 else {},
            ).id
            for n in range(120)
        ]
        background = app.synth.background
        assert background is not None
        store, reads = background.store, [0]
        read = store.read

        async def counted(*args: Any, **kwargs: Any) -> Any:
            reads[0] += 1
            return await read(*args, **kwargs)

        monkeypatch.setattr(store, "read", counted)
        first = client.chat.completions.list(limit=3)
        read_for_a_page = reads[0]
        picked = list(client.chat.completions.list(limit=4, metadata={"pick": "yes"}))
        newest = list(client.chat.completions.list(limit=5, order="desc", metadata={"pick": "yes"}))
    with _client(url, f"other-{key}") as other:
        theirs = _streamed(other, "not yours")
    for cursor in ("after", "before"):
        for wrong in ("chatcmpl-none", theirs):
            refused = httpx.get(
                f"{url}/v1/chat/completions?{cursor}={wrong}",
                headers={"Authorization": f"Bearer {key}"},
            )
            assert refused.status_code == 400, refused.text
            assert refused.json()["error"]["param"] == cursor
    assert [completion.id for completion in first.data] == made[:3]
    assert first.has_more
    assert read_for_a_page == 4  # the page's three and one more (are there more?)
    tagged = [made[n] for n in range(120) if n % 9 == 4]
    assert [completion.id for completion in picked] == tagged
    assert [completion.id for completion in newest] == tagged[::-1]


def test_a_store_failing_under_a_listing_is_a_503_saying_so(
    served: tuple[str, ProxyApp], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The reads of a listing go together; one failing is the listing's 503, not a 500."""
    url, app = served
    key = f"failing-{uuid.uuid4().hex}"
    with _client(url, key) as client:
        for text in ("one", "two"):
            client.chat.completions.create(
                model="m", messages=[{"role": "user", "content": text}], store=True
            )
        background = app.synth.background
        assert background is not None

        async def unavailable(*args: Any, **kwargs: Any) -> Any:
            raise StoreUnavailable("the store is down")

        monkeypatch.setattr(background.store, "read", unavailable)
        with pytest.raises(openai.InternalServerError) as refused:
            client.chat.completions.list()
    assert refused.value.status_code == 503
    assert "store" in str(refused.value)


def test_a_listing_holds_only_the_keys_own_answers_whatever_its_list_says(
    redis_url: str,
) -> None:
    """An id left in a key's list whose record another key's answer took over (a list is
    only an index) is not that key's to see."""
    key = f"owner-{uuid.uuid4().hex}"
    # The proxy stops between the writes and the take-over: its writer has flushed by then
    # (a later flush of its own would take the record back). Its settings are the module's
    # other servers' (one database, one fleet).
    app = ProxyApp(ProxyConfig(keepalive_s=0.1, store=redis_url))
    with serve(app, "uvicorn", lifespan=True) as url, _client(url, key) as client:
        taken = _streamed(client, "mine, then theirs")
        kept = _streamed(client, "mine")

    async def take_over() -> None:
        async with RedisStore(redis_url) as store:
            other = owner_of({"authorization": "Bearer someone-else"})
            await store.create(taken, other, {"id": taken, "object": "chat.completion"})

    anyio.run(take_over)
    app = ProxyApp(ProxyConfig(keepalive_s=0.1, store=redis_url))
    with serve(app, "uvicorn", lifespan=True) as url, _client(url, key) as client:
        listed = client.chat.completions.list()
    assert [completion.id for completion in listed.data] == [kept]
