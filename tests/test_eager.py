"""start_eagerly: asyncio's eager task start (3.12), re-created for Python 3.11.

Run on every Python (the mechanism works on 3.12+ too, and a newer asyncio must not break it),
on asyncio's own loop and on uvloop (``serve``'s).
"""

from __future__ import annotations

import asyncio
import contextvars
import importlib.util
import inspect
from typing import Any

import anyio
import pytest

from aiostream_synth._engine.runtime._eager311 import start_eagerly

pytestmark = pytest.mark.anyio

VAR: contextvars.ContextVar[str] = contextvars.ContextVar("VAR", default="unset")


@pytest.fixture(
    params=[
        pytest.param("asyncio", id="asyncio"),
        pytest.param(
            ("asyncio", {"use_uvloop": True}),
            id="uvloop",
            marks=pytest.mark.skipif(
                importlib.util.find_spec("uvloop") is None, reason="uvloop not installed"
            ),
        ),
    ]
)
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    return request.param


async def test_the_first_step_runs_at_once_as_the_new_task_in_its_context() -> None:
    loop = asyncio.get_running_loop()
    me = asyncio.current_task()
    seen: list[Any] = []

    async def work() -> str:
        seen.append(("first", asyncio.current_task()))
        VAR.set("set in the first step")
        await asyncio.sleep(0)
        seen.append(("second", asyncio.current_task(), VAR.get()))
        return "done"

    task = start_eagerly(loop, work(), "eager")
    assert seen == [("first", task)]
    assert asyncio.current_task() is me  # the caller is the current task again
    assert VAR.get() == "unset"  # the task's context is its own copy
    assert task.get_name() == "eager"
    assert not task.done()
    assert await task == "done"
    assert seen[1] == ("second", task, "set in the first step")


async def test_started_from_a_loop_callback_outside_any_task() -> None:
    loop = asyncio.get_running_loop()
    started: asyncio.Future[asyncio.Task[Any]] = loop.create_future()
    seen: list[asyncio.Task[Any] | None] = []

    async def work() -> int:
        seen.append(asyncio.current_task())
        await asyncio.sleep(0)
        return 7

    def callback() -> None:
        task = start_eagerly(loop, work(), None)
        seen.append(asyncio.current_task())  # no task again once it returns
        started.set_result(task)

    loop.call_soon(callback)
    task = await started
    assert seen == [task, None]
    assert await task == 7


async def test_anyio_primitives_taken_in_the_first_step_belong_to_the_task() -> None:
    """anyio keys a lock's owner and a cancel scope's host by the current task: taken in the
    eager step and let go in a later one, they must see the same task."""
    loop = asyncio.get_running_loop()
    lock = anyio.Lock()
    release = anyio.Event()

    async def work() -> str:
        async with lock:
            with anyio.CancelScope() as scope:
                await release.wait()
            return f"released, cancelled={scope.cancelled_caught}"

    task = start_eagerly(loop, work(), None)
    assert lock.locked()
    release.set()
    assert await task == "released, cancelled=False"
    assert not lock.locked()


async def test_a_task_started_in_another_ones_eager_step() -> None:
    loop = asyncio.get_running_loop()
    me = asyncio.current_task()
    seen: dict[str, Any] = {}
    inner: list[asyncio.Task[Any]] = []

    async def child() -> None:
        seen["child"] = asyncio.current_task()
        await asyncio.sleep(0)

    async def parent() -> None:
        inner.append(start_eagerly(loop, child(), None))
        seen["parent after"] = asyncio.current_task()
        await inner[0]

    task = start_eagerly(loop, parent(), None)
    assert seen == {"child": inner[0], "parent after": task}
    assert asyncio.current_task() is me
    await task


async def test_a_coroutine_that_ends_in_its_first_step() -> None:
    loop = asyncio.get_running_loop()

    async def answer() -> str:
        return "at once"

    async def fail() -> None:
        raise LookupError("in the first step")

    answered = start_eagerly(loop, answer(), None)
    failed = start_eagerly(loop, fail(), None)
    assert await answered == "at once"
    with pytest.raises(LookupError, match="in the first step"):
        await failed


async def test_cancelled_before_its_own_first_step_lets_go_of_what_it_waits_on() -> None:
    loop = asyncio.get_running_loop()
    waited: list[asyncio.Future[None]] = []
    events: list[str] = []

    async def work() -> None:
        fut = loop.create_future()
        waited.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            events.append("cancelled")
            raise

    task = start_eagerly(loop, work(), None)
    assert task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert task.cancelled()
    assert events == ["cancelled"]
    assert waited[0].cancelled()


async def test_cancelled_after_its_coroutine_ended_keeps_the_outcome() -> None:
    """Until its own first step the task is not done though its coroutine has ended: the
    outcome stands, as when a coroutine ends just as it is cancelled."""
    loop = asyncio.get_running_loop()

    async def answer() -> str:
        return "kept"

    async def fail() -> None:
        raise LookupError("kept too")

    answered = start_eagerly(loop, answer(), None)
    failed = start_eagerly(loop, fail(), None)
    answered.cancel()
    failed.cancel()
    assert await answered == "kept"
    with pytest.raises(LookupError, match="kept too"):
        await failed


async def test_it_looks_like_its_coroutine_to_introspection() -> None:
    """anyio decides whether a task has started by ``inspect.getcoroutinestate`` of its
    coroutine: an eager task has (as on 3.12)."""
    loop = asyncio.get_running_loop()
    release = asyncio.Event()

    async def work() -> None:
        await release.wait()

    task = start_eagerly(loop, work(), None)
    coro = task.get_coro()
    assert inspect.getcoroutinestate(coro) == inspect.CORO_SUSPENDED  # type: ignore[arg-type]
    assert coro.cr_code is work.__code__  # type: ignore[union-attr]
    assert coro.cr_await is not None  # type: ignore[union-attr]
    assert "work() running at" in repr(task)
    release.set()
    await task
    assert inspect.getcoroutinestate(coro) == inspect.CORO_CLOSED  # type: ignore[arg-type]


async def test_a_loop_whose_tasks_take_no_context_starts_them_the_ordinary_way() -> None:
    """A third-party loop may predate ``create_task(context=...)``: no eager start there (it
    could not run the later steps in the first one's context), and nothing lost."""
    real = asyncio.get_running_loop()
    steps: list[str] = []

    class NoContextLoop:
        def create_task(self, coro: Any, *, name: str | None = None) -> asyncio.Task[Any]:
            return real.create_task(coro, name=name)

    async def work() -> str:
        steps.append("first")
        await asyncio.sleep(0)
        return "done"

    task = start_eagerly(NoContextLoop(), work(), "plain")  # type: ignore[arg-type]
    assert steps == []
    assert task.get_name() == "plain"
    assert await task == "done"
    assert steps == ["first"]
