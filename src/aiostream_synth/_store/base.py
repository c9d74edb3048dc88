"""The store interface: a response object and its numbered event frames, per response id.

A background response's events are written here as they are made (``append``), with the
response object as it stands; a reader replays them from any sequence number (``events``)
and, on another replica, waits for more (``wait``). An implementation may fail
(:class:`StoreUnavailable`): serving then keeps the live stream going and says resume is
unavailable, never truncating what a connected client receives.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Protocol

__all__ = ["Creation", "ResponseStore", "StoreUnavailable", "StoredResponse", "Write"]


class StoreUnavailable(Exception):
    """The store could not be reached or refused the operation."""


@dataclass(frozen=True, slots=True)
class StoredResponse:
    """One stored response, as it stands."""

    #: Whose it is (a digest of the credentials that created it): nobody else sees it.
    owner: str
    #: The response object as its latest event carried it.
    object: dict[str, Any]
    #: Its terminal event is stored: no event will follow.
    done: bool
    #: The sequence number of its last stored event (-1 before any).
    last_sequence: int
    #: The whole input it was made from (its chain's included), for a request continuing it;
    #: None when it was not kept.
    input: list[Any] | None = None
    #: Created in background mode: its events are kept (it can be streamed again).
    background: bool = False


@dataclass(frozen=True, slots=True)
class Creation:
    """A response to start keeping before the events of the same write (see ``append_many``)."""

    owner: str
    object: dict[str, Any]
    input_items: list[Any] | None = None
    background: bool = False


#: One response's part of :meth:`ResponseStore.append_many`: its creation (or None), its
#: events, its new object (or None), and whether it is done.
Write = tuple[Creation | None, Sequence[tuple[int, bytes]], dict[str, Any] | None, bool]


class ResponseStore(Protocol):
    """What serving needs of a store (every method may raise :class:`StoreUnavailable`).

    It is an async context manager: the app's lifespan enters it (connects, checks the server
    answers; :class:`StoreUnavailable` when it does not) and leaves it at shutdown."""

    async def __aenter__(self) -> Any: ...

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None: ...

    async def create(
        self,
        response_id: str,
        owner: str,
        obj: dict[str, Any],
        *,
        input_items: list[Any] | None = None,
        background: bool = False,
    ) -> None:
        """Start keeping ``response_id``: its object so far (no events), the input it is made
        from, and whether it is a background response (whose events are kept)."""
        ...

    async def get(self, response_id: str) -> StoredResponse | None:
        """The response as it stands, or None (never created, deleted or expired)."""
        ...

    async def append(
        self,
        response_id: str,
        events: Sequence[tuple[int, bytes]],
        obj: dict[str, Any] | None = None,
        *,
        done: bool = False,
    ) -> None:
        """Add numbered event frames (in order), the object when an event carried a new one,
        and whether the last of them was terminal. Nothing happens for an unknown id."""
        ...

    async def append_many(self, writes: Mapping[str, Write]) -> None:
        """:meth:`create` (when a write says so) then :meth:`append` for several responses at
        once: one round trip to a server."""
        ...

    async def events(self, response_id: str, after: int) -> list[tuple[int, bytes]]:
        """The stored events numbered above ``after``, in order."""
        ...

    async def wait(self, response_id: str, after: int, max_wait_s: float) -> None:
        """Return once an event above ``after`` is stored, the response is done or gone, or
        ``max_wait_s`` seconds have passed."""
        ...

    async def delete(self, response_id: str) -> bool:
        """Forget the response; whether it was there."""
        ...
