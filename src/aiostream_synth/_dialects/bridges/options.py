"""Bridge options and the backend profiles that preset them.

Every option has the default a Codex user on a generic open chat server wants; a profile
changes only what its backend is known to need (DeepSeek wants reasoning replayed on every
tool-call turn, with ``" "`` when none survived; Ollama and vLLM >= 0.16 read ``reasoning``;
OpenAI hides reasoning and takes ``max_completion_tokens`` and chat ``custom`` tools).
"""

from __future__ import annotations

import dataclasses
import typing
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

__all__ = ["BRIDGE_PROFILES", "BridgeOptions", "bridge_options", "parse_bridge_options"]

ReasoningField = Literal["reasoning_content", "reasoning", "both", "none"]


@dataclass(frozen=True, slots=True, kw_only=True)
class BridgeOptions:
    """How a request is converted for an upstream of another dialect."""

    #: The key replayed reasoning travels under on assistant chat messages.
    reasoning_out_field: ReasoningField = "reasoning_content"
    #: Sent on a tool-call assistant message whose reasoning did not survive (DeepSeek: ``" "``).
    reasoning_placeholder: str | None = None
    #: Where reasoning text goes in a Responses reasoning item (``summary`` is what Codex replays).
    reasoning_item_style: Literal["summary", "content", "both"] = "summary"
    #: ``<think>...</think>`` at the start of the content is reasoning (``leading``); also text
    #: before a lone ``</think>`` (``leading_or_openless``); or never (``off``).
    think_tags: Literal["leading", "leading_or_openless", "off"] = "leading"
    max_tokens_field: Literal["max_tokens", "max_completion_tokens"] = "max_tokens"
    #: The role of the leading instructions message.
    system_role: Literal["system", "developer"] = "system"
    #: System / developer messages after the conversation began: a ``user`` message in place,
    #: a ``system`` message in place, or appended to the leading one.
    mid_system_policy: Literal["user", "system", "hoist"] = "user"
    #: ``content`` of an assistant message that only calls tools (llama.cpp rejects ``null``).
    assistant_empty_content: Literal["", None] = ""
    #: A tool output whose call is not in the history: a user message quoting it, or dropped.
    orphan_output_policy: Literal["user_text", "drop"] = "user_text"
    #: The tool message synthesized for a call that has no output in the history.
    dangling_call_output: str = "[no output: the tool call was interrupted before it returned]"
    #: Images and files in tool outputs: a placeholder text, or a user message after the tools.
    tool_output_media: Literal["placeholder", "user_message"] = "placeholder"
    #: Replayed ``arguments`` that are not a JSON object: wrapped as ``{"_raw": ...}``, sent
    #: verbatim, or replaced by ``{}``.
    invalid_arguments: Literal["wrap", "verbatim", "empty"] = "wrap"
    #: Custom (free-form) tools: a function with one string parameter, chat ``custom`` tools
    #: (OpenAI), or dropped.
    custom_tool_strategy: Literal["function", "passthrough", "drop"] = "function"
    #: The single string parameter of a custom tool bridged to a function.
    custom_tool_param: str = "input"
    local_shell: Literal["function", "drop"] = "function"
    hosted_web_search: Literal["drop", "web_search_options"] = "drop"
    deferred_tools: Literal["include", "drop"] = "include"
    #: Rename tools whose name chat validators reject (``^[A-Za-z0-9_-]{1,64}$``).
    name_sanitize: bool = True
    #: ``reasoning.effort`` rewritten per upstream; a ``None`` value drops it.
    reasoning_effort_map: Mapping[str, str | None] = field(default_factory=dict)
    #: The upstream's model name for a client's.
    model_map: Mapping[str, str] = field(default_factory=dict)
    #: Client bookkeeping forwarded anyway (``prompt_cache_key``, ``user``, ``metadata``...).
    forward_fields: frozenset[str] = frozenset()
    #: Merged into every upstream body last (``{"thinking": {"type": "enabled"}}``...).
    upstream_extra_body: Mapping[str, Any] = field(default_factory=dict)
    #: ``finish_reason: length`` as ``incomplete`` (default) or ``completed`` (Codex fails a
    #: turn on ``response.incomplete``).
    length_status: Literal["incomplete", "completed"] = "incomplete"
    #: An answer that is only reasoning: as it is, or its reasoning also as the answer text.
    reasoning_only: Literal["as_is", "promote"] = "as_is"
    #: Missing usage estimated from characters (so Codex's auto-compaction still triggers).
    estimate_usage: bool = False

    def replace(self, **changes: Any) -> BridgeOptions:
        """A copy with ``changes`` (unknown names raise ``TypeError``)."""
        return dataclasses.replace(self, **changes)


