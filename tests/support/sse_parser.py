"""An independent SSE parser for tests, following the WHATWG event-stream interpretation rules.

It shares no code with the library: our frames are checked by what a conforming parser reads.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Event:
    event: str = "message"
    data: str = ""
    id: str | None = None
    comments: list[str] = field(default_factory=list)

    def json(self) -> Any:
        return json.loads(self.data)


def parse(stream: bytes | str) -> list[Event]:
    """All dispatched events of ``stream`` (comments are attached to the next event or dropped)."""
    text = stream.decode("utf-8") if isinstance(stream, bytes) else stream
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    events: list[Event] = []
    data_lines: list[str] = []
    event_name = ""
    event_id: str | None = None
    for line in text.split("\n"):
        if line == "":
            if data_lines:
                events.append(Event(event_name or "message", "\n".join(data_lines), event_id))
            data_lines, event_name = [], ""
            continue
        if line.startswith(":"):
            continue
        name, sep, value = line.partition(":")
        if sep and value.startswith(" "):
            value = value[1:]
        if name == "data":
            data_lines.append(value)
        elif name == "event":
            event_name = value
        elif name == "id":
            event_id = value
    return events


def comments(stream: bytes | str) -> list[str]:
    text = stream.decode("utf-8") if isinstance(stream, bytes) else stream
    return [line[1:].lstrip() for line in text.split("\n") if line.startswith(":")]
