"""The command line's demo (the README's run command)."""

from __future__ import annotations

import pytest

from aiostream_synth._cli import main


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_demo_prints_keepalives_then_both_streams(
    backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The demo shows keepalives, the chat chunks ending in [DONE], and a completed Responses stream."""
    assert main(["demo", "--delay", "0.05", "--keepalive", "0.02", "--backend", backend]) == 0
    out = capsys.readouterr().out
    assert ": keep-alive" in out
    assert "data: [DONE]" in out
    assert "event: response.in_progress" in out
    assert out.rstrip().splitlines()[-2].endswith("event: response.completed")
    assert '"namespace":"weather"' in out
