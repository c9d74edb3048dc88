"""What admitting a request costs ``serve``, in one process (no sockets): CPU µs per request from
its bytes to its backend call started, and then per stream for its first write (the response
head with the first keepalive), against the lean server alone in the same rounds.

A wave of N streaming Responses requests is fed to the lean server's own connection objects
(``_proxy/lean_http.py``) over in-memory transports, ``batch`` requests per loop turn as a
server reads a wave, on uvloop when installed, with ``serve``'s collector settings; each round
says how much of the admission was the collector's, how much it spent after the wave (until the
first writes were done), and what the wave left for the next middle-generation collection. What the
kernel, the load client and their noise add to ``bench_load.py``'s "server CPU µs per request,
wave" column is out of the figure: what is left is the Python path a request takes.

Rows (each in a subprocess of its own, alternated round after round, medians reported):

* ``floor`` — the lean server with a bare ASGI app that reads the request and waits: the HTTP
  layer alone (the floor of these rows);
* ``nostore`` — ``serve --store off``'s app (``ProxyApp``, the embedded model);
* ``kept`` — ``serve``'s default: the memory store, each stream kept for retrieval.

    python benchmarks/bench_admission.py                 # N=5000, 5 rounds
    python benchmarks/bench_admission.py --quick         # N=1000, one round
    python benchmarks/bench_admission.py --rows floor kept --rounds 9 --profile /tmp/adm
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from typing import Any

from bench_load import RESPONSES_WIRE, request_bytes

ROWS = ("floor", "nostore", "kept")
#: Seconds to the first keepalive: longer than any wave here takes to be admitted.
INTERVAL = 4.0


def child(row: str, n: int, batch: int, profile: str | None) -> dict[str, Any]:
    """One row: CPU µs per request to admit the wave, and per stream for its first write."""
    import asyncio
    import cProfile
    import gc

    from aiostream_synth._proxy import lean_http
    from aiostream_synth._proxy.app import ProxyApp, ProxyConfig
    from aiostream_synth._proxy.serve import _tune_garbage_collector, _warm_up

    class Transport(asyncio.Transport):
        """Counts the streams' first writes (``expected`` of them set ``all_written``);
        nothing else of a socket."""

        written = 0
        expected = -1
        all_written: asyncio.Event | None = None

        def __init__(self) -> None:
            super().__init__()
            self.first = True  # its next write is its first

        def get_extra_info(self, name: str, default: Any = None) -> Any:
            return ("127.0.0.1", 8000) if name in ("sockname", "peername") else default

        def write(self, data: Any) -> None:
            if self.first:
                self.first = False
                Transport.written += 1
                if Transport.written == Transport.expected and Transport.all_written:
                    Transport.all_written.set()

        def is_closing(self) -> bool:
            return False

        def close(self) -> None:
            pass

        def get_write_buffer_size(self) -> int:
            return 0

        def pause_reading(self) -> None:
            pass

        def resume_reading(self) -> None:
            pass

    async def floor_app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await receive()
            await send({"type": "lifespan.startup.complete"})
            await receive()
            await send({"type": "lifespan.shutdown.complete"})
            return
        await receive()
        await asyncio.sleep(INTERVAL)
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b": ping\n\n", "more_body": True})
        await asyncio.Event().wait()

    store = "off" if row == "nostore" else "memory"
    app: Any = (
        floor_app if row == "floor" else ProxyApp(ProxyConfig(keepalive_s=INTERVAL, store=store))
    )
    _warm_up()
    _tune_garbage_collector()  # as serve does once the app is built
    # The request bench_load.py's streams send (its backend answers long after this run).
    request = request_bytes(RESPONSES_WIRE, RESPONSES_WIRE.body("bench [delay:60]"))

    async def quiet() -> None:
        for _ in range(100):  # every ready callback and task step of the wave run
            await asyncio.sleep(0)

    async def run() -> dict[str, Any]:
        loop = asyncio.get_running_loop()
        lifespan = lean_http._Lifespan(app, loop)
        await lifespan.started
        server = lean_http._Server(app, loop)
        conns = []

        def open_one() -> None:
            conn = lean_http._Connection(server)
            conn.connection_made(Transport())
            conn.data_received(request)
            conns.append(conn)

        for _ in range(64):  # warm: every path taken once, the client's leaving too
            open_one()
        await quiet()
        for conn in conns:
            conn.connection_lost(None)
        conns.clear()
        await quiet()
        profiler = cProfile.Profile() if profile else None
        if profiler is not None:
            profiler.enable()
        collected: list[float] = []  # the collector's runs from the wave on: seconds each
        began: list[float] = []

        def collector(phase: str, info: dict[str, int]) -> None:
            if phase == "start":
                began.append(time.process_time())
            elif began:
                collected.append(time.process_time() - began.pop())

        gc.callbacks.append(collector)
        start, cpu0 = time.monotonic(), time.process_time()
        for k in range(n):
            open_one()
            if k % batch == batch - 1:
                await asyncio.sleep(0)
        await quiet()
        cpu1, admitted_s = time.process_time(), time.monotonic() - start
        in_wave, collections = sum(collected), len(collected)
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(f"{profile}-{row}-admission.pstats")
        early = Transport.written  # first writes before the wave was admitted
        Transport.expected, Transport.all_written = n, asyncio.Event()
        # Idle until just before the first keepalives are due: their CPU alone is timed next.
        await asyncio.sleep(max(INTERVAL - (time.monotonic() - start) - 0.2, 0))
        cpu2 = time.process_time()
        if Transport.written < Transport.expected:
            await Transport.all_written.wait()
        cpu3 = time.process_time()
        gc.callbacks.remove(collector)
        after_wave = sum(collected) - in_wave  # until the first writes were done
        # What the wave left in the middle generation: its next collection walks it.
        cpu4 = time.process_time()
        gc.collect(1)
        middle_left = time.process_time() - cpu4
        for conn in conns:
            conn.connection_lost(None)
        await quiet()
        await lifespan.shutdown()
        return {
            "row": row,
            "admission_us": (cpu1 - cpu0) * 1e6 / n,
            "collector_us": in_wave * 1e6 / n,
            "collections": collections,
            "collector_after_us": after_wave * 1e6 / n,
            "middle_left_us": middle_left * 1e6 / n,
            "first_write_us": (cpu3 - cpu2) * 1e6 / n,
            "admitted_s": admitted_s,
            "early_writes": early,
        }

    try:
        import uvloop

        return uvloop.run(run())
    except ImportError:
        return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=5000)
    parser.add_argument("--batch", type=int, default=64, help="requests read per loop turn")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", nargs="+", default=list(ROWS))
    parser.add_argument("--quick", action="store_true", help="N=1000, one round")
    parser.add_argument(
        "--profile",
        metavar="PREFIX",
        help="cProfile each row's admission into PREFIX-<row>-admission.pstats",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.n, args.rounds = 1000, 1
    if args.child:
        print(json.dumps(child(args.child, args.n, args.batch, args.profile)))
        return
    for row in args.rows:
        if row not in ROWS:
            parser.error(f"unknown row {row!r} (one of {', '.join(ROWS)})")
    figures: dict[str, dict[str, list[float]]] = {
        row: {"admission_us": [], "first_write_us": []} for row in args.rows
    }
    for round_number in range(args.rounds):
        for row in args.rows:
            command = [sys.executable, __file__, "--child", row, "-n", str(args.n)]
            command += ["--batch", str(args.batch)]
            if args.profile:
                command += ["--profile", args.profile]
            out = subprocess.run(command, check=True, capture_output=True, text=True).stdout
            result = json.loads(out.strip().splitlines()[-1])
            for key in ("admission_us", "first_write_us"):
                figures[row][key].append(result[key])
            print(
                f"round {round_number + 1} {row}: admission {result['admission_us']:.1f} µs "
                f"(the collector {result['collector_us']:.1f} µs, {result['collections']} "
                f"collections), first write {result['first_write_us']:.1f} µs per request; "
                f"the collector after the wave {result['collector_after_us']:.1f} µs, left for "
                f"a middle collection {result['middle_left_us']:.1f} µs "
                f"(wave admitted in {result['admitted_s']:.2f} s, "
                f"{result['early_writes']} first writes during it)"
            )
    floor_row = args.rows[0]
    floor = statistics.median(figures[floor_row]["admission_us"])
    print(
        f"\n| row | admission µs per request, each round | median | ÷ {floor_row} "
        "| first write µs per stream, median |"
    )
    print("|---|---|---|---|---|")
    for row, values in figures.items():
        median = statistics.median(values["admission_us"])
        each = " ".join(f"{value:.1f}" for value in values["admission_us"])
        first = statistics.median(values["first_write_us"])
        print(f"| {row} | {each} | {median:.1f} | {median / floor:.2f}x | {first:.1f} |")


if __name__ == "__main__":
    main()
