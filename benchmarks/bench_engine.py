"""Many concurrent waiting streams in one process (no HTTP): CPU per keepalive, memory per stream.

Each stream: a backend that sleeps T seconds, keepalive every K seconds, a consumer that reads
every frame. As in a server, each consumer is a plain task of the event loop (uvicorn creates one
per connection with ``loop.create_task``, hypercorn-trio starts one in a nursery), and the
backend's wait is the loop's own sleep; so what is measured beyond the floor is the engine's
cost, not anyio's per-spawn bookkeeping in the harness. Each configuration runs in its own
subprocess so RSS is measured cleanly:

* ``floor`` / ``floor-trio``: bare asyncio / bare trio, one task per stream that sleeps K and
  emits a constant frame — the least a keepalive can cost in Python on that loop; each engine
  row's ratios are against the floor of its own loop;
* ``engine-asyncio`` / ``engine-uvloop`` (when installed) / ``engine-trio``: SynthesizedStream,
  Responses dialect in full fidelity (the product default), so each keepalive is a real event;
  each stream opens its own task group;
* ``...+shared``: the same, every backend task spawned into one long-lived task group
  (``SynthesizedStream(task_group=...)``), as a server would hold in its lifespan.

Run: ``python benchmarks/bench_engine.py`` (defaults N=10000, T=20, K=1) or ``--quick``.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from typing import Any

RESULT = {
    "id": "resp_b",
    "object": "response",
    "created_at": 1,
    "model": "m",
    "status": "completed",
    "output": [
        {
            "type": "message",
            "id": "msg_1",
            "role": "assistant",
            "status": "completed",
            "content": [{"type": "output_text", "text": "done", "annotations": []}],
        }
    ],
    "usage": {"input_tokens": 1, "output_tokens": 1, "total_tokens": 2},
}


def _rss_kib() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") // 1024


def child(kind: str, n: int, delay: float, interval: float) -> dict[str, Any]:
    import anyio

    from aiostream_synth import ResponsesDialect, SynthesizedStream

    counts = {"keepalive": 0, "frames": 0, "completed": 0}
    opened = {"n": 0}
    all_open: Any = None

    shared = kind.endswith("+shared")
    kind_loop = kind.removesuffix("+shared")
    host: Any = None
    on_trio = kind_loop in ("engine-trio", "floor-trio")
    if on_trio:
        import trio

        native_sleep: Any = trio.sleep
    else:
        import asyncio

        native_sleep = asyncio.sleep

    async def engine_stream() -> None:
        async def backend() -> Any:
            await native_sleep(delay)
            return RESULT

        async with SynthesizedStream(
            backend,
            ResponsesDialect(base={"model": "m"}),
            keepalive_interval=interval,
            task_group=host,
        ) as frames:
            opened["n"] += 1
            if opened["n"] == n:
                all_open.set()
            async for frame in frames:
                counts["frames"] += 1
                if frame.startswith(b"event: response.in_progress"):
                    counts["keepalive"] += 1
                elif frame.startswith(b"event: response.completed"):
                    counts["completed"] += 1

    async def floor_stream() -> None:
        opened["n"] += 1
        if opened["n"] == n:
            all_open.set()
        frame = b'event: response.in_progress\ndata: {"type":"response.in_progress"}\n\n'
        end = time.monotonic() + delay
        while True:
            remaining = end - time.monotonic()
            if remaining <= 0:
                break
            await native_sleep(min(interval, remaining))
            if time.monotonic() < end:
                counts["keepalive"] += 1
                counts["frames"] += len(frame) > 0
        counts["completed"] += 1

    async def measure() -> tuple[int, float, int, float, float, int, float]:
        await all_open.wait()
        await anyio.sleep(interval * 1.5)  # every stream waiting, first ticks done
        rss1 = _rss_kib()
        cpu0, ka0, t0 = time.process_time(), counts["keepalive"], time.monotonic()
        await anyio.sleep(max(delay - interval * 4, interval))
        cpu1, ka1, t1 = time.process_time(), counts["keepalive"], time.monotonic()
        return rss1, cpu0, ka0, t0, cpu1, ka1, t1

    async def run() -> dict[str, Any]:
        nonlocal all_open
        all_open = anyio.Event()
        import gc

        gc.collect()
        rss0 = _rss_kib()
        nonlocal host
        stream = floor_stream if kind.startswith("floor") else engine_stream
        async with anyio.create_task_group() as shared_group:
            host = shared_group if shared else None
            measured = await spawn_and_measure(stream, rss0)
        return measured

    async def spawn_and_measure(stream: Any, rss0: int) -> dict[str, Any]:
        if on_trio:
            import trio

            async with trio.open_nursery() as nursery:
                for _ in range(n):
                    nursery.start_soon(stream)
                rss1, cpu0, ka0, t0, cpu1, ka1, t1 = await measure()
        else:
            import asyncio

            loop = asyncio.get_running_loop()
            tasks = [loop.create_task(stream()) for _ in range(n)]
            rss1, cpu0, ka0, t0, cpu1, ka1, t1 = await measure()
            await asyncio.gather(*tasks)
        return {
            "kind": kind,
            "n": n,
            "delay_s": delay,
            "interval_s": interval,
            "kib_per_stream": (rss1 - rss0) / n,
            "cpu_us_per_keepalive": (cpu1 - cpu0) * 1e6 / max(ka1 - ka0, 1),
            "keepalives_in_window": ka1 - ka0,
            "expected_in_window": n * (t1 - t0) / interval,
            "completed": counts["completed"],
        }

    backend = "trio" if on_trio else "asyncio"
    options: dict[str, Any] = {}
    if kind_loop == "engine-uvloop":
        options = {"use_uvloop": True}
    result: dict[str, Any] = anyio.run(run, backend=backend, backend_options=options)
    return result


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=10_000)
    parser.add_argument("--delay", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--quick", action="store_true", help="N=2000, T=6 s")
    parser.add_argument(
        "--only", help="comma-separated runs to keep (the floors always run), e.g. engine-trio"
    )
    parser.add_argument("--child")
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.n, args.delay, args.interval)))
        return
    if args.quick:
        args.n, args.delay = 2000, 6.0
    kinds = [
        "floor",
        "engine-asyncio",
        "engine-asyncio+shared",
        "floor-trio",
        "engine-trio",
        "engine-trio+shared",
    ]
    try:
        import uvloop  # type: ignore[import-not-found,unused-ignore]  # noqa: F401

        kinds[3:3] = ["engine-uvloop", "engine-uvloop+shared"]
    except ImportError:
        pass
    if args.only:
        keep = set(args.only.split(","))
        kinds = [k for k in kinds if k.startswith("floor") or k in keep]
    rows = []
    for kind in kinds:
        print(
            f"running {kind} (N={args.n}, T={args.delay:g}s, K={args.interval:g}s)...",
            file=sys.stderr,
        )
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                kind,
                "-n",
                str(args.n),
                "--delay",
                str(args.delay),
                "--interval",
                str(args.interval),
            ],
            check=True,
            capture_output=True,
            text=True,
        )
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
    floors = {"asyncio": rows[0], "trio": next(r for r in rows if r["kind"] == "floor-trio")}
    print(
        "| run | KiB per waiting stream | ratio | CPU µs per keepalive | ratio | keepalives seen / expected | completed |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        floor = floors["trio" if "trio" in r["kind"] else "asyncio"]
        print(
            f"| {r['kind']} | {r['kib_per_stream']:.2f} | {r['kib_per_stream'] / floor['kib_per_stream']:.2f}x | "
            f"{r['cpu_us_per_keepalive']:.1f} | {r['cpu_us_per_keepalive'] / floor['cpu_us_per_keepalive']:.2f}x | "
            f"{r['keepalives_in_window']}/{r['expected_in_window']:.0f} | {r['completed']}/{r['n']} |"
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
