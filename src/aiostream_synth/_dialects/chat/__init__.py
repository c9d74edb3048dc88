"""Chat Completions: ``POST /v1/chat/completions``, ``chat.completion.chunk`` SSE."""
