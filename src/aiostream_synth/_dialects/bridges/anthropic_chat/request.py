"""An Anthropic Messages request as a Chat Completions request.

``system`` becomes the leading system message (Claude Code's per-request billing header block
is left out: it changes every turn and would defeat the upstream's prefix cache). All
``tool_use`` blocks of an assistant turn become one assistant message's ``tool_calls``; the
``tool_result`` blocks of the next user turn become ``tool`` messages right after it, in call
order (an error result's text is prefixed ``Error: ``), and the rest of that user turn a user
message after them; a call answered by several ``tool_result`` blocks gets their texts in one
tool message. ``thinking`` is replayed as ``reasoning_content`` (DeepSeek, vLLM and SGLang read
it back), a thinking-only assistant turn as an assistant message with empty content and its
reasoning (a trailing one is left out, reported: the upstream would continue it); server tools
and their records have no chat equivalent and are dropped, reported.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from aiostream_synth._dialects.bridges.chat_reasoning import reasoning_fields
from aiostream_synth._dialects.bridges.names import NameTable
from aiostream_synth._dialects.bridges.options import BridgeOptions
from aiostream_synth._dialects.bridges.shapes import elements, obj

if TYPE_CHECKING:
    from aiostream_synth._dialects.bridges.shapes import ChatMessage
from aiostream_synth._params.removals import Removals

if TYPE_CHECKING:  # the SDK's shapes of what is built here (no import at run time)
    from openai.types.chat import (
        ChatCompletionContentPartImageParam,
        ChatCompletionContentPartParam,
        ChatCompletionFunctionToolParam,
        ChatCompletionMessageFunctionToolCallParam,
        ChatCompletionToolMessageParam,
    )
    from openai.types.shared_params import FunctionDefinition

__all__ = ["AnthropicChatContext", "anthropic_to_chat_request"]

LOG = logging.getLogger("aiostream_synth.bridge")

_BILLING_PREFIX = "x-anthropic-billing-header:"
#: thinking.budget_tokens up to these bounds -> reasoning_effort
_EFFORT_BOUNDS = ((4096, "low"), (16384, "medium"))
_MAPPED = frozenset(
    {
        "model",
        "messages",
        "system",
        "tools",
        "tool_choice",
        "max_tokens",
        "stop_sequences",
        "temperature",
        "top_p",
        "thinking",
        "output_config",
        "metadata",
        "stream",
    }
)
_QUIET = frozenset({"metadata", "context_management", "service_tier", "container", "cache_control"})


@dataclass(slots=True, kw_only=True)
class AnthropicChatContext:
    """What the answer's conversion needs."""

    options: BridgeOptions
    model: Any = None
    names: NameTable = field(default_factory=NameTable)


def _blocks(content: Any) -> list[Any]:
    if isinstance(content, str):
        return [{"type": "text", "text": content}]
    return content if isinstance(content, list) else []


def _image_part(block: dict[str, Any]) -> ChatCompletionContentPartImageParam | None:
    source = obj(block.get("source"))
    if source.get("type") == "base64":
        url = f"data:{source.get('media_type')};base64,{source.get('data')}"
    elif source.get("type") == "url":
        url = str(source.get("url"))
    else:
        return None
    return {"type": "image_url", "image_url": {"url": url}}


def _document_part(block: dict[str, Any]) -> ChatCompletionContentPartParam | None:
    source = obj(block.get("source"))
    if source.get("type") == "base64":
        data = f"data:{source.get('media_type')};base64,{source.get('data')}"
        return {
            "type": "file",
            "file": {"filename": str(block.get("title") or "document.pdf"), "file_data": data},
        }
    if source.get("type") == "text":
        return {"type": "text", "text": str(source.get("data") or "")}
    return None


