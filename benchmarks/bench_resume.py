"""Background responses at scale (issue 30): memory per stored response and resume latency.

For each store (``memory``, and ``redis``: Debian's redis-server started here on the load
client's core), ``aiostream-synth serve`` (one process, core 0) gets N background requests
(``background: true`` without ``stream``: the response object comes back at once, the
generation goes on for T seconds), opened C at a time. Then, while all N are live, R resumes
(``GET /v1/responses/{id}?stream=true&starting_after=0``), C at a time (``--arrival pool``,
the next sent as one ends; ``waves``, C sent at once, the next C once they ended), each timed
from its request's send to the first replayed event; then the same once every response has finished
(replayed from the store alone). The floor, measured in the same run on the same connections'
kind: a ``GET /healthz`` round trip (the server's HTTP path with no store, no engine).

Reported per store: server RSS per live background response and per finished stored one (KiB),
resume latency p50 / p99 / max (ms) live and finished, and p99 over the floor's p99.

    python benchmarks/bench_resume.py                  # N=5000, T=20 s, R=500, both stores
    python benchmarks/bench_resume.py -n 1000 --delay 10 --stores memory
"""

from __future__ import annotations

import argparse
import asyncio
import json
import pathlib
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

ROOT = pathlib.Path(__file__).resolve().parent


def _rss_kib(pid: int) -> int:
    for line in pathlib.Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    return 0


def _wait_port(port: int) -> None:
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                return
        except OSError:
            time.sleep(0.05)


