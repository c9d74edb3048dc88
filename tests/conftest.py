from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

# Imported before any test can import trio: trio registers its PRNG with hypothesis when
# hypothesis is imported after it, which warns (an error under our filterwarnings) if that
# happens as late as pytest's terminal summary (a run of test modules without hypothesis).
import hypothesis  # noqa: F401
import pytest

from .support.redis_server import redis_server

# tests/site checks the built documentation site in a browser: the nox session ``docs`` builds
# the site, then runs them with AIOSTREAM_SYNTH_SITE naming it. Elsewhere they are not collected.
collect_ignore = [] if os.environ.get("AIOSTREAM_SYNTH_SITE") else ["site"]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> Any:
    """Every async test runs on asyncio and on trio; trio gets an autojumping MockClock so
    timer-driven tests take no real time."""
    if request.param == "trio":
        from trio.testing import MockClock

        return ("trio", {"clock": MockClock(autojump_threshold=0)})
    return "asyncio"


@pytest.fixture
def exact_timing(anyio_backend: Any) -> bool:
    """True on trio's MockClock, where tick counts are exact; on asyncio's real clock a busy
    machine may delay a tick, so tests assert minimums there instead."""
    return isinstance(anyio_backend, tuple)


@pytest.fixture(scope="module")
def redis_url() -> Iterator[str]:
    """A real ``redis-server`` for the module's tests (Debian's; a free port, a data directory of
    its own), stopped after them: each module starts from an empty server."""
    with redis_server() as (url, _):
        yield url
