"""What a page of a key's stored chat completions costs the proxy, by how many the key keeps:
``GET /v1/chat/completions?limit=20`` through the app in one process (no sockets), after the
store was filled with N completions of that key, against a floor in the same rounds (the
page's answer serialized: what a page cannot cost less than). CPU and wall milliseconds per
page, medians of the rounds; on the memory store and, with ``--redis``, on a Redis server
(wall time then includes the server's work; a scratch database: keys under a prefix of their
own, left to expire).

    python benchmarks/bench_listing.py
    python benchmarks/bench_listing.py --redis redis://127.0.0.1:6390/0 --sizes 100 1000 10000
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
import uuid
from collections.abc import MutableMapping
from typing import Any

import orjson

from aiostream_synth._proxy.app import ProxyApp, ProxyConfig
from aiostream_synth._serving.background import owner_of

LIMIT = 20


def completion(n: int) -> dict[str, Any]:
    return {
        "id": f"chatcmpl-{n:08d}",
        "object": "chat.completion",
        "created": 1_700_000_000 + n,
        "model": "bench",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": "hello " * 40},
                "finish_reason": "stop",
            }
        ],
        "usage": {"prompt_tokens": 12, "completion_tokens": 40, "total_tokens": 52},
        "metadata": {},
    }


async def one_size(store: str, size: int, rounds: int, pages: int) -> dict[str, float]:
    key = f"Bearer bench-lister-{uuid.uuid4().hex}"  # a list of its own on a shared Redis
    app = ProxyApp(ProxyConfig(store=store, store_ttl_s=600))
    inbox: asyncio.Queue[MutableMapping[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[MutableMapping[str, Any]] = asyncio.Queue()
    lifespan = asyncio.create_task(app({"type": "lifespan"}, inbox.get, outbox.put))
    await inbox.put({"type": "lifespan.startup"})
    started = await outbox.get()
    if started["type"] != "lifespan.startup.complete":
        raise SystemExit(f"the app did not start: {started.get('message')}")
    background = app.synth.background
    assert background is not None
    owner = owner_of({"authorization": key})
    for n in range(size):
        await background.store.create(
            f"chatcmpl-{n:08d}",
            owner,
            completion(n),
            listed_in="chat.completions",
            listed_at=float(n),
        )
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "GET",
        "scheme": "http",
        "path": "/v1/chat/completions",
        "raw_path": b"/v1/chat/completions",
        "query_string": f"limit={LIMIT}".encode(),
        "root_path": "",
        "headers": [(b"authorization", key.encode())],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
    }

    async def page() -> bytes:
        body: list[bytes] = []

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: MutableMapping[str, Any]) -> None:
            if message["type"] == "http.response.body":
                body.append(message.get("body", b""))

        await app(dict(scope), receive, send)
        return b"".join(body)

    answer = orjson.loads(await page())
    if len(answer.get("data", ())) != min(LIMIT, size):
        raise SystemExit(f"a page of {size}: {str(answer)[:200]}")
    results: dict[str, list[float]] = {"cpu": [], "wall": [], "floor": []}
    for _ in range(rounds):
        cpu, wall = time.process_time(), time.perf_counter()
        for _ in range(pages):
            await page()
        results["cpu"].append((time.process_time() - cpu) * 1e3 / pages)
        results["wall"].append((time.perf_counter() - wall) * 1e3 / pages)
        cpu = time.process_time()
        for _ in range(pages):
            orjson.dumps(answer)
        results["floor"].append((time.process_time() - cpu) * 1e3 / pages)
    await inbox.put({"type": "lifespan.shutdown"})
    await outbox.get()
    await lifespan
    return {what: statistics.median(values) for what, values in results.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 1000, 10000])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--pages", type=int, default=20, help="pages read per round")
    parser.add_argument("--redis", help="redis://HOST:PORT/DB: the Redis rows too")
    args = parser.parse_args()
    print("| store | completions kept | CPU ms per page | wall ms per page | ÷ floor (CPU) |")
    print("|---|---|---|---|---|")
    for store in ["memory", *([args.redis] if args.redis else [])]:
        for size in args.sizes:
            got = asyncio.run(one_size(store, size, args.rounds, args.pages))
            print(
                f"| {store.partition(':')[0]} | {size:,} | {got['cpu']:.3f} | {got['wall']:.3f} |"
                f" {got['cpu'] / got['floor']:.0f}x |"
            )


if __name__ == "__main__":
    main()
