"""Print parse_turn wall times on degenerate turns (the parser's work caps keep them linear).

Run: nice .venv/bin/python benchmarks/parse_turn.py  (numbers, not a test; the machine may be shared and noisy).
Each line: the shape, its length in characters, and the median of 5 parses in milliseconds.
"""

from __future__ import annotations

import statistics
import time

from trace_rl.envs.base import (
    MAX_CALL_CHARS,
    MAX_CALLS_PER_TURN,
    MAX_CLOSE_TAGS_TRIED,
    MAX_LITERAL_CHARS,
    parse_turn,
)

OPEN, CLOSE = "<tool_call>", "</tool_call>"


def _median_ms(text: str, repeats: int = 5) -> float:
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        parse_turn(text)
        times.append(time.perf_counter() - t0)
    return 1000 * statistics.median(times)


def main() -> None:
    # Within the caps, each call fills its whole window and offers the literal fallback every closing tag
    # it may try, with text that parses almost to the end before failing.
    segment = "[" + "1, " * ((MAX_LITERAL_CHARS // (MAX_CLOSE_TAGS_TRIED + 1)) // 3) + CLOSE
    worst_literal = (OPEN + "{'a': " + segment * (MAX_CLOSE_TAGS_TRIED + 1)) * MAX_CALLS_PER_TURN
    worst_json = (OPEN + '{"a": "' + "x" * MAX_CALL_CHARS) * MAX_CALLS_PER_TURN
    shapes = {
        f"reviewer: (open + '{{' + 10 x + close) * {n}": (OPEN + "{" + "x" * 10 + CLOSE) * n
        for n in (100, 300, 1000)
    }
    shapes["8 calls, each 4 closing tags tried on ~8k chars of a list literal"] = worst_literal
    shapes["8 calls, each an unterminated JSON string of 64k chars"] = worst_json
    shapes["8 valid calls with 60k-char code arguments"] = (
        OPEN + '{"name": "python", "arguments": {"code": "' + "x" * 60_000 + '"}}' + CLOSE
    ) * MAX_CALLS_PER_TURN
    shapes["1 MB of plain text, no tags"] = "word " * 200_000
    for name, text in shapes.items():
        print(f"{name}: {len(text)} chars, median {_median_ms(text):.2f} ms")


if __name__ == "__main__":
    main()
