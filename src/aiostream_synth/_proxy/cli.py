"""Command line: ``aiostream-synth serve`` (the proxy) and ``aiostream-synth demo``.

Every ``serve`` option can also be set from the environment as ``AIOSTREAM_SYNTH_<OPTION>``
(upper case, dashes as underscores), e.g. ``AIOSTREAM_SYNTH_UPSTREAM``; a flag on the command
line wins. Building the parser imports no SDK types (``--help`` answers at once).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import logging
import os
import sys
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, NoReturn

from aiostream_synth._dialects.bridges.options import BRIDGE_PROFILES
from aiostream_synth._dialects.names import BUILTIN_DIALECTS, builtin_options
from aiostream_synth._proxy.config import ProxyConfig
from aiostream_synth._proxy.dialect_plugins import (
    DialectOption,
    check_bridges,
    dialect_option_fields,
    load_dialects,
)

if TYPE_CHECKING:
    from aiostream_synth._dialects.base import DialectSpec
    from aiostream_synth._proxy.app import ProxyApp

__all__ = ["config_from_args", "config_from_options", "main", "proxy_app"]

_ENV_PREFIX = "AIOSTREAM_SYNTH_"
_BOOL_FIELDS = ("forward_authorization",)
#: Options that may be None: their number type, and 0 on the command line means None.
_OPTIONAL_NUMBERS: dict[str, type[int] | type[float]] = {
    "timeout": float,
    "read_timeout": float,
    "upstream_max_connections": int,
    "max_connections": int,
    "store_lease_s": float,
}
_CHOICES: dict[str, list[str]] = {
    "on_disconnect": ["cancel", "finish"],
    "coalesce": ["retries", "all", "off"],
    "upstream_api": list(BUILTIN_DIALECTS),
    "bridge_profile": list(BRIDGE_PROFILES),
    "server": ["lean", "uvicorn", "hypercorn", "granian"],
    "loop": ["auto", "asyncio", "uvloop", "trio"],
    "log_level": ["critical", "error", "warning", "info", "debug"],
}
_HELP = {
    "host": "interface to listen on",
    "port": "port to listen on",
    "upstream": "base URL of a non-streaming OpenAI-compatible server (default: the embedded model)",
    "upstream_api": "the API the upstream speaks (default: each client's own); a client in another API is bridged to it (Codex on a chat-only server: chat)",
    "bridge_profile": "bridge presets for the upstream's family (docs/guides/bridging.md)",
    "bridge_config": 'bridge options on top of the profile, a JSON object, e.g. \'{"reasoning_placeholder": " "}\'',
    "upstream_api_key": "API key for the upstream (default: $OPENAI_API_KEY)",
    "forward_authorization": "send the client's own Authorization header upstream",
    "connect_timeout": "upstream connect timeout, seconds",
    "read_timeout": "upstream read timeout, seconds (0 or unset: none, --timeout bounds the call)",
    "upstream_retries": "upstream retries (default 0: clients retry themselves)",
    "upstream_max_connections": "cap on concurrent upstream calls (0 or unset: no cap, one per open stream)",
    "api_key": "inbound bearer token required on /v1/* (401 otherwise)",
    "keepalive_s": "keepalive interval while the backend works, seconds",
    "timeout": "total deadline per backend call, seconds (0: none)",
    "on_disconnect": "when the client leaves: cancel the backend call, or let it finish",
    "coalesce": "share one backend call: a retry after its client left or it failed (retries), any identical request (all), or never (off)",
    "coalesce_linger": "seconds a call whose clients all left waits for their retry before it is cancelled",
    "coalesce_window": "seconds a failed or abandoned call's outcome is kept for a retry",
    "store": "where responses are kept for retrieval, resume, cancel and previous_response_id: memory (this process), redis://HOST:PORT/DB (a Redis or Valkey server), or off (background mode refused)",
    "store_max_bytes": "the memory store's size limit, bytes; the oldest responses are evicted beyond it",
    "store_ttl_s": "seconds a stored response is kept after its last event",
    "store_lease_s": "Redis store: seconds a server's lease on the responses it generates lasts unrenewed; a server sharing the store ends a response whose server's lease lapsed (it died) as failed (0 or unset: three keepalive intervals, at least 3 s)",
    "drain_timeout": "on SIGTERM, seconds open streams get to finish",
    "max_body_bytes": "request body size limit (413 above)",
    "workers": "worker processes sharing the port (uvicorn, lean)",
    "max_connections": "open client connections per worker at most, a 503 beyond (lean, uvicorn; 0 or unset: no cap)",
    "http_keep_alive_s": "seconds an idle keep-alive client connection stays open (lean, uvicorn, hypercorn)",
    "http_head_timeout_s": "seconds a request head gets to arrive whole, then 408 (lean)",
    "http_body_timeout_s": "seconds a request body may stay silent while it is awaited, then 408 (lean)",
    "http_write_timeout_s": "seconds a client may read nothing while its answer waits, then the connection is aborted (lean, uvicorn)",
    "server": "HTTP server: lean (our own HTTP/1.1 server, the least memory per open stream), uvicorn, hypercorn or granian",
    "loop": "event loop: auto (uvloop when installed), asyncio, uvloop, or trio (hypercorn's trio worker)",
    "log_level": "log level",
    "model": "the embedded model's name",
    "dialects": "serve one more dialect: MODULE:ATTR names its spec instance (my_pkg.gemini:SPEC); repeat it for more; its options appear below as --<dialect>-<option> (default: none; env: comma-separated)",
}
#: ProxyConfig fields that are no option of their own (the loaded dialects' options are).
_NOT_OPTIONS = ("dialect_options",)


#: ``serve --help`` in groups: every ``ProxyConfig`` field is in exactly one.
_GROUPS: dict[str, tuple[str, ...]] = {
    "upstream": (
        "upstream",
        "upstream_api",
        "upstream_api_key",
        "forward_authorization",
        "timeout",
        "connect_timeout",
        "read_timeout",
        "upstream_retries",
        "upstream_max_connections",
        "model",
    ),
    "bridging (a client on an upstream of another API)": ("bridge_profile", "bridge_config"),
    "keepalive and streams": (
        "keepalive_s",
        "on_disconnect",
    ),
    "coalescing (retries share one backend call)": (
        "coalesce",
        "coalesce_linger",
        "coalesce_window",
    ),
    "stored responses (background mode)": (
        "store",
        "store_max_bytes",
        "store_ttl_s",
        "store_lease_s",
    ),
    "more dialects": ("dialects",),
    "server": (
        "host",
        "port",
        "server",
        "loop",
        "workers",
        "api_key",
        "drain_timeout",
        "log_level",
    ),
    "limits": (
        "max_body_bytes",
        "max_connections",
        "http_keep_alive_s",
        "http_head_timeout_s",
        "http_body_timeout_s",
        "http_write_timeout_s",
    ),
}

_SERVE_DESCRIPTION = (
    "Run the proxy: streaming clients in front of a non-streaming upstream (or the embedded "
    f"model). Every option can also be set as {_ENV_PREFIX}<OPTION> (upper case, dashes as "
    "underscores), e.g. AIOSTREAM_SYNTH_UPSTREAM; a flag on the command line wins."
)


def _shown_default(name: str, value: object, help_text: str) -> str:
    """What ``--help`` says the default is ("" when the help text already says it)."""
    if "default" in help_text:
        return ""
    if isinstance(value, bool):
        shown = "on" if value else "off"
    elif value is None:
        shown = "none"
    elif name.endswith("_bytes") and isinstance(value, int) and value % 2**20 == 0:
        shown = f"{value} ({value // 2**20} MiB)"
    elif isinstance(value, float):
        shown = f"{value:g}"
    else:
        shown = f"{value}"
    return f" (default: {shown})"


def _env(name: str) -> str | None:
    return os.environ.get(_ENV_PREFIX + name.upper())


_TRUE = ("1", "true", "yes", "on")
_FALSE = ("0", "false", "no", "off", "")


def _typed(kind: Any, name: str, env: str | None) -> Any:
    """``kind`` as an argparse type whose error names the variable a bad value came from."""
    if kind is str:
        return str

    def convert(value: str) -> Any:
        try:
            return kind(value)
        except ValueError:
            where = f" (from {_ENV_PREFIX}{name.upper()})" if value == env else ""
            raise argparse.ArgumentTypeError(
                f"invalid {kind.__name__} value: {value!r}{where}"
            ) from None

    convert.__name__ = kind.__name__
    return convert


def _add_serve_options(
    parser: argparse.ArgumentParser, dialects: Sequence[DialectSpec] = ()
) -> list[str]:
    """Add every ``ProxyConfig`` field as an option, and the options of ``dialects`` (those
    loaded with ``--dialect``); return the problems of the environment's values, for
    :func:`main` to report after parsing (so that ``--help`` always works)."""
    defaults = ProxyConfig()
    problems: list[str] = []
    groups: dict[str, Any] = {}
    for title, names in _GROUPS.items():
        group = parser.add_argument_group(title)
        groups.update(dict.fromkeys(names, group))
    for f in dataclasses.fields(ProxyConfig):
        if f.name in _NOT_OPTIONS:
            continue
        if f.name == "dialects":
            env = _env(f.name)
            groups[f.name].add_argument(
                "--dialect",
                dest="dialects",
                action="append",
                metavar="MODULE:ATTR",
                default=[part for part in (env or "").replace(",", " ").split() if part],
                help=f"{_HELP[f.name]} [env {_ENV_PREFIX}{f.name.upper()}]",
            )
            continue
        flag = "--" + f.name.replace("_", "-")
        env = _env(f.name)
        default = getattr(defaults, f.name)
        about = _HELP.get(f.name, "")
        help_text = (
            f"{about}{_shown_default(f.name, default, about)} [env {_ENV_PREFIX}{f.name.upper()}]"
        )
        group = groups[f.name]
        if f.name in _BOOL_FIELDS:
            value = default
            if env is not None and env.lower() in _TRUE:
                value = True
            elif env is not None and env.lower() in _FALSE:
                value = False
            elif env is not None:
                problems.append(
                    f"{_ENV_PREFIX}{f.name.upper()}={env!r}: expected one of "
                    f"{', '.join(_TRUE)} or {', '.join(v for v in _FALSE if v)}"
                )
            group.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=value, help=help_text
            )
            continue
        kind: Any = _OPTIONAL_NUMBERS.get(f.name) or (type(default) if default is not None else str)
        choices = _CHOICES.get(f.name)
        if f.name == "upstream_api":
            choices = [*(choices or ()), *(spec.name for spec in dialects)]
        if env is not None and choices is not None and env not in choices:
            problems.append(
                f"{_ENV_PREFIX}{f.name.upper()}={env!r}: expected one of {', '.join(choices)}"
            )
            env = None
        group.add_argument(
            flag,
            # A string default is converted by argparse only when the flag is not given.
            type=_typed(kind, f.name, env),
            default=env if env is not None else default,
            choices=choices,
            help=help_text,
        )
    kinds = {**builtin_options(), **{spec.name: spec.options_type for spec in dialects}}
    for name, kind in kinds.items():
        options = dialect_option_fields(name, kind)
        if options:
            group = parser.add_argument_group(f"the {name} dialect")
            for option in options:
                problems.extend(_add_dialect_option(group, option))
    return problems


def _add_dialect_option(group: Any, option: DialectOption) -> list[str]:
    """One option of a dialect (its dataclass field: type, default, help); the problem of its
    environment value, if any (the option is added all the same, so ``--help`` works)."""
    env = _env(option.env)
    where = f"{_ENV_PREFIX}{option.env}"
    help_text = f"{option.help}{_shown_default(option.field, option.default, option.help)}"
    help_text += f" [env {where}]"
    problems: list[str] = []
    if option.kind is bool:
        value = option.default
        if env is not None and env.lower() in (*_TRUE, *_FALSE):
            value = env.lower() in _TRUE
        elif env is not None:
            problems.append(
                f"{where}={env!r}: expected one of {', '.join(_TRUE)} or {', '.join(_FALSE[:-1])}"
            )
        group.add_argument(
            option.flag,
            dest=option.dest,
            action=argparse.BooleanOptionalAction,
            default=value,
            help=help_text,
        )
        return problems
    kind = _typed(option.kind, option.env.lower(), env)

    def convert(value: str) -> Any:
        if option.optional and value == "none":
            return None
        converted = kind(value)
        return None if option.zero_is_none and converted == 0 else converted

    convert.__name__ = option.kind.__name__
    choices = (
        None
        if option.choices is None
        else [*option.choices, *(["none"] if option.optional else [])]
    )
    if env is not None and choices is not None and env not in choices:
        problems.append(f"{where}={env!r}: expected one of {', '.join(choices)}")
        env = None
    group.add_argument(
        option.flag,
        dest=option.dest,
        type=convert,
        default=env if env is not None else option.default,
        choices=None if choices is None else [convert(choice) for choice in choices],
        metavar=option.env if choices is None else "{" + ",".join(choices) + "}",
        help=help_text
        + (
            " (none: None)"
            if option.optional and choices is None and not option.zero_is_none
            else ""
        ),
    )
    return problems


def _dialect_references(argv: Sequence[str]) -> list[str]:
    """The ``--dialect`` values of a command line (and of its environment variable): the
    dialects to load before the parser is built, so their options are part of it."""
    found = [part for part in (_env("dialects") or "").replace(",", " ").split() if part]
    for i, arg in enumerate(argv):
        if arg == "--dialect" and i + 1 < len(argv):
            found.append(argv[i + 1])
        elif arg.startswith("--dialect="):
            found.append(arg.partition("=")[2])
    return found


def config_from_args(args: argparse.Namespace) -> ProxyConfig:
    values = {
        f.name: getattr(args, f.name)
        for f in dataclasses.fields(ProxyConfig)
        if f.name not in _NOT_OPTIONS
    }
    values["dialects"] = tuple(dict.fromkeys(values["dialects"] or ()))
    options: dict[str, dict[str, Any]] = {}
    for dest, value in vars(args).items():
        if dest.startswith("dialect__"):
            _, dialect, name = dest.split("__", 2)
            options.setdefault(dialect, {})[name] = value
    values["dialect_options"] = options
    for name in _OPTIONAL_NUMBERS:
        if values[name] == 0:
            values[name] = None  # a negative one is refused by ProxyConfig, naming it
    if values["upstream_api_key"] is None and values["upstream"]:
        values["upstream_api_key"] = os.environ.get("OPENAI_API_KEY")
    config = ProxyConfig(**values)
    config.bridge_options()  # ValueError naming a wrong bridge option
    return config


class _RaisingParser(argparse.ArgumentParser):
    """A parser whose errors are exceptions (for a program's own call, not a command line)."""

    def error(self, message: str) -> NoReturn:
        raise ValueError(message)


def config_from_options(options: Sequence[str] = ()) -> ProxyConfig:
    """The configuration ``aiostream-synth serve <options>`` would run with, environment
    included (``AIOSTREAM_SYNTH_*``; an option given here wins over its variable).

    Raises ValueError with the message the command line would print for a wrong option, a
    wrong environment value or a dialect that cannot be loaded.
    """
    options = list(options)
    references = _dialect_references(["serve", *options])
    loaded = load_dialects(references) if references else []
    parser = _RaisingParser(prog="aiostream-synth serve", allow_abbrev=False, add_help=False)
    problems = _add_serve_options(parser, loaded)
    args = parser.parse_args(options)
    if problems:
        raise ValueError("; ".join(problems))
    config = config_from_args(args)
    if config.upstream_api is not None:
        check_bridges(config.upstream_api)
    return config


def proxy_app(*options: str) -> ProxyApp:
    """The ASGI app ``aiostream-synth serve <options>`` would serve, environment included
    (see :func:`config_from_options`; ValueError for a wrong option or value)."""
    from aiostream_synth._proxy.app import ProxyApp

    return ProxyApp(config_from_options(options))


def _parser(dialects: Sequence[DialectSpec] = ()) -> argparse.ArgumentParser:
    """The command line; ``dialects``: those loaded with ``--dialect``, whose options
    ``serve`` takes too."""
    parser = argparse.ArgumentParser(
        prog="aiostream-synth",
        description="Serve streaming clients (OpenAI and Anthropic dialects) from a backend that only answers non-streaming.",
        allow_abbrev=False,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {_version()}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="run the proxy",
        description=_SERVE_DESCRIPTION,
        usage="%(prog)s [options]",
        allow_abbrev=False,
    )
    # The serve parser itself, for errors found after parsing: its usage, not the top level's.
    serve.set_defaults(env_problems=_add_serve_options(serve, dialects), command_parser=serve)
    demo = commands.add_parser(
        "demo",
        help="start the proxy and stream a slow turn in each dialect",
        description=(
            "Start the proxy with its embedded model on a free port and stream one slow turn in "
            "each dialect (Chat Completions as raw SSE, Responses with the openai SDK, Anthropic "
            "Messages with the anthropic SDK), printing each frame with the time it arrived: "
            "keepalives first, then the answer, then the terminal event."
        ),
        allow_abbrev=False,
    )
    demo.set_defaults(command_parser=demo)
    demo.add_argument(
        "--delay", type=float, default=2.5, help="backend delay, seconds (default: 2.5)"
    )
    demo.add_argument(
        "--keepalive", type=float, default=0.5, help="keepalive interval, seconds (default: 0.5)"
    )
    return parser


#: serve's log line format: no thread, process, asyncio task or source location in it.
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s %(message)s"


def skip_unused_record_fields() -> None:
    """Stop the logging module collecting, for every record, what :data:`LOG_FORMAT` never
    shows (the logging HOWTO's "Optimization" switches): the caller's file and line, the
    thread, the process and, from Python 3.12, the asyncio task: a fifth of what a request's
    log line cost in a burst of finishing streams (the figures: benchmarks/COSTS.md)."""
    logging.logThreads = False
    logging.logProcesses = False
    logging.logMultiprocessing = False
    logging._srcfile = None  # the HOWTO's documented way to skip finding the caller
    if sys.version_info >= (3, 12):
        logging.logAsyncioTasks = False


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("aiostream-synth")
    except PackageNotFoundError:  # pragma: no cover - run from a source tree, not installed
        return "(not installed)"


def main(argv: Sequence[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    references = _dialect_references(argv) if argv[:1] == ["serve"] else []
    try:
        loaded = load_dialects(references) if references else []
    except ValueError as exc:  # as argparse reports a wrong option
        print(
            f"usage: aiostream-synth serve [options]\naiostream-synth serve: error: {exc}",
            file=sys.stderr,
        )
        return 2
    parser = _parser(loaded)
    args = parser.parse_args(argv)
    if args.command == "serve":
        if args.env_problems:
            args.command_parser.error("; ".join(args.env_problems))
        try:
            config = config_from_args(args)
            if config.upstream_api is not None:
                check_bridges(config.upstream_api)
        except ValueError as exc:
            args.command_parser.error(str(exc))
        logging.basicConfig(level=config.log_level.upper(), format=LOG_FORMAT)
        skip_unused_record_fields()
        from aiostream_synth._proxy.serve import run
        from aiostream_synth._store.base import StoreUnavailable

        # One line per request is ours; the HTTP client's own per-call INFO line would double
        # the logging of every upstream call (shown with --log-level debug).
        if logging.getLevelName(config.log_level.upper()) > logging.DEBUG:
            for name in ("httpx", "httpx2", "httpcore"):
                logging.getLogger(name).setLevel(logging.WARNING)
        try:
            run(config)
        except StoreUnavailable as exc:
            print(f"aiostream-synth: the response store cannot be used: {exc}", file=sys.stderr)
            return 1
        except OSError as exc:  # the port is taken, the host is no address of ours...
            reason = exc.strerror or str(exc)
            print(
                f"aiostream-synth: cannot serve on {config.host}:{config.port}: {reason}",
                file=sys.stderr,
            )
            return 1
        return 0
    if not (args.delay >= 0 and args.keepalive > 0):
        args.command_parser.error("--delay must be 0 or more seconds and --keepalive more than 0")
    return _demo(args.delay, args.keepalive)


def _chat_line(line: str) -> str:
    """A chat SSE line as the demo shows it: comments and ``[DONE]`` as they are, a chunk as
    what it carries (its JSON would be cut before the answer text)."""
    if not line.startswith("data: {"):
        return line
    chunk = json.loads(line.removeprefix("data: "))
    if not chunk.get("choices"):
        return f"chunk usage={json.dumps(chunk.get('usage'))[:100]}"
    choice = chunk["choices"][0]
    delta = {k: v for k, v in choice.get("delta", {}).items() if v is not None}
    finish = f" finish_reason={choice['finish_reason']}" if choice.get("finish_reason") else ""
    return f"chunk delta={json.dumps(delta, ensure_ascii=False)[:110]}{finish}"


def _demo(delay: float, keepalive: float) -> int:
    import anthropic
    import httpx
    import openai
    import uvicorn

    from aiostream_synth._proxy.app import ProxyApp

    config = ProxyConfig(port=0, keepalive_s=keepalive)
    server = uvicorn.Server(
        uvicorn.Config(
            ProxyApp(config), host="127.0.0.1", port=0, log_level="warning", lifespan="on"
        )
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started and time.monotonic() < deadline:
        time.sleep(0.02)
    port = server.servers[0].sockets[0].getsockname()[1]
    base = f"http://127.0.0.1:{port}/v1"
    print(f"aiostream-synth proxy on {base} (embedded model), keepalive every {keepalive:g} s\n")
    prompt = f"What's the weather in Paris? [delay:{delay:g}] [reasoning]"
    try:
        print(f"=== chat: POST /v1/chat/completions stream=true, backend answers after {delay:g} s")
        start = time.monotonic()
        body = {"model": "demo", "stream": True, "messages": [{"role": "user", "content": prompt}]}
        with (
            httpx.Client(timeout=60) as http,
            http.stream("POST", f"{base}/chat/completions", json=body) as response,
        ):
            for line in response.iter_lines():
                if line:
                    print(f"[{time.monotonic() - start:5.2f}s] {_chat_line(line)}")
        print("\n=== responses: the openai SDK's responses.create(stream=True), same backend delay")
        with openai.OpenAI(base_url=base, api_key="unused", max_retries=0) as client:
            start = time.monotonic()
            for event in client.responses.create(model="demo", input=prompt, stream=True):
                detail = getattr(event, "delta", None) or getattr(
                    getattr(event, "response", None), "status", ""
                )
                print(
                    f"[{time.monotonic() - start:5.2f}s] {event.type} #{event.sequence_number} {detail!s:.80}"
                )
        print(
            "\n=== anthropic: the anthropic SDK's messages.create(stream=True), same backend "
            "delay (the SDK does not yield the pings that keep the stream alive meanwhile)"
        )
        root = base.removesuffix("/v1")
        with anthropic.Anthropic(base_url=root, api_key="unused", max_retries=0) as claude:
            start = time.monotonic()
            for message_event in claude.messages.create(
                model="demo",
                max_tokens=256,
                messages=[{"role": "user", "content": prompt}],
                stream=True,
            ):
                delta = getattr(message_event, "delta", None)
                shown = getattr(delta, "text", None) or getattr(delta, "thinking", None)
                shown = shown or getattr(delta, "stop_reason", None) or ""
                print(f"[{time.monotonic() - start:5.2f}s] {message_event.type} {shown!s:.80}")
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    sys.stdout.flush()
    return 0
