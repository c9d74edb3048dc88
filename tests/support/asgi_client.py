"""A client's side of one ASGI HTTP request, and a server's side of the ASGI lifespan, for tests
that call an app directly."""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

import anyio


class OneRequest:
    """``receive`` hands over ``body`` once, then waits until :attr:`gone` is set (the client
    leaves: ``http.disconnect``), recording in :attr:`waits` how that wait ended ("woken" or
    "cancelled"); ``send`` keeps every message in :attr:`sent`."""

    def __init__(self, body: bytes) -> None:
        self.body = body
        self.gone = anyio.Event()
        self.waits: list[str] = []
        self.sent: list[MutableMapping[str, Any]] = []
        self._requested = False

    async def receive(self) -> MutableMapping[str, Any]:
        if not self._requested:
            self._requested = True
            return {"type": "http.request", "body": self.body, "more_body": False}
        try:
            await self.gone.wait()
        except anyio.get_cancelled_exc_class():
            self.waits.append("cancelled")
            raise
        self.waits.append("woken")
        return {"type": "http.disconnect"}

    async def send(self, message: MutableMapping[str, Any]) -> None:
        self.sent.append(message)

    @property
    def bodies(self) -> list[MutableMapping[str, Any]]:
        """The ``http.response.body`` messages sent."""
        return [m for m in self.sent if m["type"] == "http.response.body"]


class Lifespan:
    """Drives an app's ASGI lifespan in a task of its own, as a server does."""

    def __init__(self, app: Any) -> None:
        self.app = app
        self.to_app, self.app_inbox = anyio.create_memory_object_stream[dict[str, Any]](2)
        self.app_outbox, self.from_app = anyio.create_memory_object_stream[dict[str, Any]](2)
        self.task_id: int | None = None

    async def run(self) -> None:
        self.task_id = anyio.get_current_task().id
        async with self.app_inbox, self.app_outbox:
            await self.app({"type": "lifespan"}, self.app_inbox.receive, self.app_outbox.send)

    async def say(self, message: str) -> None:
        await self.to_app.send({"type": f"lifespan.{message}"})
        assert (await self.from_app.receive())["type"] == f"lifespan.{message}.complete"


def post_scope(path: str, query_string: bytes = b"") -> dict[str, Any]:
    """The ASGI scope of a JSON ``POST`` to ``path`` on loopback."""
    return {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": query_string,
        "root_path": "",
        "headers": [(b"content-type", b"application/json")],
        "client": ("127.0.0.1", 1),
        "server": ("127.0.0.1", 2),
    }
