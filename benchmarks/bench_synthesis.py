"""Synthesis, request preparation and bridging, each as a ratio to its floor measured in the
same run.

Floors: one ``orjson.dumps`` of the result (synthesis, result conversion) / one ``orjson.loads``
of the request bytes (request preparation, request conversion). Run:
``python benchmarks/bench_synthesis.py`` (or ``nox -s bench``).
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
from corpus import (
    SHAPES,
    anthropic_history_request,
    anthropic_message,
    chat_completion,
    chat_history_request,
    codex_replay_request,
    codex_request,
    responses_result,
)

from aiostream_synth import prepare_request
from aiostream_synth._dialects.anthropic.synthesis import anthropic_frames
from aiostream_synth._dialects.chat.synthesis import chat_frames
from aiostream_synth._dialects.prepared import Dialect
from aiostream_synth._dialects.responses.namespaces import flatten_namespace_tools, namespace_map
from aiostream_synth._dialects.responses.synthesis import responses_frames
from aiostream_synth.bridges import chat_to_responses_result, responses_to_chat_request
from aiostream_synth.params import (
    sanitize_streaming_chat_body,
    sanitize_streaming_responses_body,
    validate_streaming_responses_params,
)


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


def _load_nemo_gym(root: str) -> Any:
    """NeMo Gym's responses_streaming module from an unpacked wheel, without its server stack
    (its params models import only openai and pydantic, beside a few HTTP helpers stubbed here)."""
    import importlib.util
    import pathlib
    import sys
    import types

    package = pathlib.Path(root) / "nemo_gym"
    stub = types.ModuleType("nemo_gym")
    stub.__path__ = [str(package)]
    sys.modules["nemo_gym"] = stub
    server = types.ModuleType("nemo_gym.server_utils")
    for name in (
        "_GLOBAL_AIOHTTP_CLIENT_REQUEST_DEBUG",
        "MAX_NUM_TRIES",
        "ClientResponse",
        "ClientResponseError",
        "get_response_json",
        "raise_for_status",
        "request",
    ):
        setattr(server, name, type(name, (Exception,), {}))  # importable, never called
    sys.modules["nemo_gym.server_utils"] = server
    module: Any = None
    for name in ("openai_utils", "responses_streaming"):
        spec = importlib.util.spec_from_file_location(f"nemo_gym.{name}", package / f"{name}.py")
        assert spec is not None
        assert spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module
        spec.loader.exec_module(module)
    return module


def _kept(body: dict[str, Any], items: list[Any], tools: list[Any] | None) -> str:
    """``items sent → kept, flat tools sent → kept`` (hoisted leading system messages count as
    kept: they went into ``instructions``)."""
    hoisted = 0
    for item in body["input"]:
        if item.get("role") not in ("developer", "system"):
            break
        hoisted += 1
    flat, _ = flatten_namespace_tools(body.get("tools"))
    return f"{len(items) + hoisted}/{len(body['input'])}, {len(tools or [])}/{len(flat)}"


def _requests(budget: float, nemo_gym: str | None) -> list[dict[str, Any]]:
    gym = _load_nemo_gym(nemo_gym) if nemo_gym else None
    header = "| request | bytes | loads µs (floor) | sanitize+validate µs | ratio | prepare_request µs (bytes in) | ratio | items, tools kept |"
    if gym is not None:
        header += " NeMo Gym 0.7.0 µs | ratio | items, tools kept |"
    print()
    print(header)
    print("|" + "---|" * (header.count("|") - 1))
    rows: list[dict[str, Any]] = []
    for label, body in (
        ("codex text turn", codex_request()),
        ("codex multi-turn replay 66 KB", codex_replay_request()),
    ):
        raw = orjson.dumps(body)
        floor = best(functools.partial(orjson.loads, raw), budget)
        parsed = orjson.loads(raw)

        def ours(parsed: dict[str, Any] = parsed) -> Any:
            cleaned, _ = sanitize_streaming_responses_body(parsed)
            return validate_streaming_responses_params(cleaned, require_input=False)

        cost = best(ours, budget)
        whole = best(functools.partial(prepare_request, "responses", raw), budget)
        params = prepare_request("responses", raw).params
        row: dict[str, Any] = {
            "request": label,
            "bytes": len(raw),
            "floor_us": floor * 1e6,
            "prepare_us": cost * 1e6,
            "ratio": cost / floor,
            "prepare_request_us": whole * 1e6,
            "prepare_request_ratio": whole / floor,
            "kept": _kept(body, params["input"], params.get("tools")),
        }
        line = (
            f"| {label} | {len(raw)} | {floor * 1e6:.1f} | {cost * 1e6:.1f} | {cost / floor:.2f}x "
            f"| {whole * 1e6:.1f} | {whole / floor:.2f}x | {row['kept']} |"
        )
        if gym is not None:

            def theirs(parsed: dict[str, Any] = parsed) -> Any:
                cleaned, _ = gym.sanitize_streaming_responses_body(parsed)
                return gym.validate_streaming_responses_params(cleaned)

            gym_cost = best(theirs, budget)
            model = theirs()
            row.update(
                gym_us=gym_cost * 1e6,
                gym_ratio=gym_cost / floor,
                gym_kept=_kept(body, model.input, model.tools),
            )
            line += f" {gym_cost * 1e6:.1f} | {gym_cost / floor:.2f}x | {row['gym_kept']} |"
        print(line)
        rows.append(row)
    return rows


def _other_requests(budget: float) -> list[dict[str, Any]]:
    """``prepare_request`` of a long chat and a long Claude Code-style Messages request, to
    their ``orjson.loads`` floor (the Responses rows are :func:`_requests`)."""
    print("\n| request | bytes | loads µs (floor) | prepare_request µs (bytes in) | ratio |")
    print("|---|---|---|---|---|")
    rows: list[dict[str, Any]] = []
    cases: list[tuple[Dialect, str, dict[str, Any]]] = [
        ("chat", "chat, 40 turns, 20 tools", chat_history_request()),
        (
            "anthropic",
            "messages, a system message, 40 turns, 20 tools",
            anthropic_history_request(),
        ),
    ]
    for dialect, label, body in cases:
        raw = orjson.dumps(body)
        floor = best(functools.partial(orjson.loads, raw), budget)
        whole = best(functools.partial(prepare_request, dialect, raw), budget)
        rows.append(
            {
                "request": label,
                "bytes": len(raw),
                "floor_us": floor * 1e6,
                "prepare_request_us": whole * 1e6,
                "prepare_request_ratio": whole / floor,
            }
        )
        print(
            f"| {label} | {len(raw)} | {floor * 1e6:.1f} | {whole * 1e6:.1f} | {whole / floor:.2f}x |"
        )
    return rows


def _bridge(budget: float) -> list[dict[str, Any]]:
    """Responses -> chat conversion of the 66 KB Codex replay (its sanitized params, as the
    proxy converts them), and chat -> Responses of a 20-tool-call answer."""
    body = codex_replay_request()
    raw = orjson.dumps(body)
    prepared = prepare_request("responses", raw)
    params, ns_map = prepared.params, namespace_map(prepared)

    def convert() -> Any:
        return responses_to_chat_request(params, ns_map=ns_map, client_body=body)

    request_floor = best(functools.partial(orjson.loads, raw), budget)
    request_cost = best(convert, budget)
    whole = best(functools.partial(prepare_request, "responses", raw, upstream="chat"), budget)
    _, ctx = convert()
    completion = chat_completion(**SHAPES["20 tool calls"])
    for k, call in enumerate(completion["choices"][0]["message"]["tool_calls"]):
        call["function"]["name"] = ("exec_command", "multi_agent_v1__spawn_agent")[k % 2]
    result_floor = best(functools.partial(orjson.dumps, completion), budget)
    result_cost = best(functools.partial(chat_to_responses_result, completion, ctx), budget)
    rows = [
        {
            "conversion": f"Responses -> chat, Codex replay {len(raw) // 1000} KB",
            "floor": "orjson.loads",
            "floor_us": request_floor * 1e6,
            "us": request_cost * 1e6,
            "ratio": request_cost / request_floor,
            "whole_us": whole * 1e6,
            "whole_ratio": whole / request_floor,
        },
        {
            "conversion": "chat -> Responses, 20 tool calls",
            "floor": "orjson.dumps",
            "floor_us": result_floor * 1e6,
            "us": result_cost * 1e6,
            "ratio": result_cost / result_floor,
        },
    ]
    print(
        "\n| conversion | floor µs | conversion µs | ratio | prepare + convert from bytes µs | ratio |"
    )
    print("|---|---|---|---|---|---|")
    for row in rows:
        whole_cells = (
            f"{row['whole_us']:.1f} | {row['whole_ratio']:.2f}x" if "whole_us" in row else "- | -"
        )
        print(
            f"| {row['conversion']} | {row['floor_us']:.1f} ({row['floor']}) | {row['us']:.1f} "
            f"| {row['ratio']:.2f}x | {whole_cells} |"
        )
    return rows


def _chat(completion: dict[str, Any]) -> list[bytes]:
    return list(chat_frames(completion, True))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--budget", type=float, default=0.4, help="seconds per measurement")
    parser.add_argument("--json", help="write results here")
    parser.add_argument(
        "--nemo-gym",
        metavar="DIR",
        help="an unpacked nemo-gym 0.7.0 wheel: measure its request path beside ours",
    )
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
        message = anthropic_message(**spec)
        messages_floor = best(functools.partial(orjson.dumps, message), args.budget)
        messages = best(functools.partial(anthropic_frames, message), args.budget)
        rows.append(
            {
                "shape": shape,
                "chat_us": chat * 1e6,
                "chat_ratio": chat / chat_floor,
                "minimal_us": minimal * 1e6,
                "minimal_ratio": minimal / resp_floor,
                "full_us": full * 1e6,
                "full_ratio": full / resp_floor,
                "anthropic_us": messages * 1e6,
                "anthropic_ratio": messages / messages_floor,
                "chat_floor_us": chat_floor * 1e6,
                "responses_floor_us": resp_floor * 1e6,
                "anthropic_floor_us": messages_floor * 1e6,
            }
        )

    print(
        "| shape | chat µs | chat / floor (≤3x) | minimal µs | minimal / floor (≤4x) | full µs | full / floor (≤8x) | anthropic µs | anthropic / floor |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['shape']} | {r['chat_us']:.1f} | {r['chat_ratio']:.2f}x | {r['minimal_us']:.1f} | "
            f"{r['minimal_ratio']:.2f}x | {r['full_us']:.1f} | {r['full_ratio']:.2f}x | "
            f"{r['anthropic_us']:.1f} | {r['anthropic_ratio']:.2f}x |"
        )

    requests = _requests(args.budget, args.nemo_gym)
    other_requests = _other_requests(args.budget)
    bridge = _bridge(args.budget)
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
            json.dump(
                {
                    "synthesis": rows,
                    "requests": requests,
                    "other_requests": other_requests,
                    "bridge": bridge,
                },
                fh,
                indent=2,
            )


if __name__ == "__main__":
    main()
