"""Which event loop runs the current task: the per-stream hot paths use asyncio natively.

anyio's portable primitives (cancel scopes, task groups, ``sleep``) cost memory and CPU per
waiting stream; where a stream spends its whole life in one wait, asyncio gets a bare future or
task instead, and anything else (trio) keeps anyio's.
"""

from __future__ import annotations

import asyncio

try:
    import sniffio
except ImportError:  # pragma: no cover - sniffio comes with trio; anyio works without it
    sniffio = None  # type: ignore[assignment]

__all__ = ["running_asyncio_loop"]


def running_asyncio_loop() -> asyncio.AbstractEventLoop | None:
    """The running asyncio loop when the current async library is asyncio (as anyio decides);
    None on trio or outside any loop.

    The loop is asked first (one C call), then only the two places where a library announces
    itself to sniffio (its thread-local and context variable): a third of the cost of
    sniffio's full lookup through ``asyncio.current_task()`` (the figures: benchmarks/COSTS.md)."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:
        return None
    if sniffio is not None:
        named = sniffio.thread_local.name or sniffio.current_async_library_cvar.get()
        if named is not None and named != "asyncio":
            return None
    return loop
