"""Reasoning in a chat completion, in every spelling backends use.

First non-empty wins: ``reasoning_content`` (DeepSeek, llama.cpp, SGLang, vLLM < 0.16);
``reasoning`` as a string (vLLM >= 0.16, Ollama, OpenRouter) or an object with ``text`` /
``content``; OpenRouter's ``reasoning_details`` (encrypted entries skipped); ``thinking``; and
last ``<think>...</think>`` at the start of the content (servers run without a reasoning
parser), which is then cut from the answer text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any, Literal

__all__ = ["extract_reasoning", "reasoning_fields"]

_LEADING_THINK = re.compile(r"^\s*<think>(.*?)</think>\s*", re.DOTALL)
_CLOSE = "</think>"


def _spelled(message: Mapping[str, Any]) -> str:
    for key in ("reasoning_content", "reasoning"):
        value = message.get(key)
        if isinstance(value, str) and value:
            return value
        if key == "reasoning" and isinstance(value, dict):
            for inner in ("text", "content"):
                text = value.get(inner)
                if isinstance(text, str) and text:
                    return text
    details = message.get("reasoning_details")
    if isinstance(details, list):
        texts = []
        for entry in details:
            if not isinstance(entry, dict) or entry.get("type") == "reasoning.encrypted":
                continue
            text = entry.get("text") or entry.get("summary")
            if isinstance(text, str):
                texts.append(text)
        if any(texts):
            return "".join(texts)
    thinking = message.get("thinking")
    return thinking if isinstance(thinking, str) else ""


def extract_reasoning(
    message: Mapping[str, Any],
    content: str,
    think_tags: Literal["leading", "leading_or_openless", "off"] = "leading",
) -> tuple[str, str]:
    """``(reasoning, content)``: the message's reasoning text, and its answer text with a
    leading think block removed when that was where the reasoning came from."""
    reasoning = _spelled(message)
    if reasoning or think_tags == "off" or not content:
        return reasoning, content
    match = _LEADING_THINK.match(content)
    if match:
        return match.group(1).strip(), content[match.end() :]
    if think_tags == "leading_or_openless" and _CLOSE in content and "<think>" not in content:
        head, _, tail = content.partition(_CLOSE)
        return head.strip(), tail.lstrip()
    return "", content


def reasoning_fields(
    text: str | None,
    out_field: Literal["reasoning_content", "reasoning", "both", "none"],
) -> dict[str, str]:
    """The keys that carry ``text`` on an assistant chat message (``{}`` for none)."""
    if text is None or out_field == "none":
        return {}
    if out_field == "both":
        return {"reasoning_content": text, "reasoning": text}
    return {out_field: text}
