"""A Responses request as a Chat Completions request: :func:`responses_to_chat_request`.

Pure: a dict in, ``(chat body, context)`` out; the context converts the answer back
(:func:`~aiostream_synth._dialects.bridges.responses_chat.result.chat_to_responses_result`). Stateless:
a request that needs server-side state (``previous_response_id``, ``conversation``, ``prompt``,
``item_reference``, ``background``) is a :class:`~aiostream_synth.errors.BridgeError` (400) before
anything is sent. Client bookkeeping (``store``, ``include``, ``prompt_cache_key``,
``metadata``...) is never sent upstream unless ``forward_fields`` names it; everything dropped
on the way is recorded in ``removals``.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from typing import Any

from aiostream_synth._dialects.bridges.options import BridgeOptions
from aiostream_synth._dialects.bridges.responses_chat.context import ResponsesChatContext
from aiostream_synth._dialects.bridges.responses_chat.messages import chat_messages
from aiostream_synth._dialects.bridges.responses_chat.tools import (
    chat_response_format,
    chat_tool_choice,
    chat_tools,
)
from aiostream_synth._dialects.responses.namespaces import NamespaceMap
from aiostream_synth._params.removals import Removals
from aiostream_synth._wire.errors import BridgeError

__all__ = ["responses_to_chat_request"]

LOG = logging.getLogger("aiostream_synth.bridge")

_STATEFUL = {
    "previous_response_id": "previous_response_id needs server-side state; this bridge is "
    "stateless: replay the conversation's items in input instead.",
    "conversation": "conversation needs server-side state; this bridge is stateless: replay the "
    "conversation's items in input instead.",
    "prompt": "prompt templates live on OpenAI's servers; a chat upstream cannot expand them.",
}
#: Request fields the Response echoes.
_ECHOED = (
    "instructions",
    "tool_choice",
    "parallel_tool_calls",
    "reasoning",
    "text",
    "temperature",
    "top_p",
    "max_output_tokens",
    "top_logprobs",
    "truncation",
    "metadata",
    "user",
    "safety_identifier",
    "prompt_cache_key",
    "prompt_cache_retention",
)
_FORWARDABLE = (
    "prompt_cache_key",
    "safety_identifier",
    "user",
    "metadata",
    "service_tier",
    "store",
)
#: Fields consumed here (the rest of the body is reported as not sent upstream).
_MAPPED = frozenset(
    {
        "model",
        "input",
        "instructions",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "max_output_tokens",
        "temperature",
        "top_p",
        "reasoning",
        "text",
        "top_logprobs",
        "include",
        "truncation",
        "background",
        "max_tool_calls",
        "stream",
        "stream_options",
        *_STATEFUL,
    }
)
#: Not sent, and not worth a warning: client bookkeeping and options with no chat meaning.
_QUIET = frozenset(
    {
        "include",
        "store",
        "prompt_cache_key",
        "safety_identifier",
        "metadata",
        "user",
        "service_tier",
        "client_metadata",
        "prompt_cache_retention",
        "prompt_cache_options",
        "stream",
        "stream_options",
        "context_management",
        "background_options",
        "moderation",
        "image",
        "access_programs",
    }
)
_LOGPROBS_INCLUDE = "message.output_text.logprobs"


def _refuse_stateful(body: Mapping[str, Any]) -> None:
    for key, message in _STATEFUL.items():
        if body.get(key) not in (None, "", {}):
            raise BridgeError(message, param=key)
    if body.get("background") is True:
        raise BridgeError(
            "background responses need server-side state; this bridge is stateless.",
            param="background",
        )


def _echo(body: Mapping[str, Any], client_body: Mapping[str, Any]) -> dict[str, Any]:
    echo = {key: client_body[key] for key in _ECHOED if client_body.get(key) is not None}
    echo["model"] = client_body.get("model", body.get("model", ""))
    tools = client_body.get("tools")
    echo["tools"] = tools if isinstance(tools, list) else []
    return echo


def _reasoning_effort(reasoning: Any, options: BridgeOptions) -> str | None:
    if not isinstance(reasoning, dict):
        return None
    effort = reasoning.get("effort")
    if not isinstance(effort, str):
        return None
    return options.reasoning_effort_map.get(effort, effort)


def responses_to_chat_request(
    body: Mapping[str, Any],
    options: BridgeOptions | None = None,
    *,
    removals: Removals | None = None,
    ns_map: NamespaceMap | None = None,
    client_body: Mapping[str, Any] | None = None,
    created_at: int | None = None,
) -> tuple[dict[str, Any], ResponsesChatContext]:
    """Convert a Responses request body to a non-streaming Chat Completions body.

    ``body`` may be the client's own body or the sanitized params (then pass the sanitizer's
    ``ns_map`` and ``removals``, and the client's body as ``client_body``, which the answer
    echoes). Raises :class:`~aiostream_synth.errors.BridgeError` for what a stateless chat upstream
    cannot do. Removals are recorded in ``removals`` (logged in one record without it).
    """
    options = options or BridgeOptions()
    report = Removals() if removals is None else removals
    client = body if client_body is None else client_body
    _refuse_stateful(body)
    ctx = ResponsesChatContext(
        options=options,
        ns_map=dict(ns_map or {}),
        created_at=int(time.time()) if created_at is None else created_at,
        echo=_echo(body, client),
    )
    model = body.get("model")
    chat: dict[str, Any] = {
        "model": options.model_map.get(model, model) if isinstance(model, str) else model
    }
    dropped = chat_tools(body.get("tools"), ctx, report, chat)
    messages = chat_messages(body.get("instructions"), body.get("input"), ctx, report)
    chat = {
        "model": chat["model"],
        "messages": messages,
        **{k: v for k, v in chat.items() if k != "model"},
    }
    chat_tool_choice(body.get("tool_choice"), ctx, chat, dropped)
    if chat.get("tools") and isinstance(body.get("parallel_tool_calls"), bool):
        chat["parallel_tool_calls"] = body["parallel_tool_calls"]
    _sampling(body, chat, ctx, report)
    for key in body:
        if key not in _MAPPED and key not in options.forward_fields:
            report.add((key,), "not sent to the chat upstream", benign=key in _QUIET)
    for key in _FORWARDABLE:
        if key in options.forward_fields and body.get(key) is not None:
            chat[key] = body[key]
    chat["stream"] = False
    chat.update(options.upstream_extra_body)
    items = body.get("input")
    ctx.answer_locally = (
        isinstance(items, list)
        and not items
        and not body.get("instructions")
        and isinstance(body.get("max_output_tokens"), int)
        and body["max_output_tokens"] <= 16
    )
    ctx.freeze(messages)
    if removals is None:
        report.log(LOG, "responses request bridged to chat")
    return chat, ctx


def _sampling(
    body: Mapping[str, Any], chat: dict[str, Any], ctx: ResponsesChatContext, report: Removals
) -> None:
    options = ctx.options
    limit = body.get("max_output_tokens")
    if limit is not None:
        chat[options.max_tokens_field] = limit
    for key in ("temperature", "top_p"):
        if body.get(key) is not None:
            chat[key] = body[key]
    effort = _reasoning_effort(body.get("reasoning"), options)
    if effort is not None:
        chat["reasoning_effort"] = effort
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict):
        for key in reasoning:
            if key != "effort" and reasoning[key] is not None:
                report.add(
                    ("reasoning", key), "only reasoning.effort reaches a chat upstream", benign=True
                )
    text = body.get("text")
    response_format = chat_response_format(text)
    if response_format is not None:
        chat["response_format"] = response_format
    if isinstance(text, dict) and text.get("verbosity") is not None:
        if "verbosity" in options.forward_fields:
            chat["verbosity"] = text["verbosity"]
        else:
            report.add(("text", "verbosity"), "not sent to the chat upstream", benign=True)
    include = body.get("include")
    if isinstance(include, list) and _LOGPROBS_INCLUDE in include:
        ctx.logprobs = True
        chat["logprobs"] = True
        if body.get("top_logprobs") is not None:
            chat["top_logprobs"] = body["top_logprobs"]
    if body.get("truncation") == "auto":
        LOG.warning(
            "bridge: truncation 'auto' has no chat equivalent; an overflow fails the turn with "
            "context_length_exceeded"
        )
    if body.get("max_tool_calls") is not None:
        report.add(("max_tool_calls",), "limits hosted tools, which a chat upstream never runs")
