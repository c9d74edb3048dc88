"""The embedded default backend: a model that echoes the last user message (ids are random).

So that ``aiostream-synth serve`` works with nothing else running. Bracketed directives in that
message script the answer:

================  ====================================================================
``[delay:30]``    answer after 30 seconds (0 to 86400; anything else is a 400)
``[tool:NAME]``   call the request's tool NAME (flat name, or the short name of a
                  namespaced tool), with arguments valid for its JSON schema; a custom
                  tool gets a text input. ``[tool:NAME {"cmd": "ls"}]`` gives the
                  arguments (for a custom tool: the text after the name) explicitly
``[reasoning]``   add a reasoning item (Responses) / ``reasoning_content`` (chat) / a
                  signed thinking block (Anthropic)
``[error:429]``   fail with that HTTP status (400 to 599; anything else is a 400)
``[incomplete]``  status ``incomplete`` / ``finish_reason: length`` / ``stop_reason:
                  max_tokens``
``[usage-nulls]`` usage whose detail counters are ``null``
================  ====================================================================

A request whose last input is a tool result gets a final text answer, so agent loops end.
It answers all three built-in APIs: Chat Completions, Responses and Anthropic Messages (Claude
Code's ``<system-reminder>`` text blocks are not echoed); a registered dialect through its
spec's ``embedded`` hooks (the echo, ``[delay]`` and ``[error]``), else with a 501.
"""

from __future__ import annotations

import json
import math
import re
import time
from typing import Any

from aiostream_synth._dialects.bridges.shapes import text_of
from aiostream_synth._dialects.names import BUILTIN_DIALECTS
from aiostream_synth._dialects.registry import spec_for
from aiostream_synth._engine import tick
from aiostream_synth._proxy.config import EMBEDDED_MODEL
from aiostream_synth._serving.pipeline import BackendCall
from aiostream_synth._wire.ids import random_hex

__all__ = ["EMBEDDED_MODEL", "EmbeddedBackend", "EmbeddedError", "parse_directives"]

#: The dialects this model answers by its own code; any other through its spec's hooks.
_OWN_DIALECTS = frozenset(BUILTIN_DIALECTS)
_DIRECTIVE = re.compile(r"\[(delay|tool|reasoning|error|incomplete|usage-nulls)(?::([^\]]*))?\]")
_TEXT_PARTS = ("text", "input_text", "output_text")
_TOOL_RESULTS = frozenset({"function_call_output", "custom_tool_call_output"})


class EmbeddedError(Exception):
    """A scripted failure (``[error:CODE]``); carries ``status_code`` like an upstream error."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message


def _text(content: Any) -> str:
    return text_of(content, _TEXT_PARTS)


def parse_directives(text: str) -> tuple[str, dict[str, str]]:
    """``(text without directives, {name: argument})``."""
    found = {name: arg or "" for name, arg in _DIRECTIVE.findall(text)}
    return " ".join(_DIRECTIVE.sub(" ", text).split()), found


#: The longest ``[delay]``, seconds (a day): a longer one is a typo, and the timer's own range
#: ends well before ``1e308``.
MAX_DELAY_S = 86_400.0
#: The most values a ``[tool]`` call's generated arguments may hold: the example is built on
#: the event loop, so a schema asking for 2000 arrays of 2000 must be refused, not built.
MAX_EXAMPLE_VALUES = 10_000


def _seconds(argument: str) -> float:
    """``[delay:N]``'s argument: seconds from 0 to :data:`MAX_DELAY_S` (empty is 0)."""
    try:
        seconds = float(argument or 0)
    except ValueError:
        seconds = math.nan
    if not 0 <= seconds <= MAX_DELAY_S:
        raise EmbeddedError(
            400, f"embedded backend: [delay:{argument}] needs seconds from 0 to {MAX_DELAY_S:g}."
        )
    return seconds


def _status(argument: str) -> int:
    """``[error:N]``'s argument: an HTTP error status, 400 to 599 (empty is 500). A backend
    failure with a 1xx would be sent as the final status of the answer."""
    try:
        status = int(argument or 500)
    except ValueError:
        status = 0
    if not 400 <= status <= 599:
        raise EmbeddedError(
            400, f"embedded backend: [error:{argument}] needs an error status from 400 to 599."
        )
    return status


class _TooLarge(Exception):
    """The schema's example would exceed :data:`MAX_EXAMPLE_VALUES`."""


