"""``serve``'s uvicorn protocol (``_proxy/uvicorn_http.py``) driven through uvicorn's own
parser, connection by connection, on a real asyncio loop: the arrival stamp and the disconnect
callback it puts in each request's scope.

Plain functions running their own loop: the protocol exists on asyncio only."""

from __future__ import annotations

import asyncio
import socket
import time
from collections.abc import Coroutine, MutableMapping
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState

from aiostream_synth._proxy.uvicorn_http import http_protocol
from aiostream_synth._serving.pipeline import ON_DISCONNECT, RECEIVED_AT

from .support.fake_transport import FakeTcpSocket, FakeTransport, SocketTransport

REQUEST = b"POST /v1/responses HTTP/1.1\r\nHost: t\r\nContent-Length: 2\r\n\r\n{}"


class _Request:
    """One request on one connection of the protocol; the app holds it open (no response)
    until :attr:`release` is set, so the connection's state is the client's alone."""

    def __init__(self) -> None:
        self.seen = asyncio.Event()
        self.release = asyncio.Event()
        self.scope: MutableMapping[str, Any] = {}

    async def app(self, scope: Any, receive: Any, send: Any) -> None:
        self.scope = scope
        self.seen.set()
        await self.release.wait()

    async def open(self, transport: FakeTransport | None = None) -> tuple[Any, FakeTransport]:
        config = uvicorn.Config(
            self.app, lifespan="off", http=http_protocol(), log_level="error", interface="asgi3"
        )
        config.load()
        protocol = config.http_protocol_class(  # type: ignore[call-arg]
            config=config, server_state=ServerState(), app_state={}
        )
        transport = transport or FakeTransport()
        protocol.connection_made(transport)
        protocol.data_received(REQUEST)
        await self.seen.wait()  # the request's task runs
        return protocol, transport


def _run(test: Coroutine[Any, Any, None]) -> None:
    asyncio.run(asyncio.wait_for(test, 10))


def test_each_request_is_stamped_with_its_arrival_on_the_loop_clock() -> None:
    async def main() -> None:
        request = _Request()
        loop = asyncio.get_running_loop()
        before = loop.time()
        await request.open()
        stamp = request.scope[RECEIVED_AT]
        assert isinstance(stamp, float)
        assert before <= stamp <= loop.time()
        assert callable(request.scope[ON_DISCONNECT])
        request.release.set()

    _run(main())


@pytest.mark.skipif(not hasattr(socket, "TCP_INFO"), reason="TCP_INFO is Linux's")
def test_the_stamp_is_when_the_kernel_received_the_request() -> None:
    """A request the loop read late is stamped when its bytes came (``arrival.py``)."""

    async def main() -> None:
        request = _Request()
        before = time.monotonic()
        await request.open(SocketTransport(FakeTcpSocket(waited_ms=700)))
        assert before - 0.7 <= request.scope[RECEIVED_AT] <= time.monotonic() - 0.7
        request.release.set()

    _run(main())


def test_the_disconnect_callback_runs_once_when_the_connection_is_lost() -> None:
    async def main() -> None:
        request = _Request()
        protocol, _ = await request.open()
        calls: list[str] = []
        request.scope[ON_DISCONNECT](lambda: calls.append("lost"))
        protocol.connection_lost(None)
        assert calls == ["lost"]
        protocol.connection_lost(None)
        assert calls == ["lost"]  # once
        request.release.set()

    _run(main())


def test_a_withdrawn_callback_is_not_called() -> None:
    async def main() -> None:
        request = _Request()
        protocol, _ = await request.open()
        calls: list[str] = []
        request.scope[ON_DISCONNECT](lambda: calls.append("lost"))
        request.scope[ON_DISCONNECT](None)
        protocol.connection_lost(None)
        assert calls == []
        request.release.set()

    _run(main())


def test_a_callback_handed_over_after_the_client_left_runs_soon_not_at_once() -> None:
    async def main() -> None:
        request = _Request()
        protocol, transport = await request.open()
        protocol.connection_lost(None)  # gone before the app asks
        assert transport.is_closing()
        calls: list[str] = []
        request.scope[ON_DISCONNECT](lambda: calls.append("lost"))
        assert calls == []  # never from within the hook itself
        await asyncio.sleep(0)
        assert calls == ["lost"]
        request.release.set()

    _run(main())