#: ``--bridge-profile`` presets: the options each backend family needs.
BRIDGE_PROFILES: Mapping[str, Mapping[str, Any]] = {
    "generic": {},
    "llamacpp": {"system_role": "system", "mid_system_policy": "user"},
    "ollama": {"reasoning_out_field": "reasoning"},
    "vllm": {"reasoning_out_field": "reasoning"},
    "sglang": {"reasoning_out_field": "reasoning_content"},
    "deepseek": {
        "reasoning_out_field": "reasoning_content",
        "reasoning_placeholder": " ",
        "reasoning_effort_map": {
            "minimal": "high",
            "low": "high",
            "medium": "high",
            "xhigh": "max",
        },
    },
    "openrouter": {"reasoning_out_field": "reasoning"},
    "openai": {
        "reasoning_out_field": "none",
        "max_tokens_field": "max_completion_tokens",
        "custom_tool_strategy": "passthrough",
        "system_role": "developer",
    },
}


def bridge_options(profile: str = "generic", **overrides: Any) -> BridgeOptions:
    """The options of ``profile`` with ``overrides`` on top (``ValueError`` for an unknown
    profile, ``TypeError`` for an unknown option)."""
    try:
        preset = BRIDGE_PROFILES[profile]
    except KeyError:
        known = ", ".join(BRIDGE_PROFILES)
        raise ValueError(f"unknown bridge profile {profile!r}; expected one of {known}") from None
    return BridgeOptions(**{**preset, **overrides})


def _check(name: str, value: Any, hint: Any) -> Any:
    """``value`` as option ``name`` takes it, or ``ValueError`` naming the option."""
    choices = typing.get_args(hint) if typing.get_origin(hint) is Literal else None
    if choices is not None:
        if value not in choices:
            allowed = ", ".join(repr(c) for c in choices)
            raise ValueError(f"bridge option {name}: {value!r} is not one of {allowed}")
        return value
    if name == "forward_fields":
        if not isinstance(value, (list, tuple, set, frozenset)) or not all(
            isinstance(v, str) for v in value
        ):
            raise ValueError(f"bridge option {name}: expected a list of field names")
        return frozenset(value)
    expected: tuple[type, ...] = {
        "reasoning_placeholder": (str, type(None)),
        "dangling_call_output": (str,),
        "custom_tool_param": (str,),
        "name_sanitize": (bool,),
        "estimate_usage": (bool,),
    }.get(name, (dict,))
    if not isinstance(value, expected):
        names = " or ".join("null" if t is type(None) else t.__name__ for t in expected)
        raise ValueError(f"bridge option {name}: expected {names}, got {value!r}")
    return value


def parse_bridge_options(
    profile: str = "generic", overrides: Mapping[str, Any] | None = None
) -> BridgeOptions:
    """Options from a profile and JSON-shaped overrides (a CLI or a config file's values),
    each checked: ``ValueError`` names the first option that is unknown or wrong."""
    hints = typing.get_type_hints(BridgeOptions)
    checked: dict[str, Any] = {}
    for name, value in (overrides or {}).items():
        if name not in hints:
            known = ", ".join(sorted(hints))
            raise ValueError(f"unknown bridge option {name!r}; expected one of {known}")
        checked[name] = _check(name, value, hints[name])
    return bridge_options(profile, **checked)
