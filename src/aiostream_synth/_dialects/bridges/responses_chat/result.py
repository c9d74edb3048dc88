"""A chat completion as the Responses ``Response`` the client asked for.

Output items come in the order reasoning, message, calls. A call to a tool the client declared
``custom`` comes back as ``custom_tool_call`` with its raw input unwrapped (the model may have
sent ``{"input": ...}``, ``{"patch": ...}`` or the bare text); a namespaced tool gets its
``namespace`` and short name again; a call id that is missing or already used in the
conversation is replaced by a fresh one. ``finish_reason`` picks the status; usage counters are
always integers. The envelope echoes the client's request (its model, its tools as it sent
them), not the upstream's.
"""

from __future__ import annotations

import logging
import math
import time
from typing import Any

import orjson

from aiostream_synth._dialects.bridges.chat_reasoning import extract_reasoning
from aiostream_synth._dialects.bridges.failures import upstream_result_failure
from aiostream_synth._dialects.bridges.responses_chat.context import ResponsesChatContext
from aiostream_synth._dialects.bridges.responses_chat.tools import LOCAL_SHELL_TOOL
from aiostream_synth._dialects.bridges.shapes import count, obj, text_of
from aiostream_synth._wire.coerce import as_json_dict
from aiostream_synth._wire.errors import InvalidResultError
from aiostream_synth._wire.ids import random_hex

__all__ = ["chat_to_responses_result", "empty_response"]

LOG = logging.getLogger("aiostream_synth.bridge")
_WHAT = "chat completion from the upstream"
_COMPLETED_REASONS = frozenset(
    {"stop", "tool_calls", "function_call", "eos", "end_turn", "stop_sequence", None}
)
_UNWRAP_KEYS = ("input", "patch", "content", "text")


def _arguments(value: Any) -> str:
    if isinstance(value, str):
        return value or "{}"
    if value is None:
        return "{}"
    return orjson.dumps(value).decode()


def _unwrap(arguments: Any) -> str:
    """A bridged custom tool's raw input from the arguments the model wrote."""
    if isinstance(arguments, dict):
        parsed: Any = arguments
    elif isinstance(arguments, str):
        try:
            parsed = orjson.loads(arguments)
        except orjson.JSONDecodeError:
            return arguments  # the bare text (models often send the patch itself)
    else:
        return ""
    if isinstance(parsed, str):
        return parsed
    if isinstance(parsed, dict):
        for key in _UNWRAP_KEYS:
            if isinstance(parsed.get(key), str):
                return str(parsed[key])
        strings = [v for v in parsed.values() if isinstance(v, str)]
        if len(parsed) == 1 and strings:
            return strings[0]
    return arguments if isinstance(arguments, str) else orjson.dumps(arguments).decode()


def _parses(arguments: str) -> bool:
    try:
        orjson.loads(arguments)
    except orjson.JSONDecodeError:
        return False
    return True


class _Calls:
    """Call items for the upstream's tool calls, with unique, fresh call ids."""

    def __init__(self, ctx: ResponsesChatContext, truncated: bool) -> None:
        self.ctx = ctx
        self.truncated = truncated
        self.used: set[str] = set()
        self.items: list[dict[str, Any]] = []

    def _call_id(self, raw: Any) -> str:
        if (
            isinstance(raw, str)
            and raw
            and raw not in self.used
            and raw not in self.ctx.history_call_ids
        ):
            call_id = raw
        else:
            call_id = "call_" + random_hex(24)
        self.used.add(call_id)
        return call_id

    def add(self, call: Any) -> None:
        if not isinstance(call, dict):
            return
        ctx = self.ctx
        call_id = self._call_id(call.get("id"))
        if call.get("type") == "custom" and isinstance(call.get("custom"), dict):
            custom = call["custom"]
            flat = ctx.names.original(str(custom.get("name") or ""), ctx.ns_map)
            self._custom(call_id, flat, str(custom.get("input") or ""))
            return
        function = obj(call.get("function"))
        flat = ctx.names.original(str(function.get("name") or ""), ctx.ns_map)
        arguments = function.get("arguments")
        if flat in ctx.custom_names:
            self._custom(call_id, flat, _unwrap(arguments))
        elif flat == LOCAL_SHELL_TOOL and ctx.local_shell:
            self._local_shell(call_id, arguments)
        else:
            text = _arguments(arguments)
            item: dict[str, Any] = {
                "type": "function_call",
                "id": "fc_" + random_hex(),
                "call_id": call_id,
                **self._name(flat),
                "arguments": text,
                "status": "incomplete" if self.truncated and not _parses(text) else "completed",
            }
            self.items.append(item)

    def _name(self, flat: str) -> dict[str, str]:
        namespace, short = self.ctx.ns_map.get(flat, (None, flat))
        return {"name": short} if namespace is None else {"name": short, "namespace": namespace}

    def _custom(self, call_id: str, flat: str, text: str) -> None:
        self.items.append(
            {
                "type": "custom_tool_call",
                "id": "ctc_" + random_hex(),
                "call_id": call_id,
                **self._name(flat),
                "input": text,
            }
        )

    def _local_shell(self, call_id: str, arguments: Any) -> None:
        try:
            parsed = orjson.loads(arguments) if isinstance(arguments, str) else arguments
        except orjson.JSONDecodeError:
            parsed = {}
        parsed = obj(parsed)
        command = parsed.get("command")
        if isinstance(command, str):
            command = [command]
        action: dict[str, Any] = {
            "type": "exec",
            "command": [str(part) for part in command] if isinstance(command, list) else [],
            "env": {},
        }
        if isinstance(parsed.get("workdir"), str):
            action["working_directory"] = parsed["workdir"]
        if isinstance(parsed.get("timeout_ms"), int):
            action["timeout_ms"] = parsed["timeout_ms"]
        self.items.append(
            {
                "type": "local_shell_call",
                "id": "lsh_" + random_hex(),
                "call_id": call_id,
                "status": "completed",
                "action": action,
            }
        )


