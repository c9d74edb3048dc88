"""Tool names across a bridge: aliases chat validators accept, and the way back.

Chat validators (OpenAI, DeepSeek, Groq) accept ``^[A-Za-z0-9_-]{1,64}$``; a flattened MCP
name can be longer or contain a dot. An alias is a pure function of the original name, so a
replayed call maps to the same alias on every turn (and the upstream's prefix cache holds).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Collection, Mapping

__all__ = ["NO_NAMES", "NameTable", "alias_name"]

#: One shared empty set of names for frozen tables (``frozenset(())`` allocates a new one).
NO_NAMES: frozenset[str] = frozenset()

_VALID = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
_INVALID_CHAR = re.compile(r"[^A-Za-z0-9_-]")
_HALLUCINATED_PREFIXES = ("functions.", "functions__")


def alias_name(name: str) -> str:
    """``name`` itself when chat validators accept it; else invalid characters as ``_`` and,
    past 64 characters, the first 55 plus ``_`` and 8 hex digits of its SHA-1."""
    if _VALID.match(name):
        return name
    alias = _INVALID_CHAR.sub("_", name) or "_"
    if len(alias) > 64:
        digest = hashlib.sha1(name.encode(), usedforsecurity=False).hexdigest()[:8]
        alias = f"{alias[:55]}_{digest}"
    return alias


class NameTable:
    """The names one request declared upstream, and how an upstream's name maps back."""

    __slots__ = ("_by_original", "aliases", "declared")

    def __init__(self) -> None:
        #: alias sent upstream -> original (flat) name, for names that needed one
        self.aliases: dict[str, str] = {}
        #: every name sent upstream
        self.declared: set[str] | frozenset[str] = set()
        self._by_original: dict[str, str] = {}

    def freeze(self) -> None:
        """Done declaring: keep only what reading answers back needs, compactly (a bridged
        stream holds its table for the whole turn)."""
        self.declared = frozenset(self.declared) if self.declared else NO_NAMES
        self._by_original = {k: v for k, v in self._by_original.items() if k != v}

    def upstream(self, original: str, *, sanitize: bool = True) -> tuple[str, bool]:
        """The name to send for ``original`` and whether it collided with another's alias
        (the later one then gets ``_2``, ``_3``...)."""
        known = self._by_original.get(original)
        if known is not None:
            return known, False
        assert isinstance(self.declared, set), "the table is frozen"
        alias = alias_name(original) if sanitize else original
        collided = False
        if alias != original or alias in self.declared:
            base, n = alias, 2
            while alias in self.declared and self.aliases.get(alias, alias) != original:
                collided = True
                suffix = f"_{n}"
                alias = base[: 64 - len(suffix)] + suffix
                n += 1
            if alias != original:
                self.aliases[alias] = original
        self._by_original[original] = alias
        self.declared.add(alias)
        return alias, collided

    def reference(self, original: str) -> str:
        """The upstream name of a tool referenced (a replayed call, a forced ``tool_choice``):
        its declared alias, or the alias it would get."""
        known = self._by_original.get(original)
        if known is not None:
            return known
        return original if original in self.declared else alias_name(original)

    def original(self, name: str, namespaced: Mapping[str, object] | Collection[str]) -> str:
        """The client's (flat) name for a name the upstream answered with: an alias's
        original; a declared name; a repaired hallucination (``functions.x``, or ``ns__x`` for
        a declared plain ``x`` that is no namespaced tool); else the name as it is."""
        if name in self.aliases:
            return self.aliases[name]
        if name in self.declared:
            return name
        for prefix in _HALLUCINATED_PREFIXES:
            if name.startswith(prefix):
                bare = name[len(prefix) :]
                if bare in self.declared:
                    return self.aliases.get(bare, bare)
        head, sep, tail = name.rpartition("__")
        if sep and head and tail in self.declared and name not in namespaced:
            return self.aliases.get(tail, tail)
        return name
