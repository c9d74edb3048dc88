"""Chat Completions clients on a Responses-only upstream."""
