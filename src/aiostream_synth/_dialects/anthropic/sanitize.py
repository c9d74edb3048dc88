"""Anthropic Messages, request side: a Claude Code or SDK body onto the strict params shape.

A streaming and a non-streaming Messages request differ only in ``stream`` (anthropic.md §1.3),
so both get the same preparation:

1. ``stream`` is dropped;
2. what a proxy cannot honour is refused with a 400 before anything is sent: ``mcp_servers``
   (we cannot run remote MCP servers, and pruning would silently remove tools the user asked
   for) and ``safeguards`` (Claude Code's auto-mode classifier request; unless the operator
   opts out with ``allow_unchecked_auto_mode``);
3. ``role: "system"`` entries inside ``messages`` (Claude Code sends one every turn) are
   *translated* by default: their text is folded into the user message they follow (or, at the
   start, the one that follows them) as leading ``<system-reminder>`` text blocks, exactly what
   Claude Code's own fallback does (a per-turn ``output_config`` on such an entry becomes the
   request's own); ``"forward"`` leaves them, ``"reject"`` answers 400 in the wording Claude Code
   recognizes (it then resends without them);
4. content blocks and tools of a ``type`` the installed SDK does not know are dropped and
   recorded; everything else follows decision P10 (unknown keys pruned, a missing key no error,
   a wrong value a 400 naming its path).
"""

from __future__ import annotations

import logging
import types
import typing
from functools import cache
from typing import Any, Literal

import typing_extensions
from pydantic import BaseModel

from aiostream_synth._params.models import anthropic_params, is_mirror
from aiostream_synth._params.removals import Removals
from aiostream_synth._params.validation import drop_unknown_kinds, validate_params
from aiostream_synth._params.view import attach_views
from aiostream_synth._wire.errors import RequestError

__all__ = [
    "SystemMessages",
    "sanitize_anthropic_body",
    "validate_anthropic_params",
]

LOG = logging.getLogger("aiostream_synth.anthropic")

SystemMessages = Literal["translate", "forward", "reject"]

_REMINDER = "<system-reminder>\n{}\n</system-reminder>"


def _type_literals(tp: Any) -> set[str]:
    """Every literal ``type`` of the object arms of ``tp`` (unions and annotations unwrapped,
    TypedDicts and models alike)."""
    origin = typing.get_origin(tp)
    if origin is typing.Annotated:
        return _type_literals(typing.get_args(tp)[0])
    if origin in (typing.Union, types.UnionType):
        return set().union(*(_type_literals(arm) for arm in typing.get_args(tp)))
    hint: Any
    if isinstance(tp, type) and issubclass(tp, BaseModel):
        hint = tp.model_fields["type"].annotation if "type" in tp.model_fields else None
    elif isinstance(tp, type):
        hint = typing_extensions.get_type_hints(tp).get("type")
    else:
        return set()
    while typing.get_origin(hint) in (typing_extensions.Required, typing_extensions.NotRequired):
        hint = typing.get_args(hint)[0]
    return {v for v in typing.get_args(hint) if isinstance(v, str)}


@cache
def request_block_types() -> frozenset[str]:
    """The content block types a request may carry, per the installed SDK (read on first use:
    importing the anthropic SDK's types costs most of a second)."""
    from anthropic.types.beta import BetaContentBlockParam

    return frozenset(_type_literals(BetaContentBlockParam))


def _refuse(message: str, param: str) -> RequestError:
    return RequestError(400, message, param=param, code="invalid_request_error")


def _reminders(content: Any, where: int, removals: Removals) -> list[dict[str, Any]] | None:
    """A system message's content as ``<system-reminder>`` text blocks, one per section; None
    when the content is malformed (left in place for validation to judge)."""
    if isinstance(content, str):
        return [{"type": "text", "text": _REMINDER.format(content)}] if content else []
    if not isinstance(content, list):
        return None
    blocks = []
    for k, block in enumerate(content):
        if not isinstance(block, dict):
            return None
        if block.get("type") == "text" and isinstance(block.get("text"), str):
            blocks.append({"type": "text", "text": _REMINDER.format(block["text"])})
        else:
            kind = block.get("type")
            removals.add(("messages", where, "content", k), f"{kind!r} block of a system message")
    return blocks


