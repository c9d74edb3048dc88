"""Random ids for responses, messages, items and requests.

``os.urandom(16).hex()`` is the 32 lowercase hex digits of a ``uuid4().hex`` at a third of its
cost (no UUID object, no version bits): ids are minted per stream and per item.
"""

from __future__ import annotations

import os

__all__ = ["random_hex"]


def random_hex(digits: int = 32) -> str:
    """``digits`` random lowercase hex digits (an even number)."""
    return os.urandom(digits // 2).hex()