def _result_text(content: Any) -> tuple[str, list[ChatCompletionContentPartImageParam]]:
    """A tool result's text and its images."""
    texts: list[str] = []
    images: list[ChatCompletionContentPartImageParam] = []
    for block in _blocks(content):
        if not isinstance(block, dict):
            continue
        if block.get("type") == "text":
            texts.append(str(block.get("text") or ""))
        elif block.get("type") == "image":
            part = _image_part(block)
            if part is not None:
                images.append(part)
    return "\n".join(texts), images


class _Messages:
    def __init__(self, ctx: AnthropicChatContext, removals: Removals) -> None:
        self.ctx = ctx
        self.options = ctx.options
        self.removals = removals
        self.out: list[ChatMessage] = []
        #: call ids of the last assistant turn still waiting for their result, in order
        self.pending: list[str] = []
        #: (index in ``out``, client index) of an assistant message that carries only thinking
        self.thinking_only: tuple[int, int] | None = None

    def _close_pending(
        self, results: dict[str, list[dict[str, Any]]]
    ) -> list[ChatCompletionContentPartImageParam]:
        """Tool messages for the pending calls, in call order (a call without a result gets
        the synthesized one), and the images those results carried. A call answered by more
        than one ``tool_result`` gets one tool message with every result's text, in order."""
        images: list[ChatCompletionContentPartImageParam] = []
        for call_id in self.pending:
            found_results = results.pop(call_id, None)
            if not found_results:
                dangling: ChatCompletionToolMessageParam = {
                    "role": "tool",
                    "tool_call_id": call_id,
                    "content": self.options.dangling_call_output,
                }
                self.out.append(dangling)
                continue
            texts = []
            for result in found_results:
                text, found = _result_text(result.get("content"))
                texts.append(f"Error: {text}" if result.get("is_error") is True else text)
                images.extend(found)
            answered: ChatCompletionToolMessageParam = {
                "role": "tool",
                "tool_call_id": call_id,
                "content": "\n\n".join(texts),
            }
            self.out.append(answered)
        self.pending = []
        return images

    def user(self, content: Any, index: int) -> None:
        results: dict[str, list[dict[str, Any]]] = {}
        parts: list[ChatCompletionContentPartParam] = []
        for k, block in enumerate(_blocks(content)):
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "tool_result":
                results.setdefault(str(block.get("tool_use_id")), []).append(block)
            elif kind == "text":
                parts.append({"type": "text", "text": str(block.get("text") or "")})
            elif kind == "image":
                part = _image_part(block)
                if part is not None:
                    parts.append(part)
                else:
                    self.removals.add(
                        ("messages", index, "content", k),
                        "image source a chat upstream cannot read",
                    )
            elif kind == "document":
                document = _document_part(block)
                if document is not None:
                    parts.append(document)
                else:
                    self.removals.add(
                        ("messages", index, "content", k),
                        "document source a chat upstream cannot read",
                    )
            else:
                self.removals.add(
                    ("messages", index, "content", k), f"{kind!r} block: no chat equivalent"
                )
        images = self._close_pending(results)
        orphans = [(call_id, block) for call_id, blocks in results.items() for block in blocks]
        for call_id, block in reversed(orphans):  # results with no call just before: user text
            if self.options.orphan_output_policy == "drop":
                self.removals.add(
                    ("messages", index), f"tool_result {call_id} without its tool_use"
                )
                continue
            text, _ = _result_text(block.get("content"))
            parts.insert(
                0, {"type": "text", "text": f"Output of an earlier tool call {call_id}:\n{text}"}
            )
        if images:
            parts = [
                {"type": "text", "text": "Images returned by the tool calls:"},
                *images,
                *parts,
            ]
        if not parts:
            return
        texts = [part["text"] for part in parts if part["type"] == "text"]
        if len(texts) == len(parts):
            self.out.append({"role": "user", "content": "\n\n".join(texts)})
        else:
            self.out.append({"role": "user", "content": parts})

    def assistant(self, content: Any, index: int) -> None:
        if self.pending:
            self._close_pending({})
        texts: list[str] = []
        reasoning: list[str] = []
        calls: list[ChatCompletionMessageFunctionToolCallParam] = []
        for k, block in enumerate(_blocks(content)):
            if not isinstance(block, dict):
                continue
            kind = block.get("type")
            if kind == "text":
                texts.append(str(block.get("text") or ""))
            elif kind == "thinking":
                if block.get("thinking"):
                    reasoning.append(str(block["thinking"]))
            elif kind == "tool_use":
                call_id = str(block.get("id") or f"toolu_{index}_{k}")
                name = self.ctx.names.reference(str(block.get("name") or ""))
                calls.append(
                    {
                        "id": call_id,
                        "type": "function",
                        "function": {
                            "name": name,
                            "arguments": orjson.dumps(block.get("input") or {}).decode(),
                        },
                    }
                )
            elif kind == "redacted_thinking":
                self.removals.add(
                    ("messages", index, "content", k),
                    "redacted thinking is opaque to a chat upstream",
                    benign=True,
                )
            else:
                self.removals.add(
                    ("messages", index, "content", k), f"{kind!r} block: no chat equivalent"
                )
        text = "".join(texts)
        message: dict[str, Any] = {
            "role": "assistant",
            "content": text if text or not calls else self.options.assistant_empty_content,
        }
        if calls:
            message["tool_calls"] = calls
        thought: str | None = "\n\n".join(reasoning) or (
            self.options.reasoning_placeholder if calls else None
        )
        carried = reasoning_fields(thought, self.options.reasoning_out_field)
        message.update(carried)
        if not text and not calls:
            if carried:  # thinking only: an assistant turn with its reasoning
                self.out.append(message)
                self.thinking_only = (len(self.out) - 1, index)
            elif any(isinstance(block, dict) for block in _blocks(content)):
                self.removals.add(
                    ("messages", index), "assistant turn with nothing a chat message can carry"
                )
            return
        self.out.append(message)
        self.pending = [call["id"] for call in calls]

    def finish(self) -> list[ChatMessage]:
        if self.pending:
            self._close_pending({})
        if self.thinking_only is not None and self.thinking_only[0] == len(self.out) - 1:
            # Last, it would read as a prefill the upstream continues: left out, reported.
            self.out.pop()
            self.removals.add(
                ("messages", self.thinking_only[1]),
                "trailing assistant turn with only thinking (a chat upstream would continue it)",
            )
        return self.out


