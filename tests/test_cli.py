"""The command line: the demo (the README's run command) and option parsing."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import sys
from typing import Any

import pytest

from aiostream_synth._dialects.names import BUILTIN_DIALECTS, builtin_options
from aiostream_synth._proxy import cli
from aiostream_synth._proxy.cli import _parser, config_from_args, main
from aiostream_synth._proxy.config import ProxyConfig
from aiostream_synth._proxy.dialect_plugins import dialect_option_fields


def test_demo_streams_a_slow_turn_in_each_dialect(capsys: pytest.CaptureFixture[str]) -> None:
    """The demo starts the proxy, shows keepalives, then the chat chunks (with the answer text),
    the Responses events and the Anthropic events."""
    assert main(["demo", "--delay", "0.3", "--keepalive", "0.1"]) == 0
    out = capsys.readouterr().out
    chat, responses, messages = out.split("\n=== ")[1:]
    assert ": keep-alive" in chat
    assert """chunk delta={"content": "What's the weather in Paris?"}""" in chat
    assert "data: [DONE]" in chat.strip().splitlines()[-1]
    assert "response.in_progress #1" in responses
    assert "response.completed" in responses.strip().splitlines()[-1]
    assert "content_block_delta What's the weather in Paris?" in messages
    assert "message_stop" in messages.strip().splitlines()[-1]


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
    assert (config.port, config.keepalive_s) == (9, 2.5)
    assert config.dialect_options["responses"]["events"] == "minimal"
    assert config.timeout is None
    assert config.dialect_options["responses"]["drop_hosted_tools"] is True
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
    err = capsys.readouterr().err
    assert words in err
    # serve's usage, not the top level's {serve,demo}
    assert err.startswith("usage: aiostream-synth serve [options]\n")


def test_upstream_api_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AIOSTREAM_SYNTH_UPSTREAM_API", "chat")
    monkeypatch.setenv("AIOSTREAM_SYNTH_BRIDGE_PROFILE", "deepseek")
    config = config_from_args(_parser().parse_args(["serve"]))
    assert config.upstream_api == "chat"
    assert config.bridge_options().reasoning_placeholder == " "
    monkeypatch.setenv("AIOSTREAM_SYNTH_UPSTREAM_API", "chatt")
    with pytest.raises(SystemExit) as caught:
        main(["serve"])
    assert caught.value.code == 2


def test_serve_logs_records_without_the_fields_its_format_never_shows(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """serve's log format shows time, level, logger and message only: the logging module is
    told not to collect the caller, thread, process (and asyncio task) for every record."""
    import logging

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


# -- issue 37: values no server can run with are errors at startup, in one line -----------------


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--port", "99999"], "port must be from 0 (any free port) to 65535"),
        (["--port", "-1"], "port must be"),
        (["--keepalive-s", "0"], "keepalive_s must be a positive number"),
        (["--keepalive-s", "-1"], "keepalive_s must be a positive number"),
        (["--keepalive-s", "inf"], "keepalive_s must be a positive number"),
        (["--connect-timeout", "0"], "connect_timeout must be a positive number"),
        (["--max-body-bytes", "-5"], "max_body_bytes must be an integer of at least 1"),
        (["--timeout", "-3"], "timeout must be a positive number of seconds or None"),
        (["--read-timeout", "-1"], "read_timeout must be"),
        (["--workers", "0"], "workers must be an integer of at least 1"),
        (["--upstream-retries", "-1"], "upstream_retries must be an integer of at least 0"),
        (["--coalesce-window", "-1"], "coalesce_window must be a number of seconds, 0 or more"),
        (["--coalesce-linger", "-0.5"], "coalesce_linger must be"),
        (["--drain-timeout", "-1"], "drain_timeout must be"),
        (["--upstream-max-connections", "-2"], "upstream_max_connections must be at least 1"),
        (["--upstream", "127.0.0.1:8001/v1"], "upstream must be an http:// or https:// URL"),
        (["--upstream", "ftp://host/v1"], "upstream must be an http:// or https:// URL"),
    ],
)
def test_a_value_out_of_range_is_an_error_naming_the_option(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["serve", *argv])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert words in err
    assert "Traceback" not in err


def test_zero_still_means_no_limit_where_none_is_allowed() -> None:
    args = _parser().parse_args(["serve", "--timeout", "0", "--port", "0"])
    config = config_from_args(args)
    assert (config.timeout, config.port) == (None, 0)


def test_a_bad_environment_value_names_its_variable_and_help_still_works(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("AIOSTREAM_SYNTH_KEEPALIVE_S", "abc")
    monkeypatch.setenv("AIOSTREAM_SYNTH_DROP_CUSTOM_TOOLS", "maybe")
    with pytest.raises(SystemExit) as caught:
        main(["serve", "--help"])
    assert caught.value.code == 0
    assert "--keepalive-s" in capsys.readouterr().out
    with pytest.raises(SystemExit) as caught:
        main(["serve", "--keepalive-s", "1"])
    assert caught.value.code == 2
    err = capsys.readouterr().err
    assert "AIOSTREAM_SYNTH_DROP_CUSTOM_TOOLS='maybe'" in err
    monkeypatch.delenv("AIOSTREAM_SYNTH_DROP_CUSTOM_TOOLS")
    with pytest.raises(SystemExit):
        main(["serve"])
    assert (
        "invalid float value: 'abc' (from AIOSTREAM_SYNTH_KEEPALIVE_S)" in capsys.readouterr().err
    )
    # A flag on the command line wins over the variable, bad or not.
    args = _parser().parse_args(["serve", "--keepalive-s", "3"])
    assert config_from_args(args).keepalive_s == 3


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    from importlib.metadata import version

    with pytest.raises(SystemExit) as caught:
        main(["--version"])
    assert caught.value.code == 0
    assert capsys.readouterr().out.strip() == f"aiostream-synth {version('aiostream-synth')}"


def test_a_port_in_use_is_one_line_not_a_traceback(capsys: pytest.CaptureFixture[str]) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["serve", "--port", str(port), "--log-level", "error"]) == 1
    err = capsys.readouterr().err
    assert f"aiostream-synth: cannot serve on 127.0.0.1:{port}:" in err
    assert "in use" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("argv", [["--keepalive", "0"], ["--delay", "-1"], ["--delay", "nan"]])
def test_demo_values_out_of_range_are_errors(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as caught:
        main(["demo", *argv])
    assert caught.value.code == 2
    assert "aiostream-synth demo: error: --delay must be" in capsys.readouterr().err


def test_serve_help_groups_every_option_and_shows_its_default(
    capsys: pytest.CaptureFixture[str],
) -> None:
    grouped = [name for names in cli._GROUPS.values() for name in names]
    fields = [f.name for f in dataclasses.fields(ProxyConfig) if f.name not in cli._NOT_OPTIONS]
    assert sorted(grouped) == sorted(fields)
    # The built-in dialects' own options follow, a group each, built from their dataclasses.
    kinds = builtin_options()
    own = [
        option.flag for name, kind in kinds.items() for option in dialect_option_fields(name, kind)
    ]
    with pytest.raises(SystemExit) as exit_:
        main(["serve", "--help"])
    assert exit_.value.code == 0
    text = capsys.readouterr().out
    assert "``" not in text
    for title in [*cli._GROUPS, *(f"the {name} dialect" for name in kinds)]:
        assert f"\n{title}:\n" in text
    options = re.split(r"\n  (?=--)", text.split("\nupstream:\n", 1)[1])
    assert len(options) == len(grouped) + len(own)
    for flag in own:
        assert f"\n  {flag}" in text
    for option in options:
        assert "default" in option, option
    assert "--port PORT" in text
    assert "(default: 8000)" in text
    assert "(default: 33554432 (32 MiB))" in " ".join(text.split())


def test_the_demo_describes_itself(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["demo", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert "in each dialect" in text
    assert "(default: 2.5)" in text


def test_the_dialect_names_of_the_cli_are_the_dialects() -> None:
    from aiostream_synth._dialects.registry import registered_dialects

    assert [spec.name for spec in registered_dialects()][:3] == list(BUILTIN_DIALECTS)


def test_help_loads_no_sdk_types() -> None:
    """``--help`` answers without importing the openai and anthropic types (seconds of a cold
    start on a small machine): the parser is built from ProxyConfig's light module alone."""
    probe = (
        "import sys\n"
        "from aiostream_synth._proxy.cli import main\n"
        "try:\n"
        "    main(['serve', '--help'])\n"
        "except SystemExit:\n"
        "    pass\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('openai', 'anthropic', "
        "'pydantic', 'anyio'))\n"
        "print('HEAVY', heavy, file=sys.stderr)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=50
    )
    assert "HEAVY []" in done.stderr, done.stderr


