"""Every code block of README.md and of the documentation site (``docs/``) is run or checked.

* Python blocks run as written (issue 37 #1): copied into a file, each one works on its own. The
  addresses the blocks use (the proxy on 8000, an upstream ``serve`` on 8001) are pointed at an
  embedded-model proxy the test starts; the blocks that define an ``app`` are then served by
  real servers on asyncio (uvicorn) and trio (hypercorn) and streamed through with the openai
  and anthropic SDKs. Each block is claimed by one test below, which checks what it printed.
* Shell blocks: every ``aiostream-synth`` command line is parsed by the CLI's own parser (an
  option that does not exist fails), every ``curl`` line is run against the proxy, and any
  other program must be one the page may name.
* TOML blocks parse (the Codex configs); ``text`` blocks are output shown as it is.

A block without a language, or in another one, fails the test."""

from __future__ import annotations

import contextlib
import gc
import io
import re
import shlex
import subprocess
import sys
import tomllib
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anthropic
import openai
import pytest

from aiostream_synth._proxy import cli
from aiostream_synth._proxy.app import ProxyApp, ProxyConfig
from aiostream_synth.dialects import registered_dialects, unregister_dialect
from tests.support.servers import serve

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
#: The Markdown whose blocks a user copies: the README and every page written for the site.
PAGES = [README, *sorted((ROOT / "docs").rglob("*.md"))]
_FENCE = re.compile(r"^```([^\n`]*)\n(.*?)^```$", re.DOTALL | re.MULTILINE)


def _fenced() -> list[tuple[Path, str, str]]:
    """Every fenced block of :data:`PAGES`: (page, language, text)."""
    return [
        (page, language.strip(), text)
        for page in PAGES
        for language, text in _FENCE.findall(page.read_text(encoding="utf-8"))
    ]


def _blocks() -> list[str]:
    return [text for _, language, text in _fenced() if language == "python"]


@pytest.fixture(scope="module")
def upstream() -> Iterator[str]:
    """An embedded-model proxy standing in for both ``serve`` instances the README starts."""
    with serve(ProxyApp(ProxyConfig(keepalive_s=0.2)), "lean") as url:
        yield url.removeprefix("http://")


def _run(block: str, address: str) -> tuple[dict[str, Any], str]:
    """Execute ``block`` as its own module, its addresses pointed at ``address``; its globals and
    what it printed."""
    source = block.replace("127.0.0.1:8000", address).replace("127.0.0.1:8001", address)
    # A module of its own, as a copied file would be (dataclasses look their module up), compiled
    # without this module's ``from __future__`` flags.
    module = types.ModuleType("readme_block")
    namespace: dict[str, Any] = module.__dict__
    out = io.StringIO()
    sys.modules[module.__name__] = module
    try:
        with contextlib.redirect_stdout(out):
            exec(compile(source, "<doc block>", "exec", dont_inherit=True), namespace)
    finally:
        del sys.modules[module.__name__]
    # A client the block left open is reported here (pytest's unraisable-warning check), not in
    # whichever later test the collector happens to run in.
    gc.collect()
    return namespace, out.getvalue()


def _block(marker: str) -> str:
    found = [block for block in _blocks() if marker in block]
    assert len(found) == 1, f"one block holds {marker!r}, not {len(found)}"
    return found[0]


def test_every_block_is_checked_below() -> None:
    """A new block fails this until a test below runs it."""
    markers = (
        "ChatDialect(), keepalive_interval",
        'stream_options={"include_usage": True}',
        "claude.messages.stream(",
        "client.responses.stream(model=",
        "previous_response_id=created.id",
        "client.chat.completions.retrieve(completion.id)",
        "synthesize_chat_completion_sse(completion",
        "validate_streaming_responses_params(cleaned)",
        "ResponsesDialect(), keepalive_interval",
        "app = SynthesizingApp(",
        "app = Starlette(",
        "chat_to_responses_result(completion, ctx)",
        "PLAIN = register_dialect(PlainSpec())",
    )
    blocks = _blocks()
    assert len(blocks) == len(markers)
    for marker in markers:
        _block(marker)


