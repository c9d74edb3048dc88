"""Anthropic Messages clients (Claude Code, the anthropic SDKs) on a Chat Completions upstream."""