def _system_text(system: Any, removals: Removals) -> str:
    if isinstance(system, str):
        return system
    texts = []
    for k, block in enumerate(system if isinstance(system, list) else ()):
        if not isinstance(block, dict):
            continue
        text = str(block.get("text") or "")
        if text.startswith(_BILLING_PREFIX):
            removals.add(
                ("system", k), "Claude Code's billing header: not sent upstream", benign=True
            )
            continue
        texts.append(text)
    return "\n\n".join(texts)


def _tools(
    tools: Any, ctx: AnthropicChatContext, removals: Removals
) -> list[ChatCompletionFunctionToolParam]:
    out: list[ChatCompletionFunctionToolParam] = []
    for k, tool in enumerate(elements(tools)):
        if not isinstance(tool, dict):
            continue
        kind = tool.get("type")
        if kind not in (None, "custom") or "input_schema" not in tool:
            removals.add(
                ("tools", k),
                f"server tool {kind or tool.get('name')!r}: a chat upstream cannot run it",
            )
            continue
        name, _ = ctx.names.upstream(str(tool.get("name")), sanitize=ctx.options.name_sanitize)
        function: FunctionDefinition = {"name": name}
        if tool.get("description"):
            function["description"] = tool["description"]
        schema = tool.get("input_schema")
        function["parameters"] = (
            schema if isinstance(schema, dict) else {"type": "object", "properties": {}}
        )
        if tool.get("strict") is True:
            function["strict"] = True
        out.append({"type": "function", "function": function})
    return out


