"""Synthesis and request preparation, each as a ratio to its floor measured in the same run.

Floors: one ``orjson.dumps`` of the result (synthesis) / one ``orjson.loads`` of the request
bytes (request preparation). Run: ``python benchmarks/bench_synthesis.py`` (or ``nox -s bench``).
"""

from __future__ import annotations

import argparse
import functools
import json
import logging
import time
from collections.abc import Callable
from typing import Any

import orjson
from corpus import SHAPES, chat_completion, codex_request, responses_result

from aiostream_synth import (
    sanitize_streaming_chat_body,
    sanitize_streaming_responses_body,
    validate_streaming_responses_params,
)
from aiostream_synth._chat_synthesis import chat_frames
from aiostream_synth._responses_synthesis import responses_frames


def best(fn: Callable[[], Any], budget: float) -> float:
    """Best per-call time over repeated batches (robust to a noisy shared machine)."""
    n = 1
    while True:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        if time.perf_counter() - start > 0.02:
            break
        n *= 2
    results: list[float] = []
    deadline = time.perf_counter() + budget
    while time.perf_counter() < deadline or len(results) < 5:
        start = time.perf_counter()
        for _ in range(n):
            fn()
        results.append((time.perf_counter() - start) / n)
    return min(results)


def _chat(completion: dict[str, Any]) -> list[bytes]:
    return list(chat_frames(completion, True))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", type=float, default=0.4, help="seconds per measurement")
    parser.add_argument("--json", help="write results here")
    args = parser.parse_args()
    logging.disable(logging.WARNING)
    rows: list[dict[str, Any]] = []

    for shape, spec in SHAPES.items():
        completion = chat_completion(**spec)
        result = responses_result(**spec)
        chat_floor = best(functools.partial(orjson.dumps, completion), args.budget)
        resp_floor = best(functools.partial(orjson.dumps, result), args.budget)
        chat = best(functools.partial(_chat, completion), args.budget)
        minimal = best(functools.partial(responses_frames, result, fidelity="minimal"), args.budget)
        full = best(functools.partial(responses_frames, result, fidelity="full"), args.budget)
        rows.append(
            {
                "shape": shape,
                "chat_us": chat * 1e6,
                "chat_ratio": chat / chat_floor,
                "minimal_us": minimal * 1e6,
                "minimal_ratio": minimal / resp_floor,
                "full_us": full * 1e6,
                "full_ratio": full / resp_floor,
                "chat_floor_us": chat_floor * 1e6,
                "responses_floor_us": resp_floor * 1e6,
            }
        )

    print(
        "| shape | chat µs | chat / floor (≤3x) | minimal µs | minimal / floor (≤4x) | full µs | full / floor (≤8x) |"
    )
    print("|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['shape']} | {r['chat_us']:.1f} | {r['chat_ratio']:.2f}x | {r['minimal_us']:.1f} | "
            f"{r['minimal_ratio']:.2f}x | {r['full_us']:.1f} | {r['full_ratio']:.2f}x |"
        )

    print()
    print("| request | bytes | loads µs (floor) | prepare µs | ratio |")
    print("|---|---|---|---|---|")
    requests: list[dict[str, Any]] = []
    for label, body in (
        ("codex text turn", codex_request()),
        ("codex-like 66 KB", codex_request(66 * 1024)),
    ):
        raw = orjson.dumps(body)
        floor = best(functools.partial(orjson.loads, raw), args.budget)
        parsed = orjson.loads(raw)

        def prepare(parsed: dict[str, Any] = parsed) -> Any:
            cleaned, _ = sanitize_streaming_responses_body(parsed)
            return validate_streaming_responses_params(cleaned)

        cost = best(prepare, args.budget)
        chat_body = {
            "messages": [{"role": "user", "content": "x"}],
            "stream": True,
            "model": "m",
            "junk": 1,
        }
        requests.append(
            {
                "request": label,
                "bytes": len(raw),
                "floor_us": floor * 1e6,
                "prepare_us": cost * 1e6,
                "ratio": cost / floor,
            }
        )
        print(
            f"| {label} | {len(raw)} | {floor * 1e6:.1f} | {cost * 1e6:.1f} | {cost / floor:.2f}x |"
        )
    chat_body = {
        "messages": [{"role": "user", "content": "x"}],
        "stream": True,
        "model": "m",
        "junk": 1,
    }
    chat_cost = best(lambda: sanitize_streaming_chat_body(chat_body), args.budget)
    print(f"\nchat sanitize: {chat_cost * 1e6:.2f} µs per body")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"synthesis": rows, "requests": requests}, fh, indent=2)


if __name__ == "__main__":
    main()
