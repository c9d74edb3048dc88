"""Chat Completions clients on a Responses-only upstream (bridge.md §3)."""
