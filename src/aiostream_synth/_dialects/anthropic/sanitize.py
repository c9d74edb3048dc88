"""Anthropic Messages, request side: a Claude Code or SDK body onto the strict params shape.

A streaming and a non-streaming Messages request differ only in ``stream``,
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
from dataclasses import dataclass
from functools import cache
from typing import Any, Literal

import typing_extensions
from pydantic import BaseModel

from aiostream_synth._params.models import anthropic_params, is_mirror
from aiostream_synth._params.removals import Removals
from aiostream_synth._params.sdks import require_sdk
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
    require_sdk("anthropic", "the Anthropic Messages dialect")
    from anthropic.types.beta import BetaContentBlockParam

    return frozenset(_type_literals(BetaContentBlockParam))


def _refuse(message: str, param: str) -> RequestError:
    return RequestError(400, message, param=param, code="invalid_request_error")


Path = tuple[str | int, ...]
#: Keys of a system message's text block that a reminder carries (its ``text``, as text).
_REMINDER_KEYS = frozenset({"type", "text"})


def _reminders(
    content: Any, where: int, removals: Removals
) -> list[tuple[dict[str, Any], Path]] | None:
    """A system message's content as ``<system-reminder>`` text blocks, one per section, each
    with the path of what it was made from; None when the content is malformed (left in place
    for validation to judge, as is a text block whose ``text`` is not a string)."""
    if isinstance(content, str):
        whole: Path = ("messages", where, "content")
        return [({"type": "text", "text": _REMINDER.format(content)}, whole)] if content else []
    if not isinstance(content, list):
        return None
    if any(
        not isinstance(block, dict)
        or (block.get("type") == "text" and not isinstance(block.get("text"), str))
        for block in content
    ):
        return None
    blocks = []
    for k, block in enumerate(content):
        path: Path = ("messages", where, "content", k)
        if block.get("type") == "text":
            blocks.append(({"type": "text", "text": _REMINDER.format(block["text"])}, path))
            for key in sorted(set(block) - _REMINDER_KEYS):
                removals.add((*path, key), "key of a system message's text block", benign=True)
        else:
            removals.add(path, f"{block.get('type')!r} block of a system message")
    return blocks


def _as_blocks(content: Any) -> list[Any]:
    return [{"type": "text", "text": content}] if isinstance(content, str) else list(content)


def _block_paths(index: int, content: Any) -> list[Path]:
    """Where each block of a client message's content is (a string content is one block)."""
    if isinstance(content, str):
        return [("messages", index, "content")]
    return [("messages", index, "content", k) for k in range(len(content))]


@dataclass(slots=True)
class _Folded:
    """Messages after folding, and where each one (and each block of a reshaped one) was."""

    messages: list[Any]
    origins: list[int]
    #: Per message: the client path of each content block, or None when its content is the
    #: client's own list, unchanged.
    blocks: list[list[Path] | None]


def _fold_system_messages(
    messages: list[Any], removals: Removals, directives: dict[str, tuple[Any, Path]]
) -> _Folded:
    """Messages with every ``role: "system"`` entry folded into a user message (see the module
    docstring). A system message's ``output_config`` (the per-turn effort of Claude Code's
    per-turn-control beta) is collected in ``directives``, each key with its path: it applies
    to this turn, so it becomes the request's own."""
    out = _Folded([], [], [])
    pending: list[tuple[dict[str, Any], Path]] = []  # reminders before the first user message
    for index, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role == "system":
            blocks = _reminders(message.get("content"), index, removals)
            if blocks is not None:
                config = message.get("output_config")
                if isinstance(config, dict):
                    for key, value in config.items():
                        directives[key] = (value, ("messages", index, "output_config", key))
                elif config is not None:  # it would vanish with the folded message
                    raise _refuse(
                        "output_config of a system message must be an object, "
                        f"not {type(config).__name__}",
                        f"messages[{index}].output_config",
                    )
                for key in sorted(set(message) - {"role", "content", "output_config"}):
                    removals.add(("messages", index, key), "system message directive", benign=True)
                target = next(
                    (i for i in range(len(out.messages) - 1, -1, -1) if _is_user(out.messages[i])),
                    None,
                )
                if target is None:
                    pending.extend(blocks)
                elif blocks:
                    user = out.messages[target]
                    own = out.blocks[target] or _block_paths(out.origins[target], user["content"])
                    out.messages[target] = {
                        **user,
                        "content": [*(b for b, _ in blocks), *_as_blocks(user["content"])],
                    }
                    out.blocks[target] = [*(p for _, p in blocks), *own]
                continue
        paths: list[Path] | None = None
        if pending and _is_user(message):
            paths = [*(p for _, p in pending), *_block_paths(index, message["content"])]
            message = {
                **message,
                "content": [*(b for b, _ in pending), *_as_blocks(message["content"])],
            }
            pending = []
        out.messages.append(message)
        out.origins.append(index)
        out.blocks.append(paths)
    if pending:  # system text and no user message at all: it becomes one
        out.messages.append({"role": "user", "content": [b for b, _ in pending]})
        out.origins.append(len(messages) - 1)
        out.blocks.append([p for _, p in pending])
    return out


