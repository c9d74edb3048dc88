"""BackgroundTasks: the server-wide home of backend tasks (tasks on the loop on asyncio, an
anyio task group on trio)."""

from __future__ import annotations

import asyncio
import logging
from typing import Any

import anyio
import anyio.lowlevel
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


async def test_starting_after_the_context_was_left_is_an_error() -> None:
    """On both loops: nothing would wait for a task started then (it would outlive the
    lifespan), so it is refused and never called."""
    called: list[str] = []

    async def work() -> None:
        called.append("work")

    async with BackgroundTasks() as tasks:
        pass
    with pytest.raises(RuntimeError, match="no new tasks can be started"):
        tasks.start_soon(work)
    await anyio.lowlevel.checkpoint()
    assert called == []


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_on_asyncio_a_task_takes_its_first_step_at_once() -> None:
    """Eager start: a backend call begins when its stream does, not after whatever the loop
    had queued (a burst of requests)."""
    steps: list[str] = []

    async def work() -> None:
        steps.append("first")
        await anyio.lowlevel.checkpoint()
        steps.append("second")

    async with BackgroundTasks() as tasks:
        tasks.start_soon(work)
        assert steps == ["first"]
    assert steps == ["first", "second"]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_a_loop_with_a_task_factory_of_its_own_keeps_it() -> None:
    """No eager start behind the factory's back: its tasks are made by it, as always."""
    loop = asyncio.get_running_loop()
    made: list[str] = []

    def factory(loop: asyncio.AbstractEventLoop, coro: Any, **kwargs: Any) -> asyncio.Task[Any]:
        made.append(coro.__name__)
        return asyncio.Task(coro, loop=loop, **kwargs)

    steps: list[str] = []

    async def work() -> None:
        steps.append("first")

    loop.set_task_factory(factory)
    try:
        async with BackgroundTasks() as tasks:
            tasks.start_soon(work, name="made by the factory")
            assert steps == []
    finally:
        loop.set_task_factory(None)
    assert steps == ["first"]
    assert made == ["work"]


async def test_a_backend_that_answers_without_waiting_streams_its_answer() -> None:
    """Under a shared task group the backend task may end before the stream has even been
    entered fully (an eager start): the stream is the answer, with no keepalive first."""
    from aiostream_synth import ChatDialect, SynthesizedStream

    async def backend() -> Any:
        return {
            "id": "c1",
            "created": 1,
            "model": "m",
            "choices": [{"message": {"content": "at once"}, "finish_reason": "stop"}],
        }

    async with BackgroundTasks() as tasks:
        stream = SynthesizedStream(
            backend, ChatDialect(), keepalive_interval=3600, task_group=tasks
        )
        async with stream as frames:
            body = b"".join([frame async for frame in frames])
    assert stream.keepalives_sent == 0
    assert b"at once" in body
    assert body.endswith(b"data: [DONE]\n\n")


async def test_a_failing_body_cancels_the_tasks_and_propagates() -> None:
    """As a task group: leaving on an exception cancels what still runs, then waits for it."""
    events: list[str] = []

    async def forever() -> None:
        try:
            await anyio.sleep_forever()
        finally:
            events.append("cancelled")

    with anyio.fail_after(10), pytest.raises(LookupError, match="the body failed"):
        async with BackgroundTasks() as tasks:
            tasks.start_soon(forever)
            await anyio.lowlevel.checkpoint()
            raise LookupError("the body failed")
    assert events == ["cancelled"]
