"""Run ``serve`` under cProfile, profiling only between two signals (for ``bench_load.py
--profile``, which sends them around its steady-state window).

    python benchmarks/profile_server.py OUT -m aiostream_synth serve ...

``SIGUSR1`` starts the profile and a count of the collector's work; ``SIGUSR2`` stops both and
writes ``OUT.pstats`` (read it with ``python -m pstats OUT.pstats``) and ``OUT.txt``: user and
system CPU seconds over the window, and the collections per generation with the seconds they
took. A sampler reading the process from outside through ptrace (py-spy) loses most samples
in a container; this one does not, at the price of cProfile's overhead (about twice the CPU
of the code it profiles), which the ratios between functions survive. With ``--workers`` only
the first process is signalled.
"""

from __future__ import annotations

import cProfile
import gc
import os
import runpy
import signal
import sys
import time
from typing import Any


def main() -> None:
    out, rest = sys.argv[1], sys.argv[2:]
    if rest[:1] != ["-m"] or len(rest) < 2:
        raise SystemExit("usage: profile_server.py OUT -m MODULE [ARGS...]")
    profile = cProfile.Profile()
    seconds, counts = [0.0, 0.0, 0.0], [0, 0, 0]
    state: dict[str, Any] = {"on": False, "gc_started": 0.0, "times": os.times()}

    def collector(phase: str, info: dict[str, int]) -> None:
        if not state["on"]:
            return
        if phase == "start":
            state["gc_started"] = time.thread_time()
        else:
            generation = info["generation"]
            seconds[generation] += time.thread_time() - state["gc_started"]
            counts[generation] += 1

    def start(*_: object) -> None:
        state["times"], state["on"] = os.times(), True
        profile.enable()

    def stop(*_: object) -> None:
        profile.disable()
        state["on"] = False
        now, then = os.times(), state["times"]
        profile.dump_stats(f"{out}.pstats")
        with open(f"{out}.txt", "w") as summary:
            summary.write(
                f"user_s {now.user - then.user:.3f} system_s {now.system - then.system:.3f}\n"
                f"collections {counts} collector_s {[round(s, 3) for s in seconds]}\n"
            )

    gc.callbacks.append(collector)
    signal.signal(signal.SIGUSR1, start)
    signal.signal(signal.SIGUSR2, stop)
    sys.argv = [rest[1], *rest[2:]]
    runpy.run_module(rest[1], run_name="__main__")


if __name__ == "__main__":
    main()
