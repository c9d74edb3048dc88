"""Command line: ``aiostream-synth demo`` (the proxy's ``serve`` lands later)."""

from __future__ import annotations

import argparse
import functools
import sys
import time
from collections.abc import Sequence
from typing import Any

import anyio

from ._engine import ChatDialect, ResponsesDialect, SynthesizedStream

__all__ = ["main"]

_COMPLETION = {
    "id": "chatcmpl-demo",
    "object": "chat.completion",
    "created": 1700000000,
    "model": "demo-model",
    "choices": [
        {
            "index": 0,
            "message": {
                "role": "assistant",
                "reasoning_content": "The user wants the weather; call the tool.",
                "content": "Let me check the weather in Paris.",
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                    }
                ],
            },
            "finish_reason": "tool_calls",
        }
    ],
    "usage": {"prompt_tokens": 12, "completion_tokens": 9, "total_tokens": 21},
}

_RESPONSE = {
    "id": "resp_demo",
    "object": "response",
    "created_at": 1700000000,
    "model": "demo-model",
    "status": "completed",
    "output": [
        {
            "type": "reasoning",
            "id": "rs_1",
            "summary": [{"type": "summary_text", "text": "Look up the weather."}],
        },
        {
            "type": "function_call",
            "id": "fc_1",
            "call_id": "call_1",
            "name": "weather__get",
            "arguments": '{"city":"Paris"}',
            "status": "completed",
        },
    ],
    "usage": {"input_tokens": 12, "output_tokens": 9, "total_tokens": 21},
}


async def _demo(delay: float, keepalive: float) -> None:
    async def slow(result: dict[str, Any]) -> dict[str, Any]:
        await anyio.sleep(delay)
        return result

    runs: list[tuple[str, Any]] = [
        ("chat", ChatDialect(include_usage=True)),
        (
            "responses",
            ResponsesDialect(
                ns_map={"weather__get": ("weather", "get")}, base={"model": "demo-model"}
            ),
        ),
    ]
    for name, dialect in runs:
        result = _COMPLETION if name == "chat" else _RESPONSE
        print(f"=== {name}: backend answers after {delay:g}s, keepalive every {keepalive:g}s")
        start = time.monotonic()
        backend = functools.partial(slow, result)
        async with SynthesizedStream(backend, dialect, keepalive_interval=keepalive) as stream:
            async for frame in stream:
                text = frame.decode().rstrip("\n")
                print(f"[{time.monotonic() - start:5.2f}s] {text}")
        print()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="aiostream-synth", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    demo = commands.add_parser("demo", help="synthesize both dialects from a slow built-in backend")
    demo.add_argument("--delay", type=float, default=1.2, help="backend delay in seconds")
    demo.add_argument("--keepalive", type=float, default=0.5, help="keepalive interval in seconds")
    demo.add_argument("--backend", choices=["asyncio", "trio"], default="asyncio")
    args = parser.parse_args(argv)
    if args.command == "demo":
        anyio.run(_demo, args.delay, args.keepalive, backend=args.backend)
    sys.stdout.flush()
    return 0
