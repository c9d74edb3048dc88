"""Request limits every layer shares."""

from __future__ import annotations

__all__ = ["DEFAULT_MAX_BODY_BYTES"]

#: The default request body limit (a 413 above it): 32 MiB, room for a long agent history.
DEFAULT_MAX_BODY_BYTES = 32 * 1024 * 1024
