"""What one flush of the writer costs the proxy on Redis: client CPU µs per response for a
flush of N background responses' ends (seven events, the final object, ``done``), written by
``RedisStore.append_many``, against a floor in the same rounds: the same bytes sent as one
argument of a script that does nothing (what a flush cannot cost less than on this client:
one call, the payload on the wire once).

Rounds alternate the two rows; medians reported. Needs a Redis server (a scratch database:
the script writes keys under its own prefix and leaves them to expire).

    python benchmarks/bench_store_writes.py --redis redis://127.0.0.1:6390/0
    python benchmarks/bench_store_writes.py --redis redis://127.0.0.1:6390/0 -n 2000 --rounds 9
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import time
import uuid

import orjson

from aiostream_synth._store.base import Creation, Write
from aiostream_synth._store.redis import RedisStore

#: What a background response's end carries: six events, then the terminal one with the
#: response (an answer of a few hundred characters).
RESPONSE = {
    "id": "resp_0",
    "object": "response",
    "status": "completed",
    "background": True,
    "output": [
        {
            "type": "message",
            "id": "msg_0",
            "status": "completed",
            "role": "assistant",
            "content": [{"type": "output_text", "text": "hello " * 60, "annotations": []}],
        }
    ],
    "usage": {"input_tokens": 12, "output_tokens": 60, "total_tokens": 72},
}


def _end(first: int) -> tuple[list[tuple[int, bytes]], bytes]:
    obj = orjson.dumps(RESPONSE)
    frames = [b"event: response.output_text.delta\ndata: " + b"x" * 300 + b"\n\n"] * 6
    frames.append(b"event: response.completed\ndata: " + obj + b"\n\n")
    return list(zip(range(first, first + 7), frames, strict=True)), obj


async def main(url: str, n: int, rounds: int) -> None:
    events, obj = _end(4)
    payload = b"".join(frame for _, frame in events) + obj
    rows: dict[str, list[float]] = {"floor (one argument, same bytes)": [], "append_many": []}
    prefix = f"bench-{uuid.uuid4().hex[:8]}:"
    async with RedisStore(url, prefix=prefix, ttl_s=60) as store:
        client = store._client
        for round_number in range(rounds):
            ids = [f"resp_{round_number}_{i:032x}" for i in range(n)]
            created = {
                rid: Write(Creation("owner", {"id": rid}, b"[]", True), [], None, False, None, 3)
                for rid in ids
            }
            await store.append_many(created)
            ends = {rid: Write(None, events, obj, True, None, -1) for rid in ids}
            cpu = time.process_time()
            await store.append_many(ends)
            rows["append_many"].append((time.process_time() - cpu) / n * 1e6)
            cpu = time.process_time()
            async with client.pipeline(transaction=False) as pipe:
                pipe.eval("return 0", [f"{prefix}floor"], [b"".join([payload] * n)])
            rows["floor (one argument, same bytes)"].append((time.process_time() - cpu) / n * 1e6)
            print(
                f"round {round_number + 1}: append_many {rows['append_many'][-1]:.2f} µs, "
                f"floor {rows['floor (one argument, same bytes)'][-1]:.2f} µs per response"
            )
    floor = statistics.median(rows["floor (one argument, same bytes)"])
    print(f"\nN = {n} responses a flush, {len(payload)} bytes each, {rounds} rounds")
    print("\n| row | client CPU µs per response, each round | median | ÷ floor |")
    print("|---|---|---|---|")
    for row, values in rows.items():
        median = statistics.median(values)
        each = " ".join(f"{value:.2f}" for value in values)
        print(f"| {row} | {each} | {median:.2f} | {median / floor:.2f}x |")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--redis", required=True, help="redis://HOST:PORT/DB (a scratch database)")
    parser.add_argument("-n", type=int, default=500, help="responses a flush")
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--cpu", type=int, help="pin to this core")
    args = parser.parse_args()
    if args.cpu is not None:
        os.sched_setaffinity(0, {args.cpu})
    asyncio.run(main(args.redis, args.n, args.rounds))