def test_a_program_gets_the_config_serve_would_run_with(monkeypatch: pytest.MonkeyPatch) -> None:
    """``config_from_options``: serve's options and environment, as the command line reads
    them (an option wins over its variable)."""
    from aiostream_synth.proxy import config_from_options

    monkeypatch.setenv("AIOSTREAM_SYNTH_STORE", "off")
    monkeypatch.setenv("AIOSTREAM_SYNTH_KEEPALIVE_S", "5")
    options = ["--keepalive-s", "2", "--coalesce", "all"]
    config = config_from_options(options)
    assert (config.store, config.keepalive_s, config.coalesce) == ("off", 2.0, "all")
    assert config == config_from_args(_parser().parse_args(["serve", *options]))
    assert config_from_options().keepalive_s == 5.0


@pytest.mark.parametrize(
    ("options", "environment", "words"),
    [
        (["--keepalive-s", "x"], {}, "--keepalive-s: invalid float value: 'x'"),
        (["--nope"], {}, "unrecognized arguments: --nope"),
        (["--help"], {}, "unrecognized arguments: --help"),
        ([], {"AIOSTREAM_SYNTH_COALESCE": "bogus"}, "AIOSTREAM_SYNTH_COALESCE='bogus'"),
        (["--upstream-api", "chatt"], {}, "invalid choice: 'chatt'"),
        (["--timeout", "-1"], {}, "timeout"),
        (["--dialect", "no.such.module:X"], {}, "no.such.module"),
        (
            ["--upstream-api", "chat", "--bridge-config", '{"length_status": "done"}'],
            {},
            "length_status",
        ),
    ],
)
def test_a_programs_wrong_option_is_a_value_error_naming_it(
    options: list[str], environment: dict[str, str], words: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """What the command line prints and exits 2 for is a ValueError here: never a SystemExit
    out of a platform's replica."""
    from aiostream_synth.proxy import config_from_options

    for name, value in environment.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ValueError, match=re.escape(words)):
        config_from_options(options)


