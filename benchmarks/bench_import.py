"""What importing the package costs: each import in a fresh interpreter, as a ratio to the
interpreter's own start (``python -c pass``) and to importing orjson (the one dependency the
pure layer needs), both measured in the same run.

Each case is timed over ``--runs`` fresh processes (median, with the number of modules it
leaves loaded), so the figures include what a program pays at its start. Run:
``python benchmarks/bench_import.py`` (or ``nox -s bench``).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import time

#: (name, the statement timed); the floors first.
CASES = [
    ("floor: python -c pass", "pass"),
    ("floor: import orjson", "import orjson"),
    ("import aiostream_synth", "import aiostream_synth"),
    (
        "aiostream_synth.sse: the synthesis functions",
        "from aiostream_synth.sse import synthesize_chat_completion_sse, synthesize_responses_sse",
    ),
    (
        "... and one chat synthesis (reads the SDK's usage model)",
        "from aiostream_synth.sse import synthesize_chat_completion_sse\n"
        "list(synthesize_chat_completion_sse({'id': 'c', 'object': 'chat.completion', "
        "'created': 0, 'model': 'm', 'choices': [{'index': 0, 'finish_reason': 'stop', "
        "'message': {'role': 'assistant', 'content': 'hi'}}], "
        "'usage': {'prompt_tokens': 1, 'completion_tokens': 1}}, include_usage=True))",
    ),
    (
        "aiostream_synth.params: prepare_request",
        "from aiostream_synth.params import prepare_request",
    ),
    ("aiostream_synth.engine: SynthesizedStream", "from aiostream_synth import SynthesizedStream"),
    ("aiostream_synth.asgi: SynthesizingApp", "from aiostream_synth import SynthesizingApp"),
]

_PROBE = """
import sys, time
start = time.perf_counter()
{statement}
print(time.perf_counter() - start, len(sys.modules))
"""


def measure(statement: str, runs: int) -> tuple[float, float, int]:
    """(median seconds inside the process, median whole-process seconds, modules loaded)."""
    inside, whole, modules = [], [], 0
    for _ in range(runs):
        began = time.perf_counter()
        done = subprocess.run(
            [sys.executable, "-c", _PROBE.format(statement=statement)],
            capture_output=True,
            text=True,
            check=True,
        )
        whole.append(time.perf_counter() - began)
        seconds, count = done.stdout.split()
        inside.append(float(seconds))
        modules = int(count)
    return statistics.median(inside), statistics.median(whole), modules


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15, help="fresh processes per case")
    args = parser.parse_args()
    results = [(name, *measure(statement, args.runs)) for name, statement in CASES]
    start = results[0][2]
    orjson_ms = results[1][1] * 1000
    print(
        f"{'case':58} {'import ms':>9} {'÷ orjson':>8} {'process ms':>10} {'÷ start':>7} {'modules':>7}"
    )
    for name, inside, whole, modules in results:
        print(
            f"{name:58} {inside * 1000:9.1f} {inside * 1000 / orjson_ms:8.1f} "
            f"{whole * 1000:10.1f} {whole / start:7.2f} {modules:7d}"
        )


if __name__ == "__main__":
    main()
