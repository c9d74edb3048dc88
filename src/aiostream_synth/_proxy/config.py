"""``ProxyConfig``: everything ``aiostream-synth serve`` can be told, and its checks.

Kept apart from the app and light to import (the standard library and the bridge options only):
the command line reads its fields and defaults to build ``--help`` without loading the SDK types.
"""

from __future__ import annotations

import json
import math
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from aiostream_synth._dialects.bridges.options import BridgeOptions, parse_bridge_options
from aiostream_synth._proxy.dialect_plugins import check_reference
from aiostream_synth._proxy.http_defences import (
    BODY_TIMEOUT_S,
    HEAD_TIMEOUT_S,
    KEEP_ALIVE_S,
    WRITE_TIMEOUT_S,
)
from aiostream_synth._wire.limits import DEFAULT_MAX_BODY_BYTES

__all__ = ["EMBEDDED_MODEL", "ProxyConfig"]

#: The embedded model's default name.
EMBEDDED_MODEL = "aiostream-synth-echo"


def _check_seconds(name: str, value: object, *, positive: bool, none: str = "") -> None:
    if (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and (value > 0 if positive else value >= 0)
    ):
        return
    allowed = "a positive number of seconds" if positive else "a number of seconds, 0 or more"
    raise ValueError(f"{name} must be {allowed}{f' or {none}' if none else ''}, not {value!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class ProxyConfig:
    """Everything ``aiostream-synth serve`` can be told (each also from the environment)."""

    host: str = "127.0.0.1"
    port: int = 8000
    #: Base URL of an OpenAI-compatible server answering non-streaming; None = embedded model.
    upstream: str | None = None
    #: The API the upstream speaks; None: each client's own. Another one bridges.
    upstream_api: str | None = None
    #: Bridge presets for a backend family (``deepseek``, ``vllm``, ...).
    bridge_profile: str = "generic"
    #: Bridge options on top of the profile, as a JSON object.
    bridge_config: str | None = None
    upstream_api_key: str | None = None
    forward_authorization: bool = False
    connect_timeout: float = 10.0
    #: Upstream read timeout, seconds. None: none of its own, the call is bounded by ``timeout``
    #: (a non-streaming upstream sends nothing until it is done, so a shorter read timeout
    #: would silently cut every turn below the deadline).
    read_timeout: float | None = None
    upstream_retries: int = 0
    #: Cap on concurrent upstream calls; None: no cap (one connection per open stream).
    upstream_max_connections: int | None = None
    #: Inbound bearer token; None accepts every request.
    api_key: str | None = None
    keepalive_s: float = 10.0
    #: Total deadline per backend call, seconds; None for no deadline.
    timeout: float | None = 1800.0
    on_disconnect: Literal["cancel", "finish"] = "cancel"  # the engine's OnDisconnect
    #: Where responses are kept for retrieval, resume and continuation (decision P12):
    #: ``memory`` (this process, bounded), a ``redis://host:port/db`` URL (a Redis or Valkey
    #: server, shared), or ``off`` (background mode and unknown chains are 400s).
    store: str = "memory"
    #: The memory store's bound: the oldest responses are evicted beyond it.
    store_max_bytes: int = 256 * 2**20
    #: Seconds a stored response is kept after its last event.
    store_ttl_s: float = 3600.0
    #: Redis store: seconds a process's lease on the responses it generates lasts unrenewed
    #: (renewed every third of it); a reader in another process ends a response whose
    #: process's lease lapsed as failed. None: three keepalive intervals, at least 3 s.
    store_lease_s: float | None = None
    #: Which identical requests share one backend call (a retry after a drop, by default).
    coalesce: Literal["retries", "all", "off"] = "retries"
    coalesce_linger: float = 0.9
    coalesce_window: float = 10.0
    drain_timeout: float = 30.0
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES
    workers: int = 1
    #: Open client connections per worker at most (a 503 beyond); None: no cap.
    max_connections: int | None = None
    #: Seconds an idle keep-alive client connection stays open.
    http_keep_alive_s: float = KEEP_ALIVE_S
    #: lean only: seconds a request head gets to arrive whole.
    http_head_timeout_s: float = HEAD_TIMEOUT_S
    #: lean only: seconds a request body may stay silent while it is awaited.
    http_body_timeout_s: float = BODY_TIMEOUT_S
    #: lean and uvicorn: seconds a client may read nothing while its answer waits for it.
    http_write_timeout_s: float = WRITE_TIMEOUT_S
    #: The HTTP server: ``lean`` (_proxy/lean_http.py, the least memory per open stream),
    #: ``uvicorn``, ``hypercorn`` or ``granian``.
    server: Literal["lean", "uvicorn", "hypercorn", "granian"] = "lean"
    #: "auto": uvloop when installed, else asyncio.
    loop: Literal["auto", "asyncio", "uvloop", "trio"] = "auto"
    log_level: str = "info"
    #: The embedded model's name.
    model: str = EMBEDDED_MODEL
    #: More dialects to serve, each ``MODULE:ATTR`` naming a dialect spec instance (imported
    #: and registered when the app is made).
    dialects: tuple[str, ...] = ()
    #: Each dialect's own options, ``{dialect: {option: value}}`` (``--<dialect>-<option>``):
    #: ``{"responses": {"keepalive": "comment"}}``; what is not given keeps its default.
    dialect_options: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # An empty key would be a key nobody can be refused with: ``AIOSTREAM_SYNTH_API_KEY=``
        # (a variable set to nothing) must not turn authentication off without a word.
        if self.api_key is not None and not self.api_key.strip():
            raise ValueError(
                "api_key is empty: give the inbound bearer token, or leave it unset "
                "to accept every request"
            )
        for name in (
            "http_keep_alive_s",
            "http_head_timeout_s",
            "http_body_timeout_s",
            "http_write_timeout_s",
        ):
            value = getattr(self, name)
            if not 0 < value < float("inf"):
                raise ValueError(f"{name} must be a positive number of seconds, not {value!r}")
        if self.max_connections is not None and self.max_connections < 1:
            raise ValueError(f"max_connections must be at least 1, not {self.max_connections}")
        self._check_ranges()

    def _check_ranges(self) -> None:
        """Refuse values no server can run with (issue 37): each error names the option and
        the range it takes."""
        if not (isinstance(self.port, int) and 0 <= self.port <= 65535):
            raise ValueError(f"port must be from 0 (any free port) to 65535, not {self.port!r}")
        for name in ("keepalive_s", "connect_timeout"):
            _check_seconds(name, getattr(self, name), positive=True)
        for name in ("timeout", "read_timeout"):
            value = getattr(self, name)
            if value is not None:
                _check_seconds(
                    name, value, positive=True, none="None (no limit; 0 on the command line)"
                )
        for name in ("coalesce_linger", "coalesce_window", "drain_timeout"):
            _check_seconds(name, getattr(self, name), positive=False)
        _check_seconds("store_ttl_s", self.store_ttl_s, positive=True)
        if self.store_lease_s is not None:
            _check_seconds(
                "store_lease_s",
                self.store_lease_s,
                positive=True,
                none="None (three keepalive intervals, at least 3 s; 0 on the command line)",
            )
        for name, least in (
            ("upstream_retries", 0),
            ("max_body_bytes", 1),
            ("workers", 1),
            ("store_max_bytes", 1),
        ):
            value = getattr(self, name)
            if not (isinstance(value, int) and value >= least):
                raise ValueError(f"{name} must be an integer of at least {least}, not {value!r}")
        if self.upstream_max_connections is not None and self.upstream_max_connections < 1:
            raise ValueError(
                "upstream_max_connections must be at least 1 (or None: no cap), "
                f"not {self.upstream_max_connections}"
            )
        if self.store not in ("memory", "off"):
            parsed = urllib.parse.urlsplit(self.store)
            if parsed.scheme not in ("redis", "rediss") or not parsed.hostname:
                raise ValueError(
                    "store must be memory, off, or a redis:// (rediss://) URL with a host "
                    f"(redis://127.0.0.1:6379/0), not {self.store!r}"
                )
        for reference in self.dialects:
            check_reference(reference)
        if self.upstream is not None:
            parsed = urllib.parse.urlsplit(self.upstream)
            if parsed.scheme not in ("http", "https") or not parsed.hostname:
                raise ValueError(
                    f"upstream must be an http:// or https:// URL with a host "
                    f"(http://127.0.0.1:8001/v1), not {self.upstream!r}"
                )

    def bridge_options(self) -> BridgeOptions:
        """The bridge options ``bridge_profile`` and ``bridge_config`` describe (``ValueError``
        naming what is wrong)."""
        overrides: Any = {}
        if self.bridge_config:
            try:
                overrides = json.loads(self.bridge_config)
            except json.JSONDecodeError as exc:
                raise ValueError(f"bridge config is not JSON: {exc}") from None
            if not isinstance(overrides, dict):
                raise ValueError("bridge config must be a JSON object of bridge options")
        return parse_bridge_options(self.bridge_profile, overrides)
