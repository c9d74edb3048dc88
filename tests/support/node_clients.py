"""The real Node clients pinned in tests/clients (openai-node, the anthropic SDK, the Codex CLI), driven from the tests; skipped with the reason when Node or the packages are missing, failed under CI."""

from __future__ import annotations

import json
import os
import pathlib
import shutil
import subprocess
from typing import Any

import pytest

CLIENTS = pathlib.Path(__file__).parent.parent / "clients"


NODE = shutil.which("node")


CODEX = CLIENTS / "node_modules" / ".bin" / "codex"


def require(ok: bool, reason: str) -> None:
    if not ok:
        if os.environ.get("CI"):
            pytest.fail(f"CI must run this client test: {reason}")
        pytest.skip(reason)


def run_node(
    base: str,
    dialect: str,
    prompt: str,
    tools: Any = None,
    usage: bool = False,
    model: str = "m",
) -> dict[str, Any]:
    require(NODE is not None, "node is not installed")
    require((CLIENTS / "node_modules" / "openai").exists(), "run `npm ci` in tests/clients")
    args = [
        str(NODE),
        str(CLIENTS / "node_client.mjs"),
        base,
        dialect,
        prompt,
        json.dumps(tools) if tools else "",
        "usage" if usage else "",
        model,
    ]
    done = subprocess.run(
        args, capture_output=True, text=True, timeout=60, check=False, stdin=subprocess.DEVNULL
    )
    result: dict[str, Any] = json.loads(done.stdout)
    return result


def run_codex(
    tmp: pathlib.Path,
    url: str,
    prompt: str,
    *,
    idle_ms: int = 5000,
    model: str = "aiostream-synth-echo",
    resume: bool = False,
    ephemeral: bool = True,
    retries: int = 0,
    config: str = "",
) -> tuple[int, list[dict[str, Any]], str]:
    """``codex exec`` (or ``codex exec resume --last``) against ``url``, offline; returns its
    exit code, its JSONL events and its stderr. ``retries`` is Codex's stream and request retry
    budget; ``config`` extra top-level ``config.toml`` lines."""
    require(CODEX.exists(), "run `npm ci` in tests/clients (the Codex CLI)")
    home = tmp / "codex-home"
    work = tmp / "work"
    home.mkdir(exist_ok=True)
    work.mkdir(exist_ok=True)
    (home / "config.toml").write_text(
        f'model = "{model}"\nmodel_provider = "synth"\napproval_policy = "never"\n'
        f'sandbox_mode = "danger-full-access"\n{config}\n[model_providers.synth]\nname = "aiostream-synth"\n'
        f'base_url = "{url}/v1"\nwire_api = "responses"\nenv_key = "SYNTH_API_KEY"\n'
        f"stream_idle_timeout_ms = {idle_ms}\nstream_max_retries = {retries}\n"
        f"request_max_retries = {retries}\n"
    )
    env = {**os.environ, "CODEX_HOME": str(home), "SYNTH_API_KEY": "unused", "HOME": str(tmp)}
    command = [str(CODEX), "exec", *(["resume", "--last"] if resume else [])]
    options = ["--skip-git-repo-check", *(["--ephemeral"] if ephemeral else []), "--json"]
    done = subprocess.run(
        [*command, *options, prompt],
        cwd=work,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    events = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, events, done.stderr


def codex_messages(events: list[dict[str, Any]]) -> list[str]:
    return [
        e["item"]["text"]
        for e in events
        if e.get("type") == "item.completed" and e["item"].get("type") == "agent_message"
    ]
