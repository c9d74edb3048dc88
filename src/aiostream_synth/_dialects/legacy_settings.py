"""The built-in dialects' options as ``StreamSettings`` took them before each dialect owned its
own (``StreamSettings(responses_events="minimal")``, ``sanitize=SanitizeOptions(...)``, and
``prepare_request(sanitize=...)``): accepted for one release, with a ``DeprecationWarning``
naming the replacement."""

from __future__ import annotations

import dataclasses
import enum
import warnings
from collections.abc import Mapping
from typing import Any

from aiostream_synth._dialects.names import builtin_options
from aiostream_synth._dialects.prepared import SanitizeOptions

__all__ = [
    "LEGACY_SANITIZE",
    "LEGACY_SETTINGS",
    "UNSET",
    "Unset",
    "fold_legacy_sanitize",
    "fold_legacy_settings",
]


class Unset(enum.Enum):
    """A deprecated setting that was not given."""

    UNSET = "unset"


UNSET = Unset.UNSET

#: ``{old StreamSettings field: (dialect, its option)}``.
LEGACY_SETTINGS: dict[str, tuple[str, str]] = {
    "responses_events": ("responses", "events"),
    "responses_keepalive": ("responses", "keepalive"),
    "chat_keepalive": ("chat", "keepalive"),
    "emit_reasoning_alias": ("chat", "emit_reasoning_alias"),
    "anthropic_event_keepalive_s": ("anthropic", "event_keepalive_s"),
    "anthropic_unknown_blocks": ("anthropic", "unknown_blocks"),
}

#: ``{SanitizeOptions field: (dialect, its option)}``.
LEGACY_SANITIZE: dict[str, tuple[str, str]] = {
    "drop_custom_tools": ("responses", "drop_custom_tools"),
    "drop_hosted_tools": ("responses", "drop_hosted_tools"),
    "hoist_carrier_custom_tools": ("responses", "hoist_carrier_custom_tools"),
    "anthropic_system_messages": ("anthropic", "system_messages"),
    "allow_unchecked_auto_mode": ("anthropic", "allow_unchecked_auto_mode"),
}


def fold_legacy_sanitize(
    dialect_options: Mapping[str, Any], sanitize: SanitizeOptions, where: str, stacklevel: int
) -> dict[str, Any]:
    """``dialect_options`` with what ``sanitize`` sets (its fields that differ from their
    defaults) applied on top, one ``DeprecationWarning`` (``where`` names the call)."""
    warnings.warn(
        f"{where}(sanitize=SanitizeOptions(...)) is deprecated and goes in the next release: "
        "its switches are the dialects' own options, in dialect_options "
        "(ResponsesOptions(drop_hosted_tools=...), AnthropicOptions(system_messages=...); "
        "aiostream_synth.dialects)",
        DeprecationWarning,
        stacklevel=stacklevel,
    )
    folded = dict(dialect_options)
    kinds = builtin_options()
    defaults = SanitizeOptions()
    for name, (dialect, option) in LEGACY_SANITIZE.items():
        value = getattr(sanitize, name)
        if value != getattr(defaults, name):
            current = folded.get(dialect) or kinds[dialect]()
            folded[dialect] = dataclasses.replace(current, **{option: value})
    return folded


def fold_legacy_settings(
    dialect_options: Mapping[str, Any], given: Mapping[str, Any]
) -> dict[str, Any]:
    """``dialect_options`` with the old fields ``given`` (those not :data:`UNSET`) applied on
    top, one ``DeprecationWarning`` naming each replacement."""
    folded = dict(dialect_options)
    kinds = builtin_options()
    for old, value in given.items():
        if value is UNSET:
            continue
        if old == "sanitize":
            folded = fold_legacy_sanitize(folded, value, "StreamSettings", stacklevel=5)
            continue
        dialect, option = LEGACY_SETTINGS[old]
        kind = kinds[dialect]
        warnings.warn(
            f"StreamSettings({old}=...) is deprecated and goes in the next release: use "
            f"dialect_options={{{dialect!r}: {kind.__name__}({option}=...)}} "
            "(aiostream_synth.dialects)",
            DeprecationWarning,
            stacklevel=4,
        )
        current = folded.get(dialect) or kind()
        folded[dialect] = dataclasses.replace(current, **{option: value})
    return folded
