"""Long-turn load through the two adapters: native ASGI vs sse-starlette, side by side.

The server (uvicorn, one worker) runs in its own process with a built-in backend that answers
after T seconds; a load client on raw asyncio sockets (this process) opens N streams at once
to ``/v1/responses`` and reads every frame. Reported per server: streams completed, server RSS
per open stream, server CPU µs per keepalive (both measured from /proc while all N wait), and
the keepalive gap p50 / max as multiples of K.

Run: ``python benchmarks/bench_asgi.py`` (N=2000, T=20, K=1) or ``-n 10000``; loopback only.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import resource
import signal
import subprocess
import sys
import time
from typing import Any

BODY = json.dumps({"model": "bench", "input": "hello", "stream": True}).encode()


def _raise_fd_limit() -> None:
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def serve(kind: str, port: int, delay: float, interval: float) -> None:
    import anyio
    import uvicorn
    from starlette.applications import Starlette

    from aiostream_synth import BackendCall, StreamSettings, SynthesizingApp
    from aiostream_synth.starlette import synthesizing_routes

    async def backend(call: BackendCall) -> Any:
        await anyio.sleep(delay)
        return {
            "id": "resp_b",
            "object": "response",
            "created_at": 1,
            "model": "bench",
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

    settings = StreamSettings(keepalive_interval=interval)
    app: Any = (
        SynthesizingApp(backend, settings)
        if kind == "native"
        else Starlette(routes=synthesizing_routes(backend, settings))
    )
    _raise_fd_limit()
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="error", lifespan="off", backlog=16384)


def _proc(pid: int) -> tuple[float, int]:
    with open(f"/proc/{pid}/stat") as fh:
        fields = fh.read().rsplit(")", 1)[1].split()
    ticks = os.sysconf("SC_CLK_TCK")
    cpu = (int(fields[11]) + int(fields[12])) / ticks
    with open(f"/proc/{pid}/statm") as fh:
        rss = int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    return cpu, rss


async def _one(port: int, stats: dict[str, Any], gaps: list[float], interval: float) -> None:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"POST /v1/responses HTTP/1.1\r\nHost: b\r\nContent-Type: application/json\r\n"
        + f"Content-Length: {len(BODY)}\r\n\r\n".encode()
        + BODY
    )
    await writer.drain()
    stats["opened"] += 1
    if stats["opened"] == stats["n"]:
        stats["all_open"].set()
    last = None
    done = False
    try:
        while not done:
            line = await reader.readline()
            if not line:
                break
            if line.startswith(b"event: response.in_progress"):
                now = time.monotonic()
                if last is not None:
                    gaps.append((now - last) / interval)
                last = now
                stats["keepalives"] += 1
            elif line.startswith(b"event: response.completed"):
                done = True
    finally:
        writer.close()
    stats["completed" if done else "failed"] += 1


async def load(port: int, n: int, delay: float, interval: float, pid: int) -> dict[str, Any]:
    stats: dict[str, Any] = {"opened": 0, "completed": 0, "failed": 0, "keepalives": 0}
    all_open = asyncio.Event()
    stats["all_open"] = all_open
    stats["n"] = n
    gaps: list[float] = []
    _, rss0 = _proc(pid)
    tasks = [asyncio.create_task(_one(port, stats, gaps, interval)) for _ in range(n)]
    await all_open.wait()
    await asyncio.sleep(interval * 2)
    cpu1, rss1 = _proc(pid)
    ka1 = stats["keepalives"]
    await asyncio.sleep(max(delay - interval * 5, interval))
    cpu2, _ = _proc(pid)
    ka2 = stats["keepalives"]
    await asyncio.gather(*tasks, return_exceptions=True)
    gaps.sort()
    return {
        "n": n,
        "completed": stats["completed"],
        "failed": stats["failed"],
        "kib_per_stream": (rss1 - rss0) / n / 1024,
        "cpu_us_per_keepalive": (cpu2 - cpu1) * 1e6 / max(ka2 - ka1, 1),
        "gap_p50": gaps[len(gaps) // 2] if gaps else None,
        "gap_max": gaps[-1] if gaps else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("-n", type=int, default=2000)
    parser.add_argument("--delay", type=float, default=20.0)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--serve")
    parser.add_argument("--port", type=int, default=18731)
    parser.add_argument("--json")
    args = parser.parse_args()
    if args.serve:
        serve(args.serve, args.port, args.delay, args.interval)
        return
    _raise_fd_limit()
    rows: list[dict[str, Any]] = []
    for kind in ("native", "sse-starlette"):
        port = args.port + len(rows)
        server = subprocess.Popen(
            [
                sys.executable,
                __file__,
                "--serve",
                kind,
                "--port",
                str(port),
                "--delay",
                str(args.delay),
                "--interval",
                str(args.interval),
            ]
        )
        try:
            for _ in range(200):
                try:
                    asyncio.run(asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 1))
                    break
                except OSError:
                    time.sleep(0.05)
            print(
                f"loading {kind}: N={args.n}, T={args.delay:g}s, K={args.interval:g}s",
                file=sys.stderr,
            )
            row = asyncio.run(load(port, args.n, args.delay, args.interval, server.pid))
            rows.append({"server": kind, **row})
        finally:
            server.send_signal(signal.SIGINT)
            server.wait(timeout=30)
    print(
        "| server | completed / N | KiB per open stream | CPU µs per keepalive | gap p50 (x K) | gap max (x K) |"
    )
    print("|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['server']} | {r['completed']}/{r['n']} | {r['kib_per_stream']:.1f} | {r['cpu_us_per_keepalive']:.1f} | "
            f"{r['gap_p50']:.2f} | {r['gap_max']:.2f} |"
        )
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(rows, fh, indent=2)


if __name__ == "__main__":
    main()
