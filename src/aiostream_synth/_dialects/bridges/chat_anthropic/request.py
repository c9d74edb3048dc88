"""A Chat Completions request as an Anthropic Messages request.

System and developer messages become ``system`` (later ones too: Anthropic has no system role
inside ``messages``); tool calls become ``tool_use`` blocks and tool messages ``tool_result``
blocks of the next user turn; consecutive turns of one role are merged, since Anthropic wants
them to alternate. ``max_tokens`` is required upstream: a request without one gets
``DEFAULT_MAX_TOKENS``. Reasoning from another model cannot be replayed (Anthropic checks
thinking signatures) and is dropped, reported.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

import orjson

from aiostream_synth._dialects.bridges.options import BridgeOptions
from aiostream_synth._dialects.bridges.shapes import elements, obj, text_of
from aiostream_synth._params.removals import Removals
from aiostream_synth._wire.errors import BridgeError

if TYPE_CHECKING:  # the SDK's shapes of what is built here (no import at run time)
    from anthropic.types import ContentBlockParam, ImageBlockParam, ToolParam

__all__ = ["DEFAULT_MAX_TOKENS", "ChatAnthropicContext", "chat_to_anthropic_request"]

LOG = logging.getLogger("aiostream_synth.bridge")

#: ``max_tokens`` for a chat request that sets no limit (Anthropic requires one).
DEFAULT_MAX_TOKENS = 8192
_DATA_URL = re.compile(r"^data:([^;,]+);base64,(.*)$", re.DOTALL)
_MAPPED = frozenset(
    {
        "model",
        "messages",
        "tools",
        "tool_choice",
        "parallel_tool_calls",
        "max_tokens",
        "max_completion_tokens",
        "stop",
        "temperature",
        "top_p",
        "user",
        "n",
        "stream",
        "stream_options",
    }
)


@dataclass(slots=True, kw_only=True)
class ChatAnthropicContext:
    """What the answer's conversion needs."""

    options: BridgeOptions
    model: Any = None


def _user_blocks(content: Any, index: int, removals: Removals) -> list[ContentBlockParam]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    blocks: list[ContentBlockParam] = []
    for k, part in enumerate(content if isinstance(content, list) else ()):
        if not isinstance(part, dict):
            continue
        if part.get("type") == "text":
            blocks.append({"type": "text", "text": str(part.get("text") or "")})
        elif part.get("type") == "image_url":
            url = str(obj(part.get("image_url")).get("url") or "")
            match = _DATA_URL.match(url)
            source = (
                {"type": "base64", "media_type": match.group(1), "data": match.group(2)}
                if match
                else {"type": "url", "url": url}
            )
            # The media type is the client's (the SDK's type lists the ones Anthropic documents):
            # forwarded as it is, for the upstream to accept or refuse.
            blocks.append(cast("ImageBlockParam", {"type": "image", "source": source}))
        else:
            removals.add(
                ("messages", index, "content", k),
                f"{part.get('type')!r} part: not sent to the Anthropic upstream",
            )
    return blocks


def _append(messages: list[dict[str, Any]], role: str, blocks: list[ContentBlockParam]) -> None:
    if not blocks:
        return
    if messages and messages[-1]["role"] == role:
        messages[-1]["content"].extend(blocks)
    else:
        messages.append({"role": role, "content": blocks})


