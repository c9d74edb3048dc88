"""The bridges, found by (client dialect, upstream dialect) (decision P11).

Direct bridges convert between a dialect and Chat Completions, the common denominator of open
model servers. A pair with no direct bridge goes through chat in two steps (an Anthropic client
on a Responses upstream: Anthropic -> chat -> Responses, and back).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from pydantic import BaseModel

from aiostream_synth._dialects.base import Bridge, DialectSpec
from aiostream_synth._dialects.bridges.anthropic_chat.bridge import ANTHROPIC_TO_CHAT
from aiostream_synth._dialects.bridges.chat_anthropic.bridge import CHAT_TO_ANTHROPIC
from aiostream_synth._dialects.bridges.chat_responses.bridge import CHAT_TO_RESPONSES
from aiostream_synth._dialects.bridges.options import BridgeOptions
from aiostream_synth._dialects.bridges.responses_chat.bridge import RESPONSES_TO_CHAT
from aiostream_synth._dialects.prepared import BridgedRequest, PreparedRequest

__all__ = ["BRIDGES", "bridge_for", "prepare_bridged"]

BRIDGES: tuple[Bridge, ...] = (
    RESPONSES_TO_CHAT,
    CHAT_TO_RESPONSES,
    ANTHROPIC_TO_CHAT,
    CHAT_TO_ANTHROPIC,
)
_DIRECT: dict[tuple[str, str], Bridge] = {(b.client, b.upstream): b for b in BRIDGES}
_PIVOT = "chat"


@dataclasses.dataclass(frozen=True, slots=True)
class _Composed:
    """Two bridges through chat: ``first`` (client -> chat), then ``second`` (chat -> upstream)."""

    first: Bridge
    second: Bridge

    @property
    def client(self) -> str:
        return self.first.client

    @property
    def upstream(self) -> str:
        return self.second.upstream

    def open(self, prepared: PreparedRequest, options: BridgeOptions) -> BridgedRequest:
        outer = self.first.open(prepared, options)
        middle = PreparedRequest(
            dialect=outer.dialect,
            stream=prepared.stream,
            params=outer.params,
            removals=prepared.removals,
            body=outer.params,
        )
        inner = self.second.open(middle, options)

        def convert(result: Any) -> Any:
            return outer.convert(inner.convert(result))

        return BridgedRequest(
            dialect=inner.dialect,
            params=inner.params,
            convert=convert,
            local_result=outer.local_result,
            echo=outer.echo,
        )


def bridge_for(client: str, upstream: str) -> Bridge | None:
    """The bridge serving ``client`` from ``upstream`` (None when they are the same dialect);
    ``ValueError`` when no bridge joins them."""
    if client == upstream:
        return None
    direct = _DIRECT.get((client, upstream))
    if direct is not None:
        return direct
    first = _DIRECT.get((client, _PIVOT))
    second = _DIRECT.get((_PIVOT, upstream))
    if first is None or second is None:
        raise ValueError(f"no bridge serves {client!r} clients from a {upstream!r} upstream")
    return _Composed(first, second)


def prepare_bridged(
    spec: DialectSpec,
    body: dict[str, Any],
    upstream: str,
    *,
    dialect_options: Any,
    options: BridgeOptions,
    params_model: type[BaseModel] | None = None,
) -> PreparedRequest:
    """Prepare ``body`` in its dialect (validated by ``params_model`` when given), then
    convert it for ``upstream`` (a streaming request or not: the upstream always gets the
    strict, sanitized shape). Raises ``RequestError`` (``BridgeError`` included)."""
    bridge = bridge_for(spec.name, upstream)
    if bridge is None:
        return spec.prepare(body, options=dialect_options, params_model=params_model)
    stream = spec.wants_stream(body)
    prepared = spec.prepare(
        body if stream else {**body, "stream": True},
        options=dialect_options,
        params_model=params_model,
        bridged=True,
    )
    bridged = bridge.open(dataclasses.replace(prepared, body=body), options)
    echo = {**prepared.echo, **bridged.echo} if bridged.echo else prepared.echo
    return dataclasses.replace(
        prepared, stream=stream, body=body, bridged=bridged, state=None, echo=echo
    )