async def _exchange(port: int, request: bytes, until: bytes) -> tuple[float, bytes]:
    """Send ``request`` on a new connection; seconds until ``until`` arrived, and what had."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    start = time.perf_counter()
    writer.write(request)
    data = b""
    try:
        while until not in data:
            chunk = await reader.read(65536)
            if not chunk:
                break
            data += chunk
        return time.perf_counter() - start, data
    finally:
        writer.close()


def _post(body: dict[str, Any]) -> bytes:
    raw = json.dumps(body).encode()
    return (
        b"POST /v1/responses HTTP/1.1\r\nhost: b\r\ncontent-type: application/json\r\n"
        b"authorization: Bearer bench\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(raw)
    ) + raw


def _get(path: str) -> bytes:
    return (
        f"GET {path} HTTP/1.1\r\nhost: b\r\nauthorization: Bearer bench\r\nconnection: close\r\n\r\n"
    ).encode()


async def _gather_limited(coros: list[Any], limit: int, arrival: str) -> list[Any]:
    """Run ``coros``: ``pool``, ``limit`` at a time (the next one sent as soon as one ends);
    ``waves``, ``limit`` sent at once, the next ones once all of them have ended."""
    if arrival == "waves":
        results: list[Any] = []
        for start in range(0, len(coros), limit):
            results.extend(await asyncio.gather(*coros[start : start + limit]))
        return results
    gate = asyncio.Semaphore(limit)

    async def one(coro: Any) -> Any:
        async with gate:
            return await coro

    return await asyncio.gather(*(one(c) for c in coros))


def _ms(values: list[float]) -> tuple[float, float, float]:
    ordered = sorted(values)
    p99 = ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))]
    return statistics.median(ordered) * 1000, p99 * 1000, ordered[-1] * 1000


async def measure(
    port: int, pid: int, n: int, delay: float, resumes: int, limit: int, arrival: str
) -> dict[str, Any]:
    floor_before = [
        t
        for t, _ in await _gather_limited(
            [_exchange(port, _get("/healthz"), b"}") for _ in range(resumes)], limit, arrival
        )
    ]
    rss0 = _rss_kib(pid)
    body = {"model": "bench", "input": f"bench [delay:{delay:g}]", "background": True}
    created = await _gather_limited(
        [_exchange(port, _post(body), b"}\n") for _ in range(n)], limit, arrival
    )
    ids = []
    for _, data in created:
        payload = data.partition(b"\r\n\r\n")[2]
        ids.append(json.loads(payload[payload.find(b"{") :].split(b"\r\n")[0])["id"])
    rss_live = _rss_kib(pid)
    created_at = time.monotonic()
    sample = ids[:: max(1, n // resumes)][:resumes]
    live = await _gather_limited(
        [
            _exchange(port, _get(f"/v1/responses/{i}?stream=true&starting_after=0"), b"\nevent: ")
            for i in sample
        ],
        limit,
        arrival,
    )
    live_s = [t for t, _ in live]
    # Until every response has finished (its deadline passed), then replays from the store.
    await asyncio.sleep(max(0.0, delay + 2 - (time.monotonic() - created_at)))
    rss_done = _rss_kib(pid)
    done = await _gather_limited(
        [
            _exchange(port, _get(f"/v1/responses/{i}?stream=true&starting_after=0"), b"\nevent: ")
            for i in sample
        ],
        limit,
        arrival,
    )
    done_s = [t for t, _ in done]
    floor = floor_before + [
        t
        for t, _ in await _gather_limited(
            [_exchange(port, _get("/healthz"), b"}") for _ in range(resumes)], limit, arrival
        )
    ]
    return {
        "n": n,
        "rss_kib_per_live": (rss_live - rss0) / n,
        "rss_kib_per_done": (rss_done - rss0) / n,
        "resume_live_ms": _ms(live_s),
        "resume_done_ms": _ms(done_s),
        "floor_ms": _ms(floor),
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("-n", type=int, default=5000)
    parser.add_argument("--delay", type=float, default=20.0)
    parser.add_argument("--resumes", type=int, default=500)
    parser.add_argument("--concurrency", type=int, default=50)
    parser.add_argument(
        "--stores", nargs="+", default=["memory", "redis"], choices=["memory", "redis"]
    )
    parser.add_argument(
        "--arrival",
        choices=["pool", "waves"],
        default="pool",
        help="pool: C at a time, the next as one ends; waves: C at once, the next C after",
    )
    parser.add_argument("--port", type=int, default=19400)
    parser.add_argument("--server-python", default=sys.executable)
    args = parser.parse_args()
    rows = []
    for offset, store in enumerate(args.stores):
        port = args.port + 10 * offset
        redis = None
        store_arg = "memory"
        if store == "redis":
            binary = shutil.which("redis-server")
            if binary is None:
                raise SystemExit("redis-server not found (apt-get install redis-server)")
            redis = subprocess.Popen(
                [
                    "taskset",
                    "-c",
                    "1",
                    binary,
                    "--port",
                    str(port + 1),
                    "--save",
                    "",
                    "--appendonly",
                    "no",
                    "--dir",
                    tempfile.mkdtemp(),
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            _wait_port(port + 1)
            store_arg = f"redis://127.0.0.1:{port + 1}/0"
        server = subprocess.Popen(
            [
                "taskset",
                "-c",
                "0",
                args.server_python,
                "-m",
                "aiostream_synth",
                "serve",
                "--port",
                str(port),
                "--keepalive-s",
                "1",
                "--store",
                store_arg,
                "--log-level",
                "warning",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            _wait_port(port)
            time.sleep(0.5)
            row = asyncio.run(
                measure(
                    port,
                    server.pid,
                    args.n,
                    args.delay,
                    args.resumes,
                    args.concurrency,
                    args.arrival,
                )
            )
            rows.append({"store": f"{store} ({args.arrival}, C = {args.concurrency})", **row})
        finally:
            server.terminate()
            server.wait(timeout=60)
            if redis is not None:
                redis.kill()
                redis.wait()
    print(
        "| store | N | RSS/live KiB | RSS/finished KiB | resume live p50/p99/max ms | resume finished p50/p99/max ms | floor p50/p99 ms | live p99 / floor p99 |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        live, done, floor = r["resume_live_ms"], r["resume_done_ms"], r["floor_ms"]
        print(
            f"| {r['store']} | {r['n']} | {r['rss_kib_per_live']:.1f} | {r['rss_kib_per_done']:.1f} | "
            f"{live[0]:.1f} / {live[1]:.1f} / {live[2]:.1f} | {done[0]:.1f} / {done[1]:.1f} / {done[2]:.1f} | "
            f"{floor[0]:.1f} / {floor[1]:.1f} | {live[1] / floor[1]:.1f}x |"
        )


if __name__ == "__main__":
    main()
