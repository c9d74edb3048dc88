"""Serving: the native ASGI app and the sse-starlette adapter, dialect-agnostic."""
