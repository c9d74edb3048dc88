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

import math
import re
from typing import Any

from aiostream_synth._dialects.base import EmbeddedAnswer, EmbeddedCall, EmbeddedTool
from aiostream_synth._dialects.registry import spec_for
from aiostream_synth._engine import tick
from aiostream_synth._proxy.config import EMBEDDED_MODEL
from aiostream_synth._serving.pipeline import BackendCall
from aiostream_synth._wire.ids import random_hex

__all__ = ["EMBEDDED_MODEL", "EmbeddedBackend", "EmbeddedError", "parse_directives"]

_DIRECTIVE = re.compile(r"\[(delay|tool|reasoning|error|incomplete|usage-nulls)(?::([^\]]*))?\]")


class EmbeddedError(Exception):
    """A scripted failure (``[error:CODE]``); carries ``status_code`` like an upstream error."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message


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
    """The built-in model, callable as a :data:`CompletionBackend`; each dialect reads its
    requests and shapes its answers (its spec's ``embedded`` hooks)."""

    def __init__(self, model: str = EMBEDDED_MODEL) -> None:
        self.model = model

    async def __call__(self, call: BackendCall) -> Any:
        # Everything the answer needs is read before the simulated wait, which then holds
        # nothing of the request (as a real upstream call holds only the bytes it sent).
        dialect, params = call.dialect, call.params
        del call
        replies = spec_for(dialect).embedded
        if replies is None:
            raise EmbeddedError(
                501,
                f"embedded backend: the {dialect} dialect does not say how the embedded model "
                "answers it (its spec's embedded hooks); give --upstream.",
            )
        text, tool_result = replies.prompt(params)
        clean, directives = parse_directives(text)
        if tool_result is not None:  # (its text is empty: no directives)
            answer, directives = f"The tool returned: {tool_result[:200]}", {}
        else:
            answer = clean or "(empty message)"
        key = random_hex(24)  # ids unique per answer, as a real model's
        made = None
        if "tool" in directives:
            name, _, explicit = directives["tool"].strip().partition(" ")
            tool = _find_tool(replies.tools(params), name)
            if tool is None:
                answer = f"There is no tool named {name!r} in this request."
            else:
                made = _call(tool, key, explicit.strip() or None, clean)
        model = str(params.get("model") or self.model)
        del params
        if "delay" in directives:
            # The ticker's sleep: thousands of simulated turns waiting at once share timers.
            await tick.sleep(_seconds(directives["delay"]))
        if "error" in directives:
            status = _status(directives["error"])
            hint = " Please try again in 1s." if status == 429 else ""
            raise EmbeddedError(status, f"embedded backend: simulated HTTP {status}.{hint}")
        return replies.reply(
            EmbeddedAnswer(
                model=model,
                key=key,
                text=answer,
                prompt=clean,
                call=made,
                reasoning="reasoning" in directives,
                incomplete="incomplete" in directives,
                usage_nulls="usage-nulls" in directives,
                prompt_tokens=max(len(clean.split()), 1),
                completion_tokens=max(len(answer.split()), 1),
            )
        )


def _find_tool(tools: list[EmbeddedTool], name: str) -> EmbeddedTool | None:
    """The tool ``name`` refers to: its flat name, or the short name of a namespaced tool."""
    for tool in tools:
        if name and (tool.name == name or tool.name.endswith("__" + name)):
            return tool
    return None


def _call(tool: EmbeddedTool, key: str, explicit: str | None, prompt: str) -> EmbeddedCall:
    """The call of ``tool``: the explicit arguments (or input) the directive gave, else an
    example valid for its schema (a custom tool's input: the prompt)."""
    if tool.kind == "custom":
        arguments = explicit or prompt or "example"
    else:
        arguments = explicit or _json(_example(tool.schema or {"type": "object"}))
    return EmbeddedCall(key, tool.name, tool.kind, arguments)


def _json(value: Any) -> str:
    from aiostream_synth._wire.json import dumps

    return dumps(value).decode()