def _example(schema: Any) -> Any:
    """A value valid for a (simple) JSON schema: required properties, first enum value...; an
    :class:`EmbeddedError` (400) when it would hold more than :data:`MAX_EXAMPLE_VALUES`."""
    try:
        return _ExampleBuilder().build(schema)
    except _TooLarge:
        raise EmbeddedError(
            400,
            "embedded backend: the tool's schema needs arguments of more than "
            f"{MAX_EXAMPLE_VALUES} values; give them explicitly ([tool:NAME {{...}}]).",
        ) from None


class _ExampleBuilder:
    """Builds one example, counting the values it made against the bound."""

    def __init__(self) -> None:
        self.left = MAX_EXAMPLE_VALUES

    def build(self, schema: Any) -> Any:
        self.left -= 1
        if self.left < 0:
            raise _TooLarge
        if not isinstance(schema, dict):
            return {}
        if "const" in schema:
            return schema["const"]
        if schema.get("enum"):
            return schema["enum"][0]
        for key in ("anyOf", "oneOf", "allOf"):
            if schema.get(key):
                return self.build(schema[key][0])
        kind = schema.get("type")
        if isinstance(kind, list):
            kind = next((k for k in kind if k != "null"), "null")
        if kind == "object" or (kind is None and "properties" in schema):
            properties = schema.get("properties") or {}
            return {
                name: self.build(properties.get(name, {})) for name in schema.get("required") or ()
            }
        if kind == "array":
            count = _count(schema.get("minItems"))
            if count > self.left:
                raise _TooLarge
            return [self.build(schema.get("items", {})) for _ in range(count)]
        return {"string": "example", "integer": 0, "number": 0, "boolean": False, "null": None}.get(
            kind if isinstance(kind, str) else "", {}
        )


def _count(value: Any) -> int:
    """``minItems`` as a count (a schema's odd value, ``"3"`` or ``2.0``, read leniently)."""
    try:
        return max(0, int(value or 0))
    except (TypeError, ValueError, OverflowError):
        return 0


