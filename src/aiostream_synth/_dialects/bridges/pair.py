"""A bridge made of its two pure conversions (the usual case: nothing but converting)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from aiostream_synth._dialects.bridges.options import BridgeOptions
from aiostream_synth._dialects.prepared import BridgedRequest, Dialect, PreparedRequest
from aiostream_synth._params.removals import Removals

__all__ = ["PairBridge"]

#: ``(params, options, removals=...) -> (upstream params, context)``
RequestConversion = Callable[..., tuple[dict[str, Any], Any]]
#: ``(upstream result, context) -> client result``
ResultConversion = Callable[[Any, Any], dict[str, Any]]


@dataclass(frozen=True, slots=True)
class PairBridge:
    """See :class:`aiostream_synth._dialects.base.Bridge`: ``to_upstream`` converts the
    prepared request, ``to_client`` the upstream's result with the context it returned."""

    client: str
    upstream: Dialect
    to_upstream: RequestConversion
    to_client: ResultConversion

    def open(self, prepared: PreparedRequest, options: BridgeOptions) -> BridgedRequest:
        removals: Removals = prepared.removals
        params, ctx = self.to_upstream(prepared.params, options, removals=removals)
        to_client = self.to_client

        def convert(result: Any) -> dict[str, Any]:
            return to_client(result, ctx)

        return BridgedRequest(dialect=self.upstream, params=params, convert=convert)
