"""CPU per resume of a finished background response, in one process (issue #30).

The proxy's own ASGI app (``ProxyApp``, the app ``serve`` runs) creates one background
response (``background: true``, the embedded model answering after T seconds, keepalives
every K), waits for its end, then replays it R times (``GET /v1/responses/{id}?stream=true
&starting_after=0``), one after the other, then C at once (``--concurrency``, 50: a Redis
store sends the reads made together in one round trip). What is timed is the process's CPU
per replay, the store's round trips and the replay's assembly included, no socket of the
client's and no other request's queueing. ``bench_resume.py`` measures the same replays'
latency over HTTP, 50 at a time, where this CPU is what makes the queue.

Floor, in the same process and run: a ``GET /healthz`` through the same app (its routing and
response, no store, no engine). ``--redis URL`` adds the row on a running redis-server.

    python benchmarks/bench_replay.py                          # T=1 s, K=0.05 s, R=300, memory
    python benchmarks/bench_replay.py --redis redis://127.0.0.1:6379/15 --rounds 3
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from collections.abc import MutableMapping
from typing import Any

from aiostream_synth._proxy.app import ProxyApp, ProxyConfig


def _scope(path: str, query: bytes = b"", method: str = "POST") -> dict[str, Any]:
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query,
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"authorization", b"Bearer k")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
    }


async def _call(app: ProxyApp, scope: dict[str, Any], body: bytes = b"") -> list[Any]:
    """One request to its end; the messages the app sent."""
    sent: list[MutableMapping[str, Any]] = []
    asked = False

    async def receive() -> dict[str, Any]:
        nonlocal asked
        if not asked:
            asked = True
            return {"type": "http.request", "body": body, "more_body": False}
        await asyncio.Event().wait()  # the client stays
        raise AssertionError("unreachable")

    async def send(message: MutableMapping[str, Any]) -> None:
        sent.append(message)

    await app(scope, receive, send)
    return sent


async def _row(
    store: str, delay: float, interval: float, replays: int, concurrency: int
) -> dict[str, float]:
    app = ProxyApp(ProxyConfig(keepalive_s=interval, store=store))
    inbox: asyncio.Queue[MutableMapping[str, Any]] = asyncio.Queue()
    outbox: asyncio.Queue[MutableMapping[str, Any]] = asyncio.Queue()
    lifespan = asyncio.create_task(app({"type": "lifespan"}, inbox.get, outbox.put))
    await inbox.put({"type": "lifespan.startup"})
    assert (await outbox.get())["type"] == "lifespan.startup.complete"
    body = {"model": "bench", "input": f"bench [delay:{delay:g}]", "background": True}
    created = await _call(app, _scope("/v1/responses"), json.dumps(body).encode())
    path = f"/v1/responses/{json.loads(created[1]['body'])['id']}"
    followed = await _call(app, _scope(path, b"stream=true", "GET"))  # until it ends
    events = b"".join(m.get("body", b"") for m in followed).count(b"\n\n")
    figures: dict[str, float] = {"events": events}
    replay = _scope(path, b"stream=true&starting_after=0", "GET")
    for name, scope, together in (
        ("floor", _scope("/healthz", method="GET"), 1),
        ("replay", replay, 1),
        ("together", replay, concurrency),
    ):
        cpu = time.process_time()
        for _ in range(replays // together):
            await asyncio.gather(*(_call(app, scope) for _ in range(together)))
        figures[name] = (time.process_time() - cpu) * 1e6 / (replays // together * together)
    await inbox.put({"type": "lifespan.shutdown"})
    await outbox.get()
    await lifespan
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--delay", type=float, default=1.0)
    parser.add_argument("--interval", type=float, default=0.05)
    parser.add_argument("--replays", type=int, default=300)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--concurrency", type=int, default=50, help="replays started at once, third column"
    )
    parser.add_argument("--redis", help="redis://HOST:PORT/DB of a running redis-server")
    args = parser.parse_args()
    stores = ["memory", *([args.redis] if args.redis else [])]
    results: dict[str, list[dict[str, float]]] = {store: [] for store in stores}
    for _ in range(args.rounds):
        for store in stores:
            results[store].append(
                asyncio.run(_row(store, args.delay, args.interval, args.replays, args.concurrency))
            )
    print(
        "| store | events replayed | floor µs | replay µs, each round | median | ÷ floor "
        f"| {args.concurrency} at once: µs per replay, each round | median |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for store, rows in results.items():
        floor = statistics.median(r["floor"] for r in rows)
        replay = statistics.median(r["replay"] for r in rows)
        together = statistics.median(r["together"] for r in rows)
        each = " ".join(f"{r['replay']:.0f}" for r in rows)
        each_together = " ".join(f"{r['together']:.0f}" for r in rows)
        name = "redis" if store.startswith("redis") else store
        print(
            f"| {name} | {rows[0]['events']:.0f} | {floor:.0f} | {each} | {replay:.0f} | "
            f"{replay / floor:.1f}x | {each_together} | {together:.0f} |"
        )


if __name__ == "__main__":
    main()
