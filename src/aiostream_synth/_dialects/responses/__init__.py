"""Responses: ``POST /v1/responses``, the Responses event stream (the Codex CLI's dialect)."""
