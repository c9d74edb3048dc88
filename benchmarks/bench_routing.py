"""What finding a request's dialect costs on every request: the route match, and the request
target a dialect's ``from_target`` gets (the matched template parts, the parsed query), as a
ratio to ``orjson.loads`` of the same small body and to the whole preparation of that body,
both measured in the same run.

Run: ``python benchmarks/bench_routing.py`` (or ``nox -s bench``).
"""

from __future__ import annotations

import argparse
import timeit
from collections.abc import Callable

import orjson

from aiostream_synth._dialects.registry import route_table, spec_for
from aiostream_synth._dialects.routes import request_target
from aiostream_synth._serving.pipeline import StreamSettings, prepare

#: A small streaming chat request (80 bytes).
BODY = orjson.dumps({"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]})


def cases() -> list[tuple[str, Callable[[], object]]]:
    """(name, the call timed); the floor first."""
    settings = StreamSettings(log_removals=False)
    chat, anthropic, table = spec_for("chat"), spec_for("anthropic"), route_table()
    return [
        ("floor: orjson.loads of the 80-byte body", lambda: orjson.loads(BODY)),
        ("route match, literal path", lambda: table.match("/v1/chat/completions")),
        ("request target, no query", lambda: request_target(chat, "/v1/chat/completions", b"")),
        (
            "request target, Claude Code's ?beta=true",
            lambda: request_target(anthropic, "/v1/messages", b"beta=true"),
        ),
        ("whole preparation of the body (for scale)", lambda: prepare(chat, BODY, settings)),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=20_000, help="calls per timing")
    parser.add_argument("--repeat", type=int, default=5, help="timings per case (the best is kept)")
    args = parser.parse_args()
    floor = 0.0
    print(f"{'case':<48} {'µs':>8} {'÷ floor':>8}")
    for name, call in cases():
        best = min(timeit.repeat(call, number=args.number, repeat=args.repeat)) / args.number
        floor = floor or best
        print(f"{name:<48} {best * 1e6:8.2f} {best / floor:8.1f}")


if __name__ == "__main__":
    main()