def test_the_readme_engine_block() -> None:
    _, out = _run(_block("ChatDialect(), keepalive_interval"), "unused")
    frames = out.split("\n\n")
    assert frames[0] == ": keep-alive"  # the backend takes 1.2 s, the keepalive 0.5
    assert '"content":"4"' in out.replace(" ", "")
    assert frames[-2:] == ["data: [DONE]", ""]


def test_the_chat_sdk_block_counts_usage(upstream: str) -> None:
    _, out = _run(_block('stream_options={"include_usage": True}'), upstream)
    text, _, total = out.strip().rpartition(" ")
    assert "Hi there" in text
    assert int(total) > 0


def test_the_anthropic_sdk_block(upstream: str) -> None:
    _, out = _run(_block("claude.messages.stream("), upstream)
    assert out.startswith("end_turn ")
    assert "'text'" in out


def test_the_sdk_block_streams_from_the_proxy(upstream: str) -> None:
    _, out = _run(_block("client.responses.stream(model="), upstream)
    assert "Hello" in out


def test_the_background_block_resumes_and_continues(upstream: str) -> None:
    _, out = _run(_block("previous_response_id=created.id"), upstream)
    assert out.splitlines() == ["in_progress", "a long turn", "and then?"]


def test_the_stored_chat_block_retrieves_and_deletes(upstream: str) -> None:
    _, out = _run(_block("client.chat.completions.retrieve(completion.id)"), upstream)
    assert out.splitlines() == ["keep this"]


def test_the_synthesis_block() -> None:
    _, out = _run(_block("synthesize_chat_completion_sse(completion"), "unused")
    frames = out.split("\n\n")
    assert frames[0].startswith("data: {")
    assert '"chat.completion.chunk"' in frames[0]
    assert "data: [DONE]" in frames
    assert frames[-2].startswith("event: response.completed")


def test_the_request_block() -> None:
    namespace, out = _run(_block("validate_streaming_responses_params(cleaned)"), "unused")
    assert out == "message\n"
    assert "stream" not in namespace["cleaned"]
    assert "stream_options" not in namespace["cleaned"]


def test_the_engine_block() -> None:
    _, out = _run(_block("ResponsesDialect(), keepalive_interval"), "unused")
    lines = out.splitlines()
    assert lines[:2] == ["event: response.created", "event: response.in_progress"]
    assert lines.count("event: response.in_progress") >= 2  # a keepalive while it waited
    assert lines[-1] == "event: response.completed"


def _stream_every_dialect(url: str) -> None:
    """One streamed turn in each dialect through the app at ``url``."""
    with openai.OpenAI(base_url=f"{url}/v1", api_key="unused", max_retries=0) as client:
        chat = client.chat.completions.create(
            model="m", stream=True, messages=[{"role": "user", "content": "hello chat"}]
        )
        text = "".join(chunk.choices[0].delta.content or "" for chunk in chat if chunk.choices)
        assert "hello chat" in text
        with client.responses.stream(model="m", input="hello responses") as stream:
            assert "hello responses" in stream.get_final_response().output_text
    with (
        anthropic.Anthropic(base_url=url, api_key="unused", max_retries=0) as claude,
        claude.messages.stream(
            model="m", max_tokens=64, messages=[{"role": "user", "content": "hello messages"}]
        ) as stream,
    ):
        message = stream.get_final_message()
    assert any("hello messages" in getattr(block, "text", "") for block in message.content)


@pytest.mark.parametrize("server", ["uvicorn", "hypercorn-trio"])
@pytest.mark.parametrize("marker", ["app = SynthesizingApp(", "app = Starlette("])
def test_the_serving_blocks_serve_every_dialect(upstream: str, marker: str, server: str) -> None:
    namespace, _ = _run(_block(marker), upstream)
    with serve(_closing_clients(namespace), server, lifespan=True) as url:
        _stream_every_dialect(url)


def _closing_clients(namespace: dict[str, Any]) -> Any:
    """The block's ``app``, closing the block's SDK clients at lifespan shutdown (in the loop
    that opened their connections: uvloop refuses to close a loop with sockets still open)."""
    app = namespace["app"]
    clients = [
        value
        for value in namespace.values()
        if isinstance(value, openai.AsyncOpenAI | anthropic.AsyncAnthropic)
    ]
    assert clients

    async def closing(scope: Any, receive: Any, send: Any) -> None:
        async def send_after_closing(message: Any) -> None:
            if message["type"] == "lifespan.shutdown.complete":
                for client in clients:
                    await client.close()
            await send(message)

        await app(scope, receive, send_after_closing if scope["type"] == "lifespan" else send)

    return closing


