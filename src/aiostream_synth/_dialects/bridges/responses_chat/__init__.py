"""Responses clients (the Codex CLI, the openai SDKs) on a Chat Completions upstream."""
