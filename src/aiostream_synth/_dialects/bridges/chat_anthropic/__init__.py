"""Chat Completions clients on an Anthropic Messages upstream."""
