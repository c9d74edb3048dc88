"""What a request lost on its way to the backend, and why (decision P10: nothing silently).

The sanitizers and validators record every removal here: a top-level field the params model
does not have (client bookkeeping such as ``client_metadata``), a key pruned because it is newer
than the installed SDK's types, a tool or input item of an unknown ``type``, or a tool dropped by
configuration. Paths are written as OpenAI writes ``param``: ``tools[8]``, ``input[3].id``.

A caller that passes a :class:`Removals` collects them (the HTTP adapters log one line per
request and send the paths in the ``x-aiostream-synth-dropped`` header); without one, each
function logs one record per call itself. Codex replays a message ``id`` on every history item,
which the SDK's input types do not model: those removals are *benign* — reported in the header,
logged at DEBUG — so they never flood the logs.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from urllib.parse import quote

__all__ = ["HEADER", "Removal", "Removals", "format_path"]

#: The response header listing what was removed (empty when nothing was).
HEADER = "x-aiostream-synth-dropped"
_HEADER_LIMIT = 4000
_SAFE = "[]._-"  # kept verbatim in header values; everything else is percent-encoded


def format_path(path: Sequence[str | int]) -> str:
    """``("tools", 0, "name")`` → ``tools[0].name`` (OpenAI's ``param`` style)."""
    out: list[str] = []
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool):
            out.append(f"[{part}]")
        else:
            out.append(("." if out else "") + str(part))
    return "".join(out)


@dataclass(frozen=True, slots=True)
class Removal:
    """One thing taken out of a request: where, what it was, and why."""

    path: str
    reason: str
    #: Reported but not worth a WARNING (replay ids the SDK's input types do not model).
    benign: bool = False
    #: What a bridge dropped, for its metric: ``("tool", "web_search")``,
    #: ``("item", "compaction")``; None for other removals.
    dropped: tuple[str, str] | None = None


@dataclass(slots=True)
class Removals:
    """The removals of one request, in the order they happened."""

    entries: list[Removal] = field(default_factory=list)
    #: For list fields the sanitizer reshaped (namespaces flattened, carriers and leading system
    #: messages hoisted, members dropped): where each remaining member was in the client's body.
    #: Each origin is an index in the client's list of the same name, or a full path.
    origins: dict[str, list[int | tuple[str | int, ...]]] = field(default_factory=dict)
    #: Places the sanitizer moved deeper than a list member (a folded system message's blocks,
    #: its ``output_config`` keys): sanitized path prefix -> the client's path. Looked up before
    #: :attr:`origins`, longest prefix first.
    moved: dict[tuple[str | int, ...], tuple[str | int, ...]] = field(default_factory=dict)

    def original_path(self, path: Sequence[str | int]) -> tuple[str | int, ...]:
        """``path`` in the sanitized body as the same place in the client's body."""
        if self.moved:
            for n in range(len(path), 0, -1):
                found = self.moved.get(tuple(path[:n]))
                if found is not None:
                    return (*found, *path[n:])
        if len(path) >= 2 and isinstance(path[0], str) and isinstance(path[1], int):
            origins = self.origins.get(path[0])
            if origins is not None and 0 <= path[1] < len(origins):
                origin = origins[path[1]]
                if isinstance(origin, int):
                    return (path[0], origin, *path[2:])
                return (*origin, *path[2:])
        return tuple(path)

    def add(
        self,
        path: Sequence[str | int],
        reason: str,
        *,
        benign: bool = False,
        dropped: tuple[str, str] | None = None,
    ) -> None:
        self.entries.append(Removal(format_path(path), reason, benign, dropped))

    def add_at(self, field: str, origin: int | tuple[str | int, ...], reason: str) -> None:
        """:meth:`add` for a member of list ``field`` known by its origin (index or path)."""
        self.add((field, origin) if isinstance(origin, int) else origin, reason)

    def add_cleaned(
        self,
        path: Sequence[str | int],
        reason: str,
        *,
        benign: bool = False,
        dropped: tuple[str, str] | None = None,
    ) -> None:
        """:meth:`add` for a ``path`` in the sanitized body (recorded at the client's path)."""
        self.add(self.original_path(path), reason, benign=benign, dropped=dropped)

    def __iter__(self) -> Iterator[Removal]:
        return iter(self.entries)

    def __len__(self) -> int:
        return len(self.entries)

    @property
    def paths(self) -> list[str]:
        return [entry.path for entry in self.entries]

    @property
    def notable(self) -> list[Removal]:
        """The removals worth a WARNING."""
        return [entry for entry in self.entries if not entry.benign]

    def header_value(self) -> str:
        """Comma-separated paths (percent-encoded outside ``[A-Za-z0-9[]._-]``), cut to about
        4 KB with a ``…+N`` count of what did not fit; ``""`` when nothing was removed."""
        out: list[str] = []
        size = 0
        for n, entry in enumerate(self.entries):
            encoded = quote(entry.path, safe=_SAFE)
            if size + len(encoded) + 1 > _HEADER_LIMIT:
                out.append(f"...+{len(self.entries) - n}")
                break
            out.append(encoded)
            size += len(encoded) + 1
        return ",".join(out)

    def summary(self) -> str:
        """The notable removals with their reasons (``tools[8] (unknown tool type 'x')``), then
        the benign ones: by path when there is nothing else, else by count."""
        notable = self.notable
        text = ", ".join(f"{entry.path} ({entry.reason})" for entry in notable)
        benign = [entry.path for entry in self.entries if entry.benign]
        if benign and not notable:
            return f"{', '.join(benign)} (client bookkeeping, replay ids)"
        if benign:
            text += f"; and {len(benign)} benign (client bookkeeping, replay ids)"
        return text

    def log(self, logger: logging.Logger, what: str) -> None:
        """One record for everything removed: WARNING when something notable went, else DEBUG."""
        if not self.entries:
            return
        level = logging.WARNING if self.notable else logging.DEBUG
        if logger.isEnabledFor(level):
            logger.log(level, "%s: removed %s", what, self.summary())
