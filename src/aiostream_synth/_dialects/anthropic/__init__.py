"""Anthropic Messages: ``POST /v1/messages`` (also ``?beta=true``), the Messages event stream
that the anthropic SDKs and the Claude Code CLI read."""
