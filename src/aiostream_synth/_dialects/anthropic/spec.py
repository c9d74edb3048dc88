"""Anthropic Messages as an HTTP API: ``POST /v1/messages`` and ``/v1/messages/count_tokens``.

Claude Code always calls ``/v1/messages?beta=true`` (the query string is not part of an ASGI
path, so both land here) and falls back to the same body without streaming after any mid-stream
failure, so non-streaming requests get the same preparation as streaming ones.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping
from typing import Any

import orjson
from pydantic import BaseModel, ValidationError

from aiostream_synth._dialects.anthropic.embedded import ANTHROPIC_EMBEDDED, AnthropicEmbedded
from aiostream_synth._dialects.anthropic.errors import anthropic_error, new_request_id
from aiostream_synth._dialects.anthropic.options import AnthropicOptions
from aiostream_synth._dialects.anthropic.sanitize import (
    request_block_types,
    sanitize_anthropic_body,
    validate_anthropic_params,
)
from aiostream_synth._dialects.anthropic.stream import AnthropicDialect
from aiostream_synth._dialects.anthropic.synthesis import known_block_types
from aiostream_synth._dialects.base import (
    DialectSettings,
    ErrorResponse,
    LocalRoute,
    Outcome,
    RequestTarget,
)
from aiostream_synth._dialects.prepared import PreparedRequest, validation_error
from aiostream_synth._params.models import anthropic_params, params_dict
from aiostream_synth._params.removals import Removals
from aiostream_synth._params.sdks import sdk_installed
from aiostream_synth._wire.errors import RequestError

__all__ = ["ANTHROPIC", "ANTHROPIC_VERSION", "estimate_input_tokens"]

#: The API version an upstream call names when the client named none.
ANTHROPIC_VERSION = "2023-06-01"

_NOT_IDENTIFYING = ("stream", "max_tokens")
_DEFAULTS = AnthropicOptions()
LOG = logging.getLogger("aiostream_synth.dialects")
#: Why a Messages request is refused where the anthropic SDK (the ``[anthropic]`` extra) is not
#: installed: the dialect's request rules and block types are built from its types.
_NO_SDK = (
    "the Anthropic Messages dialect is not available here: it needs the anthropic SDK "
    "(pip install 'aiostream-synth[anthropic]')"
)


def estimate_input_tokens(body: dict[str, Any]) -> dict[str, Any]:
    """``count_tokens``: about one token per four characters of what the model would read
    (system, messages, tools). A backend without a tokenizer endpoint answers nothing better;
    Claude Code uses the number for its context estimate only."""
    text = orjson.dumps([body.get("system"), body.get("messages"), body.get("tools")])
    return {"input_tokens": max(1, math.ceil(len(text) / 4))}


class AnthropicSpec:
    """See :class:`aiostream_synth._dialects.base.DialectSpec`."""

    name: str = "anthropic"
    #: No stored answers in this dialect (the API has no retrieval).
    storage: None = None
    paths: tuple[str, ...] = ("/v1/messages", "/messages")
    upstream_path: str = "/messages"
    options_type: type[AnthropicOptions] = AnthropicOptions
    embedded: AnthropicEmbedded = ANTHROPIC_EMBEDDED
    local_routes: Mapping[str, LocalRoute] = {
        "/v1/messages/count_tokens": estimate_input_tokens,
        "/messages/count_tokens": estimate_input_tokens,
    }

    def wants_stream(self, body: Any) -> bool:
        return isinstance(body, dict) and body.get("stream") is True

    def prepare(
        self,
        body: dict[str, Any],
        *,
        options: Any,
        params_model: type[BaseModel] | None,
        bridged: bool = False,
    ) -> PreparedRequest:
        if not sdk_installed("anthropic"):
            raise RequestError(501, _NO_SDK, type="api_error")
        removals = Removals()
        own: AnthropicOptions = options or _DEFAULTS
        cleaned = sanitize_anthropic_body(
            body,
            system_messages=own.system_messages,
            allow_unchecked_auto_mode=own.allow_unchecked_auto_mode,
            params_model=params_model,
            removals=removals,
        )
        try:
            model = validate_anthropic_params(cleaned, params_model=params_model, removals=removals)
        except ValidationError as exc:
            raise validation_error(cleaned, exc, removals) from None
        return PreparedRequest(
            dialect="anthropic",
            stream=self.wants_stream(body),
            params=params_dict(model),
            echo={"model": body.get("model")},
            removals=removals,
            body=body,
        )

    def stream_dialect(
        self, prepared: PreparedRequest, settings: DialectSettings
    ) -> AnthropicDialect:
        model = prepared.echo.get("model")
        options = settings.dialect_options.get(self.name) or _DEFAULTS
        return AnthropicDialect(
            model=model if isinstance(model, str) else None,
            event_keepalive_s=options.event_keepalive_s,
            unknown_blocks=options.unknown_blocks,
        )

    def from_target(self, body: dict[str, Any], target: RequestTarget) -> dict[str, Any]:
        """The body as it is (Claude Code's ``?beta=true`` changes nothing here)."""
        return body

    def upstream_headers(
        self,
        client_headers: Mapping[str, str],
        api_key: str,
        *,
        forward_authorization: bool,
    ) -> Mapping[str, str | None]:
        """The key as ``x-api-key`` (the client's own when forwarding), the client's
        ``anthropic-version`` (else :data:`ANTHROPIC_VERSION`) and ``anthropic-beta`` (it names
        the features the body uses); no bearer token unless the client sent one to forward."""
        forward = forward_authorization
        headers: dict[str, str | None] = {
            "x-api-key": client_headers["x-api-key"]
            if forward and "x-api-key" in client_headers
            else api_key,
            "anthropic-version": client_headers.get("anthropic-version", ANTHROPIC_VERSION),
            "Authorization": client_headers["authorization"]
            if forward and "authorization" in client_headers
            else None,
        }
        if "anthropic-beta" in client_headers:
            headers["anthropic-beta"] = client_headers["anthropic-beta"]
        return headers

    def error_response(
        self,
        status_code: int,
        message: str,
        *,
        code: str | None = None,
        param: str | None = None,
        type: str | None = None,
    ) -> ErrorResponse:
        return anthropic_error(status_code, message, code=code, type=type)

    def coalesce_key(self, body: dict[str, Any]) -> dict[str, Any]:
        """Claude Code's non-streaming fallback repeats the body with ``stream: false`` and
        ``max_tokens`` capped at 64000: neither identifies the generation."""
        return {k: v for k, v in body.items() if k not in _NOT_IDENTIFYING}

    def warm_up(self) -> None:
        """The params model and the SDK's block types (about a second, first use only); without
        the anthropic SDK, one WARNING that Messages requests will be refused (501)."""
        if not sdk_installed("anthropic"):
            LOG.warning("%s: /v1/messages answers 501", _NO_SDK)
            return
        anthropic_params()
        request_block_types()
        known_block_types()

    def response_headers(self) -> Mapping[str, str]:
        """A ``request-id`` on every answer (both SDKs expose it as ``request_id``)."""
        return {"request-id": new_request_id()}

    def outcome(self, last: bytes) -> Outcome:
        if not last.endswith(b'{"type":"message_stop"}\n\n'):
            return "failed"
        return "incomplete" if b'"stop_reason":"max_tokens"' in last else "completed"


ANTHROPIC = AnthropicSpec()
