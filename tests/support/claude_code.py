"""The real Claude Code CLI (pinned in tests/clients), run offline against a proxy: ``claude -p`` with a fresh home."""

from __future__ import annotations

import json
import os
import pathlib
import subprocess
from typing import Any

from .node_clients import CLIENTS, require

CLAUDE = CLIENTS / "node_modules" / ".bin" / "claude"


def run_claude(
    tmp: pathlib.Path, url: str, prompt: str, **env: str
) -> tuple[int, dict[str, Any], str]:
    """``claude -p --output-format json`` against ``url``; its exit code, result and stderr."""
    require(CLAUDE.exists(), "run `npm ci` in tests/clients (the Claude Code CLI)")
    home, work = tmp / "home", tmp / "work"
    home.mkdir(exist_ok=True)
    work.mkdir(exist_ok=True)
    environment = {
        "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
        "HOME": str(home),
        "ANTHROPIC_BASE_URL": url,
        "ANTHROPIC_API_KEY": "sk-ant-test",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
        "IS_SANDBOX": "1",  # --dangerously-skip-permissions as root
        "CLAUDE_CODE_MAX_RETRIES": "1",
        **env,
    }
    done = subprocess.run(
        [str(CLAUDE), "-p", "--output-format", "json", "--dangerously-skip-permissions", prompt],
        cwd=work,
        env=environment,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    return done.returncode, json.loads(lines[-1]) if lines else {}, done.stderr
