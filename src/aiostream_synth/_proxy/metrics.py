"""Request counters and latency histograms, and the response store's figures, rendered in
Prometheus' text format."""

from __future__ import annotations

import bisect
import math
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["Metrics", "StoreFigures"]

_BUCKETS = (0.05, 0.1, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, math.inf)


def _label(value: str) -> str:
    """A Prometheus label value (client-supplied types may hold quotes or newlines)."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")[:100]


class _Histogram:
    def __init__(self) -> None:
        self.counts = [0] * len(_BUCKETS)
        self.total = 0.0
        self.n = 0

    def observe(self, value: float) -> None:
        self.counts[bisect.bisect_left(_BUCKETS, value)] += 1
        self.total += value
        self.n += 1

    def render(self, name: str) -> list[str]:
        lines, running = [], 0
        for bound, count in zip(_BUCKETS, self.counts, strict=True):
            running += count
            label = "+Inf" if math.isinf(bound) else f"{bound:g}"
            lines.append(f'{name}_bucket{{le="{label}"}} {running}')
        lines += [f"{name}_sum {self.total:.6f}", f"{name}_count {self.n}"]
        return lines


@dataclass(frozen=True, slots=True)
class StoreFigures:
    """The response store as this process sees it now (``--store``), for ``/metrics``."""

    #: Background responses this process is generating.
    generating: int
    #: Store operations that failed (each logged) since startup, sharing calls' included.
    failures: int
    #: Responses of another process that stopped, ended here as failed, since startup.
    abandoned: int = 0
    #: The memory store's own figures (None for a store in another server, such as Redis):
    #: responses and bytes held, and how many were evicted (over ``--store-max-bytes``) or
    #: expired (``--store-ttl-s`` after their last event).
    held: int | None = None
    held_bytes: int | None = None
    evicted: int | None = None
    expired: int | None = None
    #: Requests that shared a backend call another process ran (None without coalescing across
    #: processes: a store that cannot share calls, or ``--coalesce off``).
    joined_elsewhere: int | None = None


_STORE_SERIES = (
    # (name, type, help, the StoreFigures field)
    ("background_generating", "gauge", "Background responses being generated here.", "generating"),
    ("store_failures_total", "counter", "Response store operations that failed.", "failures"),
    (
        "store_abandoned_total",
        "counter",
        "Responses whose server stopped before their end, ended here as failed.",
        "abandoned",
    ),
    ("store_responses", "gauge", "Responses held by the memory store.", "held"),
    ("store_bytes", "gauge", "Bytes held by the memory store.", "held_bytes"),
    (
        "store_evicted_total",
        "counter",
        "Responses the memory store evicted (its bound).",
        "evicted",
    ),
    ("store_expired_total", "counter", "Responses the memory store expired (its TTL).", "expired"),
    (
        "coalesced_elsewhere_total",
        "counter",
        "Requests that shared a backend call another server sharing the store ran.",
        "joined_elsewhere",
    ),
)


class Metrics:
    """Process-local metrics (each worker process keeps its own)."""

    def __init__(self) -> None:
        self.requests: Counter[tuple[str, str, str]] = Counter()
        self.keepalives = 0
        self.bytes_sent = 0
        self.upstream_latency = _Histogram()
        self.request_duration = _Histogram()
        #: (kind, type) -> how many a bridge dropped
        self.bridge_dropped: Counter[tuple[str, str]] = Counter()

    def record(
        self,
        dialect: str,
        stream: bool,
        outcome: str,
        *,
        keepalives: int,
        bytes_sent: int,
        duration: float,
        upstream_latency: float | None,
        dropped: Iterable[tuple[str, str]] = (),
    ) -> None:
        if dropped:
            self.bridge_dropped.update(dropped)
        self.requests[(dialect, "true" if stream else "false", outcome)] += 1
        self.keepalives += keepalives
        self.bytes_sent += bytes_sent
        self.request_duration.observe(duration)
        if upstream_latency is not None:
            self.upstream_latency.observe(upstream_latency)

    def render(self, open_streams: int = 0, store: StoreFigures | None = None) -> str:
        """The text exposition; ``open_streams`` is the gauge of streams open right now,
        ``store`` the response store's figures (none without a store)."""
        lines = [
            "# HELP aiostream_synth_open_streams Streams open now (waiting for or sending their answer).",
            "# TYPE aiostream_synth_open_streams gauge",
            f"aiostream_synth_open_streams {open_streams}",
            "# HELP aiostream_synth_requests_total Requests by dialect, streaming and outcome.",
            "# TYPE aiostream_synth_requests_total counter",
        ]
        for (dialect, stream, outcome), count in sorted(self.requests.items()):
            lines.append(
                f'aiostream_synth_requests_total{{dialect="{dialect}",stream="{stream}",outcome="{outcome}"}} {count}'
            )
        lines += [
            "# HELP aiostream_synth_keepalives_total Keepalive frames sent.",
            "# TYPE aiostream_synth_keepalives_total counter",
            f"aiostream_synth_keepalives_total {self.keepalives}",
            "# HELP aiostream_synth_response_bytes_total Response body bytes sent.",
            "# TYPE aiostream_synth_response_bytes_total counter",
            f"aiostream_synth_response_bytes_total {self.bytes_sent}",
            "# HELP aiostream_synth_upstream_latency_seconds Backend call latency.",
            "# TYPE aiostream_synth_upstream_latency_seconds histogram",
            *self.upstream_latency.render("aiostream_synth_upstream_latency_seconds"),
            "# HELP aiostream_synth_request_duration_seconds Request duration.",
            "# TYPE aiostream_synth_request_duration_seconds histogram",
            *self.request_duration.render("aiostream_synth_request_duration_seconds"),
            "# HELP aiostream_synth_bridge_dropped_total What bridges dropped, by kind and type.",
            "# TYPE aiostream_synth_bridge_dropped_total counter",
            *(
                f'aiostream_synth_bridge_dropped_total{{kind="{_label(kind)}",type="{_label(type_)}"}} {count}'
                for (kind, type_), count in sorted(self.bridge_dropped.items())
            ),
        ]
        if store is not None:
            for name, kind, text, attribute in _STORE_SERIES:
                value = getattr(store, attribute)
                if value is not None:
                    lines += [
                        f"# HELP aiostream_synth_{name} {text}",
                        f"# TYPE aiostream_synth_{name} {kind}",
                        f"aiostream_synth_{name} {value}",
                    ]
        return "\n".join(lines) + "\n"