def _details(usage: dict[str, Any], key: str) -> dict[str, Any]:
    details = usage.get(key)
    return obj(details)


def _usage(
    completion: dict[str, Any], ctx: ResponsesChatContext, output_chars: int
) -> dict[str, Any]:
    usage = completion.get("usage")
    usage = obj(usage)
    prompt = count(usage.get("prompt_tokens"))
    output = count(usage.get("completion_tokens"))
    if ctx.options.estimate_usage:
        prompt = prompt or math.ceil(ctx.prompt_chars() / 4)
        output = output or math.ceil(output_chars / 4)
    prompt_details = _details(usage, "prompt_tokens_details")
    cached = count(prompt_details.get("cached_tokens")) or count(
        usage.get("prompt_cache_hit_tokens")
    )
    total = usage.get("total_tokens")
    if prompt >= 2048 and prompt & (prompt - 1) == 0:  # a power of two: a context window?
        estimated_prompt = math.ceil(ctx.prompt_chars() / 4)
        if prompt < estimated_prompt / 2:
            LOG.warning(
                "bridge: upstream probably truncated the prompt (context window): it counted %d "
                "prompt tokens for about %d",
                prompt,
                estimated_prompt,
            )
    return {
        "input_tokens": prompt,
        "input_tokens_details": {
            "cached_tokens": cached,
            "cache_write_tokens": count(prompt_details.get("cache_write_tokens")),
        },
        "output_tokens": output,
        "output_tokens_details": {
            "reasoning_tokens": count(
                _details(usage, "completion_tokens_details").get("reasoning_tokens")
            )
        },
        "total_tokens": count(total) if count(total) else prompt + output,
    }


def _status(reason: Any, ctx: ResponsesChatContext) -> tuple[str, dict[str, str] | None]:
    if reason in _COMPLETED_REASONS:
        return "completed", None
    if reason == "length":
        status = "completed" if ctx.options.length_status == "completed" else "incomplete"
        return status, {"reason": "max_output_tokens"}
    if reason == "content_filter":
        return "incomplete", {"reason": "content_filter"}
    LOG.warning("bridge: unknown finish_reason %r from the upstream, taken as completed", reason)
    return "completed", None


def _logprobs(choice: dict[str, Any]) -> list[dict[str, Any]]:
    logprobs = choice.get("logprobs")
    content = logprobs.get("content") if isinstance(logprobs, dict) else None
    out = []
    for entry in content if isinstance(content, list) else ():
        if not isinstance(entry, dict):
            continue
        out.append(
            {
                "token": entry.get("token", ""),
                "bytes": entry.get("bytes") or [],
                "logprob": entry.get("logprob", 0.0),
                "top_logprobs": [
                    {
                        "token": top.get("token", ""),
                        "bytes": top.get("bytes") or [],
                        "logprob": top.get("logprob", 0.0),
                    }
                    for top in entry.get("top_logprobs") or ()
                    if isinstance(top, dict)
                ],
            }
        )
    return out


