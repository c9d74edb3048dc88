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
    """The running asyncio loop when the current async library is asyncio (as anyio decides:
    sniffio first, then asyncio's own running loop); None on trio or outside any loop."""
    if sniffio is not None:
        try:
            if sniffio.current_async_library() != "asyncio":
                return None
        except sniffio.AsyncLibraryNotFoundError:
            return None
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None
