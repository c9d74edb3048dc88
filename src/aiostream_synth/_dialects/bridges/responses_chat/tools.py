"""Responses tools and ``tool_choice`` as Chat Completions tools.

Function tools map one to one. A custom (free-form) tool such as Codex's ``apply_patch``
becomes a function with one string parameter whose description carries the tool's grammar
(a chat backend has no other way to learn the patch format); its calls come back as
``custom_tool_call`` because the tool was *declared* custom, whatever its name. The legacy
``local_shell`` tool becomes a function too. Hosted tools (web search, file search, MCP...) run
on OpenAI's servers: a chat backend cannot run them, so they are dropped and reported, and a
``tool_choice`` that forces one is a 400.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, cast

from aiostream_synth._dialects.bridges.responses_chat.context import ResponsesChatContext
from aiostream_synth._dialects.bridges.shapes import elements
from aiostream_synth._dialects.responses.namespaces import flatten_tools
from aiostream_synth._params.removals import Removals
from aiostream_synth._wire.errors import BridgeError

if TYPE_CHECKING:  # the SDK's shapes of what is built here (no import at run time)
    from openai.types.chat import (
        ChatCompletionCustomToolParam,
        ChatCompletionFunctionToolParam,
        ChatCompletionToolUnionParam,
    )
    from openai.types.chat.chat_completion_custom_tool_param import (
        Custom,
        CustomFormatGrammarGrammar,
    )
    from openai.types.shared_params import FunctionDefinition

__all__ = ["LOCAL_SHELL_TOOL", "chat_response_format", "chat_tool_choice", "chat_tools"]

LOG = logging.getLogger("aiostream_synth.bridge")

LOCAL_SHELL_TOOL = "local_shell"
_LOCAL_SHELL_PARAMETERS: dict[str, object] = {
    "type": "object",
    "properties": {
        "command": {"type": "array", "items": {"type": "string"}},
        "workdir": {"type": "string"},
        "timeout_ms": {"type": "integer"},
    },
    "required": ["command"],
}
_EMPTY_OBJECT = {"type": "object", "properties": {}}
#: Function tool fields a chat tool cannot carry (reported when set).
_FUNCTION_ONLY_HERE = ("output_schema", "allowed_callers", "defer_loading")
_WEB_SEARCH = frozenset({"web_search", "web_search_2025_08_26", "web_search_preview"})
_WEB_SEARCH_OPTIONS = ("search_context_size", "user_location")


def _grammar(format_: Any) -> str:
    if not isinstance(format_, dict) or format_.get("type") != "grammar":
        return ""
    syntax = str(format_.get("syntax") or "")
    definition = str(format_.get("definition") or "")
    return (
        f"\n\nThe `input` argument is raw text (not JSON) that must match this {syntax} "
        f"grammar:\n```{syntax}\n{definition}\n```"
    )


def _custom_as_function(
    tool: dict[str, Any], name: str, param: str
) -> ChatCompletionFunctionToolParam:
    original = str(tool.get("name"))
    description = str(tool.get("description") or "") or f"Free-form tool `{original}`."
    grammar = _grammar(tool.get("format"))
    if param != "input":
        grammar = grammar.replace("The `input` argument", f"The `{param}` argument")
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description + grammar,
            "parameters": {
                "type": "object",
                "properties": {
                    param: {"type": "string", "description": f"The raw input for `{original}`."}
                },
                "required": [param],
                "additionalProperties": False,
            },
        },
    }


def _custom_passthrough(tool: dict[str, Any], name: str) -> ChatCompletionCustomToolParam:
    custom: Custom = {"name": name}
    if tool.get("description"):
        custom["description"] = tool["description"]
    format_ = tool.get("format")
    if isinstance(format_, dict) and format_.get("type") == "grammar":
        # The client's definition and syntax as they are (the upstream judges them).
        grammar = {"definition": format_.get("definition"), "syntax": format_.get("syntax")}
        custom["format"] = {
            "type": "grammar",
            "grammar": cast("CustomFormatGrammarGrammar", grammar),
        }
    elif isinstance(format_, dict):
        custom["format"] = {"type": "text"}
    return {"type": "custom", "custom": custom}


def _function(tool: dict[str, Any], name: str) -> ChatCompletionFunctionToolParam:
    function: FunctionDefinition = {"name": name}
    if tool.get("description"):
        function["description"] = tool["description"]
    parameters = tool.get("parameters")
    function["parameters"] = parameters if isinstance(parameters, dict) else dict(_EMPTY_OBJECT)
    if tool.get("strict") is True:
        function["strict"] = True
    return {"type": "function", "function": function}


def chat_tools(
    tools: Any,
    ctx: ResponsesChatContext,
    removals: Removals,
    chat: dict[str, Any],
) -> set[str]:
    """The chat ``tools`` for a Responses tool list (set on ``chat`` when any is left), with
    ``ctx`` filled; returns the types of the tools that were dropped."""
    options = ctx.options
    dropped: set[str] = set()
    if not isinstance(tools, list):
        return dropped
    flat, ns_map = flatten_tools(elements(tools), keep_malformed=False, removals=removals)
    ctx.ns_map.update(ns_map)
    out: list[ChatCompletionToolUnionParam] = []
    functions = {
        tool.get("name")
        for tool, _ in flat
        if isinstance(tool, dict) and tool.get("type") == "function"
    }
    for tool, origin in flat:
        where = ("tools", origin) if isinstance(origin, int) else origin
        kind = tool.get("type") if isinstance(tool, dict) else None
        name = tool.get("name") if isinstance(tool, dict) else None
        if kind == "function" and isinstance(name, str):
            if tool.get("defer_loading") is True and options.deferred_tools == "drop":
                removals.add_cleaned(
                    where,
                    "deferred tool (bridge option deferred_tools=drop)",
                    dropped=("tool", "function"),
                )
                dropped.add("function")
                continue
            upstream, collided = ctx.names.upstream(name, sanitize=options.name_sanitize)
            if collided:
                LOG.warning(
                    "bridge: tool %r is sent as %r: another tool's name maps to the same",
                    name,
                    upstream,
                )
            for key in _FUNCTION_ONLY_HERE:
                if tool.get(key) not in (None, False, [], {}):
                    removals.add_cleaned((*where, key), f"{key}: no chat equivalent")
            out.append(_function(tool, upstream))
        elif kind == "custom" and isinstance(name, str):
            if options.custom_tool_strategy == "drop":
                removals.add_cleaned(
                    where,
                    "custom tool (bridge option custom_tool_strategy=drop)",
                    dropped=("tool", "custom"),
                )
                dropped.add("custom")
                continue
            ctx.declare_custom(name)
            upstream, _ = ctx.names.upstream(name, sanitize=options.name_sanitize)
            if options.custom_tool_strategy == "passthrough":
                out.append(_custom_passthrough(tool, upstream))
            else:
                out.append(_custom_as_function(tool, upstream, options.custom_tool_param))
        elif kind == LOCAL_SHELL_TOOL and options.local_shell == "function":
            if LOCAL_SHELL_TOOL in functions or ctx.local_shell:
                removals.add_cleaned(
                    where,
                    "local_shell tool: a function named local_shell is declared already",
                    dropped=("tool", LOCAL_SHELL_TOOL),
                )
                continue
            ctx.local_shell = True
            ctx.names.upstream(LOCAL_SHELL_TOOL)
            out.append(
                {
                    "type": "function",
                    "function": {
                        "name": LOCAL_SHELL_TOOL,
                        "description": "Run a command in the local shell.",
                        "parameters": _LOCAL_SHELL_PARAMETERS,
                    },
                }
            )
        elif kind in _WEB_SEARCH and options.hosted_web_search == "web_search_options":
            chat["web_search_options"] = {
                key: tool[key] for key in _WEB_SEARCH_OPTIONS if tool.get(key) is not None
            }
        else:
            label = kind if isinstance(kind, str) else "untyped"
            removals.add_cleaned(
                where,
                f"{label} tool: the chat upstream cannot run it (hosted or unknown tool)",
                dropped=("tool", label),
            )
            dropped.add(label)
    if out:
        chat["tools"] = out
    return dropped


def _declared(name: Any, ctx: ResponsesChatContext, chat: dict[str, Any]) -> str:
    if not isinstance(name, str):
        raise BridgeError("tool_choice must name a tool.", param="tool_choice.name")
    upstream = ctx.names.reference(name)
    declared = {
        tool.get("function", tool.get("custom", {})).get("name") for tool in chat.get("tools", ())
    }
    if upstream not in declared:
        raise BridgeError(
            f"tool_choice names {name!r}, which is not among the tools sent to the upstream.",
            param="tool_choice",
        )
    return upstream


def chat_tool_choice(
    choice: Any, ctx: ResponsesChatContext, chat: dict[str, Any], dropped: set[str]
) -> None:
    """Set chat ``tool_choice`` (and narrow ``tools`` for ``allowed_tools``), or raise a 400
    for a choice that forces a tool the upstream does not get."""
    has_tools = bool(chat.get("tools"))
    if choice is None:
        return
    if isinstance(choice, str):
        if choice == "required" and not has_tools:
            raise BridgeError(
                "tool_choice 'required' with no tool the upstream can call "
                f"(dropped: {', '.join(sorted(dropped)) or 'none declared'}).",
                param="tool_choice",
            )
        if has_tools:
            chat["tool_choice"] = choice
        return
    if not isinstance(choice, dict):
        raise BridgeError("tool_choice must be a string or an object.", param="tool_choice")
    kind = choice.get("type")
    if kind == "function" or (
        kind == "custom" and ctx.options.custom_tool_strategy != "passthrough"
    ):
        name = _declared(choice.get("name"), ctx, chat)
        chat["tool_choice"] = {"type": "function", "function": {"name": name}}
    elif kind == "custom":
        name = _declared(choice.get("name"), ctx, chat)
        chat["tool_choice"] = {"type": "custom", "custom": {"name": name}}
    elif kind == "allowed_tools":
        allowed = {
            ctx.names.reference(_flat_name(tool))
            for tool in choice.get("tools") or ()
            if isinstance(tool, dict) and tool.get("name")
        }
        if ctx.local_shell and any(
            isinstance(t, dict) and t.get("type") == LOCAL_SHELL_TOOL
            for t in choice.get("tools") or ()
        ):
            allowed.add(LOCAL_SHELL_TOOL)
        kept = [
            tool
            for tool in chat.get("tools", ())
            if tool.get("function", tool.get("custom", {})).get("name") in allowed
        ]
        mode = choice.get("mode") if choice.get("mode") in ("auto", "required") else "auto"
        if not kept:
            if mode == "required":
                raise BridgeError(
                    "tool_choice allows only tools the upstream does not get.", param="tool_choice"
                )
            chat.pop("tools", None)
            return
        chat["tools"] = kept
        chat["tool_choice"] = mode
    elif kind == LOCAL_SHELL_TOOL and ctx.local_shell:
        chat["tool_choice"] = {"type": "function", "function": {"name": LOCAL_SHELL_TOOL}}
    else:
        raise BridgeError(
            f"tool_choice forces the {kind!r} tool, which a chat upstream cannot run.",
            param="tool_choice",
        )


def _flat_name(tool: dict[str, Any]) -> str:
    namespace = tool.get("namespace")
    name = str(tool.get("name"))
    return f"{namespace}__{name}" if isinstance(namespace, str) and namespace else name


def chat_response_format(text: Any) -> dict[str, Any] | None:
    """Chat ``response_format`` for a Responses ``text.format`` (None for plain text)."""
    if not isinstance(text, dict):
        return None
    format_ = text.get("format")
    if not isinstance(format_, dict):
        return None
    if format_.get("type") == "json_object":
        return {"type": "json_object"}
    if format_.get("type") == "json_schema":
        schema = {
            key: format_[key]
            for key in ("name", "schema", "strict", "description")
            if format_.get(key) is not None
        }
        return {"type": "json_schema", "json_schema": schema}
    return None
