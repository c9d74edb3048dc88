"""Usage objects on the wire: every counter an integer, never ``null`` (decisions P5, P10).

A Codex turn fails to parse ``response.completed`` when a single counter is ``null`` and then
re-runs the whole generation; and the openai SDK's own models require counters that a backend
may not report (openai 3.57 made ``input_tokens_details.cache_write_tokens`` required). So the
required counters are read from the *installed* SDK's usage models, not from a hand list:

* Responses (``ResponseUsage``): every required integer, at any depth, is filled with 0 when it
  is missing or ``null`` (a missing details object is created); ``total_tokens`` defaults to
  ``input_tokens + output_tokens``;
* Chat (``CompletionUsage``): the same for its required counters; the optional details objects
  are not invented, but a present ``null`` counter in them becomes 0.

Any other ``*_tokens`` key that is present and ``null`` becomes 0 too. The argument is never
mutated; a dict that needs no change is returned as it is.

The SDK's usage models are read on the first usage object filled, not at import: a program that
imports only the synthesis functions loads no SDK until it synthesizes.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from pydantic import BaseModel

__all__ = ["required_counters", "warm_usage", "wire_chat_usage", "wire_responses_usage"]

#: {counter: None} for an integer leaf, {details: {...}} for a required nested model.
Counters = dict[str, "Counters | None"]


def required_counters(model: type[BaseModel]) -> Counters:
    """The required integer fields of a usage model, and of its required nested models."""
    from pydantic import BaseModel

    tree: Counters = {}
    for name, info in model.model_fields.items():
        if not info.is_required():
            continue
        annotation = info.annotation
        if annotation is int:
            tree[name] = None
        elif isinstance(annotation, type) and issubclass(annotation, BaseModel):
            tree[name] = required_counters(annotation)
    return tree


@dataclass(frozen=True, slots=True)
class _Plan:
    """A counter tree compiled for speed: integer leaves, then required nested objects."""

    leaves: tuple[str, ...]
    nested: tuple[tuple[str, _Plan], ...]
    #: leaf -> the two leaves it defaults to the sum of (``total_tokens``)
    sums: tuple[tuple[str, str, str], ...] = ()

    @classmethod
    def of(cls, tree: Counters, sums: tuple[tuple[str, str, str], ...] = ()) -> _Plan:
        return cls(
            tuple(key for key, sub in tree.items() if sub is None),
            tuple((key, cls.of(sub)) for key, sub in tree.items() if sub is not None),
            sums,
        )

    def zeros(self) -> dict[str, Any]:
        out: dict[str, Any] = dict.fromkeys(self.leaves, 0)
        for key, plan in self.nested:
            out[key] = plan.zeros()
        return out

    def fill(self, obj: dict[str, Any]) -> dict[str, Any]:
        """``obj`` with every counter present and an integer; ``obj`` itself when it is so."""
        out: dict[str, Any] | None = None
        for key in self.leaves:
            if obj.get(key) is None:
                if out is None:
                    out = dict(obj)
                out[key] = 0
        for key, plan in self.nested:
            value = obj.get(key)
            if type(value) is dict:
                new = plan.fill(value)
                if new is value:
                    continue
            elif value is None:
                new = plan.zeros()
            else:
                continue  # present and not an object: left for the client to judge
            if out is None:
                out = dict(obj)
            out[key] = new
        if out is None:
            return obj
        for total, a, b in self.sums:  # a counter filled above: the sum when it has one
            if obj.get(total) is None:
                out[total] = sum(v for v in (obj.get(a), obj.get(b)) if _is_count(v))
        return out


@functools.cache
def _plans() -> tuple[_Plan, _Plan]:
    """The Responses and the chat plan, from the installed SDK's usage models (read once)."""
    from openai.types import CompletionUsage
    from openai.types.responses import ResponseUsage

    responses = _Plan.of(
        required_counters(ResponseUsage), (("total_tokens", "input_tokens", "output_tokens"),)
    )
    chat = _Plan.of(
        required_counters(CompletionUsage),
        (("total_tokens", "prompt_tokens", "completion_tokens"),),
    )
    return responses, chat


def warm_usage() -> None:
    """Read the SDK's usage models now rather than on the first answer (a server's warm-up)."""
    _plans()


def _is_count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _zero_null_counters(obj: dict[str, Any]) -> dict[str, Any]:
    """Copy of ``obj`` with every present ``null`` ``*_tokens`` counter set to 0, recursively;
    ``obj`` itself when nothing changes."""
    changed: dict[str, Any] | None = None
    for key, value in obj.items():
        if value is None:
            if not key.endswith("_tokens"):
                continue
            new: Any = 0
        elif isinstance(value, dict):
            new = _zero_null_counters(value)
            if new is value:
                continue
        else:
            continue
        if changed is None:
            changed = dict(obj)
        changed[key] = new
    return obj if changed is None else changed


def _has_null(obj: dict[str, Any]) -> bool:
    """Whether any value of ``obj`` (or of an object in it) is ``null`` (one C-level scan each;
    a plain loop for the nested ones, half the time of ``any()`` over a generator)."""
    values = obj.values()
    if None in values:
        return True
    for value in values:  # noqa: SIM110 - see the docstring
        if type(value) is dict and _has_null(value):
            return True
    return False


def wire_responses_usage(usage: Any) -> Any:
    """Responses usage with every counter the SDK requires present and an integer (see the
    module docstring). Non-dict usage (including ``None``) is returned unchanged."""
    if not isinstance(usage, dict):
        return usage
    if _has_null(usage):
        usage = _zero_null_counters(usage)
    return _plans()[0].fill(usage)


def wire_chat_usage(usage: Any) -> Any:
    """Chat usage with the SDK's required counters present and no ``null`` counter."""
    if not isinstance(usage, dict):
        return usage
    if _has_null(usage):
        usage = _zero_null_counters(usage)
    return _plans()[1].fill(usage)
