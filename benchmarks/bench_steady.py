"""The proxy's CPU per keepalive of a waiting stream, by store path, in one process (no HTTP).

N Responses streams, each a request to the proxy's ASGI app itself (``ProxyApp``, the app
``serve`` runs; its scope carries the disconnect hook serve's servers give, ``--no-hook`` for
a plain ASGI server's path, a watcher task per stream) on uvloop when installed, the embedded model answering after T seconds,
keepalives every K seconds; ``send`` counts the keepalives and drops the bytes. What is timed
is the process's CPU over the steady window, per keepalive: from two intervals after the last
stream's first keepalive (the wave over, every creation written) to two intervals before the
first stream may end; and per event other than a keepalive at the end (from the window's
close until every stream has ended and the lifespan's end has written what was queued, the
CPU of the keepalives in it, at the window's rate, taken out). No sockets, no load client:
what is left is the Python path a tick takes, which ``bench_load.py`` measures among the
kernel's and the client's costs, and among their noise.

Rows (each in a subprocess of its own, alternated round after round, medians reported):

* ``nostore`` — ``--store off``: nothing kept (the floor of these rows);
* ``kept`` — the default memory store, a plain stream kept for retrieval (decision P12);
* ``background`` — ``background: true`` on the memory store: the client's stream records
  every event for resume;
* ``background-redis`` — the same on Redis (``--redis URL`` of a running redis-server).

    python benchmarks/bench_steady.py                       # N=5000, T=12 s, K=0.25 s, 5 rounds
    python benchmarks/bench_steady.py --quick               # N=1000, T=4 s, one round
    python benchmarks/bench_steady.py --rows nostore background --rounds 9
    python benchmarks/bench_steady.py --rows nostore background --paired --rounds 8

``--paired`` runs two rows at the same time, each pinned to a core of its own (swapped every
round), and reports the ratio of each round: both rows then share whatever else the machine
is doing at that moment, which on a shared host moves one row's figure from run to run by
more than the difference between rows.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import MutableMapping
from typing import Any

ROWS = ("nostore", "kept", "background", "background-redis")


def child(
    row: str,
    n: int,
    delay: float,
    interval: float,
    redis: str | None,
    profile: str | None,
    hook: bool = True,
    end_only: bool = False,
) -> dict[str, Any]:
    """One row: its CPU µs per keepalive and how many keepalives the window saw
    (``profile``: a cProfile of the window written there)."""
    import asyncio
    import cProfile
    import gc

    from aiostream_synth._proxy.app import MIN_DEFAULT_LEASE_S, ProxyApp, ProxyConfig
    from aiostream_synth._proxy.serve import _tune_garbage_collector
    from aiostream_synth._serving.pipeline import ON_DISCONNECT

    store = {"nostore": "off", "background-redis": redis or ""}.get(row, "memory")
    # The lease a run with keepalives has (a Redis store's processes must agree on it: a
    # later run would be refused while this one's claim lasts).
    lease = max(3 * interval, MIN_DEFAULT_LEASE_S)
    if end_only:
        interval = delay * 10  # no keepalive in the whole run
    app = ProxyApp(ProxyConfig(keepalive_s=interval, store=store, store_lease_s=lease))
    _tune_garbage_collector()  # as serve does once the app is built
    collections = [0, 0, 0]
    collecting = [0.0, 0.0]  # CPU seconds spent collecting; when the current one began

    def collector(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            collections[info["generation"]] += 1
            collecting[1] = time.process_time()
        else:
            collecting[0] += time.process_time() - collecting[1]

    body: dict[str, Any] = {"model": "bench", "input": f"bench [delay:{delay:g}]", "stream": True}
    if row.startswith("background"):
        body["background"] = True
    raw = json.dumps(body).encode()
    counts = {"keepalives": 0, "ended": 0, "started": 0, "events": 0, "requested": 0}
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": "/v1/responses",
        "raw_path": b"/v1/responses",
        "query_string": b"",
        "root_path": "",
        "headers": [(b"content-type", b"application/json"), (b"authorization", b"Bearer k")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
    }
    if hook:
        # As serve's servers (lean, uvicorn) do: a client's leaving is told through this
        # hook, not read from ``receive`` by a watcher task of each stream (none leaves here).
        scope[ON_DISCONNECT] = lambda callback: None

    lifespan_task: list[asyncio.Task[None]] = []
    queues: list[asyncio.Queue[MutableMapping[str, Any]]] = []

    async def run() -> dict[str, Any]:
        inbox: asyncio.Queue[MutableMapping[str, Any]] = asyncio.Queue()
        outbox: asyncio.Queue[MutableMapping[str, Any]] = asyncio.Queue()
        lifespan = asyncio.create_task(app({"type": "lifespan"}, inbox.get, outbox.put))
        lifespan_task[:] = [lifespan]
        queues[:] = [inbox, outbox]
        await inbox.put({"type": "lifespan.startup"})
        started = await outbox.get()
        if started["type"] != "lifespan.startup.complete":  # a store that refuses it...
            raise SystemExit(f"{row}: the app did not start: {started.get('message')}")
        forever = asyncio.Event()
        all_started = asyncio.Event()  # every stream had its first keepalive
        all_requested = asyncio.Event()  # every request's body was read

        async def one() -> None:
            requested = started = False

            async def receive() -> dict[str, Any]:
                nonlocal requested
                if not requested:
                    requested = True
                    counts["requested"] += 1
                    if counts["requested"] == n:
                        all_requested.set()
                    return {"type": "http.request", "body": raw, "more_body": False}
                await forever.wait()
                return {"type": "http.disconnect"}

            async def send(message: MutableMapping[str, Any]) -> None:
                if message["type"] != "http.response.body":
                    return
                nonlocal started
                body = message.get("body", b"")
                frames = body.count(b"\n\n")
                ticks = body.count(b"event: response.in_progress")
                counts["events"] += frames - ticks  # the events that are not keepalives
                if message.get("more_body", False):
                    counts["keepalives"] += ticks
                    if ticks and not started:
                        started = True
                        counts["started"] += 1
                        if counts["started"] == n:
                            all_started.set()
                else:
                    counts["ended"] += 1

            await app(dict(scope), receive, send)

        launched = time.monotonic()
        tasks = [asyncio.create_task(one()) for _ in range(n)]
        if end_only:
            return await end_alone(launched, tasks, all_requested)
        # The window opens once the wave is over: every stream open and ticking (its first
        # keepalive sent, its creation written), two intervals after the last one began.
        try:
            await asyncio.wait_for(all_started.wait(), timeout=delay / 2)
        except TimeoutError:
            raise SystemExit(f"{row}: {n - counts['started']} streams never ticked") from None
        await asyncio.sleep(interval * 2)
        # ... and closes two intervals before the first stream may end.
        window = delay - (time.monotonic() - launched) - interval * 2
        if window < interval * 8:
            raise SystemExit(f"{row}: the wave left no steady window: give a longer --delay")
        profiler = cProfile.Profile() if profile else None
        if profiler is not None:
            profiler.enable()
        gc.callbacks.append(collector)
        cpu0, ka0 = time.process_time(), counts["keepalives"]
        await asyncio.sleep(window)
        cpu1, ka1 = time.process_time(), counts["keepalives"]
        gc.callbacks.remove(collector)
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(f"{profile}-{row}.pstats")
            profiler = cProfile.Profile()
            profiler.enable()
        # The end: every answer's events, sent and (background) written to the store by the
        # lifespan's end; its keepalives counted at the steady window's rate.
        events1 = counts["events"]
        await asyncio.gather(*tasks)
        await inbox.put({"type": "lifespan.shutdown"})
        await outbox.get()
        await lifespan
        cpu2, ka2 = time.process_time(), counts["keepalives"]
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(f"{profile}-{row}-end.pstats")
        per_keepalive = (cpu1 - cpu0) / max(ka1 - ka0, 1)
        end_cpu = cpu2 - cpu1 - (ka2 - ka1) * per_keepalive
        return {
            "row": row,
            "cpu_us_per_keepalive": per_keepalive * 1e6,
            "cpu_us_per_event": end_cpu * 1e6 / max(counts["events"] - events1, 1),
            "events_at_end": counts["events"] - events1,
            "keepalives_in_window": ka1 - ka0,
            "collections_in_window": collections,
            "ended": counts["ended"],
        }

    async def end_alone(
        launched: float, tasks: list[asyncio.Task[None]], all_requested: asyncio.Event
    ) -> dict[str, Any]:
        """``--end-only``: from a quarter of T before the first stream may end (the wave read
        by then) to the lifespan's end, with no keepalive to take out."""
        await all_requested.wait()
        start = launched + delay * 0.75
        if time.monotonic() > start:
            raise SystemExit(f"{row}: the wave took past 3/4 of T: give a longer --delay")
        await asyncio.sleep(start - time.monotonic())
        events1 = counts["events"]
        profiler = cProfile.Profile() if profile else None
        if profiler is not None:
            profiler.enable()
        gc.callbacks.append(collector)
        cpu1 = time.process_time()
        await asyncio.gather(*tasks)
        await queues[0].put({"type": "lifespan.shutdown"})
        await queues[1].get()
        await lifespan_task[0]
        end_cpu = time.process_time() - cpu1
        gc.callbacks.remove(collector)
        if profiler is not None:
            profiler.disable()
            profiler.dump_stats(f"{profile}-{row}-end.pstats")
        return {
            "row": row,
            "cpu_us_per_keepalive": None,
            "cpu_us_per_event": end_cpu * 1e6 / max(counts["events"] - events1, 1),
            "events_at_end": counts["events"] - events1,
            "keepalives_in_window": 0,
            "collections_in_window": collections,
            "collecting_ms": collecting[0] * 1e3,
            "ended": counts["ended"],
        }

    try:
        import uvloop

        return uvloop.run(run())
    except ImportError:
        return asyncio.run(run())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-n", type=int, default=5000)
    parser.add_argument("--delay", type=float, default=12.0)
    parser.add_argument("--interval", type=float, default=0.25)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--rows", nargs="+", default=["nostore", "kept", "background"])
    parser.add_argument("--quick", action="store_true", help="N=1000, T=4 s, one round")
    parser.add_argument("--redis", help="redis://HOST:PORT/DB for background-redis")
    parser.add_argument(
        "--profile",
        metavar="PREFIX",
        help="cProfile each row's window into PREFIX-<row>.pstats, and its end into "
        "PREFIX-<row>-end.pstats (about doubles the CPU)",
    )
    parser.add_argument(
        "--paired",
        action="store_true",
        help="two rows at once, on cores 0 and 1 (swapped each round): a ratio per round",
    )
    parser.add_argument(
        "--no-hook",
        dest="hook",
        action="store_false",
        help="no disconnect hook in the scope (as a plain ASGI server): each stream reads "
        "receive() in a watcher task of its own, cancelled at its end",
    )
    parser.add_argument(
        "--end-only",
        action="store_true",
        help="only CPU per event at the streams' end, in runs with no keepalive at all "
        "(K beyond T): nothing to take out of the end, so a steadier figure",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--cpu", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.n, args.delay, args.rounds = 1000, 4.0, 1
    if args.child:
        if args.cpu is not None:
            os.sched_setaffinity(0, {args.cpu})
        result = child(
            args.child,
            args.n,
            args.delay,
            args.interval,
            args.redis,
            args.profile,
            args.hook,
            args.end_only,
        )
        result["cpu"] = args.cpu
        print(json.dumps(result))
        return
    for row in args.rows:
        if row not in ROWS:
            parser.error(f"unknown row {row!r} (one of {', '.join(ROWS)})")
        if row == "background-redis" and not args.redis:
            parser.error("background-redis needs --redis URL")
    if args.paired and (len(args.rows) != 2 or (os.cpu_count() or 1) < 2):
        parser.error("--paired needs two rows and two cores")
    figures: dict[str, list[float]] = {row: [] for row in args.rows}
    per_event: dict[str, list[float]] = {row: [] for row in args.rows}
    for round_number in range(args.rounds):
        if args.paired:
            cores = (0, 1) if round_number % 2 == 0 else (1, 0)
            children = [
                subprocess.Popen(_command(args, row, cpu), stdout=subprocess.PIPE, text=True)
                for row, cpu in zip(args.rows, cores, strict=True)
            ]
            results = [_result(args, row, p) for row, p in zip(args.rows, children, strict=True)]
        else:
            results = [
                _result(
                    args,
                    row,
                    subprocess.Popen(_command(args, row), stdout=subprocess.PIPE, text=True),
                )
                for row in args.rows
            ]
        for result in results:
            row = result["row"]
            per_event[row].append(result["cpu_us_per_event"])
            core = f" (core {result['cpu']})" if result.get("cpu") is not None else ""
            ticking = ""
            if result["cpu_us_per_keepalive"] is not None:
                figures[row].append(result["cpu_us_per_keepalive"])
                ticking = (
                    f"{result['cpu_us_per_keepalive']:.2f} µs, {result['keepalives_in_window']} "
                    f"keepalives, collections by generation {result['collections_in_window']}; "
                )
            collected = ""
            if result.get("collecting_ms") is not None:
                collected = (
                    f", collections by generation {result['collections_in_window']} "
                    f"taking {result['collecting_ms']:.0f} ms"
                )
            print(
                f"round {round_number + 1} {row}{core}: {ticking}at the end "
                f"{result['cpu_us_per_event']:.2f} µs per event, {result['events_at_end']} events"
                f"{collected}"
            )
    tables = (("keepalive", figures), ("event at the end", per_event))
    for what, table in tables[1:] if args.end_only else tables:
        if args.paired:
            first, second = args.rows
            ratios = [b / a for a, b in zip(table[first], table[second], strict=True)]
            each = " ".join(f"{ratio:.3f}" for ratio in ratios)
            print(f"\n| per {what}: {second} ÷ {first}, each round (at the same time) | median |")
            print("|---|---|")
            print(f"| {each} | {statistics.median(ratios):.3f}x |")
        floor = statistics.median(table[args.rows[0]])
        print(f"\n| row | µs per {what}, each round | median | ÷ {args.rows[0]} |")
        print("|---|---|---|---|")
        for row, values in table.items():
            median = statistics.median(values)
            each = " ".join(f"{value:.2f}" for value in values)
            print(f"| {row} | {each} | {median:.2f} | {median / floor:.2f}x |")


def _command(args: argparse.Namespace, row: str, cpu: int | None = None) -> list[str]:
    command = [sys.executable, __file__, "--child", row, "-n", str(args.n)]
    command += ["--delay", str(args.delay), "--interval", str(args.interval)]
    if args.redis:
        command += ["--redis", args.redis]
    if args.profile:
        command += ["--profile", args.profile]
    if cpu is not None:
        command += ["--cpu", str(cpu)]
    if not args.hook:
        command.append("--no-hook")
    if args.end_only:
        command.append("--end-only")
    return command


def _result(args: argparse.Namespace, row: str, process: subprocess.Popen[str]) -> dict[str, Any]:
    """A child's result, once it has ended (its streams all ended, or the run is void)."""
    out, _ = process.communicate()
    if process.returncode != 0:
        raise SystemExit(f"{row}: the child failed (exit status {process.returncode})")
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    if result["ended"] != args.n:
        raise SystemExit(f"{row}: {result['ended']} of {args.n} streams ended")
    return result


if __name__ == "__main__":
    main()
