"""Our strict non-streaming params models for every dialect (decision P3).

``ChatCompletionParams`` and ``ResponsesParams`` are pydantic models generated from the
installed openai SDK's ``CompletionCreateParamsNonStreaming`` / ``ResponseCreateParamsNonStreaming``
(via :mod:`._strict_types`): the same top-level fields, unknown keys forbidden at every level.
Their field sets decide what the sanitizers keep. Callers may pass their own model instead; the
per-item validators (one tool spec, one input item) are then derived from that model's fields.
"""

from __future__ import annotations

from functools import cache
from typing import Any

import typing_extensions
from openai.types.chat.completion_create_params import CompletionCreateParamsNonStreaming
from openai.types.responses.response_create_params import ResponseCreateParamsNonStreaming
from pydantic import BaseModel, ConfigDict, TypeAdapter, create_model

from aiostream_synth._params.sdks import require_sdk, sdk_is_older
from aiostream_synth._params.strict import list_item_type, strict_type

__all__ = [
    "CHAT_PROVIDER_EXTENSION_FIELDS",
    "ChatCompletionParams",
    "ResponsesParams",
    "anthropic_params",
    "is_mirror",
    "item_adapter",
    "param_fields",
    "params_dict",
]

#: Provider extensions a strict non-streaming chat path may accept, never the streaming one.
CHAT_PROVIDER_EXTENSION_FIELDS = frozenset({"chat_template_kwargs", "thinking", "output_config"})


def _model_from_typeddict(name: str, source: Any, doc: str, sdk: str) -> type[BaseModel]:
    """A model whose top-level required fields are the SDK's and whose nested objects are
    the relaxed mirrors (decision P10: a missing nested key is never an error); an SDK older
    than the release our rules track gets open enumerations (:mod:`.sdks`)."""
    required = set(strict_type(source).__required_keys__)
    strict = strict_type(source, relaxed=True, open_values=sdk_is_older(sdk))
    hints = typing_extensions.get_type_hints(strict, include_extras=True)
    fields: dict[str, Any] = {}
    for key, hint in hints.items():
        inner = typing_extensions.get_args(hint)[0]
        fields[key] = (inner, ...) if key in required else (inner, None)
    model = create_model(
        name,
        __config__=ConfigDict(extra="forbid", strict=True, protected_namespaces=()),
        __doc__=doc,
        __module__="aiostream_synth.params",  # its public home
        **fields,
    )
    model.__aiostream_mirror__ = True
    return model  # type: ignore[no-any-return]


def is_mirror(model: type[BaseModel]) -> bool:
    """Whether ``model`` is one of our generated params models (not a caller's own)."""
    return getattr(model, "__aiostream_mirror__", False) is True


#: The strict non-streaming Chat Completions params model, mirrored from the installed openai
#: SDK's ``CompletionCreateParamsNonStreaming`` (unknown keys refused, every value checked).
ChatCompletionParams: type[BaseModel] = _model_from_typeddict(
    "ChatCompletionParams",
    CompletionCreateParamsNonStreaming,
    "Strict non-streaming Chat Completions create params, mirrored from the installed openai SDK.",
    "openai",
)
#: The strict non-streaming Responses params model, mirrored from the installed openai SDK's
#: ``ResponseCreateParamsNonStreaming``.
ResponsesParams: type[BaseModel] = _model_from_typeddict(
    "ResponsesParams",
    ResponseCreateParamsNonStreaming,
    "Strict non-streaming Responses create params, mirrored from the installed openai SDK.",
    "openai",
)


@cache
def anthropic_params() -> type[BaseModel]:
    """Strict non-streaming Messages create params, mirrored from the installed anthropic SDK's
    *beta* params (the superset Claude Code sends: ``context_management``, ``output_config``,
    ``thinking`` variants, ``role: "system"`` messages...). Built on first use: the beta types
    are large (about a second to build), and only Anthropic requests need them."""
    require_sdk("anthropic", "the Anthropic Messages dialect")
    from anthropic.types.beta.message_create_params import (
        MessageCreateParamsNonStreaming as AnthropicCreateParamsNonStreaming,
    )

    return _model_from_typeddict(
        "AnthropicParams",
        AnthropicCreateParamsNonStreaming,
        "Strict non-streaming Anthropic Messages create params, mirrored from the installed anthropic SDK.",
        "anthropic",
    )


@cache
def param_fields(model: type[BaseModel]) -> frozenset[str]:
    """Top-level field names (wire names) of a params model."""
    return frozenset((field.alias or name) for name, field in model.model_fields.items())


def _list_item(model: type[BaseModel], field: str) -> Any | None:
    info = model.model_fields.get(field)
    return None if info is None else list_item_type(info.annotation)


@cache
def item_adapter(model: type[BaseModel], field: str) -> TypeAdapter[Any] | None:
    """A validator for one element of the list-valued field ``field`` (``tools``, ``input``)."""
    item = _list_item(model, field)
    return None if item is None else TypeAdapter(item)


@cache
def list_adapter(model: type[BaseModel], field: str) -> TypeAdapter[Any] | None:
    """A validator for the whole list of ``field`` at once (one call on the happy path)."""
    item = _list_item(model, field)
    list_type: Any = list
    return None if item is None else TypeAdapter(list_type[item])


def params_dict(params: BaseModel) -> dict[str, Any]:
    """The validated params as the dict a backend is sent (the fields the request set).

    For our generated models every field value is already plain JSON data (TypedDicts validate
    to dicts), so the set fields are read directly; ``model_dump`` would walk and copy the whole
    40 KB of a Codex request again. Other models are dumped normally.
    """
    if is_mirror(type(params)):
        return {name: getattr(params, name) for name in params.model_fields_set}
    return params.model_dump(exclude_unset=True, by_alias=True)
