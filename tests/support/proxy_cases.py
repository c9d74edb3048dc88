"""Requests the proxy tests share."""

from __future__ import annotations

CHAT_TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "parameters": {
                "type": "object",
                "properties": {"q": {"type": "integer"}},
                "required": ["q"],
            },
        },
    }
]
