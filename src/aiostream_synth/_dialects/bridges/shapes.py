"""Reading JSON of unknown shape: what the bridges use to read an upstream's answer or a
client's history without trusting either; and the type of a chat message they build."""

from __future__ import annotations

from collections.abc import Collection
from typing import TYPE_CHECKING, Any, TypeAlias

if TYPE_CHECKING:
    from openai.types.chat import ChatCompletionMessageParam

    #: A chat message a bridge builds: the SDK's shape, or a plain dict for one that carries
    #: what the SDK's types have no key for (an assistant message's ``reasoning_content``,
    #: which DeepSeek, vLLM and SGLang read back).
    ChatMessage: TypeAlias = ChatCompletionMessageParam | dict[str, Any]

__all__ = ["count", "elements", "obj", "text_of"]


def obj(value: Any) -> dict[str, Any]:
    """``value`` when it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def count(value: Any) -> int:
    """``value`` when it is a non-negative integer (a token count), else 0."""
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else 0


def elements(value: Any) -> list[Any]:
    """The elements of a JSON array as they are (a typed params view's list gives its raw
    items: no per-element view is built), or ``[]`` for anything else."""
    return list.copy(value) if isinstance(value, list) else []


def text_of(content: Any, kinds: Collection[str] | None = ("text",), joiner: str = "") -> str:
    """The text of message content: a string as it is; of a list of parts, the ``text`` (or a
    refusal part's ``refusal``) of each part whose ``type`` is in ``kinds`` (any type when
    ``kinds`` is None), joined with ``joiner``."""
    if isinstance(content, str):
        return content
    texts = []
    for part in elements(content):
        if isinstance(part, dict) and (kinds is None or part.get("type") in kinds):
            text = part.get("refusal") if part.get("type") == "refusal" else part.get("text")
            if isinstance(text, str):
                texts.append(text)
    return joiner.join(texts)