def chat_to_anthropic_request(
    body: Mapping[str, Any],
    options: BridgeOptions | None = None,
    *,
    removals: Removals | None = None,
) -> tuple[dict[str, Any], ChatAnthropicContext]:
    """Convert a Chat Completions body to a non-streaming Anthropic Messages body."""
    options = options or BridgeOptions()
    report = Removals() if removals is None else removals
    n = body.get("n")
    if isinstance(n, int) and n > 1:
        raise BridgeError("n > 1 has no Anthropic equivalent: ask n times.", param="n")
    ctx = ChatAnthropicContext(options=options, model=body.get("model"))
    model = body.get("model")
    out: dict[str, Any] = {
        "model": options.model_map.get(model, model) if isinstance(model, str) else model
    }
    system: list[str] = []
    #: Turns merged as they come (a turn's blocks are extended in place: plain dicts).
    messages: list[dict[str, Any]] = []
    for index, message in enumerate(elements(body.get("messages"))):
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        content = message.get("content")
        if message.get("name"):
            report.add(("messages", index, "name"), "participant name: no Anthropic field")
        if role in ("system", "developer"):
            text = text_of(content, joiner="\n\n")
            if text:
                system.append(text)
        elif role == "user":
            _append(messages, "user", _user_blocks(content, index, report))
        elif role == "assistant":
            blocks: list[ContentBlockParam] = []
            refusal = message.get("refusal")
            text = text_of(content) + (refusal if isinstance(refusal, str) else "")
            if text:
                blocks.append({"type": "text", "text": text})
            for key in ("reasoning_content", "reasoning"):
                if message.get(key):
                    report.add(
                        ("messages", index, key),
                        "reasoning without a signature cannot be replayed to Anthropic",
                        benign=True,
                    )
            for call in message.get("tool_calls") or ():
                if not isinstance(call, dict):
                    continue
                function = obj(call.get("function"))
                try:
                    arguments = orjson.loads(function.get("arguments") or "{}")
                except orjson.JSONDecodeError:
                    arguments = {"_raw": function.get("arguments")}
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": str(call.get("id")),
                        "name": str(function.get("name")),
                        "input": arguments if isinstance(arguments, dict) else {"_raw": arguments},
                    }
                )
            _append(messages, "assistant", blocks)
        elif role == "tool":
            _append(
                messages,
                "user",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": str(message.get("tool_call_id")),
                        "content": text_of(content, joiner="\n"),
                    }
                ],
            )
        else:
            report.add(
                ("messages", index), f"message role {role!r}: not sent to the Anthropic upstream"
            )
    if system:
        out["system"] = "\n\n".join(system)
    out["messages"] = messages
    tools: list[ToolParam] = []
    for k, tool in enumerate(elements(body.get("tools"))):
        declared = obj(tool).get("function")
        if not isinstance(declared, dict):
            report.add(("tools", k), "only function tools reach an Anthropic upstream")
            continue
        schema = declared.get("parameters") or {"type": "object", "properties": {}}
        # The client's name even when it is not a string (a missing key is no reason to drop
        # the tool): the upstream says what is wrong with it.
        name = cast("str", declared.get("name"))
        spec: ToolParam = {"name": name, "input_schema": schema}
        if declared.get("description"):
            spec["description"] = declared["description"]
        tools.append(spec)
    if tools:
        out["tools"] = tools
        choice = body.get("tool_choice")
        anthropic_choice: dict[str, Any] | None = None
        if choice == "required":
            anthropic_choice = {"type": "any"}
        elif choice in ("auto", "none"):
            anthropic_choice = {"type": choice}
        elif isinstance(choice, dict) and choice.get("type") == "function":
            anthropic_choice = {"type": "tool", "name": obj(choice.get("function")).get("name")}
        if body.get("parallel_tool_calls") is False:
            anthropic_choice = anthropic_choice or {"type": "auto"}
            anthropic_choice["disable_parallel_tool_use"] = True
        if anthropic_choice is not None:
            out["tool_choice"] = anthropic_choice
    limit = body.get("max_completion_tokens", body.get("max_tokens"))
    out["max_tokens"] = limit if isinstance(limit, int) else DEFAULT_MAX_TOKENS
    stop = body.get("stop")
    if isinstance(stop, str):
        out["stop_sequences"] = [stop]
    elif isinstance(stop, list) and stop:
        out["stop_sequences"] = stop
    for key in ("temperature", "top_p"):
        if body.get(key) is not None:
            out[key] = body[key]
    if "user" in options.forward_fields and isinstance(body.get("user"), str):
        out["metadata"] = {"user_id": body["user"]}
    for key in body:
        if key not in _MAPPED:
            report.add((key,), "not sent to the Anthropic upstream")
    out.update(options.upstream_extra_body)
    if removals is None:
        report.log(LOG, "chat request bridged to anthropic")
    return out, ctx
