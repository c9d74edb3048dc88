"""The command line: the demo (the README's run command) and option parsing."""

from __future__ import annotations

import pytest

from aiostream_synth._proxy.cli import _parser, config_from_args, main


def test_demo_streams_a_slow_turn_in_each_dialect(capsys: pytest.CaptureFixture[str]) -> None:
    """The demo starts the proxy, shows keepalives, then the chat chunks and the Responses events."""
    assert main(["demo", "--delay", "0.3", "--keepalive", "0.1"]) == 0
    out = capsys.readouterr().out
    assert ": keep-alive" in out
    assert "data: [DONE]" in out
    assert "response.in_progress #1" in out
    assert "response.completed" in out.strip().splitlines()[-1]


def test_serve_options_map_onto_the_config() -> None:
    """Every flag lands in ProxyConfig; timeout 0 means no deadline."""
    args = _parser().parse_args(
        [
            "serve",
            "--port",
            "9",
            "--keepalive-s",
            "2.5",
            "--responses-events",
            "minimal",
            "--timeout",
            "0",
            "--drop-hosted-tools",
            "--on-disconnect",
            "finish",
            "--loop",
            "trio",
            "--upstream",
            "http://u/v1",
        ]
    )
    config = config_from_args(args)
    assert (config.port, config.keepalive_s, config.responses_events) == (9, 2.5, "minimal")
    assert config.timeout is None
    assert config.drop_hosted_tools is True
    assert (config.on_disconnect, config.loop, config.upstream) == ("finish", "trio", "http://u/v1")
    assert config.upstream_max_connections is None  # no cap unless asked
    assert config.read_timeout is None  # the deadline bounds an upstream call


@pytest.mark.parametrize(("value", "expected"), [("30", 30.0), ("0", None)])
def test_read_timeout_option(value: str, expected: float | None) -> None:
    """A positive value is the upstream read timeout; 0 means none, like the default."""
    args = _parser().parse_args(["serve", "--read-timeout", value])
    assert config_from_args(args).read_timeout == expected


@pytest.mark.parametrize(("value", "expected"), [("64", 64), ("0", None)])
def test_upstream_max_connections_option(value: str, expected: int | None) -> None:
    """A positive value caps concurrent upstream calls; 0 means no cap, like the default."""
    args = _parser().parse_args(["serve", "--upstream-max-connections", value])
    assert config_from_args(args).upstream_max_connections == expected


def test_bad_option_values_are_rejected(capsys: pytest.CaptureFixture[str]) -> None:
    """argparse refuses values outside the choices."""
    with pytest.raises(SystemExit):
        _parser().parse_args(["serve", "--responses-events", "loud"])
    assert "invalid choice" in capsys.readouterr().err
