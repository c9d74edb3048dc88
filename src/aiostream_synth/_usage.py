"""Usage objects on the wire: never a ``null`` token counter (decision P5).

A Codex turn fails to parse ``response.completed`` when a single counter is ``null`` and then
re-runs the whole generation, so every synthesizer passes usage through here.
"""

from __future__ import annotations

from typing import Any

__all__ = ["wire_chat_usage", "wire_responses_usage"]

# (details object, counter) pairs the Responses reference always materializes (B-R37).
_RESPONSES_REQUIRED_DETAILS = (
    ("input_tokens_details", "cached_tokens"),
    ("output_tokens_details", "reasoning_tokens"),
)


def _zero_null_counters(obj: dict[str, Any]) -> dict[str, Any]:
    """Copy of ``obj`` with every present ``null`` ``*_tokens`` counter set to 0, recursively.

    Returns ``obj`` itself when nothing changes; absent counters are never inserted.
    """
    changed: dict[str, Any] | None = None
    for key, value in obj.items():
        if value is None:
            if not key.endswith("_tokens"):
                continue
            new: Any = 0
        elif isinstance(value, dict):
            new = _zero_null_counters(value)
            if new is value:
                continue
        else:
            continue
        if changed is None:
            changed = dict(obj)
        changed[key] = new
    return obj if changed is None else changed


def wire_chat_usage(usage: Any) -> Any:
    """Chat usage with present ``null`` counters set to 0; non-dicts are returned unchanged."""
    if not isinstance(usage, dict):
        return usage
    return _zero_null_counters(usage)


def wire_responses_usage(usage: Any) -> Any:
    """Responses usage as the wire schema types it (B-R36..B-R38 plus P5).

    Missing or ``null`` ``cached_tokens`` / ``reasoning_tokens`` (and their details objects)
    become 0; any other counter that is present and ``null`` (``cache_write_tokens``...) becomes
    0 too. Non-dict usage is returned unchanged; the argument is never mutated.
    """
    if not isinstance(usage, dict):
        return usage
    out = _zero_null_counters(usage)
    if out is usage:
        out = dict(usage)
    for details_key, counter in _RESPONSES_REQUIRED_DETAILS:
        details = out.get(details_key)
        if details is None:
            out[details_key] = {counter: 0}
        elif isinstance(details, dict) and counter not in details:
            out[details_key] = {**details, counter: 0}
    return out