def _as_blocks(content: Any) -> list[Any]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def _fold_system_messages(
    messages: list[Any], removals: Removals, directives: dict[str, Any]
) -> tuple[list[Any], list[int]]:
    """Messages with every ``role: "system"`` entry folded into a user message (see the module
    docstring), and where each kept message was in the client's list. A system message's
    ``output_config`` (the per-turn effort of Claude Code's per-turn-control beta) is collected
    in ``directives``: it applies to this turn, so it becomes the request's own."""
    out: list[Any] = []
    origins: list[int] = []
    pending: list[dict[str, Any]] = []  # reminders before the first user message
    for index, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role == "system":
            blocks = _reminders(message.get("content"), index, removals)
            if blocks is not None:
                if isinstance(message.get("output_config"), dict):
                    directives.update(message["output_config"])
                for key in sorted(set(message) - {"role", "content", "output_config"}):
                    removals.add(("messages", index, key), "system message directive", benign=True)
                target = next((i for i in range(len(out) - 1, -1, -1) if _is_user(out[i])), None)
                if target is None:
                    pending.extend(blocks)
                elif blocks:
                    user = out[target]
                    out[target] = {**user, "content": [*blocks, *_as_blocks(user["content"])]}
                continue
        if pending and _is_user(message):
            message = {**message, "content": [*pending, *_as_blocks(message["content"])]}
            pending = []
        out.append(message)
        origins.append(index)
    if pending:  # system text and no user message at all: it becomes one
        out.append({"role": "user", "content": pending})
        origins.append(len(messages) - 1)
    return out, origins


def _is_user(message: Any) -> bool:
    return (
        isinstance(message, dict)
        and message.get("role") == "user"
        and isinstance(message.get("content"), (str, list))
    )


def _drop_unknown_blocks(messages: list[Any], origins: list[int], removals: Removals) -> list[Any]:
    out = messages
    known = request_block_types()
    for i, message in enumerate(messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        kept = []
        for k, block in enumerate(content):
            kind = block.get("type") if isinstance(block, dict) else None
            if isinstance(kind, str) and kind not in known:
                removals.add(("messages", origins[i], "content", k), f"unknown block type {kind!r}")
                continue
            kept.append(block)
        if len(kept) != len(content):
            if out is messages:
                out = list(messages)
            out[i] = {**message, "content": kept}
    return out


def sanitize_anthropic_body(
    body: dict[str, Any],
    *,
    system_messages: SystemMessages = "translate",
    allow_unchecked_auto_mode: bool = False,
    params_model: type[BaseModel] | None = None,
    removals: Removals | None = None,
) -> dict[str, Any]:
    """A Messages request (streaming or not) onto the non-streaming params shape (see the
    module docstring). Raises :class:`~aiostream_synth.RequestError` (400) for what a proxy
    cannot honour. The input is never mutated."""
    report = Removals() if removals is None else removals
    model = params_model or anthropic_params()
    if body.get("mcp_servers"):
        raise _refuse(
            "mcp_servers: remote MCP servers are not supported by this proxy; "
            "run the MCP servers in the client",
            "mcp_servers",
        )
    cleaned = {key: value for key, value in body.items() if key != "stream"}
    if "safeguards" in cleaned:
        if not allow_unchecked_auto_mode:
            raise _refuse(
                "safeguards: auto-mode safeguards are not supported by this proxy",
                "safeguards",
            )
        del cleaned["safeguards"]
        report.add(("safeguards",), "auto-mode safeguards (allow_unchecked_auto_mode)")
    messages = cleaned.get("messages")
    if isinstance(messages, list):
        if system_messages == "reject":
            for index, message in enumerate(messages):
                if isinstance(message, dict) and message.get("role") == "system":
                    raise _refuse(
                        "messages: role 'system' is not supported inside messages; "
                        "use the top-level system parameter",
                        f"messages[{index}]",
                    )
            folded, origins = messages, list(range(len(messages)))
        elif system_messages == "translate":
            directives: dict[str, Any] = {}
            folded, origins = _fold_system_messages(messages, report, directives)
            if directives:
                own = cleaned.get("output_config")
                cleaned["output_config"] = {**(own if isinstance(own, dict) else {}), **directives}
        else:
            folded, origins = messages, list(range(len(messages)))
        cleaned["messages"] = _drop_unknown_blocks(folded, origins, report)
        report.origins["messages"] = list(origins)
    tools = cleaned.get("tools")
    if isinstance(tools, list):
        located: list[tuple[Any, tuple[str | int, ...]]] = [
            (tool, ("tools", i)) for i, tool in enumerate(tools)
        ]
        kept = drop_unknown_kinds(model, "tools", located, report, "tool")
        if len(kept) != len(tools):
            cleaned["tools"] = [tool for tool, _ in kept]
            report.origins["tools"] = [path[1] for _, path in kept]  # type: ignore[misc]
    if removals is None:
        report.log(LOG, "anthropic request")
    return cleaned


def validate_anthropic_params(
    body: dict[str, Any],
    *,
    params_model: type[BaseModel] | None = None,
    removals: Removals | None = None,
) -> BaseModel:
    """Validate a sanitized Messages body (decision P10, as for the OpenAI dialects); with our
    params model, object fields give typed attribute access."""
    report = Removals() if removals is None else removals
    model = validate_params(
        params_model or anthropic_params(), body, report, member_fields=("messages", "tools")
    )
    if removals is None:
        report.log(LOG, "anthropic request")
    if is_mirror(type(model)):
        attach_views(model)
    return model
