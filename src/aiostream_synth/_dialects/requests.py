"""Request preparation for any dialect: bytes (or a parsed body) in, a prepared request out.

The dialect's spec does the work (:meth:`~aiostream_synth._dialects.base.DialectSpec.prepare`);
this is the one entry point the HTTP adapters and library users call.
"""

from __future__ import annotations

import warnings
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

#: The deprecated per-dialect keyword arguments, and the dialect each applied to.
_LEGACY_PARAMS_MODEL = {"chat_params_model": "chat", "responses_params_model": "responses"}


def prepare_request(
    dialect: Dialect,
    raw: bytes | dict[str, Any],
    *,
    options: Any = None,
    sanitize: SanitizeOptions | None = None,
    params_model: type[BaseModel] | None = None,
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
    :func:`validate_streaming_responses_params` default. ``params_model`` replaces the
    dialect's strict params model (a subclass of it, say, that knows a field ours do not).
    ``chat_params_model`` / ``responses_params_model`` are deprecated for ``params_model``:
    each still applies, to its own dialect only, for one release, with a
    ``DeprecationWarning``.

    ``upstream`` names the dialect the backend speaks when it is another one: the request is
    then also converted for it (``prepared.bridged``, per ``bridge`` options; raises
    :class:`~aiostream_synth.errors.BridgeError` for what that upstream cannot be asked).
    """
    spec = spec_for(dialect)
    body = parse_json_body(raw) if isinstance(raw, bytes) else raw
    model = params_model
    legacy = {
        "chat_params_model": chat_params_model,
        "responses_params_model": responses_params_model,
    }
    for keyword, legacy_model in legacy.items():
        if legacy_model is None:
            continue
        warnings.warn(
            f"prepare_request({keyword}=...) is deprecated and goes in the next release: "
            "pass params_model=..., which applies to the request's own dialect",
            DeprecationWarning,
            stacklevel=2,
        )
        if model is None and _LEGACY_PARAMS_MODEL[keyword] == spec.name:
            model = legacy_model
    if sanitize is not None:
        given = {} if options is None else {spec.name: options}
        options = fold_legacy_sanitize(given, sanitize, "prepare_request", 3).get(spec.name)
    if upstream is not None and upstream != spec.name:
        return prepare_bridged(
            spec,
            body,
            upstream,
            dialect_options=options,
            options=bridge or BridgeOptions(),
            params_model=model,
        )
    return spec.prepare(body, options=options, params_model=model)