def test_the_bridging_block(upstream: str) -> None:
    _, out = _run(_block("chat_to_responses_result(completion, ctx)"), upstream)
    assert out.startswith("completed ")


# -- the blocks that are not Python ------------------------------------------------------------
#: Programs a shell block may name besides ``aiostream-synth`` and ``curl`` (checked below).
#: (``docker`` and ``kubectl`` run what ``deploy/`` holds: tests/test_deploy.py runs that here;
#: ``serve`` is Ray Serve's CLI on ``deploy/ray/``, which tests/test_ray_serve.py runs.)
_OTHER_PROGRAMS = frozenset(
    {"python3", "export", "claude", "codex", "docker", "kubectl", "pip", "cd", "serve"}
)


def _command_lines(text: str) -> list[str]:
    """A shell block's commands: continuation lines joined, ``&&`` / ``&`` chains split."""
    joined = re.sub(r"\\\n\s*", " ", text)
    commands: list[str] = []
    for line in joined.splitlines():
        line = line.split(" #", 1)[0].strip()
        if line:
            commands.extend(part.strip() for part in re.split(r"\s&&\s|\s&$", line) if part.strip())
    return commands


def test_the_dialect_block_serves_its_dialect() -> None:
    """The guide's whole dialect: registered, served with its options, keepalives first."""
    try:
        _, out = _run(_block("PLAIN = register_dialect(PlainSpec())"), "unused")
    finally:
        if "plain" in {spec.name for spec in registered_dialects()}:
            unregister_dialect("plain")
    events = [block.split("\n") for block in out.strip().split("\n\n")]
    assert events[0] == ["event: wait", 'data: "working"']
    assert events[-2:] == [["event: text", 'data: "YOU SAID HI"'], ["event: done", "data: {}"]]


def test_every_block_has_a_known_language() -> None:
    for page, language, _ in _fenced():
        assert language in ("python", "sh", "toml", "text"), f"{page.name}: a ```{language} block"


def test_the_toml_blocks_parse() -> None:
    blocks = [text for _, language, text in _fenced() if language == "toml"]
    assert blocks
    for text in blocks:
        config = tomllib.loads(text)
        for provider in config.get("model_providers", {}).values():
            assert provider["wire_api"] == "responses"
            assert provider["base_url"].endswith("/v1")


def test_the_shell_blocks_name_real_options(upstream: str) -> None:
    """Every ``aiostream-synth`` line parses with the CLI's parser; every ``curl`` line runs
    against the proxy and gets a whole stream."""
    parser = cli._parser()
    seen = set()
    for page, language, text in _fenced():
        if language != "sh":
            continue
        for command in _command_lines(text):
            words = shlex.split(command)
            program = Path(words[0]).name
            seen.add(program)
            if program == "aiostream-synth":
                parser.parse_args(words[1:])  # SystemExit on an unknown option or value
            elif program == "curl":
                address = upstream.replace("http://", "")
                argv = [w.replace("127.0.0.1:8000", address) for w in words]
                done = subprocess.run(argv, capture_output=True, text=True, timeout=30, check=True)
                assert done.stdout.rstrip().endswith("data: [DONE]"), done.stdout
            elif program.startswith(".venv/bin/") or words[0].startswith(".venv/bin/"):
                pass
            else:
                assert program in _OTHER_PROGRAMS, f"{page.name}: {command!r}"
    assert {"aiostream-synth", "curl"} <= seen


def test_troubleshooting_quotes_messages_the_code_has() -> None:
    """Each message the troubleshooting page says a refusal begins with is in the source."""
    source = "\n".join(p.read_text(encoding="utf-8") for p in (ROOT / "src").rglob("*.py"))
    page = (ROOT / "docs" / "guides" / "troubleshooting.md").read_text(encoding="utf-8")
    quoted = 0
    for table in page.split("| message begins with |")[1:]:
        for row in table.split("\n\n", 1)[0].splitlines()[2:]:
            for fragment in re.findall(r"`([^`]+)`", row.split("|")[1]):
                assert fragment in source, fragment
                quoted += 1
    assert quoted >= 20
