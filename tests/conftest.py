from __future__ import annotations

from typing import Any

import pytest


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    """Every async test runs on asyncio and on trio; trio gets an autojumping MockClock so
    timer-driven tests take no real time."""
    if request.param == "trio":
        from trio.testing import MockClock

        return ("trio", {"clock": MockClock(autojump_threshold=0)})
    return "asyncio"