def _is_user(message: Any) -> bool:
    return (
        isinstance(message, dict)
        and message.get("role") == "user"
        and isinstance(message.get("content"), (str, list))
    )


def _drop_unknown_blocks(folded: _Folded, removals: Removals) -> None:
    """Drop (and record, at the client's path) the content blocks of an unknown ``type``."""
    known = request_block_types()
    for i, message in enumerate(folded.messages):
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            continue
        if all(
            not isinstance(block, dict)
            or not isinstance(block.get("type"), str)
            or block["type"] in known
            for block in content
        ):
            continue  # the usual case: every block is of a known type
        paths = folded.blocks[i] or _block_paths(folded.origins[i], content)
        kept = []
        kept_paths = []
        for block, path in zip(content, paths, strict=True):
            kind = block.get("type") if isinstance(block, dict) else None
            if isinstance(kind, str) and kind not in known:
                removals.add(path, f"unknown block type {kind!r}")
                continue
            kept.append(block)
            kept_paths.append(path)
        if len(kept) != len(content):
            folded.messages[i] = {**message, "content": kept}
            folded.blocks[i] = kept_paths


@cache
def _output_config_keys(model: type[BaseModel]) -> frozenset[str] | None:
    """The keys the params model's ``output_config`` declares (None: not a typed object)."""
    info = model.model_fields.get("output_config")
    if info is None:
        return None
    arms = typing.get_args(info.annotation) or (info.annotation,)
    for arm in arms:
        if isinstance(arm, type) and typing_extensions.is_typeddict(arm):
            return frozenset(typing_extensions.get_type_hints(arm))
    return None


def _apply_directives(
    cleaned: dict[str, Any],
    directives: dict[str, tuple[Any, Path]],
    model: type[BaseModel],
    removals: Removals,
) -> None:
    """Make the system messages' ``output_config`` keys the request's own: a key the params
    model does not know is recorded at the client's path; the rest are merged over the
    request's ``output_config`` (nothing is invented when nothing is left), and errors or
    prunings inside one name the system message's key."""
    known = _output_config_keys(model)
    merged: dict[str, Any] = {}
    for key, (value, path) in directives.items():
        if known is not None and key not in known:
            removals.add(path, "unknown key")
            continue
        merged[key] = value
        removals.moved[("output_config", key)] = path
    if merged:
        own = cleaned.get("output_config")
        cleaned["output_config"] = {**(own if isinstance(own, dict) else {}), **merged}


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
        if system_messages == "translate":
            directives: dict[str, tuple[Any, Path]] = {}
            folded = _fold_system_messages(messages, report, directives)
            _apply_directives(cleaned, directives, model, report)
        else:
            folded = _Folded(list(messages), list(range(len(messages))), [None] * len(messages))
        _drop_unknown_blocks(folded, report)
        cleaned["messages"] = folded.messages
        report.origins["messages"] = list(folded.origins)
        for i, paths in enumerate(folded.blocks):
            for k, path in enumerate(paths or ()):
                report.moved[("messages", i, "content", k)] = path
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
