"""Request preparation for any dialect: bytes (or a parsed body) in, a prepared request out.

The dialect's spec does the work (:meth:`~aiostream_synth._dialects.base.DialectSpec.prepare`);
this is the one entry point the HTTP adapters and library users call.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from aiostream_synth._dialects.bridges.options import BridgeOptions
from aiostream_synth._dialects.bridges.registry import prepare_bridged
from aiostream_synth._dialects.legacy_settings import fold_legacy_sanitize
from aiostream_synth._dialects.prepared import (
    DEFAULT_MAX_BODY_BYTES,
    Dialect,
    PreparedRequest,
    SanitizeOptions,
    parse_json_body,
)
from aiostream_synth._dialects.registry import spec_for

__all__ = [
    "DEFAULT_MAX_BODY_BYTES",
    "PreparedRequest",
    "SanitizeOptions",
    "parse_json_body",
    "prepare_request",
]

_PARAMS_MODEL_OPTION = {"chat": "chat_params_model", "responses": "responses_params_model"}


def prepare_request(
    dialect: Dialect,
    raw: bytes | dict[str, Any],
    *,
    options: Any = None,
    sanitize: SanitizeOptions | None = None,
    chat_params_model: type[BaseModel] | None = None,
    responses_params_model: type[BaseModel] | None = None,
    upstream: Dialect | None = None,
    bridge: BridgeOptions | None = None,
) -> PreparedRequest:
    """Parse, decide streaming, sanitize and validate one request (raises
    :class:`~aiostream_synth.RequestError`).

    ``options``: the dialect's own options (``ResponsesOptions(drop_hosted_tools=True)``,
    ``AnthropicOptions(system_messages="forward")``; :mod:`aiostream_synth.dialects`), None
    for their defaults. ``sanitize`` (a ``SanitizeOptions``) is deprecated: it still works for
    one release, with a ``DeprecationWarning``.

    A Responses body without ``input`` is forwarded (the upstream may answer it from
    ``previous_response_id`` or ``prompt``), unlike the library's
    :func:`validate_streaming_responses_params` default. ``*_params_model`` replace our strict
    params models for that dialect.

    ``upstream`` names the dialect the backend speaks when it is another one: the request is
    then also converted for it (``prepared.bridged``, per ``bridge`` options; raises
    :class:`~aiostream_synth.errors.BridgeError` for what that upstream cannot be asked).
    """
    spec = spec_for(dialect)
    body = parse_json_body(raw) if isinstance(raw, bytes) else raw
    models = {
        "chat_params_model": chat_params_model,
        "responses_params_model": responses_params_model,
    }
    model = models.get(_PARAMS_MODEL_OPTION.get(spec.name, ""))
    if sanitize is not None:
        given = {} if options is None else {spec.name: options}
        options = fold_legacy_sanitize(given, sanitize, "prepare_request", 3).get(spec.name)
    if upstream is not None and upstream != spec.name:
        return prepare_bridged(
            spec, body, upstream, dialect_options=options, options=bridge or BridgeOptions()
        )
    return spec.prepare(body, options=options, params_model=model)
