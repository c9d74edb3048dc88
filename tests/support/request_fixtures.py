"""The recorded client requests in tests/fixtures (real Codex CLI requests)."""

from __future__ import annotations

import json
import pathlib
from typing import Any

FIXTURES = pathlib.Path(__file__).resolve().parent.parent / "fixtures"


def fixture(name: str) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((FIXTURES / f"codex-0.171.0-request-{name}.json").read_text())
    return data["body"]  # type: ignore[no-any-return]
