"""Responses as an HTTP API: ``POST /v1/responses`` (the dialect's spec)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ValidationError

from aiostream_synth._dialects.base import DialectSettings, Outcome
from aiostream_synth._dialects.openai_errors import OpenAISpecBase
from aiostream_synth._dialects.prepared import PreparedRequest, validation_error
from aiostream_synth._dialects.responses.embedded import RESPONSES_EMBEDDED, ResponsesEmbedded
from aiostream_synth._dialects.responses.namespaces import namespace_map
from aiostream_synth._dialects.responses.options import ResponsesOptions
from aiostream_synth._dialects.responses.sanitize import (
    missing_key,
    sanitize_streaming_responses_body,
    validate_streaming_responses_params,
)
from aiostream_synth._dialects.responses.stored import RESPONSES_STORAGE, ResponsesStorage
from aiostream_synth._dialects.responses.stream import ResponsesDialect
from aiostream_synth._params.models import ResponsesParams, params_dict
from aiostream_synth._params.removals import Removals
from aiostream_synth._wire.errors import RequestError

__all__ = ["RESPONSES"]

_DEFAULTS = ResponsesOptions()

#: Request fields echoed into the response skeleton sent with keepalive events.
#: Small fields only: every keepalive repeats them (Codex's tool list alone is ~30 KB).
_ECHO = (
    "model",
    "tool_choice",
    "parallel_tool_calls",
    "temperature",
    "top_p",
    "max_output_tokens",
    "previous_response_id",
    "reasoning",
    "truncation",
    "store",
    "service_tier",
    "prompt_cache_key",
)


class ResponsesSpec(OpenAISpecBase):
    """See :class:`aiostream_synth._dialects.base.DialectSpec`."""

    not_identifying = ("stream", "stream_options", "max_output_tokens")

    name: str = "responses"
    storage: ResponsesStorage | None = RESPONSES_STORAGE
    options_type: type[ResponsesOptions] = ResponsesOptions
    embedded: ResponsesEmbedded = RESPONSES_EMBEDDED
    paths: tuple[str, ...] = ("/v1/responses", "/responses")
    upstream_path: str = "/responses"

    def wants_stream(self, body: Any) -> bool:
        """Any truthy ``stream``, as the reference dispatch does."""
        return isinstance(body, dict) and bool(body.get("stream"))

    def prepare(
        self,
        body: dict[str, Any],
        *,
        options: Any,
        params_model: type[BaseModel] | None,
        bridged: bool = False,
    ) -> PreparedRequest:
        """A body without ``input`` is forwarded (the upstream may answer it from
        ``previous_response_id`` or ``prompt``), unlike the library's validator default. A
        streaming body without ``model`` is a 400 naming it, as in the other dialects, unless it
        names a stored ``prompt`` (which may carry the model)."""
        background = body.get("background") is True
        if not self.wants_stream(body) and not background:
            return PreparedRequest(dialect="responses", stream=False, params=body, body=body)
        removals = Removals()
        if background:
            # Served by the proxy's store (decision P12): the backend makes one complete answer.
            if body.get("store") is False:
                raise RequestError(
                    400,
                    "background mode needs the response stored (store: true, the default): "
                    "it is retrieved from the store.",
                    param="background",
                    code="invalid_value",
                )
            removals.add(("background",), "served by the proxy's store", benign=True)
            body = {key: value for key, value in body.items() if key != "background"}
        extra: dict[str, Any] = {} if params_model is None else {"params_model": params_model}
        own: ResponsesOptions = options or _DEFAULTS
        cleaned, ns_map = sanitize_streaming_responses_body(
            body,
            own.drop_custom_tools,
            own.drop_hosted_tools,
            # A bridge expresses carrier tools whole, custom ones included.
            own.hoist_carrier_custom_tools or bridged,
            removals=removals,
            **extra,
        )
        try:
            model = validate_streaming_responses_params(
                cleaned, require_input=False, removals=removals, **extra
            )
            if "model" not in cleaned and "prompt" not in cleaned:
                raise missing_key(params_model or ResponsesParams, cleaned, "model")
        except ValidationError as exc:
            raise validation_error(cleaned, exc, removals) from None
        return PreparedRequest(
            dialect="responses",
            stream=self.wants_stream(body) or not background,
            background=background,
            params=params_dict(model),
            state=ns_map,
            echo={key: body[key] for key in _ECHO if key in body},
            removals=removals,
            body=body,
        )

    def stream_dialect(
        self, prepared: PreparedRequest, settings: DialectSettings
    ) -> ResponsesDialect:
        options = settings.dialect_options.get(self.name) or _DEFAULTS
        return ResponsesDialect(
            ns_map=namespace_map(prepared),
            fidelity=options.events,
            base=prepared.echo,
            keepalive=options.keepalive,
        )

    def outcome(self, last: bytes) -> Outcome:
        cut = last.rfind(b"\n\n", 0, -2)  # the write's last frame names the outcome
        final = last if cut < 0 else last[cut + 2 :]
        if final.startswith(b"event: response.completed"):
            return "completed"
        if final.startswith(b"event: response.incomplete"):
            return "incomplete"
        return "failed"


RESPONSES = ResponsesSpec()
