"""How ``serve`` runs CPython's garbage collector: tuned once at startup, and held back while
the process is busy.

A burst of requests (a batch of agents starting together) keeps the server's core busy for a
second or more, and each request it admits leaves a few dozen objects that live as long as its
stream waits. CPython's automatic collection walks every one of them during the burst: a young
collection once 4,000 have piled up, a middle one every three young ones. Nothing a burst makes
is garbage yet (its streams are all waiting), so that walking finds nothing, and it delays every
request still queued behind it, by about a tenth of what admitting a request costs in one process
(the figures: benchmarks/COSTS.md).

:class:`CollectorPacer` moves that walking out of the burst. A thread looks at the process's
CPU time every :data:`PACE_S`; while the process used most of a core over that interval
(:data:`BUSY_SHARE`), automatic collection is switched off (``gc.disable()``), and it is
switched on again as soon as an interval is not busy. The first allocation after that runs the
collections that were due, with CPython's own thresholds, while the streams wait. Two bounds keep
what is held back small: at most :data:`LONGEST_HOLD_S` of busy time in a row (a process that
stays busy longer collects as usual until it has been idle for an interval), and at most
:data:`MOST_HELD` objects waiting for their young collection. Garbage cycles made during a burst
are freed up to that much later; everything else is freed by reference counting as always.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections.abc import Callable

__all__ = [
    "BUSY_SHARE",
    "FULL_COLLECTION_EVERY",
    "LONGEST_HOLD_S",
    "MIDDLE_COLLECTION_EVERY",
    "MOST_HELD",
    "PACE_S",
    "YOUNG_COLLECTION_EVERY",
    "CollectorPacer",
    "tune_collector",
]

LOG = logging.getLogger("aiostream_synth.proxy")

#: A full collection runs at most once per this many second-generation collections (CPython's
#: default is 10); see :func:`tune_collector`.
FULL_COLLECTION_EVERY = 100
#: A young collection runs once this many more objects were made than freed (CPython's default
#: is 700); see :func:`tune_collector`.
YOUNG_COLLECTION_EVERY = 4000
#: A second-generation collection runs every this many young ones (CPython's default is 10).
MIDDLE_COLLECTION_EVERY = 3

#: How often the pacer looks at the process's CPU time, seconds.
PACE_S = 0.05
#: The share of one core the process must have used over an interval to count as busy.
BUSY_SHARE = 0.75
#: The longest busy time in a row the collector is held back for, seconds.
LONGEST_HOLD_S = 2.0
#: The most objects (made and not freed since the last young collection) it is held back for:
#: a young collection of that many takes a few tens of milliseconds.
MOST_HELD = 600_000


class CollectorPacer:
    """Switches CPython's automatic collection off while the process is busy and on again when
    it is not (see the module docstring). :meth:`step` takes one look; :meth:`start` takes one
    every ``pace_s`` in a daemon thread until :meth:`stop`, which leaves collection on.

    ``cpu_time`` and ``clock`` are seconds (the process's CPU time, a monotonic clock); tests
    give their own."""

    def __init__(
        self,
        *,
        pace_s: float = PACE_S,
        busy_share: float = BUSY_SHARE,
        longest_hold_s: float = LONGEST_HOLD_S,
        most_held: int = MOST_HELD,
        cpu_time: Callable[[], float] = time.process_time,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if pace_s <= 0 or not 0 < busy_share <= 1 or longest_hold_s < 0 or most_held < 0:
            raise ValueError(
                "CollectorPacer needs pace_s > 0, 0 < busy_share <= 1, longest_hold_s >= 0 "
                "and most_held >= 0"
            )
        self._pace_s = pace_s
        self._busy_share = busy_share
        self._longest_hold_s = longest_hold_s
        self._most_held = most_held
        self._cpu_time = cpu_time
        self._clock = clock
        self._last = (clock(), cpu_time())
        #: When this hold began (clock), None while collection runs as usual.
        self._holding_since: float | None = None
        #: A hold reached a bound: no new one until an interval that is not busy.
        self._spent = False
        #: Holds so far, and how many of them ended on a bound (for the log and the tests).
        self.holds = 0
        self.holds_cut = 0
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    def holding(self) -> bool:
        """Whether collection is held back now."""
        return self._holding_since is not None

    def step(self) -> None:
        """One look: hold collection back, or let it run (see the module docstring)."""
        now, cpu = self._clock(), self._cpu_time()
        then, cpu_then = self._last
        self._last = (now, cpu)
        busy = cpu - cpu_then >= self._busy_share * (now - then)
        if self._holding_since is None:
            if busy and not self._spent and gc.isenabled():
                gc.disable()
                self._holding_since = now
                self.holds += 1
            elif not busy:
                self._spent = False
            return
        bound = (
            now - self._holding_since >= self._longest_hold_s
            or gc.get_count()[0] >= self._most_held
        )
        if busy and not bound:
            return
        self._release()
        if busy:  # cut by a bound: collect as usual until the process is idle again
            self._spent = True
            self.holds_cut += 1

    def _release(self) -> None:
        if self._holding_since is not None:
            self._holding_since = None
            gc.enable()

    def start(self) -> None:
        """Take a look every ``pace_s`` in a daemon thread (once; a no-op if running)."""
        if self._thread is not None:
            return
        self._last = (self._clock(), self._cpu_time())
        self._thread = threading.Thread(
            target=self._run, name="aiostream_synth collector pacer", daemon=True
        )
        self._thread.start()

    def _run(self) -> None:
        while not self._stopping.wait(self._pace_s):
            self.step()

    def stop(self) -> None:
        """Stop looking, and leave automatic collection on (if it was held back)."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join()
        self._release()
        if self.holds:
            LOG.debug(
                "collector pacer: %d holds, %d of them cut by a bound", self.holds, self.holds_cut
            )


def tune_collector() -> CollectorPacer | None:
    """Three measured changes to CPython's collector for a server of long-lived streams, and its
    pacer, started (the caller stops it); no pacer (None) when automatic collection is off
    already (``gc.disable()`` by whoever runs ``serve``): that is theirs to switch on.

    * Everything alive once the app is built (modules, the params models and their validators,
      the app) is frozen beyond the collector's reach: none of it ever becomes garbage, and a
      full collection would otherwise walk all of it whenever one runs, typically in the middle
      of a burst of finishing streams (it about halved the terminal lateness of 5,000 streams
      finishing together).
    * Full collections become ten times rarer. After the freeze the long-lived generation is
      nearly empty, so while a burst of streams opens, CPython's "the old generation grew by a
      quarter" rule lets a full collection run every ten second-generation collections, each
      walking every stream opened so far: requests arriving together by the thousand spent
      half of their whole cost in the collector.
    * Young collections become rarer. Every waiting stream makes a few objects per tick (the
      tick's future, the coroutines awaiting it) and frees the last tick's, so between two
      young collections all of them are young: a young collection walks every waiting stream,
      whatever triggered it. Steady ticking drifts the collector's count up (a free when the
      count is zero is not counted), so at the default threshold one ran about every second
      with thousands of background streams waiting. The second generation is collected more
      often than by default in exchange, so that it stays as small as before while a burst
      opens. The figures: benchmarks/COSTS.md. Garbage cycles are still found, only later.
    * Then :class:`CollectorPacer` holds collection back while a burst keeps the process busy.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(YOUNG_COLLECTION_EVERY, MIDDLE_COLLECTION_EVERY, FULL_COLLECTION_EVERY)
    if not gc.isenabled():
        return None
    pacer = CollectorPacer()
    pacer.start()
    return pacer
