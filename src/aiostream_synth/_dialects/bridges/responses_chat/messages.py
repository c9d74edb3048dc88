"""Responses ``input`` items as Chat Completions ``messages``.

One pass over the items. Consecutive assistant-side items (assistant text, reasoning, calls)
make ONE assistant message; right after it comes one ``tool`` message per call, in call
order, each pulled forward from wherever its output sits later in the history (so a notice
between a call and its output cannot split them). A call with no output gets a synthesized
one; an output with no call before it becomes user text. These keep every upstream request
within chat's pairing rule: each assistant message with ``tool_calls`` is followed by
exactly one ``tool`` message per call id, and no ``tool`` message appears anywhere else.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import orjson

from aiostream_synth._dialects.bridges.chat_reasoning import reasoning_fields
from aiostream_synth._dialects.bridges.responses_chat.context import ResponsesChatContext
from aiostream_synth._dialects.bridges.responses_chat.tools import LOCAL_SHELL_TOOL
from aiostream_synth._dialects.bridges.shapes import elements, obj, text_of
from aiostream_synth._params.removals import Removals, format_path
from aiostream_synth._wire.errors import BridgeError

if TYPE_CHECKING:  # the SDK's shapes of what is built here (no import at run time)
    from openai.types.chat import (
        ChatCompletionContentPartImageParam,
        ChatCompletionContentPartParam,
        ChatCompletionToolMessageParam,
    )
    from openai.types.chat.chat_completion_content_part_image_param import ImageURL
    from openai.types.chat.chat_completion_content_part_param import FileFile

    from aiostream_synth._dialects.bridges.shapes import ChatMessage

__all__ = ["chat_messages"]

LOG = logging.getLogger("aiostream_synth.bridge")

_CALLS = frozenset({"function_call", "custom_tool_call", "local_shell_call"})
_OUTPUTS = frozenset({"function_call_output", "custom_tool_call_output", "local_shell_call_output"})
_SYSTEM_ROLES = frozenset({"system", "developer"})
#: History records of tools OpenAI's servers ran (and their outputs): no chat equivalent.
_HOSTED_RECORDS = frozenset(
    {
        "web_search_call",
        "file_search_call",
        "code_interpreter_call",
        "image_generation_call",
        "computer_call",
        "computer_call_output",
        "mcp_list_tools",
        "mcp_approval_request",
        "mcp_approval_response",
        "mcp_call",
        "tool_search_call",
        "tool_search_output",
        "program",
        "program_output",
        "shell_call",
        "shell_call_output",
        "apply_patch_call",
        "apply_patch_call_output",
    }
)
_IMAGE_DETAILS = frozenset({"low", "high", "auto"})
_TEXT_KINDS = frozenset({"input_text", "text", "output_text", "refusal"})


def _digest(prefix: str, value: Any) -> str:
    canonical = orjson.dumps(value, option=orjson.OPT_SORT_KEYS | orjson.OPT_NON_STR_KEYS)
    return f"{prefix}_{hashlib.sha1(canonical, usedforsecurity=False).hexdigest()[:24]}"


@dataclass(slots=True)
class _Block:
    """The pending assistant message: its texts, reasoning and calls."""

    texts: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    calls: list[dict[str, Any]] = field(default_factory=list)
    #: the item index of each call (its output is searched after it)
    call_positions: list[int] = field(default_factory=list)

    def empty(self) -> bool:
        return not (self.texts or self.reasoning or self.calls)


class _Assembler:
    def __init__(self, items: list[Any], ctx: ResponsesChatContext, removals: Removals) -> None:
        self.items = items
        self.ctx = ctx
        self.options = ctx.options
        self.removals = removals
        self.messages: list[ChatMessage] = []
        self.system: list[str] = []
        self.block = _Block()
        self.consumed: set[int] = set()
        self.dropped_calls: set[str] = set()
        self.outputs: dict[str, list[int]] = {}
        for index, item in enumerate(items):
            if isinstance(item, dict) and item.get("type") in _OUTPUTS:
                key = self._output_key(item)
                if key is not None:
                    self.outputs.setdefault(key, []).append(index)

    # -- helpers -------------------------------------------------------------------------
    @staticmethod
    def _output_key(item: dict[str, Any]) -> str | None:
        key = item.get("call_id")
        if item.get("type") == "local_shell_call_output" and not isinstance(key, str):
            key = item.get("id")
        return key if isinstance(key, str) and key else None

    def _drop(self, index: int, reason: str, *, benign: bool = False) -> None:
        kind = self.items[index].get("type") if isinstance(self.items[index], dict) else None
        label = ("item", kind if isinstance(kind, str) else "untyped")
        self.removals.add_cleaned(("input", index), reason, benign=benign, dropped=label)

    def _client_path(self, index: int) -> str:
        return format_path(self.removals.original_path(("input", index)))

    def _user_content(self, content: Any, index: int) -> Any:
        """User content: a plain string when every part is text, else chat parts."""
        if isinstance(content, str):
            return content
        if not isinstance(content, list):
            return ""
        parts: list[ChatCompletionContentPartParam] = []
        for k, part in enumerate(content):
            if not isinstance(part, dict):
                continue
            kind = part.get("type")
            path = f"{self._client_path(index)}.content[{k}]"
            if kind in ("input_text", "text", "output_text"):
                parts.append({"type": "text", "text": str(part.get("text") or "")})
            elif kind == "input_image":
                url = part.get("image_url")
                if not isinstance(url, str) or not url:
                    raise BridgeError(
                        "An image known only by its file_id needs the OpenAI Files API; "
                        "a chat upstream cannot fetch it. Send it as image_url.",
                        param=path,
                    )
                image: ImageURL = {"url": url}
                if part.get("detail") in _IMAGE_DETAILS:
                    image["detail"] = part["detail"]
                parts.append({"type": "image_url", "image_url": image})
            elif kind == "input_file":
                data = part.get("file_data")
                if not isinstance(data, str) or not data:
                    raise BridgeError(
                        "A file known only by its file_id or file_url cannot be sent to a chat "
                        "upstream. Send its contents as file_data.",
                        param=path,
                    )
                file: FileFile = {"file_data": data}
                if part.get("filename"):
                    file["filename"] = part["filename"]
                parts.append({"type": "file", "file": file})
            else:
                self.removals.add(
                    (*self.removals.original_path(("input", index)), "content", k),
                    f"{kind!r} content part: no chat equivalent",
                )
        texts = [part["text"] for part in parts if part["type"] == "text"]
        return "\n\n".join(texts) if len(texts) == len(parts) else parts

    def _tool_output(self, item: dict[str, Any], call_id: str) -> list[ChatMessage]:
        """The tool message for an output (and a user message holding its media, by option)."""
        output = item.get("output")
        if isinstance(output, str) or output is None:
            return [{"role": "tool", "tool_call_id": call_id, "content": output or ""}]
        texts: list[str] = []
        media: list[ChatCompletionContentPartImageParam] = []
        for part in output if isinstance(output, list) else ():
            if not isinstance(part, dict):
                continue
            kind = part.get("type")
            if kind in ("input_text", "output_text", "text"):
                texts.append(str(part.get("text") or ""))
            elif kind in ("input_image", "input_file"):
                if (
                    self.options.tool_output_media == "user_message"
                    and kind == "input_image"
                    and part.get("image_url")
                ):
                    media.append({"type": "image_url", "image_url": {"url": part["image_url"]}})
                else:
                    texts.append(f"[{kind} omitted]")
        tool: ChatCompletionToolMessageParam = {
            "role": "tool",
            "tool_call_id": call_id,
            "content": "\n".join(texts),
        }
        messages: list[ChatMessage] = [tool]
        if media:
            messages.append(
                {
                    "role": "user",
                    "content": [
                        {"type": "text", "text": f"Image returned by tool call {call_id}:"},
                        *media,
                    ],
                }
            )
        return messages

    def _arguments(self, arguments: Any) -> str:
        if isinstance(arguments, dict):
            return orjson.dumps(arguments).decode()
        if isinstance(arguments, str):
            try:
                parsed = orjson.loads(arguments)
            except orjson.JSONDecodeError:
                parsed = None
            if isinstance(parsed, dict):
                return arguments
        policy = self.options.invalid_arguments
        if policy == "verbatim" and isinstance(arguments, str):
            return arguments
        if policy == "wrap" and arguments not in (None, ""):
            return orjson.dumps({"_raw": arguments}).decode()
        return "{}"

    # -- items ---------------------------------------------------------------------------
    def _call(self, item: dict[str, Any], index: int) -> None:
        kind = item["type"]
        call_id = item.get("call_id")
        if not isinstance(call_id, str) or not call_id:
            call_id = _digest("call", item)
        self.ctx.saw_call_id(call_id)
        name = str(item.get("name") or "")
        namespace = item.get("namespace")
        if isinstance(namespace, str) and namespace:
            name = f"{namespace}__{name}"
        options = self.options
        if kind == "function_call":
            arguments = self._arguments(item.get("arguments"))
            call = {
                "id": call_id,
                "type": "function",
                "function": {"name": self.ctx.names.reference(name), "arguments": arguments},
            }
        elif kind == "custom_tool_call":
            if options.custom_tool_strategy == "drop":
                self.dropped_calls.add(call_id)
                self._drop(index, "custom tool call (bridge option custom_tool_strategy=drop)")
                return
            text = item.get("input")
            text = text if isinstance(text, str) else ""
            upstream = self.ctx.names.reference(name)
            if options.custom_tool_strategy == "passthrough":
                call = {
                    "id": call_id,
                    "type": "custom",
                    "custom": {"name": upstream, "input": text},
                }
            else:
                wrapped = orjson.dumps({options.custom_tool_param: text}).decode()
                call = {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": upstream, "arguments": wrapped},
                }
        else:  # local_shell_call
            if options.local_shell == "drop":
                self.dropped_calls.add(call_id)
                self._drop(index, "local_shell call (bridge option local_shell=drop)")
                return
            action = obj(item.get("action"))
            shell = {
                "command": action.get("command"),
                "workdir": action.get("working_directory"),
                "timeout_ms": action.get("timeout_ms"),
            }
            call = {
                "id": call_id,
                "type": "function",
                "function": {
                    "name": LOCAL_SHELL_TOOL,
                    "arguments": orjson.dumps(
                        {k: v for k, v in shell.items() if v is not None}
                    ).decode(),
                },
            }
        self.block.calls.append(call)
        self.block.call_positions.append(index)

    def _flush(self) -> None:
        block = self.block
        if block.empty():
            return
        self.block = _Block()
        options = self.options
        text = "\n\n".join(block.texts)
        message: dict[str, Any] = {"role": "assistant"}
        if text or not block.calls:
            message["content"] = text
        else:
            message["content"] = options.assistant_empty_content
        reasoning: str | None = "\n\n".join(block.reasoning) if block.reasoning else None
        if not reasoning and block.calls:
            reasoning = options.reasoning_placeholder
        if not text and not block.calls and not reasoning:
            return  # an opaque reasoning item alone: nothing the upstream can read
        if block.calls:
            message["tool_calls"] = block.calls
        message.update(reasoning_fields(reasoning or None, options.reasoning_out_field))
        if not text and not block.calls and len(message) == 2:
            return  # reasoning only, and reasoning is not replayed to this upstream
        self.messages.append(message)
        seen: set[str] = set()
        extra: list[ChatMessage] = []
        for call, position in zip(block.calls, block.call_positions, strict=True):
            call_id = call["id"]
            output = None
            if call_id in seen:
                LOG.warning("bridge: call id %r appears twice in one assistant turn", call_id)
            else:
                seen.add(call_id)
                for candidate in self.outputs.get(call_id, ()):
                    if candidate > position and candidate not in self.consumed:
                        output = candidate
                        break
            if output is None:
                self.messages.append(
                    {
                        "role": "tool",
                        "tool_call_id": call_id,
                        "content": options.dangling_call_output,
                    }
                )
                continue
            self.consumed.add(output)
            tool_message, *media = self._tool_output(self.items[output], call_id)
            self.messages.append(tool_message)
            extra.extend(media)
        self.messages.extend(extra)

    def _report_non_text(self, item: dict[str, Any], index: int) -> None:
        """Report the parts of a system / developer / assistant message that are not text
        (a chat message of those roles carries text only)."""
        content = item.get("content")
        for k, part in enumerate(elements(content)):
            if isinstance(part, dict) and part.get("type") not in _TEXT_KINDS:
                self.removals.add(
                    (*self.removals.original_path(("input", index)), "content", k),
                    f"{part.get('type')!r} part in a {item.get('role')} message: chat "
                    f"{item.get('role')} messages carry text only",
                )

    def _system_text(self, item: dict[str, Any], index: int, joiner: str) -> str:
        self._report_non_text(item, index)
        return text_of(item.get("content"), None, joiner)

    def _orphan(self, item: dict[str, Any], index: int) -> None:
        key = self._output_key(item)
        if key is not None and key in self.dropped_calls:
            self._drop(index, "output of a dropped call")
            return
        if self.options.orphan_output_policy == "drop":
            self._drop(index, "tool output without its call in the history")
            return
        tool_message, *_ = self._tool_output(item, key or "")
        self.messages.append(
            {
                "role": "user",
                "content": f"Output of an earlier tool call {key or '(no call id)'}:\n"
                f"{tool_message['content']}",
            }
        )

    def run(self) -> list[ChatMessage]:
        conversation_started = False
        for index, item in enumerate(self.items):
            if index in self.consumed:
                continue
            if not isinstance(item, dict):
                self._drop(index, "not an input item object")
                continue
            kind = item.get("type")
            role = item.get("role")
            if kind == "item_reference" or (kind is None and role is None and "id" in item):
                raise BridgeError(
                    "item_reference needs server-side state; this bridge is stateless: "
                    "replay the items instead.",
                    param=self._client_path(index),
                )
            if kind in (None, "message") and isinstance(role, str):
                if role == "assistant":
                    text = text_of(item.get("content"), None)
                    if text:
                        self.block.texts.append(text)
                    self._report_non_text(item, index)
                    conversation_started = True
                    continue
                if role in _SYSTEM_ROLES:
                    self._flush()
                    self._system(item, index, leading=not conversation_started)
                    continue
                self._flush()
                conversation_started = True
                self.messages.append(
                    {"role": "user", "content": self._user_content(item.get("content"), index)}
                )
                continue
            conversation_started = True
            if kind == "reasoning":
                text = _reasoning_text(item)
                if text:
                    self.block.reasoning.append(text)
                if item.get("encrypted_content"):
                    self.removals.add(
                        (*self.removals.original_path(("input", index)), "encrypted_content"),
                        "opaque reasoning: only its readable text reaches a chat upstream",
                        benign=True,
                    )
            elif kind in _CALLS:
                self._call(item, index)
            elif kind in _OUTPUTS:
                self._flush()  # may pull this very output behind its call
                if index not in self.consumed:
                    self._orphan(item, index)
            elif kind in _HOSTED_RECORDS:
                call_id = item.get("call_id") or item.get("id")
                if isinstance(call_id, str):
                    self.dropped_calls.add(call_id)
                self._drop(index, f"{kind} record: a hosted tool the chat upstream cannot run")
            elif kind == "configuration_update":
                self._drop(index, "configuration_update: no chat equivalent", benign=True)
            elif kind in ("compaction", "compaction_trigger"):
                self._drop(
                    index,
                    "opaque compaction state lost; history before it is unavailable to this upstream",
                )
            else:
                self._drop(index, f"input item type {kind!r}: no chat equivalent")
        self._flush()
        self._trim_trailing()
        return self.messages

    def _system(self, item: dict[str, Any], index: int, *, leading: bool) -> None:
        if leading:
            text = self._system_text(item, index, "")
            if text:
                self.system.append(text)
            return
        text = self._system_text(item, index, "\n\n")
        policy = self.options.mid_system_policy
        if policy == "hoist":
            if text:
                self.system.append(text)
        elif text:
            self.messages.append(
                {"role": "system" if policy == "system" else "user", "content": text}
            )

    def _trim_trailing(self) -> None:
        if not self.messages or self.messages[-1]["role"] != "assistant":
            return
        last = self.messages[-1]
        if not last.get("content") and not last.get("tool_calls"):
            self.messages.pop()  # reasoning only: a trailing assistant message is a prefill
        elif not last.get("tool_calls"):
            LOG.warning(
                "bridge: the history ends with an assistant message; chat upstreams may treat "
                "it as a prefill to continue"
            )


def _reasoning_text(item: dict[str, Any]) -> str:
    content = item.get("content")
    if isinstance(content, list):
        texts = [
            part["text"]
            for part in content
            if isinstance(part, dict)
            and part.get("type") == "reasoning_text"
            and isinstance(part.get("text"), str)
        ]
        if any(texts):
            return "\n\n".join(texts)
    summary = item.get("summary")
    if isinstance(summary, list):
        return "\n\n".join(
            part["text"]
            for part in summary
            if isinstance(part, dict) and isinstance(part.get("text"), str)
        )
    return ""


def chat_messages(
    instructions: Any,
    items: Any,
    ctx: ResponsesChatContext,
    removals: Removals,
) -> list[ChatMessage]:
    """The chat messages for ``instructions`` and ``input`` (a string or a list of items)."""
    items = [{"role": "user", "content": items}] if isinstance(items, str) else elements(items)
    assembler = _Assembler(items, ctx, removals)
    body = assembler.run()
    texts = [instructions] if isinstance(instructions, str) and instructions else []
    texts.extend(assembler.system)
    if texts:
        body.insert(0, {"role": ctx.options.system_role, "content": "\n\n".join(texts)})
    return body
