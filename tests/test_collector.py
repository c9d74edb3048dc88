"""serve's collector pacer: automatic collection held back while the process is busy, let run
when it is not, within its two bounds; and the tuning serve applies at startup."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from aiostream_synth._proxy import collector
from aiostream_synth._proxy.collector import CollectorPacer, tune_collector


class FakeProcess:
    """A clock and a CPU time the test moves: ``run(seconds, share)`` passes ``seconds`` of
    wall time during which the process used ``share`` of a core."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.cpu = 5.0

    def clock(self) -> float:
        return self.now

    def cpu_time(self) -> float:
        return self.cpu

    def run(self, seconds: float, share: float) -> None:
        self.now += seconds
        self.cpu += seconds * share


@pytest.fixture
def process() -> FakeProcess:
    return FakeProcess()


@pytest.fixture(autouse=True)
def collection_left_on() -> Iterator[None]:
    """Every test starts with automatic collection on and leaves it on."""
    assert gc.isenabled()
    try:
        yield
    finally:
        gc.enable()


def pacer_for(process: FakeProcess, **bounds: float) -> CollectorPacer:
    return CollectorPacer(cpu_time=process.cpu_time, clock=process.clock, **bounds)  # type: ignore[arg-type]


def test_a_busy_interval_holds_collection_back_and_the_next_quiet_one_lets_it_run(
    process: FakeProcess,
) -> None:
    pacer = pacer_for(process)
    process.run(0.05, 0.2)
    pacer.step()
    assert gc.isenabled()
    assert not pacer.holding()
    process.run(0.05, 0.9)
    pacer.step()
    assert not gc.isenabled()
    assert pacer.holding()
    for _ in range(10):  # the burst goes on: still held
        process.run(0.05, 1.0)
        pacer.step()
        assert not gc.isenabled()
    process.run(0.05, 0.3)
    pacer.step()
    assert gc.isenabled()
    assert not pacer.holding()
    assert (pacer.holds, pacer.holds_cut) == (1, 0)


def test_the_busy_share_is_the_boundary(process: FakeProcess) -> None:
    pacer = pacer_for(process, busy_share=0.5)
    process.run(1.0, 0.49)
    pacer.step()
    assert not pacer.holding()
    process.run(1.0, 0.5)
    pacer.step()
    assert pacer.holding()


def test_a_burst_longer_than_the_longest_hold_collects_as_usual_until_a_quiet_interval(
    process: FakeProcess,
) -> None:
    pacer = pacer_for(process, pace_s=0.25, longest_hold_s=1.0)
    process.run(0.25, 1.0)
    pacer.step()
    assert pacer.holding()
    for _ in range(3):  # 0.75 s held: under the bound
        process.run(0.25, 1.0)
        pacer.step()
        assert pacer.holding()
    process.run(0.25, 1.0)  # 1 s held: the bound
    pacer.step()
    assert gc.isenabled()
    assert not pacer.holding()
    for _ in range(10):  # still busy: no new hold
        process.run(0.25, 1.0)
        pacer.step()
        assert gc.isenabled()
    process.run(0.25, 0.1)  # quiet once: the next burst is held again
    pacer.step()
    process.run(0.25, 1.0)
    pacer.step()
    assert pacer.holding()
    assert (pacer.holds, pacer.holds_cut) == (2, 1)


@pytest.mark.parametrize(("most_held", "cut"), [(10**9, False), (0, True)])
def test_too_many_objects_waiting_for_their_young_collection_end_the_hold(
    process: FakeProcess, most_held: int, cut: bool
) -> None:
    pacer = pacer_for(process, most_held=most_held)
    process.run(0.05, 1.0)
    pacer.step()
    assert pacer.holding()
    process.run(0.05, 1.0)
    pacer.step()
    assert pacer.holding() is not cut
    assert gc.isenabled() is cut
    assert (pacer.holds, pacer.holds_cut) == (1, int(cut))


def test_collection_switched_off_by_someone_else_is_left_off(process: FakeProcess) -> None:
    pacer = pacer_for(process)
    gc.disable()
    for share in (1.0, 1.0, 0.0, 1.0, 0.0):
        process.run(0.05, share)
        pacer.step()
        assert not gc.isenabled()
        assert not pacer.holding()
    pacer.stop()
    assert not gc.isenabled()
    assert pacer.holds == 0


def test_stop_lets_collection_run_again(process: FakeProcess) -> None:
    pacer = pacer_for(process)
    process.run(0.05, 1.0)
    pacer.step()
    assert not gc.isenabled()
    pacer.stop()
    assert gc.isenabled()
    assert not pacer.holding()


@pytest.mark.parametrize(
    "bad",
    [
        {"pace_s": 0},
        {"busy_share": 0},
        {"busy_share": 1.5},
        {"longest_hold_s": -1},
        {"most_held": -1},
    ],
)
def test_out_of_range_settings_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(ValueError, match="CollectorPacer needs"):
        CollectorPacer(**bad)  # type: ignore[arg-type]


def test_the_thread_looks_until_stopped_and_leaves_collection_on() -> None:
    """A process that is always busy: the thread's looks hold collection back; stopping it
    ends the thread and lets collection run."""
    process = FakeProcess()
    looked = threading.Event()
    pacers: list[CollectorPacer] = []

    def cpu_time() -> float:
        process.run(0.001, 1.0)  # every look sees a busy interval
        if pacers and pacers[0].holding():
            looked.set()
        return process.cpu

    pacer = CollectorPacer(pace_s=0.001, cpu_time=cpu_time, clock=process.clock)
    pacers.append(pacer)
    pacer.start()
    pacer.start()  # once only
    try:
        assert looked.wait(10)
        assert [t for t in threading.enumerate() if t.name == "aiostream_synth collector pacer"]
    finally:
        pacer.stop()
    assert gc.isenabled()
    assert not pacer.holding()
    assert not [t for t in threading.enumerate() if t.name == "aiostream_synth collector pacer"]


@pytest.fixture
def collector_state() -> Iterator[None]:
    """tune_collector freezes the heap and sets thresholds: undone after the test."""
    thresholds = gc.get_threshold()
    try:
        yield
    finally:
        gc.unfreeze()
        gc.set_threshold(*thresholds)
        gc.enable()


@pytest.mark.usefixtures("collector_state")
def test_tune_collector_freezes_sets_thresholds_and_starts_a_pacer() -> None:
    gc.unfreeze()
    pacer = tune_collector()
    try:
        assert pacer is not None
        assert gc.get_freeze_count() > 1000
        assert gc.get_threshold() == (
            collector.YOUNG_COLLECTION_EVERY,
            collector.MIDDLE_COLLECTION_EVERY,
            collector.FULL_COLLECTION_EVERY,
        )
    finally:
        if pacer is not None:
            pacer.stop()


@pytest.mark.usefixtures("collector_state")
def test_tune_collector_starts_no_pacer_when_collection_is_off() -> None:
    gc.disable()
    assert tune_collector() is None
    assert not gc.isenabled()
    assert gc.get_threshold()[0] == collector.YOUNG_COLLECTION_EVERY