def _effort(body: Mapping[str, Any]) -> str | None:
    config = body.get("output_config")
    if isinstance(config, dict) and isinstance(config.get("effort"), str):
        return str(config["effort"])
    thinking = body.get("thinking")
    if not isinstance(thinking, dict):
        return None
    if thinking.get("type") == "enabled":
        budget = thinking.get("budget_tokens")
        if isinstance(budget, int):
            for bound, effort in _EFFORT_BOUNDS:
                if budget <= bound:
                    return effort
        return "high"
    return None


def anthropic_to_chat_request(
    body: Mapping[str, Any],
    options: BridgeOptions | None = None,
    *,
    removals: Removals | None = None,
) -> tuple[dict[str, Any], AnthropicChatContext]:
    """Convert an Anthropic Messages body to a non-streaming Chat Completions body."""
    options = options or BridgeOptions()
    report = Removals() if removals is None else removals
    ctx = AnthropicChatContext(options=options, model=body.get("model"))
    model = body.get("model")
    chat: dict[str, Any] = {
        "model": options.model_map.get(model, model) if isinstance(model, str) else model
    }
    tools = _tools(body.get("tools"), ctx, report)
    assembler = _Messages(ctx, report)
    for index, message in enumerate(elements(body.get("messages"))):
        if not isinstance(message, dict):
            continue
        role = message.get("role")
        if role == "assistant":
            assembler.assistant(message.get("content"), index)
        elif role == "system":  # forwarded by the sanitizer's option
            assembler.out.append(
                {"role": "system", "content": _system_text(message.get("content"), report)}
            )
        else:
            assembler.user(message.get("content"), index)
    messages = assembler.finish()
    system = _system_text(body.get("system"), report)
    if system:
        messages.insert(0, {"role": options.system_role, "content": system})
    chat["messages"] = messages
    if tools:
        chat["tools"] = tools
        choice = body.get("tool_choice")
        if isinstance(choice, dict):
            kind = choice.get("type")
            if kind == "any":
                chat["tool_choice"] = "required"
            elif kind == "tool":
                name = ctx.names.reference(str(choice.get("name")))
                chat["tool_choice"] = {"type": "function", "function": {"name": name}}
            elif kind in ("auto", "none"):
                chat["tool_choice"] = kind
            if choice.get("disable_parallel_tool_use") is True:
                chat["parallel_tool_calls"] = False
    if body.get("max_tokens") is not None:
        chat[options.max_tokens_field] = body["max_tokens"]
    stop = body.get("stop_sequences")
    if isinstance(stop, list) and stop:
        if len(stop) > 4:
            report.add(
                ("stop_sequences",),
                "chat upstreams take at most 4 stop sequences; the rest were dropped",
            )
        chat["stop"] = stop[:4]
    for key in ("temperature", "top_p"):
        if body.get(key) is not None:
            chat[key] = body[key]
    if body.get("top_k") is not None:
        report.add(("top_k",), "no chat equivalent")
    effort = _effort(body)
    if effort is not None:
        mapped = options.reasoning_effort_map.get(effort, effort)
        if mapped is not None:
            chat["reasoning_effort"] = mapped
    config = body.get("output_config")
    format_ = config.get("format") if isinstance(config, dict) else None
    if isinstance(format_, dict) and format_.get("type") == "json_schema":
        chat["response_format"] = {
            "type": "json_schema",
            "json_schema": {
                "name": str(format_.get("name") or "output"),
                "schema": format_.get("schema") or {},
            },
        }
    metadata = body.get("metadata")
    if "user" in options.forward_fields and isinstance(metadata, dict) and metadata.get("user_id"):
        chat["user"] = metadata["user_id"]
    for key in body:
        if key not in _MAPPED and key != "top_k":
            report.add((key,), "not sent to the chat upstream", benign=key in _QUIET)
    chat["stream"] = False
    chat.update(options.upstream_extra_body)
    ctx.names.freeze()
    if removals is None:
        report.log(LOG, "anthropic request bridged to chat")
    return chat, ctx