def test_proxy_app_builds_serves_app_and_pickles_by_reference(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """``proxy_app``: the app of ``serve``, built from the environment with no argument (a
    platform's builder; Ray Serve pickles it by reference and calls it in each replica)."""
    import pickle

    import httpx

    from aiostream_synth.proxy import ProxyApp, proxy_app

    from .support.servers import serve

    assert pickle.loads(pickle.dumps(proxy_app)) is proxy_app
    monkeypatch.setenv("AIOSTREAM_SYNTH_KEEPALIVE_S", "0.05")
    monkeypatch.setenv("AIOSTREAM_SYNTH_API_KEY", "secret")
    app = proxy_app("--store", "off")
    assert isinstance(app, ProxyApp)
    assert (app.config.keepalive_s, app.config.store, app.store) == (0.05, "off", None)
    body = {
        "model": "m",
        "stream": True,
        "messages": [{"role": "user", "content": "[delay:0.3] hello"}],
    }
    with serve(app, "uvicorn", lifespan=True) as url, httpx.Client(base_url=url) as http:
        assert http.post("/v1/chat/completions", json=body).status_code == 401
        answer = http.post(
            "/v1/chat/completions", json=body, headers={"authorization": "Bearer secret"}
        )
    assert answer.status_code == 200
    assert ": keep-alive" in answer.text
    assert answer.text.rstrip().endswith("data: [DONE]")