class EmbeddedBackend:
    """The built-in model, callable as a :data:`CompletionBackend`."""

    def __init__(self, model: str = EMBEDDED_MODEL) -> None:
        self.model = model

    async def __call__(self, call: BackendCall) -> Any:
        # Everything the answer needs is read before the simulated wait, which then holds
        # nothing of the request (as a real upstream call holds only the bytes it sent).
        dialect, params = call.dialect, call.params
        del call
        if dialect not in _OWN_DIALECTS:
            return await self._through_hooks(dialect, params)
        if dialect == "chat":
            text, tool_result = self._chat_input(params)
        elif dialect == "anthropic":
            text, tool_result = self._anthropic_input(params)
        else:
            text, tool_result = self._responses_input(params)
        clean, directives = parse_directives(text)
        if tool_result is not None:  # (its text is empty: no directives)
            answer, directives = f"The tool returned: {tool_result[:200]}", {}
        else:
            answer = clean or "(empty message)"
        tool = None
        if "tool" in directives:
            name, _, explicit = directives["tool"].strip().partition(" ")
            directives["tool"] = name
            tool = self._find_tool(params.get("tools"), name, dialect)
            if tool is not None:
                tool["explicit"] = explicit.strip() or None
        model = str(params.get("model") or self.model)
        del params
        if "delay" in directives:
            # The ticker's sleep: thousands of simulated turns waiting at once share timers.
            await tick.sleep(_seconds(directives["delay"]))
        if "error" in directives:
            status = _status(directives["error"])
            hint = " Please try again in 1s." if status == 429 else ""
            raise EmbeddedError(status, f"embedded backend: simulated HTTP {status}.{hint}")
        if dialect == "chat":
            return self._chat(model, answer, clean, directives, tool)
        if dialect == "anthropic":
            return self._anthropic(model, answer, clean, directives, tool)
        return self._responses(model, answer, clean, directives, tool)

    async def _through_hooks(self, dialect: str, params: dict[str, Any]) -> Any:
        """A dialect the model does not know itself, read and answered by its spec's
        ``embedded`` hooks: the echo, ``[delay]`` and ``[error]`` (no tools, no reasoning)."""
        replies = spec_for(dialect).embedded
        if replies is None:
            raise EmbeddedError(
                501,
                f"embedded backend: the {dialect} dialect does not say how the embedded model "
                "answers it (its spec's embedded hooks); give --upstream.",
            )
        clean, directives = parse_directives(replies.prompt(params))
        model = str(params.get("model") or self.model)
        if "delay" in directives:
            await tick.sleep(_seconds(directives["delay"]))
        if "error" in directives:
            status = _status(directives["error"])
            raise EmbeddedError(status, f"embedded backend: simulated HTTP {status}.")
        return replies.reply(params, model=model, text=clean or "(empty message)")

    # -- reading the request ----------------------------------------------------------------
    @staticmethod
    def _chat_input(params: dict[str, Any]) -> tuple[str, str | None]:
        messages = [m for m in params.get("messages") or () if isinstance(m, dict)]
        if messages and messages[-1].get("role") == "tool":
            return "", _text(messages[-1].get("content"))
        users = [m for m in messages if m.get("role") == "user"]
        return (_text(users[-1].get("content")) if users else ""), None

    @staticmethod
    def _responses_input(params: dict[str, Any]) -> tuple[str, str | None]:
        items = params.get("input")
        if isinstance(items, str):
            return items, None
        items = [i for i in items or () if isinstance(i, dict)]
        if items and items[-1].get("type") in _TOOL_RESULTS:
            output = items[-1].get("output")
            return "", output if isinstance(output, str) else str(output)
        users = [i for i in items if i.get("role") == "user" and i.get("type") in (None, "message")]
        return (_text(users[-1].get("content")) if users else ""), None

    @staticmethod
    def _anthropic_input(params: dict[str, Any]) -> tuple[str, str | None]:
        messages = [m for m in params.get("messages") or () if isinstance(m, dict)]
        if not messages or messages[-1].get("role") != "user":
            return "", None
        content = messages[-1].get("content")
        if isinstance(content, str):
            return content, None
        blocks = [b for b in content or () if isinstance(b, dict)]
        results = [b for b in blocks if b.get("type") == "tool_result"]
        if results:
            return "", _text(results[-1].get("content"))
        texts = [
            b
            for b in blocks
            if b.get("type") == "text"
            and not str(b.get("text", "")).startswith("<system-reminder>")
        ]
        return _text(texts), None

    @staticmethod
    def _find_tool(tools: Any, name: str | None, dialect: str) -> dict[str, Any] | None:
        """``{"name", "kind": "function"|"custom", "schema"}`` of the tool ``name`` refers to."""
        for tool in tools or ():
            if not isinstance(tool, dict):
                continue
            kind = tool.get("type")
            if dialect == "anthropic":  # custom tools: {name, input_schema}, type optional
                if kind not in (None, "custom") or tool.get("name") != name:
                    continue
                return {"name": name, "kind": "function", "schema": tool.get("input_schema")}
            spec = (
                tool.get(kind, {}) if dialect == "chat" and kind in ("function", "custom") else tool
            )
            flat = spec.get("name") if isinstance(spec, dict) else None
            if (
                kind in ("function", "custom")
                and isinstance(flat, str)
                and name
                and (flat == name or flat.endswith("__" + name))
            ):
                return {"name": flat, "kind": kind, "schema": spec.get("parameters")}
        return None

    # -- answers ---------------------------------------------------------------------------------
    @staticmethod
    def _usage(prompt: str, answer: str, nulls: bool, dialect: str) -> dict[str, Any]:
        p, c = max(len(prompt.split()), 1), max(len(answer.split()), 1)
        if dialect == "chat":
            usage: dict[str, Any] = {
                "prompt_tokens": p,
                "completion_tokens": c,
                "total_tokens": p + c,
            }
            if nulls:
                usage["prompt_tokens_details"] = {"cached_tokens": None}
                usage["completion_tokens_details"] = {"reasoning_tokens": None}
            return usage
        usage = {"input_tokens": p, "output_tokens": c, "total_tokens": p + c}
        usage["input_tokens_details"] = {"cached_tokens": None if nulls else 0}
        usage["output_tokens_details"] = {"reasoning_tokens": None if nulls else 0}
        return usage

    def _chat(
        self,
        model: str,
        answer: str,
        prompt: str,
        directives: dict[str, str],
        tool: dict[str, Any] | None,
    ) -> dict[str, Any]:
        key = random_hex(24)  # ids unique per answer, as a real model's
        message: dict[str, Any] = {"role": "assistant", "content": answer}
        finish = "length" if "incomplete" in directives else "stop"
        if "reasoning" in directives:
            message["reasoning_content"] = f"The user said: {prompt}"
        if tool is not None:
            message["content"] = None
            if tool["kind"] == "custom":
                call = {
                    "id": f"call_{key}",
                    "type": "custom",
                    "custom": {
                        "name": tool["name"],
                        "input": tool["explicit"] or prompt or "example",
                    },
                }
            else:
                arguments = _arguments(tool)
                call = {
                    "id": f"call_{key}",
                    "type": "function",
                    "function": {"name": tool["name"], "arguments": arguments},
                }
            message["tool_calls"] = [call]
            finish = "tool_calls"
        elif "tool" in directives:
            message["content"] = f"There is no tool named {directives['tool']!r} in this request."
        return {
            "id": f"chatcmpl-{key}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": model,
            "choices": [
                {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
            ],
            "usage": self._usage(prompt, answer, "usage-nulls" in directives, "chat"),
        }

    def _responses(
        self,
        model: str,
        answer: str,
        prompt: str,
        directives: dict[str, str],
        tool: dict[str, Any] | None,
    ) -> dict[str, Any]:
        key = random_hex(24)  # ids unique per answer, as a real model's
        output: list[dict[str, Any]] = []
        if "reasoning" in directives:
            output.append(
                {
                    "type": "reasoning",
                    "id": f"rs_{key}",
                    "summary": [{"type": "summary_text", "text": f"The user said: {prompt}"}],
                }
            )
        if tool is not None:
            if tool["kind"] == "custom":
                output.append(
                    {
                        "type": "custom_tool_call",
                        "id": f"ctc_{key}",
                        "call_id": f"call_{key}",
                        "name": tool["name"],
                        "input": tool["explicit"] or prompt or "example",
                    }
                )
            else:
                output.append(
                    {
                        "type": "function_call",
                        "id": f"fc_{key}",
                        "call_id": f"call_{key}",
                        "name": tool["name"],
                        "arguments": _arguments(tool),
                        "status": "completed",
                    }
                )
        else:
            if "tool" in directives:
                answer = f"There is no tool named {directives['tool']!r} in this request."
            output.append(
                {
                    "type": "message",
                    "id": f"msg_{key}",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": answer, "annotations": []}],
                }
            )
        incomplete = "incomplete" in directives
        return {
            "id": f"resp_{key}",
            "object": "response",
            "created_at": int(time.time()),
            "model": model,
            "status": "incomplete" if incomplete else "completed",
            "incomplete_details": {"reason": "max_output_tokens"} if incomplete else None,
            "error": None,
            "output": output,
            "parallel_tool_calls": True,
            "tool_choice": "auto",
            "tools": [],
            "usage": self._usage(prompt, answer, "usage-nulls" in directives, "responses"),
            # When the answer was ready (after any [delay]): lets load tests time the rest.
            "completed_at": None if incomplete else time.time(),
        }

    def _anthropic(
        self,
        model: str,
        answer: str,
        prompt: str,
        directives: dict[str, str],
        tool: dict[str, Any] | None,
    ) -> dict[str, Any]:
        key = random_hex(24)  # ids unique per answer, as a real model's
        content: list[dict[str, Any]] = []
        if "reasoning" in directives:
            thinking = f"The user said: {prompt}"
            signature = "sig_" + random_hex(24)
            content.append({"type": "thinking", "thinking": thinking, "signature": signature})
        stop_reason = "max_tokens" if "incomplete" in directives else "end_turn"
        if tool is not None:
            arguments = json.loads(_arguments(tool))
            content.append(
                {"type": "tool_use", "id": f"toolu_{key}", "name": tool["name"], "input": arguments}
            )
            stop_reason = "tool_use"
        else:
            if "tool" in directives:
                answer = f"There is no tool named {directives['tool']!r} in this request."
            content.append({"type": "text", "text": answer})
        p, c = max(len(prompt.split()), 1), max(len(answer.split()), 1)
        nulls = "usage-nulls" in directives
        return {
            "id": f"msg_{key}",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": content,
            "stop_reason": stop_reason,
            "stop_sequence": None,
            "usage": {
                "input_tokens": p,
                "output_tokens": c,
                "cache_creation_input_tokens": None if nulls else 0,
                "cache_read_input_tokens": None if nulls else 0,
            },
        }


def _json(value: Any) -> str:
    from aiostream_synth._wire.json import dumps

    return dumps(value).decode()


def _arguments(tool: dict[str, Any]) -> str:
    """Explicit JSON arguments when the directive gave them, else an example for the schema."""
    explicit = tool.get("explicit")
    if explicit:
        return str(explicit)
    return _json(_example(tool["schema"] or {"type": "object"}))
