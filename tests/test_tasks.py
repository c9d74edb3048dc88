"""BackgroundTasks: the server-wide home of backend tasks (tasks on the loop on asyncio, an
anyio task group on trio)."""

from __future__ import annotations

import logging

import anyio
import pytest

from aiostream_synth._engine.tasks import BackgroundTasks

pytestmark = pytest.mark.anyio


async def test_tasks_run_and_leaving_waits_for_them() -> None:
    done: list[str] = []

    async def work(name: str) -> None:
        await anyio.sleep(0.01)
        done.append(name)

    async with BackgroundTasks() as tasks:
        tasks.start_soon(work, "a")
        tasks.start_soon(work, "b", name="second")
    assert sorted(done) == ["a", "b"]


async def test_cancel_all_cancels_and_exit_waits_for_cleanup() -> None:
    """What the lifespan does at shutdown: every task is cancelled, and its cleanup (even a
    shielded one) has finished when the context is left."""
    events: list[str] = []

    async def forever() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            with anyio.CancelScope(shield=True):
                await anyio.sleep(0.01)
            events.append("cleaned up")

    async with BackgroundTasks() as tasks:
        handle = tasks.start_soon(forever)
        assert hasattr(handle, "cancel")
        await anyio.sleep(0.01)
        tasks.cancel_all()
    assert events == ["cleaned up"]


async def test_one_task_cancelled_by_its_handle() -> None:
    events: list[str] = []

    async def forever(name: str) -> None:
        try:
            await anyio.sleep_forever()
        finally:
            events.append(name)

    async with BackgroundTasks() as tasks:
        first = tasks.start_soon(forever, "first")
        tasks.start_soon(forever, "second")
        await anyio.sleep(0.01)
        first.cancel()
        await anyio.sleep(0.01)
        assert events == ["first"]
        tasks.cancel_all()
    assert events == ["first", "second"]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_task_that_raises_is_logged_not_lost(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.ERROR, "aiostream_synth.engine")

    async def broken() -> None:
        raise RuntimeError("boom")

    async with BackgroundTasks() as tasks:
        tasks.start_soon(broken, name="broken-task")
    (record,) = caplog.records
    assert "broken-task" in record.getMessage()
    assert record.exc_info is not None


async def test_starting_outside_the_context_is_an_error() -> None:
    with pytest.raises(RuntimeError, match="not entered"):
        BackgroundTasks().start_soon(anyio.sleep, 0)
