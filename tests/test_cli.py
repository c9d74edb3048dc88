"""The command line: the demo (the README's run command) and option parsing."""

from __future__ import annotations

import sys
from typing import Any

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


@pytest.mark.parametrize(
    "argv",
    [
        ["serve", "--upstream-ap", "chat"],  # an abbreviation: no longer taken for another option
        ["serve", "--upstream-api-k", "x"],
        ["serve", "--upstream-api", "chatt"],  # a misspelled value
        ["serve", "--bridge-profile", "llama"],
        ["serve", "--keepalive", "3"],  # the demo's option, not serve's
        ["demo", "--del", "1"],
    ],
)
def test_abbreviated_or_misspelled_options_are_errors(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    assert "error:" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("config", "words"),
    [
        ('{"reasoning_out_feld": "reasoning"}', "unknown bridge option 'reasoning_out_feld'"),
        ('{"length_status": "done"}', "length_status"),
        ("{not json", "not JSON"),
        ("[1]", "JSON object"),
    ],
)
def test_a_wrong_bridge_config_is_an_error_naming_it(
    config: str, words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--upstream-api", "chat", "--bridge-config", config])
    assert words in capsys.readouterr().err


def test_upstream_api_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIOSTREAM_SYNTH_UPSTREAM_API", "chat")
    monkeypatch.setenv("AIOSTREAM_SYNTH_BRIDGE_PROFILE", "deepseek")
    config = config_from_args(_parser().parse_args(["serve"]))
    assert config.upstream_api == "chat"
    assert config.bridge_options().reasoning_placeholder == " "
    monkeypatch.setenv("AIOSTREAM_SYNTH_UPSTREAM_API", "chatt")
    with pytest.raises(SystemExit):
        _parser().parse_args(["serve"])


def test_serve_logs_records_without_the_fields_its_format_never_shows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """serve's log format shows time, level, logger and message only: the logging module is
    told not to collect the caller, thread, process (and asyncio task) for every record."""
    import logging

    from aiostream_synth._proxy import cli

    switches = ["logThreads", "logProcesses", "logMultiprocessing"]
    if sys.version_info >= (3, 12):
        switches.append("logAsyncioTasks")
    for name in switches:
        monkeypatch.setattr(logging, name, True)
    monkeypatch.setattr(logging, "_srcfile", logging.__file__)
    cli.skip_unused_record_fields()
    assert [getattr(logging, name) for name in switches] == [False] * len(switches)
    assert logging._srcfile is None
    assert all(field not in cli.LOG_FORMAT for field in ("thread", "process", "lineno", "task"))
    record = logging.getLogger("aiostream_synth.proxy").makeRecord(
        "aiostream_synth.proxy", logging.INFO, "x.py", 1, "request %s", ("ok",), None
    )
    assert logging.Formatter(cli.LOG_FORMAT).format(record).endswith("request ok")


@pytest.mark.parametrize("argv", [["serve", "--api-key", ""], ["serve", "--api-key", "  "]])
def test_an_empty_api_key_is_an_error_not_auth_turned_off(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(argv)
    assert caught.value.code == 2
    assert "api_key is empty" in capsys.readouterr().err


def test_an_empty_api_key_from_the_environment_is_an_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """``AIOSTREAM_SYNTH_API_KEY=`` (set to nothing) used to accept every request silently."""
    monkeypatch.setenv("AIOSTREAM_SYNTH_API_KEY", "")
    with pytest.raises(SystemExit):
        main(["serve"])
    assert "api_key is empty" in capsys.readouterr().err


def test_http_limits_options_map_onto_the_config() -> None:
    args = _parser().parse_args(
        [
            "serve",
            "--max-connections",
            "100",
            "--http-keep-alive-s",
            "7",
            "--http-head-timeout-s",
            "3",
            "--http-body-timeout-s",
            "4",
            "--http-write-timeout-s",
            "5",
        ]
    )
    config = config_from_args(args)
    assert config.max_connections == 100
    assert (
        config.http_keep_alive_s,
        config.http_head_timeout_s,
        config.http_body_timeout_s,
        config.http_write_timeout_s,
    ) == (7, 3, 4, 5)
    assert (
        config_from_args(_parser().parse_args(["serve", "--max-connections", "0"])).max_connections
        is None
    )


def test_a_non_positive_http_timeout_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["serve", "--http-write-timeout-s", "0"])
    assert "http_write_timeout_s" in capsys.readouterr().err


def test_http_options_a_server_does_not_apply_are_named() -> None:
    """No silent surprise: ``--http-head-timeout-s`` on uvicorn, ``--max-connections`` on
    granian are warned about at start (lean applies them all)."""
    from aiostream_synth._proxy.serve import unapplied_options

    def config(*argv: str) -> Any:
        return config_from_args(_parser().parse_args(["serve", *argv]))

    assert unapplied_options(config("--http-head-timeout-s", "3")) == []
    assert unapplied_options(config("--server", "uvicorn", "--http-head-timeout-s", "3")) == [
        "http_head_timeout_s"
    ]
    assert unapplied_options(config("--server", "uvicorn", "--max-connections", "9")) == []
    assert unapplied_options(config("--server", "granian", "--max-connections", "9")) == [
        "max_connections"
    ]
    assert unapplied_options(config("--loop", "trio", "--http-write-timeout-s", "9")) == [
        "http_write_timeout_s"
    ]