def _annotations(message: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for annotation in message.get("annotations") or ():
        citation = annotation.get("url_citation") if isinstance(annotation, dict) else None
        if isinstance(citation, dict):
            out.append(
                {
                    "type": "url_citation",
                    **{k: citation.get(k) for k in ("start_index", "end_index", "url", "title")},
                }
            )
    return out


def _envelope(ctx: ResponsesChatContext, status: str) -> dict[str, Any]:
    echo = ctx.echo
    return {
        "id": "resp_" + random_hex(),
        "object": "response",
        "created_at": ctx.created_at,
        "completed_at": time.time(),
        "status": status,
        "error": None,
        "incomplete_details": None,
        "model": echo.get("model", ""),
        "instructions": echo.get("instructions"),
        "output": [],
        "tools": echo.get("tools", []),
        "tool_choice": echo.get("tool_choice", "auto"),
        "parallel_tool_calls": echo.get("parallel_tool_calls", True),
        "reasoning": echo.get("reasoning"),
        "text": echo.get("text", {"format": {"type": "text"}}),
        "truncation": echo.get("truncation", "disabled"),
        "metadata": echo.get("metadata", {}),
        "previous_response_id": None,
        "conversation": None,
        "prompt": None,
        "background": False,
        **{
            key: echo[key]
            for key in (
                "temperature",
                "top_p",
                "max_output_tokens",
                "top_logprobs",
                "user",
                "safety_identifier",
                "prompt_cache_key",
                "prompt_cache_retention",
            )
            if key in echo
        },
    }


def empty_response(ctx: ResponsesChatContext) -> dict[str, Any]:
    """The answer to an empty probe request (no input, a tiny token limit), made locally."""
    response = _envelope(ctx, "completed")
    response["output"] = [_message_item("", [], None, "completed")]
    response["usage"] = _usage({}, ctx, 0)
    return response


def _message_item(
    text: str, annotations: list[dict[str, Any]], logprobs: list[dict[str, Any]] | None, status: str
) -> dict[str, Any]:
    part: dict[str, Any] = {"type": "output_text", "text": text, "annotations": annotations}
    if logprobs is not None:
        part["logprobs"] = logprobs
    return {
        "type": "message",
        "id": "msg_" + random_hex(),
        "role": "assistant",
        "status": status,
        "content": [part],
    }


def chat_to_responses_result(completion: Any, ctx: ResponsesChatContext) -> dict[str, Any]:
    """The Responses ``Response`` (a dict) for the upstream's chat completion.

    Raises :class:`~aiostream_synth.BackendError` (502) for a 200 answer that is a failure
    (an ``error`` body, no choices, ``finish_reason: "error"``) and
    :class:`~aiostream_synth.errors.InvalidResultError` for one that is not a completion at all.
    """
    data = as_json_dict(completion, InvalidResultError, _WHAT)
    error = data.get("error")
    if error:
        message = error.get("message") if isinstance(error, dict) else str(error)
        raise upstream_result_failure(f"the upstream answered with an error: {message}")
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices:
        raise upstream_result_failure("the upstream's answer has no choices")
    if len(choices) > 1:
        LOG.warning(
            "bridge: the upstream returned %d choices; only the first is used", len(choices)
        )
    choice = choices[0]
    if not isinstance(choice, dict) or not isinstance(choice.get("message"), dict):
        raise InvalidResultError(_WHAT, ("choices", 0, "message"), "expected a message object")
    reason = choice.get("finish_reason")
    if reason == "error":
        raise upstream_result_failure("the upstream's generation failed (finish_reason 'error')")
    message = choice["message"]
    options = ctx.options
    reasoning, text = extract_reasoning(
        message, text_of(message.get("content"), ("text", "output_text")), options.think_tags
    )
    status, incomplete = _status(reason, ctx)
    output: list[dict[str, Any]] = []
    if reasoning:
        item: dict[str, Any] = {
            "type": "reasoning",
            "id": "rs_" + random_hex(),
            "status": "completed",
            "summary": [],
        }
        if options.reasoning_item_style in ("summary", "both"):
            item["summary"] = [{"type": "summary_text", "text": reasoning}]
        if options.reasoning_item_style in ("content", "both"):
            item["content"] = [{"type": "reasoning_text", "text": reasoning}]
        output.append(item)
    calls = _Calls(ctx, truncated=reason == "length")
    for call in message.get("tool_calls") or ():
        calls.add(call)
    legacy = message.get("function_call")
    if isinstance(legacy, dict) and not message.get("tool_calls"):
        calls.add({"type": "function", "function": legacy})
    refusal = message.get("refusal")
    if message.get("audio"):
        LOG.warning("bridge: the upstream's audio answer has no Responses item; dropped")
    message_status = "incomplete" if status == "incomplete" else "completed"
    if (
        not text
        and not refusal
        and reasoning
        and not calls.items
        and options.reasoning_only == "promote"
    ):
        text = reasoning
    if text or refusal or not (calls.items or reasoning):
        msg = _message_item(
            text, _annotations(message), _logprobs(choice) if ctx.logprobs else None, message_status
        )
        if refusal:
            if not text:
                msg["content"] = []
            msg["content"].append({"type": "refusal", "refusal": str(refusal)})
        output.append(msg)
    output.extend(calls.items)
    response = _envelope(ctx, status)
    response["incomplete_details"] = incomplete
    response["output"] = output
    chars = len(text) + len(reasoning)
    if options.estimate_usage:
        chars += sum(len(orjson.dumps(item)) for item in calls.items)
    response["usage"] = _usage(data, ctx, chars)
    if isinstance(data.get("service_tier"), str):
        response["service_tier"] = data["service_tier"]
    return response
