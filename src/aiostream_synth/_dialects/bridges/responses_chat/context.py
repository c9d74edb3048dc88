"""What one bridged Responses request remembers for its answer."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from aiostream_synth._dialects.bridges.names import NO_NAMES, NameTable
from aiostream_synth._dialects.bridges.options import BridgeOptions
from aiostream_synth._dialects.responses.namespaces import NamespaceMap

__all__ = ["ResponsesChatContext"]


@dataclass(slots=True, kw_only=True)
class ResponsesChatContext:
    """Per request: how tool names map back, which tools were custom, what to echo."""

    options: BridgeOptions
    #: flat tool name -> (namespace, name)
    ns_map: NamespaceMap = field(default_factory=dict)
    names: NameTable = field(default_factory=NameTable)
    #: flat names of the tools the client declared ``type: "custom"``
    custom_names: set[str] | frozenset[str] = field(default_factory=set)
    #: whether the client's ``local_shell`` tool was bridged to a function
    local_shell: bool = False
    #: every ``call_id`` already in the history (a fresh call never reuses one)
    history_call_ids: set[str] | frozenset[str] = field(default_factory=set)
    #: request receipt time (the Response's ``created_at``)
    created_at: int = 0
    #: the client's request fields the Response echoes
    echo: dict[str, Any] = field(default_factory=dict)
    #: whether the client asked for output-text logprobs
    logprobs: bool = False
    #: an empty probe request answered without calling the upstream
    answer_locally: bool = False
    #: the upstream messages' size in characters of JSON (the truncation warning and usage
    #: estimates read it; set by :meth:`freeze`)
    _prompt_chars: int = 0

    def declare_custom(self, name: str) -> None:
        """``name`` is a tool the client declared custom (while converting the request)."""
        assert isinstance(self.custom_names, set), "the context is frozen"
        self.custom_names.add(name)

    def saw_call_id(self, call_id: str) -> None:
        """``call_id`` is in the history (while converting the request)."""
        assert isinstance(self.history_call_ids, set), "the context is frozen"
        self.history_call_ids.add(call_id)

    def freeze(self, messages: Sequence[object]) -> None:
        """The request is converted: keep what converting the answer reads, compactly (the
        context lives as long as the turn; an empty frozenset is shared, an empty set is not).
        Of the upstream ``messages`` only their size is kept: holding them would keep the whole
        converted history (several times its JSON size in objects) for as long as the turn."""
        self.custom_names = frozenset(self.custom_names) if self.custom_names else NO_NAMES
        self.history_call_ids = (
            frozenset(self.history_call_ids) if self.history_call_ids else NO_NAMES
        )
        self.names.freeze()
        self._prompt_chars = len(orjson.dumps(messages))

    def prompt_chars(self) -> int:
        """The upstream prompt's size in characters of JSON (measured when frozen)."""
        return self._prompt_chars
